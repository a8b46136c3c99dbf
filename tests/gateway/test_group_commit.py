"""How the writer splits a batch into groups (`group_commit._groups`): an order a serial run of the jobs
could have had, with as few groups as that allows, for any mix of posted and waited jobs; and a writer
task stopped by a bug failing its jobs closed at once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.store.group_commit import _groups, _Job
from gateway.store.sqlite import SqliteGatewayStore
from gateway.store.tx import Row, Tx
from services.errors import Unavailable


async def ending(tx: Any, items: list[Any]) -> list[Any]:
    return items


async def admission(tx: Any, items: list[Any]) -> list[Any]:
    return items


COMBINES = {"ending": ending, "admission": admission}
# (combine name, or None for a body of its own; posted: nobody waits for it, only with a combine)
jobs = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(sorted(COMBINES)), st.booleans()),
        st.tuples(st.none(), st.just(False)),
    ),
    max_size=30,
)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def batch_of(loop: asyncio.AbstractEventLoop, kinds: list[tuple[str | None, bool]]) -> list[_Job]:
    return [
        _Job(n, None if posted else loop.create_future(), False, None if name is None else COMBINES[name])
        for n, (name, posted) in enumerate(kinds)
    ]


@given(kinds=jobs)
def test_groups_keep_every_dependency_and_merge_whatever_may_be_merged(
    loop: asyncio.AbstractEventLoop, kinds: list[tuple[str | None, bool]]
) -> None:
    batch = batch_of(loop, kinds)
    groups = _groups(batch)
    where = {job.body: index for index, group in enumerate(groups) for job in group}
    assert sorted(job.body for group in groups for job in group) == list(range(len(batch)))
    for group in groups:
        first = group[0]
        assert all(j.combine is first.combine and (j.future is None) == (first.future is None) for j in group)
        assert first.combine is not None or len(group) == 1
        assert [j.body for j in group] == sorted(j.body for j in group)  # arrival order within
    posted = [job for job in batch if job.future is None]
    for job in posted:  # one group of posted jobs per combine
        assert where[job.body] == min(where[p.body] for p in posted if p.combine is job.combine)
    for job in batch:  # a waited job after every posted job that arrived before it
        if job.future is not None:
            assert all(where[p.body] < where[job.body] for p in posted if p.body < job.body)
    waited_groups: dict[Any, list[int]] = {}
    for index, group in enumerate(groups):
        if group[0].future is not None and group[0].combine is not None:
            waited_groups.setdefault(group[0].combine, []).append(index)
    for indexes in waited_groups.values():  # a second group only where a posted job forced it
        for earlier, later in itertools.pairwise(indexes):
            opened_by = groups[later][0].body
            assert any(p.body < opened_by and where[p.body] >= earlier for p in posted)


def test_endings_interleaved_with_other_writes_are_one_group(loop: asyncio.AbstractEventLoop) -> None:
    batch = batch_of(
        loop,
        [("ending", False), (None, False), ("ending", False), ("admission", True), ("ending", False)],
    )
    assert [[job.body for job in group] for group in _groups(batch)] == [[0, 2], [1], [3], [4]]


class _Escaped(BaseException):
    """Not an Exception: nothing in the writer catches it, as nothing would catch a bug of that kind."""


async def test_a_writer_that_stops_fails_its_jobs_closed_at_once(tmp_path: Path) -> None:
    """The store's deadline is far off: the callers hear of the stopped writer from it, not from a
    timeout; and the store stays closed to new work (unhealthy, so admissions fail closed too)."""
    store = SqliteGatewayStore(tmp_path / "gateway.db", timeout_seconds=600)
    await store.open()
    try:
        running = asyncio.Event()

        async def escape(tx: Tx) -> None:
            running.set()
            await asyncio.sleep(0.05)  # (the next job queues behind this batch meanwhile)
            raise _Escaped

        async def select_one(tx: Tx) -> Row | None:
            return await tx.one("SELECT 1")

        stopping = asyncio.ensure_future(store.transact(escape, durable=False))
        await running.wait()
        queued = asyncio.ensure_future(store.transact(select_one, durable=False))
        for caller in (stopping, queued):
            with pytest.raises(Unavailable, match="_Escaped"):
                await asyncio.wait_for(caller, 60)
        assert not store.healthy
        with pytest.raises(Unavailable, match="writer stopped: _Escaped"):
            await asyncio.wait_for(store.transact(select_one, durable=False), 60)
    finally:
        await store.close()
