"""Cognition's failures: a peer's error keeps its meaning; an empty reply or misattribution fails loud."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import grpc
from google.rpc import status_pb2

from services.errors import (
    Aborted,
    EgbeError,
    FailedPrecondition,
    FieldViolation,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
    field_violations,
)

# Where gRPC carries the google.rpc.Status (with its BadRequest) of a failed call.
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_BY_CODE: dict[grpc.StatusCode, type[EgbeError]] = {
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    # A peer that shuts down with our call in flight cancels it: to us the peer is unavailable.
    grpc.StatusCode.CANCELLED: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.NOT_FOUND: NotFound,
}


class EmptyReply(EgbeError):
    """The gateway answered with no text or an empty utterance; never replaced by a template."""

    reason = "EMPTY_MODEL_REPLY"


class AttributionMismatch(EgbeError):
    """A response or policy decision names another Ori, tier or output than the request."""

    reason = "ATTRIBUTION_MISMATCH"


def _peer_violations(error: grpc.aio.AioRpcError) -> list[FieldViolation]:
    """The fields the peer named (an unknown `run_id` is the same field of our own request)."""
    trailing = cast(Iterable[tuple[str, str | bytes]], error.trailing_metadata() or ())
    for key, value in trailing:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            return field_violations(status_pb2.Status.FromString(value))
    return []


def peer_failure(peer: str, error: grpc.aio.AioRpcError) -> EgbeError:
    """The domain error for a failed peer call, keeping its status class (a kill stays ABORTED)."""
    code = error.code()
    error_class = _BY_CODE.get(code, EgbeError)
    return error_class(
        f"{peer} failed: {code.name}: {error.details()}",
        metadata={"peer": peer, "peer_code": code.name},
        violations=_peer_violations(error) if code is grpc.StatusCode.NOT_FOUND else (),
    )
