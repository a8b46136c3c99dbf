"""The live fan-out of the audit log behind OperatorService.WatchAudit: one reader for every watcher.

The gateway hands it each audit record it writes (`StoreCore.audit_written`: one dict entry on the write
path, and a wake-up); it numbers the records written since its last read with one light read (sequence
numbers and call ids: `audit_numbers`) and hands each watcher the batch (filtered by its world) through a
bounded queue. Records it was not handed (another gateway's, sharing the database; a lease settlement)
make it read that batch whole instead, in the summary view. It reads no more often than the most
eager watcher wants its messages (`min_interval_ms`; at most 20 times a second): each read is a body in
the writer's batch, where it costs the writes beside it a savepoint, so a console paced to its poll
reads four times a second, not twenty. A watcher whose queue is full is dropped and marked `lagged`
(its stream reads on from the store, so it misses nothing): a slow watcher never slows the writer, the
reader or the other watchers. While nobody watches, nothing is handed over or read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from gateway.records import AuditEntry
from gateway.store.base import GatewayStore
from services.errors import EgbeError
from services.logging import get_logger

log = get_logger(__name__)
# Batches a watcher may have waiting before it is dropped as lagged (at the reader's pace of at most
# 1/READ_SPACING_SECONDS batches a second: about 12 s of falling behind).
WATCHER_QUEUE_BATCHES = 256
READ_PAGE = 1_000  # records a read takes at most; a log that grew by more is read again at once
# Reads are this far apart at least, however often the writer commits: the reader's cost to the store is
# bounded by this rate, not by the call rate. (Farther apart when every watcher is paced slower.)
READ_SPACING_SECONDS = 0.05
# Read this often anyway while watched: records this gateway's writer was not told of (those of another
# gateway sharing the database, a lease settlement).
UNPROMPTED_READ_SECONDS = 1.0
# Records handed over and not numbered yet, at most (a batch rolled back leaves its records here unread).
HANDED_MAX = 20_000


class AuditWatcher:
    """One watcher's queue of batches (oldest first) and whether it fell behind."""

    def __init__(self, world_id: str, interval_seconds: float) -> None:
        self.world_id = world_id
        self.interval_seconds = interval_seconds  # how far apart it wants its messages (0: as read)
        self.batches: asyncio.Queue[list[AuditEntry]] = asyncio.Queue(WATCHER_QUEUE_BATCHES)
        self.lagged = False


class AuditFeed:
    """The one reader of new audit records and the watchers it serves."""

    def __init__(self, store: GatewayStore) -> None:
        self._store = store
        self._watchers: set[AuditWatcher] = set()
        self._cursor = 0  # the last sequence number read
        self._handed: dict[str, AuditEntry] = {}  # records written and not numbered yet, by call id
        self._wake = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    async def watch(self, world_id: str, interval_seconds: float = 0.0) -> AuditWatcher:
        """A new watcher: every record after the reader's cursor reaches it. Records the store holds up
        to that cursor are the caller's to read (they were committed before this returns)."""
        async with self._starting:
            if self._reader is None or self._reader.done():
                newest = await self._store.list_audit(limit=1, summary=True, newest=True)
                self._cursor = newest[-1].seq if newest else 0
                self._reader = asyncio.create_task(self._read(), name="audit-feed")
            watcher = AuditWatcher(world_id, interval_seconds)
            self._watchers.add(watcher)
            return watcher

    def leave(self, watcher: AuditWatcher) -> None:
        """The watcher is gone (its stream ended or was cancelled): its queue is dropped with it."""
        self._watchers.discard(watcher)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    def _handed_over(self, entry: AuditEntry) -> None:
        """A record the gateway wrote (`StoreCore.audit_listener`), kept until it is numbered."""
        self._handed[entry.call_id] = entry
        if len(self._handed) > HANDED_MAX:  # (never numbered: its batch was rolled back)
            del self._handed[next(iter(self._handed))]
        self._wake.set()

    async def _read(self) -> None:
        self._store.audit_listener = self._handed_over
        try:
            while self._watchers:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), UNPROMPTED_READ_SECONDS)
                self._wake.clear()
                try:
                    entries = await self._next_records()
                except EgbeError as error:  # the store is down: watchers wait, the reader tries again
                    log.warning("audit feed could not read the store", error=error.message)
                    await asyncio.sleep(UNPROMPTED_READ_SECONDS)
                    continue
                if entries:
                    self._cursor = entries[-1].seq
                    self._fan_out(entries)
                if len(entries) == READ_PAGE:
                    self._wake.set()
                await asyncio.sleep(self._spacing())
        finally:
            if self._store.audit_listener == self._handed_over:
                self._store.audit_listener = None
            self._handed.clear()

    async def _next_records(self) -> list[AuditEntry]:
        """The records after the cursor, oldest first: those handed over, numbered; or, when one of them
        was not handed over, the batch read whole."""
        numbers = await self._store.audit_numbers(after_seq=self._cursor, limit=READ_PAGE)
        handed = [(seq, self._handed.pop(call_id, None)) for seq, call_id in numbers]
        if all(entry is not None for _, entry in handed):
            return [dataclasses.replace(entry, seq=seq) for seq, entry in handed if entry is not None]
        return await self._store.list_audit(after_seq=self._cursor, limit=READ_PAGE, summary=True)

    def _spacing(self) -> float:
        """Until the next read: as long as the most eager watcher allows, within READ_SPACING_SECONDS and
        UNPROMPTED_READ_SECONDS."""
        wanted = min((w.interval_seconds for w in self._watchers), default=0.0)
        return min(UNPROMPTED_READ_SECONDS, max(READ_SPACING_SECONDS, wanted))

    def _fan_out(self, entries: list[AuditEntry]) -> None:
        for watcher in list(self._watchers):
            batch = [e for e in entries if e.world_id == watcher.world_id] if watcher.world_id else entries
            if not batch:
                continue
            try:
                watcher.batches.put_nowait(batch)
            except asyncio.QueueFull:
                watcher.lagged = True
                self._watchers.discard(watcher)
