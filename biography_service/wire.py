"""Proto ↔ domain, in one place: request validation (field-named violations) and response building."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from google.protobuf import json_format, struct_pb2

from biography_service.config import BiographyConfig
from biography_service.consolidation import Fragment
from biography_service.events import (
    ALL_STREAMS,
    ANY,
    IDENTITY_KINDS,
    NO_STREAM,
    STREAM_EXISTS,
    EventKind,
    ExpectedVersion,
    JsonObject,
    NewEvent,
    RecordedEvent,
    canonical_json,
    exact,
)
from biography_service.payloads import payload_problems
from biography_service.projections import MemoryView, RelationshipView, ValueView
from biography_service.rehydration import LoadBudget, WorkingContext
from egbe.v1 import biography_pb2
from services.errors import FieldViolation, InvalidArgument
from services.protocol_limits import STORED_INTEGER_MAX

KINDS: dict[int, EventKind] = {
    biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED: EventKind.MEMORY_FORMED,
    biography_pb2.ORI_EVENT_KIND_REFLECTED: EventKind.REFLECTED,
    biography_pb2.ORI_EVENT_KIND_RELATIONSHIP_CHANGED: EventKind.RELATIONSHIP_CHANGED,
    biography_pb2.ORI_EVENT_KIND_ARC_ADVANCED: EventKind.ARC_ADVANCED,
    biography_pb2.ORI_EVENT_KIND_PERSONALITY_EVENT: EventKind.PERSONALITY_EVENT,
    biography_pb2.ORI_EVENT_KIND_VALUE_SHIFT: EventKind.VALUE_SHIFT,
    biography_pb2.ORI_EVENT_KIND_GOAL_ARC_ADVANCED: EventKind.GOAL_ARC_ADVANCED,
    biography_pb2.ORI_EVENT_KIND_CONSOLIDATED: EventKind.CONSOLIDATED,
    biography_pb2.ORI_EVENT_KIND_DIRECTIVE_REFUSED: EventKind.DIRECTIVE_REFUSED,
    biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED: EventKind.IDENTITY_REGISTERED,
    biography_pb2.ORI_EVENT_KIND_IDENTITY_CHANGED: EventKind.IDENTITY_CHANGED,
}
KIND_NUMBERS = {kind: number for number, kind in KINDS.items()}
# What Append and Consolidate accept: identity events are recorded by RegisterIdentities alone.
_PROPOSABLE = {number: kind for number, kind in KINDS.items() if kind not in IDENTITY_KINDS}


class Violations:
    """Collects every problem in a request, then refuses it whole."""

    def __init__(self) -> None:
        self.found: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self.found.append(FieldViolation(field, description))

    def raise_if_any(self) -> None:
        if self.found:
            raise InvalidArgument(self.found)


def ori_id_problems(value: str, field: str, config: BiographyConfig, problems: Violations) -> None:
    if not value:
        problems.add(field, "must not be empty")
    elif len(value) > config.max_ori_id_chars:
        problems.add(field, f"must be at most {config.max_ori_id_chars} characters")
    elif value.startswith("$"):
        problems.add(field, 'must not start with "$" (reserved for "$all")')
    elif _CONTROL.search(value):
        problems.add(field, "must not contain control characters")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _in_range(value: int, field: str, problems: Violations) -> None:
    if value > STORED_INTEGER_MAX:
        problems.add(field, f"must be at most {STORED_INTEGER_MAX}")


def _plain(value: struct_pb2.Value) -> Any:
    """A Struct value as plain JSON data (what json_format.MessageToDict gives, at a third of the cost)."""
    return _plain_of(value, value.WhichOneof("kind"))


def _plain_of(value: struct_pb2.Value, kind: str | None) -> Any:
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return struct_to_dict(value.struct_value)
    if kind == "list_value":
        return [_plain(item) for item in value.list_value.values]
    return None


def struct_to_dict(message: struct_pb2.Struct) -> JsonObject:
    # Key lookups, not .items(): the map container's items() is the slow generic mixin. The loop is
    # spelled out (no comprehension, no call per value) because it runs for every appended payload.
    fields = message.fields
    plain: JsonObject = {}
    for key in fields:
        value = fields[key]
        plain[key] = _plain_of(value, value.WhichOneof("kind"))
    return plain


def _payload(
    message: struct_pb2.Struct, kind: EventKind | None, config: BiographyConfig
) -> tuple[JsonObject, str, list[tuple[str, str]]]:
    """The payload, its canonical encoding (empty when it has none) and its problems.

    Each problem's path is relative to the payload field ("" for the field itself, ".text" inside it),
    so callers build field names only for a payload that has problems.
    """
    payload = struct_to_dict(message)
    try:
        encoded = canonical_json(payload)
    except ValueError:
        return payload, "", [("", "must not contain NaN or infinite numbers")]
    if "\\u0000" in encoded and _holds_nul(payload):
        # PostgreSQL stores no NUL in text: refused here, on every backend alike.
        return payload, encoded, [("", "must not contain NUL characters")]
    size = len(encoded) if encoded.isascii() else len(encoded.encode("utf-8"))
    if size > config.max_payload_bytes:
        return payload, encoded, [("", f"is {size} bytes; the limit is {config.max_payload_bytes}")]
    if kind is None:
        return payload, encoded, []
    return payload, encoded, [(f".{inner}", why) for inner, why in payload_problems(kind, payload)]


def _holds_nul(value: Any) -> bool:
    """Whether a NUL is in any key or string of the JSON value (its encoding can only hint at one:
    `\\u0000` is also how a backslash followed by "u0000" is written)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def _kind(number: int, field: str, problems: Violations) -> EventKind | None:
    kind = _PROPOSABLE.get(number)
    if kind is None:
        problems.add(field, _unproposable(number))
    return kind


