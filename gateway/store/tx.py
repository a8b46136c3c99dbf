"""The transaction every store capability is written over: a minimal cursor (`Tx`) on the backend's one
writer (group commit, `gateway/store/group_commit.py`), and the few functions their bodies share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gateway.store.group_commit import GroupCommitter, Refused

if TYPE_CHECKING:
    from gateway.records import AuditEntry
    from gateway.store.ledger import DeferredLedger

T = TypeVar("T")
ItemT = TypeVar("ItemT")
Row = tuple[Any, ...]


class Tx(Protocol):
    """What a transaction body (a coroutine) may do: run SQL written with `?` placeholders, queue a
    notification. `execute` may only queue a statement (PostgreSQL sends it, pipelined, with the next read
    or the committer's sync), so its error can surface there; reads are awaited."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    async def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def insert_statements(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> list[tuple[str, Sequence[Any]]]:
        """The statements that insert `rows` into `table`: one however many rows (PostgreSQL: the rows
        as one JSON parameter), or one per row where that costs nothing more (SQLite)."""
        ...

    def execute_together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Statements that each change rows none of the others touch, as one: PostgreSQL sends a single
        statement (data-modifying CTEs, which share one snapshot), SQLite runs them in turn."""
        ...

    def notify(self, payload: str) -> None: ...

    # Set by the writer for a batch of several bodies: ledger changes wait there for the batch's end
    # (`DeferredLedger`); None writes them with the body's own statements.
    deferred: DeferredLedger | None

    def serialize(self, keys: Sequence[str]) -> None:
        """Hold these keys until the transaction ends: a transaction of another gateway holding one of
        them waits for this one's end before it goes on (PostgreSQL: advisory locks, taken in key order;
        SQLite: nothing, as BEGIN IMMEDIATE already serializes every writer of the file)."""
        ...


def insert_rows(tx: Tx, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows into `table`, in the statements the backend writes them with (`Tx.insert_statements`)."""
    for sql, params in tx.insert_statements(table, columns, rows):
        tx.execute(sql, params)


class Statements:
    """Writes gathered to go to the database together (`Tx.execute_together`)."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx
        self.gathered: list[tuple[str, Sequence[Any]]] = []

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.gathered.extend(self._tx.insert_statements(table, columns, rows))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.gathered.append((sql, params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.gathered.extend((sql, row) for row in rows)

    @property
    def deferred(self) -> DeferredLedger | None:
        return self._tx.deferred


class StoreCore:
    """The shared writer every capability of the store runs its transactions through; failures fail
    closed (Unavailable)."""

    def __init__(self, for_update: str) -> None:
        # PostgreSQL locks the selected ledger/run row; SQLite's BEGIN IMMEDIATE already holds the write lock.
        self._for_update = for_update
        # Run rows are locked in id order, as every gateway sharing the database locks them.
        self._lock_in_order = f" ORDER BY run_id{for_update}"

    # Set by each backend: its one writer (group commit) and how long a caller waits for it.
    _writer: GroupCommitter[Any]
    _timeout: float

    # Told of each audit record this gateway has written (`audit_written`): the live fan-out of the audit
    # log (`gateway/audit_feed.py`), which numbers them with one light read and pushes them to every
    # watcher. None while nothing listens.
    audit_listener: Callable[[AuditEntry], None] | None = None

    def audit_written(self, entry: AuditEntry) -> None:
        """Called once an audit record is written: handed to the listener, nothing else on this path."""
        if self.audit_listener is not None:
            self.audit_listener(entry)

    async def transact(
        self,
        body: Callable[[Tx], Awaitable[T]],
        *,
        durable: bool = True,
        locks_ledger: bool = False,
        reads_ledger: bool = False,
    ) -> T:
        """Run `body` in one transaction on the backend's writer; database failures become Unavailable
        (fail closed).

        `durable`: answer only once committed to disk; otherwise once committed without waiting for the
        disk (in a batch of several, once applied: visible to every later body, and committed with the
        batch). See "Durability" in docs/gateway.md.
        `locks_ledger`: the body locks ledger rows itself, or reads what they hold to decide (a lease):
        it runs in a transaction of its own. In a batch of several bodies the others' ledger changes
        wait for the batch's end (`DeferredLedger`), where it would not see them, and where it would
        hold its rows while later bodies lock their runs (the lock order, docs/gateway.md).
        `reads_ledger`: the body reads the ledger or the leases: the batch's deferred changes are written
        before it, so it sees every write made before it (a posted admission's counters, say).
        """
        result: T = await self._writer.submit(
            body,
            timeout_seconds=self._timeout,
            durable=durable,
            alone=locks_ledger,
            reads_deferred=reads_ledger,
        )
        return result

    async def transact_item(
        self,
        item: ItemT,
        combine: Callable[[Tx, list[ItemT]], Awaitable[Sequence[T | Refused]]],
        *,
        durable: bool = True,
    ) -> T:
        """Like `transact`, but items arriving together are applied by one `combine(tx, items)` (its
        `Refused` answer for an item raises that item's error)."""
        result: T = await self._writer.submit(
            item, timeout_seconds=self._timeout, durable=durable, combine=combine
        )
        return result

    @property
    def healthy(self) -> bool:
        """False while the store is known to be unreachable (the writer lost the database; PostgreSQL: or
        the control push channel is down): admission fails closed even with lease left in memory."""
        return self._writer.healthy

    @property
    def conflicts(self) -> int:
        """Transactions the database rolled back for a conflict with another gateway's, since start (each
        was run again; docs/gateway.md "Lock order")."""
        return self._writer.conflicts

    async def probe(self) -> None:
        """One round trip through the writer: it marks the store healthy again once the database answers."""
        await self.transact(lambda tx: tx.one("SELECT 1"), durable=False)
