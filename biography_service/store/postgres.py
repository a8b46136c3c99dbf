"""PostgreSQL backend (production): psycopg 3 async with a pool, LISTEN/NOTIFY for cross-process wake-ups."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.numeric import Int8BinaryDumper
from psycopg.types.string import TextLoader
from psycopg_pool import AsyncConnectionPool

from biography_service.appending import AppendRequest, GroupPlan, StreamHead, plan_group
from biography_service.errors import BiographyError, ConstraintConflict, StorageUnavailable
from biography_service.events import AppendResult, ExpectedVersion, NewEvent, RecordedEvent
from biography_service.projections import ProjectionSnapshot
from biography_service.store import sql
from biography_service.store.base import BiographyStore, build_snapshot
from services.logging import get_logger

log = get_logger(__name__)

CHANNEL = "egbe_biography_appended"
MIGRATION_LOCK_KEY = 0x0E6BE_B10  # any constant; serializes concurrent starters' migrations


def _pg(statement: str) -> str:
    """The shared SQL with psycopg's placeholders."""
    return statement.replace("?", "%s")


# One statement per group whatever its size: the group's rows travel as one JSON document (an array of
# row arrays) that PostgreSQL expands. psycopg dumps array parameters in Python, one element at a time
# (~4.8 µs an event row as 11 binary arrays); the C JSON encoder writes the document in about half
# that, and PostgreSQL inserted from it in less wall time than from the arrays (docs/performance.md).
_ROWS_DOCUMENT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _from_rows_document(types: Sequence[str]) -> str:
    """A SELECT of the typed columns of the rows in a `_ROWS_DOCUMENT` parameter."""
    columns = ", ".join(f"(r->>{i})::{kind}" for i, kind in enumerate(types))
    return f"SELECT {columns} FROM jsonb_array_elements(%s::jsonb) AS r"  # noqa: S608


_EVENT_TYPES = (
    "uuid",
    "text",
    "bigint",
    "bigint",
    "text",
    "text",
    "bigint",
    "bigint",
    "text",
    "text",
    "text",
)
_INSERT_EVENTS = f"INSERT INTO events ({sql.EVENT_COLUMNS}) " + _from_rows_document(_EVENT_TYPES)
_STREAM_HEAD = _pg(sql.STREAM_HEAD)
_LOCK_LOG_HEAD = _pg(sql.LOG_HEAD) + " FOR UPDATE"
_SET_LOG_HEAD = _pg(sql.SET_LOG_HEAD)
_MEMORY_TYPES = ("text", "text", "bigint", "bigint", "text", "bigint", "bigint", "text", "bigint", "bigint")
_INSERT_MEMORIES = f"INSERT INTO memories ({sql.MEMORY_COLUMNS}) " + _from_rows_document(_MEMORY_TYPES)
# The last event of each stream, one index probe per stream.
_STREAM_HEADS = (
    "SELECT o.ori_id, e.stream_version, e.hash FROM unnest(%s::text[]) AS o(ori_id)"
    " CROSS JOIN LATERAL (SELECT stream_version, hash FROM events WHERE events.ori_id = o.ori_id"
    " ORDER BY stream_version DESC LIMIT 1) AS e"
)
# The group's ids as a JSON document too (a binary text array dumped at ~0.5 µs an id); ARRAY(...)
# keeps the unique index probe that `IN (SELECT ...)` would turn into a hash join over the whole index.
_EVENTS_BY_IDS = (
    f"SELECT {sql.EVENT_COLUMNS} FROM events"  # noqa: S608
    " WHERE event_id = ANY(ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)::uuid))"
)


async def _configure(connection: psycopg.AsyncConnection[Any]) -> None:
    """Python ints go out as int8 (every integer column is BIGINT): the default dumper picks the
    narrowest type per value, which more than doubles the cost of dumping a group's arrays."""
    connection.adapters.register_dumper(int, Int8BinaryDumper)
    # Event ids are stored as uuid and handled as their canonical text everywhere else.
    connection.adapters.register_loader("uuid", TextLoader)


Outcomes = list[AppendResult | BiographyError]


@dataclass
class _PendingAppend:
    """One caller's appends (one, or a batch) and where its outcomes go, one per request."""

    requests: Sequence[AppendRequest]
    future: asyncio.Future[Outcomes]


