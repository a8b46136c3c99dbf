"""WatchAudit and the summary view: a watcher gets exactly the records written after its start, in order
and filtered by world; a lagging one reads on from the store; bad fields are named; the console's
windowed reads are audited once a window."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from egbe.v1 import gateway_pb2
from gateway import audit_feed, read_audit
from gateway.audit_feed import AuditFeed
from gateway.operator_servicer import OperatorServicer
from gateway.records import AuditEntry
from gateway.store.rows import AUDIT_TABLE, audit_row
from gateway.store.tx import insert_rows
from services.auth import Role
from tests.gateway.harness import GatewayHarness

SUMMARY = gateway_pb2.AUDIT_RECORD_VIEW_SUMMARY


def feed_of(gateway: GatewayHarness) -> AuditFeed:
    servicer = next(s for _, s in gateway.running.bundle.servicers if isinstance(s, OperatorServicer))
    return servicer.audit_feed


async def next_records(stream: AsyncIterator[gateway_pb2.WatchAuditResponse], count: int) -> list[Any]:
    """The next `count` records the stream pushes, with each message's `lagged` flag beside them."""
    records: list[tuple[gateway_pb2.AuditRecord, bool]] = []
    async with asyncio.timeout(10):
        while len(records) < count:
            message = await anext(stream)
            records += [(record, message.lagged) for record in message.records]
    return records


async def runs(gateway: GatewayHarness, *oris_and_worlds: tuple[str, str]) -> list[str]:
    """A fused run per (ori, world), one after another; their call ids."""
    for ori, world in oris_and_worlds:
        await gateway.run(ori, world=world)
    records = await gateway.audit_records()
    return [r.call_id for r in records[-len(oris_and_worlds) :]]


async def test_a_watcher_gets_the_records_after_its_seq_in_order_of_its_world_only(
    gateway: GatewayHarness,
) -> None:
    await runs(gateway, ("ada", "w1"), ("bram", "w2"), ("cyd", "w1"), ("dell", "w1"))
    written = await gateway.audit_records()
    start = written[0].seq  # ada's: the watch begins after it
    assert [r.seq for r in written] == sorted({r.seq for r in written})
    call = gateway.operator.WatchAudit(
        gateway_pb2.WatchAuditRequest(after_seq=start, world_id="w1"), metadata=gateway.metadata_operator()
    )
    stream = call.__aiter__()
    try:
        backfill = await next_records(stream, 2)
        assert [(r.ori.ori_id, r.seq) for r, _ in backfill] == [
            (r.ori.ori_id, r.seq) for r in written if r.ori.world_id == "w1" and r.seq > start
        ]
        live_ids = await runs(gateway, ("eve", "w2"), ("fay", "w1"), ("gus", "w1"), ("hal", "w2"))
        live = await next_records(stream, 2)
        live_written = [r for r in await gateway.audit_records() if r.call_id in live_ids]
        assert [(r.call_id, r.seq) for r, _ in live] == [
            (r.call_id, r.seq) for r in live_written if r.ori.world_id == "w1"
        ]
        assert all(not lagged for _, lagged in [*backfill, *live])
        pushed = live[0][0]  # the summary view: the figures without the context and the output
        full = next(r for r in live_written if r.call_id == pushed.call_id)
        assert not pushed.HasField("input_context")
        assert pushed.output == ""
        assert full.input_context.fields
        assert full.output
        assert pushed.utterance.startswith("[offline]")
        full.ClearField("input_context")
        full.output = ""
        assert pushed == full
    finally:
        call.cancel()
    for _ in range(250):  # a watcher that goes away frees its queue
        if not feed_of(gateway).watchers:
            break
        await asyncio.sleep(0.02)
    assert feed_of(gateway).watchers == 0


async def test_newest_starts_with_the_last_records_of_the_world(gateway: GatewayHarness) -> None:
    await runs(gateway, ("ada", "w1"), ("bram", "w2"), ("cyd", "w1"), ("dell", "w1"))
    w1 = [r for r in await gateway.audit_records() if r.ori.world_id == "w1"]
    call = gateway.operator.WatchAudit(
        gateway_pb2.WatchAuditRequest(newest=2, world_id="w1"), metadata=gateway.metadata_operator()
    )
    try:
        first = await next_records(call.__aiter__(), 2)
        assert [r.seq for r, _ in first] == [r.seq for r in w1[-2:]]
    finally:
        call.cancel()


