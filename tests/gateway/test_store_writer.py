"""The store's group-committing writer on each backend: refusals and database errors undo only their own
body, the connection stays usable after one (PostgreSQL's pipeline after an error), multi-row inserts
(PostgreSQL: the rows as one JSON parameter) keep every value, NULLs included, and posted writes
(nobody waits for them; PostgreSQL gathers them) are written in order and without a waiting caller, an
answered transaction is committed, and SQLite's WAL is started over while it is written without a pause."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.records import RunSpec
from gateway.store import sqlite as sqlite_store
from gateway.store.base import GatewayStore
from gateway.store.rows import AdmissionItem, AdmissionOutcome
from gateway.store.sqlite import SqliteGatewayStore
from gateway.store.tx import Tx, insert_rows
from services.errors import FailedPrecondition
from tests.gateway.harness import backend_store

CONTROL_COLUMNS = (
    "control_id", "kind", "scope", "target", "reason", "operator_id", "created_at_ms", "active",
    "lifted_at_ms",
)  # fmt: skip


@pytest.fixture
async def store(tmp_path: Path, database_url: str | None) -> AsyncIterator[GatewayStore]:
    opened = backend_store(tmp_path, database_url)
    await opened.open()
    yield opened
    await opened.close()


def control(control_id: str, lifted_at_ms: int | None = None) -> tuple[Any, ...]:
    return (control_id, 1, 1, "ada", "a reason with 'quotes'", "op", 1_000, 1, lifted_at_ms)


async def stored_controls(store: GatewayStore) -> list[tuple[Any, ...]]:
    columns = ", ".join(CONTROL_COLUMNS)

    async def read(tx: Tx) -> list[tuple[Any, ...]]:
        return await tx.all(f"SELECT {columns} FROM gateway_controls ORDER BY control_id")  # noqa: S608

    return await store.transact(read, durable=False)


def inserting(*rows: tuple[Any, ...]) -> Any:
    async def body(tx: Tx) -> None:
        insert_rows(tx, "gateway_controls", CONTROL_COLUMNS, rows)

    return body


async def test_a_multi_row_insert_keeps_every_value(store: GatewayStore) -> None:
    rows = [control("c1"), control("c2", lifted_at_ms=2_000), control("c3")]
    await store.transact(inserting(*rows), durable=False)
    await store.transact(inserting(control("c4")), durable=False)
    assert await stored_controls(store) == [*rows, control("c4")]


async def test_statements_sent_together_are_all_or_nothing(store: GatewayStore) -> None:
    """`execute_together` (PostgreSQL: one statement of CTEs): both rows land, or, when one of them
    fails, neither does."""

    def together(*control_ids: str) -> Any:
        async def body(tx: Tx) -> None:
            statements = []
            for control_id in control_ids:
                statements += tx.insert_statements("gateway_controls", CONTROL_COLUMNS, [control(control_id)])
            statements.append(("UPDATE gateway_controls SET reason = ? WHERE control_id = ?", ("x", "c0")))
            tx.execute_together(statements)

        return body

    await store.transact(inserting(control("c0")), durable=False)
    await store.transact(together("c1", "c2"), durable=False)
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        await store.transact(together("c3", "c1"), durable=False)
    rows = await stored_controls(store)
    assert [row[0] for row in rows] == ["c0", "c1", "c2"]
    assert rows[0][4] == "x"


def committed_controls(database_url: str | None, tmp_path: Path) -> list[str]:
    """Read from a connection of the test's own: what another process would see."""
    query = "SELECT control_id FROM gateway_controls ORDER BY control_id"
    if database_url is None:
        with sqlite3.connect(tmp_path / "gateway.db") as connection:
            return [row[0] for row in connection.execute(query)]
    with psycopg.connect(database_url) as connection:
        return [row[0] for row in connection.execute(query.encode())]


async def test_an_answered_transaction_is_committed(
    store: GatewayStore, tmp_path: Path, database_url: str | None
) -> None:
    """Not only applied: a gateway that dies after answering cannot take an answered write with it."""
    await store.transact(inserting(control("c1")), durable=False)
    assert committed_controls(database_url, tmp_path) == ["c1"]
    await store.transact(inserting(control("c2")), durable=True)
    assert committed_controls(database_url, tmp_path) == ["c1", "c2"]


