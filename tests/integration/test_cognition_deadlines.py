"""Cognition's peer calls end by the deadline of the call they serve, over real gRPC: the real policy
service and gRPC stand-ins of the gateway and the biography, each noting the deadline it was given."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from assembly.settings import load_settings
from cognition_service.grpc_peers import GrpcPeers
from cognition_service.servicer import METHOD_ROLES, CognitionServicer
from egbe.v1 import (
    biography_pb2,
    biography_pb2_grpc,
    cognition_pb2,
    cognition_pb2_grpc,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    policy_pb2,
    policy_pb2_grpc,
)
from policy_service.config import PolicyConfig
from policy_service.servicer import PolicyServicer
from services.auth import Role
from services.channels import channel_opener
from services.grpc_types import Context
from services.server import ServiceBundle
from tests.cognition_service.doubles import RecordingBiography, ScriptedGateway, dialogue
from tests.integration.inprocess_services import TOKENS, channel_to, metadata, serve_bundles

SETTINGS = load_settings(data_dir="/nonexistent-egbe-test")
PEER_TIMEOUT = 20.0
# Wide enough that cognition's own answer reaches the test before the test's deadline on a busy machine.
MARGIN = 0.5
# gRPC carries a timeout rounded up (to 100 ms units at 20 s): the receiver's deadline can fall this
# much after the sender's, at each hop.
WIRE_ROUNDING = 0.1
# The peer calls of a committed dialogue Think with a claim to ground, in order.
THINK_CALLS = ["Rehydrate", "Ground", "Generate", "Gate", "Append"]


@dataclass
class Deadlines:
    """Each peer call received, by RPC name, with the monotonic time its deadline falls at (None: none)."""

    seen: list[tuple[str, float | None]] = field(default_factory=list)

    def note(self, rpc: str, context: Context) -> None:
        remaining = context.time_remaining()
        self.seen.append((rpc, None if remaining is None else time.monotonic() + remaining))

    def names(self) -> list[str]:
        return [name for name, _ in self.seen]


class GatewayStandIn(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    """Answers Generate with the scripted gateway's reply, after `delay` seconds."""

    def __init__(self, deadlines: Deadlines) -> None:
        self.scripted = ScriptedGateway([dialogue()])
        self.delay = 0.0
        self._deadlines = deadlines

    async def Generate(
        self, request: gateway_pb2.GenerateRequest, context: Context
    ) -> gateway_pb2.GenerateResponse:
        self._deadlines.note("Generate", context)
        await asyncio.sleep(self.delay)
        return await self.scripted.generate(request)


class BiographyStandIn(biography_pb2_grpc.BiographyServiceServicer):
    """The recording biography's Rehydrate and Append behind a gRPC port."""

    def __init__(self, deadlines: Deadlines) -> None:
        self.recording = RecordingBiography()
        self._deadlines = deadlines

    async def Rehydrate(
        self, request: biography_pb2.RehydrateRequest, context: Context
    ) -> biography_pb2.RehydrateResponse:
        self._deadlines.note("Rehydrate", context)
        return await self.recording.rehydrate(request)

    async def Append(
        self, request: biography_pb2.AppendRequest, context: Context
    ) -> biography_pb2.AppendResponse:
        self._deadlines.note("Append", context)
        return await self.recording.append(request)


class NotedPolicy(PolicyServicer):
    """The real policy service, noting the deadline of each call cognition makes to it."""

    def __init__(self, deadlines: Deadlines) -> None:
        super().__init__(PolicyConfig())
        self._deadlines = deadlines

    async def Ground(self, request: policy_pb2.GroundRequest, context: Context) -> policy_pb2.GroundResponse:
        self._deadlines.note("Ground", context)
        return await super().Ground(request, context)

    async def Gate(self, request: policy_pb2.GateRequest, context: Context) -> policy_pb2.GateResponse:
        self._deadlines.note("Gate", context)
        return await super().Gate(request, context)

    async def CheckMinorProtection(
        self, request: policy_pb2.CheckMinorProtectionRequest, context: Context
    ) -> policy_pb2.CheckMinorProtectionResponse:
        self._deadlines.note("CheckMinorProtection", context)
        return await super().CheckMinorProtection(request, context)


@dataclass
class Harness:
    cognition: cognition_pb2_grpc.CognitionServiceStub
    deadlines: Deadlines
    gateway: GatewayStandIn
    biography: BiographyStandIn


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    deadlines = Deadlines()
    gateway, biography = GatewayStandIn(deadlines), BiographyStandIn(deadlines)
    peers_server = grpc.aio.server()
    gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server(gateway, peers_server)
    biography_pb2_grpc.add_BiographyServiceServicer_to_server(biography, peers_server)
    policy_pb2_grpc.add_PolicyServiceServicer_to_server(NotedPolicy(deadlines), peers_server)
    target = f"127.0.0.1:{peers_server.add_insecure_port('127.0.0.1:0')}"
    await peers_server.start()
    peers = GrpcPeers(
        lambda: {"gateway": target, "policy": target, "biography": target},
        lambda: TOKENS[Role.SERVICE],
        timeout_seconds=PEER_TIMEOUT,
        deadline_margin_seconds=MARGIN,
        dial=channel_opener(SETTINGS),
    )
    servicer = CognitionServicer(
        SETTINGS.cognition, peers.peers, lambda: peers.social(SETTINGS.cognition.social)
    )
    bundle = ServiceBundle(
        "cognition", [(cognition_pb2_grpc.add_CognitionServiceServicer_to_server, servicer)], METHOD_ROLES
    )
    try:
        async with (
            serve_bundles([bundle], SETTINGS) as served,
            channel_to(served.target("cognition")) as channel,
        ):
            yield Harness(cognition_pb2_grpc.CognitionServiceStub(channel), deadlines, gateway, biography)
    finally:
        await peers.close()
        await peers_server.stop(None)


