"""SQLite backend (the embedded default): WAL, synchronous=FULL, blocking work kept off the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from biography_service.appending import AppendPlan, AppendRequest, StreamHead, plan_group
from biography_service.errors import BiographyError, ConstraintConflict, StorageUnavailable
from biography_service.events import AppendResult, ExpectedVersion, NewEvent, RecordedEvent
from biography_service.projections import ProjectionSnapshot
from biography_service.store import sql
from biography_service.store.base import BiographyStore, build_snapshot
from biography_service.store.sqlite_writer import GroupCommitWriter, Write
from services.files import create_private_file, private_dir

T = TypeVar("T")

READER_THREADS = 2


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: transactions are opened explicitly. Each connection is used by one thread only;
    # check_same_thread is off so close() can run after that thread's pool has shut down.
    connection = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    return connection


# The writer's own settings, from profiling the batched append path (docs/performance.md):
# - temp_store=MEMORY: each append's SAVEPOINT keeps its statement journal (a copy of every page the
#   append first touches) in memory; by default it spilled to a temp file, ~8 KB written per event.
# - cache_size: a group dirties several pages per event (the random event-id and memory-ref keys);
#   with the 2 MB default it spilled dirty pages to the WAL mid-transaction and re-read them.
# - wal_autocheckpoint: a checkpoint after nearly every group copied pages that the next group
#   dirtied again; every 8,000 frames (~32 MB of WAL) copies each hot page once for many groups.
WRITER_PRAGMAS = ("temp_store=MEMORY", "cache_size=-65536", "wal_autocheckpoint=8000")


def _connect_writer(path: Path) -> sqlite3.Connection:
    connection = _connect(path)
    for pragma in WRITER_PRAGMAS:
        connection.execute(f"PRAGMA {pragma}")
    return connection


# Stream heads kept between groups (one entry per Ori written since the last failed group); past this
# many the writer starts over rather than grow without bound.
MAX_CACHED_HEADS = 100_000


class _GroupRows:
    """The writer thread's deferred rows, and the heads it has written (the `Deferred` of its writer).

    A bare append plans from the cached stream head and log position and defers its rows, so a group
    costs a few SQLite calls whatever its appends. The cache needs no invalidation beyond a failed
    group: the writer thread is this file's only writer in this process, and a head made stale by
    another process fails the (ori_id, stream_version) or global_position unique constraint, whose
    isolated rerun reads the stored heads.
    """

    def __init__(self) -> None:
        self.heads: dict[str, StreamHead] = {}
        self.position: int | None = None
        self._events: list[tuple[Any, ...]] = []
        self._projections: dict[str, list[tuple[Any, ...]]] = {}

    def add(self, ori_id: str, plan: AppendPlan) -> None:
        self._events.extend(sql.event_row(e, p) for e, p in zip(plan.events, plan.payload_json, strict=True))
        for statement, params in sql.projection_statements(ori_id, plan.projection_ops).items():
            self._projections.setdefault(statement, []).extend(params)
        last = plan.events[-1]
        if len(self.heads) >= MAX_CACHED_HEADS:
            self.heads.clear()
        self.heads[ori_id] = StreamHead(last.stream_version, last.hash)
        self.position = plan.result.last_global_position

    def flush(self, connection: sqlite3.Connection) -> None:
        if not self._events:
            return
        connection.executemany(sql.INSERT_EVENT, self._events)
        # Each statement owns one table, so per-table order (what upserts need) is append order.
        for statement, params in self._projections.items():
            connection.executemany(statement, params)
        connection.execute(sql.SET_LOG_HEAD, (self.position,))
        self._events, self._projections = [], {}

    def discard(self) -> None:
        self.heads.clear()
        self.position = None
        self._events, self._projections = [], {}


class SqliteStore(BiographyStore):
    """One group-committing writer thread (SQLite has one writer); readers on their own threads.

    `migrations` is the schema the store brings its database to on open (a prefix builds an older one).
    """

    def __init__(
        self, path: Path, *, max_group: int, migrations: Sequence[sql.Migration] = sql.MIGRATIONS
    ) -> None:
        super().__init__()
        self._path = path
        self._migrations = migrations
        self._max_group = max_group
        self._writer: GroupCommitWriter | None = None
        self._group_rows = _GroupRows()
        self._reader_pool = ThreadPoolExecutor(
            max_workers=READER_THREADS, thread_name_prefix="biography-sqlite-r"
        )
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    @staticmethod
    async def _translated(pending: Awaitable[T]) -> T:
        """Foreign errors become domain errors here, once."""
        try:
            return await pending
        except sqlite3.IntegrityError as exc:
            raise ConstraintConflict(f"sqlite: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageUnavailable(f"sqlite: {exc}") from exc

    async def _write(self, write: Write[T]) -> T:
        if self._writer is None:
            raise StorageUnavailable("the SQLite store is not open")
        return await self._translated(self._writer.submit(write))

    async def _on_reader(self, work: Callable[[], T]) -> T:
        return await self._translated(asyncio.get_running_loop().run_in_executor(self._reader_pool, work))

    def _read_connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = _connect(self._path)
            self._local.connection = connection
            with self._readers_lock:
                self._readers.append(connection)
        return connection

    async def open(self) -> None:
        # The log holds every Ori's life: owner-only (SQLite gives its WAL and shared-memory files the
        # database file's mode); an existing file or directory keeps the mode its operator gave it.
        private_dir(self._path.parent)
        create_private_file(self._path)
        self._writer = GroupCommitWriter(
            lambda: _connect_writer(self._path), self._max_group, self._group_rows
        )
        await self._write(lambda connection, _: self._migrate(connection))

    def _migrate(self, connection: sqlite3.Connection) -> None:
        connection.execute(sql.MIGRATIONS_TABLE)
        applied = {row[0] for row in connection.execute("SELECT version FROM schema_migrations")}
        for migration in self._migrations:
            if migration.version in applied:
                continue
            for statement in migration.statements_for("sqlite"):
                connection.execute(statement)
            connection.execute(
                "INSERT INTO schema_migrations (version, description) VALUES (?, ?)",
                (migration.version, migration.description),
            )

    async def close(self) -> None:
        if self._writer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._writer.stop)
            self._writer = None
        self._reader_pool.shutdown(wait=True)
        with self._readers_lock:
            for connection in self._readers:
                connection.close()
            self._readers.clear()

    async def append(
        self, ori_id: str, expected: ExpectedVersion, events: Sequence[NewEvent]
    ) -> AppendResult:
        request = AppendRequest(ori_id, expected, events)
        result = await self._write(lambda connection, isolated: self._append(connection, isolated, request))
        if not result.already_recorded:
            self.appended.notify()
        return result

    def _append(self, connection: sqlite3.Connection, isolated: bool, request: AppendRequest) -> AppendResult:
        outcome = self._append_many(connection, isolated, [request])[0]
        if isinstance(outcome, BiographyError):
            raise outcome
        return outcome

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult | BiographyError]:
        outcomes = await self._write(
            lambda connection, isolated: self._append_many(connection, isolated, requests)
        )
        if any(isinstance(o, AppendResult) and not o.already_recorded for o in outcomes):
            self.appended.notify()
        return outcomes

    def _append_many(
        self, connection: sqlite3.Connection, isolated: bool, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BiographyError]:
        """Runs on the writer thread inside the group's transaction: one write however many appends.

        Run bare, it plans from the writer's cached heads and defers its rows to the group's flush, and
        looks for none of the event ids first: a repeat then fails the event_id unique constraint, and
        a refusal (perhaps decided from a head another process made stale) is raised; either way the
        isolated rerun, which reads and writes the database directly, decides each request from what
        is stored and answers a refusal as that request's outcome.
        """
        rows = self._group_rows
        heads: dict[str, StreamHead] = {}
        for ori_id in {request.ori_id for request in requests}:
            head = None if isolated else rows.heads.get(ori_id)
            if head is None:
                row = connection.execute(sql.STREAM_HEAD, (ori_id,)).fetchone()
                head = StreamHead(None) if row is None else StreamHead(int(row[0]), row[1])
            heads[ori_id] = head
        recorded: dict[str, RecordedEvent] = {}
        if isolated:
            ids = [event.event_id for request in requests for event in request.events]
            for start in range(0, len(ids), sql.IDS_PER_QUERY):
                chunk = ids[start : start + sql.IDS_PER_QUERY]
                for row in connection.execute(sql.events_by_ids(len(chunk)), chunk):
                    event = sql.decode_event(row)
                    recorded[event.event_id] = event
        position = None if isolated else rows.position
        if position is None:
            position = int(connection.execute(sql.LOG_HEAD).fetchone()[0])
        plan = plan_group(
            requests,
            heads=heads,
            recorded=recorded,
            last_global_position=position,
            recorded_at_us=time.time_ns() // 1000,
        )
        if not isolated:
            refused = next((o for o in plan.outcomes if isinstance(o, BiographyError)), None)
            if refused is not None:
                raise refused
        # Isolated: written now, inside its savepoint, and kept out of the cache (it may still be rolled
        # back); bare: deferred to the group's flush.
        target = _GroupRows() if isolated else rows
        for ori_id, append_plan in plan.writes:
            target.add(ori_id, append_plan)
        if isolated:
            target.flush(connection)
        return plan.outcomes

    async def _read(self, query: str, params: Sequence[object]) -> list[RecordedEvent]:
        def work() -> list[RecordedEvent]:
            return [sql.decode_event(r) for r in self._read_connection().execute(query, params)]

        return await self._on_reader(work)

    async def _rows(self, query: str, params: Sequence[object]) -> list[Sequence[Any]]:
        return await self._on_reader(lambda: self._read_connection().execute(query, params).fetchall())

    async def stream_version(self, ori_id: str) -> int | None:
        def work() -> int | None:
            row = self._read_connection().execute(sql.STREAM_HEAD, (ori_id,)).fetchone()
            return None if row is None else int(row[0])

        return await self._on_reader(work)

    async def snapshot(self, ori_id: str, *, limit: int, memory_window: int) -> ProjectionSnapshot:
        def work() -> ProjectionSnapshot:
            connection = self._read_connection()
            # One read transaction, so every section reflects the same appends.
            connection.execute("BEGIN")
            try:
                return build_snapshot(
                    ori_id,
                    totals=connection.execute(sql.SNAPSHOT_TOTALS, (ori_id,) * 6).fetchone(),
                    memories=connection.execute(
                        sql.SNAPSHOT_MEMORIES, (ori_id, memory_window, limit)
                    ).fetchall(),
                    relationships=connection.execute(sql.SNAPSHOT_RELATIONSHIPS, (ori_id, limit)).fetchall(),
                    arcs=connection.execute(sql.SNAPSHOT_ARCS, (ori_id, limit)).fetchall(),
                    personality=connection.execute(sql.SNAPSHOT_PERSONALITY, (ori_id, limit)).fetchall(),
                    values=connection.execute(sql.SNAPSHOT_VALUES, (ori_id, limit)).fetchall(),
                    identity=connection.execute(sql.SNAPSHOT_IDENTITY, (ori_id,)).fetchall(),
                )
            finally:
                connection.execute("COMMIT")

        return await self._on_reader(work)
