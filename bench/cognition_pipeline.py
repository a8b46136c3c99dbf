"""Benchmark: one Think through the whole pipeline over gRPC, offline adapter (everything but a model).

Starts `egbe up` (SQLite, offline adapter) in a subprocess and, from this process, admits a run at the
gateway, calls CognitionService.Think (assemble → ground → dispatch via the gateway's Generate → gate →
commit to the biography) and ends the run. Reports Think latency (sequential) and Think throughput at
32 concurrent runs, beside a baseline measured in the same run: a bare gRPC health round trip to the
cognition service. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from egbe.v1 import (
    action_pb2,
    cognition_pb2,
    cognition_pb2_grpc,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
)
from services.auth import bearer_metadata

ROOT = Path(__file__).resolve().parent.parent
ORI_POOL = 64


def start_egbe(data_dir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["EGBE_LOG_LEVEL"] = "warning"
    process = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "--data-dir", str(data_dir), "up", "--ephemeral-ports"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoints = data_dir / "endpoints.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"egbe up exited with {process.returncode}")
        if endpoints.is_file():
            published = json.loads(endpoints.read_text())
            if published.get("pid") == process.pid:
                tokens = json.loads((data_dir / "tokens.json").read_text())
                return process, {k: v for k, v in published.items() if k != "pid"}, tokens
        time.sleep(0.05)
    process.kill()
    raise TimeoutError("egbe up did not publish its endpoints")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Client:
    def __init__(self, targets: dict[str, str], token: str) -> None:
        self.gateway_channel = grpc.aio.insecure_channel(targets["gateway"])
        self.cognition_channel = grpc.aio.insecure_channel(targets["cognition"])
        self.gateway = gateway_pb2_grpc.CognitionGatewayServiceStub(self.gateway_channel)
        self.cognition = cognition_pb2_grpc.CognitionServiceStub(self.cognition_channel)
        self.health = health_pb2_grpc.HealthStub(self.cognition_channel)
        self.md = bearer_metadata(token)

    async def close(self) -> None:
        await self.gateway_channel.close()
        await self.cognition_channel.close()

    async def one_think(self, i: int) -> tuple[float, dict[str, Any]]:
        """Admit, Think (timed), end; answers the Think latency in ms and its eval trace."""
        ori = common_pb2.OriRef(tenant_id="bench", world_id="bench", ori_id=f"ori-{i % ORI_POOL}")
        admitted = await self.gateway.AdmitRun(
            gateway_pb2.AdmitRunRequest(
                ori=ori, tier=common_pb2.COGNITION_TIER_CLOTHO, cause=action_pb2.COGNITION_CAUSE_DIALOGUE
            ),
            metadata=self.md,
        )
        if not admitted.admitted:
            raise RuntimeError(f"run not admitted: {admitted.detail}")
        request = cognition_pb2.ThinkRequest(
            run_id=admitted.run_id,
            ori=ori,
            tier=common_pb2.COGNITION_TIER_CLOTHO,
            mode=gateway_pb2.COGNITION_MODE_DIALOGUE,
            locale="en-US",
            stimulus="speaker: bram\nIs the bakery open today?",
            counterpart_id="bram",
            max_model_calls=admitted.budget.max_model_calls,
            objectives=[cognition_pb2.ContextItem(ref="obj-1", text="open the bakery", priority_bp=9000)],
        )
        started = time.perf_counter()
        response = await self.cognition.Think(request, metadata=self.md)
        elapsed_ms = (time.perf_counter() - started) * 1000
        await self.gateway.EndRun(
            gateway_pb2.EndRunRequest(run_id=admitted.run_id, outcome=gateway_pb2.RUN_OUTCOME_COMPLETED),
            metadata=self.md,
        )
        if response.fell_back or not response.committed_event_ids:
            raise RuntimeError(f"run {admitted.run_id} did not commit: {response.audit['outcome']}")
        trace: dict[str, Any] = json_format.MessageToDict(response.audit)["eval_trace"]
        return elapsed_ms, trace


async def measure(
    targets: dict[str, str], token: str, runs: int, concurrency: int, warmup: int
) -> dict[str, Any]:
    client = Client(targets, token)
    try:
        for i in range(warmup):
            await client.one_think(i)
        health_ms = []
        for _ in range(runs):
            started = time.perf_counter()
            await client.health.Check(health_pb2.HealthCheckRequest())
            health_ms.append((time.perf_counter() - started) * 1000)
        sequential = [await client.one_think(i) for i in range(runs)]
        latencies = [ms for ms, _ in sequential]
        cognition_us = [float(trace["cognition_us"]) for _, trace in sequential]
        model_us = [float(trace["model_us"]) for _, trace in sequential]
        stage_names = sorted({name for _, trace in sequential for name in trace["stages_us"]})
        stages_p50_us = {
            name: round(statistics.median(float(t["stages_us"].get(name, 0)) for _, t in sequential))
            for name in stage_names
        }

        counter = iter(range(runs, runs + runs))
        think_ms: list[float] = []

        async def worker() -> None:
            for i in counter:
                ms, _ = await client.one_think(i)
                think_ms.append(ms)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    finally:
        await client.close()
    return {
        "runs": runs,
        "concurrency": concurrency,
        "think_p50_ms": round(statistics.median(latencies), 3),
        "think_p99_ms": round(percentile(latencies, 0.99), 3),
        "thinks_per_s": round(runs / wall, 1),
        "concurrent_think_p50_ms": round(statistics.median(think_ms), 3),
        "concurrent_think_p99_ms": round(percentile(think_ms, 0.99), 3),
        "cognition_in_service_p50_us": round(statistics.median(cognition_us)),
        "generate_rpc_p50_us": round(statistics.median(model_us)),
        "stages_p50_us": stages_p50_us,
        "baseline_grpc_health_p50_ms": round(statistics.median(health_ms), 3),
        "target_non_model_p50_ms": 10,
        "adapter": "offline",
        "note": "thinks_per_s counts admit+Think+end cycles; shared 2-core machine, services in one process",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as tmp:
        process, targets, tokens = start_egbe(Path(tmp))
        try:
            result = asyncio.run(
                measure(targets, tokens["service"], args.runs, args.concurrency, args.warmup)
            )
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
