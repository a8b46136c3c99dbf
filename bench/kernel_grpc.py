"""World client -> kernel -> world client round trip over a bidi StreamTicks stream, TCP or unix socket.

Starts `egbe serve kernel` as its own process (the world and the kernel each get a core: pinned, as a
co-located deployment pins them, unless --no-pin or the kernel ticks on several threads), registers
N agents, then streams pre-encoded batches one at a time and times each request-to-answer round trip.
Prints one JSON object: {"agents", "encoding", "transport", "p50_ms", "p99_ms", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

from bench.kernel_population import WORLD, frames, registrations
from egbe.v1 import kernel_pb2, kernel_pb2_grpc, perception_pb2
from services.auth import bearer_metadata
from services.runtime import run_event_loop

FRAME_VARIANTS = 8
MAX_MESSAGE = 512 * 1024 * 1024
ROW_BOOLS = {
    "on_screen": 1,
    "scene_copresence": 4,
    "player_nearby_in_world": 5,
}


def placement(tick_threads: int, pin: bool) -> tuple[set[int], set[int]] | None:
    """(the world client's CPUs, the kernel's CPUs), one core each; None when not pinned: asked not to,
    fewer than two CPUs, or a kernel ticking on several threads (it needs every core)."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2 or tick_threads > 1:
        return None
    return {cpus[0]}, {cpus[1]}


def start_kernel(
    data_dir: Path, transport: str, core: str, behavior: str, tick_threads: int, *, cpus: set[int] | None
) -> tuple[subprocess.Popen[bytes], str, str]:
    listen = ["--ephemeral-ports"] if transport == "tcp" else ["--unix-socket-dir", str(data_dir / "sockets")]
    env = {
        **os.environ,
        "EGBE_KERNEL_CORE": core,
        "EGBE_KERNEL__BEHAVIOR_LAYER": "true" if behavior == "on" else "false",
        "EGBE_KERNEL__TICK_THREADS": str(tick_threads),
        "EGBE_LOG_LEVEL": "warning",
        "EGBE_MAX_MESSAGE_BYTES": str(MAX_MESSAGE),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), "serve", "kernel", *listen],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if cpus is not None:
        # Set at once, while the child is still starting Python: the threads its gRPC server starts
        # later inherit it. (Not preexec_fn: unsafe in this already-threaded process.)
        os.sched_setaffinity(process.pid, cpus)
    endpoints = data_dir / "endpoints.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if endpoints.is_file():
            published = json.loads(endpoints.read_text())
            if published.get("pid") == process.pid and "kernel" in published:
                tokens = json.loads((data_dir / "tokens.json").read_text())
                world = tokens["world"]
                return process, published["kernel"], world[0] if isinstance(world, list) else world
        if process.poll() is not None:
            raise RuntimeError(f"kernel exited with {process.returncode}")
        time.sleep(0.05)
    process.kill()
    raise TimeoutError("kernel did not start")


def encode(
    tick: int, frame: dict[str, np.ndarray], encoding: str, changed: float, rng: np.random.Generator
) -> perception_pb2.PerceptionBatch:
    agents = len(frame["signal_flags"])
    batch = perception_pb2.PerceptionBatch(world_id=WORLD, tick=tick)
    if encoding == "rows":
        flags = frame["signal_flags"]
        for slot in range(agents):
            f = batch.frames.add(
                slot=slot,
                player_proximity_mm=int(frame["player_proximity_mm"][slot]),
                goal_ref=int(frame["goal_ref"][slot]),
                goal_progress_signature=int(frame["goal_progress_signature"][slot]),
            )
            for name, bit in ROW_BOOLS.items():
                if flags[slot] >> bit & 1:
                    setattr(f, name, True)
        return batch
    columns = batch.columns
    columns.layout_version = 1
    if encoding == "delta" and tick > 1:
        slots = np.sort(rng.choice(agents, max(1, int(agents * changed)), replace=False)).astype("<u4")
        columns.slots = slots.tobytes()
        columns.count = len(slots)
        for name, values in frame.items():
            setattr(columns, name, np.ascontiguousarray(values[slots]).tobytes())
    else:
        columns.count = agents
        for name, values in frame.items():
            setattr(columns, name, values.tobytes())
    return batch


