"""The PostgreSQL writer's round trip: the gateway's `Pipeline` (libpq's pipeline mode driven directly)
against psycopg's own `AsyncPipeline` (the baseline, what the writer used before), in the same run.

Prints one JSON object. Each way sends the same statement (two parameters, a CTE, one row back) and
syncs, one round trip at a time on uvloop, as the writer does for a lone batch: the process's CPU per
round trip (user + system, what the gateway's one event-loop thread pays) and its wall time. The
gateway's `Pipeline` is measured twice: sleeping at once while it waits for the answer (`poll_wait_us`
0, like the baseline) and keeping the loop polling for the gateway's default `postgres_poll_wait_us`
(`polling_*`: what that saves in wall time and costs in CPU). Needs a PostgreSQL server:
`--postgres-dsn` or EGBE_TEST_POSTGRES_DSN.

`after_idle_p50_us`: the polling round trip again, but with PostgreSQL's backend left idle for a while
before each (this process keeps its own thread busy meanwhile, as the gateway is with a run's work when
it sends the run's finish): the median wall time by idle milliseconds. On a virtual machine a backend
idle for a millisecond or more costs a wake-up before it answers, which a round trip back to back never
pays; the gateway's benchmark runs its fused runs a few milliseconds apart (docs/performance.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from gateway.config import GatewayConfig
from gateway.store.pg_pipeline import Pipeline
from services.runtime import run_event_loop

STATEMENT = "WITH a AS (SELECT ?::bigint AS x), b AS (SELECT ?::text AS y) SELECT x, y FROM a, b"
WARM_UP = 300
IDLE_MS = (0, 1, 5)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _timed(round_trip: Callable[[int], Awaitable[Any]], count: int) -> dict[str, float]:
    for index in range(WARM_UP):
        await round_trip(index)
    cpu, wall = _cpu_seconds(), time.perf_counter()
    for index in range(count):
        await round_trip(index)
    return {
        "cpu_us_per_round_trip": round((_cpu_seconds() - cpu) / count * 1e6, 1),
        "wall_us_per_round_trip": round((time.perf_counter() - wall) / count * 1e6, 1),
    }


async def psycopg_pipeline(dsn: str, count: int) -> dict[str, float]:
    native = STATEMENT.replace("?", "%s").encode()
    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with connection, connection.pipeline() as pipeline:

        async def round_trip(index: int) -> None:
            cursor = await connection.execute(native, (index, "ori-1"))
            await pipeline.sync()
            assert await cursor.fetchall() == [(index, "ori-1")]

        return await _timed(round_trip, count)


async def _round_trip(pipeline: Pipeline, index: int) -> None:
    reply = pipeline.send(STATEMENT, (index, "ori-1"))
    await pipeline.sync()
    assert await pipeline.rows(reply) == [(index, "ori-1")]


async def gateway_pipeline(dsn: str, count: int, poll_wait_us: int) -> dict[str, float]:
    pipeline = await Pipeline.open(dsn, timeout_seconds=5, poll_wait_us=poll_wait_us)
    try:
        return await _timed(functools.partial(_round_trip, pipeline), count)
    finally:
        await pipeline.close()


async def after_idle(dsn: str, count: int, poll_wait_us: int) -> dict[str, float]:
    """The median round trip after PostgreSQL's backend idled each of IDLE_MS, this thread busy."""
    pipeline = await Pipeline.open(dsn, timeout_seconds=5, poll_wait_us=poll_wait_us)
    medians = {}
    try:
        for idle_ms in IDLE_MS:
            walls = []
            for index in range(count):
                busy_until = time.perf_counter() + idle_ms / 1000
                while time.perf_counter() < busy_until:
                    pass
                started = time.perf_counter()
                await _round_trip(pipeline, index)
                walls.append(time.perf_counter() - started)
            medians[f"idle_{idle_ms}_ms"] = round(statistics.median(walls) * 1e6, 1)
    finally:
        await pipeline.close()
    return medians


async def main_async(dsn: str, count: int) -> dict[str, Any]:
    poll_wait_us = GatewayConfig().postgres_poll_wait_us
    baseline = await psycopg_pipeline(dsn, count)
    ours = await gateway_pipeline(dsn, count, poll_wait_us=0)
    polling = await gateway_pipeline(dsn, count, poll_wait_us=poll_wait_us)
    return {
        "benchmark": "pg_pipeline",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "round_trips": count,
        "baseline_psycopg_async_pipeline": baseline,
        "gateway_pipeline": ours,
        "cpu_saved_us_per_round_trip": round(
            baseline["cpu_us_per_round_trip"] - ours["cpu_us_per_round_trip"], 1
        ),
        "poll_wait_us": poll_wait_us,
        "gateway_pipeline_polling": polling,
        "polling_wall_saved_us_per_round_trip": round(
            ours["wall_us_per_round_trip"] - polling["wall_us_per_round_trip"], 1
        ),
        "polling_cpu_added_us_per_round_trip": round(
            polling["cpu_us_per_round_trip"] - ours["cpu_us_per_round_trip"], 1
        ),
        "after_idle_p50_us": await after_idle(dsn, min(count, 1_000), poll_wait_us),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON object only (the default)")
    parser.add_argument("--round-trips", type=int, default=3_000)
    parser.add_argument("--postgres-dsn", default=os.environ.get("EGBE_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    if not args.postgres_dsn:
        sys.exit("pg_pipeline needs a PostgreSQL server: give --postgres-dsn or EGBE_TEST_POSTGRES_DSN")
    print(json.dumps(run_event_loop(main_async(args.postgres_dsn, args.round_trips))))


if __name__ == "__main__":
    main()
