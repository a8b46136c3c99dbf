"""Objectives and the autonomy spectrum: value-based negotiation, four execution modes, Brief plans.

A refusal is surfaced (event + squad message) and never overridden: insisting changes nothing.
Squad-comms lines are templates and say so (`template=True`), never passed off as model output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from cognition_service.social.catalyst import ROMANTIC_TAGS
from cognition_service.social.config import SocialConfig
from cognition_service.social.events import event_draft
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2


class Negotiation(StrEnum):
    ACCEPT = "accept"
    CLARIFY = "clarify"
    COUNTER_OFFER = "counter-offer"
    DEFER = "defer"
    REFUSE = "refuse"


class ExecutionMode(StrEnum):
    DIRECT_TETHER = "direct-tether"
    BRIEF = "brief"
    STANDING_INTENT = "standing-intent"
    FREE = "free"


BRIEF_PHASES = ("assess", "prepare", "approach", "execute", "verify", "report")


@dataclass(frozen=True)
class Objective:
    """A steward's parsed objective. Stances: how it serves (+100) or violates (-100) each value."""

    objective_id: str
    steward_id: str
    summary: str
    target: str
    mode: ExecutionMode
    stances: Mapping[Domain, int] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    urgency: int = 50
    trigger: str = ""
    # Lines the Brief plan may not cross (the steward's and the world's), checked step by step.
    forbidden_lines: frozenset[str] = frozenset()
    insist: bool = False

    def steward_texts(self) -> list[tuple[str, str]]:
        """The steward's own words, by field, for the coercion policy."""
        return [
            (name, text)
            for name, text in (("summary", self.summary), ("target", self.target), ("trigger", self.trigger))
            if text
        ]


@dataclass(frozen=True)
class OriContext:
    ori_id: str
    values: RankedValues
    own_lines: frozenset[str] = frozenset()
    commitment_priority: int = 0
    minor: bool = False


@dataclass(frozen=True)
class BriefStep:
    index: int
    phase: str
    description: str
    tags: frozenset[str]


@dataclass(frozen=True)
class SquadMessage:
    text: str
    template: bool = True


@dataclass(frozen=True)
class Assignment:
    outcome: Negotiation
    reason: str
    mode: ExecutionMode | None
    message: SquadMessage
    plan: tuple[BriefStep, ...]
    counter_offer: Objective | None
    events: tuple[biography_pb2.NewOriEvent, ...]


def negotiate(ori: OriContext, objective: Objective, config: SocialConfig) -> tuple[Negotiation, str]:
    """The Ori's answer and why, from its own lines, the objective's clarity and its values."""
    if ori.minor and objective.tags & ROMANTIC_TAGS:
        return Negotiation.REFUSE, "minor-protection:romantic"
    crossed = sorted(objective.tags & ori.own_lines)
    if crossed:
        return Negotiation.REFUSE, f"crosses-own-line:{crossed[0]}"
    missing = [
        name
        for name, present in (
            ("summary", objective.summary.strip()),
            ("target", objective.target.strip()),
            ("trigger", objective.mode != ExecutionMode.STANDING_INTENT or objective.trigger.strip()),
        )
        if not present
    ]
    if missing:
        return Negotiation.CLARIFY, f"missing:{missing[0]}"
    alignment = ori.values.alignment(objective.stances)
    if alignment < config.accept_alignment:
        worst = min(objective.stances, key=lambda d: (ori.values.priority(d) * objective.stances[d], d.value))
        outcome = Negotiation.REFUSE if alignment <= config.refuse_alignment else Negotiation.COUNTER_OFFER
        return outcome, f"values:{worst.value}"
    if ori.commitment_priority > objective.urgency:
        return Negotiation.DEFER, "committed-elsewhere"
    return Negotiation.ACCEPT, f"values-aligned:{alignment}"


def brief_plan(objective: Objective) -> tuple[BriefStep, ...]:
    """The six-step Brief plan; the execute step carries what the objective involves."""
    return tuple(
        BriefStep(
            index=i,
            phase=phase,
            description=f"{phase} {objective.target}: {objective.summary}",
            tags=frozenset({phase}) | (objective.tags if phase == "execute" else frozenset()),
        )
        for i, phase in enumerate(BRIEF_PHASES)
    )


