"""Group commit: one writer thread runs waiting transaction bodies back to back in one database transaction.

Each body runs inside its own SAVEPOINT, so it sees every earlier body's writes (the checks stay exact)
and a body that refuses (an EgbeError) undoes only itself. One fsync serves every body in the batch.
A batch of one body (or one combined group, as a burst of admissions is) needs no savepoint: a refusal
rolls the whole transaction back.

A batch holding a durable body commits synchronously (the fsync), and the durable body is answered
only after it ("committed before the RPC answers"). A batch of non-durable bodies commits without
waiting for the disk (SQLite WAL `synchronous=NORMAL`, PostgreSQL `synchronous_commit=off`): its
writes are committed and visible at once, and on disk with the next durable commit (the log is
sequential) or the database's own background flush. A non-durable body is answered as soon as it has
been applied; the batch's COMMIT follows at once. So a caller never waits on an fsync it does not need.

The writer thread gives the GIL back at every statement (the drivers release it around I/O) and must win it
back from the event loop, which under load does not block: CPython makes a waiting thread wait up to the
switch interval (5 ms by default) each time. `start` lowers the process's interval to 0.5 ms so a batch of
a dozen statements is not stretched by tens of milliseconds while the loop serves other calls (measured in
bench/gateway_overhead.py: admissions at 64 clients went from about half to about four fifths of the
store-free RPC rate).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from services.errors import Unavailable
from services.logging import get_logger

log = get_logger(__name__)
T = TypeVar("T")
C = TypeVar("C", bound="Connection")
MAX_BATCH = 256
# The longest the writer thread waits for the GIL while the event loop runs (see the module docstring).
WRITER_SWITCH_INTERVAL_S = 0.0005
_APPLIED = object()  # a non-durable job's outcome once it has been answered


class _NoPipeline(contextlib.AbstractContextManager["_NoPipeline"]):
    """Statements run one at a time (SQLite): nothing to sync."""

    def sync(self) -> None:
        """Every statement already ran."""

    def __exit__(self, *exc: object) -> None:
        return None


_NO_PIPELINE = _NoPipeline()


class Connection(Protocol):
    def execute(self, sql: Any, params: Any = ...) -> Any: ...

    def close(self) -> None: ...


@dataclass
class _Job:
    body: Callable[[Any], Any]
    # None for a posted job: nobody waits for it (a failure is logged, and a lost database marks the
    # writer unhealthy, which fails admissions closed).
    future: asyncio.Future[Any] | None
    loop: asyncio.AbstractEventLoop
    durable: bool
    # When set, `body` is an item and adjacent jobs with the same `combine` run as one call of it.
    combine: Callable[[Any, list[Any]], list[Any]] | None = None

    def run(self, tx: Any, group: list[_Job]) -> list[Any]:
        if self.combine is None:
            return [self.body(tx)]
        values = self.combine(tx, [job.body for job in group])
        assert len(values) == len(group)  # one answer per item
        return values


def _groups(batch: list[_Job]) -> list[list[_Job]]:
    """The batch in arrival order, adjacent jobs of one `combine` together, every other job alone; and
    every posted job of one `combine` joins the first of them (nobody waits on a posted job, and no
    earlier job can depend on one, so it may go earlier): admissions posted between the fused runs'
    finishes are written by one call, and the finishes come together too."""
    groups: list[list[_Job]] = []
    posted: dict[Callable[[Any, list[Any]], list[Any]], list[_Job]] = {}
    for job in batch:
        if job.future is None and job.combine is not None:
            group = posted.get(job.combine)
            if group is None:
                group = posted[job.combine] = []
                groups.append(group)
            group.append(job)
            continue
        last = groups[-1] if groups else None
        if last is None or job.combine is None or job.combine != last[0].combine or last[0].future is None:
            groups.append([])
        groups[-1].append(job)
    return groups


def _expire(future: asyncio.Future[Any], error: Unavailable) -> None:
    if not future.done():
        future.set_exception(error)


def _deliver(job: _Job, ok: bool, value: Any) -> None:
    future = job.future
    if future is None:
        if not ok:
            log.warning("posted store write failed", error=str(value))
        return

    def settle() -> None:
        if future.done():
            return  # the caller gave up (deadline, cancellation)
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    job.loop.call_soon_threadsafe(settle)


def _answer_applied(group: list[_Job], results: list[tuple[bool, Any]]) -> list[tuple[bool, Any]]:
    """Answer the group's non-durable jobs now; the rest are answered after the COMMIT."""
    outcomes = []
    for job, result in zip(group, results, strict=True):
        if not job.durable:
            _deliver(job, *result)
            result = (True, _APPLIED)  # noqa: PLW2901 - answered: nothing left to deliver
        outcomes.append(result)
    return outcomes


