"""Cognition's failures: a peer's error keeps its meaning; an empty reply or misattribution fails loud."""

from __future__ import annotations

import grpc

from services.errors import (
    Aborted,
    EgbeError,
    FailedPrecondition,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)

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


def peer_failure(peer: str, error: grpc.aio.AioRpcError) -> EgbeError:
    """The domain error for a failed peer call, keeping its status class (a kill stays ABORTED)."""
    code = error.code()
    error_class = _BY_CODE.get(code, EgbeError)
    return error_class(
        f"{peer} failed: {code.name}: {error.details()}", metadata={"peer": peer, "peer_code": code.name}
    )
