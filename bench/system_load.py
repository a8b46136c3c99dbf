"""System load: a world client streams 10,200 agents at 20 Hz over real gRPC while cognition runs.

Every service runs as its own OS process (`egbe serve X`, the kernel dispatching to the gateway,
cognition answering with the offline adapter). The client registers the agents, then sends one
columnar full frame per tick on StreamTicks, paced to 20 Hz, and measures each tick's round trip.
Prints one JSON object:

    tick_p50_ms, tick_p99_ms, tick_max_ms   round trip of a tick as the world server sees it
    ticks_over_budget                       round trips over the 50 ms tick budget (target: zero);
                                            ticks_over_budget_first names the first ten
    kernel_tick_p99_ms, kernel_over_budget  the kernel's own measurement (KernelTickReport)
    cognition_calls, events_appended        gateway calls and biography events during the run
    cognition_calls_per_s, events_per_s     their throughput

    python -m bench.system_load --json            # 60 s (the figure docs/performance.md records)
    python -m bench.system_load --json --smoke    # 5 s (CI)
    EGBE_BENCH_DATABASE_URL=postgresql://...      # PostgreSQL for gateway and biography; else SQLite

The machine is shared: note its load when you read the figures. Placed as a deployment places
them, where the kernel sits beside the world server with a CPU of its own: with `--split-cpus`
(default) the kernel and this world client run on the first CPU and every other service on the
rest, and every service but the kernel runs at `--background-nice` (default 10), so the tick path
comes before throughput work (cognition, gateway, biography, policy). `--no-split-cpus
--background-nice 0` measures them all as equals on every CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from egbe.v1 import (
    biography_pb2,
    biography_pb2_grpc,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    kernel_pb2,
    kernel_pb2_grpc,
    perception_pb2,
)
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses

TICK_BUDGET_MS = 50.0
REGISTER_CHUNK = 1000


def registration(world_id: str, index: int) -> kernel_pb2.AgentRegistration:
    rng = np.random.default_rng(index)
    traits = kernel_pb2.PersonalityTraits(
        **{
            name: int(rng.integers(0, 10_001))
            for name in kernel_pb2.PersonalityTraits.DESCRIPTOR.fields_by_name
        }
    )
    return kernel_pb2.AgentRegistration(
        ori=common_pb2.OriRef(tenant_id="bench", world_id=world_id, ori_id=f"ori-{index:05d}"),
        traits=traits,
        values=[kernel_pb2.RankedValue(domain=kernel_pb2.VALUE_DOMAIN_KINSHIP, weight_bp=8000)],
    )


def registration_chunks(world_id: str, agents: int) -> Iterator[list[kernel_pb2.AgentRegistration]]:
    """The world's agents as RegisterAgents sends them, `REGISTER_CHUNK` a request."""
    for start in range(0, agents, REGISTER_CHUNK):
        yield [registration(world_id, i) for i in range(start, min(agents, start + REGISTER_CHUNK))]


