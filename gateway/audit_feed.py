"""The live fan-out of the audit log behind OperatorService.WatchAudit: one reader for every watcher.

The gateway's own commits of audit records wake it (`StoreCore.audit_written`, one flag set on the write
path); it reads the records written since its last read once, in the summary view, and hands each
watcher the batch (filtered by its world) through a bounded queue. A watcher whose queue is full is
dropped and marked `lagged` (its stream reads on from the store, so it misses nothing): a slow watcher
never slows the writer, the reader or the other watchers. While nobody watches, nothing is read.
"""

from __future__ import annotations

import asyncio
import contextlib

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
# bounded by this rate, not by the call rate.
READ_SPACING_SECONDS = 0.05
# Read this often anyway while watched: records this gateway's writer was not told of (those of another
# gateway sharing the database, a lease settlement).
UNPROMPTED_READ_SECONDS = 1.0


class AuditWatcher:
    """One watcher's queue of batches (oldest first) and whether it fell behind."""

    def __init__(self, world_id: str) -> None:
        self.world_id = world_id
        self.batches: asyncio.Queue[list[AuditEntry]] = asyncio.Queue(WATCHER_QUEUE_BATCHES)
        self.lagged = False


class AuditFeed:
    """The one reader of new audit records and the watchers it serves."""

    def __init__(self, store: GatewayStore) -> None:
        self._store = store
        self._watchers: set[AuditWatcher] = set()
        self._cursor = 0  # the last sequence number read
        self._reader: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    async def watch(self, world_id: str) -> AuditWatcher:
        """A new watcher: every record after the reader's cursor reaches it. Records the store holds up
        to that cursor are the caller's to read (they were committed before this returns)."""
        async with self._starting:
            if self._reader is None or self._reader.done():
                newest = await self._store.list_audit(limit=1, summary=True, newest=True)
                self._cursor = newest[-1].seq if newest else 0
                self._reader = asyncio.create_task(self._read(), name="audit-feed")
            watcher = AuditWatcher(world_id)
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

    async def _read(self) -> None:
        signal = self._store.audit_signal = asyncio.Event()
        try:
            while self._watchers:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(signal.wait(), UNPROMPTED_READ_SECONDS)
                signal.clear()
                try:
                    entries = await self._store.list_audit(
                        after_seq=self._cursor, limit=READ_PAGE, summary=True
                    )
                except EgbeError as error:  # the store is down: watchers wait, the reader tries again
                    log.warning("audit feed could not read the store", error=error.message)
                    await asyncio.sleep(UNPROMPTED_READ_SECONDS)
                    continue
                if entries:
                    self._cursor = entries[-1].seq
                    self._fan_out(entries)
                if len(entries) == READ_PAGE:
                    signal.set()
                await asyncio.sleep(READ_SPACING_SECONDS)
        finally:
            if self._store.audit_signal is signal:
                self._store.audit_signal = None

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
