"""Gateway overhead: a run's admit -> Generate -> end over gRPC on loopback, minus the offline adapter.

Prints one JSON object. The gateway runs as its own process (`egbe serve gateway`) on SQLite and, when a
PostgreSQL DSN is given (`--postgres-dsn` or EGBE_TEST_POSTGRES_DSN), on a fresh PostgreSQL database.
Per backend: overhead_p50_ms / overhead_p99_ms of a run of one model call through the fused `Run` RPC
(admission, the call and the ending in one round trip; `rpcs_per_run` 1), and the same run as three
RPCs (`three_rpc_overhead_*`: AdmitRun, Generate, EndRun, the gateway's share of a Submit, the cognition
service's Think excluded), interleaved run by run; admissions_per_s with 64 concurrent clients calling
AdmitRun, fused_runs_per_s with them calling Run, and admit_end_cycles_per_s (AdmitRun then EndRun).
SQLite is measured with synchronous=FULL (the default: every commit fsynced) and NORMAL.
The baselines, measured in the same run, interleaved with the runs:
- a store-free RPC of the gateway (EvaluateBudget with no requests) through the whole chassis (token,
  role, log context, error mapping): `baseline_rpc_floor_*` per round trip, and how many of those the 64
  clients complete per second (`baseline_store_free_rpcs_per_s`: the ceiling any admission rate is
  bounded by here). `overhead_beyond_rpc_floor_*` is each run minus the adapter and three of these round
  trips measured just before it (one for the fused run): the gateway's own work (store, checks, audit)
  without the transport;
- a bare grpc.aio server (`bare_grpc_aio_*`: its own process on the same event loop, the same
  EvaluateBudget method answering an empty message, no interceptor, no auth, no handler work) called by
  the same client: the Python gRPC floor of this machine. `bare_grpc_aio_run_floor_p50_ms` is three of
  its round trips, the least any run of three RPCs can cost here;
- the server process's CPU per store-free RPC, ours and the bare server's (`*_server_cpu_us_per_rpc`,
  from /proc over the 64-client phases): what the chassis adds per call, less moved by the machine's
  other load than the wall-clock figures (cache and scheduler contention still inflate it); and the
  bench client's own CPU per completed call and its share of one core over the 64-client phases
  (`client_cpu_*`; a share well under 1.0 says the one client process is not what limits the rate): on
  two cores, server CPU + client CPU per call bounds the calls per second whatever the gateway does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
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

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.adapters.base import ModelRequest, UntrustedPart
from gateway.adapters.offline import OfflineAdapter
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses
from services.runtime import run_event_loop

THREE_RPCS = 3  # AdmitRun, Generate, EndRun
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


def admit_request(ori: str) -> gateway_pb2.AdmitRunRequest:
    return gateway_pb2.AdmitRunRequest(
        ori=common_pb2.OriRef(tenant_id="bench", world_id="bench", ori_id=ori),
        tier=common_pb2.COGNITION_TIER_CLOTHO,
        cause=1,  # type: ignore[arg-type]
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


class _BareServicer(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Any
    ) -> gateway_pb2.EvaluateBudgetResponse:
        return gateway_pb2.EvaluateBudgetResponse()


async def serve_bare() -> None:
    """The bare baseline: grpc.aio with nothing of ours; prints its port, serves until killed."""
    server = grpc.aio.server()
    gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server(_BareServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def _start_bare() -> tuple[subprocess.Popen[bytes], str]:
    """The bare server in its own process, as the gateway runs in its own; (process, target)."""
    command = [sys.executable, "-m", "bench.gateway_overhead", "--serve-bare"]
    bare = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert bare.stdout is not None
    return bare, f"127.0.0.1:{bare.stdout.readline().decode().strip()}"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _rate(
    step: Callable[[int], Awaitable[Any]],
    clients: int,
    seconds: float,
    pid: int,
    client_cpu: list[tuple[float, float, int]],
) -> tuple[float, float]:
    """Completions per second of `clients` looping on `step`, and `pid`'s CPU per completion; appends
    this process's CPU, the elapsed time and the completions to `client_cpu`."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await step(index)
            done += 1

    cpu = _cpu_seconds(pid) if pid else 0.0
    own_cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    client_cpu.append((time.process_time() - own_cpu, elapsed, done))
    return done / elapsed, ((_cpu_seconds(pid) - cpu) / done if pid else 0.0)