async def test_a_watch_opens_at_once_with_where_it_starts(gateway: GatewayHarness) -> None:
    empty = gateway.operator.WatchAudit(
        gateway_pb2.WatchAuditRequest(world_id="w1"), metadata=gateway.metadata_operator()
    )
    async with asyncio.timeout(5):  # (nothing written: the empty opening message, not a silent stream)
        opening = await anext(empty.__aiter__())
    empty.cancel()
    assert (list(opening.records), opening.seq, opening.skipped) == ([], 0, 0)
    await runs(gateway, ("ada", "w1"), ("bram", "w2"))
    last = (await gateway.audit_records())[-1].seq
    caught_up = gateway.operator.WatchAudit(
        gateway_pb2.WatchAuditRequest(world_id="w1", after_seq=last), metadata=gateway.metadata_operator()
    )
    async with asyncio.timeout(5):
        opening = await anext(caught_up.__aiter__())
    caught_up.cancel()
    assert (list(opening.records), opening.seq) == ([], last)


async def test_a_paced_watch_sends_the_newest_records_and_counts_the_rest(gateway: GatewayHarness) -> None:
    call = gateway.operator.WatchAudit(
        gateway_pb2.WatchAuditRequest(world_id="w1", max_records=2, min_interval_ms=2_000),
        metadata=gateway.metadata_operator(),
    )
    stream = call.__aiter__()
    try:
        async with asyncio.timeout(5):
            assert not (await anext(stream)).records  # (the opening message)
        await asyncio.gather(*(gateway.run(ori, world="w1") for ori in ("ada", "bram", "cyd", "dell", "eve")))
        await gateway.run("fay", world="w2")
        async with asyncio.timeout(10):
            paced = await anext(stream)
        written = [r for r in await gateway.audit_records() if r.ori.world_id == "w1"]
        assert [r.call_id for r in paced.records] == [r.call_id for r in written[-2:]]
        assert (paced.skipped, paced.seq) == (3, written[-1].seq)
    finally:
        call.cancel()


