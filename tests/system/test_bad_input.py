"""Bounded fuzzing of every RPC over real gRPC: hypothesis-built request messages and random bytes at
the transport. No crash, no hang, every refusal a proper status (INVALID_ARGUMENT with a field
violation, or an unbuilt capability named), and the services stay SERVING.

Bounds: `EXAMPLES_PER_RPC` examples per RPC and shape, a `CALL_TIMEOUT` deadline per call
(`STREAM_SILENCE` for server streams), derandomized so CI runs the same cases every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from services.auth import bearer_metadata
from services.errors import field_violations
from tests.conftest import EmbeddedEgbe
from tests.system.conftest import FUZZ_MAX_MESSAGE_BYTES
from tests.system.message_strategies import message_strategy
from tests.system.rpc_catalogue import Outcome, Rpc, all_rpcs, call

EXAMPLES_PER_RPC = 25
CALL_TIMEOUT = 10.0
# A valid subscription rightly waits for events; how long a server stream may stay silent.
STREAM_SILENCE = 0.3
RPCS = sorted(all_rpcs(), key=str)
# Refusals a servicer may give for a well-formed but unacceptable request.
DOMAIN_REFUSALS = {
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,
}
# gRPC itself (before any Egbe code runs) answers bytes that do not parse as the request type so.
UNDECODABLE = (grpc.StatusCode.INTERNAL, "Exception deserializing request!")

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_RPC,
    deadline=None,
    derandomize=True,
    database=None,
    # No shrinking: it can take minutes, and the suite's time must stay bounded. The failing
    # example is printed as generated.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def channels(adversarial_egbe: EmbeddedEgbe) -> Iterator[dict[str, grpc.Channel]]:
    opened = {name: grpc.insecure_channel(target) for name, target in adversarial_egbe.targets.items()}
    yield opened
    for channel in opened.values():
        channel.close()


def _deadline(rpc: Rpc) -> float:
    return STREAM_SILENCE if rpc.method.server_streaming else CALL_TIMEOUT


def _metadata(egbe: EmbeddedEgbe, rpc: Rpc) -> tuple[tuple[str, str], ...]:
    """A token the RPC admits, so the fuzz reaches the servicer's own validation."""
    role = sorted(rpc.admitted)[0]
    return bearer_metadata(egbe.tokens[role.value])


def assert_proper(rpc: Rpc, outcome: Outcome) -> None:
    """OK, or a refusal that says what is wrong; never INTERNAL, UNKNOWN, a hang or a dead server."""
    if outcome.code == grpc.StatusCode.OK:
        return
    if outcome.code == grpc.StatusCode.INVALID_ARGUMENT:
        assert outcome.error is not None
        status = rpc_status.from_call(outcome.error)  # type: ignore[arg-type]
        assert status is not None, f"{rpc}: INVALID_ARGUMENT without google.rpc details"
        assert field_violations(status), f"{rpc}: INVALID_ARGUMENT names no field"
        return
    if outcome.code == grpc.StatusCode.UNIMPLEMENTED:
        assert "not built" in outcome.details, f"{rpc}: UNIMPLEMENTED without naming the capability"
        return
    if outcome.code == grpc.StatusCode.DEADLINE_EXCEEDED and rpc.method.server_streaming:
        return  # a live subscription may rightly wait for events
    assert outcome.code in DOMAIN_REFUSALS, f"{rpc}: {outcome.code.name} {outcome.details!r}"


def assert_still_serving(channels: dict[str, grpc.Channel], egbe: EmbeddedEgbe) -> None:
    assert egbe.process.poll() is None, "egbe up exited"
    for name, channel in channels.items():
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name


@pytest.mark.parametrize("rpc", RPCS, ids=str)
def test_generated_requests_get_proper_statuses(
    rpc: Rpc, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    metadata = _metadata(adversarial_egbe, rpc)
    count = st.integers(1, 3) if rpc.method.client_streaming else st.just(1)
    requests = count.flatmap(
        lambda n: st.lists(message_strategy(rpc.method.input_type), min_size=n, max_size=n)
    )

    @FUZZ_SETTINGS
    @given(requests=requests)
    def fuzz(requests: list[Any]) -> None:
        outcome = call(channels[rpc.egbe_service], rpc, requests, metadata, _deadline(rpc))
        assert_proper(rpc, outcome)

    fuzz()
    assert_still_serving(channels, adversarial_egbe)


@pytest.mark.parametrize("rpc", RPCS, ids=str)
def test_random_bytes_at_the_transport_get_proper_statuses(
    rpc: Rpc, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    metadata = _metadata(adversarial_egbe, rpc)

    @FUZZ_SETTINGS
    @given(payload=st.binary(max_size=512))
    def fuzz(payload: bytes) -> None:
        outcome = call(
            channels[rpc.egbe_service], rpc, [payload], metadata, _deadline(rpc), serialize=lambda raw: raw
        )
        if (outcome.code, outcome.details) == UNDECODABLE:
            return
        assert_proper(rpc, outcome)

    fuzz()
    assert_still_serving(channels, adversarial_egbe)


@pytest.mark.parametrize("rpc", RPCS, ids=str)
def test_oversized_requests_are_refused_whole(
    rpc: Rpc, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    # A length-delimited field 1 (any type's first field or unknown) bigger than the server accepts.
    payload = b"\x0a" + _varint(FUZZ_MAX_MESSAGE_BYTES + 1) + b"\x00" * (FUZZ_MAX_MESSAGE_BYTES + 1)
    outcome = call(
        channels[rpc.egbe_service],
        rpc,
        [payload],
        _metadata(adversarial_egbe, rpc),
        CALL_TIMEOUT,
        serialize=lambda raw: raw,
    )
    unbuilt_stream = rpc.method.client_streaming and "not built" in outcome.details
    if not unbuilt_stream:  # an unbuilt streaming servicer ends the call before reading a message
        assert outcome.code == grpc.StatusCode.RESOURCE_EXHAUSTED, outcome
    assert_still_serving(channels, adversarial_egbe)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_undecodable_bytes_are_invalid_argument_naming_the_request_after_authentication(
    channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe
) -> None:
    (rpc,) = [r for r in RPCS if str(r) == "CognitionGatewayService.EvaluateBudget"]
    raw = {"serialize": lambda payload: payload}
    token = _metadata(adversarial_egbe, rpc)
    outcome = call(channels["gateway"], rpc, [b"\x00"], token, CALL_TIMEOUT, **raw)
    assert outcome.code == grpc.StatusCode.INVALID_ARGUMENT
    assert outcome.error is not None
    status = rpc_status.from_call(outcome.error)  # type: ignore[arg-type]
    assert status is not None
    assert [v.field for v in field_violations(status)] == ["request"]
    anonymous = call(channels["gateway"], rpc, [b"\x00"], (), CALL_TIMEOUT, **raw)
    assert anonymous.code == grpc.StatusCode.UNAUTHENTICATED