class GroupCommitter(Generic[C]):
    """Serializes every transaction of one store through one connection, batching the commits."""

    def __init__(
        self,
        *,
        name: str,
        connect: Callable[[], C],
        make_tx: Callable[[C], Any],
        begin: Callable[[C, bool], None],
        lost: tuple[type[BaseException], ...],
        describe: str,
        pipeline: Callable[[C], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self._connect = connect
        self._make_tx = make_tx
        # Opens a batch's transaction; its flag says whether the COMMIT must reach the disk.
        self._begin = begin
        # Errors meaning the database itself is gone: they fail the whole batch closed.
        self._lost = lost
        self._describe = describe
        # PostgreSQL: a batch runs in one pipeline, so statements whose answer a body does not read go out
        # without a round trip each; a sync after each body makes any error that body's own.
        self._pipeline = pipeline
        self._connection: C | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._closed = False
        # False from a batch that lost the database until one commits again.
        self.healthy = True

    def start(self) -> None:
        """Connect (raising when the database cannot be reached) and start the writer thread."""
        self._connection = self._connect()
        sys.setswitchinterval(min(sys.getswitchinterval(), WRITER_SWITCH_INTERVAL_S))
        self._thread.start()

    def run_now(self, body: Callable[[C], T]) -> T:
        """Run one body on the calling thread before the writer starts (schema creation)."""
        connection = self._connection if self._connection is not None else self._connect()
        self._connection = connection
        return body(connection)

    async def submit(
        self,
        body: Any,
        *,
        timeout_seconds: float,
        durable: bool = True,
        combine: Callable[[Any, list[Any]], list[Any]] | None = None,
    ) -> Any:
        """Run `body(tx)` in the writer's transaction; answered after COMMIT when `durable`, else once
        applied. With `combine`, `body` is an item: adjacent items of one `combine` are applied by one
        `combine(tx, items)` call (one answer per item, in order), so a burst costs a few statements."""
        if self._closed:
            raise Unavailable(f"{self._describe} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put(_Job(body, future, loop, durable, combine))
        # A timer rather than asyncio.wait_for: no extra task per transaction on the hot path.
        late = Unavailable(f"{self._describe} did not answer within {timeout_seconds} s")
        timer = loop.call_later(timeout_seconds, _expire, future, late)
        try:
            return await future
        finally:
            timer.cancel()

    def post(self, item: Any, *, combine: Callable[[Any, list[Any]], list[Any]]) -> None:
        """Queue an item for `combine` (as `submit` does) and do not wait for it: it is applied in order
        with every other job and committed without waiting for the disk."""
        if self._closed:
            raise Unavailable(f"{self._describe} is closed")
        self._jobs.put(_Job(item, None, asyncio.get_running_loop(), False, combine))

    def close(self) -> None:
        self._closed = True
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(timeout=30)
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
            self._connection = None

    def _work(self) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._jobs.put(None)  # finish this batch, then stop
                    break
                batch.append(job)
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Job]) -> None:
        groups = _groups(batch)
        outcomes: list[tuple[bool, Any]] = []
        try:
            if self._connection is None:
                self._connection = self._connect()
            connection = self._connection
            tx = self._make_tx(connection)
            with self._pipeline(connection) if self._pipeline else _NO_PIPELINE as pipe:
                self._begin(connection, any(job.durable for job in batch))
                if len(groups) == 1:
                    outcomes = self._run_alone(connection, tx, groups[0], pipe)
                else:
                    for group in groups:
                        outcomes.extend(self._run_among_others(connection, tx, group, pipe))
                    connection.execute("COMMIT")
            self.healthy = True
        except self._lost as error:
            self.healthy = False
            self._drop_connection()
            failure = Unavailable(f"{self._describe} is unavailable: {error}")
            outcomes = [(False, failure)] * len(batch)
        ordered = [job for group in groups for job in group]  # the order the outcomes are in
        for job, (ok, value) in zip(ordered, outcomes, strict=True):
            if value is not _APPLIED:  # (after a lost connection, answered jobs ignore the failure)
                _deliver(job, ok, value)

    def _run_alone(self, connection: C, tx: Any, group: list[_Job], pipe: Any) -> list[tuple[bool, Any]]:
        """The batch's only body (or combined group): no savepoint, since a refusal rolls the whole
        transaction back; its non-durable jobs are answered once it applied, before the COMMIT."""
        try:
            values = group[0].run(tx, group)
            pipe.sync()
        except self._lost:
            raise
        except Exception as error:  # a refusal or a bug: the transaction holds this body alone; undo it
            connection.execute("ROLLBACK")
            return [(False, error)] * len(group)
        outcomes = _answer_applied(group, [(True, value) for value in values])
        connection.execute("COMMIT")
        return outcomes

    def _run_among_others(
        self, connection: C, tx: Any, group: list[_Job], pipe: Any
    ) -> list[tuple[bool, Any]]:
        """One body of a batch inside its own savepoint; non-durable jobs are answered once it applied."""
        connection.execute("SAVEPOINT egbe_job")
        try:
            values = group[0].run(tx, group)
            connection.execute("RELEASE SAVEPOINT egbe_job")
            pipe.sync()
        except self._lost:
            raise
        except Exception as error:  # a refusal or a bug: undo this body (group) only
            connection.execute("ROLLBACK TO SAVEPOINT egbe_job")
            connection.execute("RELEASE SAVEPOINT egbe_job")
            return _answer_applied(group, [(False, error)] * len(group))
        return _answer_applied(group, [(True, value) for value in values])

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.execute("ROLLBACK")
            with contextlib.suppress(Exception):
                connection.close()
