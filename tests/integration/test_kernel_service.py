"""The kernel over real gRPC: TCP and unix sockets, unary and streamed ticks, all three encodings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from assembly.settings import load_settings
from egbe.v1 import action_pb2, common_pb2, kernel_pb2, kernel_pb2_grpc, perception_pb2
from kernel_service.server import build_bundle
from services.auth import Role, TokenStore, bearer_metadata
from services.server import RunningService, start_service
from services.settings import Endpoint
from tests.kernel_service.frames import WORLD, columns, frame, registrations, rows

TOKEN = "world-token-0123456789"
AGENTS = 64


async def serve(endpoint: Endpoint, core: str) -> RunningService:
    settings = load_settings(data_dir="/nonexistent-egbe-test", kernel={"core": core})
    tokens = TokenStore({Role.WORLD: [TOKEN], Role.OPERATOR: ["operator-token-0123456789"]})
    bundle = await build_bundle(settings, tokens)
    assert bundle.info == {
        "core": core,
        "tick_threads": "1",
        "gateway_target": "unset",
        "biography_target": "unset",
        "policy_target": "unset",
    }
    return await start_service(bundle, endpoint, tokens, settings)


@pytest.fixture(params=["tcp", "uds"])
async def kernel_stub(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[kernel_pb2_grpc.KernelServiceStub]:
    if request.param == "tcp":
        endpoint = Endpoint(port=0)
    else:
        endpoint = Endpoint(port=0, unix_socket=Path("/tmp") / f"egbe-kernel-{tmp_path.name}.sock")
    running = await serve(endpoint, "c")
    channel = grpc.aio.insecure_channel(running.target)
    try:
        stub = kernel_pb2_grpc.KernelServiceStub(channel)
        await stub.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)),
            metadata=bearer_metadata(TOKEN),
        )
        yield stub
    finally:
        await channel.close()
        await running.stop()


async def test_tick_answers_rows_with_rows(kernel_stub: kernel_pb2_grpc.KernelServiceStub) -> None:
    reply = await kernel_stub.Tick(
        kernel_pb2.TickRequest(
            batch=rows(1, [frame(3, on_screen=True), frame(5, player_nearby_in_world=True)])
        ),
        metadata=bearer_metadata(TOKEN),
    )
    result = reply.result
    assert [(i.slot, i.ori_id, i.tier) for i in result.actions.intents] == [
        (3, "ori-3", common_pb2.COGNITION_TIER_CLOTHO),
        (5, "ori-5", common_pb2.COGNITION_TIER_LACHESIS),
    ]
    assert not result.actions.HasField("columns")
    assert result.report.core == "c"
    assert [
        c.slot for c in result.candidates if c.cause == action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING
    ] == [3]


async def test_stream_answers_columns_full_and_delta(kernel_stub: kernel_pb2_grpc.KernelServiceStub) -> None:
    flags = np.full(AGENTS, 1 << 5, dtype=np.uint16)

    async def batches() -> AsyncIterator[kernel_pb2.StreamTicksRequest]:
        yield kernel_pb2.StreamTicksRequest(batch=columns(1, signal_flags=flags))
        yield kernel_pb2.StreamTicksRequest(
            batch=columns(2, slots=np.array([10, 20]), signal_flags=np.array([1 << 1, 0], np.uint16))
        )
        yield kernel_pb2.StreamTicksRequest(
            batch=columns(3, slots=np.array([30]), signal_flags=np.array([1 << 5], np.uint16))
        )

    replies = [r.result async for r in kernel_stub.StreamTicks(batches(), metadata=bearer_metadata(TOKEN))]
    full, delta, quiet = (r.actions.columns for r in replies)
    assert full.count == AGENTS
    assert not full.slots
    assert set(np.frombuffer(full.tier, "u1").tolist()) == {common_pb2.COGNITION_TIER_LACHESIS}
    # The delta answers exactly the agents whose action changed: 10 went on screen, 20 went offline
    # (held by damping, but its reason changed), and slot 1 made its first staggered reflection.
    changed = np.frombuffer(delta.slots, "<u4").tolist()
    assert 10 in changed
    assert 20 in changed
    tiers = dict(zip(changed, np.frombuffer(delta.tier, "u1").tolist(), strict=True))
    assert tiers[10] == common_pb2.COGNITION_TIER_CLOTHO
    assert quiet.count == len(np.frombuffer(quiet.slots, "<u4"))


async def test_bad_batch_is_invalid_argument_naming_the_field(
    kernel_stub: kernel_pb2_grpc.KernelServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await kernel_stub.Tick(
            kernel_pb2.TickRequest(batch=rows(1, [frame(0, player_proximity_mm=-1)])),
            metadata=bearer_metadata(TOKEN),
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(error.value)
    bad_request = error_details_pb2.BadRequest()
    assert status is not None
    assert status.details[0].Unpack(bad_request)
    assert [v.field for v in bad_request.field_violations] == ["batch.frames[0].player_proximity_mm"]
    # Nothing was applied: the agent has never been ticked.
    state = await kernel_stub.GetAgentState(
        kernel_pb2.GetAgentStateRequest(world_id=WORLD, slot=0), metadata=bearer_metadata(TOKEN)
    )
    assert state.tier == common_pb2.COGNITION_TIER_UNSPECIFIED


async def test_agent_state_and_steward_directive(kernel_stub: kernel_pb2_grpc.KernelServiceStub) -> None:
    await kernel_stub.Tick(
        kernel_pb2.TickRequest(batch=rows(1, [frame(7, player_nearby_in_world=True)])),
        metadata=bearer_metadata(TOKEN),
    )
    state = await kernel_stub.GetAgentState(
        kernel_pb2.GetAgentStateRequest(world_id=WORLD, ori_id="ori-7"),
        metadata=bearer_metadata("operator-token-0123456789"),
    )
    assert (state.slot, state.tier, state.core) == (7, common_pb2.COGNITION_TIER_LACHESIS, "c")
    # The served kernel runs the behaviour layer: a Lachesis Ori with no traits observes, in character.
    assert state.cached_action.kind == action_pb2.ACTION_KIND_OBSERVE
    assert state.cached_action.source == action_pb2.ACTION_SOURCE_BEHAVIOR_TREE
    assert state.next_reflection_tick == 1 + 1 + 7
    reply = await kernel_stub.ApplyStewardDirective(
        kernel_pb2.ApplyStewardDirectiveRequest(
            world_id=WORLD,
            ori_id="ori-7",
            directive=kernel_pb2.StewardDirective(
                steward_id="st",
                kind=kernel_pb2.STEWARD_DIRECTIVE_KIND_WIPE_MEMORY,
                text="Forget the fire.",
            ),
        ),
        metadata=bearer_metadata(TOKEN),
    )
    # A forbidden kind is refused by the kernel itself, policy target or not (test_kernel_steward_policy).
    assert not reply.allowed
    assert not reply.reclassified
    assert reply.action.kind == action_pb2.ACTION_KIND_REFUSE_OBJECTIVE
    assert reply.policy_ref == "policy:steward-not-owner"
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await kernel_stub.GetAgentState(
            kernel_pb2.GetAgentStateRequest(world_id=WORLD, ori_id="nobody"), metadata=bearer_metadata(TOKEN)
        )
    assert error.value.code() == grpc.StatusCode.NOT_FOUND


async def test_numpy_core_is_selectable_and_reported() -> None:
    running = await serve(Endpoint(port=0), "numpy")
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = kernel_pb2_grpc.KernelServiceStub(channel)
            await stub.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(2)),
                metadata=bearer_metadata(TOKEN),
            )
            reply = await stub.Tick(
                kernel_pb2.TickRequest(batch=perception_pb2.PerceptionBatch(world_id=WORLD, tick=1)),
                metadata=bearer_metadata(TOKEN),
            )
            assert reply.result.report.core == "numpy"
    finally:
        await running.stop()
