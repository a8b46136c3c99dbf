"""Per-tier cadences, phase staggering, and the seed's off-screen day and 14-day absence budgets."""

from __future__ import annotations

import numpy as np
import pytest

from egbe.v1 import action_pb2, common_pb2
from gateway.config import TierTokenBudgets
from kernel_service.config import GAME_DAY_TICKS, GAME_MINUTE_TICKS, KernelConfig
from tests.kernel_service.frames import CORES, columns, frame, intent_of, make_kernel, rows

NEARBY = np.uint16(1 << 5)


@pytest.fixture(params=CORES)
def core(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_clotho_plans_every_decision_interval_and_caches_between(core: str) -> None:
    kernel = make_kernel(1, core)
    planned = []
    for tick in range(1, 22):
        result = kernel.tick(rows(tick, [frame(0, on_screen=True)]))
        if result.candidates:
            planned.append(tick)
            assert intent_of(result, 0).kind == action_pb2.ACTION_KIND_PLAN
        else:
            assert intent_of(result, 0).kind == action_pb2.ACTION_KIND_OBSERVE
            assert intent_of(result, 0).source == action_pb2.ACTION_SOURCE_CACHED
            assert result.report.estimated_tokens == 0
    # Escalation plans at once; then every 5 ticks on the slot's phase (slot 0: tick % 5 == 0).
    assert planned == [1, 5, 10, 15, 20]


def test_cached_and_not_due_ticks_cost_nothing(core: str) -> None:
    kernel = make_kernel(50, core)
    kernel.tick(columns(1, signal_flags=np.full(50, NEARBY)))
    results = [kernel.tick(columns(t, signal_flags=np.full(50, NEARBY))) for t in range(2, 80)]
    # Slot s first reflects at tick 2 + s; every other agent-tick holds its cached action for free.
    assert [r.report.calls_issued for r in results] == [1] * 50 + [0] * 28
    for result in results[50:]:
        assert result.report.estimated_tokens == 0
        assert result.report.estimated_cost_micro_usd == 0
        assert set(np.frombuffer(result.actions.columns.kind, "u1").tolist()) == {
            action_pb2.ACTION_KIND_OBSERVE
        }


def test_reflections_are_phase_staggered_by_slot(core: str) -> None:
    agents = 10_000
    kernel = make_kernel(agents, core)
    kernel.tick(columns(1, signal_flags=np.full(agents, NEARBY)))
    due = np.array([kernel.agent_state(s).next_reflection_tick for s in range(0, agents, 97)])
    assert len(set(due.tolist())) == len(due)  # no two sampled agents share a reflection tick
    interval = KernelConfig().reflection_interval_ticks
    assert due.min() >= 2
    assert due.max() <= 1 + interval
    # Over one reflection interval the population reflects at most once per tick.
    per_tick = []
    for tick in range(2, 2 + 600):
        per_tick.append(kernel.tick(columns(tick, signal_flags=np.full(agents, NEARBY))).report.calls_issued)
    assert max(per_tick) == 1


def test_lachesis_offscreen_day_stays_in_budget(core: str) -> None:
    agents, stride = 20, 300  # a game-day at one batch every 15 game-seconds
    kernel = make_kernel(agents, core)
    budgets = TierTokenBudgets()
    tokens_by_slot = np.zeros(agents, dtype=np.int64)
    reflections = np.zeros(agents, dtype=np.int64)
    for tick in range(1, GAME_DAY_TICKS + 1, stride):
        result = kernel.tick(columns(tick, signal_flags=np.full(agents, NEARBY)))
        assert result.report.lachesis_count == agents
        assert all(
            i != action_pb2.ACTION_KIND_UNSPECIFIED for i in np.frombuffer(result.actions.columns.kind, "u1")
        )
        for candidate in result.candidates:
            assert candidate.cause == action_pb2.COGNITION_CAUSE_LACHESIS_REFLECTION
            assert candidate.token_estimate <= budgets.lachesis  # 10,000 per reflection
            tokens_by_slot[candidate.slot] += candidate.token_estimate
            reflections[candidate.slot] += 1
    # Every 10 game-minutes: 144 a day, each agent believable (never silent) and within 1,200/game-minute.
    assert reflections.min() >= 143
    assert reflections.max() <= 145
    per_game_minute = tokens_by_slot / (GAME_DAY_TICKS / GAME_MINUTE_TICKS)
    assert per_game_minute.max() <= 1_200


def test_atropos_fourteen_day_absence_stays_in_budget(core: str) -> None:
    agents, stride, days = 10, 3_000, 14
    kernel = make_kernel(agents, core)
    budgets = TierTokenBudgets()
    summaries: dict[int, list[int]] = {slot: [] for slot in range(agents)}
    tokens_per_day = np.zeros((days, agents), dtype=np.int64)
    for tick in range(1, days * GAME_DAY_TICKS + 1, stride):
        result = kernel.tick(columns(tick, signal_flags=np.zeros(agents, dtype=np.uint16)))
        assert result.report.atropos_count == agents
        for candidate in result.candidates:
            assert candidate.cause == action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY
            assert candidate.tier == common_pb2.COGNITION_TIER_ATROPOS
            summaries[candidate.slot].append(tick)
            tokens_per_day[(tick - 1) // GAME_DAY_TICKS, candidate.slot] += candidate.token_estimate
    for ticks in summaries.values():
        # A coherent chronicle: four beats a game-day, evenly spaced, for the whole absence.
        assert days * 4 - 1 <= len(ticks) <= days * 4
        gaps = np.diff(ticks)
        assert gaps.min() >= GAME_DAY_TICKS // 4
        assert gaps.max() <= GAME_DAY_TICKS // 4 + stride
    assert tokens_per_day.max() <= budgets.atropos  # 15,000 per game-day
