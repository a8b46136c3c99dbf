"""The embedded store: one SQLite file (WAL, synchronous FULL by default), written from the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.store.base import GatewayStore
from gateway.store.group_commit import GroupCommitter, Writing
from gateway.store.ledger import DeferredLedger
from gateway.store.schema import schema_statements, upgrade_statements
from gateway.store.tx import Row
from services.errors import Unavailable
from services.files import create_private_file

# The WAL checkpoint (`_checkpoint`). A fused run changes about four rows and appends about fourteen
# pages to the WAL, so a copy starts about every 1,000 pages (SQLite's own default).
COPY_AFTER_CHANGES = 300
# The WAL is started over once it holds this many pages (8 MB of 4 KB pages): copies then follow one
# another until one had at most TAIL_PAGES to copy, and the writer copies the rest itself.
RESTART_PAGES = 2_000
TAIL_PAGES = 200
# Past this, the writer copies the rest whatever it costs: the copies are not catching up.
MAX_PAGES = 8_000
_CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"


@dataclass
class _Connection:
    """The writer's connection and what it remembers between batches."""

    sqlite: sqlite3.Connection
    synchronous: str  # the configured mode: what a durable batch commits with
    mode: str  # the connection's current `PRAGMA synchronous`
    # A connection of its own that copies the WAL into the database while the writer goes on.
    checkpointer: sqlite3.Connection
    # The WAL file, cut back to RESTART_PAGES when the log starts over (`journal_size_limit`), so past
    # that its size is what the log holds; and that size at MAX_PAGES.
    wal: Path
    max_wal_bytes: int
    changes_at_copy: int = 0  # the writer's `total_changes` when the last copy started
    copying: asyncio.Future[list[Row]] | None = None  # the checkpointer's copy under way
    copied: int = 0  # WAL pages in the database after the last copy (its `checkpointed`)


class _SqliteTx:
    """Statements run at once, on the event loop: a non-durable batch never waits for the disk (its COMMIT,
    with `synchronous=NORMAL`, appends to the WAL). A durable batch's COMMIT (FULL: the fsync) runs on a
    worker thread while the writer task awaits it, so no other statement reaches the connection
    meanwhile."""

    deferred: DeferredLedger | None = None  # (set by the writer: `GroupCommitter._run_groups`)

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self._sqlite = connection.sqlite

    def begin(self, durable: bool, waited: bool) -> None:
        """BEGIN IMMEDIATE takes the write lock up front, which also guards against other processes.
        (`waited` changes nothing here: statements run in place; a durable COMMIT waits for the disk.)"""
        mode = self._connection.synchronous if durable else "NORMAL"
        if mode != self._connection.mode:
            self._sqlite.execute(f"PRAGMA synchronous={mode}")
            self._connection.mode = mode
        self._sqlite.execute("BEGIN IMMEDIATE")

    async def commit(self) -> None:
        if self._connection.mode == "NORMAL":
            self._sqlite.execute("COMMIT")
        else:
            await asyncio.to_thread(_run_to_end, self._sqlite, "COMMIT")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._sqlite.execute(sql, params)

    async def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._sqlite.execute(sql, params).fetchone()
        return row

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self._sqlite.execute(sql, params).fetchall())

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
            self._sqlite.execute(sql, params)

    def notify(self, payload: str) -> None:
        """One embedded process: listeners are told in-process after the commit."""

    def serialize(self, keys: Sequence[str]) -> None:
        """BEGIN IMMEDIATE already holds the file's write lock until the transaction ends."""

    # In-process, every statement runs at once: nothing is ever queued.
    async def sync(self) -> None:
        return None

    def mark(self) -> int:
        return 0

    def unsend(self, mark: int) -> bool:
        return False


