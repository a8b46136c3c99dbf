"""Loop and drift guards: repeated decided actions, stale goals, and progress resetting the guard."""

from __future__ import annotations

import pytest

from egbe.v1 import action_pb2
from kernel_service.tick_result import GUARD_PAYLOAD_SCHEMA
from tests.kernel_service.frames import CORES, frame, intent_of, make_kernel, rows


@pytest.fixture(params=CORES)
def core(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def lachesis(slot: int, **extra: object) -> object:
    return frame(slot, player_nearby_in_world=True, **extra)


def test_stale_goal_forces_a_goal_change_after_six_ticks(core: str) -> None:
    kernel = make_kernel(1, core)
    kinds = []
    for tick in range(1, 8):
        result = kernel.tick(rows(tick, [lachesis(0, goal_ref=77, goal_progress_signature=5)]))
        kinds.append(intent_of(result, 0).kind)
    assert action_pb2.ACTION_KIND_CHANGE_GOAL not in kinds[:5]
    assert kinds[5] == action_pb2.ACTION_KIND_CHANGE_GOAL
    intent = intent_of(kernel.tick(rows(8, [lachesis(0, goal_ref=77, goal_progress_signature=5)])), 0)
    assert intent.kind != action_pb2.ACTION_KIND_CHANGE_GOAL  # the counter restarted after firing


def test_stale_goal_guard_rewrites_and_stamps_its_payload(core: str) -> None:
    kernel = make_kernel(1, core)
    for tick in range(1, 6):
        kernel.tick(rows(tick, [lachesis(0, goal_ref=77)]))
    result = kernel.tick(rows(6, [lachesis(0, goal_ref=77)]))
    intent = intent_of(result, 0)
    assert intent.kind == action_pb2.ACTION_KIND_CHANGE_GOAL
    assert intent.source == action_pb2.ACTION_SOURCE_GUARD
    assert intent.goal_ref == 77
    assert intent.priority == kernel.config.guard_priority_bp
    assert intent.payload["schema"] == GUARD_PAYLOAD_SCHEMA
    assert list(intent.payload["guards"]) == ["stale-goal"]
    assert result.report.guard_interventions == 1


def test_goal_progress_observation_resets_stale_goal_drift_guard(core: str) -> None:
    kernel = make_kernel(1, core)
    kinds = []
    for tick in range(1, 16):
        # Progress is observed every fifth tick: the goal is never held six ticks without progress.
        signature = tick // 5
        result = kernel.tick(rows(tick, [lachesis(0, goal_ref=77, goal_progress_signature=signature)]))
        kinds.append(intent_of(result, 0).kind)
    assert action_pb2.ACTION_KIND_CHANGE_GOAL not in kinds
    assert kernel.agent_state(0).stale_goal_ticks == 1  # tick 15 observed fresh progress


def test_three_identical_decided_actions_force_a_reflection(core: str) -> None:
    kernel = make_kernel(1, core)
    work = action_pb2.ActionIntent(slot=0, kind=action_pb2.ACTION_KIND_WORK, goal_ref=3, priority=4000)
    for tick in (1, 2):  # slot 0 enters Lachesis and makes its first staggered reflection at tick 2
        kernel.tick(rows(tick, [lachesis(0)]))
    results = [kernel.tick(rows(tick, [lachesis(0)]), [work]) for tick in range(3, 6)]
    assert [intent_of(r, 0).kind for r in results[:2]] == [action_pb2.ACTION_KIND_WORK] * 2
    forced = intent_of(results[2], 0)
    assert forced.kind == action_pb2.ACTION_KIND_REFLECT
    assert forced.source == action_pb2.ACTION_SOURCE_GUARD
    assert list(forced.payload["guards"]) == ["repeated-action"]
    (candidate,) = results[2].candidates
    assert candidate.cause == action_pb2.COGNITION_CAUSE_GUARD_REFLECTION
    assert results[2].report.cognition_results_merged == 1


def test_a_different_decision_breaks_the_repetition(core: str) -> None:
    kernel = make_kernel(1, core)
    work = action_pb2.ActionIntent(slot=0, kind=action_pb2.ACTION_KIND_WORK, goal_ref=3)
    rest = action_pb2.ActionIntent(slot=0, kind=action_pb2.ACTION_KIND_REST, goal_ref=3)
    kernel.tick(rows(1, [lachesis(0)]))
    kernel.tick(rows(2, [lachesis(0)]))
    for tick, decided in enumerate([work, work, rest, work, work], start=3):
        result = kernel.tick(rows(tick, [lachesis(0)]), [decided])
        assert intent_of(result, 0).source == action_pb2.ACTION_SOURCE_COGNITION
    # Held (not freshly decided) ticks do not count as repetitions.
    for tick in range(8, 12):
        assert intent_of(kernel.tick(rows(tick, [lachesis(0)])), 0).kind == action_pb2.ACTION_KIND_WORK


def test_columnar_answers_carry_guard_stamps_as_a_column(core: str) -> None:
    import numpy as np

    from tests.kernel_service.frames import columns

    kernel = make_kernel(3, core)
    flags = np.full(3, 1 << 5, dtype=np.uint16)
    goals = np.array([0, 9, 0], dtype=np.uint32)
    results = [kernel.tick(columns(t, signal_flags=flags, goal_ref=goals)) for t in range(1, 7)]
    assert all(not r.actions.columns.guard_bits for r in results[:5])
    bits = np.frombuffer(results[5].actions.columns.guard_bits, "u1")
    assert bits.tolist() == [0, 2, 0]  # slot 1's goal went stale: bit 1
    assert np.frombuffer(results[5].actions.columns.kind, "u1")[1] == action_pb2.ACTION_KIND_CHANGE_GOAL
    # A delta answers what changed, listed or not: slot 1 (unlisted) returns to its cached action.
    delta = kernel.tick(columns(7, slots=np.array([0]), signal_flags=flags[:1]))
    assert np.frombuffer(delta.actions.columns.slots, "<u4").tolist() == [1]
    assert np.frombuffer(delta.actions.columns.kind, "u1").tolist() == [action_pb2.ACTION_KIND_OBSERVE]
    assert not delta.actions.columns.guard_bits


def test_an_agent_left_out_of_delta_frames_is_not_observed_going_stale(core: str) -> None:
    import numpy as np

    from tests.kernel_service.frames import columns

    kernel = make_kernel(2, core)
    flags = np.full(2, 1 << 5, dtype=np.uint16)  # both residents near the player
    goals = np.array([77, 77], dtype=np.uint32)
    kernel.tick(columns(1, signal_flags=flags, goal_ref=goals))  # a full frame observes both
    interventions = []
    for tick in range(2, 12):  # deltas list slot 0 only: slot 1 is never observed
        result = kernel.tick(columns(tick, slots=np.array([0]), signal_flags=flags[:1], goal_ref=goals[:1]))
        interventions.append(result.report.guard_interventions)
    assert interventions == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]  # slot 0 alone, on its sixth observed tick
    assert kernel.agent_state(0).stale_goal_ticks == 5
    assert kernel.agent_state(1).stale_goal_ticks == 1  # held since tick 1
    # Observed again, by a full frame and then by rows, slot 1 resumes counting where it stopped.
    full = kernel.tick(columns(12, signal_flags=flags, goal_ref=goals))
    assert full.report.guard_interventions == 1  # slot 0's sixth observed tick again
    assert kernel.agent_state(1).stale_goal_ticks == 2
    kernel.tick(rows(13, [lachesis(1, goal_ref=77)]))  # rows list slot 1 only
    assert kernel.agent_state(1).stale_goal_ticks == 3
    assert kernel.agent_state(0).stale_goal_ticks == 0  # restarted at tick 12, unobserved since
