"""The social layer's RPC surface: requests to its decision types (every bad field named), results back.

Validation collects every violation before anything is decided, so a bad request never half-applies:
no event is written for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from enum import StrEnum
from typing import TypeVar

from cognition_service.social.catalyst import CatalystResult, RelationshipSeed
from cognition_service.social.crossroads import (
    Bond,
    Counsel,
    Crossroads,
    CrossroadsOption,
    CrossroadsResolution,
)
from cognition_service.social.goal_arcs import ArcAdvance, GoalArc, GoalStage, Session, StageStatus
from cognition_service.social.learning import Demonstration, Learning
from cognition_service.social.life_arcs import LifeArc, LifeArcAdvance, LifeStage, LivedSession
from cognition_service.social.objectives import Assignment, ExecutionMode, Objective, OriContext
from cognition_service.social.values import PRIORITY_MAX, Domain, RankedValues
from egbe.v1 import biography_pb2, cognition_pb2, common_pb2, kernel_pb2
from services.errors import FieldViolation, InvalidArgument
from services.protocol_limits import STORED_INTEGER_MAX

DOMAINS = {domain.proto: domain for domain in Domain}
# The biography's limits (an Ori id's default length; a stored integer, services.protocol_limits),
# checked here so a request the biography would refuse is refused whole before anything is written;
# and bounds that keep every event's payload far under the biography's 64 KiB.
ID_CHARS = 128
TEXT_CHARS = 2_000
MAX_ITEMS = 32  # a request's list (tags, lines, options, stages, …)
MAX_NESTED_ITEMS = 8  # a list inside a listed item (a stage's needs_support)
E = TypeVar("E", bound=StrEnum)


class _Checked:
    """Violations gathered while converting one request."""

    def __init__(self) -> None:
        self.violations: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self.violations.append(FieldViolation(field, description))

    def done(self) -> None:
        if self.violations:
            raise InvalidArgument(self.violations)

    def text(self, value: str, field: str, limit: int = ID_CHARS) -> str:
        if not value.strip():
            self.add(field, "must be set")
        return self.sized(value, field, limit)

    def sized(self, value: str, field: str, limit: int = TEXT_CHARS) -> str:
        if len(value) > limit:
            self.add(field, f"is {len(value)} characters; the limit is {limit}")
        return value

    def tick(self, value: int, field: str) -> int:
        if value > STORED_INTEGER_MAX:
            self.add(field, f"must be at most {STORED_INTEGER_MAX}")
        return value

    def counted(self, values: Sized, field: str, limit: int = MAX_ITEMS) -> None:
        if len(values) > limit:
            self.add(field, f"holds {len(values)}; the limit is {limit}")

    def ranged(self, value: int, field: str, low: int, high: int) -> int:
        if not low <= value <= high:
            self.add(field, f"must be within {low}..{high}")
        return value

    def word(self, value: str, field: str, kind: type[E]) -> E | None:
        try:
            return kind(value)
        except ValueError:
            self.add(field, f"must be one of {[member.value for member in kind]}")
            return None

    def domain(self, number: int, field: str) -> Domain | None:
        found = DOMAINS.get(number)
        if found is None:
            self.add(field, f"unknown or unspecified value domain {number}")
        return found

    def ori(self, ori: common_pb2.OriRef, field: str = "ori") -> str:
        ori_id = self.text(ori.ori_id, f"{field}.ori_id")
        if ori_id.startswith("$"):
            self.add(f"{field}.ori_id", 'must not start with "$"')
        return ori_id

    def values(self, values: Sequence[cognition_pb2.SocialValue], field: str = "values") -> RankedValues:
        priorities: dict[Domain, int] = {}
        for i, value in enumerate(values):
            domain = self.domain(value.domain, f"{field}[{i}].domain")
            self.ranged(value.priority, f"{field}[{i}].priority", 0, PRIORITY_MAX)
            if domain is not None:
                if domain in priorities:
                    self.add(f"{field}[{i}].domain", f"{domain.value} is ranked twice")
                priorities[domain] = value.priority
        return RankedValues.of(priorities)

    def stances(self, stances: Sequence[cognition_pb2.ValueStance], field: str) -> dict[Domain, int]:
        out: dict[Domain, int] = {}
        for i, stance in enumerate(stances):
            domain = self.domain(stance.domain, f"{field}[{i}].domain")
            self.ranged(stance.stance, f"{field}[{i}].stance", -100, 100)
            if domain is not None:
                if domain in out:
                    self.add(f"{field}[{i}].domain", f"{domain.value} is given twice")
                out[domain] = stance.stance
        return out


def _social_values(values: RankedValues) -> list[cognition_pb2.SocialValue]:
    return [
        cognition_pb2.SocialValue(
            domain=kernel_pb2.ValueDomain.ValueType(d.proto), priority=values.priority(d)
        )
        for d in values.ranking
    ]


def event_ids(events: Iterable[biography_pb2.NewOriEvent]) -> list[str]:
    return [event.event_id for event in events]


# --- NegotiateObjective ------------------------------------------------------------------------


def _objective(message: cognition_pb2.StewardObjective, checked: _Checked, field: str) -> Objective:
    mode = checked.word(message.mode, f"{field}.mode", ExecutionMode)
    checked.ranged(message.urgency, f"{field}.urgency", 0, 100)
    return Objective(
        objective_id=checked.text(message.objective_id, f"{field}.objective_id"),
        steward_id=checked.text(message.steward_id, f"{field}.steward_id"),
        # Summary, target and trigger may be missing: the Ori then asks to clarify.
        summary=checked.sized(message.summary, f"{field}.summary"),
        target=checked.sized(message.target, f"{field}.target"),
        mode=mode or ExecutionMode.FREE,
        stances=checked.stances(message.stances, f"{field}.stances"),
        tags=frozenset(_strings(message.tags, f"{field}.tags", checked)),
        urgency=message.urgency,
        trigger=checked.sized(message.trigger, f"{field}.trigger"),
        forbidden_lines=frozenset(_strings(message.forbidden_lines, f"{field}.forbidden_lines", checked)),
        insist=message.insist,
    )


def negotiate_request(request: cognition_pb2.NegotiateObjectiveRequest) -> tuple[OriContext, Objective, int]:
    checked = _Checked()
    ori_id = checked.ori(request.ori)
    values = checked.values(request.values)
    checked.ranged(request.commitment_priority, "commitment_priority", 0, 100)
    if not request.HasField("objective"):
        checked.add("objective", "must be set")
    objective = _objective(request.objective, checked, "objective")
    own_lines = _strings(request.own_lines, "own_lines", checked)
    checked.tick(request.world_tick, "world_tick")
    checked.done()
    ori = OriContext(
        ori_id,
        values,
        own_lines=frozenset(own_lines),
        commitment_priority=request.commitment_priority,
        minor=request.minor,
    )
    return ori, objective, request.world_tick


def _objective_message(objective: Objective) -> cognition_pb2.StewardObjective:
    return cognition_pb2.StewardObjective(
        objective_id=objective.objective_id,
        steward_id=objective.steward_id,
        summary=objective.summary,
        target=objective.target,
        mode=objective.mode.value,
        stances=[
            cognition_pb2.ValueStance(domain=kernel_pb2.ValueDomain.ValueType(d.proto), stance=s)
            for d, s in objective.stances.items()
        ],
        tags=sorted(objective.tags),
        urgency=objective.urgency,
        trigger=objective.trigger,
        forbidden_lines=sorted(objective.forbidden_lines),
        insist=objective.insist,
    )


def negotiate_response(result: Assignment) -> cognition_pb2.NegotiateObjectiveResponse:
    response = cognition_pb2.NegotiateObjectiveResponse(
        outcome=result.outcome.value,
        reason=result.reason,
        mode=result.mode.value if result.mode else "",
        squad_message=result.message.text,
        message_is_template=result.message.template,
        plan=[
            cognition_pb2.BriefPlanStep(
                index=step.index, phase=step.phase, description=step.description, tags=sorted(step.tags)
            )
            for step in result.plan
        ],
        event_ids=event_ids(result.events),
    )
    if result.counter_offer is not None:
        response.counter_offer.CopyFrom(_objective_message(result.counter_offer))
    return response


# --- ObserveStewardExample ---------------------------------------------------------------------


def observe_request(
    request: cognition_pb2.ObserveStewardExampleRequest,
) -> tuple[str, RankedValues, Demonstration, int]:
    checked = _Checked()
    ori_id = checked.ori(request.ori)
    values = checked.values(request.values)
    demonstration = Demonstration(
        steward_id=checked.text(request.steward_id, "steward_id"),
        behaviour=checked.text(request.behaviour, "behaviour", TEXT_CHARS),
        value_signals=checked.stances(request.value_signals, "value_signals"),
    )
    if not request.value_signals:
        checked.add("value_signals", "name at least one value the behaviour expressed")
    checked.tick(request.world_tick, "world_tick")
    checked.done()
    return ori_id, values, demonstration, request.world_tick


def observe_response(result: Learning) -> cognition_pb2.ObserveStewardExampleResponse:
    return cognition_pb2.ObserveStewardExampleResponse(
        values=_social_values(result.values),
        shifts=[
            cognition_pb2.SocialValue(domain=kernel_pb2.ValueDomain.ValueType(d.proto), priority=delta)
            for d, delta in result.shifts.items()
        ],
        event_ids=event_ids([*result.value_shifts, result.behaviour_adjustment]),
    )


# --- AdvanceGoalArc ----------------------------------------------------------------------------


def _strings(values: Iterable[str], field: str, checked: _Checked, limit: int = MAX_ITEMS) -> list[str]:
    out = list(values)
    checked.counted(out, field, limit)
    for i, value in enumerate(out):
        checked.text(value, f"{field}[{i}]")
    return out


def advance_request(request: cognition_pb2.AdvanceGoalArcRequest) -> tuple[GoalArc, Session]:
    checked = _Checked()
    owner = checked.ori(request.ori)
    arc = request.arc
    checked.text(arc.arc_id, "arc.arc_id")
    if arc.owner_ori_id != owner:
        checked.add("arc.owner_ori_id", "must equal ori.ori_id (the arc's owner)")
    if not arc.stages:
        checked.add("arc.stages", "an arc has at least one stage")
    checked.counted(arc.stages, "arc.stages")
    stages = []
    seen: set[str] = set()
    for i, stage in enumerate(arc.stages):
        field = f"arc.stages[{i}]"
        if checked.text(stage.stage_id, f"{field}.stage_id") in seen:
            checked.add(f"{field}.stage_id", "repeats an earlier stage")
        seen.add(stage.stage_id)
        status = checked.word(stage.status, f"{field}.status", StageStatus)
        stages.append(
            GoalStage(
                stage.stage_id,
                status or StageStatus.PLANNED,
                frozenset(_strings(stage.needs_support, f"{field}.needs_support", checked, MAX_NESTED_ITEMS)),
                stage.emergent,
                stage.detour,
            )
        )
    session = request.session
    checked.text(session.actor_ori_id, "session.actor_ori_id")
    checked.sized(session.detour, "session.detour", ID_CHARS)
    checked.tick(session.world_tick, "session.world_tick")
    advanced = Session(
        actor_ori_id=session.actor_ori_id,
        world_tick=session.world_tick,
        completed_active=session.completed_active,
        support=frozenset(_strings(session.support, "session.support", checked)),
        emergent_goals=_strings(session.emergent_goals, "session.emergent_goals", checked),
        detour=session.detour or None,
        skip=frozenset(_strings(session.skip, "session.skip", checked)),
    )
    checked.done()
    return GoalArc(arc.arc_id, arc.owner_ori_id, tuple(stages)), advanced


def advance_response(result: ArcAdvance) -> cognition_pb2.AdvanceGoalArcResponse:
    arc = result.arc
    return cognition_pb2.AdvanceGoalArcResponse(
        arc=cognition_pb2.GoalArc(
            arc_id=arc.arc_id,
            owner_ori_id=arc.owner_ori_id,
            stages=[
                cognition_pb2.GoalStage(
                    stage_id=s.stage_id,
                    status=s.status.value,
                    needs_support=sorted(s.needs_support),
                    emergent=s.emergent,
                    detour=s.detour,
                )
                for s in arc.stages
            ],
        ),
        outcome=result.outcome.value,
        missing_support=list(result.missing_support),
        event_ids=event_ids(result.events),
    )


# --- ResolveCrossroads -------------------------------------------------------------------------


CrossroadsCall = tuple[str, RankedValues, Crossroads, Bond | None, Counsel | None, int]


def crossroads_request(request: cognition_pb2.ResolveCrossroadsRequest) -> CrossroadsCall:
    checked = _Checked()
    ori_id = checked.ori(request.ori)
    values = checked.values(request.values)
    checked.text(request.crossroads_id, "crossroads_id")
    if not request.options:
        checked.add("options", "a crossroads needs at least one option")
    checked.counted(request.options, "options")
    for name in ("opened_tick", "window_ticks", "now_tick"):
        checked.tick(getattr(request, name), name)
    ids: set[str] = set()
    options = []
    for i, option in enumerate(request.options):
        if checked.text(option.option_id, f"options[{i}].option_id") in ids:
            checked.add(f"options[{i}].option_id", "repeats an earlier option")
        ids.add(option.option_id)
        checked.ranged(option.risk, f"options[{i}].risk", 0, 100)
        options.append(
            CrossroadsOption(
                option.option_id, checked.stances(option.stances, f"options[{i}].stances"), option.risk
            )
        )
    bond = None
    if request.HasField("bond"):
        checked.text(request.bond.steward_id, "bond.steward_id")
        checked.ranged(request.bond.respect, "bond.respect", 0, 100)
        checked.ranged(request.bond.bond, "bond.bond", 0, 100)
        bond = Bond(request.bond.steward_id, request.bond.respect, request.bond.bond)
    counsel = None
    if request.HasField("counsel"):
        checked.text(request.counsel.steward_id, "counsel.steward_id")
        if request.counsel.option_id not in ids:
            checked.add("counsel.option_id", "must name one of the options")
        counsel = Counsel(request.counsel.steward_id, request.counsel.option_id)
    checked.done()
    crossroads = Crossroads(request.crossroads_id, options, request.opened_tick, request.window_ticks)
    return ori_id, values, crossroads, bond, counsel, request.now_tick


def crossroads_response(result: CrossroadsResolution) -> cognition_pb2.ResolveCrossroadsResponse:
    return cognition_pb2.ResolveCrossroadsResponse(
        status=result.status.value,
        chosen_option_id=result.chosen or "",
        scores=[cognition_pb2.OptionScore(option_id=o, score=s) for o, s in result.scores.items()],
        counsel_followed=result.counsel_followed,
        event_ids=event_ids(result.events),
    )


# --- AdvanceLifeArc ----------------------------------------------------------------------------


def life_arc_request(
    request: cognition_pb2.AdvanceLifeArcRequest,
) -> tuple[LifeArc, RankedValues, LivedSession]:
    checked = _Checked()
    ori_id = checked.ori(request.ori)
    values = checked.values(request.values)
    stage = checked.word(request.stage, "stage", LifeStage)
    expression = checked.stances(request.expression, "expression")
    for i, lived in enumerate(request.expression):
        if lived.stance < 0:
            checked.add(f"expression[{i}].stance", "expression is 0..100")
    checked.ranged(request.obedience, "obedience", 0, 100)
    checked.tick(request.world_tick, "world_tick")
    checked.done()
    arc = LifeArc(ori_id, stage or LifeStage.AWAKENING, request.sessions_in_stage)
    return arc, values, LivedSession(request.world_tick, expression, request.obedience)


def life_arc_response(result: LifeArcAdvance) -> cognition_pb2.AdvanceLifeArcResponse:
    return cognition_pb2.AdvanceLifeArcResponse(
        stage=result.arc.stage.value,
        sessions_in_stage=result.arc.sessions_in_stage,
        flourishing=result.flourishing,
        advanced=result.advanced,
        event_ids=event_ids(result.events),
    )


# --- SeedRelationship --------------------------------------------------------------------------


def seed_request(request: cognition_pb2.SeedRelationshipRequest) -> RelationshipSeed:
    checked = _Checked()
    ori_id = checked.ori(request.ori)
    other = checked.ori(request.counterpart, "counterpart")
    if ori_id and ori_id == other:
        checked.add("counterpart.ori_id", "an Ori cannot be seeded a relationship with itself")
    checked.text(request.edge_kind, "edge_kind")
    _strings(request.tags, "tags", checked)
    checked.tick(request.world_tick, "world_tick")
    checked.done()
    return RelationshipSeed(
        ori=request.ori,
        ori_is_minor=request.ori_is_minor,
        counterpart=request.counterpart,
        counterpart_is_minor=request.counterpart_is_minor,
        edge_kind=request.edge_kind,
        tags=frozenset(request.tags),
        world_tick=request.world_tick,
    )


def seed_response(result: CatalystResult) -> cognition_pb2.SeedRelationshipResponse:
    return cognition_pb2.SeedRelationshipResponse(
        seeded=result.seeded, reason=result.reason, event_ids=event_ids(result.events)
    )
