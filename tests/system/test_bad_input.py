"""Bounded fuzzing of every RPC over real gRPC: hypothesis-built request messages and random bytes at
the transport. No crash, no hang, every refusal a proper status (INVALID_ARGUMENT with a field
violation, or an unbuilt capability named), no state change from a refused request (the kernel's
agents, the gateway's ledger and controls and the biography's log are snapshotted around each
generated request), and the services stay SERVING. Then the named cases: duplicate slots in one
batch and unknown ids, each refused naming the field, with nothing changed.

Bounds: `EXAMPLES_PER_RPC` examples per RPC and shape, a `CALL_TIMEOUT` deadline per call
(`STREAM_SILENCE` for server streams), derandomized so CI runs the same cases every time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from egbe.v1 import (
    action_pb2,
    biography_pb2,
    biography_pb2_grpc,
    cognition_pb2,
    common_pb2,
    gateway_pb2,
    kernel_pb2,
    kernel_pb2_grpc,
    perception_pb2,
)
from services.auth import bearer_metadata
from services.errors import field_violations
from tests.conftest import EmbeddedEgbe
from tests.kernel_service.frames import frame
from tests.system.conftest import FUZZ_MAX_MESSAGE_BYTES
from tests.system.message_strategies import message_strategy
from tests.system.rpc_catalogue import Outcome, Rpc, all_rpcs, call
from tests.system.system_state import SEEDED_ORI, SEEDED_WORLD, State, StateProbe

EXAMPLES_PER_RPC = 25
CALL_TIMEOUT = 10.0
# A valid subscription rightly waits for events; how long a server stream may stay silent.
STREAM_SILENCE = 0.3
RPCS = sorted(all_rpcs(), key=str)
BY_NAME = {str(rpc): rpc for rpc in RPCS}
SEEDED_AGENTS = 4
# Far ahead of any tick the fuzz sends, so only the defect under test is refused (never ordering).
LATE_TICK = 2**40
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
    _seed(opened, adversarial_egbe.tokens)
    yield opened
    for channel in opened.values():
        channel.close()


@pytest.fixture(scope="module")
def probe(channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe) -> StateProbe:
    return StateProbe(channels, adversarial_egbe.tokens)


def _memory(text: str) -> biography_pb2.NewOriEvent:
    payload = struct_pb2.Struct()
    payload.update({"text": text})
    return biography_pb2.NewOriEvent(
        event_id=str(uuid.uuid4()),
        kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
        payload=payload,
        world_tick=1,
        provenance_ref="fuzz-seed",
    )


def _any_version() -> biography_pb2.ExpectedVersion:
    return biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY)


def _seed(channels: dict[str, grpc.Channel], tokens: dict[str, str]) -> None:
    """State under ids the fuzz draws ("world-1", "ori-1"), so refused requests aimed at it can be caught
    changing it. The kernel serves the first world registered, so this runs before any fuzz."""
    kernel_pb2_grpc.KernelServiceStub(channels["kernel"]).RegisterAgents(
        kernel_pb2.RegisterAgentsRequest(
            world_id=SEEDED_WORLD,
            agents=[
                kernel_pb2.AgentRegistration(
                    ori=common_pb2.OriRef(tenant_id="tenant-1", world_id=SEEDED_WORLD, ori_id=f"ori-{i}")
                )
                for i in range(SEEDED_AGENTS)
            ],
        ),
        metadata=bearer_metadata(tokens["world"]),
        timeout=10,
    )
    biography_pb2_grpc.BiographyServiceStub(channels["biography"]).Append(
        biography_pb2.AppendRequest(
            ori_id=SEEDED_ORI, expected_version=_any_version(), events=[_memory("a seeded memory")]
        ),
        metadata=bearer_metadata(tokens["service"]),
        timeout=10,
    )


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


def refused(rpc: Rpc, outcome: Outcome) -> bool:
    """The server said no to the whole call. A live subscription timing out while it waits is not a
    refusal; nor is a tick stream that answered earlier ticks (those were accepted, each on its own)."""
    waiting = outcome.code == grpc.StatusCode.DEADLINE_EXCEEDED and rpc.method.server_streaming
    return outcome.code != grpc.StatusCode.OK and not waiting and outcome.responses == 0


def assert_unchanged(rpc: Rpc, outcome: Outcome, before: State, after: State) -> None:
    changed = [name for name in vars(before) if getattr(before, name) != getattr(after, name)]
    assert not changed, f"{rpc} refused ({outcome.code.name} {outcome.details!r}) yet changed {changed}"


def assert_still_serving(channels: dict[str, grpc.Channel], egbe: EmbeddedEgbe) -> None:
    assert egbe.process.poll() is None, "egbe up exited"
    for name, channel in channels.items():
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name


# The named cases run first (pytest keeps file order): the fuzz below may leave the kernel at the
# last possible tick and fill the seeded world's slots.


def _rows(tick: int, *frames: perception_pb2.PerceptionFrame, world: str = SEEDED_WORLD) -> Any:
    return perception_pb2.PerceptionBatch(world_id=world, tick=tick, frames=list(frames))


def _columns_with_slots(tick: int, slots: list[int]) -> perception_pb2.PerceptionBatch:
    count = len(slots)
    columns = perception_pb2.PerceptionColumns(
        layout_version=1,
        count=count,
        slots=np.asarray(slots, dtype="<u4").tobytes(),
        player_proximity_mm=np.full(count, 2**31 - 1, dtype="<i4").tobytes(),
    )
    return perception_pb2.PerceptionBatch(world_id=SEEDED_WORLD, tick=tick, columns=columns)


def _duplicate_event_append() -> biography_pb2.AppendRequest:
    event = _memory("told twice")
    return biography_pb2.AppendRequest(
        ori_id=SEEDED_ORI, expected_version=_any_version(), events=[event, event]
    )


NOBODY = common_pb2.OriRef(tenant_id="tenant-1", world_id=SEEDED_WORLD, ori_id="nobody-registered")
UNKNOWN_RUN = "no-such-run"
# name -> (rpc, the requests, the status, the field the refusal must name)
NAMED_CASES: dict[str, tuple[str, list[Any], grpc.StatusCode, str]] = {
    "duplicate slot in a row batch": (
        "KernelService.Tick",
        [kernel_pb2.TickRequest(batch=_rows(LATE_TICK, frame(0), frame(0)))],
        grpc.StatusCode.INVALID_ARGUMENT,
        "batch.frames[1].slot",
    ),
    "duplicate slot in a columnar batch": (
        "KernelService.Tick",
        [kernel_pb2.TickRequest(batch=_columns_with_slots(LATE_TICK, [1, 1]))],
        grpc.StatusCode.INVALID_ARGUMENT,
        "batch.columns.slots[1]",
    ),
    "duplicate slot on the stream": (
        "KernelService.StreamTicks",
        [kernel_pb2.StreamTicksRequest(batch=_rows(LATE_TICK, frame(2), frame(2)))],
        grpc.StatusCode.INVALID_ARGUMENT,
        "batch.frames[1].slot",
    ),
    "duplicate event in one append": (
        "BiographyService.Append",
        [_duplicate_event_append()],
        grpc.StatusCode.INVALID_ARGUMENT,
        "events[1].event_id",
    ),
    "unknown slot in a tick": (
        "KernelService.Tick",
        [kernel_pb2.TickRequest(batch=_rows(LATE_TICK, frame(999)))],
        grpc.StatusCode.INVALID_ARGUMENT,
        "batch.frames[0].slot",
    ),
    "unknown world in a tick": (
        "KernelService.Tick",
        [kernel_pb2.TickRequest(batch=_rows(LATE_TICK, frame(0), world="another-world"))],
        grpc.StatusCode.INVALID_ARGUMENT,
        "batch.world_id",
    ),
    "unknown Ori id": (
        "KernelService.GetAgentState",
        [kernel_pb2.GetAgentStateRequest(world_id=SEEDED_WORLD, ori_id=NOBODY.ori_id)],
        grpc.StatusCode.NOT_FOUND,
        "ori_id",
    ),
    "unknown slot": (
        "KernelService.GetAgentState",
        [kernel_pb2.GetAgentStateRequest(world_id=SEEDED_WORLD, slot=999)],
        grpc.StatusCode.NOT_FOUND,
        "slot",
    ),
    "steward directive to an unknown Ori": (
        "KernelService.ApplyStewardDirective",
        [
            kernel_pb2.ApplyStewardDirectiveRequest(
                world_id=SEEDED_WORLD,
                ori_id=NOBODY.ori_id,
                directive=kernel_pb2.StewardDirective(
                    steward_id="steward-1",
                    kind=kernel_pb2.STEWARD_DIRECTIVE_KIND_OFFER_COUNSEL,
                    text="rest a while",
                ),
            )
        ],
        grpc.StatusCode.NOT_FOUND,
        "ori_id",
    ),
    "model call in an unknown run": (
        "CognitionGatewayService.Generate",
        [gateway_pb2.GenerateRequest(run_id=UNKNOWN_RUN, mode=gateway_pb2.COGNITION_MODE_DECISION)],
        grpc.StatusCode.NOT_FOUND,
        "run_id",
    ),
    "ending an unknown run": (
        "CognitionGatewayService.EndRun",
        [gateway_pb2.EndRunRequest(run_id=UNKNOWN_RUN, outcome=gateway_pb2.RUN_OUTCOME_COMPLETED)],
        grpc.StatusCode.NOT_FOUND,
        "run_id",
    ),
    "tool call in an unknown run": (
        "CognitionGatewayService.CheckToolCall",
        [gateway_pb2.CheckToolCallRequest(run_id=UNKNOWN_RUN, tool_name="world.use_prop")],
        grpc.StatusCode.NOT_FOUND,
        "run_id",
    ),
    "thinking in an unknown run": (
        "CognitionService.Think",
        [
            cognition_pb2.ThinkRequest(
                run_id=UNKNOWN_RUN,
                ori=NOBODY,
                tier=common_pb2.COGNITION_TIER_CLOTHO,
                mode=gateway_pb2.COGNITION_MODE_DECISION,
                cause=action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING,
            )
        ],
        grpc.StatusCode.NOT_FOUND,
        "run_id",
    ),
    "a page token this biography never issued": (
        "BiographyService.Read",
        [biography_pb2.ReadRequest(ori_id=SEEDED_ORI, page_token="not-a-token")],
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
    ),
    "an audit page token this gateway never issued": (
        "OperatorService.ListAuditRecords",
        [gateway_pb2.ListAuditRecordsRequest(page_token="not-a-token")],
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
    ),
}


def _refusal(
    channels: dict[str, grpc.Channel], egbe: EmbeddedEgbe, probe: StateProbe, name: str, requests: list[Any]
) -> tuple[Outcome, list[str]]:
    """Call, then check the refusal changed nothing; the outcome and the fields it names."""
    rpc = BY_NAME[name]
    before = probe.snapshot()
    outcome = call(channels[rpc.egbe_service], rpc, requests, _metadata(egbe, rpc), CALL_TIMEOUT)
    assert refused(rpc, outcome), outcome
    assert_unchanged(rpc, outcome, before, probe.snapshot())
    assert outcome.error is not None
    status = rpc_status.from_call(outcome.error)  # type: ignore[arg-type]
    assert status is not None, f"{rpc}: {outcome.code.name} without google.rpc details"
    return outcome, [v.field for v in field_violations(status)]


@pytest.mark.parametrize("case", sorted(NAMED_CASES))
def test_duplicates_and_unknown_ids_are_refused_naming_the_field_and_change_nothing(
    case: str, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe, probe: StateProbe
) -> None:
    name, requests, code, field = NAMED_CASES[case]
    outcome, fields = _refusal(channels, adversarial_egbe, probe, name, requests)
    assert outcome.code == code, outcome
    assert field in fields, (outcome.details, fields)


def test_resuming_a_target_without_controls_is_not_found_and_changes_nothing(
    channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe, probe: StateProbe
) -> None:
    """No RPC takes a control id: controls are lifted by scope and target, and a target without one
    is NOT_FOUND (the operator learns the resume did nothing) and changes nothing."""
    rpc = BY_NAME["OperatorService.Resume"]
    before = probe.snapshot()
    request = gateway_pb2.ResumeRequest(
        scope=gateway_pb2.CONTROL_SCOPE_ORI, target="never-controlled", reason="fuzz: nothing to lift"
    )
    outcome = call(channels["gateway"], rpc, [request], _metadata(adversarial_egbe, rpc), CALL_TIMEOUT)
    assert outcome.code == grpc.StatusCode.NOT_FOUND, outcome
    assert "never-controlled" in outcome.details
    assert probe.snapshot() == before


def test_a_tick_going_backwards_is_refused_naming_the_tick_and_changes_nothing(
    channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe, probe: StateProbe
) -> None:
    rpc = BY_NAME["KernelService.Tick"]
    ahead = kernel_pb2.TickRequest(batch=_rows(2 * LATE_TICK, frame(0)))
    moved = call(channels["kernel"], rpc, [ahead], _metadata(adversarial_egbe, rpc), CALL_TIMEOUT)
    assert moved.code == grpc.StatusCode.OK, moved
    behind = kernel_pb2.TickRequest(batch=_rows(2 * LATE_TICK - 1, frame(0)))
    outcome, fields = _refusal(channels, adversarial_egbe, probe, "KernelService.Tick", [behind])
    assert outcome.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "batch.tick" in fields, (outcome.details, fields)


def test_the_state_probe_sees_every_kind_of_accepted_write(
    channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe, probe: StateProbe
) -> None:
    """The "changes nothing" checks above mean something only if the snapshot sees writes."""
    writes: dict[str, tuple[str, Any]] = {
        "kernel_agents": (
            "KernelService.RegisterAgents",
            kernel_pb2.RegisterAgentsRequest(
                world_id=SEEDED_WORLD,
                agents=[
                    kernel_pb2.AgentRegistration(
                        ori=common_pb2.OriRef(
                            tenant_id="tenant-1", world_id=SEEDED_WORLD, ori_id="probe-agent"
                        )
                    )
                ],
            ),
        ),
        "spend": (
            "CognitionGatewayService.AdmitRun",
            gateway_pb2.AdmitRunRequest(
                ori=common_pb2.OriRef(tenant_id="tenant-1", world_id=SEEDED_WORLD, ori_id="probe-admit"),
                tier=common_pb2.COGNITION_TIER_CLOTHO,
                cause=action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING,
            ),
        ),
        "controls": (
            "OperatorService.KillOri",
            gateway_pb2.KillOriRequest(ori_id="probe-killed", reason="the probe must see a new control"),
        ),
        "biography_head": (
            "BiographyService.Append",
            biography_pb2.AppendRequest(
                ori_id=SEEDED_ORI, expected_version=_any_version(), events=[_memory("one more")]
            ),
        ),
    }
    for part, (name, request) in writes.items():
        rpc = BY_NAME[name]
        before = probe.snapshot()
        outcome = call(
            channels[rpc.egbe_service], rpc, [request], _metadata(adversarial_egbe, rpc), CALL_TIMEOUT
        )
        assert outcome.code == grpc.StatusCode.OK, (name, outcome)
        after = probe.snapshot()
        assert getattr(after, part) != getattr(before, part), part


@pytest.mark.parametrize("rpc", RPCS, ids=str)
def test_generated_requests_get_proper_statuses_and_refusals_change_nothing(
    rpc: Rpc, channels: dict[str, grpc.Channel], adversarial_egbe: EmbeddedEgbe, probe: StateProbe
) -> None:
    metadata = _metadata(adversarial_egbe, rpc)
    count = st.integers(1, 3) if rpc.method.client_streaming else st.just(1)
    requests = count.flatmap(
        lambda n: st.lists(message_strategy(rpc.method.input_type), min_size=n, max_size=n)
    )
    state = probe.snapshot()

    @FUZZ_SETTINGS
    @given(requests=requests)
    def fuzz(requests: list[Any]) -> None:
        nonlocal state
        outcome = call(channels[rpc.egbe_service], rpc, requests, metadata, _deadline(rpc))
        assert_proper(rpc, outcome)
        after = probe.snapshot()  # also the next example's "before": one snapshot per request
        if refused(rpc, outcome):
            assert_unchanged(rpc, outcome, state, after)
        state = after

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
