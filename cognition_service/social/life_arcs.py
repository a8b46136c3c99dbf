"""Life arcs: awakening → practicing → contributing → mentoring → legacy, paced by flourishing.

Flourishing is measured against the Ori's own ranked values only. How obedient the Ori was is
recorded with the session but is deliberately not an input to `flourishing`: the system rewards a
life true to the Ori, not a compliant one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from cognition_service.social.config import SocialConfig
from cognition_service.social.events import event_draft
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2


class LifeStage(StrEnum):
    AWAKENING = "awakening"
    PRACTICING = "practicing"
    CONTRIBUTING = "contributing"
    MENTORING = "mentoring"
    LEGACY = "legacy"


STAGES = tuple(LifeStage)
LIFE_ARC_REF = "life-arc"


@dataclass(frozen=True)
class LifeArc:
    ori_id: str
    stage: LifeStage = LifeStage.AWAKENING
    sessions_in_stage: int = 0


@dataclass(frozen=True)
class LivedSession:
    """How much a session expressed each value (0..100), and how compliant the Ori was (0..100)."""

    world_tick: int
    expression: Mapping[Domain, int]
    obedience: int = 0


@dataclass(frozen=True)
class LifeArcAdvance:
    arc: LifeArc
    flourishing: int
    advanced: bool
    events: tuple[biography_pb2.NewOriEvent, ...]


def flourishing(values: RankedValues, expression: Mapping[Domain, int]) -> int:
    """0..100: the priority-weighted share of its own values the Ori got to live; no obedience term."""
    total = sum(values.priorities.values())
    if total == 0:
        return 0
    lived = sum(p * max(0, min(100, expression.get(d, 0))) for d, p in values.priorities.items())
    return lived // total


def advance_life_arc(
    arc: LifeArc, values: RankedValues, session: LivedSession, config: SocialConfig
) -> LifeArcAdvance:
    score = flourishing(values, session.expression)
    sessions = arc.sessions_in_stage + 1
    ready = score >= config.stage_flourishing_min and sessions >= config.stage_sessions_min
    advanced = ready and arc.stage != LifeStage.LEGACY
    next_arc = (
        LifeArc(arc.ori_id, STAGES[STAGES.index(arc.stage) + 1], 0)
        if advanced
        else LifeArc(arc.ori_id, arc.stage, sessions)
    )
    event = event_draft(
        arc.ori_id,
        biography_pb2.ORI_EVENT_KIND_ARC_ADVANCED,
        {
            "arc_ref": LIFE_ARC_REF,
            "status": "active",
            "from_stage": arc.stage.value,
            "stage": next_arc.stage.value,
            "sessions_in_stage": next_arc.sessions_in_stage,
            "flourishing": score,
            "advanced": advanced,
        },
        session.world_tick,
    )
    return LifeArcAdvance(next_arc, score, advanced, (event,))