def columnar_frame(world_id: str, tick: int, count: int) -> perception_pb2.PerceptionBatch:
    """A full frame: about 1 % of agents on screen near a player, needs drifting with the tick."""
    slots = np.arange(count, dtype=np.uint32)
    on_screen = (slots % 100) == (tick // 200) % 100
    flags = np.where(on_screen, 1 << perception_pb2.PERCEPTION_FLAG_BIT_ON_SCREEN, 0).astype("<u2")
    lod = np.where(on_screen, perception_pb2.VISUAL_LOD_NEAR, perception_pb2.VISUAL_LOD_FAR).astype("u1")
    proximity = np.where(on_screen, 4_000, 2_147_483_647).astype("<i4")
    needs = ((slots * 131 + tick * 17) % 10_001).astype("<u2")
    columns = perception_pb2.PerceptionColumns(
        layout_version=1,
        count=count,
        signal_flags=flags.tobytes(),
        visual_lod=lod.tobytes(),
        player_proximity_mm=proximity.tobytes(),
        addressed_by_player_id=np.zeros(count, "<u4").tobytes(),
        goal_ref=(1 + slots % 5).astype("<u4").tobytes(),
        goal_progress_signature=np.full(count, tick // 20, "<u8").tobytes(),
        need_safety_bp=needs.tobytes(),
        need_sustaining_bp=needs.tobytes(),
        need_social_bp=needs.tobytes(),
        need_purpose_bp=needs.tobytes(),
        fatigue_bp=np.full(count, (tick * 5) % 10_001, "<u2").tobytes(),
    )
    return perception_pb2.PerceptionBatch(world_id=world_id, tick=tick, columns=columns)


async def cognition_calls(gateway: grpc.aio.Channel, operator_token: str) -> int:
    spend = await gateway_pb2_grpc.OperatorServiceStub(gateway).GetSpend(
        gateway_pb2.GetSpendRequest(), metadata=bearer_metadata(operator_token), timeout=10
    )
    return sum(int(tier.calls) for tier in spend.by_tier)


async def events_appended(biography: grpc.aio.Channel, service_token: str) -> int:
    """Every event the biography holds, counted by reading `$all` forward (bounded paging)."""
    stub = biography_pb2_grpc.BiographyServiceStub(biography)
    count, token = 0, ""
    for _ in range(100_000):
        page = await stub.Read(
            biography_pb2.ReadRequest(ori_id="$all", page_size=1000, page_token=token),
            metadata=bearer_metadata(service_token),
            timeout=30,
        )
        count += len(page.events)
        token = page.next_page_token
        if not token:
            break
    return count


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else 0.0


async def drive(services: ServiceProcesses, agents: int, hz: float, seconds: float) -> dict[str, Any]:
    world_id = f"load-{os.getpid()}"
    options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    world_md = bearer_metadata(services.tokens["world"])
    async with (
        grpc.aio.insecure_channel(services.target("kernel"), options=options) as kernel_channel,
        grpc.aio.insecure_channel(services.target("gateway")) as gateway_channel,
        grpc.aio.insecure_channel(services.target("biography")) as biography_channel,
    ):
        kernel = kernel_pb2_grpc.KernelServiceStub(kernel_channel)
        for chunk in registration_chunks(world_id, agents):
            await kernel.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(world_id=world_id, agents=chunk),
                metadata=world_md,
                timeout=60,
            )
        calls_before = await cognition_calls(gateway_channel, services.tokens["operator"])
        events_before = await events_appended(biography_channel, services.tokens["service"])

        ticks = int(seconds * hz)
        period = 1.0 / hz
        round_trips: list[float] = []
        kernel_ms: list[float] = []
        kernel_over = 0
        stream = kernel.StreamTicks(metadata=world_md)
        started = time.monotonic()
        for tick in range(1, ticks + 1):
            due = started + (tick - 1) * period
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            batch = columnar_frame(world_id, tick, agents)
            sent = time.perf_counter()
            await stream.write(kernel_pb2.StreamTicksRequest(batch=batch))
            reply = await stream.read()
            round_trips.append((time.perf_counter() - sent) * 1000)
            report = reply.result.report
            kernel_ms.append(report.elapsed_micros / 1000)
            kernel_over += int(report.over_latency_budget)
        await stream.done_writing()
        elapsed = time.monotonic() - started
        await asyncio.sleep(1.0)  # let in-flight cognition calls land before counting
        calls = await cognition_calls(gateway_channel, services.tokens["operator"]) - calls_before
        events = await events_appended(biography_channel, services.tokens["service"]) - events_before
    return {
        "agents": agents,
        "hz": hz,
        "ticks": ticks,
        "seconds": round(elapsed, 2),
        "tick_p50_ms": round(percentile(round_trips, 50), 3),
        "tick_p99_ms": round(percentile(round_trips, 99), 3),
        "tick_max_ms": round(max(round_trips), 3),
        "ticks_over_budget": sum(1 for ms in round_trips if ms > TICK_BUDGET_MS),
        "ticks_over_budget_first": [i + 1 for i, ms in enumerate(round_trips) if ms > TICK_BUDGET_MS][:10],
        "kernel_tick_p50_ms": round(percentile(kernel_ms, 50), 3),
        "kernel_tick_p99_ms": round(percentile(kernel_ms, 99), 3),
        "kernel_over_budget": kernel_over,
        "cognition_calls": calls,
        "events_appended": events,
        "cognition_calls_per_s": round(calls / elapsed, 2),
        "events_per_s": round(events / elapsed, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--smoke", action="store_true", help="5 s instead of 60 s")
    parser.add_argument("--agents", type=int, default=10_200)
    parser.add_argument("--hz", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument(
        "--background-nice", type=int, default=10, help="niceness of every service but the kernel"
    )
    parser.add_argument(
        "--split-cpus",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the kernel and the world client on one CPU, the other services on the rest",
    )
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else (5.0 if args.smoke else 60.0)
    with tempfile.TemporaryDirectory(prefix="egbe-load-") as root:
        services = ServiceProcesses(Path(root), os.environ.get("EGBE_BENCH_DATABASE_URL"))
        background = [name for name in services.ports if name != "kernel"]
        services.niceness = dict.fromkeys(background, args.background_nice)
        if args.split_cpus and len(os.sched_getaffinity(0)) >= 2:
            # The kernel and this world client on the first CPU, everything else on the rest.
            first, *rest = sorted(os.sched_getaffinity(0))
            services.cpus = {"kernel": {first}} | {name: set(rest) for name in background}
            os.sched_setaffinity(0, {first})
        try:
            services.start_all()
            result = asyncio.run(drive(services, args.agents, args.hz, seconds))
        finally:
            services.stop_all()
    result["storage"] = "postgres" if os.environ.get("EGBE_BENCH_DATABASE_URL") else "sqlite"
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    result["background_nice"] = args.background_nice
    result["split_cpus"] = bool(services.cpus)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
