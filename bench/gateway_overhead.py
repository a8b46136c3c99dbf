"""Gateway overhead: a run's admit -> Generate -> end over gRPC on loopback, minus the offline adapter.

Prints one JSON object. The gateway runs as its own process (`egbe serve gateway`) on SQLite and, when a
PostgreSQL DSN is given (`--postgres-dsn` or EGBE_TEST_POSTGRES_DSN), on a fresh PostgreSQL database.
Per backend: overhead_p50_ms / overhead_p99_ms of a run (AdmitRun, Generate, EndRun: the gateway's share
of a Submit, the cognition service's Think excluded), admissions_per_s with 64 concurrent clients calling
AdmitRun, and admit_end_cycles_per_s (AdmitRun then EndRun). SQLite is measured with synchronous=FULL
(the default: every commit fsynced) and NORMAL.
The baseline, measured in the same run, is a store-free RPC (EvaluateBudget with no requests): the
gRPC floor of one round trip on this machine (`baseline_rpc_floor_*`), and how many of those 64 clients
complete per second (`baseline_store_free_rpcs_per_s`: the ceiling any admission rate is bounded by
here). `overhead_beyond_rpc_floor_*` is each run minus the adapter and three floor round trips measured
just before it: the gateway's own work (store, checks, audit) without the transport.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
from psycopg import sql

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.adapters.offline import OfflineAdapter
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses

RPCS_PER_RUN = 3  # AdmitRun, Generate, EndRun
PROMPT = gateway_pb2.PromptEnvelope(
    system_policy="You are Ada, a baker. Stay in character.",
    task_instruction="Answer the speaker.",
    untrusted=[
        gateway_pb2.UntrustedZone(
            kind=gateway_pb2.UNTRUSTED_ZONE_KIND_STEWARD_INPUT, content="speaker: Bram"
        ),
        gateway_pb2.UntrustedZone(
            kind=gateway_pb2.UNTRUSTED_ZONE_KIND_RECALLED_MEMORY, content="[mem-7] Bram lent me flour."
        ),
    ],
)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def adapter_seconds(samples: int) -> float:
    """The offline adapter's own median time for the benchmark prompt (subtracted from the overhead)."""
    adapter = OfflineAdapter()
    request = ModelRequest(
        PROMPT.system_policy,
        PROMPT.task_instruction,
        untrusted=tuple(UntrustedPart("X", z.content) for z in PROMPT.untrusted),
        mode="dialogue",
        max_output_tokens=4_000,
    )
    timings = []
    for _ in range(samples):
        started = time.perf_counter()
        await adapter.count_input_tokens(request)
        await adapter.generate(request)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def _fresh_database(dsn: str) -> str:
    name = f"egbe_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def _drop_database(server_dsn: str, dsn: str) -> None:
    name = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


async def measure(
    target: str, tokens: dict[str, str], runs: int, clients: int, seconds: float
) -> dict[str, Any]:
    service = bearer_metadata(tokens["service"])
    async with grpc.aio.insecure_channel(target) as channel:
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)

        async def admit(ori: str) -> gateway_pb2.AdmitRunResponse:
            reply: gateway_pb2.AdmitRunResponse = await stub.AdmitRun(
                gateway_pb2.AdmitRunRequest(
                    ori=common_pb2.OriRef(tenant_id="bench", world_id="bench", ori_id=ori),
                    tier=common_pb2.COGNITION_TIER_CLOTHO,
                    cause=1,  # type: ignore[arg-type]
                ),
                metadata=service,
            )
            return reply

        async def end(run_id: str) -> None:
            await stub.EndRun(
                gateway_pb2.EndRunRequest(run_id=run_id, outcome=gateway_pb2.RUN_OUTCOME_COMPLETED),
                metadata=service,
            )

        floor, per_run = [], []
        for n in range(runs):
            started = time.perf_counter()
            await stub.EvaluateBudget(gateway_pb2.EvaluateBudgetRequest(), metadata=service)
            floor.append(time.perf_counter() - started)
            started = time.perf_counter()
            run = await admit(f"ori-{n % 256}")
            await stub.Generate(
                gateway_pb2.GenerateRequest(
                    run_id=run.run_id, mode=gateway_pb2.COGNITION_MODE_DIALOGUE, prompt=PROMPT
                ),
                metadata=service,
            )
            await end(run.run_id)
            per_run.append(time.perf_counter() - started)

        async def rate(step: Callable[[int], Awaitable[None]]) -> float:
            done = 0
            deadline = time.perf_counter() + seconds

            async def client(index: int) -> None:
                nonlocal done
                while time.perf_counter() < deadline:
                    await step(index)
                    done += 1

            started = time.perf_counter()
            await asyncio.gather(*(client(i) for i in range(clients)))
            return done / (time.perf_counter() - started)

        async def admit_only(index: int) -> None:
            await admit(f"ori-{index}")

        async def admit_and_end(index: int) -> None:
            await end((await admit(f"ori-{index}")).run_id)

        async def store_free(index: int) -> None:
            await stub.EvaluateBudget(gateway_pb2.EvaluateBudgetRequest(), metadata=service)

        floor_rate = await rate(store_free)
        admissions = await rate(admit_only)
        cycles = await rate(admit_and_end)
    return {
        "per_run": per_run,
        "floor": floor,
        "admissions_per_s": admissions,
        "admit_end_per_s": cycles,
        "floor_per_s": floor_rate,
    }


