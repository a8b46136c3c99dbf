"""Crossroads: consequential choices, held open for a respected steward's counsel, decided by the Ori.

Score = value alignment + counsel bonus − risk penalty. Counsel is weighted (by the steward's
respect), never binding: the Ori's values keep the final say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from cognition_service.social.config import SocialConfig
from cognition_service.social.events import event_draft
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2
from services.errors import InvalidArgument


@dataclass(frozen=True)
class CrossroadsOption:
    option_id: str
    stances: Mapping[Domain, int] = field(default_factory=dict)
    risk: int = 0


@dataclass(frozen=True)
class Crossroads:
    crossroads_id: str
    options: Sequence[CrossroadsOption]
    opened_tick: int
    window_ticks: int


@dataclass(frozen=True)
class Bond:
    """The Ori's relationship with a steward, 0..100 each."""

    steward_id: str
    respect: int
    bond: int


@dataclass(frozen=True)
class Counsel:
    steward_id: str
    option_id: str


class CrossroadsStatus(StrEnum):
    HELD_FOR_COUNSEL = "held-for-counsel"
    DECIDED = "decided"


@dataclass(frozen=True)
class CrossroadsResolution:
    status: CrossroadsStatus
    chosen: str | None
    scores: Mapping[str, int]
    counsel_followed: bool
    events: tuple[biography_pb2.NewOriEvent, ...]


def holds_for_counsel(bond: Bond | None, config: SocialConfig) -> bool:
    return (
        bond is not None
        and bond.respect >= config.counsel_respect_min
        and bond.bond >= config.counsel_bond_min
    )


def resolve_crossroads(
    ori_id: str,
    values: RankedValues,
    crossroads: Crossroads,
    *,
    bond: Bond | None,
    counsel: Counsel | None,
    now_tick: int,
    config: SocialConfig,
) -> CrossroadsResolution:
    ids = [o.option_id for o in crossroads.options]
    if not ids:
        raise InvalidArgument.field("crossroads.options", "a crossroads needs at least one option")
    if counsel is not None and counsel.option_id not in ids:
        raise InvalidArgument.field("counsel.option_id", f"not an option of {crossroads.crossroads_id}")
    in_window = now_tick < crossroads.opened_tick + crossroads.window_ticks
    payload: dict[str, object] = {
        "arc_ref": f"crossroads:{crossroads.crossroads_id}",
        "crossroads_id": crossroads.crossroads_id,
    }
    if holds_for_counsel(bond, config) and counsel is None and in_window:
        event = event_draft(
            ori_id,
            biography_pb2.ORI_EVENT_KIND_ARC_ADVANCED,
            {**payload, "status": "active", "crossroads_status": CrossroadsStatus.HELD_FOR_COUNSEL.value},
            now_tick,
        )
        return CrossroadsResolution(CrossroadsStatus.HELD_FOR_COUNSEL, None, {}, False, (event,))
    # Counsel counts only from the steward the bond is with, scaled by how much the Ori respects them.
    respect = (
        bond.respect
        if bond is not None and counsel is not None and counsel.steward_id == bond.steward_id
        else 0
    )
    scores = {
        option.option_id: values.alignment(option.stances)
        + (
            config.counsel_bonus * respect // 100
            if counsel is not None and option.option_id == counsel.option_id
            else 0
        )
        - max(0, min(100, option.risk)) * config.risk_penalty_pct // 100
        for option in crossroads.options
    }
    chosen = max(ids, key=lambda i: (scores[i], -ids.index(i)))
    followed = counsel is not None and chosen == counsel.option_id
    event = event_draft(
        ori_id,
        biography_pb2.ORI_EVENT_KIND_ARC_ADVANCED,
        {
            **payload,
            "status": "completed",
            "crossroads_status": CrossroadsStatus.DECIDED.value,
            "chosen": chosen,
            "scores": scores,
            "counsel_option": counsel.option_id if counsel else "",
            "counsel_followed": followed,
        },
        now_tick,
    )
    return CrossroadsResolution(CrossroadsStatus.DECIDED, chosen, scores, followed, (event,))
