"""Biography append/rehydrate benchmark over gRPC on loopback against a real `egbe serve biography`.

Prints one JSON object. Run by hand: `python -m bench.biography_append --backend sqlite --json`
(`--backend postgres` needs a server: --database-url, default $EGBE_TEST_POSTGRES_DSN). `--smoke`
shrinks every phase for CI. The machine is shared: treat figures as indicative, not as a gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from egbe.v1 import biography_pb2, biography_pb2_grpc  # noqa: E402
from services.auth import bearer_metadata  # noqa: E402
from services.local_cluster import ServiceProcesses  # noqa: E402

ANY = biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY)
KINDS = [
    (
        biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
        lambda i: {"text": f"memory {i}", "salience_bp": i % 10_000},
    ),
    (
        biography_pb2.ORI_EVENT_KIND_RELATIONSHIP_CHANGED,
        lambda i: {"other_ori_id": f"ori-{i % 50}", "bond": i % 100},
    ),
    (biography_pb2.ORI_EVENT_KIND_ARC_ADVANCED, lambda i: {"arc_ref": f"arc:{i % 20}"}),
    (biography_pb2.ORI_EVENT_KIND_PERSONALITY_EVENT, lambda i: {"summary": f"changed {i}"}),
    (
        biography_pb2.ORI_EVENT_KIND_VALUE_SHIFT,
        lambda i: {"value_ref": f"value:{i % 10}", "weight_bp": i % 10_000},
    ),
]


def new_events(count: int, start: int = 0, *, mixed: bool = False) -> list[biography_pb2.NewOriEvent]:
    events = []
    for i in range(start, start + count):
        kind, payload = KINDS[i % len(KINDS)] if mixed else KINDS[0]
        event = biography_pb2.NewOriEvent(event_id=str(uuid.uuid4()), kind=kind, world_tick=i)
        event.payload.update(payload(i))
        events.append(event)
    return events


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (Linux /proc): the load-independent cost of the server's work."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def measure(target: str, token: str, server_pid: int, scale: dict[str, int]) -> dict[str, float]:
    metadata = bearer_metadata(token)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = biography_pb2_grpc.BiographyServiceStub(channel)

        async def append(ori_id: str, events: list[biography_pb2.NewOriEvent]) -> None:
            await stub.Append(
                biography_pb2.AppendRequest(ori_id=ori_id, expected_version=ANY, events=events),
                metadata=metadata,
            )

        latencies = [
            await timed(lambda: append("ori-latency", new_events(1))) for _ in range(scale["latency_appends"])
        ]

        # The same method with the request passed through as bytes, so the timed phases below pay for
        # neither building nor serializing requests: the client shares the machine's two cores with the
        # server, and what is measured is the service (the bytes on the wire are the same).
        append_serialized = channel.unary_unary(
            "/egbe.v1.BiographyService/Append",
            request_serializer=None,
            response_deserializer=biography_pb2.AppendResponse.FromString,
        )

        async def writer(requests: list[bytes]) -> None:
            for request in requests:
                await append_serialized(request, metadata=metadata)

        def serialized(ori_id: str, events: list[biography_pb2.NewOriEvent]) -> bytes:
            request = biography_pb2.AppendRequest(ori_id=ori_id, expected_version=ANY, events=events)
            return request.SerializeToString()

        async def throughput(appends: int, size: int) -> tuple[float, float]:
            """Events per second, and the server's CPU microseconds per event, over the same interval."""
            work = [
                [serialized(f"ori-writer-{n}-{size}", new_events(size)) for _ in range(appends)]
                for n in range(scale["clients"])
            ]
            events = scale["clients"] * appends * size
            cpu_before, started = process_cpu_seconds(server_pid), time.perf_counter()
            await asyncio.gather(*(writer(requests) for requests in work))
            elapsed, cpu = time.perf_counter() - started, process_cpu_seconds(server_pid) - cpu_before
            return events / elapsed, cpu / events * 1e6

        single_rate, _ = await throughput(scale["single_appends"], 1)
        batched_rate, batched_cpu = await throughput(scale["batches"], 100)

        for start in range(0, scale["rehydrate_events"], 100):
            await append("ori-rehydrate", new_events(100, start, mixed=True))
        request = biography_pb2.RehydrateRequest(ori_id="ori-rehydrate")
        rehydrates = [
            await timed(lambda: stub.Rehydrate(request, metadata=metadata))
            for _ in range(scale["rehydrates"])
        ]
    return {
        "single_events_per_s": round(single_rate, 1),
        "batched_events_per_s": round(batched_rate, 1),
        # What a busy machine cannot inflate much: divide 1e6 by it for one dedicated core's ceiling.
        "batched_server_cpu_us_per_event": round(batched_cpu, 1),
        "append_p50_ms": round(statistics.median(latencies), 3),
        "append_p99_ms": round(percentile(latencies, 0.99), 3),
        "rehydrate_p50_ms": round(statistics.median(rehydrates), 3),
        "rehydrate_p99_ms": round(percentile(rehydrates, 0.99), 3),
    }


def fresh_database(server_dsn: str) -> tuple[str, Callable[[], None]]:
    name = f"egbe_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(server_dsn)
    info["dbname"] = name

    def drop() -> None:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    return psycopg.conninfo.make_conninfo(**info), drop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output form)")
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    parser.add_argument("--database-url", default=os.environ.get("EGBE_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    scale = {
        "latency_appends": 1000,
        "clients": 4,
        "single_appends": 500,
        "batches": 50,
        "rehydrate_events": 10_000,
        "rehydrates": 500,
    }
    if args.smoke:
        scale = {key: max(1, value // 20) for key, value in scale.items()} | {"clients": 2}
    database_url, cleanup = None, None
    if args.backend == "postgres":
        if not args.database_url:
            parser.error("--backend postgres needs --database-url or EGBE_TEST_POSTGRES_DSN")
        database_url, cleanup = fresh_database(args.database_url)
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as data_dir:
        served = ServiceProcesses(Path(data_dir), database_url)
        try:
            served.start("biography")
            pid = served.running["biography"].pid
            figures = asyncio.run(measure(served.target("biography"), served.tokens["service"], pid, scale))
        finally:
            served.stop_all()
            if cleanup is not None:
                cleanup()
    print(json.dumps({"backend": args.backend, **figures, "smoke": args.smoke, "scale": scale}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
