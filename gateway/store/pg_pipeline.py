"""The PostgreSQL writer's connection: libpq's pipeline mode driven straight from the event loop.

psycopg still opens and closes the connection and adapts every value both ways (its `Transformer`, the
dumpers and loaders its cursors use), so parameters and rows are what its cursors give. What this skips
is its cursor and pipeline machinery around each statement: a statement-and-sync round trip cost the
gateway's one event-loop thread 67–86 µs of CPU through psycopg's `AsyncPipeline` and costs 25–36 µs
driven directly (`bench/pg_pipeline.py`; docs/performance.md, "Design decisions kept").

The connection is always in pipeline mode and non-blocking. `send` queues a statement in libpq's buffer
(prepared on first use: the same text is parsed once per connection); `rows` and `sync` flush the buffer
and wait for the answers, which arrive through a reader registered on the socket for the connection's
life. As in any pipeline, the first error since the last sync aborts every statement after it until the
next sync; it is raised by the read or sync that waits past it, and the sync clears it.

While it waits for an answer, the pipeline keeps the event loop polling for up to `poll_wait_us`
(`GatewayConfig.postgres_poll_wait_us`): a callback re-queued each turn, so the loop's poll does not block
and its thread does not sleep in the kernel. On a virtual machine, waking a sleeping thread when the
answer lands costs about 100 µs, as much as PostgreSQL's work on a small statement: a round trip took
372 µs sleeping and 187 µs polling, for no more CPU (`bench/pg_pipeline.py`; docs/performance.md,
"Design decisions kept"). Other callbacks and sockets are served as usual meanwhile; past the budget the loop
sleeps until the answer wakes it. A wait asked not to `poll` sleeps at once: the store's writer polls
only for a batch somebody waits for.

No wait lasts longer than the store's timeout. A server that stops answering without closing the socket
(a network partition, a host gone without a reset, a server that never reads) would otherwise hold the
writer, and with it every transaction of the gateway, for ever; past the timeout the connection counts as
lost, and the writer opens a new one for its next batch.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from gateway.store.tx import Row

# Prepared statements kept per connection (least recently used dropped first): the gateway's own
# statements are far fewer; the rest are shapes sized by their inputs (`IN (?, ?, ...)`).
MAX_PREPARED = 256

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.EMPTY_QUERY)


@functools.lru_cache(maxsize=1024)
def native_sql(sql: str) -> bytes:
    """A statement written with `?` placeholders, in PostgreSQL's (`$1`, `$2`, ...). The store's
    statements hold no `?` but placeholders (they are written for SQLite too)."""
    parts = sql.split("?")
    numbered = [part + f"${index}" for index, part in enumerate(parts[:-1], start=1)]
    return ("".join(numbered) + parts[-1]).encode()


def connect_timeout(timeout_seconds: float) -> int:
    """libpq's `connect_timeout` for a store timeout: whole seconds, at least one."""
    return max(1, int(timeout_seconds))


class Reply:
    """What the server owes for one message sent: a statement's result, a PREPARE's, or a sync."""

    __slots__ = ("done", "prepared", "quiet", "result")

    def __init__(self, *, prepared: tuple[bytes, tuple[int, ...]] | None = None, quiet: bool = False):
        self.done = False
        self.result: pq.abc.PGresult | None = None  # (a statement's, once it succeeded)
        self.prepared = prepared  # the cache key a PREPARE stands for
        self.quiet = quiet  # its failure is nobody's error (a DEALLOCATE)


