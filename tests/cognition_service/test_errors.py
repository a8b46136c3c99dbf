"""Cognition's domain errors and their one mapping to gRPC statuses: a peer's class is kept."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from cognition_service.errors import (
    AttributionMismatch,
    CognitionError,
    DeadlineSpent,
    EmptyReply,
    ForeignRun,
    PartlyRecorded,
    PeerFailed,
    ReplyInvalid,
    answers_in_status,
    status_error,
)
from services.errors import EgbeError, FieldViolation, to_rpc_status


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (EmptyReply("the gateway answered with no text"), grpc.StatusCode.INTERNAL, "EMPTY_MODEL_REPLY"),
        (AttributionMismatch("refusing to commit"), grpc.StatusCode.INTERNAL, "ATTRIBUTION_MISMATCH"),
        (ReplyInvalid("not JSON"), grpc.StatusCode.INTERNAL, "INTERNAL"),
        (
            PeerFailed("gateway Generate", grpc.StatusCode.ABORTED, "killed"),
            grpc.StatusCode.ABORTED,
            "ABORTED",
        ),
        (
            PeerFailed("policy Check", grpc.StatusCode.CANCELLED, "bye"),
            grpc.StatusCode.UNAVAILABLE,
            "UNAVAILABLE",
        ),
        (
            PeerFailed("biography Append", grpc.StatusCode.DATA_LOSS, "?"),
            grpc.StatusCode.INTERNAL,
            "INTERNAL",
        ),
        # A peer too slow for our own timeout is unavailable; the caller's time running out is not.
        (
            PeerFailed("gateway Generate", grpc.StatusCode.DEADLINE_EXCEEDED, "slow"),
            grpc.StatusCode.UNAVAILABLE,
            "UNAVAILABLE",
        ),
        (
            DeadlineSpent("gateway Generate", "cut off at the caller's deadline"),
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "DEADLINE_EXCEEDED",
        ),
    ],
)
def test_each_error_maps_to_its_status_and_reason(
    error: CognitionError, code: grpc.StatusCode, reason: str
) -> None:
    mapped = status_error(error)
    assert mapped.code is code
    info = error_details_pb2.ErrorInfo()
    to_rpc_status(mapped).details[-1].Unpack(info)
    assert info.reason == reason
    assert mapped.message == str(error)


def test_a_peer_failure_keeps_the_peer_its_code_and_the_field_it_named() -> None:
    error = PeerFailed(
        "gateway Kill", grpc.StatusCode.NOT_FOUND, "no run", [FieldViolation("run_id", "no run")]
    )
    mapped = status_error(error)
    assert mapped.message == "gateway Kill failed: NOT_FOUND: no run"
    assert mapped.metadata == {"peer": "gateway Kill", "peer_code": "NOT_FOUND"}
    assert mapped.violations == [FieldViolation("run_id", "no run")]


async def test_an_rpc_method_answers_a_domain_error_as_its_status() -> None:
    @answers_in_status
    async def think() -> None:
        raise EmptyReply("the model answered with an empty utterance")

    with pytest.raises(EgbeError) as raised:
        await think()
    assert (raised.value.code, raised.value.reason) == (grpc.StatusCode.INTERNAL, "EMPTY_MODEL_REPLY")


def test_a_peer_refusing_a_caller_value_is_invalid_argument_with_the_peer_fields() -> None:
    error = PeerFailed(
        "biography Append",
        grpc.StatusCode.INVALID_ARGUMENT,
        "bad tick",
        [FieldViolation("events[0].world_tick", "must be at most 9223372036854775807")],
    )
    mapped = status_error(error)
    assert (mapped.code, mapped.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert mapped.violations == [
        FieldViolation("events[0].world_tick", "must be at most 9223372036854775807")
    ]
    assert mapped.metadata == {"peer": "biography Append", "peer_code": "INVALID_ARGUMENT"}
    unnamed = status_error(PeerFailed("policy Ground", grpc.StatusCode.INVALID_ARGUMENT, "?"))
    assert unnamed.code is grpc.StatusCode.INVALID_ARGUMENT
    assert unnamed.violations == [FieldViolation("request", "refused by policy Ground")]


@pytest.mark.parametrize(
    ("failed", "code"),
    [
        (PeerFailed("biography Append", grpc.StatusCode.UNAVAILABLE, "down"), grpc.StatusCode.UNAVAILABLE),
        # The caller's time ran out before the second write: not sent, and said so the same way.
        (
            DeadlineSpent("biography Append", "not sent: the caller's deadline has passed"),
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ),
    ],
)
def test_a_pair_written_halfway_answers_the_failed_write_status_and_says_retry_completes_it(
    failed: PeerFailed, code: grpc.StatusCode
) -> None:
    mapped = status_error(PartlyRecorded(failed, "ori-a", "ori-b"))
    assert mapped.code is code
    assert mapped.metadata == {
        "peer": "biography Append",
        "peer_code": code.name,
        "recorded_on": "ori-a",
        "pending_on": "ori-b",
        "retry": "idempotent",
    }
    assert "re-send the same request to complete it" in mapped.message


def test_a_foreign_run_is_permission_denied_naming_the_run() -> None:
    mapped = status_error(ForeignRun("refusing to commit: run 'r' was admitted for ori 'x', not 'y'"))
    assert mapped.code is grpc.StatusCode.PERMISSION_DENIED
    assert mapped.violations == [FieldViolation("run_id", "admitted for another Ori")]
