"""Learning by example, goal arcs, life arcs and flourishing, crossroads counsel."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cognition_service.social.config import SocialConfig
from cognition_service.social.crossroads import (
    Bond,
    Counsel,
    Crossroads,
    CrossroadsOption,
    CrossroadsStatus,
    resolve_crossroads,
)
from cognition_service.social.goal_arcs import (
    GoalArc,
    GoalStage,
    Session,
    SessionOutcome,
    StageStatus,
    advance_goal_arc,
)
from cognition_service.social.learning import Demonstration, learn_from_demonstration
from cognition_service.social.life_arcs import LifeArc, LifeStage, LivedSession, advance_life_arc, flourishing
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2
from services.errors import InvalidArgument

CONFIG = SocialConfig()
VALUES = RankedValues.of({Domain.CRAFT: 60, Domain.KINSHIP: 50, Domain.AUTONOMY: 80, Domain.JOY: 95})


def test_learning_reweights_clamps_reranks_and_preserves_autonomy() -> None:
    demo = Demonstration(
        "steward-1",
        "shared bread with a stranger",
        {Domain.KINSHIP: 100, Domain.JOY: 100, Domain.AUTONOMY: -100},
    )
    learned = learn_from_demonstration("ori-1", VALUES, demo, CONFIG, tick=7)
    assert learned.values.priority(Domain.KINSHIP) == 75
    assert learned.values.priority(Domain.JOY) == 100  # clamped
    assert learned.values.priority(Domain.AUTONOMY) == 80
    assert learned.values.ranking[:2] == (Domain.JOY, Domain.AUTONOMY)
    shifted = {(e.payload["value_ref"], e.payload["weight_bp"]) for e in learned.value_shifts}
    assert shifted == {("kinship", 7_500), ("joy", 10_000)}
    assert {e.kind for e in learned.value_shifts} == {biography_pb2.ORI_EVENT_KIND_VALUE_SHIFT}
    assert all(e.payload["autonomy_preserved"] is True for e in learned.value_shifts)
    assert learned.behaviour_adjustment.kind == biography_pb2.ORI_EVENT_KIND_PERSONALITY_EVENT
    assert learned.behaviour_adjustment.payload["adjustment"] == "lean into kinship"


@given(st.dictionaries(st.sampled_from(list(Domain)), st.integers(-500, 500)))
def test_learning_keeps_every_priority_in_range_and_autonomy_fixed(signals: dict[Domain, int]) -> None:
    learned = learn_from_demonstration("ori", VALUES, Demonstration("s", "b", signals), CONFIG, 0)
    assert all(0 <= p <= 100 for p in learned.values.priorities.values())
    assert learned.values.priority(Domain.AUTONOMY) == VALUES.priority(Domain.AUTONOMY)


ARC = GoalArc(
    "arc-1",
    "ori-1",
    (
        GoalStage("gather-stone", StageStatus.ACTIVE),
        GoalStage("build-wall", needs_support=frozenset({"mason"})),
        GoalStage("celebrate"),
    ),
)


def _statuses(arc: GoalArc) -> list[tuple[str, str]]:
    return [(s.stage_id, s.status.value) for s in arc.stages]


def test_goal_arc_advances_stalls_on_missing_support_and_resumes() -> None:
    step = advance_goal_arc(ARC, Session("ori-1", 10, completed_active=True))
    assert step.outcome == SessionOutcome.ADVANCED
    assert _statuses(step.arc)[:2] == [("gather-stone", "completed"), ("build-wall", "active")]
    stalled = advance_goal_arc(step.arc, Session("ori-1", 11, completed_active=True))
    assert (stalled.outcome, stalled.missing_support) == (SessionOutcome.STALLED, ("mason",))
    assert stalled.arc.stages[1].status == StageStatus.BLOCKED
    assert stalled.events[0].payload["missing_support"] == ["mason"]
    resumed = advance_goal_arc(
        stalled.arc, Session("ori-1", 12, completed_active=True, support=frozenset({"mason"}))
    )
    assert _statuses(resumed.arc)[1:] == [("build-wall", "completed"), ("celebrate", "active")]


def test_goal_arc_emergent_goals_detours_and_skips() -> None:
    step = advance_goal_arc(
        ARC, Session("ori-1", 3, emergent_goals=["teach-apprentice"], detour="fetch-water")
    )
    assert _statuses(step.arc) == [
        ("fetch-water", "active"),
        ("gather-stone", "planned"),
        ("build-wall", "planned"),
        ("celebrate", "planned"),
        ("teach-apprentice", "planned"),
    ]
    assert step.arc.stages[0].detour
    assert step.arc.stages[-1].emergent
    skipped = advance_goal_arc(step.arc, Session("ori-1", 4, skip=frozenset({"build-wall"})))
    assert skipped.arc.stages[2].status == StageStatus.SKIPPED
    assert skipped.events[0].kind == biography_pb2.ORI_EVENT_KIND_GOAL_ARC_ADVANCED


def test_only_the_owner_advances_its_arc() -> None:
    step = advance_goal_arc(ARC, Session("steward-ori", 3, completed_active=True))
    assert step.outcome == SessionOutcome.BLOCKED_NOT_OWNER
    assert step.arc == ARC
    assert step.events == ()


def test_life_arc_moves_through_stages_on_flourishing() -> None:
    arc = LifeArc("ori-1")
    lived = LivedSession(1, {Domain.JOY: 90, Domain.CRAFT: 80, Domain.AUTONOMY: 70, Domain.KINSHIP: 50})
    stages = []
    for _ in range(16):
        result = advance_life_arc(arc, VALUES, lived, CONFIG)
        arc = result.arc
        stages.append(arc.stage)
        assert result.events[0].kind == biography_pb2.ORI_EVENT_KIND_ARC_ADVANCED
    assert stages[2] == LifeStage.PRACTICING
    assert stages[-1] == LifeStage.LEGACY
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == list(LifeStage)


def test_an_unlived_life_does_not_advance_however_obedient() -> None:
    result = advance_life_arc(
        LifeArc("ori-1", sessions_in_stage=5), VALUES, LivedSession(1, {}, obedience=100), CONFIG
    )
    assert (result.flourishing, result.advanced) == (0, False)


expressions = st.dictionaries(st.sampled_from(list(Domain)), st.integers(0, 100))
value_sets = st.dictionaries(st.sampled_from(list(Domain)), st.integers(0, 100)).map(RankedValues.of)


@given(value_sets, expressions, st.integers(0, 100), st.integers(0, 100), st.integers(0, 10))
def test_flourishing_never_rises_from_obedience_alone(
    values: RankedValues, expression: dict[Domain, int], low: int, high: int, sessions: int
) -> None:
    arc = LifeArc("ori", LifeStage.PRACTICING, sessions)
    meek = advance_life_arc(arc, values, LivedSession(1, expression, obedience=min(low, high)), CONFIG)
    obedient = advance_life_arc(arc, values, LivedSession(1, expression, obedience=max(low, high)), CONFIG)
    assert obedient.flourishing <= meek.flourishing
    assert (obedient.arc, obedient.advanced) == (meek.arc, meek.advanced)
    assert obedient.flourishing == flourishing(values, expression)


STAY = CrossroadsOption("stay-with-kin", {Domain.KINSHIP: 100, Domain.JOY: 40}, risk=10)
LEAVE = CrossroadsOption("leave-for-the-city", {Domain.CRAFT: 60, Domain.KINSHIP: -40}, risk=40)
FORK = Crossroads("cr-1", [STAY, LEAVE], opened_tick=100, window_ticks=50)
RESPECTED = Bond("steward-1", respect=65, bond=70)


def _resolve(bond: Bond | None, counsel: Counsel | None, now: int, values: RankedValues = VALUES) -> object:
    return resolve_crossroads("ori-1", values, FORK, bond=bond, counsel=counsel, now_tick=now, config=CONFIG)


def test_a_high_respect_bond_holds_the_decision_for_counsel_inside_the_window() -> None:
    held = _resolve(RESPECTED, None, 120)
    assert held.status == CrossroadsStatus.HELD_FOR_COUNSEL  # type: ignore[attr-defined]
    weak = _resolve(Bond("steward-1", respect=64, bond=90), None, 120)
    assert weak.status == CrossroadsStatus.DECIDED  # type: ignore[attr-defined]
    expired = _resolve(RESPECTED, None, 150)
    assert expired.status == CrossroadsStatus.DECIDED  # type: ignore[attr-defined]


def test_scores_are_alignment_plus_counsel_minus_risk_and_counsel_never_binds() -> None:
    decided = _resolve(RESPECTED, Counsel("steward-1", "leave-for-the-city"), 120)
    # stay: 50*100/100 + 95*40/100 - 10/2 = 50 + 38 - 5; leave: 36 - 20 + 20*65/100 - 20
    assert decided.scores == {"stay-with-kin": 83, "leave-for-the-city": 9}  # type: ignore[attr-defined]
    assert decided.chosen == "stay-with-kin"  # type: ignore[attr-defined]
    assert not decided.counsel_followed  # type: ignore[attr-defined]
    torn = RankedValues.of({Domain.KINSHIP: 25, Domain.CRAFT: 70})
    assert _resolve(RESPECTED, None, 160, torn).chosen == "stay-with-kin"  # type: ignore[attr-defined]
    swayed = _resolve(RESPECTED, Counsel("steward-1", "leave-for-the-city"), 120, torn)
    assert swayed.chosen == "leave-for-the-city"  # type: ignore[attr-defined]
    assert swayed.counsel_followed  # type: ignore[attr-defined]
    assert swayed.events[0].payload["counsel_followed"] is True  # type: ignore[attr-defined]


def test_counsel_for_an_unknown_option_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"counsel\.option_id"):
        _resolve(RESPECTED, Counsel("steward-1", "fly-away"), 120)
