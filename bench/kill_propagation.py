"""Kill propagation between two gateways sharing PostgreSQL: how soon after an operator's KillOri on
gateway A gateway B refuses that Ori's work.

Prints one JSON object. Two `egbe serve gateway` processes (each its own data directory, lease holder and
tokens) share a fresh PostgreSQL database; A commits each control, and B hears of it by the push (`LISTEN
egbe_gateway_controls`, `pg_notify` in A's transaction), never by reading the table. For each of `--kills`
Ori, one after another: B admits the Ori once (so it is known to serve it), then A's KillOri is sent, and
B is asked to admit the Ori again and again until it answers ABORTED naming the control:

- `kill_rpc_*`: A's KillOri round trip (committed before it answers);
- `refused_after_kill_*`: from sending the KillOri to B's first refusal: the whole propagation as an
  operator sees it, bounded below by the two round trips;
- `refused_after_kill_answered_*`: from A's answer to B's first refusal, at least one of B's admission
  round trips (`admission_rpc_p50_ms`, the baseline: the polling's resolution);
- `admitted_on_b_after_the_kill_answered`: admissions B still granted the killed Ori after A had answered,
  over all the kills (0: the push had always reached B before the operator heard the kill was in force).

The issue's bound is 1 s (`target_ms`). B refusing new work and B cancelling its in-flight calls for the
Ori are one handler of the same notification (tests/gateway/test_kill_propagation.py checks the calls).
Needs a PostgreSQL server: `--postgres-dsn` or EGBE_TEST_POSTGRES_DSN.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from bench.biography_append import fresh_database
from bench.gateway_overhead import _percentile, admit_request
from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from services.auth import bearer_metadata
from services.local_cluster import ServiceProcesses
from services.runtime import run_event_loop

TARGET_MS = 1_000.0
POLL_LIMIT_S = 10.0  # a push slower than this is reported as not propagated


def _ms(values: list[float], fraction: float) -> float:
    return round(_percentile(values, fraction) * 1000, 3)


def _summary(name: str, values: list[float]) -> dict[str, float]:
    return {
        f"{name}_p50_ms": _ms(values, 0.5),
        f"{name}_p99_ms": _ms(values, 0.99),
        f"{name}_max_ms": _ms(values, 1.0),
    }


async def measure(a: ServiceProcesses, b: ServiceProcesses, kills: int) -> dict[str, Any]:
    operator_a = bearer_metadata(a.tokens["operator"])
    service_b = bearer_metadata(b.tokens["service"])
    kill_rpc, refused_after, refused_after_answer, admissions = [], [], [], []
    not_propagated = admitted_after_kill = 0
    async with (
        grpc.aio.insecure_channel(a.target("gateway")) as channel_a,
        grpc.aio.insecure_channel(b.target("gateway")) as channel_b,
    ):
        operator = gateway_pb2_grpc.OperatorServiceStub(channel_a)
        gateway_b = gateway_pb2_grpc.CognitionGatewayServiceStub(channel_b)
        for index in range(kills):
            ori = f"kill-bench-{index}"
            started = time.perf_counter()
            await gateway_b.AdmitRun(admit_request(ori), metadata=service_b)
            admissions.append(time.perf_counter() - started)
            sent = time.perf_counter()
            killed = await operator.KillOri(
                gateway_pb2.KillOriRequest(ori_id=ori, reason="bench"), metadata=operator_a
            )
            answered = time.perf_counter()
            kill_rpc.append(answered - sent)
            polls = 0
            while True:
                try:
                    await gateway_b.AdmitRun(admit_request(ori), metadata=service_b)
                    polls += 1
                except grpc.aio.AioRpcError as refused:
                    if refused.code() != grpc.StatusCode.ABORTED:
                        raise
                    if killed.control.control_id not in (refused.details() or ""):
                        raise AssertionError(f"refused for another reason: {refused.details()}") from None
                    break
                if time.perf_counter() - sent > POLL_LIMIT_S:
                    not_propagated += 1
                    break
            refused = time.perf_counter()
            refused_after.append(refused - sent)
            refused_after_answer.append(refused - answered)
            admitted_after_kill += polls
    return {
        "kills": kills,
        "not_propagated": not_propagated,
        "target_ms": TARGET_MS,
        **_summary("kill_rpc", kill_rpc),
        **_summary("refused_after_kill", refused_after),
        **_summary("refused_after_kill_answered", refused_after_answer),
        "admission_rpc_p50_ms": _ms(admissions, 0.5),
        "admitted_on_b_after_the_kill_answered": admitted_after_kill,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON object (the only output form)")
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--postgres-dsn", default=os.environ.get("EGBE_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()
    if not args.postgres_dsn:
        print("kill_propagation needs PostgreSQL: --postgres-dsn or EGBE_TEST_POSTGRES_DSN", file=sys.stderr)
        return 2
    dsn, drop = fresh_database(args.postgres_dsn)
    with tempfile.TemporaryDirectory() as folder:
        gateways = [ServiceProcesses(Path(folder) / name, dsn) for name in ("a", "b")]
        try:
            for gateway in gateways:
                gateway.start("gateway")
            report = run_event_loop(measure(*gateways, args.kills))
        finally:
            for gateway in gateways:
                gateway.stop_all()
            drop()
    print(
        json.dumps(
            {"benchmark": "kill_propagation", "load_average_1m": round(os.getloadavg()[0], 2), **report}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