async def measure(target: str, token: str, args: argparse.Namespace) -> tuple[list[float], list[int]]:
    """Round-trip milliseconds per measured tick, and the kernel's own elapsed microseconds for each
    (its tick report's), which tells the kernel's share of a round trip from the wire's."""
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ]
    metadata = bearer_metadata(token)
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        stub = kernel_pb2_grpc.KernelServiceStub(channel)
        # Registered a chunk at a time and dropped: a million registration messages kept alive would
        # make every full collection in this client walk them, a world-side cost the kernel does not have.
        for start in range(0, args.agents, 50_000):
            await stub.RegisterAgents(
                kernel_pb2.RegisterAgentsRequest(
                    world_id=WORLD, agents=registrations(min(50_000, args.agents - start), first=start)
                ),
                metadata=metadata,
            )
        rng = np.random.default_rng(11)
        variants = frames(args.agents, FRAME_VARIANTS)
        total = args.ticks + args.warmup
        # Encoded once, as the world would have encoded them; each send only restamps the tick, in
        # place (one request is in flight at a time, and the stub has serialized it by the answer).
        # Tick 1 (a warm-up tick) is the world's one full frame even in delta encoding; the ticks
        # after it cycle through the rest, so a delta run measures delta frames only.
        first, *cycle = [
            kernel_pb2.StreamTicksRequest(
                batch=encode(t, variants[t % FRAME_VARIANTS], args.encoding, args.changed, rng)
            )
            for t in range(1, min(total, FRAME_VARIANTS * 2 + 1) + 1)
        ]
        call = stub.StreamTicks(metadata=metadata)
        samples: list[float] = []
        kernel_micros: list[int] = []
        for tick in range(1, total + 1):
            request = first if tick == 1 else cycle[(tick - 2) % len(cycle)]
            request.batch.tick = tick
            started = time.perf_counter()
            await call.write(request)
            response = await call.read()
            if response is grpc.aio.EOF or response.result.actions.tick != tick:
                raise RuntimeError(f"tick {tick} was not answered")
            if tick > args.warmup:
                samples.append((time.perf_counter() - started) * 1_000)
                kernel_micros.append(response.result.report.elapsed_micros)
        await call.done_writing()
        if (code := await call.code()) != grpc.StatusCode.OK:
            raise RuntimeError(f"the stream ended with {code.name}")
        return samples, kernel_micros


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=10_200)
    parser.add_argument("--encoding", choices=["rows", "columns", "delta"], default="columns")
    parser.add_argument("--transport", choices=["tcp", "uds"], default="tcp")
    parser.add_argument("--changed", type=float, default=0.1, help="share of agents in each delta frame")
    parser.add_argument("--core", choices=["c", "numpy"], default="c")
    parser.add_argument(
        "--behavior",
        choices=["on", "off"],
        default="on",
        help="the kernel's behaviour layer (on in production; off measures the wire path and the core alone)",
    )
    parser.add_argument(
        "--tick-threads",
        type=int,
        default=1,
        help="kernel.tick_threads (engages from kernel.tick_threads_min_agents agents, 100,000 by default)",
    )
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured first ticks (at least 1)")
    parser.add_argument(
        "--no-pin", action="store_true", help="leave both processes to the scheduler instead of a core each"
    )
    parser.add_argument("--json", action="store_true", help="print JSON (the only output format)")
    args = parser.parse_args()
    args.warmup = max(args.warmup, 1)  # tick 1 carries the delta run's full frame
    pinned = placement(args.tick_threads, pin=not args.no_pin)
    if pinned is not None:
        os.sched_setaffinity(0, pinned[0])
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as scratch:
        process, target, token = start_kernel(
            Path(scratch),
            args.transport,
            args.core,
            args.behavior,
            args.tick_threads,
            cpus=None if pinned is None else pinned[1],
        )
        try:
            # On uvloop, as the services run theirs: ~40 µs less client CPU a round trip than asyncio's.
            samples, kernel_micros = run_event_loop(measure(target, token, args))
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    ms = np.array(samples)
    result = {
        "agents": args.agents,
        "encoding": args.encoding,
        "transport": args.transport,
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        # The kernel's own tick time (its report's elapsed_micros: no decode, encode or wire).
        "kernel_p50_us": int(np.percentile(kernel_micros, 50)),
        "kernel_p99_us": int(np.percentile(kernel_micros, 99)),
        "core": args.core,
        "behavior": args.behavior,
        "tick_threads": args.tick_threads,
        # {"world": [cpu], "kernel": [cpu]} when each process was pinned to its own core, else null
        "pinned_cpus": None if pinned is None else {"world": sorted(pinned[0]), "kernel": sorted(pinned[1])},
        "ticks": len(samples),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    if args.encoding == "delta":
        result["changed"] = args.changed
    print(json.dumps(result))


if __name__ == "__main__":
    main()
