"""Group commit: one writer runs waiting transaction bodies back to back in one database transaction.

Each body runs inside its own SAVEPOINT, so it sees every earlier body's writes (the checks stay exact)
and a body that refuses (an EgbeError) undoes only itself. One fsync serves every body in the batch.
A batch of one body (or one combined group, as a burst of admissions is) needs no savepoint: a refusal
rolls the whole transaction back.

A batch holding a durable body commits synchronously (the fsync), and the durable body is answered
only after it ("committed before the RPC answers"). A batch of non-durable bodies commits without
waiting for the disk (SQLite WAL `synchronous=NORMAL`, PostgreSQL `synchronous_commit=off`): its
writes are committed and visible at once, and on disk with the next durable commit (the log is
sequential) or the database's own background flush. So a caller never waits on an fsync it does not
need.

Bodies are coroutines over the backend's transaction object: `execute` is immediate for SQLite and
queued for PostgreSQL (sent, pipelined, with the next read or `sync`), and reads are awaited. The
writer is a task on the event loop: nothing crosses a thread on the way to the database and back.

- PostgreSQL: one connection held in libpq's pipeline mode, driven from the loop (`pg_pipeline`). A
  body's statements go out as the loop runs it and its answer comes back as a socket event. A lone
  batch's COMMIT is pipelined with its statements, costing no round trip of its own.
- SQLite: its calls block, but a non-durable batch never waits for the disk (WAL
  `synchronous=NORMAL`: its COMMIT appends to the WAL), so the loop runs its statements in place; only
  what waits for the disk leaves the loop, for a worker thread, while the writer task awaits it: a
  durable batch's COMMIT (the fsync) and the WAL checkpoint (`Writing.tidy`, between batches, with
  nobody waiting). A writer thread cost two thread hand-offs per batch and a GIL contest at every
  statement: moving the writer onto the loop took fused runs at 64 clients from about 1,400 to 1,740/s
  and the gateway's CPU per run from about 785 to 630 us (docs/performance.md).

Each job is answered once its batch committed, but a non-durable job in a batch of several, answered
once applied (its savepoint released): under load it does not wait for the bodies after it, nor for
a durable body's fsync. The price of a writer on the loop: it takes whatever has arrived when it is
free, so under load its batches stay small (1-2 jobs at 64 unary clients), and it commits more often.

Writers of several processes share PostgreSQL, so a batch may lose a deadlock (or a serialization
check) to another's: the database rolls it back and the batch runs again (`Writing.conflict`), where
a lost database fails it. A store keeps such cycles rare by locking rows in one order; for that, a
batch of several bodies can defer writes to its end (`Writing.deferrals`, written once in the
store's order), and a body that locks what others lock only at their end runs `alone`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from services.errors import Unavailable
from services.logging import get_logger

log = get_logger(__name__)
C = TypeVar("C")
MAX_BATCH = 256
# How long `close` waits for the writer to finish the batches already queued.
CLOSE_TIMEOUT_S = 30.0
# How long the writer lets posted jobs (nobody waits for them) gather before it writes them, unless a
# job somebody waits for comes first: a burst of admissions is written in a few transactions.
POSTED_GATHER_S = 0.002
# How often a batch is run when the database keeps rolling it back for a conflict with another
# transaction (a deadlock, a serialization failure) before its jobs fail as unavailable.
CONFLICT_ATTEMPTS = 3
_APPLIED = object()  # a non-durable job's outcome once it has been answered
Combine = Callable[[Any, list[Any]], Awaitable[Sequence[Any]]]


class BatchTx(Protocol):
    """What the committer needs of a backend's transaction object (the bodies use more of it)."""

    def begin(self, durable: bool, waited: bool) -> None:
        """Open the batch's transaction; `durable`: its COMMIT must reach the disk; `waited`: a caller
        waits for the batch (the backend may spend CPU to shorten its waits on the database)."""

    def execute(self, sql: str, params: Any = ...) -> None: ...

    async def commit(self) -> None:
        """COMMIT, with every statement before it: done (or raised) when this returns."""

    async def sync(self) -> None:
        """Send every queued statement and raise the first error."""

    def mark(self) -> int:
        """A position in the transaction's statements, for `unsend`."""

    def unsend(self, mark: int) -> bool:
        """Forget the statements queued since `mark` if none of them has been sent; True if so (the
        database saw none of them, so there is nothing to roll back)."""

    # A batch of several bodies' deferred writes (`Writing.deferrals`), None for a lone body (typed by
    # each store: its bodies use more of it).
    deferred: Any


