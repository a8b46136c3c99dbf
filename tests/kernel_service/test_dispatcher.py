"""The dispatcher works outside the tick: report-only without a gateway, never blocked by a slow one."""

from __future__ import annotations

import asyncio

from assembly.settings import load_settings
from egbe.v1 import action_pb2
from kernel_service.dispatcher import Dispatcher
from services.channels import channel_opener
from tests.kernel_service.frames import frame, intent_of, make_kernel, rows


def clotho_batch(tick: int, agents: int) -> object:
    return rows(tick, [frame(slot, on_screen=True) for slot in range(agents)])


async def test_without_a_gateway_candidates_are_reported_and_agents_keep_cached_actions() -> None:
    kernel = make_kernel(3)
    dispatcher = Dispatcher()
    await dispatcher.start()
    try:
        for tick in range(1, 12):
            result = kernel.tick(clotho_batch(tick, 3), dispatcher.take_results())  # type: ignore[arg-type]
            dispatcher.offer(result)
            await asyncio.sleep(0)
            assert result.report.cognition_results_merged == 0
            assert intent_of(result, 0).source == action_pb2.ACTION_SOURCE_CACHED
        assert dispatcher.stats.candidates_offered > 0
        assert dispatcher.stats.candidates_reported_only == dispatcher.stats.candidates_offered
        assert dispatcher.stats.candidates_sent == 0
    finally:
        await dispatcher.close()


async def test_a_gateway_that_never_answers_never_delays_a_tick() -> None:
    hung: list[asyncio.StreamWriter] = []

    async def accept_and_stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)  # a real socket that never completes the HTTP/2 handshake

    server = await asyncio.start_server(accept_and_stall, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    dispatcher = Dispatcher(
        gateway_target=f"127.0.0.1:{port}",
        queue_limit=50,
        call_timeout_seconds=30,
        dial=channel_opener(load_settings()),
    )
    await dispatcher.start()
    kernel = make_kernel(40)
    try:
        for tick in range(1, 30):
            result = kernel.tick(clotho_batch(tick, 40), dispatcher.take_results())  # type: ignore[arg-type]
            dispatcher.offer(result)
            await asyncio.sleep(0.001)
        # Every tick went through while the gateway sat on its calls: nothing merged, nothing waited,
        # and the queue shed its oldest candidates instead of growing without bound.
        assert dispatcher.stats.results_received == 0
        assert dispatcher.stats.candidates_sent > 0
        assert dispatcher.stats.candidates_shed > 0
        assert dispatcher.pending_candidates <= 50
    finally:
        await dispatcher.close()
        for writer in hung:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_without_a_gateway_every_tier_is_unavailable_to_arbitration() -> None:
    assert Dispatcher().unavailable_tiers() == 0b1110  # Clotho, Lachesis and Atropos bits


async def test_an_unreachable_gateway_makes_every_tier_unavailable() -> None:
    hung: list[asyncio.StreamWriter] = []

    async def accept_and_stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)

    server = await asyncio.start_server(accept_and_stall, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    dispatcher = Dispatcher(
        gateway_target=f"127.0.0.1:{port}", call_timeout_seconds=0.2, dial=channel_opener(load_settings())
    )
    await dispatcher.start()
    try:
        assert dispatcher.unavailable_tiers() == 0  # configured and not yet failing: available
        dispatcher.offer(make_kernel(2).tick(clotho_batch(1, 2)))  # type: ignore[arg-type]
        for _ in range(100):
            if dispatcher.stats.failures:
                break
            await asyncio.sleep(0.05)
        assert dispatcher.stats.failures > 0
        assert dispatcher.unavailable_tiers() == 0b1110
    finally:
        await dispatcher.close()
        for writer in hung:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_dialogue_call_goes_ahead_of_every_queued_call() -> None:
    """A player waits on a dialogue call; planning, reflections and summaries queued before it wait."""
    dispatcher = Dispatcher(gateway_target="127.0.0.1:9", dial=channel_opener(load_settings()))
    planning = action_pb2.CognitionCallCandidate(
        call_id="w:1:0:1", slot=0, cause=action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING
    )
    summary = action_pb2.CognitionCallCandidate(
        call_id="w:1:2:3", slot=2, cause=action_pb2.COGNITION_CAUSE_ATROPOS_SUMMARY
    )
    dialogue = action_pb2.CognitionCallCandidate(
        call_id="w:2:1:4", slot=1, cause=action_pb2.COGNITION_CAUSE_DIALOGUE
    )
    dispatcher.offer(action_pb2.TickResult(candidates=[planning, summary]))
    dispatcher.offer(action_pb2.TickResult(candidates=[dialogue]))
    assert dispatcher.pending_candidates == 3
    order = [(await dispatcher._next())[0].call_id for _ in range(3)]
    assert order == ["w:2:1:4", "w:1:0:1", "w:1:2:3"]


async def test_the_dialogue_lane_takes_dialogue_calls_only() -> None:
    """One lane serves dialogue alone, so a line never waits for a lane held by slower work."""
    dispatcher = Dispatcher(gateway_target="127.0.0.1:9", dial=channel_opener(load_settings()))
    planning = action_pb2.CognitionCallCandidate(
        call_id="w:1:0:1", slot=0, cause=action_pb2.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING
    )
    dispatcher.offer(action_pb2.TickResult(candidates=[planning]))
    waiting = asyncio.ensure_future(dispatcher._next(dialogue_only=True))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the planning call is not its to take
    dialogue = action_pb2.CognitionCallCandidate(
        call_id="w:2:1:4", slot=1, cause=action_pb2.COGNITION_CAUSE_DIALOGUE
    )
    dispatcher.offer(action_pb2.TickResult(candidates=[dialogue]))
    assert (await asyncio.wait_for(waiting, 1.0))[0].call_id == "w:2:1:4"
    assert dispatcher.pending_candidates == 1