def _unproposable(number: int) -> str:
    if number in KINDS:
        return "identity events are recorded by RegisterIdentities"
    return f"unknown or unspecified event kind {number}"


def _expected(message: biography_pb2.ExpectedVersion, problems: Violations) -> ExpectedVersion:
    kinds = biography_pb2.ExpectedVersion
    if message.kind == kinds.KIND_EXACT:
        _in_range(message.version, "expected_version.version", problems)
        return exact(message.version)
    if message.version:
        problems.add("expected_version.version", "is only meaningful when kind is KIND_EXACT")
    expected = _EXPECTED.get(message.kind)
    if expected is None:
        # Never read as "any": a kind this service does not know must not switch the check off.
        problems.add("expected_version.kind", f"unknown expected-version kind {message.kind}")
        return ANY
    return expected


# An unset expectation (KIND_UNSPECIFIED) means "any": the caller asked for no concurrency check.
_EXPECTED = {
    biography_pb2.ExpectedVersion.KIND_UNSPECIFIED: ANY,
    biography_pb2.ExpectedVersion.KIND_ANY: ANY,
    biography_pb2.ExpectedVersion.KIND_NO_STREAM: NO_STREAM,
    biography_pb2.ExpectedVersion.KIND_STREAM_EXISTS: STREAM_EXISTS,
}


def append_request(
    request: biography_pb2.AppendRequest, config: BiographyConfig
) -> tuple[ExpectedVersion, list[NewEvent]]:
    problems = Violations()
    ori_id_problems(request.ori_id, "ori_id", config, problems)
    expected = _expected(request.expected_version, problems)
    if not request.events:
        problems.add("events", "must hold at least one event")
    elif len(request.events) > config.max_batch_events:
        problems.add("events", f"holds {len(request.events)} events; the limit is {config.max_batch_events}")
    events: list[NewEvent] = []
    seen: set[str] = set()
    # Field names are built only for a problem: building them per event cost more than checking it.
    normal_uuid = _NORMAL_UUID.fullmatch
    for i, new in enumerate(request.events[: config.max_batch_events]):
        raw_id = new.event_id
        event_id = raw_id if normal_uuid(raw_id) else _event_id(raw_id, i, problems)
        if event_id is not None:
            if event_id in seen:
                problems.add(f"events[{i}].event_id", "repeats an earlier event id of this batch")
            seen.add(event_id)
        kind = _PROPOSABLE.get(new.kind)
        if kind is None:
            problems.add(f"events[{i}].kind", _unproposable(new.kind))
        payload, encoded, found = _payload(new.payload, kind, config)
        for inner, why in found:
            problems.add(f"events[{i}].payload{inner}", why)
        world_tick = new.world_tick
        if world_tick > STORED_INTEGER_MAX:
            _in_range(world_tick, f"events[{i}].world_tick", problems)
        provenance_ref = new.provenance_ref
        if len(provenance_ref) > config.max_provenance_ref_chars or "\x00" in provenance_ref:
            _provenance_problems(provenance_ref, f"events[{i}].provenance_ref", config, problems)
        elif kind is not None and event_id is not None and not found:
            # Built only from fields that passed: an event is never built from a refused payload.
            events.append(NewEvent(event_id, kind, payload, world_tick, provenance_ref, encoded))
    problems.raise_if_any()
    return expected, events


