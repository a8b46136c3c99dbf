"""RegisterAgents with identities over real gRPC: the kernel records them in a real biography first."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from assembly.settings import EgbeSettings, load_settings
from biography_service.server import build_bundle as build_biography
from egbe.v1 import (
    biography_pb2,
    biography_pb2_grpc,
    common_pb2,
    kernel_pb2,
    kernel_pb2_grpc,
    perception_pb2,
)
from kernel_service.server import build_bundle as build_kernel
from services.auth import Role
from services.local_cluster import free_ports
from services.server import RunningService, start_service
from services.settings import Endpoint
from tests.integration.inprocess_services import metadata, token_store
from tests.kernel_service.frames import WORLD, registrations

AGENTS = 4


def identity(name: str, vocation: str = "smith") -> biography_pb2.OriIdentity:
    return biography_pb2.OriIdentity(
        display_name=name,
        vocation=vocation,
        home="the hamlet",
        locale="en-US",
        personality=[biography_pb2.TraitLevel(axis="warmth", level_bp=7_000)],
        quirks=["hums while working"],
    )


def agents_with_identities(**named: biography_pb2.OriIdentity) -> list[kernel_pb2.AgentRegistration]:
    """AGENTS registrations; `ori_N=identity` gives slot N one."""
    agents = registrations(AGENTS)
    for ori, given in named.items():
        agents[int(ori.removeprefix("ori_"))].identity.CopyFrom(given)
    return agents


async def start_biography(tmp_path: Path, port: int = 0) -> RunningService:
    settings = EgbeSettings(data_dir=tmp_path / "biography", endpoints={"biography": Endpoint(port=port)})
    tokens = token_store()
    return await start_service(
        await build_biography(settings, tokens), settings.endpoints["biography"], tokens, settings
    )


@asynccontextmanager
async def kernel_at(
    tmp_path: Path, biography_target: str | None
) -> AsyncIterator[kernel_pb2_grpc.KernelServiceStub]:
    kernel_settings = {} if biography_target is None else {"biography_target": biography_target}
    settings = load_settings(data_dir=tmp_path / "kernel", kernel=kernel_settings)
    tokens = token_store()
    running = await start_service(await build_kernel(settings, tokens), Endpoint(port=0), tokens, settings)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            yield kernel_pb2_grpc.KernelServiceStub(channel)
    finally:
        await running.stop()


async def events_of(biography: RunningService, ori_id: str) -> list[biography_pb2.OriEvent]:
    async with grpc.aio.insecure_channel(biography.target) as channel:
        reply = await biography_pb2_grpc.BiographyServiceStub(channel).Read(
            biography_pb2.ReadRequest(ori_id=ori_id, page_size=100), metadata=metadata(Role.SERVICE)
        )
    return list(reply.events)


async def registered(kernel: kernel_pb2_grpc.KernelServiceStub, ori_id: str) -> bool:
    try:
        await kernel.GetAgentState(
            kernel_pb2.GetAgentStateRequest(world_id=WORLD, ori_id=ori_id), metadata=metadata(Role.WORLD)
        )
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
        return False
    return True


def violations(error: grpc.aio.AioRpcError) -> list[str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    found = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            found += [v.field for v in bad.field_violations]
    return found


IDENTITY_KINDS = (
    biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED,
    biography_pb2.ORI_EVENT_KIND_IDENTITY_CHANGED,
)


async def test_identities_are_recorded_before_the_kernel_registers(tmp_path: Path) -> None:
    biography = await start_biography(tmp_path)
    try:
        async with kernel_at(tmp_path, biography.target) as kernel:
            reply = await kernel.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(
                    world_id=WORLD,
                    agents=agents_with_identities(ori_1=identity("Adaeze"), ori_3=identity("Kunle")),
                ),
                metadata=metadata(Role.WORLD),
            )
            assert list(reply.slots) == [0, 1, 2, 3]
            adaeze = await events_of(biography, "ori-1")
            assert [(e.kind, e.world_tick) for e in adaeze] == [
                (biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED, 0)
            ]
            assert adaeze[0].payload["display_name"] == "Adaeze"
            assert adaeze[0].payload["identity_version"] == 1
            assert [e.kind for e in await events_of(biography, "ori-3")] == [
                biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED
            ]
            assert await events_of(biography, "ori-0") == []
            # After ticks, a changed identity takes effect at the next tick; the same one is a no-op.
            for tick in (1, 2):
                await kernel.Tick(
                    kernel_pb2.TickRequest(
                        batch=perception_pb2.PerceptionBatch(
                            world_id=WORLD,
                            tick=tick,
                            frames=[perception_pb2.PerceptionFrame(slot=s) for s in range(AGENTS)],
                        )
                    ),
                    metadata=metadata(Role.WORLD),
                )
            await kernel.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(
                    world_id=WORLD,
                    agents=agents_with_identities(
                        ori_1=identity("Adaeze", "weaver"), ori_3=identity("Kunle")
                    ),
                ),
                metadata=metadata(Role.WORLD),
            )
            assert [(e.kind, e.world_tick) for e in await events_of(biography, "ori-1")] == [
                (biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED, 0),
                (biography_pb2.ORI_EVENT_KIND_IDENTITY_CHANGED, 3),
            ]
            assert len(await events_of(biography, "ori-3")) == 1
    finally:
        await biography.stop()


async def test_a_refused_identity_names_the_agent_field_and_registers_no_one(tmp_path: Path) -> None:
    biography = await start_biography(tmp_path)
    try:
        async with kernel_at(tmp_path, biography.target) as kernel:
            bad = identity("")  # a display name is required
            bad.quirks.append("x" * 241)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await kernel.RegisterAgents(
                    kernel_pb2.RegisterAgentsRequest(
                        world_id=WORLD, agents=agents_with_identities(ori_0=identity("Ireti"), ori_2=bad)
                    ),
                    metadata=metadata(Role.WORLD),
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert violations(refused.value) == [
                "agents[2].identity.display_name",
                "agents[2].identity.quirks[1]",
            ]
            assert not await registered(kernel, "ori-0")
            assert await events_of(biography, "ori-0") == []
            # A registration the kernel itself refuses never reaches the biography.
            agents = agents_with_identities(ori_0=identity("Ireti"))
            agents[1].traits.warmth_bp = 10_001
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await kernel.RegisterAgents(
                    kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=agents),
                    metadata=metadata(Role.WORLD),
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert violations(refused.value) == ["agents[1].traits.warmth_bp"]
            assert await events_of(biography, "ori-0") == []
    finally:
        await biography.stop()


async def test_an_unreachable_biography_registers_no_one_and_a_retry_succeeds(tmp_path: Path) -> None:
    [port] = free_ports(1)
    async with kernel_at(tmp_path, f"127.0.0.1:{port}") as kernel:
        request = kernel_pb2.RegisterAgentsRequest(
            world_id=WORLD, agents=agents_with_identities(ori_2=identity("Folasade"))
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await kernel.RegisterAgents(request, metadata=metadata(Role.WORLD))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "a retry is safe" in (refused.value.details() or "")
        assert not await registered(kernel, "ori-2")
        biography = await start_biography(tmp_path, port)
        try:
            # The world retries as it would; the kernel's channel reconnects within its backoff.
            reply = None
            for _ in range(50):
                try:
                    reply = await kernel.RegisterAgents(request, metadata=metadata(Role.WORLD))
                    break
                except grpc.aio.AioRpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    await asyncio.sleep(0.2)
            assert reply is not None
            assert reply.registered_total == AGENTS
            assert [e.kind for e in await events_of(biography, "ori-2")] == [
                biography_pb2.ORI_EVENT_KIND_IDENTITY_REGISTERED
            ]
        finally:
            await biography.stop()


async def test_identities_without_a_biography_target_are_refused(tmp_path: Path) -> None:
    async with kernel_at(tmp_path, None) as kernel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await kernel.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(
                    world_id=WORLD, agents=agents_with_identities(ori_3=identity("Tobi"))
                ),
                metadata=metadata(Role.WORLD),
            )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "configure kernel.biography_target" in (refused.value.details() or "")
        assert violations(refused.value) == ["agents[3].identity"]
        assert not await registered(kernel, "ori-0")
        # Without identities the same kernel registers as it always did.
        reply = await kernel.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)),
            metadata=metadata(Role.WORLD),
        )
        assert reply.registered_total == AGENTS
        state = await kernel.GetAgentState(
            kernel_pb2.GetAgentStateRequest(world_id=WORLD, ori_id="ori-3"), metadata=metadata(Role.WORLD)
        )
        assert state.ori == common_pb2.OriRef(tenant_id="tenant-1", world_id=WORLD, ori_id="ori-3")