async def measure(
    target: str, bare_target: str, pids: tuple[int, int], tokens: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    service = bearer_metadata(tokens["service"])
    async with (
        grpc.aio.insecure_channel(target) as channel,
        grpc.aio.insecure_channel(bare_target) as bare_channel,
    ):
        stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        bare = gateway_pb2_grpc.CognitionGatewayServiceStub(bare_channel)
        nothing = gateway_pb2.EvaluateBudgetRequest()

        async def admit(ori: str) -> gateway_pb2.AdmitRunResponse:
            reply: gateway_pb2.AdmitRunResponse = await stub.AdmitRun(admit_request(ori), metadata=service)
            return reply

        def generate_request(run_id: str = "") -> gateway_pb2.GenerateRequest:
            return gateway_pb2.GenerateRequest(
                run_id=run_id, mode=gateway_pb2.COGNITION_MODE_DIALOGUE, prompt=PROMPT
            )

        async def fused(ori: str) -> gateway_pb2.RunResponse:
            reply: gateway_pb2.RunResponse = await stub.Run(
                gateway_pb2.RunRequest(admit=admit_request(ori), generate=generate_request()),
                metadata=service,
            )
            return reply

        async def end(run_id: str) -> None:
            await stub.EndRun(
                gateway_pb2.EndRunRequest(run_id=run_id, outcome=gateway_pb2.RUN_OUTCOME_COMPLETED),
                metadata=service,
            )

        async def timed(call: Awaitable[Any]) -> float:
            started = time.perf_counter()
            await call
            return time.perf_counter() - started

        for _ in range(100):  # both servers warm (connections, caches) before anything is timed
            await stub.EvaluateBudget(nothing, metadata=service)
            await bare.EvaluateBudget(nothing, metadata=service)
        floor, bare_floor, per_run, per_fused_run = [], [], [], []
        for n in range(args.runs):
            bare_floor.append(await timed(bare.EvaluateBudget(nothing, metadata=service)))
            floor.append(await timed(stub.EvaluateBudget(nothing, metadata=service)))
            per_fused_run.append(await timed(fused(f"ori-{n % 256}")))
            started = time.perf_counter()
            run = await admit(f"ori-{n % 256}")
            await stub.Generate(generate_request(run.run_id), metadata=service)
            await end(run.run_id)
            per_run.append(time.perf_counter() - started)

        client_cpu: list[tuple[float, float, int]] = []  # (client CPU s, elapsed s, calls) per phase

        def rate(step: Callable[[int], Awaitable[Any]], pid: int = 0) -> Awaitable[tuple[float, float]]:
            return _rate(step, args.clients, args.seconds, pid, client_cpu)

        async def admit_only(index: int) -> None:
            await admit(f"ori-{index}")

        async def admit_and_end(index: int) -> None:
            await end((await admit(f"ori-{index}")).run_id)

        bare_rate = await rate(lambda _: bare.EvaluateBudget(nothing, metadata=service), pids[1])
        floor_rate = await rate(lambda _: stub.EvaluateBudget(nothing, metadata=service), pids[0])
        admissions, _ = await rate(admit_only)
        cycles, _ = await rate(admit_and_end)
        fused_runs, _ = await rate(lambda index: fused(f"ori-{index}"))
    return {
        "per_fused_run": per_fused_run,
        "fused_runs_per_s": fused_runs,
        "client_cpu": client_cpu,
        "per_run": per_run,
        "floor": floor,
        "bare_floor": bare_floor,
        "admissions_per_s": admissions,
        "admit_end_per_s": cycles,
        "floor_rate": floor_rate,
        "bare_rate": bare_rate,
    }


async def bench_backend(
    database_url: str | None, args: argparse.Namespace, adapter_s: float, extra_env: dict[str, str]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as folder:
        # Room for every admission of the measurement: the cap must not be what is measured.
        cap = {"EGBE_GATEWAY__BUDGET__WORLD_CAP_TOKENS_PER_HOUR": str(10**12)}
        served = ServiceProcesses(Path(folder), database_url, extra_env=extra_env | cap)
        bare, bare_target = _start_bare()
        try:
            served.start("gateway")
            pids = (served.running["gateway"].pid, bare.pid)
            figures = await measure(served.target("gateway"), bare_target, pids, served.tokens, args)
        finally:
            bare.kill()
            bare.wait()
            served.stop_all()
    floor_ms = [t * 1000 for t in figures["floor"]]
    bare_ms = [t * 1000 for t in figures["bare_floor"]]

    def overhead(runs: list[float], rpcs: int, prefix: str = "") -> dict[str, float]:
        """Each run minus the adapter; and (beyond the floor) minus `rpcs` store-free round trips
        measured right before it (the transport, chassis and event loop every RPC pays, store or not)."""
        total = [max(0.0, (t - adapter_s) * 1000) for t in runs]
        beyond = [
            max(0.0, (t - adapter_s - rpcs * f) * 1000) for t, f in zip(runs, figures["floor"], strict=True)
        ]
        return {
            f"{prefix}overhead_p50_ms": round(_percentile(total, 0.50), 3),
            f"{prefix}overhead_p99_ms": round(_percentile(total, 0.99), 3),
            f"{prefix}overhead_beyond_rpc_floor_p50_ms": round(_percentile(beyond, 0.50), 3),
            f"{prefix}overhead_beyond_rpc_floor_p99_ms": round(_percentile(beyond, 0.99), 3),
        }

    client_cpu, client_elapsed, client_calls = (sum(x) for x in zip(*figures["client_cpu"], strict=True))
    return {
        **overhead(figures["per_fused_run"], 1),
        **overhead(figures["per_run"], THREE_RPCS, "three_rpc_"),
        "admissions_per_s": round(figures["admissions_per_s"], 1),
        "fused_runs_per_s": round(figures["fused_runs_per_s"], 1),
        "admit_end_cycles_per_s": round(figures["admit_end_per_s"], 1),
        "baseline_rpc_floor_p50_ms": round(_percentile(floor_ms, 0.50), 3),
        "baseline_rpc_floor_p99_ms": round(_percentile(floor_ms, 0.99), 3),
        "baseline_store_free_rpcs_per_s": round(figures["floor_rate"][0], 1),
        "baseline_server_cpu_us_per_rpc": round(figures["floor_rate"][1] * 1e6, 1),
        "bare_grpc_aio_rpc_p50_ms": round(_percentile(bare_ms, 0.50), 3),
        "bare_grpc_aio_rpc_p99_ms": round(_percentile(bare_ms, 0.99), 3),
        "bare_grpc_aio_three_rpc_floor_p50_ms": round(THREE_RPCS * _percentile(bare_ms, 0.50), 3),
        "bare_grpc_aio_rpcs_per_s": round(figures["bare_rate"][0], 1),
        "bare_grpc_aio_server_cpu_us_per_rpc": round(figures["bare_rate"][1] * 1e6, 1),
        "client_cpu_us_per_call": round(client_cpu / client_calls * 1e6, 1),
        "client_cpu_share_of_one_core": round(client_cpu / client_elapsed, 2),
        "rpcs_per_run": 1,
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
    parser.add_argument("--serve-bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        run_event_loop(serve_bare())
        return
    report = run_event_loop(main_async(args))
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
