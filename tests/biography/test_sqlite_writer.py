"""SQLite group commit: late arrivals join the open group's COMMIT; a failed BEGIN fails its callers;
the store's writer connection settings."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from biography_service.events import ANY
from biography_service.store.sqlite import SqliteStore
from biography_service.store.sqlite_writer import GroupCommitWriter
from tests.biography.events_for_tests import memories


def _connect(path: Path, statements: list[str] | None = None, timeout: float = 30.0) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, timeout=timeout, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    if statements is not None:
        connection.set_trace_callback(statements.append)
    return connection


async def test_writes_queued_while_a_group_is_written_join_its_commit(tmp_path: Path) -> None:
    path = tmp_path / "writer.sqlite3"
    _connect(path).execute("CREATE TABLE t (n INTEGER)")
    statements: list[str] = []
    writer = GroupCommitWriter(lambda: _connect(path, statements), max_group=64)
    release = threading.Event()

    def insert(n: int, *, hold: bool = False) -> Callable[[sqlite3.Connection], int]:
        def write(connection: sqlite3.Connection, isolated: bool) -> int:
            if hold:
                release.wait(timeout=30)  # keeps the group open while the others queue
            connection.execute("INSERT INTO t (n) VALUES (?)", (n,))
            return n

        return write

    try:
        first = writer.submit(insert(0, hold=True))
        later = [writer.submit(insert(n)) for n in (1, 2, 3)]
        release.set()
        assert await asyncio.gather(first, *later) == [0, 1, 2, 3]
    finally:
        await asyncio.get_running_loop().run_in_executor(None, writer.stop)
    # No savepoints when no write fails: one transaction, written bare.
    assert [s for s in statements if s.startswith(("BEGIN", "COMMIT", "SAVEPOINT"))] == [
        "BEGIN IMMEDIATE",
        "COMMIT",
    ]
    rows = _connect(path).execute("SELECT n FROM t ORDER BY n").fetchall()
    assert rows == [(0,), (1,), (2,), (3,)]


async def test_a_group_that_cannot_begin_fails_its_callers(tmp_path: Path) -> None:
    path = tmp_path / "writer.sqlite3"
    holder = _connect(path)
    holder.execute("CREATE TABLE t (n INTEGER)")
    holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    writer = GroupCommitWriter(lambda: _connect(path, timeout=0.05), max_group=64)
    try:
        pending = writer.submit(lambda connection, _: connection.execute("INSERT INTO t (n) VALUES (1)"))
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await asyncio.wait_for(pending, timeout=30)
    finally:
        holder.execute("ROLLBACK")
        await asyncio.get_running_loop().run_in_executor(None, writer.stop)


async def test_a_failing_write_fails_alone_and_the_group_is_rewritten_isolated(tmp_path: Path) -> None:
    path = tmp_path / "writer.sqlite3"
    _connect(path).execute("CREATE TABLE t (n INTEGER UNIQUE)")
    statements: list[str] = []
    writer = GroupCommitWriter(lambda: _connect(path, statements), max_group=64)
    release = threading.Event()
    runs: list[tuple[int, bool]] = []

    def insert(*values: int, hold: bool = False) -> Callable[[sqlite3.Connection, bool], int]:
        def write(connection: sqlite3.Connection, isolated: bool) -> int:
            if hold:
                release.wait(timeout=30)
            runs.append((values[0], isolated))
            connection.executemany("INSERT INTO t (n) VALUES (?)", [(v,) for v in values])
            return values[0]

        return write

    try:
        first = writer.submit(insert(1, hold=True))
        # 3 is inserted, then 1 breaks the unique constraint: the bare run leaves 3 behind.
        failing = writer.submit(insert(3, 1))
        last = writer.submit(insert(2))
        release.set()
        assert await first == 1
        with pytest.raises(sqlite3.IntegrityError):
            await failing
        assert await last == 2
    finally:
        await asyncio.get_running_loop().run_in_executor(None, writer.stop)
    # Bare until the failure, then the group taken so far again, each write in its own savepoint, in
    # one commit; the write still queued makes the next group, bare again.
    assert runs == [(1, False), (3, False), (1, True), (3, True), (2, False)]
    transactions = [s for s in statements if s.startswith(("BEGIN", "COMMIT", "ROLLBACK"))]
    assert transactions == [
        "BEGIN IMMEDIATE",
        "ROLLBACK",
        "BEGIN IMMEDIATE",
        "ROLLBACK TO write",
        "COMMIT",
        "BEGIN IMMEDIATE",
        "COMMIT",
    ]
    assert _connect(path).execute("SELECT n FROM t ORDER BY n").fetchall() == [(1,), (2,)]


async def test_the_store_writer_commits_durably_and_keeps_its_journals_in_memory(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "biography.sqlite3", max_group=64)
    await store.open()
    try:
        await store.append("ori-a", ANY, memories(3))

        def settings(connection: sqlite3.Connection, isolated: bool) -> list[object]:
            names = ("journal_mode", "synchronous", "temp_store", "cache_size", "wal_autocheckpoint")
            return [connection.execute(f"PRAGMA {name}").fetchone()[0] for name in names]

        # WAL, synchronous=FULL (2): durable before the ack; savepoint journals in memory (temp_store 2),
        # a cache that holds a whole group's dirty pages, and checkpoints that span many groups.
        assert await store._write(settings) == ["wal", 2, 2, -65536, 8000]
    finally:
        await store.close()


async def test_deferred_rows_are_flushed_before_the_commit_and_discarded_with_a_failed_group(
    tmp_path: Path,
) -> None:
    path = tmp_path / "writer.sqlite3"
    _connect(path).execute("CREATE TABLE t (n INTEGER UNIQUE)")

    class Rows:
        def __init__(self) -> None:
            self.rows: list[tuple[int]] = []
            self.flushes = 0
            self.discards = 0

        def flush(self, connection: sqlite3.Connection) -> None:
            self.flushes += 1
            connection.executemany("INSERT INTO t (n) VALUES (?)", self.rows)
            self.rows = []

        def discard(self) -> None:
            self.discards += 1
            self.rows = []

    deferred = Rows()
    writer = GroupCommitWriter(lambda: _connect(path), max_group=64, deferred=deferred)
    release = threading.Event()

    def defer(n: int, *, hold: bool = False) -> Callable[[sqlite3.Connection, bool], int]:
        def write(connection: sqlite3.Connection, isolated: bool) -> int:
            if hold:
                release.wait(timeout=30)
            if isolated:
                connection.execute("INSERT INTO t (n) VALUES (?)", (n,))
            else:
                deferred.rows.append((n,))
            return n

        return write

    try:
        first = writer.submit(defer(1, hold=True))
        later = [writer.submit(defer(n)) for n in (2, 3)]
        release.set()
        assert await asyncio.gather(first, *later) == [1, 2, 3]
        assert (deferred.flushes, deferred.discards) == (1, 0)  # one flush for the whole group
        # A deferred row that breaks the unique constraint fails the flush: the group is discarded
        # and rewritten isolated, where only the offending write fails.
        repeat, fresh = writer.submit(defer(3)), writer.submit(defer(4))
        with pytest.raises(sqlite3.IntegrityError):
            await repeat
        assert await fresh == 4
        assert deferred.discards == 1
    finally:
        await asyncio.get_running_loop().run_in_executor(None, writer.stop)
    assert _connect(path).execute("SELECT n FROM t ORDER BY n").fetchall() == [(1,), (2,), (3,), (4,)]
