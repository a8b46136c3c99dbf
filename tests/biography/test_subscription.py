"""Subscriptions on both backends: catch-up then live, no gap or duplicate, bounded memory, other writers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from biography_service.events import ANY, RecordedEvent
from biography_service.service import Biography
from biography_service.store.base import BiographyStore
from tests.biography.conftest import TEST_CONFIG
from tests.biography.events_for_tests import memories

Delivered = tuple[RecordedEvent, bool]


async def take(stream: AsyncIterator[Delivered], count: int, seconds: float = 20.0) -> list[Delivered]:
    async def collect() -> list[Delivered]:
        got: list[Delivered] = []
        async for item in stream:
            got.append(item)
            if len(got) == count:
                break
        return got

    return await asyncio.wait_for(collect(), seconds)


async def test_catch_up_hands_over_to_live_without_gap_or_duplicate(biography: Biography) -> None:
    # More than a page of history, so catch-up crosses page boundaries.
    for i in range(5):
        await biography.append(f"ori-{i % 2}", ANY, memories(7))
    stream = biography.subscribe(0)
    history = await take(stream, 35)
    writer = asyncio.create_task(_append_while_reading(biography))
    live = await take(stream, 30)
    await writer
    positions = [event.global_position for event, _ in history + live]
    assert positions == list(range(1, 66))
    assert not any(flag for _, flag in history[:32])
    assert all(flag for _, flag in live)
    await stream.aclose()  # type: ignore[attr-defined]


async def _append_while_reading(biography: Biography) -> None:
    for _ in range(10):
        await biography.append("ori-live", ANY, memories(3))
        await asyncio.sleep(0)


async def test_filtered_subscription_starts_from_a_position(biography: Biography) -> None:
    await biography.append("ori-a", ANY, memories(3))
    await biography.append("ori-b", ANY, memories(3))
    await biography.append("ori-a", ANY, memories(3))
    stream = biography.subscribe(3, ["ori-a"])
    got = await take(stream, 4)
    assert [(e.ori_id, e.global_position) for e, _ in got] == [("ori-a", p) for p in (3, 7, 8, 9)]
    await stream.aclose()  # type: ignore[attr-defined]


async def test_a_slow_consumer_holds_at_most_one_page(biography: Biography) -> None:
    """Appends far outpace the consumer; it still receives everything, in order, one page at a time."""
    stream = biography.subscribe(0)
    for _ in range(10):
        await biography.append("ori-a", ANY, memories(20))
    reads: list[int] = []
    original = biography.store.read_all

    async def counting_read_all(*args: object, **kwargs: object) -> list[RecordedEvent]:
        page = await original(*args, **kwargs)  # type: ignore[arg-type]
        reads.append(len(page))
        return page

    biography.store.read_all = counting_read_all  # type: ignore[method-assign]
    got: list[Delivered] = []
    for _ in range(200):
        got += await take(stream, 1)
        await asyncio.sleep(0)
    assert [e.global_position for e, _ in got] == list(range(1, 201))
    assert max(reads) <= TEST_CONFIG.subscription_page_size
    await stream.aclose()  # type: ignore[attr-defined]


async def test_appends_by_another_process_reach_a_live_subscriber(
    biography: Biography, store_factory: object
) -> None:
    other: BiographyStore = store_factory()  # type: ignore[operator]
    await other.open()
    try:
        stream = biography.subscribe(0)
        pending = asyncio.create_task(take(stream, 4))
        await asyncio.sleep(0.05)
        await other.append("ori-x", ANY, memories(4))
        got = await pending
        assert [e.global_position for e, _ in got] == [1, 2, 3, 4]
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await other.close()
