"""What each recorded event changes in the read models: memories, relationships, arcs, personality, values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from biography_service.events import IDENTITY_KINDS, EventKind, JsonObject, RecordedEvent, canonical_json
from biography_service.payloads import as_int

DEFAULT_SALIENCE_BP = 5_000
# The key an identity event's payload carries beside the OriIdentity's own fields.
IDENTITY_VERSION_KEY = "identity_version"
# The read-model sections, in the order snapshot totals are reported.
SECTIONS = ("memories", "relationships", "arc_refs", "personality_events", "values")


def memory_key(text: str) -> str:
    """What makes two memories the same fact: their text with whitespace runs collapsed, lower-cased."""
    return " ".join(text.split()).lower()


class MemoryRow(NamedTuple):
    ref: str
    stream_version: int
    seq: int
    text: str
    salience_bp: int
    world_tick: int
    # memory_key(text): rehydration folds the rows that share it into one item.
    text_key: str
    # How many repeats the row stands for (a consolidated fragment that folded repeats: more than 1).
    copies: int = 1
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
    # The stream version of the identity event that set the weight; None when a ValueShift set it.
    identity_stream_version: int | None = None


class IdentityValuesPrune(NamedTuple):
    """Drop the values an earlier identity set that no ValueShift has changed since."""

    identity_stream_version: int


class IdentityUpsert(NamedTuple):
    identity_version: int
    # canonical_json of the identity (the event payload without "identity_version").
    identity: str
    stream_version: int


# Named tuples, not frozen dataclasses: one is built per appended event, and they build far faster.
# Each op's fields are its table's columns after ori_id, in order (store/sql.py binds them as they
# are); RelationshipUpsert alone is bound field by field (absent values keep the stored ones).
ProjectionOp = (
    MemoryRow
    | RelationshipUpsert
    | ArcUpsert
    | PersonalityRow
    | ValueUpsert
    | IdentityValuesPrune
    | IdentityUpsert
)


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
                ),
                as_int(fragment.get("count"), 1),
            )
            for seq, fragment in enumerate(event.payload["fragments"])
        ]
    if event.kind in IDENTITY_KINDS:
        return _identity(event)
    build = _BUILDERS.get(event.kind)
    if build is None:
        return []
    return [build(event.payload, event.event_id, event.stream_version, 0, event.world_tick)]


def _folded(op: ProjectionOp, copies: int) -> ProjectionOp:
    """A consolidated fragment's change: its memory or personality row is marked as folded."""
    if isinstance(op, MemoryRow):
        return op._replace(folded=1, copies=copies)
    if isinstance(op, PersonalityRow):
        return op._replace(folded=1)
    return op


def _identity(event: RecordedEvent) -> list[ProjectionOp]:
    """The identity itself, and its ranked values: each value's weight is set by the latest event that
    named it (this identity or a ValueShift), and values only an earlier identity set are dropped."""
    identity = {key: value for key, value in event.payload.items() if key != IDENTITY_VERSION_KEY}
    version = event.stream_version
    values: list[ProjectionOp] = [
        ValueUpsert(value["value_ref"], as_int(value.get("weight_bp"), 0), version, version)
        for value in identity.get("values", [])
    ]
    return [
        IdentityUpsert(int(event.payload[IDENTITY_VERSION_KEY]), canonical_json(identity), version),
        *values,
        IdentityValuesPrune(version),
    ]


def _memory(payload: JsonObject, ref: str, version: int, seq: int, world_tick: int) -> ProjectionOp:
    salience = as_int(payload.get("salience_bp"), DEFAULT_SALIENCE_BP)
    text = payload["text"]
    return MemoryRow(ref, version, seq, text, salience, world_tick, memory_key(text))


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
    """One memory item; repeats of one fact are folded into it and its text ends with " (×N)"."""

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
    # The latest identity (the OriIdentity as protobuf JSON) and its version; None and 0 before any.
    identity: JsonObject | None = None
    identity_version: int = 0
