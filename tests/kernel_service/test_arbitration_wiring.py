"""Arbitration in the kernel's tick: which Lachesis agents escalate to cognition, why, and how often."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, perception_pb2
from kernel_service.agent_state import COUNT_CANDIDATES
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.vocabulary import THREAT_FLAG, GoalFamily
from kernel_service.behavior_seam import Escalations
from kernel_service.config import KernelConfig
from kernel_service.kernel import Kernel
from kernel_service.tick_core import select_core
from kernel_service.tick_log import TickLogWriter, deterministic_digest, read_records, replay
from services.errors import InvalidArgument
from services.goal_refs import encode_goal_ref
from tests.kernel_service.frames import CORES, WORLD, columns, registrations

NEARBY = 1 << perception_pb2.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD  # every agent Lachesis
LACHESIS_DOWN = 1 << common_pb2.COGNITION_TIER_LACHESIS
ESCALATIONS = {
    action_pb2.COGNITION_CAUSE_ESCALATION_NOVELTY,
    action_pb2.COGNITION_CAUSE_ESCALATION_NO_GOAL,
    action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD,
}
COOLDOWN = 20
LIBRARY = PersonalityBehaviorLayer().library
# A Vocation goal at a known station: an authored method applies, so the HTN plan runs it.
PLANNED = encode_goal_ref(GoalFamily.VOCATION, LIBRARY.tag_bit("station-known"), 1)


def kernel(agents: int, core: str = "c") -> Kernel:
    config = KernelConfig(behavior=BehaviorConfig(escalation_cooldown_ticks=COOLDOWN))
    k = Kernel(config, select_core(core), PersonalityBehaviorLayer(config.behavior))
    k.register(WORLD, registrations(agents))
    return k


def lachesis(tick: int, agents: int, *, goal: int = 0, flags: int = 0) -> object:
    """Every agent Lachesis, making progress on `goal` (so the stale-goal guard stays quiet)."""
    return columns(
        tick,
        signal_flags=np.full(agents, NEARBY | flags, dtype=np.uint16),
        goal_ref=np.full(agents, goal, dtype=np.uint32),
        goal_progress_signature=np.full(agents, tick, dtype=np.uint64),
    )


def escalations(result: action_pb2.TickResult) -> list[tuple[int, int]]:
    return [(c.slot, c.cause) for c in result.candidates if c.cause in ESCALATIONS]


@pytest.mark.parametrize("core", CORES)
def test_a_goalless_ori_escalates_once_per_cooldown_staggered_by_slot(core: str) -> None:
    agents = 30
    k = kernel(agents, core)
    seen: dict[int, list[int]] = {slot: [] for slot in range(agents)}
    for tick in range(1, 3 * COOLDOWN + 1):
        result = k.tick(lachesis(tick, agents))  # type: ignore[arg-type]
        for slot, cause in escalations(result):
            assert cause == action_pb2.COGNITION_CAUSE_ESCALATION_NO_GOAL
            seen[slot].append(tick)
        # Never the whole population on one tick: first calls are spread over the cooldown window.
        assert len(escalations(result)) <= agents // 2
    for ticks in seen.values():
        assert len(ticks) >= 2
        assert all(later - earlier >= COOLDOWN for earlier, later in itertools.pairwise(ticks))
    assert len({ticks[0] for ticks in seen.values()}) > COOLDOWN // 2


def test_an_escalation_is_a_priced_deterministic_candidate_and_the_ori_keeps_acting() -> None:
    k = kernel(4)
    tick = 1
    while not escalations(result := k.tick(lachesis(tick, 4))):  # type: ignore[arg-type]
        tick += 1
    (candidate,) = [c for c in result.candidates if c.cause in ESCALATIONS]
    config = k.config
    tokens = config.context_chars.escalation // 4 + config.batch_overhead_tokens
    assert candidate.call_id == f"{WORLD}:{tick}:{candidate.slot}:{candidate.cause}"
    assert candidate.tier == common_pb2.COGNITION_TIER_LACHESIS
    assert candidate.token_estimate == tokens
    assert candidate.cost_estimate_micro_usd == (tokens * config.class_rates.sonnet + 999) // 1000
    assert candidate.model_route == config.tier_models["lachesis"]
    assert result.report.calls_issued == len(result.candidates)
    assert result.report.estimated_tokens == sum(c.token_estimate for c in result.candidates)
    sources = np.frombuffer(result.actions.columns.source, "u1")
    assert sources[candidate.slot] in {action_pb2.ACTION_SOURCE_BEHAVIOR_TREE, action_pb2.ACTION_SOURCE_HTN}


def test_a_goal_an_authored_method_decomposes_runs_the_htn_plan_without_cognition() -> None:
    agents = 12
    k = kernel(agents)
    for tick in range(1, 2 * COOLDOWN):
        result = k.tick(lachesis(tick, agents, goal=PLANNED))  # type: ignore[arg-type]
        assert escalations(result) == []
        if tick > 1:  # by tick 2 both 10 Hz phases have stepped
            sources = set(np.frombuffer(result.actions.columns.source, "u1").tolist())
            assert sources == {action_pb2.ACTION_SOURCE_HTN}


def test_novelty_escalates_on_the_rising_edge_and_a_goal_no_method_fits_escalates_after() -> None:
    agents = 6
    k = kernel(agents)
    for tick in range(1, COOLDOWN + 1):  # settle: every Ori on its plan, nothing new
        assert escalations(k.tick(lachesis(tick, agents, goal=PLANNED))) == []  # type: ignore[arg-type]
    causes: dict[int, list[int]] = {slot: [] for slot in range(agents)}
    for tick in range(COOLDOWN + 1, 3 * COOLDOWN + 3):
        # A threat appears and stays: both Vocation methods exclude threat-present.
        result = k.tick(lachesis(tick, agents, goal=PLANNED, flags=THREAT_FLAG))  # type: ignore[arg-type]
        for slot, cause in escalations(result):
            causes[slot].append(cause)
    for slot_causes in causes.values():
        assert slot_causes[0] == action_pb2.COGNITION_CAUSE_ESCALATION_NOVELTY
        assert slot_causes[1:]
        assert set(slot_causes[1:]) == {action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([0, PLANNED, encode_goal_ref(GoalFamily.SOCIAL, 0, 2)]),
            st.sampled_from([0, THREAT_FLAG, 1 << 7]),
            st.sampled_from([LACHESIS_DOWN, LACHESIS_DOWN | 1 << 1, 0b1110]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_arbitration_never_escalates_while_lachesis_cognition_is_unavailable(
    steps: list[tuple[int, int, int]],
) -> None:
    agents = 8
    k = kernel(agents, "numpy")
    for tick, (goal, flags, unavailable) in enumerate(steps, start=1):
        result = k.tick(lachesis(tick, agents, goal=goal, flags=flags), (), unavailable)  # type: ignore[arg-type]
        assert escalations(result) == []
        kinds = np.frombuffer(result.actions.columns.kind, "u1")
        assert (kinds != action_pb2.ACTION_KIND_UNSPECIFIED).all()


def test_an_unknown_tier_bit_is_refused_naming_the_field_and_changes_nothing() -> None:
    k = kernel(3)
    k.tick(lachesis(1, 3))  # type: ignore[arg-type]
    before = k.snapshot().SerializeToString(deterministic=True)
    with pytest.raises(InvalidArgument) as refused:
        k.tick(lachesis(2, 3), (), 1 << 5)  # type: ignore[arg-type]
    assert refused.value.violations[0].field == "cognition_unavailable_tiers"
    assert k.snapshot().SerializeToString(deterministic=True) == before


def test_escalations_are_identical_on_both_cores_and_replay_with_their_availability(tmp_path: Path) -> None:
    agents, log = 24, tmp_path / "ticks.log"
    recorder, other = kernel(agents, "c"), kernel(agents, "numpy")
    writer = TickLogWriter(log, recorder, snapshot_every_ticks=9)
    writer.record_registration(kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(agents)))
    rng = np.random.default_rng(11)
    escalated = 0
    for tick in range(1, 60):
        goals = rng.choice([0, PLANNED, (7 << 28) | 3], agents).astype(np.uint32)
        flags = (NEARBY | rng.choice([0, THREAT_FLAG], agents)).astype(np.uint16)
        batch = columns(tick, signal_flags=flags, goal_ref=goals)
        unavailable = LACHESIS_DOWN if 20 <= tick < 30 else 0
        result = recorder.tick(batch, (), unavailable)
        assert deterministic_digest(result) == deterministic_digest(other.tick(batch, (), unavailable))
        writer.record_tick(batch, [], result, recorder, unavailable)
        escalated += len(escalations(result))
    writer.close()
    assert escalated > 0
    logged = [
        r.tick.cognition_unavailable_tiers for r in read_records(log) if r.WhichOneof("entry") == "tick"
    ]
    assert logged.count(LACHESIS_DOWN) == 10
    report = replay(log, kernel(0, "numpy"))
    assert report.identical
    assert report.ticks == 59


def test_novelty_seen_at_another_tier_is_history_by_the_time_the_ori_is_lachesis() -> None:
    agents = 4
    k = kernel(agents)
    on_screen = 1 << perception_pb2.PERCEPTION_FLAG_BIT_ON_SCREEN
    for tick in range(1, 6):  # Clotho: the threat appears while cognition plans for it anyway
        flags = on_screen | (THREAT_FLAG if tick >= 3 else 0)
        assert escalations(k.tick(lachesis(tick, agents, goal=PLANNED, flags=flags))) == []  # type: ignore[arg-type]
    causes = []
    for tick in range(6, 6 + 3 * COOLDOWN):  # off screen, the threat still there: Lachesis
        causes += [
            cause for _, cause in escalations(k.tick(lachesis(tick, agents, goal=PLANNED, flags=THREAT_FLAG)))
        ]  # type: ignore[arg-type]
    assert causes
    assert set(causes) == {action_pb2.COGNITION_CAUSE_ESCALATION_NO_METHOD}


@pytest.mark.parametrize(
    ("issued", "standing"),
    [([], [0, 1, 2, 7]), ([1, 4, 7], [0, 2]), ([3, 6], [0, 1, 2, 7]), ([0, 1, 2, 7], [])],
)
def test_an_escalation_stands_only_for_a_lachesis_agent_the_core_issued_no_call(
    issued: list[int], standing: list[int]
) -> None:
    kernel = Kernel(KernelConfig(), select_core("numpy"))
    kernel.register(WORLD, registrations(8))
    a = kernel.arrays
    a.fields["tier"][:8] = common_pb2.COGNITION_TIER_LACHESIS
    a.fields["tier"][5] = common_pb2.COGNITION_TIER_CLOTHO  # escalated, then the core moved it up
    a.outputs["candidate_slot"][: len(issued)] = issued
    a.counts[COUNT_CANDIDATES] = len(issued)
    slots = np.array([0, 1, 2, 5, 7], np.uint32)
    kept = kernel._standing_escalations(Escalations(slots, slots.astype(np.uint8) + 10))
    assert kept.slots.tolist() == standing
    assert kept.causes.tolist() == [slot + 10 for slot in standing]
