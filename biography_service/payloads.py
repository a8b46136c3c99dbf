"""What each event kind's payload must carry, so projections can rely on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from biography_service.events import EventKind, JsonObject

SALIENCE_MAX_BP = 10_000
RELATIONSHIP_BOUND = 100
ARC_STATUSES = ("active", "completed", "abandoned")

# (field path inside the payload, what is wrong)
Problem = tuple[str, str]
Checker = Callable[[JsonObject], Iterator[Problem]]


def _text(payload: JsonObject, key: str, *, required: bool) -> Iterator[Problem]:
    value = payload.get(key)
    if value is None:
        if required:
            yield key, "is required"
    elif not isinstance(value, str) or not value.strip():
        yield key, "must be a non-empty string"


def _number(payload: JsonObject, key: str, low: float, high: float, *, required: bool) -> Iterator[Problem]:
    value = payload.get(key)
    if value is None:
        if required:
            yield key, "is required"
    elif isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        yield key, f"must be a number in [{low:g}, {high:g}]"


def _memory(payload: JsonObject) -> Iterator[Problem]:
    yield from _text(payload, "text", required=True)
    yield from _number(payload, "salience_bp", 0, SALIENCE_MAX_BP, required=False)


def _relationship(payload: JsonObject) -> Iterator[Problem]:
    yield from _text(payload, "other_ori_id", required=True)
    for key in ("bond", "respect"):
        yield from _number(payload, key, -RELATIONSHIP_BOUND, RELATIONSHIP_BOUND, required=False)
    yield from _text(payload, "summary", required=False)
    if "ended" in payload and not isinstance(payload["ended"], bool):
        yield "ended", "must be a boolean"


def _arc(payload: JsonObject) -> Iterator[Problem]:
    yield from _text(payload, "arc_ref", required=True)
    status = payload.get("status", "active")
    if status not in ARC_STATUSES:
        yield "status", f"must be one of {list(ARC_STATUSES)}"


def _personality(payload: JsonObject) -> Iterator[Problem]:
    yield from _text(payload, "summary", required=True)


def _value(payload: JsonObject) -> Iterator[Problem]:
    yield from _text(payload, "value_ref", required=True)
    yield from _number(payload, "weight_bp", 0, SALIENCE_MAX_BP, required=True)


def _consolidated(payload: JsonObject) -> Iterator[Problem]:
    kind_name = payload.get("fragment_kind")
    try:
        kind = EventKind(str(kind_name))
    except ValueError:
        yield "fragment_kind", "must name an event kind"
        return
    if kind is EventKind.CONSOLIDATED:
        yield "fragment_kind", "a consolidation cannot fold consolidations"
        return
    fragments = payload.get("fragments")
    if not isinstance(fragments, list) or not fragments:
        yield "fragments", "must be a non-empty list"
        return
    for i, fragment in enumerate(fragments):
        if not isinstance(fragment, dict):
            yield f"fragments[{i}]", "must be an object"
            continue
        yield from ((f"fragments[{i}].{field}", why) for field, why in _fragment(kind, fragment))


def _fragment(kind: EventKind, fragment: JsonObject) -> Iterator[Problem]:
    yield from _text(fragment, "fragment_id", required=True)
    inner = fragment.get("payload")
    if not isinstance(inner, dict):
        yield "payload", "must be an object"
        return
    yield from ((f"payload.{field}", why) for field, why in payload_problems(kind, inner))


def _free(payload: JsonObject) -> Iterator[Problem]:
    return iter(())


_CHECKERS: dict[EventKind, Checker] = {
    EventKind.MEMORY_FORMED: _memory,
    EventKind.REFLECTED: _memory,
    EventKind.RELATIONSHIP_CHANGED: _relationship,
    EventKind.ARC_ADVANCED: _arc,
    EventKind.GOAL_ARC_ADVANCED: _arc,
    EventKind.PERSONALITY_EVENT: _personality,
    EventKind.VALUE_SHIFT: _value,
    EventKind.CONSOLIDATED: _consolidated,
    EventKind.DIRECTIVE_REFUSED: _free,
}


def payload_problems(kind: EventKind, payload: JsonObject) -> list[Problem]:
    """Every way `payload` falls short of what `kind` needs; empty when it is fine."""
    return list(_CHECKERS[kind](payload))


def as_int(value: Any, default: int) -> int:
    """A validated JSON number as the integer the projections store."""
    return default if value is None else int(value)
