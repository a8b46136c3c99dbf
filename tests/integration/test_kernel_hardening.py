"""Bad input at the kernel's gRPC doors: INVALID_ARGUMENT naming the field, and every agent's state
read back unchanged (GetAgentState before and after)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, kernel_pb2_grpc
from kernel_service.bounds import MAX_TICK
from services.auth import bearer_metadata
from services.settings import Endpoint
from tests.integration.test_kernel_service import TOKEN, serve
from tests.kernel_service.frames import WORLD, frame, make_kernel, registrations, rows

AGENTS = 8
MD = bearer_metadata(TOKEN)


@pytest.fixture(params=["c", "numpy"])
async def stub(request: pytest.FixtureRequest) -> AsyncIterator[kernel_pb2_grpc.KernelServiceStub]:
    running = await serve(Endpoint(port=0), request.param)
    channel = grpc.aio.insecure_channel(running.target)
    try:
        kernel = kernel_pb2_grpc.KernelServiceStub(channel)
        await kernel.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)), metadata=MD
        )
        await kernel.Tick(kernel_pb2.TickRequest(batch=rows(5, [frame(1, on_screen=True)])), metadata=MD)
        yield kernel
    finally:
        await channel.close()
        await running.stop()


async def _states(kernel: kernel_pb2_grpc.KernelServiceStub) -> list[bytes]:
    return [
        (
            await kernel.GetAgentState(
                kernel_pb2.GetAgentStateRequest(world_id=WORLD, slot=slot), metadata=MD
            )
        ).SerializeToString(deterministic=True)
        for slot in range(AGENTS)
    ]


def _fields(error: grpc.aio.AioRpcError) -> list[str]:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    status = rpc_status.from_call(error)
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    return [violation.field for violation in bad_request.field_violations]


async def test_an_unknown_directive_kind_is_invalid_argument(stub: kernel_pb2_grpc.KernelServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.ApplyStewardDirective(
            kernel_pb2.ApplyStewardDirectiveRequest(
                world_id=WORLD,
                ori_id="ori-1",
                directive=kernel_pb2.StewardDirective(steward_id="s", kind=99),  # type: ignore[arg-type]
            ),
            metadata=MD,
        )
    assert _fields(error.value) == ["directive.kind"]


async def test_control_characters_in_an_id_register_nobody(stub: kernel_pb2_grpc.KernelServiceStub) -> None:
    agents = registrations(2, start=AGENTS)
    agents[1].ori.ori_id = "ori-\x00-x"
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=agents), metadata=MD
        )
    assert _fields(error.value) == ["agents[1].ori.ori_id"]
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stub.GetAgentState(kernel_pb2.GetAgentStateRequest(world_id=WORLD, slot=AGENTS), metadata=MD)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_replayed_tick_with_a_result_that_does_not_fit_changes_nothing(
    stub: kernel_pb2_grpc.KernelServiceStub,
) -> None:
    before = await _states(stub)
    logged = kernel_pb2.TickLogTick(
        batch=rows(6, [frame(2, on_screen=True), frame(3, player_nearby_in_world=True)]),
        merged_results=[
            action_pb2.ActionIntent(slot=2, kind=action_pb2.ACTION_KIND_WORK, plan_step=3),
            action_pb2.ActionIntent(slot=3, kind=300, plan_step=70_000),  # type: ignore[arg-type]
        ],
    )

    async def requests() -> AsyncIterator[kernel_pb2.ReplayTicksRequest]:
        yield kernel_pb2.ReplayTicksRequest(tick=logged)

    with pytest.raises(grpc.aio.AioRpcError) as error:
        async for _ in stub.ReplayTicks(requests(), metadata=MD):
            pass
    assert _fields(error.value) == ["merged_results[1].kind", "merged_results[1].plan_step"]
    assert await _states(stub) == before


async def test_a_snapshot_out_of_range_restores_nothing(stub: kernel_pb2_grpc.KernelServiceStub) -> None:
    before = await _states(stub)
    snapshot = make_kernel(2, behavior=True).snapshot()  # a valid one, of another population
    [tier] = [named for named in snapshot.arrays if named.name == "tier"]
    tier.data = bytes([0, 200])
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.RestoreSnapshot(kernel_pb2.RestoreSnapshotRequest(snapshot=snapshot), metadata=MD)
    assert _fields(error.value) == ["snapshot.arrays.tier"]
    assert await _states(stub) == before
    reply = await stub.Tick(kernel_pb2.TickRequest(batch=rows(7, [frame(1, on_screen=True)])), metadata=MD)
    assert [(i.slot, i.tier) for i in reply.result.actions.intents] == [(1, common_pb2.COGNITION_TIER_CLOTHO)]


async def test_a_tick_past_the_last_a_world_may_use_is_refused(
    stub: kernel_pb2_grpc.KernelServiceStub,
) -> None:
    before = await _states(stub)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.Tick(kernel_pb2.TickRequest(batch=rows(MAX_TICK + 1, [frame(0)])), metadata=MD)
    assert _fields(error.value) == ["batch.tick"]
    assert await _states(stub) == before
