"""Reading the gateway's audit log from its end, incrementally: where the log ends now, and the records
written since the last read, each once.

ListAuditRecords pages by an opaque token that the gateway documents as the last sequence number served
(`operator_wire.page`); it hands one back only with a full page, and an AuditRecord does not carry its
own sequence number. So the tail keeps its own cursor: the token of a full page, else the cursor advanced
by the records read. Sequence numbers can skip (a PostgreSQL sequence after a rollback), so that
arithmetic may lag the real end and read a record twice, never skip one: records are de-duplicated by
call id.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

from egbe.v1 import gateway_pb2

# Reads one page: (page_token, page_size) -> the response.
PageReader = Callable[[str, int], Awaitable[gateway_pb2.ListAuditRecordsResponse]]
REMEMBERED_CALL_IDS = 20_000


class AuditTail:
    """The records appended to the audit log since the last `read`, oldest first."""

    def __init__(self, read_page: PageReader, page_size: int, lagging_reads: int) -> None:
        self._read_page = read_page
        self._page_size = page_size
        self._lagging_reads = lagging_reads
        self._full_reads = 0  # reads in a row that came back full: the log grows faster than it is read
        self._cursor: int | None = None
        self._seen: set[str] = set()
        self._seen_order: deque[str] = deque()
        self.skipped = 0  # records jumped over because the log grew faster than `max_pages` a read

    async def _has_after(self, seq: int) -> bool:
        return bool((await self._read_page(str(seq), 1)).records)

    async def end(self, low: int = 0) -> int:
        """The log's last sequence number at or after `low` (`low` when none follows), found by doubling
        a step then halving: about 2·log2(distance) one-record reads, when the tail starts or jumps."""
        if not await self._has_after(low):
            return low
        step = 1024
        high = low + step
        while await self._has_after(high):
            low, step = high, step * 2
            high = low + step
        while high - low > 1:  # invariant: a record after low, none after high
            middle = (low + high) // 2
            if await self._has_after(middle):
                low = middle
            else:
                high = middle
        return high

    async def start(self, backfill: int) -> list[gateway_pb2.AuditRecord]:
        """Begin at the log's end less `backfill` records, and return those."""
        self._cursor = max(0, await self.end() - backfill)
        return await self.read()

    def _new(self, record: gateway_pb2.AuditRecord) -> bool:
        if record.call_id in self._seen:
            return False
        self._seen.add(record.call_id)
        self._seen_order.append(record.call_id)
        if len(self._seen_order) > REMEMBERED_CALL_IDS:
            self._seen.discard(self._seen_order.popleft())
        return True

    async def read(self) -> list[gateway_pb2.AuditRecord]:
        """The next page of records since the last read. A log that keeps growing faster than a page a
        read (`lagging_reads` full pages in a row) is jumped to its end, what was jumped over counted
        in `skipped`: the stream stays live rather than ever further behind."""
        if self._cursor is None:
            raise RuntimeError("start the tail first")
        page = await self._read_page(str(self._cursor), self._page_size)
        fresh = [r for r in page.records if self._new(r)]
        if not page.next_page_token:
            self._cursor += len(page.records)
            self._full_reads = 0
            return fresh
        self._cursor = int(page.next_page_token)
        self._full_reads += 1
        if self._full_reads >= self._lagging_reads:
            end = await self.end(self._cursor)
            self.skipped += end - self._cursor
            self._cursor, self._full_reads = end, 0
        return fresh
