"""De-escalation consolidation: fold fine-grained fragments into durable events; prove nothing was lost."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from biography_service.events import EventKind, JsonObject, NewEvent, canonical_json
from biography_service.payloads import as_int
from biography_service.projections import DEFAULT_SALIENCE_BP, memory_key

# Consolidated event ids are derived from this namespace, so a repeated consolidation is idempotent.
CONSOLIDATION_NAMESPACE = uuid.UUID("7f0c4f5e-5a43-4f0e-9a53-0b1f2c4b6e21")
# Kinds whose fragments repeat a fact when their texts match (as rehydration folds memories); other
# kinds' fragments repeat when their payloads are equal.
_TEXT_KINDS = frozenset({EventKind.MEMORY_FORMED, EventKind.REFLECTED})


@dataclass(frozen=True)
class Fragment:
    """A piece of pending fine-grained state an Ori accumulated at low fidelity."""

    fragment_id: str
    kind: EventKind
    payload: JsonObject
    world_tick: int


@dataclass(frozen=True)
class StateLossReport:
    no_state_loss: bool
    missing_fragment_ids: list[str]


Fold = Callable[[str, str, Sequence[Fragment]], list[NewEvent]]


def consolidation_key(fragments: Sequence[Fragment]) -> str:
    """A request id for a consolidation that did not name one: the digest of its fragments."""
    body = canonical_json(
        {"fragments": [[f.fragment_id, f.kind.value, f.payload, f.world_tick] for f in fragments]}
    )
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _repeat_key(fragment: Fragment) -> str:
    if fragment.kind in _TEXT_KINDS:
        return memory_key(str(fragment.payload.get("text", "")))
    return canonical_json(fragment.payload)


def _entries(group: Sequence[Fragment]) -> list[JsonObject]:
    """The group's fragments, repeats folded: one entry per fact (first-seen order), carried by its
    latest fragment (highest tick, then last), naming the others in `repeat_fragment_ids` with a
    `count`; a repeated memory keeps the highest salience."""
    repeats: dict[str, list[Fragment]] = {}
    for fragment in group:
        repeats.setdefault(_repeat_key(fragment), []).append(fragment)
    entries: list[JsonObject] = []
    for same in repeats.values():
        latest = max(reversed(same), key=lambda f: f.world_tick)
        entry: JsonObject = {
            "fragment_id": latest.fragment_id,
            "world_tick": latest.world_tick,
            "payload": latest.payload,
        }
        if len(same) > 1:
            entry["count"] = len(same)
            entry["repeat_fragment_ids"] = [f.fragment_id for f in same if f is not latest]
            if latest.kind in _TEXT_KINDS:
                salience = max(as_int(f.payload.get("salience_bp"), DEFAULT_SALIENCE_BP) for f in same)
                entry["payload"] = {**latest.payload, "salience_bp": salience}
        entries.append(entry)
    return entries


def fold_by_kind(ori_id: str, request_id: str, fragments: Sequence[Fragment]) -> list[NewEvent]:
    """One Consolidated event per fragment kind (first-seen order), repeated fragments folded."""
    groups: dict[EventKind, list[Fragment]] = {}
    for fragment in fragments:
        groups.setdefault(fragment.kind, []).append(fragment)
    return [
        NewEvent(
            event_id=str(uuid.uuid5(CONSOLIDATION_NAMESPACE, f"{ori_id}\n{request_id}\n{kind.value}")),
            kind=EventKind.CONSOLIDATED,
            payload={
                "fragment_kind": kind.value,
                "request_id": request_id,
                "fragments": _entries(group),
            },
            world_tick=max(f.world_tick for f in group),
            provenance_ref=f"consolidation:{request_id}",
        )
        for kind, group in groups.items()
    ]


def _fragment_ids_in(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "fragment_id" and isinstance(inner, str):
                yield inner
            elif key == "repeat_fragment_ids" and isinstance(inner, list):
                yield from (i for i in inner if isinstance(i, str))
            else:
                yield from _fragment_ids_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _fragment_ids_in(inner)


def state_loss_report(fragments: Sequence[Fragment], events: Sequence[NewEvent]) -> StateLossReport:
    """Every input fragment id must appear in some emitted event's payload (as a fragment's id, or among
    the repeats it folded); the rest are reported missing."""
    carried = {fragment_id for event in events for fragment_id in _fragment_ids_in(event.payload)}
    missing = [f.fragment_id for f in fragments if f.fragment_id not in carried]
    return StateLossReport(not missing, missing)