async def bench_backend(
    database_url: str | None, args: argparse.Namespace, adapter_s: float, extra_env: dict[str, str]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as folder:
        # Room for every admission of the measurement: the cap must not be what is measured.
        cap = {"EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HOUR": str(10**12)}
        served = ServiceProcesses(Path(folder), database_url, extra_env=extra_env | cap)
        try:
            served.start("gateway")
            target = served.target("gateway")
            figures = await measure(target, served.tokens, args.runs, args.clients, args.seconds)
        finally:
            served.stop_all()
    overhead_ms = [max(0.0, (t - adapter_s) * 1000) for t in figures["per_run"]]
    floor_ms = [t * 1000 for t in figures["floor"]]
    # The gateway's own share: each run minus the adapter and three store-free round trips measured
    # right before it (the transport, interceptor and event loop every RPC pays, store or not).
    beyond_ms = [
        max(0.0, (t - adapter_s - RPCS_PER_RUN * f) * 1000)
        for t, f in zip(figures["per_run"], figures["floor"], strict=True)
    ]
    return {
        "overhead_p50_ms": round(_percentile(overhead_ms, 0.50), 3),
        "overhead_p99_ms": round(_percentile(overhead_ms, 0.99), 3),
        "overhead_beyond_rpc_floor_p50_ms": round(_percentile(beyond_ms, 0.50), 3),
        "overhead_beyond_rpc_floor_p99_ms": round(_percentile(beyond_ms, 0.99), 3),
        "admissions_per_s": round(figures["admissions_per_s"], 1),
        "admit_end_cycles_per_s": round(figures["admit_end_per_s"], 1),
        "baseline_rpc_floor_p50_ms": round(_percentile(floor_ms, 0.50), 3),
        "baseline_rpc_floor_p99_ms": round(_percentile(floor_ms, 0.99), 3),
        "baseline_store_free_rpcs_per_s": round(figures["floor_per_s"], 1),
        "rpcs_per_run": RPCS_PER_RUN,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    adapter_s = await adapter_seconds(200)
    report: dict[str, Any] = {
        "benchmark": "gateway_overhead",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "runs": args.runs,
        "clients": args.clients,
        "adapter_median_ms": round(adapter_s * 1000, 4),
        "targets": {"overhead_p50_ms": 1.0, "overhead_p99_ms": 5.0, "admissions_per_s": 5_000},
        "sqlite": await bench_backend(None, args, adapter_s, {}),
        "sqlite_synchronous_normal": await bench_backend(
            None, args, adapter_s, {"EGBE_GATEWAY__SQLITE_SYNCHRONOUS": "NORMAL"}
        ),
    }
    server_dsn = args.postgres_dsn or os.environ.get("EGBE_TEST_POSTGRES_DSN")
    if server_dsn:
        dsn = _fresh_database(server_dsn)
        try:
            report["postgres"] = await bench_backend(dsn, args, adapter_s, {})
        finally:
            _drop_database(server_dsn, dsn)
    else:
        report["postgres"] = "not measured: give --postgres-dsn or EGBE_TEST_POSTGRES_DSN"
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON object only")
    parser.add_argument("--runs", type=int, default=500, help="sequential runs for the latency figures")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the 64 clients admit")
    parser.add_argument("--postgres-dsn", default="")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