class Deferrals(Protocol):
    """Writes bodies of one batch defer to its end (the gateway's ledger changes): written in one go, in
    an order of the store's choosing, rather than body by body."""

    def keep(self) -> None:
        """The body that just ran was applied (its savepoint released): keep what it deferred."""

    def drop(self) -> None:
        """The body that just ran was undone: drop what it deferred."""

    def write(self, tx: Any) -> None:
        """Queue every kept write (ahead of a body that reads them, and of the COMMIT)."""


@dataclass(frozen=True)
class Refused:
    """A `combine`'s answer for one item it refused (having written nothing for it): that item's caller
    gets `error`, and the burst's other items are applied as usual."""

    error: Exception


def _outcomes(values: list[Any]) -> list[tuple[bool, Any]]:
    return [(False, v.error) if isinstance(v, Refused) else (True, v) for v in values]


@dataclass
class _Job:
    body: Any  # a coroutine function of the transaction, or (with `combine`) an item
    # None for a posted job: nobody waits for it (a failure is logged, and a lost database marks the
    # writer unhealthy, which fails admissions closed).
    future: asyncio.Future[Any] | None
    durable: bool
    # When set, `body` is an item, applied by one call with the batch's other items of it (`_groups`).
    combine: Combine | None = None
    # Run in a transaction of its own: a body that locks rows the others lock in a set order only at
    # their end (the gateway's ledger) would otherwise hold them while later bodies lock theirs.
    alone: bool = False
    # Reads what earlier bodies of its batch deferred (`Writing.deferrals`): written before it.
    reads_deferred: bool = False

    async def run(self, tx: Any, group: list[_Job]) -> list[Any]:
        if self.combine is None:
            return [await self.body(tx)]
        values = list(await self.combine(tx, [job.body for job in group]))
        assert len(values) == len(group)  # one answer per item
        return values


def _groups(batch: list[_Job]) -> list[list[_Job]]:
    """The batch as groups of jobs, each group one body (or one `combine` call), in an order that a serial
    run of the jobs could have had:
    - every posted job of one `combine` joins the first of them (nobody waits on a posted job, and no
      earlier job can depend on one, so it may go earlier): admissions posted between other writes are
      written by one call;
    - a waited job of a `combine` joins the latest waited group of it, if that group comes after every
      posted job that arrived before this one (its caller may have posted one of those, and depends on
      it). The jobs waited on in one batch were all submitted before any was answered, so none of
      them depends on another and they may go in any order: endings, boundaries and records arriving
      interleaved are written in one call per kind;
    - every other job alone, in arrival order."""
    groups: list[list[_Job]] = []
    latest: dict[tuple[Combine, bool], int] = {}  # (combine, posted) -> the index of its latest group
    barrier = -1  # the index of the latest group holding a posted job
    for job in batch:
        posted = job.future is None
        key = None if job.combine is None else (job.combine, posted)
        index = None if key is None else latest.get(key)
        if index is None or (not posted and index <= barrier):
            index = len(groups)
            groups.append([])
            if key is not None:
                latest[key] = index
        groups[index].append(job)
        if posted:
            barrier = max(barrier, index)
    return groups


