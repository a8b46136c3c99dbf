"""Rebuild the social layer's state of one Ori from its biography events (restart-safe)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from cognition_service.social.goal_arcs import GoalArc, GoalStage, StageStatus
from cognition_service.social.life_arcs import LifeArc, LifeStage
from cognition_service.social.values import Domain, RankedValues
from egbe.v1 import biography_pb2

K = biography_pb2


@dataclass
class SocialState:
    """Everything the social layer wrote, as of the last event folded."""

    values: RankedValues | None = None
    goal_arcs: dict[str, GoalArc] = field(default_factory=dict)
    life_arc: LifeArc | None = None
    objectives: dict[str, str] = field(default_factory=dict)
    crossroads: dict[str, str] = field(default_factory=dict)
    relationships: dict[str, str] = field(default_factory=dict)


def _stage(raw: dict[str, Any]) -> GoalStage:
    return GoalStage(
        stage_id=raw["id"],
        status=StageStatus(raw["status"]),
        needs_support=frozenset(raw.get("needs_support", ())),
        emergent=bool(raw.get("emergent", False)),
        detour=bool(raw.get("detour", False)),
    )


def rehydrate(
    ori_id: str, events: Iterable[biography_pb2.OriEvent | biography_pb2.NewOriEvent]
) -> SocialState:
    """Fold events in stream order; kinds and payloads the social layer did not write are skipped."""
    state = SocialState()
    for event in events:
        payload = json_format.MessageToDict(event.payload)
        kind = event.kind
        if kind == K.ORI_EVENT_KIND_VALUE_SHIFT and "after" in payload:
            state.values = RankedValues.of({Domain(d): int(p) for d, p in payload["after"].items()})
        elif kind == K.ORI_EVENT_KIND_GOAL_ARC_ADVANCED and "stages" in payload:
            stages = tuple(_stage(s) for s in payload["stages"])
            state.goal_arcs[payload["arc_ref"]] = GoalArc(payload["arc_ref"], ori_id, stages)
        elif kind in (K.ORI_EVENT_KIND_GOAL_ARC_ADVANCED, K.ORI_EVENT_KIND_DIRECTIVE_REFUSED) and (
            "objective_id" in payload
        ):
            state.objectives[payload["objective_id"]] = payload["outcome"]
        elif kind == K.ORI_EVENT_KIND_ARC_ADVANCED and "crossroads_id" in payload:
            state.crossroads[payload["crossroads_id"]] = payload.get("chosen") or payload["crossroads_status"]
        elif kind == K.ORI_EVENT_KIND_ARC_ADVANCED and "stage" in payload:
            state.life_arc = LifeArc(ori_id, LifeStage(payload["stage"]), int(payload["sessions_in_stage"]))
        elif kind == K.ORI_EVENT_KIND_RELATIONSHIP_CHANGED and "edge_kind" in payload:
            state.relationships[payload["other_ori_id"]] = payload["edge_kind"]
    return state