def _open(path: Path, timeout_seconds: float, synchronous: str) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    create_private_file(path)  # owner-only (0600), and so are its WAL and shared-memory files
    connection = sqlite3.connect(path, timeout=timeout_seconds, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute(f"PRAGMA synchronous={synchronous}")
    connection.execute(f"PRAGMA busy_timeout={int(timeout_seconds * 1000)}")
    return connection


async def _close(connection: _Connection) -> None:
    """Off the loop: the last connection to close checkpoints the WAL (an fsync)."""
    if connection.copying is not None:
        await asyncio.wait([connection.copying])
    await asyncio.to_thread(connection.checkpointer.close)
    await asyncio.to_thread(connection.sqlite.close)


def _run_to_end(connection: sqlite3.Connection, sql: str) -> list[Row]:
    """A statement run to its end on a worker thread, its rows handed back (not its cursor: one handed
    back to the loop would keep its statement open until collected, and SQLite refuses a SAVEPOINT
    while one is)."""
    return list(connection.execute(sql).fetchall())


async def _checkpoint(connection: _Connection) -> None:
    """Copy the WAL into the database, off the loop (a checkpoint fsyncs both files; SQLite's own, off
    here with `wal_autocheckpoint=0`, would run inside a COMMIT, on the loop), and start it over before
    it grows large, holding the writer up as little as it can.

    The checkpointer's connection copies on a worker thread while the writer goes on. But the WAL is
    only started over by a transaction that begins with every page of it copied, and under load the
    writer appends during every copy: the file would grow without end. So once it holds RESTART_PAGES,
    copies follow one another, each shorter than the last, until one had at most TAIL_PAGES to copy;
    then the writer, between two batches, copies what is left on its own connection (appending nothing
    meanwhile), and its next batch starts the WAL over. Only copies that are not catching up (a WAL of
    MAX_PAGES, say with the worker thread starved of CPU) hold the writer up for longer: it waits for
    the copy under way, then copies the rest. Called by the writer between batches (`Writing.tidy`)."""
    copying = connection.copying
    if copying is None:
        if connection.sqlite.total_changes - connection.changes_at_copy >= COPY_AFTER_CHANGES:
            _start_copy(connection)
        return
    overgrown = _wal_bytes(connection) >= connection.max_wal_bytes
    if not copying.done():
        if not overgrown:
            return
        await asyncio.wait([copying])
    connection.copying = None
    [(_, pages, copied)] = copying.result()  # (its error, if any: the database is gone)
    this_copy = copied - connection.copied if copied >= connection.copied else copied
    connection.copied = copied
    if pages < RESTART_PAGES and not overgrown:
        return
    if this_copy <= TAIL_PAGES or overgrown:  # (a WAL of MAX_PAGES is overgrown)
        await asyncio.to_thread(_run_to_end, connection.sqlite, _CHECKPOINT)
        connection.copied = 0  # (the next transaction starts the WAL over)
    else:
        _start_copy(connection)


def _wal_bytes(connection: _Connection) -> int:
    try:
        return connection.wal.stat().st_size
    except FileNotFoundError:
        return 0


def _start_copy(connection: _Connection) -> None:
    connection.changes_at_copy = connection.sqlite.total_changes
    connection.copying = asyncio.get_running_loop().run_in_executor(
        None, _run_to_end, connection.checkpointer, _CHECKPOINT
    )


class SqliteGatewayStore(GatewayStore):
    _writer: GroupCommitter[_Connection]

    def __init__(self, path: Path, *, timeout_seconds: float, synchronous: str = "FULL") -> None:
        super().__init__(for_update="")
        self._path = path
        self._timeout = timeout_seconds
        self._synchronous = synchronous
        self._writer = GroupCommitter(
            Writing(
                name="gateway-sqlite",
                connect=self._connect,
                close_connection=_close,
                make_tx=_SqliteTx,
                lost=(sqlite3.OperationalError,),
                describe=f"gateway store {path}",
                deferrals=DeferredLedger,
                tidy=_checkpoint,
            )
        )

    async def _connect(self) -> _Connection:
        connection = _open(self._path, self._timeout, self._synchronous)
        connection.execute("PRAGMA wal_autocheckpoint=0")
        [(page_size,)] = connection.execute("PRAGMA page_size").fetchall()
        connection.execute(f"PRAGMA journal_size_limit={RESTART_PAGES * page_size}")
        checkpointer = _open(self._path, self._timeout, "NORMAL")
        return _Connection(
            connection,
            self._synchronous,
            self._synchronous,
            checkpointer,
            wal=self._path.with_name(f"{self._path.name}-wal"),
            max_wal_bytes=MAX_PAGES * page_size,
        )

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
        """The schema on a connection of its own, then the writer's."""
        try:
            connection = _open(self._path, self._timeout, self._synchronous)
            try:
                self._create_schema(connection)
            finally:
                connection.close()
            await self._writer.start()
        except sqlite3.Error as exc:
            raise Unavailable(f"gateway store {self._path} cannot be opened: {exc}") from exc

    async def close(self) -> None:
        await self._writer.close()