class _Conflict(Exception):
    """A batch's transaction, rolled back for a conflict with another (`Writing.conflict`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _expire(future: asyncio.Future[Any], store: str, timeout_seconds: float) -> None:
    if not future.done():
        future.set_exception(Unavailable(f"{store} did not answer within {timeout_seconds} s"))


async def _nothing_to_tidy(connection: Any) -> None:
    return None


@dataclass(frozen=True)
class Writing(Generic[C]):
    """How a store's writer reaches its database."""

    name: str  # the writer task's name
    connect: Callable[[], Awaitable[C]]
    close_connection: Callable[[C], Awaitable[None]]
    make_tx: Callable[[C], BatchTx]
    # Errors meaning the database itself is gone: they fail the whole batch closed.
    lost: tuple[type[BaseException], ...]
    describe: str
    # Errors meaning the database rolled the transaction back for a conflict with another one sharing it
    # (PostgreSQL: a deadlock between gateways): the batch is run again, on the same connection. Checked
    # before `lost`, which may include them (psycopg's are OperationalErrors).
    conflict: tuple[type[BaseException], ...] = ()
    # Upkeep between batches, with nobody waiting (SQLite's WAL checkpoint).
    tidy: Callable[[C], Awaitable[None]] = _nothing_to_tidy
    # Where a batch of several bodies defers writes to its end (None: bodies write as they go). A body
    # that reads them is submitted `reads_deferred` (they are written before it), or `alone`.
    deferrals: Callable[[], Deferrals] | None = None


