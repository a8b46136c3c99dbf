"""PostgreSQL backend (production): psycopg 3 async with a pool, LISTEN/NOTIFY for cross-process wake-ups."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool

from biography_service.appending import AppendPlan, StreamHead, plan_append
from biography_service.errors import ConstraintConflict, StorageUnavailable
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


_INSERT_EVENT = _pg(sql.INSERT_EVENT)
_STREAM_HEAD = _pg(sql.STREAM_HEAD)
_LOCK_LOG_HEAD = _pg(sql.LOG_HEAD) + " FOR UPDATE"
_SET_LOG_HEAD = _pg(sql.SET_LOG_HEAD)


class PostgresStore(BiographyStore):
    """Appends serialize on the log_head row lock, so global positions become visible in order."""

    def __init__(self, dsn: str, *, pool_max: int, poll_seconds: float) -> None:
        super().__init__()
        self._dsn = dsn
        self._pool = AsyncConnectionPool(dsn, min_size=1, max_size=pool_max, open=False)
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
                for migration in sql.MIGRATIONS:
                    if migration.version in applied:
                        continue
                    for statement in migration.statements:
                        await connection.execute(_pg(statement))
                    await connection.execute(
                        "INSERT INTO schema_migrations (version, description) VALUES (%s, %s)",
                        (migration.version, migration.description),
                    )
        self._listener = asyncio.create_task(self._listen(), name="biography-pg-listen")

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
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        await self._pool.close()

    async def append(
        self, ori_id: str, expected: ExpectedVersion, events: Sequence[NewEvent]
    ) -> AppendResult:
        async with self._translated(), self._pool.connection() as connection, connection.transaction():
            cursor = await connection.execute(_LOCK_LOG_HEAD)
            position = int((await cursor.fetchone() or (0,))[0])
            cursor = await connection.execute(_STREAM_HEAD, (ori_id,))
            row = await cursor.fetchone()
            head = StreamHead(None) if row is None else StreamHead(int(row[0]), row[1])
            ids = [event.event_id for event in events]
            cursor = await connection.execute(_pg(sql.events_by_ids(len(ids))), ids)
            already = [sql.decode_event(r) for r in await cursor.fetchall()]
            plan = plan_append(
                ori_id,
                expected,
                events,
                head=head,
                already=already,
                next_global_position=position + 1,
                recorded_at_us=time.time_ns() // 1000,
            )
            if not isinstance(plan, AppendPlan):
                return plan
            await self._write(connection, ori_id, plan)
        self.appended.notify()
        return plan.result

    @staticmethod
    async def _write(connection: psycopg.AsyncConnection[Any], ori_id: str, plan: AppendPlan) -> None:
        async with connection.cursor() as cursor:
            rows = [sql.event_row(e, p) for e, p in zip(plan.events, plan.payload_json, strict=True)]
            await cursor.executemany(_INSERT_EVENT, rows)
            await cursor.execute(_SET_LOG_HEAD, (plan.result.last_global_position,))
            for statement, params in sql.projection_statements(ori_id, plan.projection_ops).items():
                await cursor.executemany(_pg(statement), params)
            # Delivered on commit, to every listening process.
            await cursor.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(plan.result.last_global_position)))

    async def _read(self, query: str, params: Sequence[object]) -> list[RecordedEvent]:
        async with self._translated(), self._pool.connection() as connection:
            cursor = await connection.execute(_pg(query), params)
            return [sql.decode_event(r) for r in await cursor.fetchall()]

    async def read_stream(
        self, ori_id: str, from_version: int, limit: int, *, backward: bool = False
    ) -> list[RecordedEvent]:
        query = sql.READ_BACKWARD if backward else sql.READ_FORWARD
        return await self._read(query, (ori_id, from_version, limit))

    async def read_all(
        self, from_position: int, limit: int, ori_ids: Sequence[str] = ()
    ) -> list[RecordedEvent]:
        if ori_ids:
            return await self._read(sql.read_all_for(len(ori_ids)), (from_position, *ori_ids, limit))
        return await self._read(sql.READ_ALL, (from_position, limit))

    async def stream_version(self, ori_id: str) -> int | None:
        async with self._translated(), self._pool.connection() as connection:
            cursor = await connection.execute(_STREAM_HEAD, (ori_id,))
            row = await cursor.fetchone()
            return None if row is None else int(row[0])

    async def snapshot(self, ori_id: str, *, limit: int, memory_window: int) -> ProjectionSnapshot:
        async with self._translated(), self._pool.connection() as connection, connection.transaction():
            # One snapshot for every section, so they all reflect the same appends.
            await connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

            async def rows(query: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
                cursor = await connection.execute(_pg(query), params)
                return await cursor.fetchall()

            totals = (await rows(sql.SNAPSHOT_TOTALS, (ori_id,) * 6))[0]
            return build_snapshot(
                ori_id,
                totals=totals,
                memories=await rows(sql.SNAPSHOT_MEMORIES, (ori_id, memory_window, limit)),
                relationships=await rows(sql.SNAPSHOT_RELATIONSHIPS, (ori_id, limit)),
                arcs=await rows(sql.SNAPSHOT_ARCS, (ori_id, limit)),
                personality=await rows(sql.SNAPSHOT_PERSONALITY, (ori_id, limit)),
                values=await rows(sql.SNAPSHOT_VALUES, (ori_id, limit)),
            )
