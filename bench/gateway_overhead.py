"""Gateway overhead: a run of one model call over gRPC on loopback, minus the offline adapter's own time.

The adapter's own time is each run's, as the gateway timed its model call (`model_latency_us` on the
answer: inside the task that runs the adapter, so the hop to that task and everything around the call
stay in the overhead; so does the input-token count before it). `adapter_in_situ_p50_ms` is its median
over the primary runs; `adapter_alone_median_ms` the same adapter timed in a warm loop of its own (the
figure subtracted before the gateway timed its calls: in place, with the caches the rest of the run
left, it takes longer).

Prints one JSON object. The gateway runs as its own process (`egbe serve gateway`) on SQLite and, when a
PostgreSQL DSN is given (`--postgres-dsn` or EGBE_TEST_POSTGRES_DSN), on a fresh PostgreSQL database.
SQLite is measured with synchronous=FULL (the default: every commit fsynced) and NORMAL.

The primary figures are the streams', the shape a world server's dispatcher uses (one long-lived
connection, a message per run):
- overhead_p50_ms / overhead_p99_ms: sequential fused runs (admission, the one model call and the
  ending; what `Run` does) as messages on one open RunStream, one in flight: each message's write to
  its answer's read, minus the run's adapter time. `overhead_beyond_bare_stream_floor_*` also subtracts a
  bare grpc.aio stream round trip measured just before it: the gateway's own work without the transport;
- back_to_back_overhead_*: the same runs on the same stream, but after the interleaved ones and with
  nothing between them: each message is written as soon as the last was answered, so the gateway never
  idles (`bare_grpc_aio_stream_back_to_back_p50_ms`: the bare stream the same way, right after; the
  `beyond` figure subtracts it run by run). The primary figure has the gateway idle for the few
  milliseconds the other calls between its runs take; on a virtual machine a thread asleep that long
  costs a wake-up (about 100 us each) at every hand-off of the next message. The difference between the
  two is mostly that cost, not the gateway's work;
- admissions_per_s: 64 concurrent clients, each its own AdmitStream on the one channel, each with one
  admission in flight (write, read its answer, write the next; no batching in a message). The runs stay
  open; the gateway ends them all as cancelled when the streams are cancelled, after the timing (this
  phase runs last);
- fused_runs_per_s: the same 64 clients on RunStreams; admit_end_cycles_per_s: on AdmitStreams, an
  admission then its ending (two messages per cycle, one in flight).
The unary figures, measured in the same process run (the latencies interleaved run by run with the
stream's): `unary_overhead_*` (the fused `Run` RPC), `unary_three_rpc_overhead_*` (AdmitRun, Generate,
EndRun: the gateway's share of a Submit, the cognition service's Think excluded), `unary_admissions_per_s`,
`unary_fused_runs_per_s`, `unary_admit_end_cycles_per_s`, `unary_three_rpc_runs_per_s` (AdmitRun,
Generate, EndRun: the cognition service's path) with 64 concurrent clients calling the RPCs.
`unary_*_beyond_rpc_floor_*` subtracts one (three) of the store-free round trips below.
The baselines, in the same run:
- a store-free RPC of the gateway (EvaluateBudget with no requests) through the whole chassis (token,
  role, log context, error mapping): `baseline_rpc_floor_*` per round trip, and how many of those the 64
  clients complete per second (`baseline_store_free_rpcs_per_s`);
- a bare grpc.aio server (its own process, no interceptor, no auth, no handler work): unary
  (`bare_grpc_aio_rpc_*`: EvaluateBudget answering an empty message; `bare_grpc_aio_three_rpc_floor_p50_ms`
  is three of those, the least any run of three RPCs can cost here) and a bidi stream
  (`bare_grpc_aio_stream_*`: RunStream echoing each message's id, one in flight per stream, 64 streams
  for the rate): the Python gRPC floors of the machine it runs on;
- per phase of 64 clients, the server process's CPU per completion (`server_cpu_us_per_call`: the
  gateway's, or the bare server's for `bare_*`; from /proc, less moved by the machine's other load than
  the wall-clock figures), the bench client's own CPU per completion and its share of one core
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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.biography_append import fresh_database, process_cpu_seconds
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
    """The offline adapter's median time for the benchmark prompt in a warm loop of its own (a comparison
    for the time it takes in place, which is what the overhead figures subtract)."""
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


class _BareServicer(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Any
    ) -> gateway_pb2.EvaluateBudgetResponse:
        return gateway_pb2.EvaluateBudgetResponse()

    async def RunStream(
        self, request_iterator: AsyncIterator[gateway_pb2.RunStreamRequest], context: Any
    ) -> AsyncIterator[gateway_pb2.RunStreamResponse]:
        async for request in request_iterator:
            yield gateway_pb2.RunStreamResponse(message_id=request.message_id)


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


class Streamed:
    """One open bidi stream used with one message in flight: write a message, read its answer."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._sent = 0

    async def ask(self, message: Callable[[int], Any]) -> Any:
        self._sent += 1
        await self._call.write(message(self._sent))
        reply = await self._call.read()
        if reply.HasField("status") or reply.message_id != self._sent:
            raise RuntimeError(f"the stream refused message {self._sent}: {reply}")
        return reply

    async def close(self) -> None:
        await self._call.done_writing()
        await self._call.code()

    def cancel(self) -> None:
        self._call.cancel()