def _think() -> cognition_pb2.ThinkRequest:
    return cognition_pb2.ThinkRequest(
        run_id="run-1",
        ori=common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-1"),
        tier=common_pb2.COGNITION_TIER_CLOTHO,
        mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
        locale="en-US",
        stimulus="Ada: is the ferry running?",
        counterpart_id="ada",
        claims=[policy_pb2.Claim(claim_id="c1", kind=policy_pb2.CLAIM_KIND_FACT, text="The ferry runs.")],
        world_facts=[policy_pb2.Evidence(evidence_id="f1", text="The ferry runs again since spring.")],
    )


def _seed() -> cognition_pb2.SeedRelationshipRequest:
    return cognition_pb2.SeedRelationshipRequest(
        ori=common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-a"),
        counterpart=common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ori-b"),
        edge_kind="friend",
        tags=["friendship"],
        world_tick=3,
    )


def _spent_deadline_answer(error: grpc.aio.AioRpcError) -> dict[str, str]:
    """The ErrorInfo metadata of cognition's own DEADLINE_EXCEEDED (a deadline the client's channel
    enforced itself would carry no details)."""
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    status = rpc_status.from_call(error)
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[-1].Unpack(info)
    assert (info.reason, info.domain) == ("DEADLINE_EXCEEDED", "egbe.dev")
    return dict(info.metadata)


async def test_every_peer_call_of_a_think_ends_by_the_callers_deadline_less_the_margin(
    harness: Harness,
) -> None:
    caller_deadline = time.monotonic() + 3.0
    response = await harness.cognition.Think(_think(), metadata=metadata(), timeout=3.0)

    assert response.committed_event_ids
    assert harness.deadlines.names() == THINK_CALLS
    for rpc, deadline in harness.deadlines.seen:
        assert deadline is not None, rpc
        assert deadline <= caller_deadline - MARGIN + 2 * WIRE_ROUNDING, rpc


async def test_without_a_caller_deadline_each_peer_call_has_the_configured_timeout(
    harness: Harness,
) -> None:
    sent = time.monotonic()
    await harness.cognition.Think(_think(), metadata=metadata())

    assert harness.deadlines.names() == THINK_CALLS
    for rpc, deadline in harness.deadlines.seen:
        assert deadline is not None, rpc
        assert sent + PEER_TIMEOUT - 5 < deadline <= time.monotonic() + PEER_TIMEOUT + WIRE_ROUNDING, rpc


async def test_a_slow_peer_is_cut_off_at_the_callers_deadline_and_nothing_is_committed(
    harness: Harness,
) -> None:
    harness.gateway.delay = 30.0
    caller_deadline = time.monotonic() + 2.0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.cognition.Think(_think(), metadata=metadata(), timeout=2.0)

    assert time.monotonic() < caller_deadline
    assert _spent_deadline_answer(caught.value) == {
        "peer": "gateway Generate",
        "peer_code": "DEADLINE_EXCEEDED",
    }
    assert harness.deadlines.names() == ["Rehydrate", "Ground", "Generate"]
    generate_deadline = harness.deadlines.seen[-1][1]
    assert generate_deadline is not None
    assert generate_deadline <= caller_deadline - MARGIN + 2 * WIRE_ROUNDING
    assert harness.biography.recording.appended == []


async def test_a_think_whose_deadline_is_spent_makes_no_peer_call(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.cognition.Think(_think(), metadata=metadata(), timeout=MARGIN / 2)

    assert _spent_deadline_answer(caught.value) == {
        "peer": "biography Rehydrate",
        "peer_code": "DEADLINE_EXCEEDED",
    }
    assert caught.value.details() == (
        "biography Rehydrate failed: DEADLINE_EXCEEDED: not sent: the caller's deadline has passed"
    )
    assert harness.deadlines.seen == []
    assert harness.gateway.scripted.requests == []


async def test_a_seed_relationship_passes_its_deadline_on_and_stops_when_it_is_spent(
    harness: Harness,
) -> None:
    caller_deadline = time.monotonic() + 3.0
    seeded = await harness.cognition.SeedRelationship(_seed(), metadata=metadata(Role.WORLD), timeout=3.0)
    assert seeded.seeded
    assert harness.deadlines.names() == ["CheckMinorProtection", "CheckMinorProtection", "Append", "Append"]
    for rpc, deadline in harness.deadlines.seen:
        assert deadline is not None, rpc
        assert deadline <= caller_deadline - MARGIN + 2 * WIRE_ROUNDING, rpc

    harness.deadlines.seen.clear()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.cognition.SeedRelationship(_seed(), metadata=metadata(Role.WORLD), timeout=MARGIN / 2)
    assert _spent_deadline_answer(caught.value) == {
        "peer": "policy CheckMinorProtection",
        "peer_code": "DEADLINE_EXCEEDED",
    }
    assert harness.deadlines.seen == []
    assert len(harness.biography.recording.appended) == 2
