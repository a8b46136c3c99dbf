"""The ladder, transition damping and de-escalation grace, on both cores (the seed's named tests)."""

from __future__ import annotations

import pytest

from egbe.v1 import action_pb2, common_pb2
from kernel_service.config import KernelConfig
from tests.kernel_service.frames import CORES, frame, intent_of, make_kernel, rows

CLOTHO = common_pb2.COGNITION_TIER_CLOTHO
LACHESIS = common_pb2.COGNITION_TIER_LACHESIS
ATROPOS = common_pb2.COGNITION_TIER_ATROPOS


@pytest.fixture(params=CORES)
def core(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def near(slot: int, **extra: object) -> object:
    return frame(slot, player_nearby_in_world=True, **extra)


def settle_in_lachesis(kernel: object, ticks: int = 10) -> int:
    for tick in range(1, ticks + 1):
        kernel.tick(rows(tick, [near(0)]))  # type: ignore[attr-defined]
    return ticks


def test_ladder_order_and_reasons(core: str) -> None:
    kernel = make_kernel(8, core)
    result = kernel.tick(
        rows(
            1,
            [
                frame(0, open_crossroads=True, on_screen=True, player_proximity_mm=10),
                frame(1, imminent_irreversible_action=True, addressed_by_player_id=7),
                frame(2, addressed_by_player_id=7, on_screen=True),
                frame(3, on_screen=True, player_proximity_mm=100),
                frame(4, player_proximity_mm=2_500, scene_copresence=True),
                frame(5, player_proximity_mm=2_501, scene_copresence=True),
                frame(6, player_proximity_mm=2_501, player_nearby_in_world=True),
                frame(7),
            ],
        )
    )
    got = [(i.tier, i.tier_reason) for i in result.actions.intents]
    assert [kernel.agent_state(i.slot).tier_reason for i in result.actions.intents] == [r for _, r in got]
    assert got == [
        (CLOTHO, action_pb2.TIER_REASON_OPEN_CROSSROADS),
        (CLOTHO, action_pb2.TIER_REASON_IMMINENT_IRREVERSIBLE_ACTION),
        (CLOTHO, action_pb2.TIER_REASON_ADDRESSED_BY_PLAYER),
        (CLOTHO, action_pb2.TIER_REASON_ON_SCREEN),
        (CLOTHO, action_pb2.TIER_REASON_PROXIMITY),
        (CLOTHO, action_pb2.TIER_REASON_SCENE_COPRESENCE),
        (LACHESIS, action_pb2.TIER_REASON_RESIDENT_WORLD),
        (ATROPOS, action_pb2.TIER_REASON_OFFLINE_OR_DISTANT),
    ]
    counts = {c.reason: c.count for c in result.report.reason_counts}
    assert counts[action_pb2.TIER_REASON_OPEN_CROSSROADS] == 1
    assert (result.report.clotho_count, result.report.lachesis_count, result.report.atropos_count) == (
        6,
        1,
        1,
    )


def test_walk_up_escalates_lachesis_to_clotho_within_one_tick(core: str) -> None:
    kernel = make_kernel(1, core)
    tick = settle_in_lachesis(kernel)
    assert kernel.agent_state(0).tier == LACHESIS
    result = kernel.tick(rows(tick + 1, [near(0, player_proximity_mm=900, addressed_by_player_id=42)]))
    intent = intent_of(result, 0)
    assert intent.tier == CLOTHO
    assert kernel.agent_state(0).tier_reason == action_pb2.TIER_REASON_ADDRESSED_BY_PLAYER
    # The first Clotho decision plans at once, from a rehydrated context.
    (candidate,) = result.candidates
    assert candidate.cause == action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING
    assert candidate.needs_rehydration
    assert [r.kind for r in result.lifecycle] == [action_pb2.LifecycleRequest.KIND_REHYDRATE]
    assert result.report.tier_transitions == 1


def test_walking_away_deescalates_after_grace_period(core: str) -> None:
    grace = 8
    kernel = make_kernel(1, core, KernelConfig(deescalation_grace_ticks=grace))
    for tick in range(1, 11):
        kernel.tick(rows(tick, [near(0, player_proximity_mm=1_000)]))
    assert kernel.agent_state(0).tier == CLOTHO
    last_signal = 10
    tiers = {}
    lifecycle = {}
    for tick in range(11, 11 + grace + 3):
        result = kernel.tick(rows(tick, [near(0, player_proximity_mm=50_000)]))
        tiers[tick] = intent_of(result, 0).tier
        lifecycle[tick] = [r.kind for r in result.lifecycle]
    for tick in range(11, last_signal + grace + 1):
        assert tiers[tick] == CLOTHO, tick
    assert tiers[last_signal + grace + 1] == LACHESIS
    assert lifecycle[last_signal + grace + 1] == [action_pb2.LifecycleRequest.KIND_CONSOLIDATE]
    assert kernel.agent_state(0).tier_reason == action_pb2.TIER_REASON_RESIDENT_WORLD


def test_grace_reason_is_reported(core: str) -> None:
    kernel = make_kernel(1, core)
    kernel.tick(rows(1, [near(0, player_proximity_mm=1_000)]))
    kernel.tick(rows(2, [near(0)]))
    assert kernel.agent_state(0).tier_reason == action_pb2.TIER_REASON_DEESCALATION_GRACE


def test_transition_damping_blocks_immediate_proximity_rebound(core: str) -> None:
    kernel = make_kernel(1, core, KernelConfig(deescalation_grace_ticks=0))
    for tick in range(1, 11):
        kernel.tick(rows(tick, [near(0, player_proximity_mm=1_000)]))
    result = kernel.tick(rows(11, [near(0)]))
    assert intent_of(result, 0).tier == LACHESIS
    # The player steps straight back within range: proximity is not urgent, so damping holds Lachesis
    # for transition_damping_ticks (4) before the rebound is allowed.
    held = []
    for tick in range(12, 18):
        result = kernel.tick(rows(tick, [near(0, player_proximity_mm=1_000)]))
        held.append((intent_of(result, 0).tier, kernel.agent_state(0).tier_reason))
    hold = (LACHESIS, action_pb2.TIER_REASON_DAMPING_HOLD)
    assert held[:4] == [hold] * 4
    assert held[4] == (CLOTHO, action_pb2.TIER_REASON_PROXIMITY)


def test_urgent_reason_bypasses_damping(core: str) -> None:
    kernel = make_kernel(1, core, KernelConfig(deescalation_grace_ticks=0))
    kernel.tick(rows(1, [near(0, player_proximity_mm=1_000)]))
    for tick in range(2, 8):
        kernel.tick(rows(tick, [near(0)]))
    kernel.tick(rows(8, [near(0)]))
    result = kernel.tick(rows(9, [near(0, on_screen=True)]))
    assert intent_of(result, 0).tier == CLOTHO


def test_damping_holds_a_fresh_deescalation_too(core: str) -> None:
    kernel = make_kernel(1, core, KernelConfig(deescalation_grace_ticks=0))
    kernel.tick(rows(1, [near(0)]))
    kernel.tick(rows(2, [near(0, player_proximity_mm=10)]))  # held: Lachesis entered one tick ago
    assert kernel.agent_state(0).tier == LACHESIS
    assert kernel.agent_state(0).tier_reason == action_pb2.TIER_REASON_DAMPING_HOLD
