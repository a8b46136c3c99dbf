"""Token and cost estimates, and cross-tier batching of reflections and summaries."""

from __future__ import annotations

import numpy as np

from egbe.v1 import action_pb2, common_pb2
from kernel_service.cognition_calls import (
    CallEstimates,
    CallTables,
    cost_micro_usd,
    estimate_calls,
    token_estimate,
)
from kernel_service.config import KernelConfig
from tests.kernel_service.frames import columns, make_kernel

NEARBY = 1 << 5


def batch_groups(estimates: CallEstimates) -> list[str]:
    return [estimates.group_ids[group] if group >= 0 else "" for group in estimates.group_of.tolist()]


def test_estimates_are_len_over_four_plus_overhead_at_class_rates() -> None:
    config = KernelConfig()
    tokens = token_estimate(config, action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION)
    assert tokens == 32_000 // 4 + 800
    assert cost_micro_usd(config, common_pb2.COGNITION_TIER_LACHESIS, tokens) == 8_800 * 300 // 1000
    assert cost_micro_usd(config, common_pb2.COGNITION_TIER_CLOTHO, 1_000) == 1_500
    assert cost_micro_usd(config, common_pb2.COGNITION_TIER_ATROPOS, 1_000) == 75
    assert cost_micro_usd(config, common_pb2.COGNITION_TIER_ATROPOS, 1) == 1  # rounded up, never under


def test_cross_tier_batching_amortizes_lachesis_reflection_and_atropos_summary_overhead() -> None:
    config = KernelConfig()
    sonnet, haiku = config.tier_models["lachesis"], config.tier_models["atropos"]
    reflect, summary = (
        action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION,
        action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY,
    )
    lachesis, atropos = common_pb2.COGNITION_TIER_LACHESIS, common_pb2.COGNITION_TIER_ATROPOS
    causes = [reflect, reflect, reflect, summary, summary, action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING]
    tiers = [lachesis, lachesis, lachesis, atropos, atropos, common_pb2.COGNITION_TIER_CLOTHO]
    gross = sum(token_estimate(config, cause) for cause in causes[:5])
    estimates = estimate_calls(
        CallTables.from_config(config),
        world_id="w",
        tick=9,
        causes=np.array(causes, np.uint8),
        tiers=np.array(tiers, np.uint8),
    )
    assert estimates.groups == 2
    assert estimates.overhead_tokens_saved == (2 + 1) * 800
    assert estimates.savings_bp == 3 * 800 * 10_000 // gross
    assert set(batch_groups(estimates)[:3]) == {f"w:9:batch:{sonnet}"}
    assert set(batch_groups(estimates)[3:5]) == {f"w:9:batch:{haiku}"}
    assert batch_groups(estimates)[5] == ""  # live planning never waits for a batch
    assert estimates.tokens[:3].tolist() == [8_800, 8_000, 8_000]
    assert estimates.costs.tolist() == [
        cost_micro_usd(config, tier, tokens)
        for tier, tokens in zip(tiers, estimates.tokens.tolist(), strict=True)
    ]


def test_batching_needs_two_eligible_and_fewer_groups_than_requests() -> None:
    config = KernelConfig()
    reflect = action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION
    lachesis = common_pb2.COGNITION_TIER_LACHESIS

    def estimate(causes: list[int], tiers: list[int]) -> CallEstimates:
        return estimate_calls(
            CallTables.from_config(config),
            world_id="w",
            tick=9,
            causes=np.array(causes, np.uint8),
            tiers=np.array(tiers, np.uint8),
        )

    assert estimate([reflect], [lachesis]).groups == 0
    distinct = estimate(
        [reflect, action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY], [lachesis, common_pb2.COGNITION_TIER_ATROPOS]
    )
    assert distinct.overhead_tokens_saved == 0
    assert batch_groups(distinct) == ["", ""]


def test_tiers_sharing_a_model_share_a_batch_group() -> None:
    config = KernelConfig(tier_models={"clotho": "opus", "lachesis": "same", "atropos": "same"})
    estimates = estimate_calls(
        CallTables.from_config(config),
        world_id="w",
        tick=3,
        causes=np.array(
            [action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION, action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY],
            np.uint8,
        ),
        tiers=np.array([common_pb2.COGNITION_TIER_LACHESIS, common_pb2.COGNITION_TIER_ATROPOS], np.uint8),
    )
    assert estimates.groups == 1
    assert batch_groups(estimates) == ["w:3:batch:same", "w:3:batch:same"]
    assert estimates.overhead_tokens_saved == 800


def test_a_tick_reports_batching_savings() -> None:
    # Interval 1,200 for both cadences: slots s and s + 1,200 share a stagger phase, so at tick 2 two
    # Lachesis reflections (slots 0, 1200) and two Atropos summaries (2400, 3600) come due together.
    config = KernelConfig(reflection_game_minutes=1, summaries_per_game_day=1_440)
    kernel = make_kernel(4_800, "numpy", config)
    flags = np.where(np.arange(4_800) < 2_400, NEARBY, 0).astype(np.uint16)
    kernel.tick(columns(1, signal_flags=flags))
    result = kernel.tick(columns(2, signal_flags=flags))
    report = result.report
    assert sorted(c.slot for c in result.candidates) == [0, 1_200, 2_400, 3_600]
    assert report.batched_call_groups == 2
    assert report.batching_overhead_tokens_saved == 2 * 800
    gross = 2 * token_estimate(config, action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION) + 2 * token_estimate(
        config, action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY
    )
    assert report.batching_savings_bp == 1_600 * 10_000 // gross
    assert report.estimated_tokens == gross - 1_600
    assert report.estimated_cost_micro_usd == sum(c.cost_estimate_micro_usd for c in result.candidates)