async def test_a_lagging_watcher_reads_on_from_the_store_and_misses_nothing(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A watcher's queue holds one batch, and the first live read is handed over twice (before the
    # watcher can take the first): it lags there.
    monkeypatch.setattr(audit_feed, "WATCHER_QUEUE_BATCHES", 1)
    fan_out = AuditFeed._fan_out
    reads: list[int] = []

    def twice(feed: AuditFeed, entries: list[AuditEntry]) -> None:
        fan_out(feed, entries)
        if not reads:
            fan_out(feed, entries)
        reads.append(len(entries))

    monkeypatch.setattr(AuditFeed, "_fan_out", twice)
    await runs(gateway, ("ada", "w1"))
    call = gateway.operator.WatchAudit(gateway_pb2.WatchAuditRequest(), metadata=gateway.metadata_operator())
    stream = call.__aiter__()
    try:
        assert [lagged for _, lagged in await next_records(stream, 1)] == [False]
        ids = await runs(gateway, ("bram", "w1"), ("cyd", "w2"), ("dell", "w1"))
        pushed = await next_records(stream, 3)
        assert [r.call_id for r, _ in pushed] == ids
        assert True in [lagged for _, lagged in pushed]
        assert feed_of(gateway).watchers == 1  # (watching again after reading on from the store)
    finally:
        call.cancel()


async def test_bad_fields_are_refused_naming_them(gateway: GatewayHarness) -> None:
    watches = (
        (gateway_pb2.WatchAuditRequest(after_seq=-1), "after_seq"),
        (gateway_pb2.WatchAuditRequest(newest=1001), "newest"),
        (gateway_pb2.WatchAuditRequest(newest=-1), "newest"),
        (gateway_pb2.WatchAuditRequest(newest=5, after_seq=3), "newest"),
        (gateway_pb2.WatchAuditRequest(world_id="w" * 200), "world_id"),
        (gateway_pb2.WatchAuditRequest(max_records=1001), "max_records"),
        (gateway_pb2.WatchAuditRequest(max_records=-1), "max_records"),
        (gateway_pb2.WatchAuditRequest(min_interval_ms=10_001), "min_interval_ms"),
        (gateway_pb2.WatchAuditRequest(min_interval_ms=-1), "min_interval_ms"),
    )
    for request, field in watches:
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            async for _ in gateway.operator.WatchAudit(
                request, metadata=gateway.metadata_operator(), timeout=5
            ):
                pass
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (invalid.value.details() or "")
    lists = (
        (gateway_pb2.ListAuditRecordsRequest(view=7), "view"),  # type: ignore[arg-type]
        (gateway_pb2.ListAuditRecordsRequest(world_id="w\x001"), "world_id"),
    )
    for list_request, field in lists:
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await gateway.operator.ListAuditRecords(list_request, metadata=gateway.metadata_operator())
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (invalid.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # operators only, as the other audit reads
        async for _ in gateway.operator.WatchAudit(
            gateway_pb2.WatchAuditRequest(), metadata=gateway.metadata(Role.WORLD), timeout=5
        ):
            pass
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_list_filters_by_world_in_the_summary_view(gateway: GatewayHarness) -> None:
    await runs(gateway, ("ada", "w1"), ("bram", "w2"), ("cyd", "w1"))
    full = await gateway.audit_records(world_id="w1")
    summary = await gateway.audit_records(world_id="w1", view=SUMMARY)
    assert [r.ori.ori_id for r in full] == ["ada", "cyd"]
    assert [(r.seq, r.call_id, r.usage, r.cost) for r in summary] == [
        (r.seq, r.call_id, r.usage, r.cost) for r in full
    ]
    assert all(r.output and r.input_context.fields for r in full)
    assert not any(r.output or r.HasField("input_context") for r in summary)


async def test_windowed_reads_are_audited_once_a_window(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read_audit, "READ_WINDOW_SECONDS", 0.5)
    windowed = (
        *gateway.metadata_operator(),
        ("x-egbe-operator", "console"),
        (read_audit.AUDIT_METADATA, read_audit.WINDOWED),
    )
    for _ in range(5):
        await gateway.operator.ListWorlds(gateway_pb2.ListWorldsRequest(), metadata=windowed)
    await asyncio.sleep(0.8)
    await gateway.operator.ListWorlds(gateway_pb2.ListWorldsRequest(), metadata=windowed)
    attempts = await gateway.operator.ListOperatorAttempts(
        gateway_pb2.ListOperatorAttemptsRequest(operator_id="console"), metadata=gateway.metadata_operator()
    )
    assert [(a.method, a.detail.split(" (")[0].split(",")[0]) for a in attempts.attempts] == [
        ("ListWorlds", "reads audited once a 0.5 s window"),
        ("ListWorlds", "4 more ListWorlds reads within 0.5 s"),
        ("ListWorlds", "reads audited once a 0.5 s window"),
    ]


@pytest.mark.parametrize(
    ("intervals", "spacing"), [((), 0.05), ((0.0, 0.25), 0.05), ((0.25, 2.0), 0.25), ((5.0,), 1.0)]
)
def test_the_feed_reads_as_often_as_its_most_eager_watcher_wants(
    intervals: tuple[float, ...], spacing: float
) -> None:
    feed = AuditFeed(store=None)  # type: ignore[arg-type]  # (nothing is read here)
    for interval in intervals:
        feed._watchers.add(audit_feed.AuditWatcher("w1", interval))
    assert feed._spacing() == spacing


async def test_the_feed_numbers_the_records_handed_to_it_and_reads_back_only_the_others(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = feed_of(gateway)._store
    await runs(gateway, ("ada", "w1"))
    [written] = await store.list_audit(limit=1, newest=True)
    read_back: list[int] = []
    list_audit = store.list_audit

    async def counted(**kwargs: Any) -> list[AuditEntry]:
        if kwargs.get("summary"):  # (the feed's reads; `runs` lists the records whole)
            read_back.append(kwargs.get("after_seq", 0))
        return await list_audit(**kwargs)

    call = gateway.operator.WatchAudit(
        gateway_pb2.WatchAuditRequest(after_seq=written.seq), metadata=gateway.metadata_operator()
    )
    stream = call.__aiter__()
    try:
        async with asyncio.timeout(5):
            assert not (await anext(stream)).records  # (the opening message)
        monkeypatch.setattr(store, "list_audit", counted)
        ids = await runs(gateway, ("bram", "w1"), ("cyd", "w2"))
        assert [r.call_id for r, _ in await next_records(stream, 2)] == ids
        assert read_back == []  # the gateway's own records: handed over, numbered, never read back
        # A record this gateway did not write (another's, sharing the database) is read back.
        foreign = dataclasses.replace(written, call_id="written-elsewhere")
        await store.transact(lambda tx: tx_insert(tx, foreign))
        [(pushed, _)] = await next_records(stream, 1)
        assert pushed.call_id == "written-elsewhere"
        assert len(read_back) == 1
    finally:
        call.cancel()


async def tx_insert(tx: Any, entry: AuditEntry) -> None:
    insert_rows(tx, *AUDIT_TABLE, [audit_row(entry)])