class GroupCommitter(Generic[C]):
    """Serializes every transaction of one store through one connection, batching the commits: a task
    on the event loop."""

    def __init__(self, writing: Writing[C]) -> None:
        self._writing = writing
        self._connection: C | None = None
        self._closed = False
        # False from a batch that lost the database until one commits again.
        self.healthy = True
        # Transactions the database rolled back for a conflict (each run again, `CONFLICT_ATTEMPTS`).
        self.conflicts = 0
        self._jobs: collections.deque[_Job] = collections.deque()
        self._wake = asyncio.Event()
        self._awaited = asyncio.Event()  # set while a queued job has a caller waiting for it
        self._task: asyncio.Task[None] | None = None
        self._death: Unavailable | None = None  # why the writer task ended before `close` (a bug)

    async def start(self) -> None:
        """Connect (raising when the database cannot be reached) and start the writer task."""
        await self._connected()
        self._task = asyncio.create_task(self._work(), name=self._writing.name)
        self._task.add_done_callback(self._stopped)

    def _stopped(self, task: asyncio.Task[None]) -> None:
        """The writer task ended. Before `close`, only a bug ends it (`_work` lets nothing else escape):
        it is logged, the store is unhealthy (admissions fail closed), and every job queued, and every one
        submitted from now on, fails at once rather than at its deadline."""
        if self._closed:
            return
        error = None if task.cancelled() else task.exception()
        self._death = self._stopped_by(error)
        self.healthy = False
        log.error("store writer stopped", store=self._writing.describe, error=repr(error))
        while self._jobs:
            self._deliver(self._jobs.popleft(), False, self._death)

    def _stopped_by(self, error: BaseException | None) -> Unavailable:
        return Unavailable(f"{self._writing.describe}'s writer stopped: {error!r}")

    async def close(self) -> None:
        """Finish the batches already queued (for up to CLOSE_TIMEOUT_S), then close the connection."""
        self._closed = True
        self._wake.set()
        self._awaited.set()
        if self._task is not None and not self._task.done():  # (a writer a bug stopped was reported then)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, CLOSE_TIMEOUT_S)
        await self._drop_connection()

    async def _connected(self) -> C:
        """The connection, opened again if a lost database dropped it."""
        if self._connection is None:
            self._connection = await self._writing.connect()
        return self._connection

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await self._writing.close_connection(connection)

    async def submit(
        self,
        body: Any,
        *,
        timeout_seconds: float,
        durable: bool = True,
        combine: Combine | None = None,
        alone: bool = False,
        reads_deferred: bool = False,
    ) -> Any:
        """Run `await body(tx)` in the writer's transaction; answered after COMMIT (a durable one: on
        disk). With `combine`, `body` is an item: items of one `combine` in a batch are applied by one
        `combine(tx, items)` call (one answer per item, in order, a `Refused` raising its error for
        that item alone), so a burst costs a few statements."""
        if self._closed:
            raise Unavailable(f"{self._writing.describe} is closed")
        if self._death is not None:
            raise self._death
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._enqueue(_Job(body, future, durable, combine, alone, reads_deferred))
        # A timer rather than asyncio.wait_for: no extra task per transaction on the hot path.
        timer = loop.call_later(timeout_seconds, _expire, future, self._writing.describe, timeout_seconds)
        try:
            return await future
        finally:
            timer.cancel()

    def post(self, item: Any, *, combine: Combine) -> None:
        """Queue an item for `combine` (as `submit` does) and do not wait for it: it is applied in order
        with every other job and committed without waiting for the disk."""
        if self._closed:
            raise Unavailable(f"{self._writing.describe} is closed")
        if self._death is not None:
            raise self._death
        self._enqueue(_Job(item, None, False, combine))

    def _enqueue(self, job: _Job) -> None:
        self._jobs.append(job)
        self._wake.set()
        if job.future is not None:
            self._awaited.set()

    @staticmethod
    def _deliver(job: _Job, ok: bool, value: Any) -> None:
        """Answer a job's caller; a posted job's failure is logged."""
        if job.future is None:
            if not ok:
                log.warning("posted store write failed", error=str(value))
        elif job.future.done():
            return  # the caller gave up (deadline, cancellation)
        elif ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)

    async def _work(self) -> None:
        jobs = self._jobs
        while jobs or not self._closed:
            if not jobs:
                self._wake.clear()
                await self._wake.wait()
                continue
            if not self._awaited.is_set():  # only posted jobs: nobody waits, so let more gather
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._awaited.wait(), POSTED_GATHER_S)
            batch = [jobs.popleft()]
            while not batch[-1].alone and jobs and not jobs[0].alone and len(batch) < MAX_BATCH:
                batch.append(jobs.popleft())
            if all(job.future is None for job in jobs):
                self._awaited.clear()
            try:
                await self._run_batch(batch)
            except BaseException as error:  # (a bug, or the task cancelled): its callers are told now
                for job in batch:
                    self._deliver(job, False, self._stopped_by(error))
                raise
            if self._connection is not None:
                await self._tidy(self._connection)

    async def _tidy(self, connection: C) -> None:
        try:
            await self._writing.tidy(connection)
        except Exception as error:  # the writer goes on; a lost database fails the next batch closed
            log.warning("store upkeep failed", store=self._writing.describe, error=str(error))

    async def _run_batch(self, batch: list[_Job]) -> None:
        groups = _groups(batch)
        outcomes: list[tuple[bool, Any]] = []
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                outcomes = await self._run_groups(
                    groups,
                    durable=any(job.durable for job in batch),
                    waited=any(job.future is not None for job in batch),
                )
                self.healthy = True
                break
            except _Conflict as conflict:
                self.conflicts += 1
                # Rolled back whole, so run again (jobs answered already, once applied, are applied again
                # and not answered twice); the connection is fine.
                log.warning("store transaction lost a conflict", attempt=attempt, error=str(conflict.error))
                outcomes = [(False, Unavailable(f"{self._writing.describe}: {conflict.error}"))] * len(batch)
            except Exception as error:
                # The database is gone (`lost`: admissions fail closed until a batch commits again), or
                # the batch's own COMMIT failed: either way the connection's state is unknown, so the next
                # batch opens another, and every job of this one not answered yet fails.
                if isinstance(error, self._writing.lost):
                    self.healthy = False
                await self._drop_connection()
                failure = Unavailable(f"{self._writing.describe} is unavailable: {error}")
                outcomes = [(False, failure)] * len(batch)
                break
        ordered = [job for group in groups for job in group]  # the order the outcomes are in
        for job, (ok, value) in zip(ordered, outcomes, strict=True):
            if value is not _APPLIED:  # (after a lost connection, answered jobs ignore the failure)
                self._deliver(job, ok, value)

    async def _run_groups(
        self, groups: list[list[_Job]], *, durable: bool, waited: bool
    ) -> list[tuple[bool, Any]]:
        """The batch in one transaction: each group's outcomes, in order. Raises `_Conflict` once the
        transaction is rolled back for a conflict."""
        tx = self._writing.make_tx(await self._connected())
        start = tx.mark()
        tx.begin(durable, waited)
        try:
            if len(groups) == 1:
                return await self._run_alone(tx, groups[0], start)
            deferred = tx.deferred = None if self._writing.deferrals is None else self._writing.deferrals()
            outcomes = []
            for group in groups:
                if deferred is not None and group[0].reads_deferred:
                    deferred.write(tx)
                outcomes.extend(await self._run_among_others(tx, group))
            if deferred is not None:
                deferred.write(tx)
            await tx.commit()
            return outcomes
        except Exception as error:
            if not isinstance(error, self._writing.conflict):
                raise
            tx.execute("ROLLBACK")  # (a failed statement leaves an open transaction aborted, not ended)
            await tx.sync()
            raise _Conflict(error) from error

    def _ends_the_batch(self, error: Exception) -> bool:
        """Not the body's own failure (a refusal, a bug) but the connection's or a conflict's: no body of
        the batch can be kept."""
        return isinstance(error, (*self._writing.lost, *self._writing.conflict))

    async def _run_alone(self, tx: BatchTx, group: list[_Job], start: int) -> list[tuple[bool, Any]]:
        """The batch's only body (or combined group): no savepoint, since a refusal rolls the whole
        transaction back; on PostgreSQL its COMMIT goes out with its statements."""
        try:
            values = await group[0].run(tx, group)
            await tx.commit()
        except Exception as error:  # a refusal or a bug: the transaction holds this body alone; undo it
            if self._ends_the_batch(error):
                raise
            if not tx.unsend(start):  # (nothing to undo when no statement of it reached the database)
                tx.execute("ROLLBACK")
                await tx.sync()
            return [(False, error)] * len(group)
        return _outcomes(values)

    async def _run_among_others(self, tx: BatchTx, group: list[_Job]) -> list[tuple[bool, Any]]:
        """One body of a batch inside its own savepoint; non-durable jobs are answered once it applied."""
        start = tx.mark()
        tx.execute("SAVEPOINT egbe_job")
        try:
            values = await group[0].run(tx, group)
            tx.execute("RELEASE SAVEPOINT egbe_job")
            await tx.sync()
        except Exception as error:  # a refusal or a bug: undo this body (group) only
            if tx.deferred is not None:
                tx.deferred.drop()
            if self._ends_the_batch(error):
                raise
            if not tx.unsend(start):
                tx.execute("ROLLBACK TO SAVEPOINT egbe_job")
                tx.execute("RELEASE SAVEPOINT egbe_job")
                await tx.sync()
            return self._answer_applied(group, [(False, error)] * len(group))
        if tx.deferred is not None:
            tx.deferred.keep()
        return self._answer_applied(group, _outcomes(values))

    def _answer_applied(self, group: list[_Job], results: list[tuple[bool, Any]]) -> list[tuple[bool, Any]]:
        """Answer the group's non-durable jobs now; the rest are answered after the COMMIT."""
        outcomes = []
        for job, result in zip(group, results, strict=True):
            if not job.durable:
                self._deliver(job, *result)
                result = (True, _APPLIED)  # noqa: PLW2901 - answered: nothing left to deliver
            outcomes.append(result)
        return outcomes
