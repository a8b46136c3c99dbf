"""Small builders of proposed events for the biography tests."""

from __future__ import annotations

import uuid

from biography_service.events import EventKind, JsonObject, NewEvent


def memory(text: str, salience_bp: int = 5000, tick: int = 0, event_id: str | None = None) -> NewEvent:
    return NewEvent(
        event_id or str(uuid.uuid4()),
        EventKind.MEMORY_FORMED,
        {"text": text, "salience_bp": salience_bp},
        tick,
    )


def event(kind: EventKind, payload: JsonObject, tick: int = 0) -> NewEvent:
    return NewEvent(str(uuid.uuid4()), kind, payload, tick)


def memories(count: int, prefix: str = "m") -> list[NewEvent]:
    return [memory(f"{prefix}{i}", tick=i) for i in range(count)]
