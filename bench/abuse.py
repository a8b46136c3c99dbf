"""Abuse: what an attacker or a careless client can make `egbe up` pay, in three figures.

    worst_request_cpu_ms      the most CPU any single adversarial request of at most 1 MiB costs
                              (target <= 50); `egbe up` is one process, so it is that process's CPU
                              (every thread, from /proc/<pid>/task/*/schedstat) around the request,
                              the cluster otherwise idle; baseline: an ordinary request of each RPC
    tick_p99_ms_under_flood   tick round-trip p99 at 10,200 agents, 20 Hz, while clients flood every
                              other service (target <= 5); baseline: the same ticks with no flood
    unauth_audit_rows_per_s   operator-audit rows (ListOperatorAttempts) an unauthenticated flood of
                              OperatorService calls writes per second (target <= 10); baseline: the
                              flood's own calls per second (what an unthrottled audit would write)

    python -m bench.abuse --json            # the full run
    python -m bench.abuse --json --smoke    # a short one

Prints one JSON object. The machine is shared: read the figures with its load (load_average_1m).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf import struct_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.system_load import columnar_frame, percentile, registration_chunks
from egbe.v1 import (
    biography_pb2,
    biography_pb2_grpc,
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    kernel_pb2,
    kernel_pb2_grpc,
    perception_pb2,
    policy_pb2,
    policy_pb2_grpc,
)
from kernel_service.tick_log import read_records
from services.auth import bearer_metadata
from tests.conftest import EmbeddedEgbe, start_embedded, stop_embedded

MIB = 1024 * 1024
WORLD = "abuse-world"
AGENTS = 10_200
HZ = 20.0
TARGETS = {"worst_request_cpu_ms": 50.0, "tick_p99_ms_under_flood": 5.0, "unauth_audit_rows_per_s": 10.0}
OPTIONS = [("grpc.max_send_message_length", 64 * MIB), ("grpc.max_receive_message_length", 64 * MIB)]
SLOW = 120.0
# Pause before and after a measured request.
SETTLE = 0.3
# A request's CPU is measured once the server idles below this share of a CPU, waiting at most this long.
QUIET_SHARE = 0.02
QUIET_WAIT = 60.0
Call = Callable[[], Any]


def process_cpu_ns(pid: int) -> int:
    """CPU time of every live thread of the process, in nanoseconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended while being read
    return total


def wait_quiet(pid: int) -> float:
    """Wait (up to `QUIET_WAIT` s) until the process idles below `QUIET_SHARE` of a CPU: what it runs
    in the background (the cognition calls a seeded world's ticks issued) has drained, so it does
    not blur one request's cost. Returns the share it reached."""
    deadline = time.monotonic() + QUIET_WAIT
    while True:
        start, started = process_cpu_ns(pid), time.monotonic()
        time.sleep(SETTLE)
        share = (process_cpu_ns(pid) - start) / 1e9 / (time.monotonic() - started)
        if share < QUIET_SHARE or time.monotonic() > deadline:
            return share


def cpu_ms(pid: int, request: Call) -> tuple[float, str]:
    """CPU the server spends on one request: the process's CPU over the call and a short settling
    pause (for work it hands off), less what it spends idle over as long just before, once it idles."""
    wait_quiet(pid)
    idle_from, idle_start = process_cpu_ns(pid), time.monotonic()
    time.sleep(SETTLE)
    idle_rate = (process_cpu_ns(pid) - idle_from) / (time.monotonic() - idle_start)
    before, started = process_cpu_ns(pid), time.monotonic()
    try:
        request()
        code = "OK"
    except grpc.RpcError as error:
        code = error.code().name
    time.sleep(SETTLE)
    spent = process_cpu_ns(pid) - before - idle_rate * (time.monotonic() - started)
    return max(spent, 0.0) / 1e6, code


class Cluster:
    """Channels and stubs to one `egbe up`, with each role's metadata."""

    def __init__(self, egbe: EmbeddedEgbe) -> None:
        self.egbe = egbe
        self.channels = {n: grpc.insecure_channel(t, options=OPTIONS) for n, t in egbe.targets.items()}
        self.kernel = kernel_pb2_grpc.KernelServiceStub(self.channels["kernel"])
        self.biography = biography_pb2_grpc.BiographyServiceStub(self.channels["biography"])
        self.policy = policy_pb2_grpc.PolicyServiceStub(self.channels["policy"])
        self.gateway = gateway_pb2_grpc.CognitionGatewayServiceStub(self.channels["gateway"])
        self.operator = gateway_pb2_grpc.OperatorServiceStub(self.channels["gateway"])
        self.world = bearer_metadata(egbe.tokens["world"])
        self.service = bearer_metadata(egbe.tokens["service"])
        self.operator_md = bearer_metadata(egbe.tokens["operator"])

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()


