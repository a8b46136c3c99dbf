"""The audit tail reads each record once, from the log's end, across gaps in its sequence numbers and
when the log outgrows a read; paging as the gateway documents it (the token is the last sequence number
served, handed back only with a full page)."""

from __future__ import annotations

from console.audit_tail import AuditTail
from egbe.v1 import gateway_pb2


class Log:
    """An audit log in memory, paged as ListAuditRecords pages it."""

    def __init__(self) -> None:
        self.records: list[tuple[int, str]] = []
        self.next_seq = 1

    def append(self, count: int, gap: int = 0) -> None:
        for _ in range(count):
            self.next_seq += gap
            self.records.append((self.next_seq, f"call-{self.next_seq}"))
            self.next_seq += 1

    async def page(self, token: str, size: int) -> gateway_pb2.ListAuditRecordsResponse:
        after = int(token) if token else 0
        chosen = [r for r in self.records if r[0] > after][:size]
        return gateway_pb2.ListAuditRecordsResponse(
            records=[gateway_pb2.AuditRecord(call_id=call) for _, call in chosen],
            next_page_token=str(chosen[-1][0]) if len(chosen) == size else "",
        )


def _ids(records: list[gateway_pb2.AuditRecord]) -> list[str]:
    return [r.call_id for r in records]


async def test_it_starts_at_the_end_less_a_backfill_and_then_reads_each_new_record_once() -> None:
    log = Log()
    log.append(5000)
    tail = AuditTail(log.page, page_size=10, lagging_reads=3)
    assert _ids(await tail.start(backfill=3)) == ["call-4998", "call-4999", "call-5000"]
    assert await tail.read() == []
    log.append(4, gap=2)  # sequence numbers skip, as a PostgreSQL sequence may
    log.append(3)
    assert _ids(await tail.read()) == [f"call-{seq}" for seq, _ in log.records[-7:]]
    assert await tail.read() == []


async def test_a_log_that_keeps_outgrowing_its_reads_is_jumped_to_its_end_and_the_jump_counted() -> None:
    log = Log()
    tail = AuditTail(log.page, page_size=10, lagging_reads=2)
    assert await tail.start(backfill=100) == []
    log.append(5000)
    assert _ids(await tail.read()) == [f"call-{n}" for n in range(1, 11)]
    assert tail.skipped == 0
    assert _ids(await tail.read()) == [f"call-{n}" for n in range(11, 21)]  # the second full page: jump
    assert tail.skipped == 4980
    log.append(1)
    assert _ids(await tail.read()) == ["call-5001"]
