"""The embedded store: one SQLite file (WAL, synchronous=FULL), one writer thread, one transaction a time."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from gateway.store.base import GatewayStore, Row
from gateway.store.schema import schema_statements
from services.errors import EgbeError, Unavailable

T = TypeVar("T")


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

    def notify(self, payload: str) -> None:
        """One embedded process: listeners are told in-process after the commit."""


class SqliteGatewayStore(GatewayStore):
    def __init__(self, path: Path, *, timeout_seconds: float) -> None:
        super().__init__(for_update="")
        self._path = path
        self._timeout = timeout_seconds
        # One writer thread serializes transactions; BEGIN IMMEDIATE also guards other processes.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-sqlite")
        self._connection: sqlite3.Connection | None = None

    def _connect(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        connection.execute("BEGIN IMMEDIATE")
        for statement in schema_statements("INTEGER PRIMARY KEY AUTOINCREMENT"):
            connection.execute(statement)
        connection.execute("COMMIT")
        self._connection = connection

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._connect)
        except sqlite3.Error as exc:
            raise Unavailable(f"gateway store {self._path} cannot be opened: {exc}") from exc

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, connection.close)
        self._executor.shutdown(wait=True)

    def _run(self, body: Callable[[_SqliteTx], T]) -> T:
        connection = self._connection
        if connection is None:
            raise Unavailable("gateway store is closed")
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = body(_SqliteTx(connection))
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return result

    async def transact(self, body: Callable[[Any], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._run, body)
        except EgbeError:
            raise
        except (sqlite3.OperationalError, RuntimeError) as exc:
            raise Unavailable(f"gateway store {self._path} is unavailable: {exc}") from exc
