"""The embedded store: one SQLite file (WAL, synchronous FULL by default), one group-committing thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.store.base import GatewayStore, Row
from gateway.store.group_commit import GroupCommitter
from gateway.store.schema import schema_statements, upgrade_statements
from services.errors import Unavailable


class _SqliteTx:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._connection.execute(sql, params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._connection.execute(sql, params).fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self._connection.execute(sql, params).fetchall())

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._connection.executemany(sql, rows)

    def all_together(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Row]]:
        """In-process: nothing to save by sending them together."""
        return [self.all(sql, params) for sql, params in queries]

    def notify(self, payload: str) -> None:
        """One embedded process: listeners are told in-process after the commit."""


class SqliteGatewayStore(GatewayStore):
    def __init__(self, path: Path, *, timeout_seconds: float, synchronous: str = "FULL") -> None:
        super().__init__(for_update="")
        self._path = path
        self._timeout = timeout_seconds
        self._synchronous = synchronous
        self._mode = ""  # the writer connection's current synchronous setting
        self._writer = GroupCommitter[sqlite3.Connection](
            name="gateway-sqlite",
            connect=self._connect,
            make_tx=_SqliteTx,
            begin=self._begin,
            lost=(sqlite3.OperationalError,),
            describe=f"gateway store {path}",
        )

    def _connect(self) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={self._synchronous}")
        self._mode = self._synchronous
        connection.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        return connection

    def _begin(self, connection: sqlite3.Connection, durable: bool) -> None:
        """A durable batch commits with the configured `synchronous` (FULL: the WAL is fsynced); any other
        with NORMAL (WAL appended, fsynced by the next durable commit or checkpoint). BEGIN IMMEDIATE takes
        the write lock up front, which also guards against other processes."""
        mode = self._synchronous if durable else "NORMAL"
        if mode != self._mode:
            connection.execute(f"PRAGMA synchronous={mode}")
            self._mode = mode
        connection.execute("BEGIN IMMEDIATE")

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
