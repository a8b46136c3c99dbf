"""De-escalation consolidation: fold fine-grained fragments into durable events; prove nothing was lost."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from biography_service.events import EventKind, JsonObject, NewEvent, canonical_json

# Consolidated event ids are derived from this namespace, so a repeated consolidation is idempotent.
CONSOLIDATION_NAMESPACE = uuid.UUID("7f0c4f5e-5a43-4f0e-9a53-0b1f2c4b6e21")


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


def fold_by_kind(ori_id: str, request_id: str, fragments: Sequence[Fragment]) -> list[NewEvent]:
    """One Consolidated event per fragment kind (first-seen order), carrying its fragments whole."""
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
                "fragments": [
                    {"fragment_id": f.fragment_id, "world_tick": f.world_tick, "payload": f.payload}
                    for f in group
                ],
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
            else:
                yield from _fragment_ids_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _fragment_ids_in(inner)


def state_loss_report(fragments: Sequence[Fragment], events: Sequence[NewEvent]) -> StateLossReport:
    """Every input fragment id must appear in some emitted event's payload; the rest are reported missing."""
    carried = {fragment_id for event in events for fragment_id in _fragment_ids_in(event.payload)}
    missing = [f.fragment_id for f in fragments if f.fragment_id not in carried]
    return StateLossReport(not missing, missing)
