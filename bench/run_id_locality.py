"""Run ids and index locality: writing a run row and its audit record with time-ordered run ids (the
gateway's `new_run_id`) against random ones (uuid4, the baseline, what the gateway used before), in the
same run, on SQLite and (given a DSN) PostgreSQL.

Prints one JSON object. Each store gets tables shaped like the gateway's runs and audit records (the
same indexes on run id, call id, status, deadline, ori), preloaded with `--preload` runs, then writes
`--runs` runs, one transaction each, as a gateway's finish does; SQLite copies its WAL every 75 runs,
about as often as the gateway does. Reported per run: the time, and PostgreSQL's backend CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.biography_append import fresh_database, process_cpu_seconds
from gateway.records import new_run_id

RUNS_DDL = (
    "CREATE TABLE r_runs (run_id TEXT PRIMARY KEY, request_id TEXT UNIQUE, world_id TEXT, status TEXT,"
    " deadline_ms BIGINT, ended_at_ms BIGINT, stats TEXT)",
    "CREATE INDEX r_runs_active ON r_runs (status, deadline_ms)",
    "CREATE INDEX r_runs_ended ON r_runs (ended_at_ms)",
)
AUDIT_INDEXES = (
    "CREATE INDEX r_audit_ori ON r_audit (ori_id, seq)",
    "CREATE INDEX r_audit_run ON r_audit (run_id, seq)",
)
AUDIT_COLUMNS = "call_id TEXT NOT NULL UNIQUE, run_id TEXT, ori_id TEXT, input_context TEXT"
RUN_ROW = "INSERT INTO r_runs VALUES (?, NULL, 'w', 'completed', ?, ?, ?)"
AUDIT_ROW = "INSERT INTO r_audit (call_id, run_id, ori_id, input_context) VALUES (?, ?, ?, ?)"
PG_RUN_ROW, PG_AUDIT_ROW = (sql.replace("?", "%s").encode() for sql in (RUN_ROW, AUDIT_ROW))
STATS, CONTEXT = "s" * 200, "c" * 500
COPY_EVERY = 75
Ids = Callable[[int], str]


def random_ids(_: int) -> str:
    return uuid.uuid4().hex


def time_ordered_ids(index: int) -> str:
    return new_run_id(1_700_000_000_000 + index)


def _rows(run_id: str, index: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return (run_id, index, index, STATS), (f"{run_id}:1", run_id, f"ori-{index % 256}", CONTEXT)


def sqlite_run(ids: Ids, preload: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="egbe-bench-") as folder:
        db = sqlite3.connect(Path(folder) / "ids.sqlite3", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        for statement in (*RUNS_DDL, f"CREATE TABLE r_audit (seq INTEGER PRIMARY KEY, {AUDIT_COLUMNS})"):
            db.execute(statement)
        for statement in AUDIT_INDEXES:
            db.execute(statement)
        db.execute("BEGIN")
        for index in range(-preload, 0):
            run, audit = _rows(ids(index), index)
            db.execute(RUN_ROW, run)
            db.execute(AUDIT_ROW, audit)
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        started = time.perf_counter()
        for index in range(runs):
            run, audit = _rows(ids(index), index)
            db.execute("BEGIN IMMEDIATE")
            db.execute(RUN_ROW, run)
            db.execute(AUDIT_ROW, audit)
            db.execute("COMMIT")
            if index % COPY_EVERY == COPY_EVERY - 1:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        elapsed = time.perf_counter() - started
        db.close()
    return {"us_per_run": round(elapsed / runs * 1e6, 1)}


def postgres_run(server_dsn: str, ids: Ids, preload: int, runs: int) -> dict[str, float]:
    """On a database of its own (`fresh_database`), dropped afterwards."""
    dsn, drop = fresh_database(server_dsn)
    try:
        return _postgres_run(dsn, ids, preload, runs)
    finally:
        drop()


def _postgres_run(dsn: str, ids: Ids, preload: int, runs: int) -> dict[str, float]:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("SET synchronous_commit TO off")
        audit = f"CREATE TABLE r_audit (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, {AUDIT_COLUMNS})"
        for statement in (*RUNS_DDL, audit, *AUDIT_INDEXES):
            db.execute(statement.encode())
        with db.cursor() as cursor:
            preloaded = [_rows(ids(index), index) for index in range(-preload, 0)]
            cursor.executemany(PG_RUN_ROW, [run for run, _ in preloaded])
            cursor.executemany(PG_AUDIT_ROW, [a for _, a in preloaded])
        db.execute("CHECKPOINT")
        row = db.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        backend = int(row[0])
        cpu, started = process_cpu_seconds(backend), time.perf_counter()
        for index in range(runs):
            run, audit_row = _rows(ids(index), index)
            with db.transaction():
                db.execute(PG_RUN_ROW, run)
                db.execute(PG_AUDIT_ROW, audit_row)
        elapsed, cpu = time.perf_counter() - started, process_cpu_seconds(backend) - cpu
    return {
        "us_per_run": round(elapsed / runs * 1e6, 1),
        "backend_cpu_us_per_run": round(cpu / runs * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the JSON object only (the default)")
    parser.add_argument("--preload", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=15_000)
    parser.add_argument("--postgres-dsn", default=os.environ.get("EGBE_TEST_POSTGRES_DSN"))
    args = parser.parse_args()
    ways = {"baseline_random_uuid4": random_ids, "time_ordered": time_ordered_ids}
    report: dict[str, Any] = {
        "benchmark": "run_id_locality",
        "load_average_1m": round(os.getloadavg()[0], 2),
        "preload_runs": args.preload,
        "runs": args.runs,
        "sqlite": {name: sqlite_run(ids, args.preload, args.runs) for name, ids in ways.items()},
    }
    if args.postgres_dsn:
        report["postgres"] = {
            name: postgres_run(args.postgres_dsn, ids, args.preload, args.runs) for name, ids in ways.items()
        }
    else:
        report["postgres"] = "not measured: give --postgres-dsn or EGBE_TEST_POSTGRES_DSN"
    print(json.dumps(report))


if __name__ == "__main__":
    main()
