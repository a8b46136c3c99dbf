"""The production store: PostgreSQL through one group-committing connection; controls pushed by NOTIFY."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

from gateway.records import Control
from gateway.store.base import CONTROLS_CHANNEL, GatewayStore
from gateway.store.evals import EVAL_SCORES_CHANGED
from gateway.store.group_commit import GroupCommitter, Writing
from gateway.store.ledger import DeferredLedger
from gateway.store.limits import LIMITS_CHANGED
from gateway.store.pg_pipeline import Pipeline, Reply, connect_timeout
from gateway.store.schema import schema_statements, upgrade_statements
from gateway.store.tx import Row
from services.errors import EgbeError, Unavailable
from services.logging import get_logger

log = get_logger(__name__)
# How long the listener waits before reconnecting after losing its connection.
LISTEN_RETRY_SECONDS = 0.5
# How often the listener checks that its connection still answers (`PostgresGatewayStore._listen`).
LISTEN_HEARTBEAT_SECONDS = 1.0
_LOST = (psycopg.OperationalError, psycopg.InterfaceError)
# SQLSTATE class 40: the transaction lost a deadlock or a serialization check to another one (psycopg
# does not derive the class's errors from TransactionRollback, its class-40 base).
_CONFLICT = (
    psycopg.errors.TransactionRollback,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
)
# The advisory lock keys `_PostgresTx.serialize` takes are hashes of the gateway's keys with this seed
# (another application sharing the database would have to pick the same hashes to collide).
_SERIALIZE_SEED = 7452


@functools.lru_cache(maxsize=64)
def _insert(table: str, columns: tuple[str, ...], several: bool) -> str:
    """One row, a parameter per value; or (`several`) any number of rows as one JSON array of objects,
    each column by name. Either way one statement text per table, prepared once. (The table and columns
    are the store's own names, never a caller's text.)"""
    names = ", ".join(columns)
    if several:
        rows = f"json_populate_recordset(NULL::{table}, ?::json)"
        return f"INSERT INTO {table} ({names}) SELECT {names} FROM {rows}"  # noqa: S608
    return f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})"  # noqa: S608


@functools.lru_cache(maxsize=256)
def _together(statements: tuple[str, ...]) -> str:
    """Statements as one: each a data-modifying CTE (PostgreSQL runs every one, to completion, on one
    snapshot). PostgreSQL runs such CTEs last first (each is queued at the head of its list of them),
    so they are written in reverse: they run, and lock their rows, in the order given, as statements
    sent one by one do (the lock order, docs/gateway.md)."""
    return (
        "WITH "
        + ", ".join(f"s{index} AS ({sql})" for index, sql in reversed(list(enumerate(statements))))
        + " SELECT 1"
    )


class _PostgresTx:
    """Statements queued and sent, pipelined, with the next read or `sync`: a body that reads nothing
    is sent whole with its BEGIN and COMMIT, one round trip. After an error the pipeline is synced
    before anything else goes out (an aborted pipeline refuses every statement until then)."""

    deferred: DeferredLedger | None = None  # (set by the writer: `GroupCommitter._run_groups`)

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        self._poll = False  # keep the loop polling while it waits for answers (`begin`)
        self._queued: list[tuple[str, Sequence[Any]]] = []
        self._sent = 0  # statements handed to the connection so far (whether or not they succeeded)
        self._failed = False

    def begin(self, durable: bool, waited: bool) -> None:
        # Polling for answers costs CPU that others sharing the machine could use: spent only where a
        # caller waits (a batch of posted admissions is nobody's latency).
        self._poll = waited
        self.execute("BEGIN")
        if durable:  # (the connection's commits otherwise do not wait for the WAL flush)
            self.execute("SET LOCAL synchronous_commit TO on")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._queued.append((sql, params))

    async def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        rows = await self.all(sql, params)
        return rows[0] if rows else None

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self.execute(sql, params)
        reply = await self._send()
        assert reply is not None
        try:
            return await self._pipeline.rows(reply, poll=self._poll)
        except psycopg.Error:
            self._failed = True
            raise

    def insert_statements(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> list[tuple[str, Sequence[Any]]]:
        """One statement for any number of rows (`_insert`). A single row's values go as they are, where
        writing the row as JSON cost the event loop more than the statement's other work."""
        if len(rows) == 1:
            return [(_insert(table, tuple(columns), several=False), rows[0])]
        if not rows:
            return []
        objects = [dict(zip(columns, row, strict=True)) for row in rows]
        return [(_insert(table, tuple(columns), several=True), (json.dumps(objects),))]

    def execute_together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        if len(statements) == 1:
            self.execute(*statements[0])
        elif statements:
            sql = _together(tuple(sql for sql, _ in statements))
            # (the parameters in the order the statement holds them: `_together` reverses the parts)
            self.execute(sql, [param for _, params in reversed(statements) for param in params])

    def serialize(self, keys: Sequence[str]) -> None:
        """One statement for every key, each locked in order (`unnest` keeps the array's): two
        transactions never take the same keys in different orders. The locks come before any row lock
        of the transaction (docs/gateway.md "Lock order")."""
        if keys:
            self.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(key, ?)) FROM unnest(?::text[]) AS key",
                (_SERIALIZE_SEED, sorted(set(keys))),
            )

    def notify(self, payload: str) -> None:
        # Delivered to every listening gateway when (and only if) the transaction commits.
        self.execute("SELECT pg_notify(?, ?)", (CONTROLS_CHANNEL, payload))

    async def commit(self) -> None:
        """Pipelined with the statements still queued: no round trip of its own."""
        self.execute("COMMIT")
        await self.sync()

    async def sync(self) -> None:
        await self._send()
        try:
            await self._pipeline.sync(poll=self._poll)
        except psycopg.Error:
            self._failed = True
            raise

    def mark(self) -> int:
        return self._sent + len(self._queued)

    def unsend(self, mark: int) -> bool:
        if mark < self._sent:
            return False
        del self._queued[mark - self._sent :]
        return True

    async def _send(self) -> Reply | None:
        """Hand every queued statement to the pipeline; the last one's reply."""
        if self._failed:
            self._failed = False
            with contextlib.suppress(psycopg.Error):  # (a lost connection fails the statements below)
                await self._pipeline.sync(poll=self._poll)
        queued, self._queued = self._queued, []
        self._sent += len(queued)
        if len(queued) == 3 and queued[0][0] == "BEGIN" and queued[2][0] == "COMMIT":
            del queued[::2]  # one statement is a transaction of its own (autocommit): two fewer messages
        reply = None
        try:
            for sql, params in queued:
                reply = self._pipeline.send(sql, params)
        except psycopg.Error:
            self._failed = True
            raise
        return reply


