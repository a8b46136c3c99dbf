"""The PostgreSQL writer's connection (libpq's pipeline mode driven directly) against a real server:
values both ways as psycopg's cursors give them, an error aborting its segment until the sync and
nothing after, prepared statements bounded and prepared again when an error undid their PREPARE, a wait
for an answer keeping the event loop polling for its budget and no longer (and only where a caller
waits), and a connection killed under it, or a server that stops answering, reported lost (which the
store's writer answers by reconnecting)."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest

from gateway.config import GatewayConfig
from gateway.server import build_store
from gateway.store import pg_pipeline
from gateway.store.base import GatewayStore
from gateway.store.group_commit import GroupCommitter, Writing
from gateway.store.pg_pipeline import Pipeline, native_sql
from gateway.store.postgres import PostgresGatewayStore, _PostgresTx
from gateway.store.tx import Tx
from services.errors import Unavailable
from tests.gateway.harness import backend_store, gateway_settings

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pipeline(postgres_dsn: str) -> AsyncIterator[Pipeline]:
    opened = await Pipeline.open(
        postgres_dsn, timeout_seconds=5, poll_wait_us=GatewayConfig().postgres_poll_wait_us
    )
    yield opened
    await opened.close()


async def _prepared_names(pipeline: Pipeline) -> list[str]:
    reply = pipeline.send("SELECT name FROM pg_prepared_statements ORDER BY name", ())
    names = [str(row[0]) for row in await pipeline.rows(reply)]
    await pipeline.sync()
    return names


def test_placeholders_are_numbered_in_order() -> None:
    assert native_sql("SELECT ? WHERE a = ? AND b IN (?, ?)") == b"SELECT $1 WHERE a = $2 AND b IN ($3, $4)"
    assert native_sql("COMMIT") == b"COMMIT"


async def test_values_go_and_come_back_as_psycopg_gives_them(pipeline: Pipeline, postgres_dsn: str) -> None:
    statement = "SELECT ?::bigint, ?::text, ?::text, ?::boolean, ?::jsonb, ?::text[], ? = ''"
    params = (2**40, "Ada's 'flour'", None, True, json.dumps({"k": [1, None]}), ["a", "b"], "")
    reply = pipeline.send(statement, params)
    rows = await pipeline.rows(reply)
    await pipeline.sync()
    with psycopg.connect(postgres_dsn) as plain:
        expected = plain.execute(statement.replace("?", "%s"), params).fetchall()
    assert rows == expected == [(2**40, "Ada's 'flour'", None, True, {"k": [1, None]}, ["a", "b"], True)]


async def test_an_error_aborts_its_segment_until_the_sync_and_nothing_after(pipeline: Pipeline) -> None:
    await _rows_of(pipeline, "CREATE TEMPORARY TABLE t (k text PRIMARY KEY)")
    pipeline.send("BEGIN", ())
    pipeline.send("INSERT INTO t VALUES (?)", ("a",))
    pipeline.send("INSERT INTO t VALUES (?)", ("a",))  # the error
    after = pipeline.send("INSERT INTO t VALUES (?) RETURNING k", ("b",))  # aborted by it
    with pytest.raises(psycopg.errors.UniqueViolation):
        await pipeline.rows(after)
    with pytest.raises(psycopg.errors.UniqueViolation):  # the sync reports the segment's error once
        await pipeline.sync()
    pipeline.send("ROLLBACK", ())
    await pipeline.sync()
    assert await _rows_of(pipeline, "INSERT INTO t VALUES (?) RETURNING k", "c") == [("c",)]
    assert await _rows_of(pipeline, "SELECT k FROM t ORDER BY k") == [("c",)]


async def test_prepared_statements_are_bounded_and_reused(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_pipeline, "MAX_PREPARED", 3)
    for value in range(6):  # six shapes: the oldest are deallocated as the newest are prepared
        assert await _rows_of(pipeline, f"SELECT ?::int + {value}", 1) == [(1 + value,)]
    names = await _prepared_names(pipeline)  # (this query's own statement is one of the three)
    assert len(names) == 3
    assert await _rows_of(pipeline, "SELECT ?::int + 5", 1) == [(6,)]
    assert await _prepared_names(pipeline) == names  # reused, nothing prepared again


async def test_a_statement_whose_prepare_an_error_aborted_is_prepared_again(pipeline: Pipeline) -> None:
    failing = pipeline.send("SELECT 1 / ?::int", (0,))
    pipeline.send("SELECT ?::int * 7", (6,))  # prepared for the first time in the aborted segment
    with pytest.raises(psycopg.errors.DivisionByZero):
        await pipeline.rows(failing)
    with pytest.raises(psycopg.errors.DivisionByZero):
        await pipeline.sync()
    assert await _rows_of(pipeline, "SELECT ?::int * 7", 6) == [(42,)]


# The polling tests: PostgreSQL sleeps ASLEEP_S before answering. A budget of POLL_US keeps the event
# loop's thread on the CPU for a quarter of that, then it sleeps; without one it sleeps at once. Each test
# compares the two waits in the same run (how long each took is the benchmark's: bench/pg_pipeline.py).
SLEEP = "SELECT pg_sleep(?)"
ASLEEP_S = 0.4
POLL_US = 100_000


async def _cpu_seconds_asleep(query: Callable[[float], Awaitable[object]]) -> float:
    """The loop thread's CPU time while `query(seconds)` waits for PostgreSQL's answer after ASLEEP_S."""
    await query(0.0)  # (prepared: the timed wait is the sleep)
    cpu = time.thread_time()
    await query(ASLEEP_S)
    return time.thread_time() - cpu


def _polled_more(polled: float, slept: float) -> bool:
    """A wait that polled for its budget kept the loop's thread on the CPU, one that slept did not."""
    return polled > 4 * slept