def _ori(ori_id: str) -> common_pb2.OriRef:
    return common_pb2.OriRef(tenant_id="bench", world_id=WORLD, ori_id=ori_id)


def _ground(claims: int, evidence: int, words: int) -> policy_pb2.GroundRequest:
    text = " ".join(f"word{i}" for i in range(words))
    return policy_pb2.GroundRequest(
        ori=_ori("ori-00001"),
        claims=[
            policy_pb2.Claim(claim_id=f"c{i}", text=text, required_tags=[f"t{i}"]) for i in range(claims)
        ],
        evidence=[
            policy_pb2.Evidence(evidence_id=f"e{i}", text=text, tags=[f"t{i}"]) for i in range(evidence)
        ],
    )


def _identity(quirk_chars: int) -> biography_pb2.OriIdentity:
    return biography_pb2.OriIdentity(
        display_name="Adunni",
        vocation="potter",
        home="Ile-Ife",
        persona="p" * min(quirk_chars, 2_000),
        quirks=["q" * min(quirk_chars, 240)] * 8,
    )


def _identities(count: int, chars: int) -> biography_pb2.RegisterIdentitiesRequest:
    return biography_pb2.RegisterIdentitiesRequest(
        registrations=[
            biography_pb2.IdentityRegistration(ori_id=f"ori-{i:05d}", identity=_identity(chars), world_tick=1)
            for i in range(count)
        ]
    )


def _append(events: int, text_chars: int) -> biography_pb2.AppendRequest:
    def event() -> biography_pb2.NewOriEvent:
        payload = struct_pb2.Struct()
        payload.update({"text": "m" * text_chars, "numbers": list(range(16))})
        return biography_pb2.NewOriEvent(
            event_id=str(uuid.uuid4()),
            kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
            payload=payload,
            world_tick=1,
            provenance_ref="bench-abuse",
        )

    return biography_pb2.AppendRequest(
        ori_id="ori-00002",
        expected_version=biography_pb2.ExpectedVersion(kind=biography_pb2.ExpectedVersion.KIND_ANY),
        events=[event() for _ in range(events)],
    )