class Pipeline:
    """One connection held in libpq's pipeline mode; see the module docstring."""

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], *, timeout_seconds: float, poll_wait_us: int
    ) -> None:
        self._connection = connection
        self._timeout = timeout_seconds
        self._poll_wait = poll_wait_us / 1e6
        self._pgconn = connection.pgconn
        self._encoding = connection.info.encoding
        self._dumper = Transformer(connection)
        self._loader = Transformer(connection)
        self._prepared: OrderedDict[tuple[bytes, tuple[int, ...]], bytes] = OrderedDict()
        self._names = 0
        self._owed: deque[Reply] = deque()
        self._error: psycopg.Error | None = None  # the first since the last sync
        self._lost: psycopg.OperationalError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._socket = self._pgconn.socket
        self._pgconn.nonblocking = 1
        self._pgconn.enter_pipeline_mode()
        self._loop.add_reader(self._socket, self._readable)
        self._reading = True  # (until the socket fails or the connection closes)

    @classmethod
    async def open(cls, dsn: str, timeout_seconds: float, *, poll_wait_us: int) -> Pipeline:
        # Autocommit: the group committer issues BEGIN, SAVEPOINT and COMMIT itself. Commits do not wait
        # for the WAL flush unless a batch is durable (`_PostgresTx.begin`).
        connection = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=connect_timeout(timeout_seconds)
        )
        try:
            await asyncio.wait_for(connection.execute(b"SET synchronous_commit TO off"), timeout_seconds)
        except BaseException:
            await connection.close()
            raise
        return cls(connection, timeout_seconds=timeout_seconds, poll_wait_us=poll_wait_us)

    async def close(self) -> None:
        self._stop_reading()
        await self._connection.close()

    def send(self, sql: str, params: Sequence[Any]) -> Reply:
        """Queue a statement (sent with the next `rows` or `sync`); its reply."""
        self._raise_if_lost()
        values = self._dumper.dump_sequence(params, [PyFormat.AUTO] * len(params))
        types = tuple(self._dumper.types or ())
        name = self._prepared_name(native_sql(sql), types)
        self._pgconn.send_query_prepared(name, values, self._dumper.formats)
        reply = Reply()
        self._owed.append(reply)
        return reply

    async def rows(self, reply: Reply, *, poll: bool = True) -> list[Row]:
        """The rows of a statement sent: what was queued goes out with a request to answer at once.
        `poll`: keep the loop polling while waiting (for up to `poll_wait_us`)."""
        if not reply.done:
            self._pgconn.send_flush_request()
            await self._flush()
            await self._until(reply, poll)
        if self._error is not None:
            raise self._error
        result = reply.result
        if result is None or result.ntuples == 0:
            return []
        self._loader.set_pgresult(result)
        rows: list[Row] = self._loader.load_rows(0, result.ntuples, tuple)
        return rows

    async def sync(self, *, poll: bool = True) -> None:
        """End the pipeline's segment: every statement queued runs, and (outside a transaction block)
        commits. Raises the segment's first error, and clears it. `poll` as for `rows`."""
        self._raise_if_lost()
        self._pgconn.pipeline_sync()
        synced = Reply()
        self._owed.append(synced)
        await self._flush()
        await self._until(synced, poll)
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _prepared_name(self, sql: bytes, types: tuple[int, ...]) -> bytes:
        key = (sql, types)
        name = self._prepared.get(key)
        if name is not None:
            self._prepared.move_to_end(key)
            return name
        if len(self._prepared) >= MAX_PREPARED:
            _, dropped = self._prepared.popitem(last=False)
            self._pgconn.send_query_params(b"DEALLOCATE " + dropped, None)
            self._owed.append(Reply(quiet=True))
        self._names += 1
        name = self._prepared[key] = b"egbe_%d" % self._names
        self._pgconn.send_prepare(name, sql, types or None)
        self._owed.append(Reply(prepared=key))
        return name

    async def _flush(self) -> None:
        """Hand libpq's buffer to the socket, waiting while the socket is full."""
        gives_up = self._loop.time() + self._timeout
        while self._pgconn.flush():
            writable = self._loop.create_future()
            self._loop.add_writer(self._socket, _wake, writable)
            try:
                await self._wait(writable, gives_up)
            finally:
                self._loop.remove_writer(self._socket)
            self._raise_if_lost()

    async def _until(self, reply: Reply, poll: bool) -> None:
        """Take in the answers owed, in order, until `reply`'s has come; with `poll`, the loop kept
        polling for the first `poll_wait_us` of the wait."""
        started = self._loop.time()
        gives_up, polling_until = started + self._timeout, started + self._poll_wait
        while True:
            self._take()
            if reply.done:
                return
            self._raise_if_lost()
            self._waiter = self._loop.create_future()
            if poll and self._poll_wait > 0:
                self._loop.call_soon(self._keep_polling, self._waiter, polling_until)
            try:
                await self._wait(self._waiter, gives_up)
            finally:
                self._waiter = None

    async def _wait(self, waiter: asyncio.Future[None], gives_up: float) -> None:
        """Await `waiter`, or until the loop's clock reaches `gives_up`: then the connection counts as
        lost (the module docstring says why), so `_raise_if_lost` raises."""
        timer = self._loop.call_at(gives_up, self._give_up, waiter)
        try:
            await waiter
        finally:
            timer.cancel()

    def _give_up(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            self._lost = psycopg.OperationalError(f"PostgreSQL did not answer within {self._timeout} s")
            self._stop_reading()
            waiter.set_result(None)

    def _keep_polling(self, waiter: asyncio.Future[None], until: float) -> None:
        """Queued each turn of the loop until the answer comes or `until`: with a callback ready, the
        loop's poll returns at once rather than sleeping."""
        if not waiter.done() and self._loop.time() < until:
            self._loop.call_soon(self._keep_polling, waiter, until)

    def _readable(self) -> None:
        """The socket's callback: take in what arrived (so the poll does not report the same bytes
        again), and wake whoever waits for an answer."""
        try:
            self._pgconn.consume_input()
        except psycopg.OperationalError as lost:
            self._lost = lost
            self._stop_reading()
        if self._waiter is not None:
            _wake(self._waiter)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._socket)

    def _take(self) -> None:
        """Match the results libpq has parsed to the replies owed. In pipeline mode each statement's
        result is followed by a None; a sync's result stands alone."""
        pgconn, owed = self._pgconn, self._owed
        while owed and not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None or result.status == pq.ExecStatus.PIPELINE_SYNC:
                owed.popleft().done = True
                continue
            self._settle(owed[0], result)
            if pgconn.status == pq.ConnStatus.BAD:  # (no more results will come: every reply fails)
                self._lost = psycopg.OperationalError(result.get_error_message(self._encoding))
                return

    def _settle(self, reply: Reply, result: pq.abc.PGresult) -> None:
        status = result.status
        if status in _OK:
            reply.result = result
            return
        if reply.prepared is not None:  # (never made: a statement using it must be prepared again)
            self._prepared.pop(reply.prepared, None)
        if status != pq.ExecStatus.PIPELINE_ABORTED and not reply.quiet and self._error is None:
            self._error = psycopg.errors.error_from_result(result, encoding=self._encoding)

    def _raise_if_lost(self) -> None:
        if self._lost is not None:
            raise self._lost
        if self._pgconn.status == pq.ConnStatus.BAD:
            self._lost = psycopg.OperationalError("the connection to the server was lost")
            raise self._lost


def _wake(waiter: asyncio.Future[None]) -> None:
    """Resolve a wait, unless its timeout resolved it first."""
    if not waiter.done():
        waiter.set_result(None)
