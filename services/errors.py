"""Domain exceptions every service raises, and their one mapping to gRPC status with google.rpc details."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

ERROR_DOMAIN = "egbe.dev"


@dataclass(frozen=True)
class FieldViolation:
    """One invalid field: a path such as `batch.columns.slots` and what is wrong with it."""

    field: str
    description: str


# A refusal travels in the response trailers, which clients cap (gRPC's default is 8-16 KiB): an
# echo of a large or many-times-wrong request must not turn the refusal into a transport error.
# UTF-8 bytes each text may take, and how many violations are named.
MAX_MESSAGE_BYTES = 512
MAX_FIELD_BYTES = 128
MAX_DESCRIPTION_BYTES = 256
MAX_VIOLATIONS = 10


def clipped(text: str, limit: int) -> str:
    """The text cut to at most `limit` UTF-8 bytes (on a character boundary), marked when cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode(errors="ignore") + "…"


class EgbeError(Exception):
    """Base of every error a servicer may raise; `code` and `reason` never change meaning."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: str = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        metadata: dict[str, str] | None = None,
        violations: Iterable[FieldViolation] = (),
        retry_after_seconds: float | None = None,
    ) -> None:
        message = clipped(message, MAX_MESSAGE_BYTES)
        super().__init__(message)
        self.message = message
        self.metadata = dict(metadata or {})
        # The request fields the refusal is about (an unknown id names the field that carried it).
        self.violations = [
            FieldViolation(clipped(v.field, MAX_FIELD_BYTES), clipped(v.description, MAX_DESCRIPTION_BYTES))
            for v in list(violations)[:MAX_VIOLATIONS]
        ]
        # When set, a google.rpc.RetryInfo tells the client how long to wait before trying again.
        self.retry_after_seconds = retry_after_seconds

    def details(self) -> list[any_pb2.Any]:
        """google.rpc detail messages carried with the status: BadRequest when fields are named,
        RetryInfo when the client should wait and retry, and always ErrorInfo (last)."""
        found: list[Any] = []
        if self.violations:
            found.append(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                        for v in self.violations
                    ]
                )
            )
        if self.retry_after_seconds is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(round(self.retry_after_seconds * 1e9))
            found.append(error_details_pb2.RetryInfo(retry_delay=delay))
        found.append(
            error_details_pb2.ErrorInfo(reason=self.reason, domain=ERROR_DOMAIN, metadata=self.metadata)
        )
        packed = []
        for detail in found:
            any_detail = any_pb2.Any()
            any_detail.Pack(detail)
            packed.append(any_detail)
        return packed


class Internal(EgbeError):
    """Something failed that no refusal describes; the client learns only the id that finds the log."""

    def __init__(self, correlation_id: str) -> None:
        super().__init__(
            f"internal error; correlation id {correlation_id}", metadata={"correlation_id": correlation_id}
        )


class InvalidArgument(EgbeError):
    """The request is malformed; nothing was applied."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    def __init__(self, violations: Iterable[FieldViolation]) -> None:
        violations = list(violations)
        if not violations:
            raise ValueError("InvalidArgument needs at least one field violation")
        summary = "; ".join(f"{v.field}: {v.description}" for v in violations)
        super().__init__(f"invalid argument: {summary}", violations=violations)

    @classmethod
    def field(cls, field: str, description: str) -> InvalidArgument:
        return cls([FieldViolation(field, description)])


class NotFound(EgbeError):
    code = grpc.StatusCode.NOT_FOUND
    reason = "NOT_FOUND"


class AlreadyExists(EgbeError):
    code = grpc.StatusCode.ALREADY_EXISTS
    reason = "ALREADY_EXISTS"


class FailedPrecondition(EgbeError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FAILED_PRECONDITION"


class Aborted(EgbeError):
    """A concurrency conflict or a run stopped by an operator control."""

    code = grpc.StatusCode.ABORTED
    reason = "ABORTED"


class ResourceExhausted(EgbeError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RESOURCE_EXHAUSTED"


class Unavailable(EgbeError):
    """A dependency (database, peer service) cannot be reached; callers fail closed."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "UNAVAILABLE"


class DeadlineExceeded(EgbeError):
    """The caller's deadline passed before the work was done; no later step was started."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "DEADLINE_EXCEEDED"


class Unimplemented(EgbeError):
    """The method is not served here (what gRPC answers for a method a server lacks)."""

    code = grpc.StatusCode.UNIMPLEMENTED
    reason = "UNIMPLEMENTED"


class Unauthenticated(EgbeError):
    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class PermissionDenied(EgbeError):
    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "PERMISSION_DENIED"


def to_rpc_status(error: EgbeError) -> status_pb2.Status:
    """The google.rpc.Status for a domain error, details included."""
    code_value = error.code.value[0]
    assert code_pb2.Code.Name(code_value)  # every grpc.StatusCode is a google.rpc code
    return status_pb2.Status(code=code_value, message=error.message, details=error.details())


# Where gRPC carries the google.rpc.Status (with its BadRequest) of a failed call.
_STATUS_DETAILS_KEY = "grpc-status-details-bin"


def peer_violations(error: grpc.aio.AioRpcError) -> list[FieldViolation]:
    """The fields a peer's refusal named, from the status details in its trailing metadata."""
    trailing = cast(Iterable[tuple[str, str | bytes]], error.trailing_metadata() or ())
    for key, value in trailing:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            return field_violations(status_pb2.Status.FromString(value))
    return []


def field_violations(status: status_pb2.Status) -> list[FieldViolation]:
    """Field violations carried in a status's BadRequest detail (for clients and tests)."""
    found: list[FieldViolation] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            found.extend(FieldViolation(v.field, v.description) for v in bad_request.field_violations)
    return found


def retry_delay_seconds(status: status_pb2.Status) -> float | None:
    """The wait a status's RetryInfo asks for, or None when it carries none (for clients and tests)."""
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return float(info.retry_delay.ToNanoseconds()) / 1e9
    return None