class PostgresStore(BiographyStore):
    """Appends serialize on the log_head row lock, so global positions become visible in order.

    One writer task per process commits queued appends in groups, so concurrent callers share the
    lock and the WAL flush instead of queueing behind each other's commits. `migrations` is the schema
    the store brings its database to on open (a prefix builds an older one).
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_max: int,
        poll_seconds: float,
        max_group: int,
        migrations: Sequence[sql.Migration] = sql.MIGRATIONS,
    ) -> None:
        super().__init__()
        self._migrations = migrations
        self._max_group = max_group
        self._queue: asyncio.Queue[_PendingAppend] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._dsn = dsn
        self._pool = AsyncConnectionPool(dsn, min_size=1, max_size=pool_max, open=False, configure=_configure)
        self._poll_seconds = poll_seconds
        self._listener: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def _translated(self) -> AsyncIterator[None]:
        """Foreign errors become domain errors here, once."""
        try:
            yield
        except pg_errors.UniqueViolation as exc:
            raise ConstraintConflict(f"postgres: {exc}") from exc
        except psycopg.Error as exc:
            raise StorageUnavailable(f"postgres: {exc}") from exc

    async def open(self) -> None:
        async with self._translated():
            await self._pool.open(wait=True)
            async with self._pool.connection() as connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                await connection.execute(sql.MIGRATIONS_TABLE)
                cursor = await connection.execute("SELECT version FROM schema_migrations")
                applied = {row[0] for row in await cursor.fetchall()}
                for migration in self._migrations:
                    if migration.version in applied:
                        continue
                    for statement in migration.statements_for("postgres"):
                        await connection.execute(_pg(statement))
                    await connection.execute(
                        "INSERT INTO schema_migrations (version, description) VALUES (%s, %s)",
                        (migration.version, migration.description),
                    )
        self._listener = asyncio.create_task(self._listen(), name="biography-pg-listen")
        self._writer = asyncio.create_task(self._write_groups(), name="biography-pg-writer")

    async def _listen(self) -> None:
        """Wake local subscribers on appends committed by any process; reconnects after a failure."""
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    async for _ in connection.notifies():
                        self.appended.notify()
            except psycopg.Error as exc:
                log.warning(
                    "biography listener lost its connection; polling until it is back", error=str(exc)
                )
                await asyncio.sleep(self._poll_seconds)

    async def close(self) -> None:
        for task in (self._writer, self._listener):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._writer = self._listener = None
        while not self._queue.empty():
            self._queue.get_nowait().future.set_exception(StorageUnavailable("the store closed first"))
        await self._pool.close()

    async def append(
        self, ori_id: str, expected: ExpectedVersion, events: Sequence[NewEvent]
    ) -> AppendResult:
        outcome = (await self._queued([AppendRequest(ori_id, expected, events)]))[0]
        if isinstance(outcome, BiographyError):
            raise outcome
        return outcome

    async def append_many(self, requests: Sequence[AppendRequest]) -> Outcomes:
        return await self._queued(requests)

    async def _queued(self, requests: Sequence[AppendRequest]) -> Outcomes:
        """Hand the requests to the writer task as one entry (so one transaction) and await their outcomes."""
        if self._writer is None:
            raise StorageUnavailable("the PostgreSQL store is not open")
        future: asyncio.Future[Outcomes] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_PendingAppend(requests, future))
        outcomes = await future
        if any(isinstance(o, AppendResult) and not o.already_recorded for o in outcomes):
            self.appended.notify()
        return outcomes

    async def _write_groups(self) -> None:
        """Group commit: appends queued while a commit runs, or while a group is written, share one."""
        while True:
            group = [await self._queue.get()]
            failure: BiographyError | None = None
            outcomes: Outcomes = []
            try:
                async with self._translated():
                    outcomes = await self._commit_group(group)
            except BiographyError as error:
                failure = error  # nothing of the group became durable
            except Exception as unexpected:  # the writer must outlive a bug; its callers get the failure
                log.exception("biography group commit failed")
                failure = StorageUnavailable(f"group commit failed: {unexpected!r}")
            taken = 0
            for pending in group:
                mine = outcomes[taken : taken + len(pending.requests)] if failure is None else []
                taken += len(pending.requests)
                if pending.future.done():
                    continue
                if failure is None:
                    pending.future.set_result(mine)
                else:
                    pending.future.set_exception(failure)

    def _join_queued(self, group: list[_PendingAppend]) -> list[AppendRequest]:
        """Move the appends already queued into `group` (up to its cap); their requests, in order."""
        joined: list[AppendRequest] = []
        while len(group) < self._max_group and not self._queue.empty():
            pending = self._queue.get_nowait()
            group.append(pending)
            joined.extend(pending.requests)
        return joined

    async def _commit_group(self, group: list[_PendingAppend]) -> Outcomes:
        """One transaction in rounds: each round decides what was queued and writes it in bulk.

        Pipelined: a round costs one round trip to read (stream heads, known event ids) and its writes
        travel with the next round's reads or the COMMIT, whatever the number of events. Appends queued
        while a round ran join the next one, so they share the COMMIT's flush instead of waiting for it.
        """
        outcomes: Outcomes = []
        requests = [*group[0].requests, *self._join_queued(group)]
        async with self._pool.connection() as connection, connection.pipeline(), connection.transaction():
            # Every lookup here probes a unique index; statistics lag a table that grows from empty,
            # and a sequential scan under the global write lock would stall every writer.
            await connection.execute("SET LOCAL enable_seqscan = off")
            head = await connection.execute(_LOCK_LOG_HEAD)
            position: int | None = None
            while requests:
                heads_cursor = await connection.execute(
                    _STREAM_HEADS, (sorted({r.ori_id for r in requests}),)
                )
                ids = [event.event_id for r in requests for event in r.events]
                ids_cursor = await connection.execute(_EVENTS_BY_IDS, (_ROWS_DOCUMENT.encode(ids),))
                if position is None:
                    position = int((await head.fetchone() or (0,))[0])
                heads = {row[0]: StreamHead(int(row[1]), row[2]) for row in await heads_cursor.fetchall()}
                recorded = {e.event_id: e for e in map(sql.decode_event, await ids_cursor.fetchall())}
                plan = plan_group(
                    requests,
                    heads=heads,
                    recorded=recorded,
                    last_global_position=position,
                    recorded_at_us=time.time_ns() // 1000,
                )
                if plan.writes:
                    await self._write(connection, plan)
                outcomes += plan.outcomes
                position = plan.last_global_position
                requests = self._join_queued(group)
            if any(isinstance(o, AppendResult) and not o.already_recorded for o in outcomes):
                # Delivered on commit, to every listening process.
                await connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(position)))
        return outcomes

    @staticmethod
    async def _write(connection: psycopg.AsyncConnection[Any], plan: GroupPlan) -> None:
        rows = [
            sql.event_row(event, payload)
            for _, append in plan.writes
            for event, payload in zip(append.events, append.payload_json, strict=True)
        ]
        statements: dict[str, list[tuple[Any, ...]]] = {}
        for ori_id, append in plan.writes:
            for statement, params in sql.projection_statements(ori_id, append.projection_ops).items():
                statements.setdefault(statement, []).extend(params)
        async with connection.cursor() as cursor:
            await cursor.execute(_INSERT_EVENTS, (_ROWS_DOCUMENT.encode(rows),))
            # Events' own memories are new rows; folded fragments' (rare) upsert one by one below.
            memories = statements.pop(sql.INSERT_MEMORY, [])
            if memories:
                await cursor.execute(_INSERT_MEMORIES, (_ROWS_DOCUMENT.encode(memories),))
            for statement, params in statements.items():
                await cursor.executemany(_pg(statement), params)
            await cursor.execute(_SET_LOG_HEAD, (plan.last_global_position,))

    async def _read(self, query: str, params: Sequence[object]) -> list[RecordedEvent]:
        async with self._translated(), self._pool.connection() as connection:
            cursor = await connection.execute(_pg(query), params)
            return [sql.decode_event(r) for r in await cursor.fetchall()]

    async def _rows(self, query: str, params: Sequence[object]) -> list[Sequence[Any]]:
        async with self._translated(), self._pool.connection() as connection:
            cursor = await connection.execute(_pg(query), params)
            return list(await cursor.fetchall())

    async def stream_version(self, ori_id: str) -> int | None:
        async with self._translated(), self._pool.connection() as connection:
            cursor = await connection.execute(_STREAM_HEAD, (ori_id,))
            row = await cursor.fetchone()
            return None if row is None else int(row[0])

    async def snapshot(self, ori_id: str, *, limit: int, memory_window: int) -> ProjectionSnapshot:
        queries = (
            (sql.SNAPSHOT_TOTALS, (ori_id,) * 6),
            (sql.SNAPSHOT_MEMORIES, (ori_id, memory_window, limit)),
            (sql.SNAPSHOT_RELATIONSHIPS, (ori_id, limit)),
            (sql.SNAPSHOT_ARCS, (ori_id, limit)),
            (sql.SNAPSHOT_PERSONALITY, (ori_id, limit)),
            (sql.SNAPSHOT_VALUES, (ori_id, limit)),
            (sql.SNAPSHOT_IDENTITY, (ori_id,)),
        )
        async with (
            self._translated(),
            self._pool.connection() as connection,
            connection.pipeline(),
            connection.transaction(),
        ):
            # One snapshot for every section, so they all reflect the same appends; pipelined, so the
            # six queries cost one round trip to the server instead of eight (with BEGIN and COMMIT).
            await connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cursors = [await connection.execute(_pg(query), params) for query, params in queries]
            totals, memories, relationships, arcs, personality, values, identity = [
                await cursor.fetchall() for cursor in cursors
            ]
        return build_snapshot(
            ori_id,
            totals=totals[0],
            memories=memories,
            relationships=relationships,
            arcs=arcs,
            personality=personality,
            values=values,
            identity=identity,
        )
