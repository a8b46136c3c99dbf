"""World tokens scoped to tenants and worlds, over real gRPC: a call outside the scope is
PERMISSION_DENIED naming the field, and changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_status import rpc_status

from assembly.settings import load_settings
from cognition_service.server import build_bundle as build_cognition
from egbe.v1 import cognition_pb2, cognition_pb2_grpc, common_pb2, kernel_pb2, kernel_pb2_grpc
from kernel_service.server import build_bundle
from services.auth import Role, Scope, ScopedToken, TokenStore, bearer_metadata
from services.errors import field_violations
from services.server import start_service
from services.settings import Endpoint
from tests.kernel_service.frames import WORLD, frame, registrations, rows

SCOPED = "world-token-for-tenant-1-only"
OTHER_WORLD = "world-token-for-another-world"
UNSCOPED = "world-token-for-every-world"


@pytest.fixture
async def kernel() -> AsyncIterator[kernel_pb2_grpc.KernelServiceStub]:
    settings = load_settings(data_dir="/nonexistent-egbe-test", log_level="warning")
    tokens = TokenStore(
        {
            Role.WORLD: [
                ScopedToken(SCOPED, Scope(frozenset({"tenant-1"}), ("world-*",))),
                ScopedToken(OTHER_WORLD, Scope(None, ("elsewhere",))),
                UNSCOPED,
            ]
        }
    )
    running = await start_service(await build_bundle(settings, tokens), Endpoint(port=0), tokens, settings)
    channel = grpc.aio.insecure_channel(running.target)
    try:
        yield kernel_pb2_grpc.KernelServiceStub(channel)
    finally:
        await channel.close()
        await running.stop()


def _fields(error: grpc.aio.AioRpcError) -> list[str]:
    status = rpc_status.from_call(error)
    assert status is not None
    return [v.field for v in field_violations(status)]


async def test_a_registration_naming_a_tenant_outside_the_scope_is_refused_whole(
    kernel: kernel_pb2_grpc.KernelServiceStub,
) -> None:
    agents = registrations(3)
    agents[2].ori.CopyFrom(common_pb2.OriRef(tenant_id="tenant-2", world_id=WORLD, ori_id="ori-2"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await kernel.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=agents), metadata=bearer_metadata(SCOPED)
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _fields(refused.value) == ["agents[2].ori.tenant_id"]
    # Nothing was registered: the first Ori is unknown until an in-scope registration.
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await kernel.GetAgentState(
            kernel_pb2.GetAgentStateRequest(world_id=WORLD, ori_id="ori-0"),
            metadata=bearer_metadata(UNSCOPED),
        )
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    registered = await kernel.RegisterAgents(
        kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(3)),
        metadata=bearer_metadata(SCOPED),
    )
    assert list(registered.slots) == [0, 1, 2]


async def test_a_token_scoped_to_another_world_can_neither_register_nor_tick_this_one(
    kernel: kernel_pb2_grpc.KernelServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await kernel.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(2)),
            metadata=bearer_metadata(OTHER_WORLD),
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _fields(refused.value) == ["world_id"]
    await kernel.RegisterAgents(
        kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(2)),
        metadata=bearer_metadata(SCOPED),
    )
    stream = kernel.StreamTicks(metadata=bearer_metadata(OTHER_WORLD))
    await stream.write(kernel_pb2.StreamTicksRequest(batch=rows(1, [frame(0)])))
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await stream.read()
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _fields(denied.value) == ["batch.world_id"]
    answered = await kernel.Tick(
        kernel_pb2.TickRequest(batch=rows(1, [frame(0)])), metadata=bearer_metadata(SCOPED)
    )
    # The refused tick changed nothing: tick 1 is still the world's next (a repeat would be refused).
    assert answered.result.actions.tick == 1


async def test_cognition_refuses_a_social_act_for_an_ori_outside_the_scope(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, log_level="warning")
    tokens = TokenStore(
        {
            Role.WORLD: [ScopedToken(SCOPED, Scope(frozenset({"tenant-1"}), ("world-*",)))],
            Role.SERVICE: ["service-token-0123456789"],
        }
    )
    running = await start_service(await build_cognition(settings, tokens), Endpoint(port=0), tokens, settings)
    ada = common_pb2.OriRef(tenant_id="tenant-1", world_id=WORLD, ori_id="ada")
    stranger = common_pb2.OriRef(tenant_id="tenant-2", world_id=WORLD, ori_id="bram")
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            cognition = cognition_pb2_grpc.CognitionServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await cognition.SeedRelationship(
                    cognition_pb2.SeedRelationshipRequest(
                        ori=ada, counterpart=stranger, edge_kind="friend", tags=["friendship"], world_tick=3
                    ),
                    metadata=bearer_metadata(SCOPED),
                )
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert _fields(refused.value) == ["counterpart.tenant_id"]
            with pytest.raises(grpc.aio.AioRpcError) as elsewhere:
                await cognition.NegotiateObjective(
                    cognition_pb2.NegotiateObjectiveRequest(
                        ori=common_pb2.OriRef(tenant_id="tenant-1", world_id="mill", ori_id="ada")
                    ),
                    metadata=bearer_metadata(SCOPED),
                )
            assert elsewhere.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert _fields(elsewhere.value) == ["ori.world_id"]
    finally:
        await running.stop()
