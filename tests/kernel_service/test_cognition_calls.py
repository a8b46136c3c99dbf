"""Token and cost estimates, and cross-tier batching of reflections and summaries."""

from __future__ import annotations

import numpy as np

from egbe.v1 import action_pb2, common_pb2
from kernel_service.cognition_calls import apply_cross_tier_batching, cost_micro_usd, token_estimate
from kernel_service.config import KernelConfig
from tests.kernel_service.frames import columns, make_kernel

NEARBY = 1 << 5


def candidate(slot: int, cause: int, tier: int, route: str) -> action_pb2.CognitionCallCandidate:
    config = KernelConfig()
    tokens = token_estimate(config, cause)
    return action_pb2.CognitionCallCandidate(
        call_id=f"w:9:{slot}:{cause}",
        slot=slot,
        ori=common_pb2.OriRef(world_id="w", ori_id=f"o{slot}"),
        tier=tier,
        cause=cause,
        token_estimate=tokens,
        cost_estimate_micro_usd=cost_micro_usd(config, tier, tokens),
        model_route=route,
        tick=9,
    )


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
    calls = [
        candidate(0, reflect, common_pb2.COGNITION_TIER_LACHESIS, sonnet),
        candidate(1, reflect, common_pb2.COGNITION_TIER_LACHESIS, sonnet),
        candidate(2, reflect, common_pb2.COGNITION_TIER_LACHESIS, sonnet),
        candidate(3, summary, common_pb2.COGNITION_TIER_ATROPOS, haiku),
        candidate(4, summary, common_pb2.COGNITION_TIER_ATROPOS, haiku),
        candidate(
            5, action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING, common_pb2.COGNITION_TIER_CLOTHO, "opus"
        ),
    ]
    gross = sum(c.token_estimate for c in calls[:5])
    outcome = apply_cross_tier_batching(config, calls)
    assert outcome.groups == 2
    assert outcome.overhead_tokens_saved == (2 + 1) * 800
    assert outcome.savings_bp == 3 * 800 * 10_000 // gross
    assert {c.batch_group for c in calls[:3]} == {f"w:9:batch:{sonnet}"}
    assert {c.batch_group for c in calls[3:5]} == {f"w:9:batch:{haiku}"}
    assert calls[5].batch_group == ""  # live planning never waits for a batch
    assert [c.token_estimate for c in calls[:3]] == [8_800, 8_000, 8_000]


def test_batching_needs_two_eligible_and_fewer_groups_than_requests() -> None:
    config = KernelConfig()
    one = [
        candidate(0, action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION, common_pb2.COGNITION_TIER_LACHESIS, "s")
    ]
    assert apply_cross_tier_batching(config, one).groups == 0
    distinct = [
        candidate(0, action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION, common_pb2.COGNITION_TIER_LACHESIS, "s"),
        candidate(1, action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY, common_pb2.COGNITION_TIER_ATROPOS, "h"),
    ]
    assert apply_cross_tier_batching(config, distinct).overhead_tokens_saved == 0
    assert all(c.batch_group == "" for c in distinct)


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
