"""Cost in micro-USD: class-rate estimates over len/4 and billed cost from actual usage."""

from __future__ import annotations

from gateway.config import CostConfig
from gateway.cost import Usage, billed_micro_usd, estimate_tokens, estimated_micro_usd

COST = CostConfig()


def test_estimates_use_len_over_4_and_the_class_rates() -> None:
    assert estimate_tokens("x" * 4_000) == 1_000
    assert estimate_tokens("abcde") == 2
    assert estimated_micro_usd(COST, "opus-class", 1_000) == 1_500
    assert estimated_micro_usd(COST, "sonnet-class", 1_000) == 300
    assert estimated_micro_usd(COST, "haiku-class", 1_000) == 75
    assert estimated_micro_usd(COST, "haiku-class", 1) == 1  # rounded up, never free


def test_billed_cost_prices_every_kind_of_token() -> None:
    usage = Usage(
        input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=2_000_000, cache_write_tokens=0
    )
    # sonnet: $3/MTok in, $15/MTok out, $0.30/MTok cache read
    assert billed_micro_usd(COST, "sonnet-class", usage) == 3_000_000 + 1_500_000 + 600_000


def test_message_batches_pay_half() -> None:
    usage = Usage(input_tokens=10_000, output_tokens=2_000)
    full = billed_micro_usd(COST, "haiku-class", usage)
    assert billed_micro_usd(COST, "haiku-class", usage, batched=True) == full // 2
