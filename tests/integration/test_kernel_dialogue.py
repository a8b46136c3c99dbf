"""A player's line over real gRPC: the kernel's dispatcher submits a dialogue call carrying its moment
to a gateway (a recording stand-in served on a socket), and the reply is said on the merge tick."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from assembly.settings import load_settings
from egbe.v1 import (
    action_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    kernel_pb2,
    kernel_pb2_grpc,
    perception_pb2,
)
from kernel_service.server import build_bundle
from kernel_service.tick_log import deterministic_digest, read_records
from services.auth import Role
from services.grpc_types import Context
from services.server import start_service
from services.settings import Endpoint
from tests.integration.inprocess_services import TOKENS, metadata, token_store
from tests.kernel_service.frames import WORLD, frame, registrations

AGENTS = 3
REPLY = "Welcome, traveller. The forge is hot."


class RecordingGateway(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    """Records every Submit; answers a dialogue call with a reply, any other call with nothing."""

    def __init__(self) -> None:
        self.submitted: list[gateway_pb2.SubmitRequest] = []
        self.tokens: list[str] = []

    async def Submit(
        self, request: gateway_pb2.SubmitRequest, context: Context
    ) -> gateway_pb2.SubmitResponse:
        self.submitted.append(request)
        self.tokens += [value for key, value in context.invocation_metadata() if key == "authorization"]
        response = gateway_pb2.SubmitResponse(run_id=f"run-{len(self.submitted)}", offline=True)
        if request.mode == gateway_pb2.COGNITION_MODE_DIALOGUE:
            said = response.actions.add(
                kind=action_pb2.ACTION_KIND_SAY, source=action_pb2.ACTION_SOURCE_COGNITION, priority=8_000
            )
            said.payload.update({"mode": "dialogue", "speech": {"text": REPLY, "source": "offline"}})
        return response


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[RecordingGateway, str]]:
    server = grpc.aio.server()
    recording = RecordingGateway()
    gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server(recording, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield recording, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
async def kernel(
    gateway: tuple[RecordingGateway, str], tmp_path: Path
) -> AsyncIterator[kernel_pb2_grpc.KernelServiceStub]:
    settings = load_settings(data_dir=tmp_path, kernel={"gateway_target": gateway[1]})
    tokens = token_store()
    running = await start_service(await build_bundle(settings, tokens), Endpoint(port=0), tokens, settings)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = kernel_pb2_grpc.KernelServiceStub(channel)
            await stub.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)),
                metadata=metadata(Role.WORLD),
            )
            yield stub
    finally:
        await running.stop()


def frames() -> list[perception_pb2.PerceptionFrame]:
    return [
        frame(0),
        frame(1, player_proximity_mm=1_800, need_social_bp=6_500, threat_present=True, minor_present=True),
        frame(2),
    ]


async def test_a_line_reaches_the_gateway_with_its_moment_and_the_reply_is_said(
    gateway: tuple[RecordingGateway, str], kernel: kernel_pb2_grpc.KernelServiceStub
) -> None:
    recording, _ = gateway
    line = perception_pb2.SituationText(
        slot=1,
        player_line=perception_pb2.SpokenLine(
            speaker_id="player-1", speaker_name="the traveller", text="Hello?"
        ),
        crossroads=perception_pb2.CrossroadsText(
            crossroads_id="forge-or-river", prompt="Stay at the forge or follow Tobi?", options=["stay", "go"]
        ),
        place="the forge",
        nearby=["Tobi"],
    )
    first = await kernel.Tick(
        kernel_pb2.TickRequest(
            batch=perception_pb2.PerceptionBatch(world_id=WORLD, tick=1, frames=frames(), situations=[line])
        ),
        metadata=metadata(Role.WORLD),
    )
    [call] = [c for c in first.result.candidates if c.slot == 1]
    assert (call.cause, call.call_id) == (action_pb2.COGNITION_CAUSE_DIALOGUE, f"{WORLD}:1:1:4")
    assert not any(c.HasField("moment") for c in first.result.candidates)  # the world's copy has none
    for _ in range(200):  # bounded: the stand-in answers at once
        if any(r.candidate.slot == 1 for r in recording.submitted):
            break
        await asyncio.sleep(0.01)
    [submitted] = [r for r in recording.submitted if r.candidate.slot == 1]
    assert submitted.mode == gateway_pb2.COGNITION_MODE_DIALOGUE
    assert submitted.request_id == call.call_id
    moment = submitted.candidate.moment
    assert moment.situation == line
    assert (moment.player_proximity_mm, moment.need_social_bp) == (1_800, 6_500)
    assert (moment.threat_present, moment.minor_present) == (True, True)
    assert moment.tier_reason == action_pb2.TIER_REASON_PROXIMITY  # 1.8 m from the player: Clotho
    # The behaviour layer's values: a pressing social need makes the Ori lonely and surfaces a goal.
    assert (moment.emotion, moment.goal, moment.guards) == ("lonely", "social", [])
    others = [r.candidate.moment for r in recording.submitted if r.candidate.slot != 1]
    assert all(not m.HasField("situation") for m in others)
    assert recording.tokens == [f"Bearer {TOKENS[Role.SERVICE]}"] * len(recording.submitted)
    # The next tick merges the reply: slot 1 says it, with the reply's payload and its dispatch time.
    second = await kernel.Tick(
        kernel_pb2.TickRequest(batch=perception_pb2.PerceptionBatch(world_id=WORLD, tick=2, frames=frames())),
        metadata=metadata(Role.WORLD),
    )
    assert second.result.report.cognition_results_merged == 1
    [intent] = [i for i in second.result.actions.intents if i.slot == 1]
    assert intent.kind == action_pb2.ACTION_KIND_SAY
    assert intent.payload["speech"]["text"] == REPLY
    dispatch_us = intent.payload["dispatch_us"]
    assert dispatch_us == int(dispatch_us)
    assert 0 < dispatch_us < 10_000_000
    assert [i.slot for i in second.result.actions.intents if i.HasField("payload")] == [1]


async def test_replay_ticks_reproduces_a_logged_dialogue_tick(tmp_path: Path) -> None:
    log = tmp_path / "ticks.log"
    tokens = token_store()
    recorded = load_settings(data_dir=tmp_path, kernel={"tick_log_path": log})
    running = await start_service(await build_bundle(recorded, tokens), Endpoint(port=0), tokens, recorded)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = kernel_pb2_grpc.KernelServiceStub(channel)
            await stub.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)),
                metadata=metadata(Role.WORLD),
            )
            for tick in (1, 2, 3):
                batch = perception_pb2.PerceptionBatch(world_id=WORLD, tick=tick, frames=frames())
                if tick == 2:
                    batch.situations.add(
                        slot=2, player_line=perception_pb2.SpokenLine(speaker_id="player-1", text="Hi.")
                    )
                await stub.Tick(kernel_pb2.TickRequest(batch=batch), metadata=metadata(Role.WORLD))
    finally:
        await running.stop()
    logged = [r.tick for r in read_records(log) if r.WhichOneof("entry") == "tick"]
    assert [len(t.batch.situations) for t in logged] == [0, 1, 0]
    fresh = load_settings(data_dir=tmp_path)
    running = await start_service(await build_bundle(fresh, tokens), Endpoint(port=0), tokens, fresh)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = kernel_pb2_grpc.KernelServiceStub(channel)
            await stub.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)),
                metadata=metadata(Role.WORLD),
            )
            replies = stub.ReplayTicks(
                iter([kernel_pb2.ReplayTicksRequest(tick=t) for t in logged]), metadata=metadata(Role.WORLD)
            )
            results = [reply.result async for reply in replies]
    finally:
        await running.stop()
    assert [c.cause for c in results[1].candidates if c.slot == 2] == [action_pb2.COGNITION_CAUSE_DIALOGUE]
    assert [deterministic_digest(r) for r in results] == [t.result_sha256 for t in logged]
