"""What each recorded event changes in the read models: memories, relationships, arcs, personality, values."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from biography_service.events import EventKind, JsonObject, RecordedEvent
from biography_service.payloads import as_int

DEFAULT_SALIENCE_BP = 5_000
# The read-model sections, in the order snapshot totals are reported.
SECTIONS = ("memories", "relationships", "arc_refs", "personality_events", "values")


@dataclass(frozen=True)
class MemoryRow:
    ref: str
    stream_version: int
    seq: int
    text: str
    salience_bp: int
    world_tick: int


@dataclass(frozen=True)
class RelationshipUpsert:
    other_ori_id: str
    bond: int | None
    respect: int | None
    summary: str | None
    ended: bool
    stream_version: int


@dataclass(frozen=True)
class ArcUpsert:
    arc_ref: str
    status: str
    stream_version: int


@dataclass(frozen=True)
class PersonalityRow:
    ref: str
    stream_version: int
    seq: int
    summary: str


@dataclass(frozen=True)
class ValueUpsert:
    value_ref: str
    weight_bp: int
    stream_version: int


ProjectionOp = MemoryRow | RelationshipUpsert | ArcUpsert | PersonalityRow | ValueUpsert


def projection_ops(event: RecordedEvent) -> list[ProjectionOp]:
    """The read-model changes an event causes, in order; a consolidation applies each folded fragment."""
    if event.kind is EventKind.CONSOLIDATED:
        kind = EventKind(event.payload["fragment_kind"])
        ops: list[ProjectionOp] = []
        for seq, fragment in enumerate(event.payload["fragments"]):
            ops.extend(
                _ops(
                    kind,
                    fragment["payload"],
                    ref=fragment["fragment_id"],
                    version=event.stream_version,
                    seq=seq,
                    world_tick=as_int(fragment.get("world_tick"), event.world_tick),
                )
            )
        return ops
    return list(
        _ops(
            event.kind,
            event.payload,
            ref=event.event_id,
            version=event.stream_version,
            seq=0,
            world_tick=event.world_tick,
        )
    )


def _ops(
    kind: EventKind, payload: JsonObject, *, ref: str, version: int, seq: int, world_tick: int
) -> Iterator[ProjectionOp]:
    if kind in (EventKind.MEMORY_FORMED, EventKind.REFLECTED):
        salience = as_int(payload.get("salience_bp"), DEFAULT_SALIENCE_BP)
        yield MemoryRow(ref, version, seq, payload["text"], salience, world_tick)
    elif kind is EventKind.RELATIONSHIP_CHANGED:
        bond, respect = payload.get("bond"), payload.get("respect")
        yield RelationshipUpsert(
            payload["other_ori_id"],
            None if bond is None else int(bond),
            None if respect is None else int(respect),
            payload.get("summary"),
            bool(payload.get("ended", False)),
            version,
        )
    elif kind in (EventKind.ARC_ADVANCED, EventKind.GOAL_ARC_ADVANCED):
        yield ArcUpsert(payload["arc_ref"], payload.get("status", "active"), version)
    elif kind is EventKind.PERSONALITY_EVENT:
        yield PersonalityRow(ref, version, seq, payload["summary"])
    elif kind is EventKind.VALUE_SHIFT:
        yield ValueUpsert(payload["value_ref"], int(payload["weight_bp"]), version)


@dataclass(frozen=True)
class MemoryView:
    ref: str
    text: str
    salience_bp: int
    world_tick: int


@dataclass(frozen=True)
class RelationshipView:
    other_ori_id: str
    bond: int
    respect: int
    summary: str


@dataclass(frozen=True)
class ValueView:
    value_ref: str
    weight_bp: int


@dataclass(frozen=True)
class ProjectionSnapshot:
    """One Ori's read models, each section ranked best-first and capped, with the full section sizes."""

    ori_id: str
    stream_version: int | None
    memories: list[MemoryView]
    relationships: list[RelationshipView]
    arc_refs: list[str]
    personality_events: list[str]
    values: list[ValueView]
    # Section name -> how many items the projection holds in total (at least the listed ones).
    totals: dict[str, int]
