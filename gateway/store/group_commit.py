"""Group commit: one writer thread runs waiting transaction bodies back to back in one database transaction.

Each body runs inside its own SAVEPOINT, so it sees every earlier body's writes (the checks stay exact)
and a body that refuses (an EgbeError) undoes only itself. Nobody is answered before the COMMIT, so
"committed before the RPC answers" holds, while one fsync serves every body in the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from services.errors import Unavailable

T = TypeVar("T")
C = TypeVar("C", bound="Connection")
MAX_BATCH = 256


class Connection(Protocol):
    def execute(self, sql: Any, params: Any = ...) -> Any: ...

    def close(self) -> None: ...


@dataclass
class _Job:
    body: Callable[[Any], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


def _deliver(job: _Job, ok: bool, value: Any) -> None:
    def settle() -> None:
        if job.future.done():
            return  # the caller gave up (deadline, cancellation)
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)

    job.loop.call_soon_threadsafe(settle)


class GroupCommitter(Generic[C]):
    """Serializes every transaction of one store through one connection, batching the commits."""

    def __init__(
        self,
        *,
        name: str,
        connect: Callable[[], C],
        make_tx: Callable[[C], Any],
        begin: str,
        lost: tuple[type[BaseException], ...],
        describe: str,
    ) -> None:
        self._connect = connect
        self._make_tx = make_tx
        self._begin = begin
        # Errors meaning the database itself is gone: they fail the whole batch closed.
        self._lost = lost
        self._describe = describe
        self._connection: C | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._closed = False

    def start(self) -> None:
        """Connect (raising when the database cannot be reached) and start the writer thread."""
        self._connection = self._connect()
        self._thread.start()

    def run_now(self, body: Callable[[C], T]) -> T:
        """Run one body on the calling thread before the writer starts (schema creation)."""
        connection = self._connection if self._connection is not None else self._connect()
        self._connection = connection
        return body(connection)

    async def submit(self, body: Callable[[Any], T], *, timeout_seconds: float) -> T:
        if self._closed:
            raise Unavailable(f"{self._describe} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(body, future, loop))
        try:
            return await asyncio.wait_for(future, timeout_seconds)
        except TimeoutError:
            raise Unavailable(f"{self._describe} did not answer within {timeout_seconds} s") from None

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
        outcomes: list[tuple[bool, Any]] = []
        try:
            if self._connection is None:
                self._connection = self._connect()
            connection = self._connection
            tx = self._make_tx(connection)
            connection.execute(self._begin)
            for job in batch:
                connection.execute("SAVEPOINT egbe_job")
                try:
                    value = job.body(tx)
                except self._lost:
                    raise
                except Exception as error:  # a refusal or a bug: undo this body only
                    connection.execute("ROLLBACK TO SAVEPOINT egbe_job")
                    connection.execute("RELEASE SAVEPOINT egbe_job")
                    outcomes.append((False, error))
                else:
                    connection.execute("RELEASE SAVEPOINT egbe_job")
                    outcomes.append((True, value))
            connection.execute("COMMIT")
        except self._lost as error:
            self._drop_connection()
            failure = Unavailable(f"{self._describe} is unavailable: {error}")
            outcomes = [(False, failure)] * len(batch)
        for job, (ok, value) in zip(batch, outcomes, strict=True):
            _deliver(job, ok, value)

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.execute("ROLLBACK")
            with contextlib.suppress(Exception):
                connection.close()
