"""The embedded store: one SQLite file (WAL, synchronous FULL by default), one group-committing thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.store.base import GatewayStore, Row
from gateway.store.group_commit import BatchTx, ThreadCommitter, Writing
from gateway.store.schema import schema_statements, upgrade_statements
from services.errors import Unavailable


class _SqliteTx:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._connection.execute(sql, params)

    async def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._connection.execute(sql, params).fetchone()
        return row

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self._connection.execute(sql, params).fetchall())

    def insert_statements(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> list[tuple[str, Sequence[Any]]]:
        """In-process, a statement per row costs nothing a multi-row one would save."""
        marks = ", ".join("?" * len(columns))
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"  # noqa: S608 - the store's names
        return [(sql, row) for row in rows]

    def execute_together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """In-process: nothing to save by joining them."""
        for sql, params in statements:
            self._connection.execute(sql, params)

    def notify(self, payload: str) -> None:
        """One embedded process: listeners are told in-process after the commit."""

    # In-process, every statement runs at once: nothing is ever queued.
    async def sync(self) -> None:
        return None

    def mark(self) -> int:
        return 0

    def unsend(self, mark: int) -> bool:
        return False


async def _close(connection: sqlite3.Connection) -> None:
    connection.close()


class SqliteGatewayStore(GatewayStore):
    _writer: ThreadCommitter[sqlite3.Connection]

    def __init__(self, path: Path, *, timeout_seconds: float, synchronous: str = "FULL") -> None:
        super().__init__(for_update="")
        self._path = path
        self._timeout = timeout_seconds
        self._synchronous = synchronous
        self._mode = ""  # the writer connection's current synchronous setting
        self._writer = ThreadCommitter(
            Writing(
                name="gateway-sqlite",
                connect=self._connect,
                close_connection=_close,
                make_tx=_SqliteTx,
                begin=self._begin,
                lost=(sqlite3.OperationalError,),
                describe=f"gateway store {path}",
            )
        )

    async def _connect(self) -> sqlite3.Connection:
        """(A coroutine that never suspends: the writer thread runs it to its end.)"""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={self._synchronous}")
        self._mode = self._synchronous
        connection.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        return connection

    def _begin(self, tx: BatchTx, durable: bool) -> None:
        """A durable batch commits with the configured `synchronous` (FULL: the WAL is fsynced); any other
        with NORMAL (WAL appended, fsynced by the next durable commit or checkpoint). BEGIN IMMEDIATE takes
        the write lock up front, which also guards against other processes."""
        mode = self._synchronous if durable else "NORMAL"
        if mode != self._mode:
            tx.execute(f"PRAGMA synchronous={mode}")
            self._mode = mode
        tx.execute("BEGIN IMMEDIATE")

    @staticmethod
    def _create_schema(connection: sqlite3.Connection) -> None:
        connection.execute("BEGIN IMMEDIATE")
        for statement in schema_statements("INTEGER PRIMARY KEY AUTOINCREMENT"):
            connection.execute(statement)

        def columns(table: str) -> set[str]:
            return {row[0] for row in connection.execute("SELECT name FROM pragma_table_info(?)", (table,))}

        for statement in upgrade_statements(columns):
            connection.execute(statement)
        connection.execute("COMMIT")

    async def open(self) -> None:
        try:
            self._writer.run_now(self._create_schema)
            self._writer.start()
        except sqlite3.Error as exc:
            raise Unavailable(f"gateway store {self._path} cannot be opened: {exc}") from exc

    async def close(self) -> None:
        self._writer.close()
