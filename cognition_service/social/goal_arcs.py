"""Multi-session goal arcs owned by one Ori: stages advance, block on missing support, take detours."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from cognition_service.social.events import event_draft
from egbe.v1 import biography_pb2


class StageStatus(StrEnum):
    PLANNED = "planned"
    ACTIVE = "active"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    SKIPPED = "skipped"


class SessionOutcome(StrEnum):
    ADVANCED = "advanced"
    IN_PROGRESS = "in-progress"
    STALLED = "stalled"
    FINISHED = "finished"
    BLOCKED_NOT_OWNER = "blocked-not-owner"


@dataclass(frozen=True)
class GoalStage:
    stage_id: str
    status: StageStatus = StageStatus.PLANNED
    needs_support: frozenset[str] = frozenset()
    emergent: bool = False
    detour: bool = False


@dataclass(frozen=True)
class GoalArc:
    arc_id: str
    owner_ori_id: str
    stages: tuple[GoalStage, ...]


@dataclass(frozen=True)
class Session:
    """One session's news for the arc."""

    actor_ori_id: str
    world_tick: int
    completed_active: bool = False
    support: frozenset[str] = frozenset()
    emergent_goals: Sequence[str] = ()
    detour: str | None = None
    skip: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ArcAdvance:
    arc: GoalArc
    outcome: SessionOutcome
    missing_support: tuple[str, ...]
    events: tuple[biography_pb2.NewOriEvent, ...]


def _current(stages: list[GoalStage]) -> int | None:
    """The stage in play: the active or blocked one, else the first planned."""
    for i, stage in enumerate(stages):
        if stage.status in (StageStatus.ACTIVE, StageStatus.BLOCKED):
            return i
    for i, stage in enumerate(stages):
        if stage.status == StageStatus.PLANNED:
            return i
    return None


def advance_goal_arc(arc: GoalArc, session: Session) -> ArcAdvance:
    """Only the owning Ori advances its arc; anyone else gets `blocked-not-owner` and no change."""
    if session.actor_ori_id != arc.owner_ori_id:
        return ArcAdvance(arc, SessionOutcome.BLOCKED_NOT_OWNER, (), ())
    stages = [
        replace(s, status=StageStatus.SKIPPED)
        if s.stage_id in session.skip and s.status in (StageStatus.PLANNED, StageStatus.BLOCKED)
        else s
        for s in arc.stages
    ]
    stages.extend(GoalStage(goal, emergent=True) for goal in session.emergent_goals)
    at = _current(stages)
    if session.detour and at is not None:
        # A detour goes in front of the stage in play, which waits as planned.
        stages[at] = replace(stages[at], status=StageStatus.PLANNED)
        stages.insert(at, GoalStage(session.detour, detour=True))
    missing: tuple[str, ...] = ()
    at = _current(stages)
    if at is None:
        outcome = SessionOutcome.FINISHED
    else:
        stage = stages[at]
        missing = tuple(sorted(stage.needs_support - session.support))
        if missing:
            stages[at] = replace(stage, status=StageStatus.BLOCKED)
            outcome = SessionOutcome.STALLED
        elif session.completed_active and stage.status in (StageStatus.ACTIVE, StageStatus.BLOCKED):
            stages[at] = replace(stage, status=StageStatus.COMPLETED)
            following = _current(stages)
            if following is not None:
                stages[following] = replace(stages[following], status=StageStatus.ACTIVE)
            outcome = SessionOutcome.ADVANCED if following is not None else SessionOutcome.FINISHED
        else:
            stages[at] = replace(stage, status=StageStatus.ACTIVE)
            outcome = SessionOutcome.IN_PROGRESS
    advanced = GoalArc(arc.arc_id, arc.owner_ori_id, tuple(stages))
    events: tuple[biography_pb2.NewOriEvent, ...] = ()
    if advanced != arc:
        events = (
            event_draft(
                arc.owner_ori_id,
                biography_pb2.ORI_EVENT_KIND_GOAL_ARC_ADVANCED,
                {
                    "arc_ref": arc.arc_id,
                    "status": "completed" if outcome == SessionOutcome.FINISHED else "active",
                    "outcome": outcome.value,
                    "missing_support": list(missing),
                    "stages": [
                        {
                            "id": s.stage_id,
                            "status": s.status.value,
                            "needs_support": sorted(s.needs_support),
                            "emergent": s.emergent,
                            "detour": s.detour,
                        }
                        for s in stages
                    ],
                },
                session.world_tick,
            ),
        )
    return ArcAdvance(advanced, outcome, missing, events)