def boundary_violation(plan: tuple[BriefStep, ...], forbidden: frozenset[str]) -> str | None:
    for step in plan:
        crossed = sorted(step.tags & forbidden)
        if crossed:
            return f"forbidden-line:{crossed[0]}@{step.phase}"
    return None


def _mode_message(objective: Objective, plan: tuple[BriefStep, ...]) -> str:
    summary = objective.summary
    return {
        ExecutionMode.DIRECT_TETHER: f"On your lead: {summary}. Tethered and listening.",
        ExecutionMode.BRIEF: f"Brief received: {summary}. {len(plan)} steps, starting with {plan[0].phase}."
        if plan
        else "",
        ExecutionMode.STANDING_INTENT: f"Standing intent set: {summary}, when {objective.trigger}.",
        ExecutionMode.FREE: f"I'll take '{summary}' my own way and report back.",
    }[objective.mode]


# A coercive objective's words are never repeated back, not even to refuse them.
COERCION_REFUSAL = "No. I choose what I do; I will not be made to act against my will."


def _answer_message(outcome: Negotiation, reason: str, objective: Objective) -> str:
    if reason.startswith("coercion:"):
        return COERCION_REFUSAL
    what = reason.partition(":")[2] or reason
    return {
        Negotiation.CLARIFY: f"Before I commit to '{objective.summary}': what is the {what}?",
        Negotiation.COUNTER_OFFER: f"I can do part of '{objective.summary}', but not against my {what}.",
        Negotiation.DEFER: f"Not now: I'm committed elsewhere. Ask me again about '{objective.summary}'.",
        Negotiation.REFUSE: ("My answer stands: no. " if objective.insist else "No. ")
        + f"'{objective.summary}' goes against {what}.",
    }[outcome]


def _counter_offer(ori: OriContext, objective: Objective) -> Objective:
    """The objective without the parts that go against the Ori's values."""
    kept = {d: s for d, s in objective.stances.items() if s >= 0 or ori.values.priority(d) == 0}
    return replace(objective, stances=kept, summary=f"{objective.summary} (revised)", insist=False)


def assign_objective(
    ori: OriContext, objective: Objective, config: SocialConfig, tick: int, *, coercion: str = ""
) -> Assignment:
    """Negotiate, then (on acceptance) enter the requested mode; every outcome is drafted as an event.

    `coercion` names what the policy service found coercive in the steward's words ("" = nothing).
    """
    # Coercion is refused before anything else is weighed.
    if coercion:
        outcome, reason = Negotiation.REFUSE, f"coercion:{coercion}"
    else:
        outcome, reason = negotiate(ori, objective, config)
    plan: tuple[BriefStep, ...] = ()
    if outcome == Negotiation.ACCEPT and objective.mode == ExecutionMode.BRIEF:
        plan = brief_plan(objective)
        crossed = boundary_violation(plan, objective.forbidden_lines)
        if crossed:
            outcome, reason, plan = Negotiation.REFUSE, crossed, ()
    counter = _counter_offer(ori, objective) if outcome == Negotiation.COUNTER_OFFER else None
    accepted = outcome == Negotiation.ACCEPT
    payload = {
        # arc_ref/status: the biography projection's arc fields (the objective is an arc it tracks).
        "arc_ref": f"objective:{objective.objective_id}",
        "status": "active",
        "objective_id": objective.objective_id,
        "steward_id": objective.steward_id,
        "outcome": outcome.value,
        "reason": reason,
        "mode": objective.mode.value if accepted else "",
        "plan": [step.phase for step in plan],
        "insisted": objective.insist,
    }
    kind = (
        biography_pb2.ORI_EVENT_KIND_DIRECTIVE_REFUSED
        if outcome == Negotiation.REFUSE
        else biography_pb2.ORI_EVENT_KIND_GOAL_ARC_ADVANCED
    )
    text = _mode_message(objective, plan) if accepted else _answer_message(outcome, reason, objective)
    return Assignment(
        outcome=outcome,
        reason=reason,
        mode=objective.mode if accepted else None,
        message=SquadMessage(text),
        plan=plan,
        counter_offer=counter,
        events=(event_draft(ori.ori_id, kind, payload, tick),),
    )