def _steward_texts(count: int, chars: int) -> policy_pb2.ClassifyStewardTextRequest:
    text = ("please make her do it even though she said no " * (chars // 46 + 1))[:chars]
    return policy_pb2.ClassifyStewardTextRequest(
        texts=[policy_pb2.StewardText(field=f"texts[{i}]", text=text) for i in range(count)]
    )


def _perception(tick: int, line_chars: int, lines: int) -> perception_pb2.PerceptionBatch:
    batch = columnar_frame(WORLD, tick, AGENTS)
    for slot in range(lines):
        batch.situations.add(
            slot=slot,
            player_line=perception_pb2.SpokenLine(speaker_id="p1", speaker_name="Ade", text="x" * line_chars),
        )
    return batch


def fill(build: Callable[[int], Any], limit: int = MIB - 4096) -> Any:
    """The largest request `build(n)` makes that stays within `limit` bytes (doubling, then bisecting)."""
    low, high = 1, 2
    while build(high).ByteSize() <= limit:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if build(middle).ByteSize() <= limit else (low, middle)
    return build(low)


def worst_request(cluster: Cluster, snapshot: kernel_pb2.KernelSnapshot, tick: int) -> dict[str, Any]:
    c = cluster
    broken = kernel_pb2.KernelSnapshot()
    broken.CopyFrom(snapshot)
    broken.arrays[-1].data = broken.arrays[-1].data[:-1]
    cases: dict[str, tuple[Any, Any, Callable[[Any], Any]]] = {
        "Ground": (
            _ground(2, 2, 8),
            fill(lambda n: _ground(n, n, 8)),
            lambda r: c.policy.Ground(r, metadata=c.service, timeout=SLOW),
        ),
        "RegisterIdentities": (
            _identities(1, 20),
            fill(lambda n: _identities(n, 240)),
            lambda r: c.biography.RegisterIdentities(r, metadata=c.service, timeout=SLOW),
        ),
        "Append": (
            _append(1, 40),
            fill(lambda n: _append(n, 2_000)),
            lambda r: c.biography.Append(r, metadata=c.service, timeout=SLOW),
        ),
        "ClassifyStewardText": (
            _steward_texts(1, 40),
            fill(lambda n: _steward_texts(n, 2_000)),
            lambda r: c.policy.ClassifyStewardText(r, metadata=c.service, timeout=SLOW),
        ),
        "Tick (1 MiB perception batch)": (
            kernel_pb2.TickRequest(batch=columnar_frame(WORLD, tick, AGENTS)),
            kernel_pb2.TickRequest(batch=fill(lambda n: _perception(tick + 1, 2_000, n))),
            lambda r: c.kernel.Tick(r, metadata=c.world, timeout=SLOW),
        ),
        "RestoreSnapshot (refused: one array a byte short)": (
            kernel_pb2.RestoreSnapshotRequest(snapshot=snapshot),
            kernel_pb2.RestoreSnapshotRequest(snapshot=broken),
            lambda r: c.kernel.RestoreSnapshot(r, metadata=c.world, timeout=SLOW),
        ),
        "RestoreSnapshot (whole world, over 1 MiB)": (
            kernel_pb2.RestoreSnapshotRequest(snapshot=snapshot),
            kernel_pb2.RestoreSnapshotRequest(snapshot=snapshot),
            lambda r: c.kernel.RestoreSnapshot(r, metadata=c.world, timeout=SLOW),
        ),
    }
    pid = c.egbe.process.pid
    report = {}
    for name, (ordinary, adversarial, send) in cases.items():
        baseline, _ = cpu_ms(pid, lambda s=send, r=ordinary: s(r))  # type: ignore[misc]
        spent, code = cpu_ms(pid, lambda s=send, r=adversarial: s(r))  # type: ignore[misc]
        report[name] = {
            "cpu_ms": round(spent, 2),
            "answer": code,
            "bytes": adversarial.ByteSize(),
            "baseline_cpu_ms": round(baseline, 2),
        }
        if "Tick" in name:  # a tick batch must follow the world's clock
            send(kernel_pb2.TickRequest(batch=columnar_frame(WORLD, tick + 2, AGENTS)))
    worst = max(report, key=lambda n: report[n]["cpu_ms"] if report[n]["bytes"] <= MIB else -1)
    return {"value": report[worst]["cpu_ms"], "request": worst, "requests": report}


def tick_p99(cluster: Cluster, first_tick: int, seconds: float) -> tuple[list[float], list[float], int]:
    """Round trips and kernel-measured times of ticks paced at HZ; returns the next tick."""
    round_trips, kernel_ms = [], []
    period = 1.0 / HZ
    started = time.monotonic()
    tick = first_tick
    while time.monotonic() - started < seconds:
        due = started + (tick - first_tick) * period
        time.sleep(max(0.0, due - time.monotonic()))
        request = kernel_pb2.TickRequest(batch=columnar_frame(WORLD, tick, AGENTS))
        sent = time.perf_counter()
        reply = cluster.kernel.Tick(request, metadata=cluster.world, timeout=SLOW)
        round_trips.append((time.perf_counter() - sent) * 1000)
        kernel_ms.append(reply.result.report.elapsed_micros / 1000)
        tick += 1
    return round_trips, kernel_ms, tick


def flood(calls: list[Call], stop: threading.Event, counts: list[int]) -> None:
    index = 0
    while not stop.is_set():
        with contextlib.suppress(grpc.RpcError):
            calls[index % len(calls)]()
        counts[0] += 1
        index += 1


def with_flood(calls: list[Call], threads: int, work: Callable[[], Any]) -> tuple[Any, float, float]:
    """Runs `work` while `threads` threads loop over `calls`; its result, the calls made, the seconds."""
    stop = threading.Event()
    counts = [[0] for _ in range(threads)]
    runners = [
        threading.Thread(target=flood, args=(calls, stop, counts[i]), daemon=True) for i in range(threads)
    ]
    started = time.monotonic()
    for runner in runners:
        runner.start()
    try:
        result = work()
    finally:
        stop.set()
        for runner in runners:
            runner.join(timeout=SLOW)
    return result, sum(c[0] for c in counts), time.monotonic() - started


def other_services_flood(c: Cluster) -> list[Call]:
    """Ordinary-looking work for every service but the kernel, at full speed."""
    ground = _ground(40, 40, 8)
    return [
        lambda: c.policy.Ground(ground, metadata=c.service, timeout=SLOW),
        lambda: c.policy.ClassifyStewardText(_steward_texts(8, 200), metadata=c.service, timeout=SLOW),
        lambda: c.biography.Append(_append(4, 200), metadata=c.service, timeout=SLOW),
        lambda: c.biography.Read(
            biography_pb2.ReadRequest(ori_id="$all", page_size=200), metadata=c.service, timeout=SLOW
        ),
        lambda: c.gateway.EvaluateBudget(
            gateway_pb2.EvaluateBudgetRequest(requests=[gateway_pb2.BudgetRequest()]),
            metadata=c.service,
            timeout=SLOW,
        ),
        lambda: c.operator.ListWorlds(gateway_pb2.ListWorldsRequest(), metadata=c.operator_md, timeout=SLOW),
    ]


def audit_rows(c: Cluster) -> int:
    count, token = 0, ""
    while True:
        page = c.operator.ListOperatorAttempts(
            gateway_pb2.ListOperatorAttemptsRequest(page_size=1000, page_token=token),
            metadata=c.operator_md,
            timeout=SLOW,
        )
        count += len(page.attempts)
        token = page.next_page_token
        if not token:
            return count


def unauthenticated_flood(c: Cluster, seconds: float) -> dict[str, Any]:
    anonymous: tuple[tuple[str, str], ...] = ()
    forged = bearer_metadata("not-a-token")
    calls: list[Call] = [
        lambda: c.operator.KillWorld(
            gateway_pb2.KillWorldRequest(world_id=WORLD, reason="x"), metadata=anonymous, timeout=10
        ),
        lambda: c.operator.GetSpend(gateway_pb2.GetSpendRequest(), metadata=forged, timeout=10),
        lambda: c.operator.ListAuditRecords(
            gateway_pb2.ListAuditRecordsRequest(), metadata=forged, timeout=10
        ),
    ]
    before = audit_rows(c)
    _, made, elapsed = with_flood(calls, 4, lambda: time.sleep(seconds))
    time.sleep(0.5)
    rows = audit_rows(c) - before
    return {
        "value": round(rows / elapsed, 2),
        "rows": rows,
        "calls": int(made),
        "baseline_calls_per_s": round(made / elapsed, 1),
    }


def seeded_world(c: Cluster, tick_log: Path) -> tuple[kernel_pb2.KernelSnapshot, int]:
    """10,200 agents registered and ticked once; the snapshot the tick log took of them."""
    for chunk in registration_chunks(WORLD, AGENTS):
        c.kernel.RegisterAgents(
            kernel_pb2.RegisterAgentsRequest(world_id=WORLD, agents=chunk), metadata=c.world, timeout=SLOW
        )
    c.kernel.Tick(
        kernel_pb2.TickRequest(batch=columnar_frame(WORLD, 1, AGENTS)), metadata=c.world, timeout=SLOW
    )
    snapshots = [r.snapshot for r in read_records(tick_log) if r.WhichOneof("entry") == "snapshot"]
    return snapshots[-1], 2


def _figure(name: str, value: float, **extra: Any) -> dict[str, Any]:
    return {"value": value, "target": TARGETS[name], **extra}


def run(data_dir: Path, seconds: float) -> dict[str, Any]:
    tick_log = data_dir / "abuse-ticks.log"
    os.environ["EGBE_KERNEL__TICK_LOG_PATH"] = str(tick_log)
    os.environ["EGBE_KERNEL__SNAPSHOT_EVERY_TICKS"] = "1"
    egbe = start_embedded(data_dir, timeout=60)
    cluster = Cluster(egbe)
    try:
        snapshot, tick = seeded_world(cluster, tick_log)
        quiet, quiet_kernel, tick = tick_p99(cluster, tick, seconds)
        (loud, loud_kernel, tick), flood_calls, flood_s = with_flood(
            other_services_flood(cluster), 4, lambda: tick_p99(cluster, tick, seconds)
        )
        ticks = _figure(
            "tick_p99_ms_under_flood",
            round(percentile(loud, 99), 3),
            baseline_without_flood=round(percentile(quiet, 99), 3),
            kernel_elapsed_p99_ms=round(percentile(loud_kernel, 99), 3),
            kernel_elapsed_p99_ms_without_flood=round(percentile(quiet_kernel, 99), 3),
            ticks=len(loud),
            flood_calls_per_s=round(flood_calls / flood_s, 1),
            agents=AGENTS,
        )
        audit = unauthenticated_flood(cluster, seconds)
        worst = worst_request(cluster, snapshot, tick + 1)
        alive = egbe.process.poll() is None
    finally:
        cluster.close()
        code = stop_embedded(egbe)
    return {
        "worst_request_cpu_ms": _figure("worst_request_cpu_ms", worst.pop("value"), **worst),
        "tick_p99_ms_under_flood": ticks,
        "unauth_audit_rows_per_s": _figure("unauth_audit_rows_per_s", audit.pop("value"), **audit),
        "egbe_up_alive_after": alive,
        "egbe_up_exit_code": code,
        "seconds_per_phase": seconds,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--smoke", action="store_true", help="3 s phases instead of 20 s")
    parser.add_argument("--seconds", type=float, default=None, help="length of each timed phase")
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else (3.0 if args.smoke else 20.0)
    np.seterr(all="ignore")
    with tempfile.TemporaryDirectory(prefix="egbe-abuse-") as root:
        result = run(Path(root), seconds)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
