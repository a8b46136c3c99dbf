"""Cost in integer micro-USD: class-rate estimates over len/4, and billed cost from actual usage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.config import ClassPrice, CostConfig, ProviderConfig
from gateway.provider_errors import ProviderAttempt

BASIS_POINTS = 10_000


@dataclass(frozen=True)
class Usage:
    """Tokens of one call, split the way providers bill them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def estimate_tokens(text: str) -> int:
    """The len/4 token estimate (rounded up), used where the provider gives no exact count."""
    return _ceil_div(len(text), 4)


def estimated_micro_usd(config: CostConfig, model_class: str, tokens: int) -> int:
    """Class-rate estimate: tokens x micro-USD per 1k tokens, rounded up."""
    return _ceil_div(tokens * config.class_rates_per_1k[model_class], 1_000)


def provider_price(
    providers: Mapping[str, ProviderConfig], answered_by: ProviderAttempt | None
) -> ClassPrice | None:
    """The answering provider's own price for its model, if its table has one."""
    if answered_by is None:
        return None
    return providers[answered_by.provider].prices.get(answered_by.model_id)


def billed_micro_usd(
    config: CostConfig,
    model_class: str,
    usage: Usage,
    *,
    batched: bool = False,
    price: ClassPrice | None = None,
) -> int:
    """Cost from usage and the price table (`price`: a provider's own, in place of the class's), rounded
    up; Message Batches pay the batch share."""
    price = price or config.prices[model_class]
    per_mtok = (
        usage.input_tokens * price.input_per_mtok
        + usage.output_tokens * price.output_per_mtok
        + usage.cache_read_tokens * price.cache_read_per_mtok
        + usage.cache_write_tokens * price.cache_write_per_mtok
    )
    share = config.batch_discount_bp if batched else BASIS_POINTS
    return _ceil_div(per_mtok * share, 1_000_000 * BASIS_POINTS)