@dataclass
class Phase:
    """A phase of `clients` concurrent clients: completions per second, and CPU per completion."""

    per_s: float
    server_cpu_us: float  # of the server process (the gateway's, or the bare server's)
    client_cpu_us: float  # of this process (the bench client)
    client_core_share: float  # this process's CPU over the phase's wall time


async def _rate(step: Callable[[int], Awaitable[Any]], clients: int, seconds: float, pid: int) -> Phase:
    """`clients` looping on `step` (each with its index) for `seconds`."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await step(index)
            done += 1

    cpu = process_cpu_seconds(pid)
    own_cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    own = time.process_time() - own_cpu
    server = (process_cpu_seconds(pid) - cpu) / done
    return Phase(done / elapsed, server * 1e6, own / done * 1e6, own / elapsed)


def _generate_request(run_id: str = "") -> gateway_pb2.GenerateRequest:
    return gateway_pb2.GenerateRequest(run_id=run_id, mode=gateway_pb2.COGNITION_MODE_DIALOGUE, prompt=PROMPT)


def _run_request(ori: str) -> gateway_pb2.RunRequest:
    return gateway_pb2.RunRequest(admit=admit_request(ori), generate=_generate_request())


def _end_request(run_id: str) -> gateway_pb2.EndRunRequest:
    return gateway_pb2.EndRunRequest(run_id=run_id, outcome=gateway_pb2.RUN_OUTCOME_COMPLETED)


def run_message(ori: str) -> Callable[[int], gateway_pb2.RunStreamRequest]:
    return lambda n: gateway_pb2.RunStreamRequest(message_id=n, run=_run_request(ori))


def admit_message(ori: str) -> Callable[[int], gateway_pb2.AdmitStreamRequest]:
    return lambda n: gateway_pb2.AdmitStreamRequest(message_id=n, admit=admit_request(ori))


def end_message(run_id: str) -> Callable[[int], gateway_pb2.AdmitStreamRequest]:
    return lambda n: gateway_pb2.AdmitStreamRequest(message_id=n, end=_end_request(run_id))


def echo(n: int) -> gateway_pb2.RunStreamRequest:
    return gateway_pb2.RunStreamRequest(message_id=n)


async def _timed(call: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


async def _timed_run(call: Awaitable[float], model_seconds: list[float]) -> float:
    """A run's round trip; the model call's own time in it (as the gateway timed it) goes on
    `model_seconds`."""
    started = time.perf_counter()
    model_seconds.append(await call)
    return time.perf_counter() - started


def _model_seconds(generation: gateway_pb2.GenerateResponse) -> float:
    return generation.model_latency_us / 1e6


class Client:
    """The bench client of one gateway and the bare server: each way of running a run, timed."""

    def __init__(self, channel: grpc.aio.Channel, bare_channel: grpc.aio.Channel, token: str) -> None:
        self.stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
        self.bare = gateway_pb2_grpc.CognitionGatewayServiceStub(bare_channel)
        self.service = bearer_metadata(token)
        self.nothing = gateway_pb2.EvaluateBudgetRequest()

    async def floor(self) -> None:
        await self.stub.EvaluateBudget(self.nothing, metadata=self.service)

    async def bare_floor(self) -> None:
        await self.bare.EvaluateBudget(self.nothing, metadata=self.service)

    async def admit(self, ori: str) -> gateway_pb2.AdmitRunResponse:
        reply: gateway_pb2.AdmitRunResponse = await self.stub.AdmitRun(
            admit_request(ori), metadata=self.service
        )
        return reply

    async def end(self, run_id: str) -> None:
        await self.stub.EndRun(_end_request(run_id), metadata=self.service)

    async def fused(self, ori: str) -> float:
        """A `Run`; the model call's own time in it."""
        reply = await self.stub.Run(_run_request(ori), metadata=self.service)
        return _model_seconds(reply.generation)

    async def three_rpcs(self, ori: str) -> float:
        run = await self.admit(ori)
        generated = await self.stub.Generate(_generate_request(run.run_id), metadata=self.service)
        await self.end(run.run_id)
        return _model_seconds(generated)

    @staticmethod
    async def stream_run(stream: Streamed, ori: str) -> float:
        reply = await stream.ask(run_message(ori))
        return _model_seconds(reply.run.generation)

    async def admit_and_end(self, ori: str) -> None:
        await self.end((await self.admit(ori)).run_id)

    def streams(self, method: str, count: int) -> list[Streamed]:
        """`count` streams of the gateway's `method` ("RunStream", "AdmitStream"); "bare" for the bare
        server's RunStream."""
        if method == "bare":
            return [Streamed(self.bare.RunStream(metadata=self.service)) for _ in range(count)]  # type: ignore[call-arg]
        return [Streamed(getattr(self.stub, method)(metadata=self.service)) for _ in range(count)]

    async def latency(self, runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """Sequential round trips, interleaved run by run: the floors, and a run each way; and each
        run's model call's own time (by the same names)."""
        [run_stream], [bare_stream] = self.streams("RunStream", 1), self.streams("bare", 1)
        for _ in range(100):  # both servers warm (connections, caches, the streams) before timing
            await self.floor()
            await self.bare_floor()
            await bare_stream.ask(echo)
        await run_stream.ask(run_message("warm"))
        timings: dict[str, list[float]] = {
            name: []
            for name in ("floor", "bare_floor", "bare_stream", "stream_run", "fused_run", "three_rpc")
        }
        model: dict[str, list[float]] = {
            name: [] for name in ("stream_run", "fused_run", "three_rpc", "back_to_back_stream_run")
        }
        for n in range(runs):
            ori = f"ori-{n % 256}"
            timings["bare_floor"].append(await _timed(self.bare_floor()))
            timings["bare_stream"].append(await _timed(bare_stream.ask(echo)))
            timings["floor"].append(await _timed(self.floor()))
            for name, call in (
                ("stream_run", self.stream_run(run_stream, ori)),
                ("fused_run", self.fused(ori)),
                ("three_rpc", self.three_rpcs(ori)),
            ):
                timings[name].append(await _timed_run(call, model[name]))
        # Then each stream on its own, a message as soon as the last was answered: the servers never idle.
        timings["back_to_back_stream_run"] = [
            await _timed_run(self.stream_run(run_stream, f"ori-{n % 256}"), model["back_to_back_stream_run"])
            for n in range(runs)
        ]
        timings["back_to_back_bare_stream"] = [await _timed(bare_stream.ask(echo)) for _ in range(runs)]
        await run_stream.close()
        await bare_stream.close()
        return timings, model

    async def rates(self, clients: int, seconds: float, pids: tuple[int, int]) -> dict[str, Phase]:
        """Each phase: `clients` concurrent clients, one call (or message) in flight each."""

        def rate(step: Callable[[int], Awaitable[Any]], pid: int) -> Awaitable[Phase]:
            return _rate(step, clients, seconds, pid)

        phases = {
            "bare_unary": await rate(lambda _: self.bare_floor(), pids[1]),
            "floor_unary": await rate(lambda _: self.floor(), pids[0]),
            "unary_admissions": await rate(lambda index: self.admit(f"ori-{index}"), pids[0]),
            "unary_admit_end_cycles": await rate(lambda index: self.admit_and_end(f"ori-{index}"), pids[0]),
            "unary_fused_runs": await rate(lambda index: self.fused(f"ori-{index}"), pids[0]),
            "unary_three_rpc_runs": await rate(lambda index: self.three_rpcs(f"ori-{index}"), pids[0]),
        }
        bare = self.streams("bare", clients)
        phases["bare_stream"] = await rate(lambda index: bare[index].ask(echo), pids[1])
        runs = self.streams("RunStream", clients)
        phases["stream_fused_runs"] = await rate(
            lambda index: self.stream_run(runs[index], f"ori-{index}"), pids[0]
        )
        cycles = self.streams("AdmitStream", clients)

        async def cycle(index: int) -> None:
            admitted = await cycles[index].ask(admit_message(f"ori-{index}"))
            await cycles[index].ask(end_message(admitted.admit.run_id))

        phases["stream_admit_end_cycles"] = await rate(cycle, pids[0])
        await asyncio.gather(*(s.close() for s in bare + runs + cycles))
        # Last: these streams' runs stay open, and the gateway ends them all (thousands) when the
        # streams go; cancelled after the timing, no later phase shares the machine with those endings.
        admissions = self.streams("AdmitStream", clients)
        phases["stream_admissions"] = await rate(
            lambda index: admissions[index].ask(admit_message(f"ori-{index}")), pids[0]
        )
        for stream in admissions:
            stream.cancel()
        return phases


async def measure(
    target: str, bare_target: str, pids: tuple[int, int], tokens: dict[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    async with (
        grpc.aio.insecure_channel(target) as channel,
        grpc.aio.insecure_channel(bare_target) as bare_channel,
    ):
        client = Client(channel, bare_channel, tokens["service"])
        latency, model = await client.latency(args.runs)
        phases = await client.rates(args.clients, args.seconds, pids)
    return {"latency": latency, "model": model, "phases": phases}


async def bench_backend(
    database_url: str | None, args: argparse.Namespace, extra_env: dict[str, str]
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
    latency: dict[str, list[float]] = figures["latency"]
    model: dict[str, list[float]] = figures["model"]
    phases: dict[str, Phase] = figures["phases"]

    def ms(name: str, fraction: float, times: float = 1.0) -> float:
        return round(times * _percentile([t * 1000 for t in latency[name]], fraction), 3)

    def overhead(runs: str, floor: str, rpcs: int, prefix: str, floor_name: str) -> dict[str, float]:
        """Each run minus its model call's own time; and (beyond the floor) minus `rpcs` round trips of
        `floor` measured right before it (the transport and event loop every message pays, store or not)."""
        own = [t - m for t, m in zip(latency[runs], model[runs], strict=True)]
        total = [max(0.0, t * 1000) for t in own]
        beyond = [max(0.0, (t - rpcs * f) * 1000) for t, f in zip(own, latency[floor], strict=True)]
        return {
            f"{prefix}overhead_p50_ms": round(_percentile(total, 0.50), 3),
            f"{prefix}overhead_p99_ms": round(_percentile(total, 0.99), 3),
            f"{prefix}overhead_beyond_{floor_name}_p50_ms": round(_percentile(beyond, 0.50), 3),
            f"{prefix}overhead_beyond_{floor_name}_p99_ms": round(_percentile(beyond, 0.99), 3),
        }

    def rate(name: str) -> float:
        return round(phases[name].per_s, 1)

    return {
        "adapter_in_situ_p50_ms": round(_percentile([m * 1000 for m in model["stream_run"]], 0.50), 4),
        **overhead("stream_run", "bare_stream", 1, "", "bare_stream_floor"),
        **overhead(
            "back_to_back_stream_run", "back_to_back_bare_stream", 1, "back_to_back_", "bare_stream_floor"
        ),
        "admissions_per_s": rate("stream_admissions"),
        "fused_runs_per_s": rate("stream_fused_runs"),
        "admit_end_cycles_per_s": rate("stream_admit_end_cycles"),
        **overhead("fused_run", "floor", 1, "unary_", "rpc_floor"),
        **overhead("three_rpc", "floor", THREE_RPCS, "unary_three_rpc_", "rpc_floor"),
        "unary_admissions_per_s": rate("unary_admissions"),
        "unary_fused_runs_per_s": rate("unary_fused_runs"),
        "unary_admit_end_cycles_per_s": rate("unary_admit_end_cycles"),
        "unary_three_rpc_runs_per_s": rate("unary_three_rpc_runs"),
        "baseline_rpc_floor_p50_ms": ms("floor", 0.50),
        "baseline_rpc_floor_p99_ms": ms("floor", 0.99),
        "baseline_store_free_rpcs_per_s": rate("floor_unary"),
        "bare_grpc_aio_rpc_p50_ms": ms("bare_floor", 0.50),
        "bare_grpc_aio_rpc_p99_ms": ms("bare_floor", 0.99),
        "bare_grpc_aio_three_rpc_floor_p50_ms": ms("bare_floor", 0.50, THREE_RPCS),
        "bare_grpc_aio_rpcs_per_s": rate("bare_unary"),
        "bare_grpc_aio_stream_p50_ms": ms("bare_stream", 0.50),
        "bare_grpc_aio_stream_p99_ms": ms("bare_stream", 0.99),
        "bare_grpc_aio_stream_back_to_back_p50_ms": ms("back_to_back_bare_stream", 0.50),
        "bare_grpc_aio_stream_messages_per_s": rate("bare_stream"),
        "server_cpu_us_per_call": {name: round(p.server_cpu_us, 1) for name, p in phases.items()},
        "client_cpu_us_per_call": {name: round(p.client_cpu_us, 1) for name, p in phases.items()},
        "client_cpu_share_of_one_core": {name: round(p.client_core_share, 2) for name, p in phases.items()},
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "benchmark": "gateway_overhead",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "runs": args.runs,
        "clients": args.clients,
        "adapter_alone_median_ms": round(await adapter_seconds(200) * 1000, 4),
        "targets": {"overhead_p50_ms": 1.0, "overhead_p99_ms": 5.0, "admissions_per_s": 5_000},
        "sqlite": await bench_backend(None, args, {}),
        "sqlite_synchronous_normal": await bench_backend(
            None, args, {"EGBE_GATEWAY__SQLITE_SYNCHRONOUS": "NORMAL"}
        ),
    }
    server_dsn = args.postgres_dsn or os.environ.get("EGBE_TEST_POSTGRES_DSN")
    if server_dsn:
        dsn, drop = fresh_database(server_dsn)
        try:
            report["postgres"] = await bench_backend(dsn, args, {})
        finally:
            drop()
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
