"""Cognition's domain errors; `status_error` maps each to a gRPC status in one place.

A peer's failure keeps its status class (a kill stays ABORTED, an outage UNAVAILABLE); an empty
model reply or a misattributed response fails loud and is never replaced by a template.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import grpc

from services.errors import (
    Aborted,
    DeadlineExceeded,
    EgbeError,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)


class CognitionError(Exception):
    """Base of every error cognition's domain raises."""


class ReplyInvalid(CognitionError):
    """The reply is not a JSON object that satisfies the schema; the message is fed back to the model."""


class EmptyReply(CognitionError):
    """The gateway answered with no text or an empty utterance."""


class AttributionMismatch(CognitionError):
    """A response or policy decision names another Ori, tier or output than the request."""


class ForeignRun(CognitionError):
    """The run a Think names was admitted for another Ori or tier than the Think's."""


class CoerciveDemonstration(CognitionError):
    """The policy service's coercion policy found a steward's demonstrated behaviour coercive: it
    teaches nothing, so no value is re-weighted and nothing is written."""

    def __init__(self, coercion: str, rules: Sequence[str]) -> None:
        self.coercion = coercion
        self.rules = list(rules)
        super().__init__(
            f"coercion:{coercion}: a coercive demonstration is refused; nothing was learned or written"
        )


class PeerFailed(CognitionError):
    """A call to a peer (gateway, policy, biography) failed with `code`; `violations` are the
    fields it named (an unknown `run_id` is the same field of our own request)."""

    def __init__(
        self, peer: str, code: grpc.StatusCode, details: str, violations: Sequence[FieldViolation] = ()
    ) -> None:
        self.peer = peer
        self.code = code
        self.violations = list(violations)
        super().__init__(f"{peer} failed: {code.name}: {details}")


class DeadlineSpent(PeerFailed):
    """The call being served ran out of time at a peer call: the call was not sent (its time was
    already spent) or was cut off at that deadline. Nothing after it was started."""

    def __init__(self, peer: str, details: str) -> None:
        super().__init__(peer, grpc.StatusCode.DEADLINE_EXCEEDED, details)


class PartlyRecorded(CognitionError):
    """A change spanning two streams was written to the first and the second write failed.

    Every draft has a deterministic event id, so re-sending the same request writes what is missing
    and nothing twice: the caller is told so, under the failed write's own status class.
    """

    def __init__(self, failed: PeerFailed, recorded_on: str, pending_on: str) -> None:
        self.failed = failed
        self.recorded_on = recorded_on
        self.pending_on = pending_on
        super().__init__(
            f"recorded on {recorded_on!r} only; the write to {pending_on!r} failed ({failed}); "
            "re-send the same request to complete it (idempotent)"
        )


# A peer's status class, kept; anything else is INTERNAL. A peer's DEADLINE_EXCEEDED under the configured
# timeout (not the caller's deadline: that is DeadlineSpent) is a peer too slow to count as available.
_PEER_STATUS: dict[grpc.StatusCode, type[EgbeError]] = {
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
# A peer's INVALID_ARGUMENT is about a value our caller supplied (cognition checks its own inputs to the
# peers' bounds first): the caller hears INVALID_ARGUMENT with the fields the peer named.
# INTERNAL refusals, by the ErrorInfo reason that tells them apart.
_INTERNAL_REASONS: dict[type[CognitionError], str] = {
    EmptyReply: "EMPTY_MODEL_REPLY",
    AttributionMismatch: "ATTRIBUTION_MISMATCH",
}


def status_error(error: CognitionError) -> EgbeError:
    """The one mapping from cognition's domain errors to gRPC statuses."""
    message = str(error)
    if isinstance(error, PartlyRecorded):
        mapped = status_error(error.failed)
        mapped.message = message
        mapped.metadata |= {
            "recorded_on": error.recorded_on,
            "pending_on": error.pending_on,
            "retry": "idempotent",
        }
        return mapped
    if isinstance(error, PeerFailed):
        metadata = {"peer": error.peer, "peer_code": error.code.name}
        if error.code is grpc.StatusCode.INVALID_ARGUMENT:
            named = error.violations or [FieldViolation("request", f"refused by {error.peer}")]
            refused = InvalidArgument(named)
            refused.metadata = metadata
            return refused
        status = _PEER_STATUS.get(error.code, EgbeError)
        if isinstance(error, DeadlineSpent):
            status = DeadlineExceeded
        return status(message, metadata=metadata, violations=error.violations)
    if isinstance(error, CoerciveDemonstration):
        refused = InvalidArgument([FieldViolation("behaviour", message)])
        refused.metadata = {"coercion": error.coercion, "rules": ",".join(error.rules)}
        return refused
    if isinstance(error, ForeignRun):
        return PermissionDenied(message, violations=[FieldViolation("run_id", "admitted for another Ori")])
    mapped = EgbeError(message)
    mapped.reason = _INTERNAL_REASONS.get(type(error), mapped.reason)
    return mapped


@contextmanager
def mapped() -> Iterator[None]:
    """Raise a CognitionError as the status error the servicer answers with."""
    try:
        yield
    except CognitionError as error:
        raise status_error(error) from error


P = ParamSpec("P")
R = TypeVar("R")


def answers_in_status(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """An RPC method whose CognitionErrors reach the caller as their mapped status."""

    @functools.wraps(method)
    async def answer(*args: P.args, **kwargs: P.kwargs) -> R:
        with mapped():
            return await method(*args, **kwargs)

    return answer
