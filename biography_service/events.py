"""The Ori event model: kinds, events as proposed and as recorded, and expected-version rules."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from json import encoder as json_encoder
from typing import Any, NamedTuple

ALL_STREAMS = "$all"

JsonObject = dict[str, Any]


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# The C encoder `_CANONICAL.encode` builds on every call, built once with the same settings (so the same
# text); it skips the circular-reference bookkeeping, which payloads (JSON trees) never need.
_MAKE_C_ENCODER: Callable[..., Callable[[object, int], list[str]]] | None = getattr(
    json_encoder, "c_make_encoder", None
)
_C_ENCODE = _MAKE_C_ENCODER and _MAKE_C_ENCODER(
    None, _CANONICAL.default, json_encoder.encode_basestring, None, ":", ",", True, False, False
)


def canonical_json(value: JsonObject) -> str:
    """One byte-exact text per value: sorted keys, no whitespace, UTF-8, no NaN or infinity."""
    if _C_ENCODE is None:
        return _CANONICAL.encode(value)
    return "".join(_C_ENCODE(value, 0))


class EventKind(StrEnum):
    """What happened in an Ori's life; the names are the stored form."""

    MEMORY_FORMED = "MemoryFormed"
    REFLECTED = "Reflected"
    RELATIONSHIP_CHANGED = "RelationshipChanged"
    ARC_ADVANCED = "ArcAdvanced"
    PERSONALITY_EVENT = "PersonalityEvent"
    VALUE_SHIFT = "ValueShift"
    GOAL_ARC_ADVANCED = "GoalArcAdvanced"
    CONSOLIDATED = "Consolidated"
    DIRECTIVE_REFUSED = "DirectiveRefused"
    # Written only by RegisterIdentities (never by Append or Consolidate): who the Ori is.
    IDENTITY_REGISTERED = "IdentityRegistered"
    IDENTITY_CHANGED = "IdentityChanged"


IDENTITY_KINDS = frozenset({EventKind.IDENTITY_REGISTERED, EventKind.IDENTITY_CHANGED})


class ExpectedKind(Enum):
    ANY = "any"
    NO_STREAM = "no stream"
    STREAM_EXISTS = "stream exists"
    EXACT = "exact"


@dataclass(frozen=True)
class ExpectedVersion:
    """The optimistic-concurrency condition an Append is made under."""

    kind: ExpectedKind
    version: int = 0

    def describe(self) -> str:
        return f"version {self.version}" if self.kind is ExpectedKind.EXACT else self.kind.value

    def admits(self, actual: int | None) -> bool:
        """Whether a stream whose last version is `actual` (None = no stream) satisfies this condition."""
        if self.kind is ExpectedKind.ANY:
            return True
        if self.kind is ExpectedKind.NO_STREAM:
            return actual is None
        if self.kind is ExpectedKind.STREAM_EXISTS:
            return actual is not None
        return actual == self.version


ANY = ExpectedVersion(ExpectedKind.ANY)
NO_STREAM = ExpectedVersion(ExpectedKind.NO_STREAM)
STREAM_EXISTS = ExpectedVersion(ExpectedKind.STREAM_EXISTS)


def exact(version: int) -> ExpectedVersion:
    return ExpectedVersion(ExpectedKind.EXACT, version)


class _NewEventFields(NamedTuple):
    event_id: str
    kind: EventKind
    payload: JsonObject
    world_tick: int
    provenance_ref: str
    # The payload's canonical encoding, computed once (it is sized, hashed and stored).
    payload_json: str


class NewEvent(_NewEventFields):
    """An event as a client proposes it; `event_id` is the idempotency key.

    A named tuple (immutable, like `RecordedEvent`), built for every proposed event at about half the
    cost of a frozen dataclass; `payload_json` defaults to the payload's canonical encoding, so two
    events with the same fields are equal. A different payload means a new event: `_replace` would
    keep the old encoding.
    """

    __slots__ = ()

    def __new__(  # noqa: PLR0917 - the tuple's fields, positional as in any named tuple
        cls,
        event_id: str,
        kind: EventKind,
        payload: JsonObject,
        world_tick: int,
        provenance_ref: str = "",
        payload_json: str = "",
    ) -> NewEvent:
        fields = (
            event_id,
            kind,
            payload,
            world_tick,
            provenance_ref,
            payload_json or canonical_json(payload),
        )
        return tuple.__new__(cls, fields)


class RecordedEvent(NamedTuple):
    """An event as the log holds it: placed in its stream and in the global order, and chained.

    A named tuple rather than a frozen dataclass: equally immutable, and built for every appended
    and every read event, at a seventh of the construction cost.
    """

    event_id: str
    ori_id: str
    stream_version: int
    global_position: int
    kind: EventKind
    payload: JsonObject
    world_tick: int
    recorded_at_us: int
    provenance_ref: str
    previous_hash: str
    hash: str

    def same_content(self, proposed: NewEvent) -> bool:
        """Whether `proposed` is this event re-sent (the client-supplied fields all match)."""
        return (
            self.event_id == proposed.event_id
            and self.kind == proposed.kind
            and self.payload == proposed.payload
            and self.world_tick == proposed.world_tick
            and self.provenance_ref == proposed.provenance_ref
        )


@dataclass(frozen=True)
class AppendResult:
    """Where an Append's events landed; `already_recorded` marks an idempotent repeat."""

    last_version: int
    first_global_position: int
    last_global_position: int
    already_recorded: bool