async def test_a_wait_keeps_the_loop_polling_for_its_budget_then_sleeps(postgres_dsn: str) -> None:
    spent = {}
    for poll_wait_us in (POLL_US, 0):
        pipeline = await Pipeline.open(postgres_dsn, timeout_seconds=5, poll_wait_us=poll_wait_us)
        try:
            spent[poll_wait_us] = await _cpu_seconds_asleep(functools.partial(_rows_of, pipeline, SLEEP))
        finally:
            await pipeline.close()
    assert _polled_more(spent[POLL_US], spent[0])


async def test_the_gateway_setting_reaches_the_writer(tmp_path: Path, postgres_dsn: str) -> None:
    async def asleep(tx: Tx) -> float:
        return await _cpu_seconds_asleep(lambda s: tx.one(SLEEP, (s,)))

    spent = {}
    for poll_wait_us in (POLL_US, 0):
        store = build_store(gateway_settings(tmp_path, postgres_dsn, postgres_poll_wait_us=poll_wait_us))
        await store.open()
        try:
            spent[poll_wait_us] = await store.transact(asleep, durable=False)
        finally:
            await store.close()
    assert _polled_more(spent[POLL_US], spent[0])


async def test_only_a_batch_somebody_waits_for_keeps_the_loop_polling(postgres_dsn: str) -> None:
    writer: GroupCommitter[Pipeline] = GroupCommitter(
        Writing(
            name="test-writer",
            connect=lambda: Pipeline.open(postgres_dsn, timeout_seconds=5, poll_wait_us=POLL_US),
            close_connection=Pipeline.close,
            make_tx=_PostgresTx,
            lost=(psycopg.OperationalError,),
            describe="test writer",
        )
    )
    spent: dict[str, float] = {}
    written = asyncio.Event()

    async def asleep(tx: Tx, items: list[str]) -> list[str]:
        spent[items[0]] = await _cpu_seconds_asleep(lambda s: tx.one(SLEEP, (s,)))
        written.set()
        return items

    await writer.start()
    try:
        writer.post("posted", combine=asleep)  # nobody waits: the loop sleeps at once
        await written.wait()
        await writer.submit("waited", timeout_seconds=5, combine=asleep)
    finally:
        await writer.close()
    assert _polled_more(spent["waited"], spent["posted"])


async def test_a_killed_connection_is_lost_and_the_writer_reconnects(
    tmp_path: Path, postgres_dsn: str
) -> None:
    store: GatewayStore = backend_store(tmp_path, postgres_dsn)
    await store.open()
    try:
        writer = await store.transact(_backend_pid, durable=False)
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (writer,))
        with pytest.raises(Unavailable, match="unavailable"):
            await store.transact(_backend_pid, durable=False)
        assert await store.transact(_backend_pid, durable=False) != writer  # a new connection
    finally:
        await store.close()


async def _backend_pid(tx: Tx) -> int:
    row = await tx.one("SELECT pg_backend_pid()")
    assert row is not None
    return int(row[0])


async def _rows_of(pipeline: Pipeline, sql: str, *params: object) -> list[tuple[object, ...]]:
    reply = pipeline.send(sql, params)
    rows = await pipeline.rows(reply)
    await pipeline.sync()
    return rows


# A server that stops answering: PostgreSQL sleeps far past the writer's timeout before it answers.
TIMEOUT_S = 1.0
SILENT_S = 8.0


async def test_an_answer_that_never_comes_loses_the_connection_at_the_timeout(postgres_dsn: str) -> None:
    pipeline = await Pipeline.open(postgres_dsn, timeout_seconds=TIMEOUT_S, poll_wait_us=0)
    try:
        reply = pipeline.send(SLEEP, (SILENT_S,))
        with pytest.raises(psycopg.OperationalError, match=f"did not answer within {TIMEOUT_S} s"):
            await pipeline.rows(reply)
        with pytest.raises(psycopg.OperationalError, match=f"did not answer within {TIMEOUT_S} s"):
            pipeline.send("SELECT 1", ())  # lost: nothing more is sent on it
    finally:
        await pipeline.close()


async def test_a_silent_server_holds_the_writer_no_longer_than_its_timeout(postgres_dsn: str) -> None:
    """Without a bound on the wait, the writer would wait out the silence, and every transaction queued
    behind it (here the next one) would fail for as long."""
    store = PostgresGatewayStore(postgres_dsn, timeout_seconds=TIMEOUT_S, poll_wait_us=0)
    await store.open()
    try:
        writer = await store.transact(_backend_pid, durable=False)
        with pytest.raises(Unavailable):
            await store.transact(lambda tx: tx.one(SLEEP, (SILENT_S,)), durable=False)
        assert await store.transact(_backend_pid, durable=False) != writer  # answered, on a new connection
    finally:
        await store.close()