class PostgresGatewayStore(GatewayStore):
    _writer: GroupCommitter[Pipeline]

    def __init__(self, dsn: str, *, timeout_seconds: float, poll_wait_us: int) -> None:
        super().__init__(for_update=" FOR UPDATE")
        self._dsn = dsn
        self._timeout = timeout_seconds
        self._writer = GroupCommitter(
            Writing(
                name="gateway-postgres",
                connect=lambda: Pipeline.open(dsn, timeout_seconds, poll_wait_us=poll_wait_us),
                close_connection=Pipeline.close,
                make_tx=_PostgresTx,
                lost=_LOST,
                conflict=_CONFLICT,
                describe="gateway store (PostgreSQL)",
                deferrals=DeferredLedger,
            )
        )
        self._listener: asyncio.Task[None] | None = None
        self._resync_listeners: list[Callable[[list[Control]], None]] = []
        self._listening = asyncio.Event()

    @property
    def healthy(self) -> bool:
        return self._writer.healthy and self._listening.is_set()

    def on_resync(self, listener: Callable[[list[Control]], None]) -> None:
        """Told every active control whenever the push channel (re)connects: pushes may have been missed."""
        self._resync_listeners.append(listener)

    def _create_schema(self) -> None:
        """On a connection of its own (the writer's is asynchronous and held in pipeline mode)."""
        with (
            psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=connect_timeout(self._timeout)
            ) as connection,
            connection.transaction(),
        ):
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
            await asyncio.to_thread(self._create_schema)
            await self._writer.start()
        except psycopg.Error as exc:
            raise Unavailable(f"gateway store (PostgreSQL) cannot be opened: {exc}") from exc
        self._listener = asyncio.create_task(self._listen(), name="gateway-controls-listener")
        await asyncio.wait_for(self._listening.wait(), self._timeout)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self._writer.close()

    async def _listen(self) -> None:
        """Hold one LISTEN connection; on each notification publish that control (or every limit in force,
        when limits changed) to this process.

        Every LISTEN_HEARTBEAT_SECONDS the connection must answer a query within the store's timeout. A
        server that falls silent without closing it (a partition, a host gone without a reset) would
        otherwise deliver nothing and fail nothing: pushes missed while the store counted as healthy.
        Unhealthy from the moment the channel is in doubt until a new connection listens again, having
        resynced every active control (pushes may have been missed meanwhile)."""
        while True:
            connection: psycopg.AsyncConnection[Any] | None = None
            try:
                connection = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, connect_timeout=connect_timeout(self._timeout)
                )
                await self._within(connection, connection.execute(f"LISTEN {CONTROLS_CHANNEL}"))
                active = await self.load_controls()
                for resync in self._resync_listeners:
                    resync(active)
                self._publish_limits(await self.load_limits())
                self._publish_scores(await self.load_eval_scores())
                self._listening.set()  # (healthy again: no push missed from here)
                while True:
                    async for notification in connection.notifies(timeout=LISTEN_HEARTBEAT_SECONDS):
                        if notification.payload == LIMITS_CHANGED:
                            self._publish_limits(await self.load_limits())
                            continue
                        if notification.payload == EVAL_SCORES_CHANGED:
                            self._publish_scores(await self.load_eval_scores())
                            continue
                        control = await self.get_control(notification.payload)
                        if control is not None:
                            self._publish([control])
                    # (a notification arriving meanwhile waits in psycopg's backlog for the next round)
                    await self._within(connection, connection.execute("SELECT 1"))
            except (psycopg.Error, EgbeError, TimeoutError) as exc:
                self._listening.clear()  # pushes may be missed from here: admission fails closed
                log.warning("gateway control listener lost its connection; reconnecting", error=str(exc))
            finally:
                if connection is not None:
                    await connection.close()
            await asyncio.sleep(LISTEN_RETRY_SECONDS)

    async def _within(self, connection: psycopg.AsyncConnection[Any], query: Awaitable[object]) -> None:
        """`query` on the listener's connection, or past the store's timeout TimeoutError with the
        connection closed under it. (Cancelling psycopg's query instead would have it ask a silent
        server to cancel, and wait up to 10 s more for the answer.)"""
        running = asyncio.ensure_future(query)
        try:
            await asyncio.wait({running}, timeout=self._timeout)
        finally:
            timed_out = not running.done()  # (or this task was cancelled: the query goes with it)
            if timed_out:
                await connection.close()
                running.cancel()
                with contextlib.suppress(BaseException):
                    await running
        if timed_out:
            raise TimeoutError(f"PostgreSQL did not answer the control listener within {self._timeout} s")
        running.result()
