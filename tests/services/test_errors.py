"""Domain errors map to gRPC status codes with google.rpc details that never change meaning."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from services.errors import (
    Aborted,
    EgbeError,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    field_violations,
    to_rpc_status,
)


def test_invalid_argument_carries_every_field_violation() -> None:
    error = InvalidArgument(
        [FieldViolation("batch.tick", "went backwards"), FieldViolation("batch.world_id", "empty")]
    )
    status = to_rpc_status(error)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert field_violations(status) == error.violations
    assert "batch.tick: went backwards" in status.message


def test_invalid_argument_needs_a_violation() -> None:
    with pytest.raises(ValueError, match="at least one"):
        InvalidArgument([])


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (Aborted("conflict"), grpc.StatusCode.ABORTED, "ABORTED"),
        (ResourceExhausted("over"), grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"),
        (Unavailable("db down"), grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE"),
        (Unauthenticated("no token"), grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
        (PermissionDenied("role"), grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"),
    ],
)
def test_each_error_maps_to_its_code_and_reason(error: EgbeError, code: grpc.StatusCode, reason: str) -> None:
    status = to_rpc_status(error)
    assert status.code == code.value[0]
    infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert len(infos) == 1
    info = error_details_pb2.ErrorInfo()
    infos[0].Unpack(info)
    assert info.reason == reason
    assert info.domain == "egbe.dev"


def test_a_refusal_about_a_field_names_it_beside_its_error_info() -> None:
    error = NotFound("no run 'r-1'", violations=[FieldViolation("run_id", "names no run")])
    status = to_rpc_status(error)
    assert status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert field_violations(status) == [FieldViolation("run_id", "names no run")]
    assert any(detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) for detail in status.details)
