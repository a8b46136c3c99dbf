"""The dispatcher end to end: kernel candidates reach the real gateway, results merge into a later tick."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc

from assembly.embedded import DemoTarget, services_for_run
from assembly.settings import load_settings
from egbe.v1 import action_pb2, kernel_pb2, kernel_pb2_grpc, perception_pb2
from services.auth import Role, bearer_metadata
from tests.kernel_service.frames import WORLD, registrations
from tests.prometheus_samples import scrape

AGENTS = 4
SETTLE_SECONDS = 30.0


def _scrape(port: int) -> dict[str, float]:
    """The kernel's Prometheus endpoint over HTTP, as `name{labels}` -> value."""
    text = scrape(port).decode()
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in samples}


async def _settled(port: int, calls: int) -> dict[str, float]:
    """The metrics once the dispatcher has sent every offered call and received an answer for each:
    its lanes answer after the tick that offered a call, so the test stops ticking and waits."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        metrics = await asyncio.to_thread(_scrape, port)
        sent = metrics['egbe_kernel_dispatch_candidates_total{outcome="sent"}']
        if sent == metrics["egbe_kernel_dispatch_results_total"] == calls or time.monotonic() > deadline:
            return metrics
        await asyncio.sleep(0.05)


async def test_candidates_go_to_the_gateway_and_results_merge_into_a_later_tick(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")  # (the kernel's metrics on a free port)
    async with services_for_run(
        settings, tmp_path / "run", snapshot_every=50, target=DemoTarget.EMBEDDED
    ) as services:
        token = services.tokens.token_for(Role.WORLD)
        async with grpc.aio.insecure_channel(services.targets["kernel"]) as channel:
            kernel = kernel_pb2_grpc.KernelServiceStub(channel)
            await kernel.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(AGENTS)),
                metadata=bearer_metadata(token),
            )
            merged_tick = None
            first_candidates = 0
            calls = 0  # candidates the ticks handed to the dispatcher
            for tick in range(1, 400):  # bounded: the offline adapter answers within a few ticks
                batch = perception_pb2.PerceptionBatch(
                    world_id=WORLD,
                    tick=tick,
                    frames=[perception_pb2.PerceptionFrame(slot=s, on_screen=True) for s in range(AGENTS)],
                )
                reply = await kernel.Tick(
                    kernel_pb2.TickRequest(batch=batch), metadata=bearer_metadata(token)
                )
                result = reply.result
                calls += len(result.candidates)
                if tick == 1:
                    first_candidates = len(result.candidates)
                    assert all(c.needs_rehydration for c in result.candidates)
                    assert [r.kind for r in result.lifecycle] == [
                        action_pb2.LifecycleRequest.KIND_REHYDRATE
                    ] * AGENTS
                if result.report.cognition_results_merged:
                    merged_tick = tick
                    break
                await asyncio.sleep(0.05)
            assert first_candidates == AGENTS
            assert merged_tick is not None, "no cognition result came back through the dispatcher"
            sources = {i.source for i in result.actions.intents}
            assert action_pb2.ACTION_SOURCE_COGNITION in sources
            # Operators see the same run on the kernel's metrics endpoint. How many ticks ran before a
            # result merged, and so how many calls there were, depends on how fast the gateway answers;
            # what must hold is that every call the ticks issued was offered, sent once and answered
            # with one action (an approved offline reply), none shed or failed.
            metrics = await _settled(services.metrics["kernel"], calls)
            assert metrics['egbe_kernel_core_info{core="c",tick_threads="1"}'] == 1
            assert metrics["egbe_kernel_ticks_total"] == tick
            assert metrics["egbe_kernel_calls_issued_total"] == calls
            for outcome, count in (("offered", calls), ("sent", calls), ("shed", 0), ("reported_only", 0)):
                assert metrics[f'egbe_kernel_dispatch_candidates_total{{outcome="{outcome}"}}'] == count
            assert metrics["egbe_kernel_dispatch_results_total"] == calls
            assert metrics["egbe_kernel_dispatch_failures_total"] == 0
            assert metrics['egbe_kernel_agents{tier="clotho"}'] == AGENTS
            assert metrics["egbe_kernel_tick_seconds_count"] == tick