def _provenance_problems(value: str, field: str, config: BiographyConfig, problems: Violations) -> None:
    if len(value) > config.max_provenance_ref_chars:
        problems.add(field, f"is {len(value)} characters; the limit is {config.max_provenance_ref_chars}")
    if "\x00" in value:
        problems.add(field, "must not contain NUL characters")


# The form `str(uuid.UUID(...))` gives; what clients send almost always, checked without parsing.
_NORMAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _event_id(value: str, index: int, problems: Violations) -> str | None:
    """An event id not in the normal form: its normal form, or a problem."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        problems.add(f"events[{index}].event_id", "must be a UUID")
        return None


@dataclass(frozen=True)
class ReadCursor:
    ori_id: str
    start: int | None
    page_size: int
    backward: bool


def _encode_token(ori_id: str, start: int, backward: bool) -> str:
    body = json.dumps({"ori": ori_id, "from": start, "backward": backward}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).decode()


def read_request(request: biography_pb2.ReadRequest, config: BiographyConfig) -> ReadCursor:
    problems = Violations()
    if request.ori_id != ALL_STREAMS:
        ori_id_problems(request.ori_id, "ori_id", config, problems)
    if request.page_size < 0:
        problems.add("page_size", "must not be negative")
    backward = request.direction == biography_pb2.READ_DIRECTION_BACKWARD
    if backward and request.ori_id == ALL_STREAMS:
        problems.add("direction", '"$all" reads forward only')
    requested_from: int = getattr(request, "from")  # `from` is a Python keyword
    _in_range(requested_from, "from", problems)
    start: int | None = requested_from
    if backward and not start:
        start = None  # backward from 0 means "from the end of the stream"
    if request.page_token:
        start, backward = _decode_token(request.page_token, request.ori_id, problems)
    problems.raise_if_any()
    page_size = min(request.page_size or config.default_page_size, config.max_page_size)
    return ReadCursor(request.ori_id, start, page_size, backward)


def _decode_token(token: str, ori_id: str, problems: Violations) -> tuple[int | None, bool]:
    try:
        body = json.loads(base64.urlsafe_b64decode(token.encode()))
        start, backward, token_ori = int(body["from"]), bool(body["backward"]), str(body["ori"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        problems.add("page_token", "is not a token this service issued")
        return None, False
    if token_ori != ori_id:
        problems.add("page_token", "was issued for another stream")
    return start, backward


# Each event of a page costs its own size plus its field tag and length prefix (at most 1 + 5 bytes).
_EVENT_FRAMING_BYTES = 6


def read_response(
    events: list[RecordedEvent], cursor: ReadCursor, next_from: int | None, max_bytes: int
) -> biography_pb2.ReadResponse:
    """The page's events while they fit `max_bytes` encoded (the first always does); the token resumes
    at the first event left out, so a page is bounded by bytes as well as by count."""
    messages: list[biography_pb2.OriEvent] = []
    size = 0
    for event in events:
        message = event_message(event)
        size += message.ByteSize() + _EVENT_FRAMING_BYTES
        if messages and size > max_bytes:
            next_from = event.global_position if cursor.ori_id == ALL_STREAMS else event.stream_version
            break
        messages.append(message)
    token = "" if next_from is None else _encode_token(cursor.ori_id, next_from, cursor.backward)
    return biography_pb2.ReadResponse(events=messages, next_page_token=token)


def event_message(event: RecordedEvent) -> biography_pb2.OriEvent:
    message = biography_pb2.OriEvent(
        event_id=event.event_id,
        ori_id=event.ori_id,
        stream_version=event.stream_version,
        global_position=event.global_position,
        kind=cast("biography_pb2.OriEventKind.ValueType", KIND_NUMBERS[event.kind]),
        world_tick=event.world_tick,
        provenance_ref=event.provenance_ref,
        previous_hash=event.previous_hash,
        hash=event.hash,
    )
    message.payload.update(event.payload)
    message.recorded_at.FromMicroseconds(event.recorded_at_us)
    return message


def subscribe_request(
    request: biography_pb2.SubscribeRequest, config: BiographyConfig
) -> tuple[int, list[str]]:
    problems = Violations()
    _in_range(request.from_position, "from_position", problems)
    for i, ori_id in enumerate(request.ori_ids):
        ori_id_problems(ori_id, f"ori_ids[{i}]", config, problems)
    problems.raise_if_any()
    return request.from_position, sorted(set(request.ori_ids))


def rehydrate_request(request: biography_pb2.RehydrateRequest, config: BiographyConfig) -> LoadBudget:
    problems = Violations()
    ori_id_problems(request.ori_id, "ori_id", config, problems)
    problems.raise_if_any()
    return LoadBudget(
        max_events=request.max_events or config.rehydrate_max_events,
        max_chars=request.max_chars or config.rehydrate_max_chars,
    )


def rehydrate_response(context: WorkingContext) -> biography_pb2.RehydrateResponse:
    response = biography_pb2.RehydrateResponse(
        ori_id=context.ori_id,
        stream_version=context.stream_version or 0,
        memories=[_memory(m) for m in context.memories],
        relationships=[_relationship(r) for r in context.relationships],
        arc_refs=context.arc_refs,
        personality_events=context.personality_events,
        values=[_value(v) for v in context.values],
        chars_used=context.chars_used,
        omitted=context.omitted,
        identity_version=context.identity_version,
    )
    if context.identity is not None:
        response.identity.MergeFromString(_identity_wire(canonical_json(context.identity)))
    return response


@functools.lru_cache(maxsize=4_096)
def _identity_wire(identity: str) -> bytes:
    """An identity's protobuf encoding, by its canonical JSON: parsing JSON into a message is pure
    Python and an Ori's identity rarely changes, so each one is parsed once."""
    return json_format.Parse(identity, biography_pb2.OriIdentity()).SerializeToString()


