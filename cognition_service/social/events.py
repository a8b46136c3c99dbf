"""Biography event drafts: every social-layer state change becomes a NewOriEvent with a stable id."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2

from egbe.v1 import biography_pb2

# Namespace of the deterministic event ids: the same change drafted twice is appended once.
EVENT_NAMESPACE = uuid.UUID("6f0d1d3e-2b51-4c1e-9a43-5e9b7c1f0a11")
PROVENANCE = "cognition:social"


def event_draft(
    ori_id: str,
    kind: biography_pb2.OriEventKind.ValueType,
    payload: Mapping[str, Any],
    world_tick: int,
    provenance_ref: str = PROVENANCE,
) -> biography_pb2.NewOriEvent:
    """A draft whose event_id is a UUIDv5 of (ori, kind, tick, payload): retries stay idempotent."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    event_id = uuid.uuid5(EVENT_NAMESPACE, f"{ori_id}|{kind}|{world_tick}|{canonical}")
    body = struct_pb2.Struct()
    body.update(json.loads(canonical))
    return biography_pb2.NewOriEvent(
        event_id=str(event_id), kind=kind, payload=body, world_tick=world_tick, provenance_ref=provenance_ref
    )
