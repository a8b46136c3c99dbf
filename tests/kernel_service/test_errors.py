"""The kernel's domain errors and their one mapping to gRPC statuses (what callers have always seen)."""

from __future__ import annotations

import grpc
import pytest

from kernel_service.errors import (
    BiographyRefused,
    BiographyUnreachable,
    IdentitiesInvalid,
    KernelError,
    NoBiography,
    UnknownAgent,
    mapped,
    status_error,
)
from services.errors import EgbeError, FieldViolation


@pytest.mark.parametrize(
    ("error", "code", "violations", "metadata"),
    [
        (
            UnknownAgent("ori 'x' is not registered", "ori_id", "names no registered Ori"),
            grpc.StatusCode.NOT_FOUND,
            [FieldViolation("ori_id", "names no registered Ori")],
            {},
        ),
        (
            NoBiography("agents[2].identity"),
            grpc.StatusCode.FAILED_PRECONDITION,
            [FieldViolation("agents[2].identity", "no biography to record it")],
            {},
        ),
        (
            IdentitiesInvalid([FieldViolation("agents[0].identity.locale", "not a BCP-47 tag")]),
            grpc.StatusCode.INVALID_ARGUMENT,
            [FieldViolation("agents[0].identity.locale", "not a BCP-47 tag")],
            {},
        ),
        (
            BiographyUnreachable("UNAVAILABLE"),
            grpc.StatusCode.UNAVAILABLE,
            [],
            {"peer": "biography", "peer_code": "UNAVAILABLE"},
        ),
        (BiographyRefused("PERMISSION_DENIED", "no"), grpc.StatusCode.FAILED_PRECONDITION, [], {}),
    ],
)
def test_each_error_maps_to_its_status(
    error: KernelError, code: grpc.StatusCode, violations: list[FieldViolation], metadata: dict[str, str]
) -> None:
    mapped_error = status_error(error)
    assert (mapped_error.code, mapped_error.violations, mapped_error.metadata) == (code, violations, metadata)


def test_messages_are_unchanged() -> None:
    assert str(BiographyRefused("PERMISSION_DENIED", "no")) == (
        "the biography refused the identities: PERMISSION_DENIED: no"
    )
    assert str(NoBiography("agents[0].identity")) == (
        "identities are recorded in the biography: configure kernel.biography_target"
    )


def test_mapped_raises_the_status_error_and_keeps_the_cause() -> None:
    cause = UnknownAgent("slot 9 is not registered", "slot", "names no registered slot")
    with pytest.raises(EgbeError) as raised, mapped():
        raise cause
    assert raised.value.code is grpc.StatusCode.NOT_FOUND
    assert raised.value.__cause__ is cause