def _memory(memory: MemoryView) -> biography_pb2.MemoryItem:
    return biography_pb2.MemoryItem(
        event_id=memory.ref, text=memory.text, salience_bp=memory.salience_bp, world_tick=memory.world_tick
    )


def _relationship(relationship: RelationshipView) -> biography_pb2.RelationshipItem:
    return biography_pb2.RelationshipItem(
        other_ori_id=relationship.other_ori_id,
        bond=relationship.bond,
        respect=relationship.respect,
        summary=relationship.summary,
    )


def _value(value: ValueView) -> biography_pb2.ValueItem:
    return biography_pb2.ValueItem(value_ref=value.value_ref, weight_bp=value.weight_bp)


def consolidate_request(request: biography_pb2.ConsolidateRequest, config: BiographyConfig) -> list[Fragment]:
    problems = Violations()
    ori_id_problems(request.ori_id, "ori_id", config, problems)
    if len(request.fragments) > config.max_batch_events:
        problems.add("fragments", f"holds {len(request.fragments)}; the limit is {config.max_batch_events}")
    fragments = list(_fragments(request, config, problems))
    problems.raise_if_any()
    return fragments


def _fragments(
    request: biography_pb2.ConsolidateRequest, config: BiographyConfig, problems: Violations
) -> Iterator[Fragment]:
    seen: set[str] = set()
    for i, fragment in enumerate(request.fragments[: config.max_batch_events]):
        field = f"fragments[{i}]"
        if not fragment.fragment_id.strip():
            problems.add(f"{field}.fragment_id", "must not be blank")
        elif fragment.fragment_id in seen:
            problems.add(f"{field}.fragment_id", "repeats an earlier fragment id")
        seen.add(fragment.fragment_id)
        kind = _kind(fragment.kind, f"{field}.kind", problems)
        if kind is EventKind.CONSOLIDATED:
            problems.add(f"{field}.kind", "a fragment cannot be a consolidation")
            kind = None
        payload, _, found = _payload(fragment.payload, kind, config)
        for inner, why in found:
            problems.add(f"{field}.payload{inner}", why)
        _in_range(fragment.world_tick, f"{field}.world_tick", problems)
        if kind is not None:
            yield Fragment(fragment.fragment_id, kind, payload, fragment.world_tick)


def verify_request(request: biography_pb2.VerifyChainRequest, config: BiographyConfig) -> str:
    problems = Violations()
    ori_id_problems(request.ori_id, "ori_id", config, problems)
    problems.raise_if_any()
    return request.ori_id
