"""What the edge adds to a tick: the StreamTicks round trip at 1,424 Ori (the solo-ceiling world)
through the edge's WebSocket against direct gRPC, to the same kernel in the same run.

`egbe serve kernel` and `egbe edge` each run as their own process, as deploy/ runs them; this process
is the world. The three streams (direct gRPC, the edge with binary frames, the edge with JSON frames)
take turns in blocks of ticks, so a change in the machine's load falls on all of them alike. Each
request is encoded once, as the world would have encoded it; a send restamps only the tick.
Prints one JSON object:

    grpc_p50_ms, grpc_p99_ms            the round trip over gRPC, the world dialling the kernel
    edge_p50_ms, edge_p99_ms            through the edge, binary protobuf frames (the large-world mode)
    edge_added_p50_ms                   edge_p50_ms - grpc_p50_ms (target: at most 1)
    edge_json_p50_ms, edge_json_p99_ms  through the edge, canonical-JSON frames (what Godot sends)
    edge_json_added_p50_ms              edge_json_p50_ms - grpc_p50_ms

    python -m bench.edge --json
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
from google.protobuf import json_format
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kernel_grpc import MAX_MESSAGE, encode, start_kernel
from bench.kernel_population import WORLD, frames, registrations
from egbe.v1 import kernel_pb2, kernel_pb2_grpc
from services.auth import bearer_metadata
from services.local_cluster import free_ports
from services.runtime import run_event_loop

STREAM = "/v1/KernelService/StreamTicks"
FRAME_VARIANTS = 8
RoundTrip = Callable[[int], Awaitable[None]]


def start_edge(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`egbe edge` in front of the kernel the data dir's endpoints file names; its host:port."""
    [port] = free_ports(1)
    process = subprocess.Popen(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), "edge"],
        env={
            **os.environ,
            "EGBE_EDGE__PORT": str(port),
            "EGBE_LOG_LEVEL": "warning",
            "EGBE_MAX_MESSAGE_BYTES": str(MAX_MESSAGE),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    target = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"egbe edge exited with {process.returncode}")
        try:
            if httpx.get(f"http://{target}/healthz", timeout=1).status_code == 200:
                return process, target
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise TimeoutError("egbe edge did not start")


def requests(agents: int) -> list[kernel_pb2.StreamTicksRequest]:
    """Full columnar frames (the world's usual form at this size), one per variant."""
    rng = np.random.default_rng(11)
    return [
        kernel_pb2.StreamTicksRequest(batch=encode(1, variant, "columns", 0.0, rng))
        for variant in frames(agents, FRAME_VARIANTS)
    ]


async def measure(kernel: str, edge: str, token: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Round-trip milliseconds per measured tick, per path."""
    metadata = bearer_metadata(token)
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ]
    variants = requests(args.agents)
    json_variants = [json_format.MessageToDict(v) for v in variants]
    tick = 0
    async with grpc.aio.insecure_channel(kernel, options=options) as channel:
        stub = kernel_pb2_grpc.KernelServiceStub(channel)
        await stub.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=registrations(args.agents)),
            metadata=metadata,
        )
        call = stub.StreamTicks(metadata=metadata)
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            connect(f"ws://{edge}{STREAM}", additional_headers=headers, max_size=None) as binary,
            connect(f"ws://{edge}{STREAM}", additional_headers=headers, max_size=None) as text,
        ):

            async def over_grpc(at: int) -> None:
                request = variants[at % FRAME_VARIANTS]
                request.batch.tick = at
                await call.write(request)
                response = await call.read()
                if response is grpc.aio.EOF or response.result.actions.tick != at:
                    raise RuntimeError(f"tick {at} was not answered over gRPC")

            async def over_binary(at: int) -> None:
                request = variants[at % FRAME_VARIANTS]
                request.batch.tick = at
                await binary.send(request.SerializeToString())
                answer = kernel_pb2.StreamTicksResponse.FromString(await binary.recv())
                if answer.result.actions.tick != at:
                    raise RuntimeError(f"tick {at} was not answered through the edge")

            async def over_json(at: int) -> None:
                request = json_variants[at % FRAME_VARIANTS]
                request["batch"]["tick"] = str(at)
                await text.send(json.dumps(request))
                answer = json.loads(await text.recv())
                if int(answer["result"]["actions"]["tick"]) != at:
                    raise RuntimeError(f"tick {at} was not answered through the edge in JSON")

            paths: dict[str, RoundTrip] = {"grpc": over_grpc, "edge": over_binary, "edge_json": over_json}
            samples: dict[str, list[float]] = {name: [] for name in paths}
            for block in range((args.ticks + args.warmup) // args.block):
                for name, round_trip in paths.items():
                    for _ in range(args.block):
                        tick += 1
                        started = time.perf_counter()
                        await round_trip(tick)
                        if block * args.block >= args.warmup:
                            samples[name].append((time.perf_counter() - started) * 1_000)
        await call.done_writing()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--agents", type=int, default=1_424, help="Ori in the world (the solo ceiling)")
    parser.add_argument("--ticks", type=int, default=600, help="measured ticks per path")
    parser.add_argument("--warmup", type=int, default=60, help="unmeasured ticks per path first")
    parser.add_argument("--block", type=int, default=20, help="ticks a path takes in a row")
    parser.add_argument("--json", action="store_true", help="print JSON (the only output format)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="egbe-bench-edge-") as scratch:
        kernel, target, token = start_kernel(Path(scratch), "tcp", "c", "on", 1, cpus=None)
        edge = None
        try:
            edge, edge_target = start_edge(Path(scratch))
            samples = run_event_loop(measure(target, edge_target, token, args))
        finally:
            for process in (edge, kernel):
                if process is not None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        process.kill()
    result: dict[str, Any] = {"agents": args.agents, "encoding": "columns"}
    for name, values in samples.items():
        result[f"{name}_p50_ms"] = round(float(np.percentile(values, 50)), 3)
        result[f"{name}_p99_ms"] = round(float(np.percentile(values, 99)), 3)
    result["edge_added_p50_ms"] = round(result["edge_p50_ms"] - result["grpc_p50_ms"], 3)
    result["edge_json_added_p50_ms"] = round(result["edge_json_p50_ms"] - result["grpc_p50_ms"], 3)
    result["ticks_per_path"] = len(samples["grpc"])
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
