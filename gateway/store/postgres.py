"""The production store: PostgreSQL through one group-committing connection; controls pushed by NOTIFY."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from gateway.records import Control
from gateway.store.base import CONTROLS_CHANNEL, GatewayStore, Row
from gateway.store.group_commit import GroupCommitter
from gateway.store.schema import schema_statements, upgrade_statements
from services.errors import EgbeError, Unavailable
from services.logging import get_logger

log = get_logger(__name__)
# How long the listener waits before reconnecting after losing its connection.
LISTEN_RETRY_SECONDS = 0.5
_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


class _PostgresTx:
    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._connection.execute(sql.replace("?", "%s").encode(), params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._connection.execute(sql.replace("?", "%s").encode(), params).fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self._connection.execute(sql.replace("?", "%s").encode(), params).fetchall())

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._connection.cursor().executemany(sql.replace("?", "%s").encode(), rows)

    def all_together(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Row]]:
        """Every query goes out in the pipeline before the first fetch waits: one round trip for all."""
        connection = self._connection
        cursors = [connection.execute(sql.replace("?", "%s").encode(), params) for sql, params in queries]
        return [list(cursor.fetchall()) for cursor in cursors]

    def notify(self, payload: str) -> None:
        # Delivered to every listening gateway when (and only if) the transaction commits.
        self.execute("SELECT pg_notify(?, ?)", (CONTROLS_CHANNEL, payload))


class PostgresGatewayStore(GatewayStore):
    def __init__(self, dsn: str, *, timeout_seconds: float) -> None:
        super().__init__(for_update=" FOR UPDATE")
        self._dsn = dsn
        self._timeout = timeout_seconds
        self._writer = GroupCommitter[psycopg.Connection[Any]](
            name="gateway-postgres",
            connect=self._connect,
            make_tx=_PostgresTx,
            begin=self._begin,
            lost=_LOST,
            describe="gateway store (PostgreSQL)",
            pipeline=lambda connection: connection.pipeline(),
        )
        self._listener: asyncio.Task[None] | None = None
        self._resync_listeners: list[Callable[[list[Control]], None]] = []
        self._listening = asyncio.Event()

    def _connect(self) -> psycopg.Connection[Any]:
        # Autocommit: the group committer issues BEGIN, SAVEPOINT and COMMIT itself. Commits do not wait
        # for the WAL flush unless a batch is durable (`_begin`).
        connection = psycopg.connect(self._dsn, autocommit=True, connect_timeout=max(1, int(self._timeout)))
        connection.execute(b"SET synchronous_commit TO off")
        return connection

    @staticmethod
    def _begin(connection: psycopg.Connection[Any], durable: bool) -> None:
        connection.execute(b"BEGIN")
        if durable:
            connection.execute(b"SET LOCAL synchronous_commit TO on")

    @property
    def healthy(self) -> bool:
        return self._writer.healthy and self._listening.is_set()

    def on_resync(self, listener: Callable[[list[Control]], None]) -> None:
        """Told every active control whenever the push channel (re)connects: pushes may have been missed."""
        self._resync_listeners.append(listener)

    @staticmethod
    def _create_schema(connection: psycopg.Connection[Any]) -> None:
        with connection.transaction():
            # Serializes schema creation between gateways starting together.
            connection.execute("SELECT pg_advisory_xact_lock(7451)")
            for statement in schema_statements("BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"):
                connection.execute(statement.encode())

            def columns(table: str) -> set[str]:
                rows = connection.execute(
                    b"SELECT column_name FROM information_schema.columns"
                    b" WHERE table_schema = current_schema() AND table_name = %s",
                    (table,),
                ).fetchall()
                return {str(row[0]) for row in rows}

            for statement in upgrade_statements(columns):
                connection.execute(statement.encode())

    async def open(self) -> None:
        try:
            await asyncio.to_thread(self._writer.run_now, self._create_schema)
        except psycopg.Error as exc:
            raise Unavailable(f"gateway store (PostgreSQL) cannot be opened: {exc}") from exc
        self._writer.start()
        self._listener = asyncio.create_task(self._listen(), name="gateway-controls-listener")
        await asyncio.wait_for(self._listening.wait(), self._timeout)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await asyncio.to_thread(self._writer.close)

    async def _listen(self) -> None:
        """Hold one LISTEN connection; on each notification publish that control to this process."""
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CONTROLS_CHANNEL}")
                    active = await self.load_controls()
                    for resync in self._resync_listeners:
                        resync(active)
                    self._listening.set()  # (healthy again: no push missed from here)
                    async for notification in connection.notifies():
                        control = await self.get_control(notification.payload)
                        if control is not None:
                            self._publish([control])
            except (psycopg.Error, EgbeError) as exc:
                self._listening.clear()  # pushes may be missed from here: admission fails closed
                log.warning("gateway control listener lost its connection; reconnecting", error=str(exc))
                await asyncio.sleep(LISTEN_RETRY_SECONDS)
