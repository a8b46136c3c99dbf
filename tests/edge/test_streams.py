"""StreamTicks as one WebSocket through the edge, against a real `egbe up`: every tick answered in
order, in JSON or binary frames, with the token in the upgrade or in the first frame."""

from __future__ import annotations

import json

from websockets.asyncio.client import connect

from egbe.v1 import kernel_pb2, perception_pb2
from tests.edge.conftest import AGENTS, WORLD, EdgeEgbe, batch_json, next_ticks

STREAM = "/v1/KernelService/StreamTicks"


async def test_json_ticks_are_answered_in_order_with_the_token_in_the_first_frame(
    registered: EdgeEgbe,
) -> None:
    ticks = next_ticks(10)
    async with connect(registered.ws + STREAM) as socket:
        await socket.send(json.dumps({"authorization": f"Bearer {registered.tokens['world']}"}))
        answered = []
        for tick in ticks:
            await socket.send(json.dumps(batch_json(tick, AGENTS)))
            result = json.loads(await socket.recv())["result"]
            answered.append(int(result["actions"]["tick"]))
            assert len(result["actions"]["intents"]) == AGENTS
            assert int(result["report"]["tick"]) == tick
    assert answered == list(ticks)


async def test_frames_sent_ahead_are_answered_one_each_in_order(registered: EdgeEgbe) -> None:
    """A world may pipeline its ticks: the edge keeps one answer per request, in request order."""
    ticks = next_ticks(20)
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
        for tick in ticks:
            await socket.send(json.dumps(batch_json(tick, AGENTS)))
        answered = [int(json.loads(await socket.recv())["result"]["actions"]["tick"]) for _ in ticks]
    assert answered == list(ticks)


async def test_binary_frames_carry_serialized_messages_both_ways(registered: EdgeEgbe) -> None:
    ticks = next_ticks(5)
    async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
        for tick in ticks:
            request = kernel_pb2.StreamTicksRequest(
                batch=perception_pb2.PerceptionBatch(
                    world_id=WORLD,
                    tick=tick,
                    frames=[perception_pb2.PerceptionFrame(slot=s) for s in range(AGENTS)],
                )
            )
            await socket.send(request.SerializeToString())
            answer = await socket.recv()
            assert isinstance(answer, bytes)
            result = kernel_pb2.StreamTicksResponse.FromString(answer).result
            assert (result.actions.tick, len(result.actions.intents)) == (tick, AGENTS)


async def test_a_stream_the_client_closes_ends_cleanly_and_the_next_one_continues(
    registered: EdgeEgbe,
) -> None:
    first, second = next_ticks(1)[0], next_ticks(1)[0]
    for tick in (first, second):
        async with connect(registered.ws + STREAM, additional_headers=registered.bearer("world")) as socket:
            await socket.send(json.dumps(batch_json(tick, AGENTS)))
            assert int(json.loads(await socket.recv())["result"]["actions"]["tick"]) == tick
