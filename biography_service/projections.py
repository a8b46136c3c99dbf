"""What each recorded event changes in the read models: memories, relationships, arcs, personality, values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from biography_service.events import EventKind, JsonObject, RecordedEvent
from biography_service.payloads import as_int

DEFAULT_SALIENCE_BP = 5_000
# The read-model sections, in the order snapshot totals are reported.
SECTIONS = ("memories", "relationships", "arc_refs", "personality_events", "values")


class MemoryRow(NamedTuple):
    ref: str
    stream_version: int
    seq: int
    text: str
    salience_bp: int
    world_tick: int
    # 1 for a consolidation fragment's row (ref = fragment id, which a later consolidation may fold
    # again: the row is then updated), 0 for an event's own row (ref = its event id, never repeated).
    folded: int = 0


class RelationshipUpsert(NamedTuple):
    other_ori_id: str
    bond: int | None
    respect: int | None
    summary: str | None
    ended: bool
    stream_version: int


class ArcUpsert(NamedTuple):
    arc_ref: str
    status: str
    stream_version: int


class PersonalityRow(NamedTuple):
    ref: str
    stream_version: int
    seq: int
    summary: str
    folded: int = 0  # as MemoryRow.folded


class ValueUpsert(NamedTuple):
    value_ref: str
    weight_bp: int
    stream_version: int


# Named tuples, not frozen dataclasses: one is built per appended event, and they build far faster.
# Each op's fields are its table's columns after ori_id, in order (store/sql.py binds them as they
# are); RelationshipUpsert alone is bound field by field (absent values keep the stored ones).
ProjectionOp = MemoryRow | RelationshipUpsert | ArcUpsert | PersonalityRow | ValueUpsert


def projection_ops(event: RecordedEvent) -> list[ProjectionOp]:
    """The read-model changes an event causes, in order; a consolidation applies each folded fragment."""
    if event.kind is EventKind.CONSOLIDATED:
        build = _BUILDERS.get(EventKind(event.payload["fragment_kind"]))
        if build is None:
            return []
        return [
            _folded(
                build(
                    fragment["payload"],
                    fragment["fragment_id"],
                    event.stream_version,
                    seq,
                    as_int(fragment.get("world_tick"), event.world_tick),
                )
            )
            for seq, fragment in enumerate(event.payload["fragments"])
        ]
    build = _BUILDERS.get(event.kind)
    if build is None:
        return []
    return [build(event.payload, event.event_id, event.stream_version, 0, event.world_tick)]


def _folded(op: ProjectionOp) -> ProjectionOp:
    """A consolidated fragment's change: its memory or personality row is marked as folded."""
    if isinstance(op, MemoryRow | PersonalityRow):
        return op._replace(folded=1)
    return op


def _memory(payload: JsonObject, ref: str, version: int, seq: int, world_tick: int) -> ProjectionOp:
    salience = as_int(payload.get("salience_bp"), DEFAULT_SALIENCE_BP)
    return MemoryRow(ref, version, seq, payload["text"], salience, world_tick)


def _relationship(payload: JsonObject, ref: str, version: int, seq: int, world_tick: int) -> ProjectionOp:
    bond, respect = payload.get("bond"), payload.get("respect")
    return RelationshipUpsert(
        payload["other_ori_id"],
        None if bond is None else int(bond),
        None if respect is None else int(respect),
        payload.get("summary"),
        bool(payload.get("ended", False)),
        version,
    )


def _arc(payload: JsonObject, ref: str, version: int, seq: int, world_tick: int) -> ProjectionOp:
    return ArcUpsert(payload["arc_ref"], payload.get("status", "active"), version)


def _personality(payload: JsonObject, ref: str, version: int, seq: int, world_tick: int) -> ProjectionOp:
    return PersonalityRow(ref, version, seq, payload["summary"])


def _value(payload: JsonObject, ref: str, version: int, seq: int, world_tick: int) -> ProjectionOp:
    return ValueUpsert(payload["value_ref"], int(payload["weight_bp"]), version)


# (payload, ref, stream version, seq within the event, world tick) -> the change; kinds absent here
# (DirectiveRefused) change no read model.
_BUILDERS: dict[EventKind, Callable[[JsonObject, str, int, int, int], ProjectionOp]] = {
    EventKind.MEMORY_FORMED: _memory,
    EventKind.REFLECTED: _memory,
    EventKind.RELATIONSHIP_CHANGED: _relationship,
    EventKind.ARC_ADVANCED: _arc,
    EventKind.GOAL_ARC_ADVANCED: _arc,
    EventKind.PERSONALITY_EVENT: _personality,
    EventKind.VALUE_SHIFT: _value,
}


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