async def test_the_sqlite_wal_is_started_over_while_written_without_a_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The WAL is only started over by a transaction that begins with every page of it copied into the
    database, and under load the writer appends during every copy: copies alone would let it grow with
    every write. Eight writers without a pause, with small thresholds so the test is quick: the WAL
    stays within a few times MAX_PAGES, where without a restart it would hold every page written."""
    for name, value in (
        ("COPY_AFTER_CHANGES", 10),
        ("RESTART_PAGES", 50),
        ("TAIL_PAGES", 5),
        ("MAX_PAGES", 200),
    ):
        monkeypatch.setattr(sqlite_store, name, value)
    store = SqliteGatewayStore(tmp_path / "gateway.db", timeout_seconds=5)
    await store.open()
    wal = tmp_path / "gateway.db-wal"
    largest = 0

    async def write(writer: int) -> None:
        nonlocal largest
        for n in range(400):
            await store.transact(inserting(control(f"c{writer}-{n:03}")), durable=False)
            largest = max(largest, wal.stat().st_size)

    try:
        await asyncio.gather(*(write(writer) for writer in range(8)))
        page_size = await store.transact(lambda tx: tx.one("PRAGMA page_size"), durable=False)
    finally:
        await store.close()
    assert len(committed_controls(None, tmp_path)) == 8 * 400
    assert largest <= 4 * sqlite_store.MAX_PAGES * page_size[0]


async def test_a_failed_upkeep_leaves_the_writer_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The WAL checkpoint runs between batches on the writer task: its failure must not end the task
    (every later transaction would then wait out its deadline)."""
    upkeeps = 0

    async def failing(connection: Any) -> None:
        nonlocal upkeeps
        upkeeps += 1
        raise sqlite3.DatabaseError("checkpoint failed")

    monkeypatch.setattr(sqlite_store, "_checkpoint", failing)
    store = SqliteGatewayStore(tmp_path / "gateway.db", timeout_seconds=5)
    await store.open()
    try:
        for n in range(3):
            await store.transact(inserting(control(f"c{n}")), durable=False)
        assert [row[0] for row in await stored_controls(store)] == ["c0", "c1", "c2"]
    finally:
        await store.close()
    assert upkeeps >= 3


async def test_a_database_error_fails_its_body_and_the_next_transaction_works(store: GatewayStore) -> None:
    await store.transact(inserting(control("c1")), durable=False)
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        await store.transact(inserting(control("c2"), control("c1")), durable=False)
    assert store.healthy
    await store.transact(inserting(control("c3")), durable=False)
    assert [row[0] for row in await stored_controls(store)] == ["c1", "c3"]


async def test_a_refusal_after_queued_writes_leaves_nothing_written(store: GatewayStore) -> None:
    async def refuse_after_writing(tx: Tx) -> None:
        insert_rows(tx, "gateway_controls", CONTROL_COLUMNS, [control("c1")])
        raise FailedPrecondition("refused after its write was queued")

    with pytest.raises(FailedPrecondition):
        await store.transact(refuse_after_writing, durable=False)
    assert await stored_controls(store) == []


async def test_bodies_batched_together_fail_alone(store: GatewayStore) -> None:
    """Submitted together they share one transaction (a savepoint each): the duplicate fails, its
    neighbours on either side commit."""
    await store.transact(inserting(control("c0")), durable=False)
    outcomes = await asyncio.gather(
        store.transact(inserting(control("c1")), durable=False),
        store.transact(inserting(control("c0")), durable=False),
        store.transact(inserting(control("c2")), durable=True),
        return_exceptions=True,
    )
    assert outcomes[0] is None
    assert outcomes[2] is None
    assert isinstance(outcomes[1], (sqlite3.IntegrityError, psycopg.errors.UniqueViolation))
    assert [row[0] for row in await stored_controls(store)] == ["c0", "c1", "c2"]


def admission(run_id: str) -> AdmissionItem:
    run = RunSpec(run_id, "tenant", "world", "ada", 1, 1, 2, 2, 4_000)
    return AdmissionItem(run, AdmissionOutcome.ADMITTED, 10**9, 0, 1_000, 60_000, holder="gw-1")


async def stored_runs(store: GatewayStore) -> list[str]:
    async def read(tx: Tx) -> list[str]:
        return [row[0] for row in await tx.all("SELECT run_id FROM gateway_runs ORDER BY run_id")]

    return await store.transact(read, durable=False)


async def test_a_waited_transaction_sees_every_admission_posted_before_it(store: GatewayStore) -> None:
    for run_id in ("r1", "r2", "r3"):
        store.post_admission(admission(run_id))
    assert await stored_runs(store) == ["r1", "r2", "r3"]


async def test_a_posted_admission_is_written_with_nobody_waiting(
    store: GatewayStore, tmp_path: Path, database_url: str | None
) -> None:
    """Read from a connection of the test's own, so no transaction of the store's wakes its writer."""
    store.post_admission(admission("r1"))

    def written() -> bool:
        query = "SELECT count(*) FROM gateway_runs WHERE run_id = 'r1'"
        if database_url is None:
            with sqlite3.connect(tmp_path / "gateway.db") as connection:
                return bool(connection.execute(query).fetchone()[0])
        with psycopg.connect(database_url) as connection:
            row = connection.execute(query.encode()).fetchone()
            return bool(row and row[0])

    for _ in range(200):  # up to 2 s: a generous bound on "eventually", not a speed check
        if await asyncio.to_thread(written):
            return
        await asyncio.sleep(0.01)
    pytest.fail("the posted admission was never written")
