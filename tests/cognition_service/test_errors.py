"""Cognition's domain errors and their one mapping to gRPC statuses: a peer's class is kept."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2

from cognition_service.errors import (
    AttributionMismatch,
    CognitionError,
    EmptyReply,
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
