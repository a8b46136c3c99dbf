"""Cognition decides, behaviour acts: a Lachesis Ori holds a merged cognition action for the configured
window, then its HTN pursues the result's goal (unless perception names one); deterministic, replayed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from egbe.v1 import action_pb2, kernel_pb2
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.vocabulary import GoalFamily
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter, replay
from services.goal_refs import encode_goal_ref
from tests.kernel_service.frames import CORES, WORLD, columns, registrations

A = action_pb2
NEARBY = 1 << 5  # a player in the world: every agent Lachesis
HOLD = 10
AGENTS = 4
LIBRARY = PersonalityBehaviorLayer().library
DECIDED_GOAL = encode_goal_ref(GoalFamily.VOCATION, LIBRARY.tag_bit("station-known"), 7)
WORLD_GOAL = encode_goal_ref(GoalFamily.SOCIAL, LIBRARY.tag_bit("relationship-repair"), 9)
ESCALATIONS = {
    A.COGNITION_CAUSE_ESCALATION_NOVELTY,
    A.COGNITION_CAUSE_ESCALATION_NO_GOAL,
    A.COGNITION_CAUSE_ESCALATION_NO_METHOD,
}


def make(core: str, hold: int = HOLD, cooldown: int = 2_400) -> Kernel:
    config = KernelConfig(
        cognition_hold_ticks=hold, behavior=BehaviorConfig(escalation_cooldown_ticks=cooldown)
    )
    kernel = Kernel(config, select_core(core), PersonalityBehaviorLayer(config.behavior))
    kernel.register(WORLD, registrations(AGENTS))
    return kernel


def batch(tick: int, goals: np.ndarray | None = None) -> object:
    """Calm needs (no goal surfaces from them), progress every tick (the stale-goal guard stays quiet)."""
    return columns(
        tick,
        signal_flags=np.full(AGENTS, NEARBY, dtype=np.uint16),
        goal_ref=np.zeros(AGENTS, dtype=np.uint32) if goals is None else goals,
        goal_progress_signature=np.full(AGENTS, tick, dtype=np.uint64),
    )


def decided(slot: int, goal: int = DECIDED_GOAL) -> action_pb2.ActionIntent:
    return A.ActionIntent(slot=slot, kind=A.ACTION_KIND_SAY, goal_ref=goal, priority=6_000)


def cached(kernel: Kernel, slot: int) -> action_pb2.ActionIntent:
    return kernel.agent_state(slot).cached_action


@pytest.mark.parametrize("core", CORES)
def test_a_cognition_action_holds_through_the_window_then_the_htn_pursues_its_goal(core: str) -> None:
    kernel = make(core)
    for tick in range(1, 5):
        kernel.tick(batch(tick))  # type: ignore[arg-type]
    assert cached(kernel, 1).source == A.ACTION_SOURCE_BEHAVIOR_TREE  # goalless, calm: its tree acts
    kernel.tick(batch(5), [decided(1)])  # type: ignore[arg-type]
    for tick in range(6, 5 + HOLD):  # 10 Hz steps come and go: the decided action stands
        kernel.tick(batch(tick))  # type: ignore[arg-type]
        action = cached(kernel, 1)
        assert (action.source, action.kind, action.goal_ref) == (
            A.ACTION_SOURCE_COGNITION,
            A.ACTION_KIND_SAY,
            DECIDED_GOAL,
        )
    for tick in range(5 + HOLD, 5 + HOLD + 2):  # the window ran out: the next step of each phase
        kernel.tick(batch(tick))  # type: ignore[arg-type]
    action = cached(kernel, 1)
    assert (action.source, action.goal_ref) == (A.ACTION_SOURCE_HTN, DECIDED_GOAL)
    assert kernel.behavior.report(1).method_id == "vocation.station-work"  # type: ignore[attr-defined]
    # The others never heard from cognition: still their trees, no goal.
    assert cached(kernel, 2).source == A.ACTION_SOURCE_BEHAVIOR_TREE


@pytest.mark.parametrize("core", CORES)
def test_perception_names_the_goal_when_it_has_one(core: str) -> None:
    kernel = make(core, hold=0)
    goals = np.array([0, WORLD_GOAL, 0, 0], dtype=np.uint32)
    kernel.tick(batch(1, goals))  # type: ignore[arg-type]
    kernel.tick(batch(2, goals), [decided(1), decided(2)])  # type: ignore[arg-type]
    for tick in range(3, 6):
        kernel.tick(batch(tick, goals))  # type: ignore[arg-type]
    assert (cached(kernel, 1).source, cached(kernel, 1).goal_ref) == (A.ACTION_SOURCE_HTN, WORLD_GOAL)
    assert (cached(kernel, 2).source, cached(kernel, 2).goal_ref) == (A.ACTION_SOURCE_HTN, DECIDED_GOAL)


@pytest.mark.parametrize("core", CORES)
def test_a_goalless_ori_escalates_until_cognition_gives_it_a_goal_its_plan_then_carries(core: str) -> None:
    cooldown = 6
    kernel = make(core, hold=4, cooldown=cooldown)
    asked: list[int] = []
    answered = False
    for tick in range(1, 60):
        answer = [decided(0)] if asked and not answered and tick > asked[0] + 2 else []
        answered |= bool(answer)
        result = kernel.tick(batch(tick), answer)  # type: ignore[arg-type]
        asked += [tick for c in result.candidates if c.slot == 0 and c.cause in ESCALATIONS]
    assert answered
    assert asked[-1] < asked[0] + 2 * cooldown  # escalated without a goal; none once it had one
    assert (cached(kernel, 0).source, cached(kernel, 0).goal_ref) == (A.ACTION_SOURCE_HTN, DECIDED_GOAL)


def test_the_hold_is_snapshotted_and_replays_byte_identically(tmp_path: Path) -> None:
    log = tmp_path / "ticks.log"
    recorder = make("c")
    writer = TickLogWriter(log, recorder, snapshot_every_ticks=3)
    writer.record_registration(kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)))
    for tick in range(1, 30):
        merged = [decided(tick % AGENTS, DECIDED_GOAL if tick % 3 else 0)] if tick % 4 == 1 else []
        b = batch(tick)
        writer.record_tick(b, merged, recorder.tick(b, merged), recorder)  # type: ignore[arg-type]
    writer.close()
    names = {a.name for a in recorder.snapshot().behavior_arrays}
    assert {"hold_until", "cognition_goal", "goal_adopted"} <= names
    report = replay(log, make("numpy"))
    assert report.identical
    assert report.snapshots_checked == 9


def test_the_hold_window_is_validated_and_fingerprinted() -> None:
    with pytest.raises(ValidationError, match="cognition_hold_ticks"):
        KernelConfig(cognition_hold_ticks=-1)
    assert KernelConfig(cognition_hold_ticks=5).fingerprint() != KernelConfig().fingerprint()
