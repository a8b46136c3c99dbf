"""Objective negotiation, execution modes, Brief plans with boundary checks, surfaced refusals."""

from __future__ import annotations

from cognition_service.social.config import SocialConfig
from cognition_service.social.objectives import (
    BRIEF_PHASES,
    ExecutionMode,
    Negotiation,
    Objective,
    OriContext,
    assign_objective,
)
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2

CONFIG = SocialConfig()
ORI = OriContext(
    "ori-1",
    RankedValues.of({Domain.CRAFT: 80, Domain.HONESTY: 90, Domain.KINSHIP: 40, Domain.AUTONOMY: 70}),
    own_lines=frozenset({"betray-kin"}),
)


def _objective(**kw: object) -> Objective:
    base: dict[str, object] = {
        "objective_id": "obj-1",
        "steward_id": "steward-9",
        "summary": "repair the mill wheel",
        "target": "mill",
        "mode": ExecutionMode.DIRECT_TETHER,
        "stances": {Domain.CRAFT: 80},
        "urgency": 60,
    }
    base.update(kw)
    return Objective(**base)  # type: ignore[arg-type]


def test_each_accepted_mode_emits_its_squad_message() -> None:
    messages = {}
    for mode in ExecutionMode:
        result = assign_objective(ORI, _objective(mode=mode, trigger="the river floods"), CONFIG, tick=5)
        assert result.outcome == Negotiation.ACCEPT
        assert result.mode == mode
        assert result.message.template
        messages[mode] = result.message.text
        (event,) = result.events
        assert event.kind == biography_pb2.ORI_EVENT_KIND_GOAL_ARC_ADVANCED
        assert event.payload["mode"] == mode.value
    assert messages[ExecutionMode.DIRECT_TETHER].startswith("On your lead")
    assert messages[ExecutionMode.STANDING_INTENT] == (
        "Standing intent set: repair the mill wheel, when the river floods."
    )
    assert len(set(messages.values())) == 4


def test_brief_expands_to_six_steps() -> None:
    result = assign_objective(ORI, _objective(mode=ExecutionMode.BRIEF, tags=frozenset({"lift"})), CONFIG, 1)
    assert [s.phase for s in result.plan] == list(BRIEF_PHASES)
    assert len(result.plan) == 6
    assert "lift" in result.plan[3].tags
    assert list(result.events[0].payload["plan"]) == list(BRIEF_PHASES)


def test_brief_crossing_a_forbidden_line_is_refused_and_surfaced() -> None:
    objective = _objective(
        mode=ExecutionMode.BRIEF, tags=frozenset({"trespass"}), forbidden_lines=frozenset({"trespass"})
    )
    result = assign_objective(ORI, objective, CONFIG, 1)
    assert result.outcome == Negotiation.REFUSE
    assert result.reason == "forbidden-line:trespass@execute"
    assert result.plan == ()
    assert result.events[0].kind == biography_pb2.ORI_EVENT_KIND_DIRECTIVE_REFUSED


def test_negotiation_outcomes() -> None:
    assert assign_objective(ORI, _objective(target=""), CONFIG, 1).outcome == Negotiation.CLARIFY
    standing = _objective(mode=ExecutionMode.STANDING_INTENT)
    assert assign_objective(ORI, standing, CONFIG, 1).reason == "missing:trigger"
    mild = _objective(stances={Domain.CRAFT: 20, Domain.HONESTY: -30})
    countered = assign_objective(ORI, mild, CONFIG, 1)
    assert (countered.outcome, countered.reason) == (Negotiation.COUNTER_OFFER, "values:honesty")
    assert countered.counter_offer is not None
    assert dict(countered.counter_offer.stances) == {Domain.CRAFT: 20}
    assert ORI.values.alignment(countered.counter_offer.stances) >= 0
    busy = OriContext("ori-1", ORI.values, commitment_priority=90)
    assert assign_objective(busy, _objective(), CONFIG, 1).outcome == Negotiation.DEFER
    lie = _objective(stances={Domain.HONESTY: -100})
    assert assign_objective(ORI, lie, CONFIG, 1).outcome == Negotiation.REFUSE
    own_line = _objective(tags=frozenset({"betray-kin"}))
    assert assign_objective(ORI, own_line, CONFIG, 1).reason == "crosses-own-line:betray-kin"


def test_a_refusal_is_never_overridden_by_insisting() -> None:
    lie = _objective(stances={Domain.HONESTY: -100})
    first = assign_objective(ORI, lie, CONFIG, 1)
    insisted = assign_objective(ORI, _objective(stances={Domain.HONESTY: -100}, insist=True), CONFIG, 2)
    assert first.outcome == insisted.outcome == Negotiation.REFUSE
    assert insisted.message.text.startswith("My answer stands: no.")
    assert insisted.events[0].payload["insisted"] is True


def test_event_ids_are_stable_for_retries() -> None:
    a = assign_objective(ORI, _objective(), CONFIG, 3).events[0]
    b = assign_objective(ORI, _objective(), CONFIG, 3).events[0]
    c = assign_objective(ORI, _objective(), CONFIG, 4).events[0]
    assert a.event_id == b.event_id != c.event_id
