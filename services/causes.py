"""Cognition causes by their audit label ("lachesis-reflection", "escalation-novelty"), derived from
egbe-protocol's `CognitionCause` enum, so a cause added to the protocol is admitted and labelled
everywhere at once instead of being refused by a hand-kept table."""

from __future__ import annotations

from egbe.v1 import action_pb2

_PREFIX = "COGNITION_CAUSE_"

CAUSE_LABELS: dict[int, str] = {
    value: name.removeprefix(_PREFIX).lower().replace("_", "-")
    for name, value in action_pb2.CognitionCause.items()
    if value != action_pb2.COGNITION_CAUSE_UNSPECIFIED
}
