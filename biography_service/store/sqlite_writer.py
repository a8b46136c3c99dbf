"""Group commit for SQLite: one writer thread runs queued writes together under one fsync'd COMMIT.

No caller is answered before the COMMIT that made its write durable. A write that arrives while the
group is being written joins it before the COMMIT: the fsync, not the writing, is what each commit
costs, and callers' requests reach the queue one by one as the event loop decodes them.

Writes run bare first: a SAVEPOINT per write journals a copy of every page the write first touches,
which profiling showed to be a tenth of an append's cost, for a rollback that almost never happens. If
any write of the group fails, the group is rolled back and written again with each write in its own
SAVEPOINT ("isolated"), so the failing one fails alone while the others commit. Writes must therefore
be re-runnable (they read what they depend on inside the transaction); each is told whether it runs
isolated, so it may leave to a rerun the checks that a failure would bring it to.

A bare write may also defer its statements to the group's `Deferred` (`flush` runs them before the
COMMIT, several writes' rows per statement): every SQLite call hands the GIL back and must take it
again from the event loop, which profiling (py-spy --native) showed was where the writer waited most
after the fsync. If the group fails, `discard` forgets whatever the deferred writes had assumed.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")

# (connection, isolated) -> result; isolated: the write has its own savepoint and its failure is its own.
Write = Callable[[sqlite3.Connection, bool], T]


@dataclass
class _Pending(Generic[T]):
    write: Write[T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]
    outcome: tuple[bool, Any] | None = None  # (succeeded, result or exception)


def _settle(members: list[_Pending[Any]]) -> None:
    """Runs on the callers' loop: hand each outcome to its awaiting caller, if it still waits.

    One call per loop and group, not per caller: each call_soon_threadsafe wakes the loop through a
    socket write and takes the GIL back from it.
    """
    for pending in members:
        if pending.future.done() or pending.outcome is None:
            continue
        succeeded, value = pending.outcome
        if succeeded:
            pending.future.set_result(value)
        else:
            pending.future.set_exception(value)


class Deferred(Protocol):
    """What bare writes left to write at the end of their group (writer thread only)."""

    def flush(self, connection: sqlite3.Connection) -> None:
        """Write the deferred rows; raising fails the group, which is then rewritten isolated."""

    def discard(self) -> None:
        """The group was rolled back: forget its deferred rows and anything learnt from them."""


class _NothingDeferred:
    def flush(self, connection: sqlite3.Connection) -> None:
        pass

    def discard(self) -> None:
        pass


class GroupCommitWriter:
    """The only thread that writes to the database file; batches whatever is queued when it is free."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        max_group: int,
        deferred: Deferred | None = None,
    ) -> None:
        self._connect = connect
        self._max_group = max_group
        self._deferred: Deferred = deferred or _NothingDeferred()
        self._queue: queue.SimpleQueue[_Pending[Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="biography-sqlite-writer", daemon=True)
        self._thread.start()

    def submit(self, write: Write[T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Pending(write, loop, future))
        return future

    def stop(self) -> None:
        """Finish what is queued, then close the connection and end the thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        connection = self._connect()
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                self._commit_group(connection, first)
        finally:
            connection.close()

    @staticmethod
    def _write_isolated(connection: sqlite3.Connection, pending: _Pending[Any]) -> None:
        connection.execute("SAVEPOINT write")
        try:
            pending.outcome = (True, pending.write(connection, True))
            connection.execute("RELEASE write")
        except Exception as exc:  # any failure is this write's alone; the caller receives it
            connection.execute("ROLLBACK TO write")
            connection.execute("RELEASE write")
            pending.outcome = (False, exc)

    def _write_bare(self, connection: sqlite3.Connection, group: list[_Pending[Any]]) -> bool:
        """Run the group's writes without savepoints, taking in those that queue meanwhile.

        The deferred rows are flushed when the queue is empty; writes that queue during the flush
        (SQLite runs without the GIL, so the event loop decodes meanwhile) still join the group.
        False at the first failure: the transaction then holds partial work and must be rolled back.
        """
        pending: _Pending[Any] | None = group[0]
        while pending is not None:
            try:
                pending.outcome = (True, pending.write(connection, False))
                pending = self._next(len(group))
                if pending is None:
                    self._deferred.flush(connection)
                    pending = self._next(len(group))
            except Exception:  # the isolated rerun hands the failure to its caller
                return False
            if pending is not None:
                group.append(pending)
        return True

    def _next(self, taken: int) -> _Pending[Any] | None:
        """A write already queued that may still join the open group (None: none, full, or stopping)."""
        if taken >= self._max_group:
            return None
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return None
        if item is None:
            self._queue.put(None)  # stop once this group is committed
        return item

    def _commit_group(self, connection: sqlite3.Connection, first: _Pending[Any]) -> None:
        """Write `first`, and whatever queues while the group is being written, in one transaction."""
        group = [first]
        try:
            connection.execute("BEGIN IMMEDIATE")
            if not self._write_bare(connection, group):
                self._deferred.discard()
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                connection.execute("BEGIN IMMEDIATE")
                for member in group:
                    self._write_isolated(connection, member)
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            self._deferred.discard()
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            for member in group:
                member.outcome = (False, exc)  # nothing of the group became durable
        by_loop: dict[asyncio.AbstractEventLoop, list[_Pending[Any]]] = {}
        for member in group:
            by_loop.setdefault(member.loop, []).append(member)
        for loop, members in by_loop.items():
            loop.call_soon_threadsafe(_settle, members)
