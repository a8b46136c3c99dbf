"""Benchmark: one Think through the whole pipeline over gRPC, offline adapter (everything but a model).

Starts `egbe up` (SQLite, offline adapter) in a subprocess and, from this process, admits a run at the
gateway, calls CognitionService.Think (assemble → ground → dispatch via the gateway's Generate → gate →
commit to the biography) and ends the run. Reports Think latency (sequential) and Think throughput at
32 concurrent runs, beside a baseline measured in the same run: a bare gRPC health round trip to the
cognition service. Prints one JSON object.

`--zones full` (the default) fills every zone: each Ori has a registered identity (name, vocation,
quirks, values, personality, relationships) and recalled memories, and each Think carries objectives
and a moment with a player's line, a place and who is near. `--zones minimal` sends only a stimulus
and an objective to Ori the biography knows nothing of.
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
import uuid
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from egbe.v1 import (
    action_pb2,
    biography_pb2,
    biography_pb2_grpc,
    cognition_pb2,
    cognition_pb2_grpc,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    perception_pb2,
)
from services.auth import bearer_metadata
from services.vocabulary import PERSONALITY_AXES

ROOT = Path(__file__).resolve().parent.parent
ORI_POOL = 64
MEMORIES_PER_ORI = 6
MOMENT = action_pb2.CallMoment(
    situation=perception_pb2.SituationText(
        player_line=perception_pb2.SpokenLine(
            speaker_id="player-1", speaker_name="the traveller", text="Is the bakery open today?"
        ),
        place="The bakery",
        nearby=["Tobi", "the traveller"],
    ),
    player_proximity_mm=2_400,
    need_sustaining_bp=4_000,
    need_social_bp=3_000,
    emotion="content",
    goal="vocation",
    plan_step_name="knead the dough",
)


def identity(i: int) -> biography_pb2.OriIdentity:
    """A baker as a world would register one: every field a prompt draws on."""
    return biography_pb2.OriIdentity(
        display_name=f"Folasade {i}",
        vocation="baker",
        home="The cottages",
        locale="en-US",
        personality=[
            biography_pb2.TraitLevel(axis=axis, level_bp=1_000 * (j + 1))
            for j, axis in enumerate(PERSONALITY_AXES)
        ],
        values=[
            biography_pb2.ValueItem(value_ref=v, weight_bp=9_000 - 1_000 * j)
            for j, v in enumerate(("kinship", "craft", "honesty", "community"))
        ],
        quirks=["sings to the dough", "counts loaves twice"],
        needs=biography_pb2.NeedsBaseline(sustaining_bp=3_000, social_bp=3_000, purpose_bp=3_000),
        relationships=[
            biography_pb2.IdentityRelationship(
                other_ori_id=f"ori-{(i + k) % ORI_POOL}", other_name=name, kind=kind, affinity_bp=aff
            )
            for k, (name, kind, aff) in enumerate(
                (("Tobi", "kin", 8_000), ("Adaeze", "friend", 6_000), ("Ireti", "rival", -3_000)), 1
            )
        ],
        persona="I bake the hamlet's bread before dawn and know everyone's order by heart.",
    )


def memories(i: int) -> list[biography_pb2.NewOriEvent]:
    events = []
    for k in range(MEMORIES_PER_ORI):
        event = biography_pb2.NewOriEvent(
            event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-memory-{i}-{k}")),
            kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
            world_tick=k,
        )
        event.payload.update({"text": f"Tobi helped me carry flour on day {k}.", "salience_bp": 5_000 + k})
        events.append(event)
    return events


def start_egbe(data_dir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["EGBE_LOG_LEVEL"] = "warning"
    process = subprocess.Popen(
        [sys.executable, "-m", "assembly.cli", "--data-dir", str(data_dir), "up", "--ephemeral-ports"],
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
    def __init__(self, targets: dict[str, str], token: str, full: bool) -> None:
        self.full = full
        self.gateway_channel = grpc.aio.insecure_channel(targets["gateway"])
        self.cognition_channel = grpc.aio.insecure_channel(targets["cognition"])
        self.biography_channel = grpc.aio.insecure_channel(targets["biography"])
        self.biography = biography_pb2_grpc.BiographyServiceStub(self.biography_channel)
        self.gateway = gateway_pb2_grpc.CognitionGatewayServiceStub(self.gateway_channel)
        self.cognition = cognition_pb2_grpc.CognitionServiceStub(self.cognition_channel)
        self.health = health_pb2_grpc.HealthStub(self.cognition_channel)
        self.md = bearer_metadata(token)

    async def close(self) -> None:
        await self.gateway_channel.close(None)
        await self.cognition_channel.close(None)
        await self.biography_channel.close(None)

    async def seed(self) -> None:
        """Every Ori of the pool gets its identity and a few memories, so every zone has content."""
        await self.biography.RegisterIdentities(
            biography_pb2.RegisterIdentitiesRequest(
                registrations=[
                    biography_pb2.IdentityRegistration(ori_id=f"ori-{i}", identity=identity(i))
                    for i in range(ORI_POOL)
                ]
            ),
            metadata=self.md,
        )
        any_version = biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY)
        for i in range(ORI_POOL):
            await self.biography.Append(
                biography_pb2.AppendRequest(
                    ori_id=f"ori-{i}", expected_version=any_version, events=memories(i)
                ),
                metadata=self.md,
            )

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
            max_model_calls=admitted.budget.max_model_calls,
            objectives=[cognition_pb2.ContextItem(ref="obj-1", text="open the bakery", priority_bp=9000)],
        )
        if self.full:
            request.moment.CopyFrom(MOMENT)
        else:
            request.stimulus, request.counterpart_id = "speaker: bram\nIs the bakery open today?", "bram"
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
    targets: dict[str, str], token: str, runs: int, concurrency: int, warmup: int, *, zones: str
) -> dict[str, Any]:
    client = Client(targets, token, zones == "full")
    try:
        if client.full:
            await client.seed()
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
        "zones": zones,
        "note": "thinks_per_s counts admit+Think+end cycles; shared 2-core machine, services in one process",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--zones", choices=("full", "minimal"), default="full", help="fill every context zone, or almost none"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as tmp:
        process, targets, tokens = start_egbe(Path(tmp))
        try:
            result = asyncio.run(
                measure(
                    targets, tokens["service"], args.runs, args.concurrency, args.warmup, zones=args.zones
                )
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
