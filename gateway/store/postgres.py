"""The production store: PostgreSQL through a connection pool; control changes pushed by LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from gateway.records import Control
from gateway.store.base import CONTROLS_CHANNEL, GatewayStore, Row
from gateway.store.schema import schema_statements
from services.errors import EgbeError, Unavailable
from services.logging import get_logger

T = TypeVar("T")
log = get_logger(__name__)
# How long the listener waits before reconnecting after losing its connection.
LISTEN_RETRY_SECONDS = 0.5


class _PostgresTx:
    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._cursor.execute(sql.replace("?", "%s").encode(), params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self.execute(sql, params)
        row: Row | None = self._cursor.fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self.execute(sql, params)
        return list(self._cursor.fetchall())

    def notify(self, payload: str) -> None:
        # Delivered to every listening gateway when (and only if) the transaction commits.
        self.execute("SELECT pg_notify(?, ?)", (CONTROLS_CHANNEL, payload))


class PostgresGatewayStore(GatewayStore):
    def __init__(self, dsn: str, *, pool_size: int, timeout_seconds: float) -> None:
        super().__init__(for_update=" FOR UPDATE")
        self._dsn = dsn
        self._timeout = timeout_seconds
        self._pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            timeout=timeout_seconds,
            open=False,
            kwargs={"connect_timeout": max(1, int(timeout_seconds))},
        )
        self._executor = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="gateway-pg")
        self._listener: asyncio.Task[None] | None = None
        self._resync_listeners: list[Callable[[list[Control]], None]] = []
        self._listening = asyncio.Event()

    def on_resync(self, listener: Callable[[list[Control]], None]) -> None:
        """Told every active control whenever the push channel (re)connects: pushes may have been missed."""
        self._resync_listeners.append(listener)

    def _create_schema(self) -> None:
        self._pool.open(wait=True, timeout=self._timeout)
        with self._pool.connection() as connection, connection.transaction():
            # Serializes schema creation between gateways starting together.
            connection.execute("SELECT pg_advisory_xact_lock(7451)")
            for statement in schema_statements("BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"):
                connection.execute(statement.encode())

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._create_schema)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise Unavailable(f"gateway store (PostgreSQL) cannot be opened: {exc}") from exc
        self._listener = asyncio.create_task(self._listen(), name="gateway-controls-listener")
        await asyncio.wait_for(self._listening.wait(), self._timeout)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await asyncio.get_running_loop().run_in_executor(self._executor, self._pool.close)
        self._executor.shutdown(wait=True)

    async def _listen(self) -> None:
        """Hold one LISTEN connection; on each notification publish that control to this process."""
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CONTROLS_CHANNEL}")
                    self._listening.set()
                    active = await self.load_controls()
                    for resync in self._resync_listeners:
                        resync(active)
                    async for notification in connection.notifies():
                        control = await self.get_control(notification.payload)
                        if control is not None:
                            self._publish([control])
            except (psycopg.Error, EgbeError) as exc:
                log.warning("gateway control listener lost its connection; reconnecting", error=str(exc))
                await asyncio.sleep(LISTEN_RETRY_SECONDS)

    def _run(self, body: Callable[[_PostgresTx], T]) -> T:
        with self._pool.connection() as connection, connection.transaction(), connection.cursor() as cursor:
            return body(_PostgresTx(cursor))

    async def transact(self, body: Callable[[Any], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._run, body)
        except EgbeError:
            raise
        except (
            psycopg.OperationalError,
            psycopg.InterfaceError,
            psycopg_pool.PoolTimeout,
            RuntimeError,
        ) as exc:
            raise Unavailable(f"gateway store (PostgreSQL) is unavailable: {exc}") from exc
