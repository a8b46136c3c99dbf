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


def test_cache_writes_are_billed_at_their_own_price() -> None:
    usage = Usage(cache_write_tokens=1_000_000)
    # opus: 5-minute cache writes at 1.25x the $5/MTok input price
    assert billed_micro_usd(COST, "opus-class", usage) == 6_250_000


def test_a_configured_price_table_and_batch_share_are_what_is_billed() -> None:
    priced = CostConfig.model_validate(
        {
            "prices": {
                "haiku-class": {
                    "input_per_mtok": 2_000_000,
                    "output_per_mtok": 8_000_000,
                    "cache_read_per_mtok": 200_000,
                    "cache_write_per_mtok": 2_500_000,
                }
            },
            "batch_discount_bp": 2_500,
        }
    )
    usage = Usage(
        input_tokens=500_000, output_tokens=100_000, cache_read_tokens=1_000_000, cache_write_tokens=4
    )
    assert billed_micro_usd(priced, "haiku-class", usage) == 1_000_000 + 800_000 + 200_000 + 10
    assert billed_micro_usd(priced, "haiku-class", usage, batched=True) == 500_003  # a quarter, rounded up
