"""What each event kind's payload must carry, so projections can rely on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from biography_service.events import IDENTITY_KINDS, EventKind, JsonObject

SALIENCE_MAX_BP = 10_000
RELATIONSHIP_BOUND = 100
ARC_STATUSES = ("active", "completed", "abandoned")

# (field path inside the payload, what is wrong)
Problem = tuple[str, str]
# Appends the payload's problems to the list. Checkers append rather than yield: they run for every
# appended event, and a valid payload (nearly all of them) then costs no generator per field.
Checker = Callable[[JsonObject, list[Problem]], None]


def _text(payload: JsonObject, key: str, problems: list[Problem], *, required: bool) -> None:
    value = payload.get(key)
    if value is None:
        if required:
            problems.append((key, "is required"))
    elif not isinstance(value, str) or not value.strip():
        problems.append((key, "must be a non-empty string"))


def _number(
    payload: JsonObject, key: str, low: float, high: float, problems: list[Problem], *, required: bool
) -> None:
    value = payload.get(key)
    if value is None:
        if required:
            problems.append((key, "is required"))
    elif isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        problems.append((key, f"must be a number in [{low:g}, {high:g}]"))


def _memory(payload: JsonObject, problems: list[Problem]) -> None:
    _text(payload, "text", problems, required=True)
    _number(payload, "salience_bp", 0, SALIENCE_MAX_BP, problems, required=False)


def _relationship(payload: JsonObject, problems: list[Problem]) -> None:
    _text(payload, "other_ori_id", problems, required=True)
    for key in ("bond", "respect"):
        _number(payload, key, -RELATIONSHIP_BOUND, RELATIONSHIP_BOUND, problems, required=False)
    _text(payload, "summary", problems, required=False)
    if "ended" in payload and not isinstance(payload["ended"], bool):
        problems.append(("ended", "must be a boolean"))


def _arc(payload: JsonObject, problems: list[Problem]) -> None:
    _text(payload, "arc_ref", problems, required=True)
    status = payload.get("status", "active")
    if status not in ARC_STATUSES:
        problems.append(("status", f"must be one of {list(ARC_STATUSES)}"))


def _personality(payload: JsonObject, problems: list[Problem]) -> None:
    _text(payload, "summary", problems, required=True)


def _value(payload: JsonObject, problems: list[Problem]) -> None:
    _text(payload, "value_ref", problems, required=True)
    _number(payload, "weight_bp", 0, SALIENCE_MAX_BP, problems, required=True)


def _consolidated(payload: JsonObject, problems: list[Problem]) -> None:
    kind_name = payload.get("fragment_kind")
    try:
        kind = EventKind(str(kind_name))
    except ValueError:
        problems.append(("fragment_kind", "must name an event kind"))
        return
    if kind is EventKind.CONSOLIDATED or kind in IDENTITY_KINDS:
        problems.append(("fragment_kind", f"a consolidation cannot fold {kind.value} events"))
        return
    fragments = payload.get("fragments")
    if not isinstance(fragments, list) or not fragments:
        problems.append(("fragments", "must be a non-empty list"))
        return
    for i, fragment in enumerate(fragments):
        if not isinstance(fragment, dict):
            problems.append((f"fragments[{i}]", "must be an object"))
            continue
        problems.extend((f"fragments[{i}].{field}", why) for field, why in _fragment(kind, fragment))


def _fragment(kind: EventKind, fragment: JsonObject) -> list[Problem]:
    problems: list[Problem] = []
    _text(fragment, "fragment_id", problems, required=True)
    _repeats(fragment, problems)
    inner = fragment.get("payload")
    if not isinstance(inner, dict):
        problems.append(("payload", "must be an object"))
        return problems
    problems.extend((f"payload.{field}", why) for field, why in payload_problems(kind, inner))
    return problems


def _repeats(fragment: JsonObject, problems: list[Problem]) -> None:
    """A folded repeat: `repeat_fragment_ids` (the other fragments it stands for) and `count`, one more."""
    repeats = fragment.get("repeat_fragment_ids", [])
    if not isinstance(repeats, list) or not all(isinstance(i, str) and i.strip() for i in repeats):
        problems.append(("repeat_fragment_ids", "must be a list of non-empty strings"))
        return
    count = fragment.get("count", 1)
    if isinstance(count, bool) or count != 1 + len(repeats):
        problems.append(("count", f"must be {1 + len(repeats)} (this fragment and its repeats)"))


def _free(payload: JsonObject, problems: list[Problem]) -> None:
    pass


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
    problems: list[Problem] = []
    _CHECKERS[kind](payload, problems)
    return problems


def as_int(value: Any, default: int) -> int:
    """A validated JSON number as the integer the projections store."""
    return default if value is None else int(value)
