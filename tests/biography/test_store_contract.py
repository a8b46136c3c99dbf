"""The store contract: every test here runs against SQLite and PostgreSQL (see conftest.BACKENDS)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg
import pytest

from biography_service.chain import GENESIS_HASH, chain_hash
from biography_service.config import BiographyConfig
from biography_service.errors import EventIdConflict, WrongExpectedVersion
from biography_service.events import ANY, NO_STREAM, STREAM_EXISTS, EventKind, NewEvent, canonical_json, exact
from biography_service.rehydration import LoadBudget
from biography_service.service import Biography
from biography_service.store.base import BiographyStore
from tests.biography.events_for_tests import event, memories, memory


async def test_first_append_starts_the_stream_at_version_zero_and_position_one(biography: Biography) -> None:
    result = await biography.append("ori-a", NO_STREAM, memories(3))
    assert (result.last_version, result.first_global_position, result.last_global_position) == (2, 1, 3)
    assert not result.already_recorded
    page = await biography.read("ori-a", None, 10)
    assert [e.stream_version for e in page.events] == [0, 1, 2]
    assert page.events[0].previous_hash == GENESIS_HASH
    assert [e.previous_hash for e in page.events[1:]] == [e.hash for e in page.events[:-1]]
    assert page.next_from is None


@pytest.mark.parametrize(
    ("expected", "actual_before"),
    [(NO_STREAM, 1), (STREAM_EXISTS, None), (exact(0), 1), (exact(5), 1), (exact(0), None)],
)
async def test_expected_version_mismatch_is_refused_with_the_actual_version_and_writes_nothing(
    biography: Biography, expected: object, actual_before: int | None
) -> None:
    if actual_before is not None:
        await biography.append("ori-a", NO_STREAM, memories(actual_before + 1))
    with pytest.raises(WrongExpectedVersion) as caught:
        await biography.append("ori-a", expected, memories(2))  # type: ignore[arg-type]
    assert caught.value.actual == actual_before
    assert await biography.store.stream_version("ori-a") == actual_before
    assert len((await biography.read("$all", 0, 100)).events) == (actual_before or -1) + 1


@pytest.mark.parametrize("expected", [ANY, STREAM_EXISTS, exact(1)])
async def test_matching_expected_versions_append(biography: Biography, expected: object) -> None:
    await biography.append("ori-a", NO_STREAM, memories(2))
    result = await biography.append("ori-a", expected, memories(1))  # type: ignore[arg-type]
    assert result.last_version == 2


async def test_repeating_an_append_is_idempotent_and_writes_nothing_twice(biography: Biography) -> None:
    batch = memories(3)
    first = await biography.append("ori-a", NO_STREAM, batch)
    await biography.append("ori-b", ANY, memories(2))
    again = await biography.append("ori-a", NO_STREAM, batch)
    assert again.already_recorded
    assert (again.last_version, again.first_global_position, again.last_global_position) == (
        first.last_version,
        first.first_global_position,
        first.last_global_position,
    )
    assert len((await biography.read("$all", 0, 100)).events) == 5
    # ANY also recognises the repeat; EXACT at the original position too.
    assert (await biography.append("ori-a", ANY, batch)).already_recorded
    assert (await biography.append("ori-a", exact(1), batch[2:])).already_recorded
    # Recorded, but not where this call expects: ALREADY_EXISTS, never a version conflict that a retry
    # under the actual version would meet again.
    with pytest.raises(EventIdConflict) as caught:
        await biography.append("ori-a", exact(2), batch[2:])
    assert caught.value.event_id == batch[2].event_id
    assert str(caught.value) == (
        f"event {batch[2].event_id}: already recorded at version 2,"
        " where expected version 2 does not place it"
    )


async def test_repeat_with_exact_expected_version_at_the_original_position(biography: Biography) -> None:
    await biography.append("ori-a", NO_STREAM, memories(2))
    batch = memories(2)
    await biography.append("ori-a", exact(1), batch)
    assert (await biography.append("ori-a", exact(1), batch)).already_recorded
    with pytest.raises(EventIdConflict):
        await biography.append("ori-a", exact(0), batch)
    assert len((await biography.read("$all", 0, 100)).events) == 4


async def test_a_repeat_of_the_streams_first_event_under_exact_zero_already_exists(
    biography: Biography,
) -> None:
    first = memories(1)
    await biography.append("ori-a", NO_STREAM, first)
    before = (await biography.read("ori-a", 0, 100)).events
    # EXACT 0 says "the stream ends at version 0", which the recorded event made true: retrying under
    # the actual version (0) would be refused the same way for ever, so this is no version conflict.
    with pytest.raises(EventIdConflict) as caught:
        await biography.append("ori-a", exact(0), first)
    assert caught.value.event_id == first[0].event_id
    assert (await biography.read("ori-a", 0, 100)).events == before


async def test_same_ids_with_different_content_are_refused(biography: Biography) -> None:
    batch = memories(2)
    await biography.append("ori-a", NO_STREAM, batch)
    rewritten = NewEvent(
        batch[1].event_id, batch[1].kind, {"text": "rewritten", "salience_bp": 1}, batch[1].world_tick
    )
    changed = [batch[0], rewritten]
    with pytest.raises(EventIdConflict) as caught:
        await biography.append("ori-a", ANY, changed)
    assert caught.value.event_id == batch[1].event_id
    with pytest.raises(EventIdConflict):
        await biography.append("ori-b", ANY, batch)  # same ids in another stream
    with pytest.raises(EventIdConflict):
        await biography.append("ori-a", ANY, [batch[0], memory("new")])  # partly recorded
    assert len((await biography.read("$all", 0, 100)).events) == 2


async def test_an_append_is_atomic(biography: Biography) -> None:
    """A batch whose last event collides is refused whole: its earlier events are not written either."""
    recorded = memory("first")
    await biography.append("ori-a", NO_STREAM, [recorded])
    with pytest.raises(EventIdConflict):
        await biography.append("ori-b", NO_STREAM, [memory("x"), memory("y"), recorded])
    assert await biography.store.stream_version("ori-b") is None
    assert [e.ori_id for e in (await biography.read("$all", 0, 10)).events] == ["ori-a"]


async def test_global_positions_are_gap_free_across_streams(biography: Biography) -> None:
    for i in range(6):
        await biography.append(f"ori-{i % 3}", ANY, memories(i % 2 + 1))
    everything = (await biography.read("$all", 0, 100)).events
    assert [e.global_position for e in everything] == list(range(1, len(everything) + 1))


async def test_reads_paginate_forward_backward_and_over_all(biography: Biography) -> None:
    await biography.append("ori-a", NO_STREAM, memories(7))
    await biography.append("ori-b", NO_STREAM, memories(3))
    versions: list[int] = []
    start: int | None = None
    while True:
        page = await biography.read("ori-a", start, 3)
        versions += [e.stream_version for e in page.events]
        if page.next_from is None:
            break
        start = page.next_from
    assert versions == list(range(7))
    backward = await biography.read("ori-a", None, 4, backward=True)
    assert [e.stream_version for e in backward.events] == [6, 5, 4, 3]
    rest = await biography.read("ori-a", backward.next_from, 4, backward=True)
    assert [e.stream_version for e in rest.events] == [2, 1, 0]
    assert rest.next_from is None
    positions = await biography.read("$all", 5, 4)
    assert [e.global_position for e in positions.events] == [5, 6, 7, 8]
    assert positions.next_from == 9
    only_b = await biography.store.read_all(0, 100, ["ori-b"])
    assert [e.ori_id for e in only_b] == ["ori-b"] * 3


async def test_events_round_trip_every_field(biography: Biography) -> None:
    proposed = event(
        EventKind.RELATIONSHIP_CHANGED,
        {"other_ori_id": "ori-b", "bond": 12, "nested": {"list": [1, "two", None, True]}},
        tick=42,
    )
    proposed = proposed._replace(provenance_ref="bundle:7")
    await biography.append("ori-a", NO_STREAM, [proposed])
    (stored,) = (await biography.read("ori-a", None, 1)).events
    assert stored.same_content(proposed)
    assert stored.recorded_at_us > 0


@pytest.mark.parametrize(
    "text",
    [
        'quote " backslash \\ slash /',
        "tab\tnewline\n\u2028\u0001",
        "accents é, CJK 漢字, emoji 🦉",
        "\\u0041 literal",
    ],
)
async def test_text_fields_round_trip_exactly_and_chain_intact(biography: Biography, text: str) -> None:
    """Every text column reaches storage unchanged (PostgreSQL receives a group's rows as one JSON
    document, so JSON's own escapes must not leak into the stored text or the hashed payload)."""
    proposed = memory(text)._replace(provenance_ref=text)
    await biography.append(f"ori {text}", NO_STREAM, [proposed])
    (stored,) = (await biography.read(f"ori {text}", None, 1)).events
    assert stored.same_content(proposed)
    assert stored.payload["text"] == text
    assert (await biography.verify_chain(f"ori {text}")).intact
    (recent,) = (await biography.store.snapshot(f"ori {text}", limit=5, memory_window=5)).memories
    assert recent.text == text


async def test_verify_chain_reports_intact_streams(biography: Biography) -> None:
    await biography.append("ori-a", NO_STREAM, memories(120))  # more than one verification page
    report = await biography.verify_chain("ori-a")
    assert report.intact
    assert report.events_checked == 120
    assert (await biography.verify_chain("nobody")).events_checked == 0


async def _tamper(biography: Biography, backend: str, statement: str, params: tuple[object, ...]) -> None:
    """Change a row behind the service's back, directly in the database."""
    if backend == "sqlite":
        path: Path = biography.store._path  # type: ignore[attr-defined]
        with sqlite3.connect(path) as connection:
            connection.execute(statement, params)
        return
    dsn: str = biography.store._dsn  # type: ignore[attr-defined]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute(statement.replace("?", "%s"), params)


@pytest.mark.parametrize(
    ("statement", "params", "broken"),
    [
        (
            "UPDATE events SET payload = ? WHERE ori_id = 'ori-a' AND stream_version = 3",
            ('{"text":"forged"}',),
            3,
        ),
        ("UPDATE events SET world_tick = 999 WHERE ori_id = 'ori-a' AND stream_version = ?", (5,), 5),
        ("UPDATE events SET payload = ? WHERE ori_id = 'ori-a' AND stream_version = 2", ("not json",), 2),
        ("DELETE FROM events WHERE ori_id = 'ori-a' AND stream_version = ?", (4,), 4),
    ],
)
async def test_verify_chain_names_the_first_tampered_version(
    biography: Biography, backend: str, statement: str, params: tuple[object, ...], broken: int
) -> None:
    await biography.append("ori-a", NO_STREAM, memories(8))
    await biography.append("ori-b", NO_STREAM, memories(2))
    await _tamper(biography, backend, statement, params)
    report = await biography.verify_chain("ori-a")
    assert not report.intact
    assert report.first_broken_version == broken
    assert report.events_checked == broken
    assert (await biography.verify_chain("ori-b")).intact


@pytest.mark.parametrize("forged", [2, 4])  # mid-stream, and the stream's last event
async def test_a_forged_row_with_a_recomputed_hash_but_a_broken_link_is_not_intact(
    biography: Biography, backend: str, forged: int
) -> None:
    await biography.append("ori-a", NO_STREAM, memories(5))
    original = (await biography.read("ori-a", forged, 1)).events[0]
    # The forger rewrites the row and recomputes its own hash correctly; only the link gives it away.
    row = original._replace(payload={"text": "forged"}, previous_hash="f" * 64)
    row = row._replace(hash=chain_hash(row))
    await _tamper(
        biography,
        backend,
        "UPDATE events SET payload = ?, previous_hash = ?, hash = ?"
        " WHERE ori_id = 'ori-a' AND stream_version = ?",
        (canonical_json(row.payload), row.previous_hash, row.hash, forged),
    )
    assert (await biography.read("ori-a", forged, 1)).events == [row]
    report = await biography.verify_chain("ori-a")
    assert (report.intact, report.first_broken_version, report.events_checked) == (False, forged, forged)
    assert report.detail == "previous_hash does not match the hash of the version before"


async def test_migrations_run_once_and_a_reopened_store_keeps_its_events(store_factory: object) -> None:
    first: BiographyStore = store_factory()  # type: ignore[operator]
    await first.open()
    await first.append("ori-a", NO_STREAM, memories(2))
    await first.close()
    again: BiographyStore = store_factory()  # type: ignore[operator]
    await again.open()
    try:
        assert await again.stream_version("ori-a") == 1
        assert (await again.append("ori-a", exact(1), memories(1))).last_global_position == 3
    finally:
        await again.close()


async def test_projections_follow_the_log_in_the_same_transaction(biography: Biography) -> None:
    await biography.append(
        "ori-a",
        NO_STREAM,
        [
            memory("low", 100),
            memory("high", 9000),
            event(EventKind.RELATIONSHIP_CHANGED, {"other_ori_id": "ori-b", "bond": 40, "respect": 10}),
            event(
                EventKind.RELATIONSHIP_CHANGED, {"other_ori_id": "ori-c", "bond": 5, "summary": "met once"}
            ),
            event(EventKind.RELATIONSHIP_CHANGED, {"other_ori_id": "ori-b", "respect": 30}),
            event(EventKind.RELATIONSHIP_CHANGED, {"other_ori_id": "ori-d", "bond": 90}),
            event(EventKind.RELATIONSHIP_CHANGED, {"other_ori_id": "ori-d", "ended": True}),
            event(EventKind.ARC_ADVANCED, {"arc_ref": "arc:harvest"}),
            event(EventKind.GOAL_ARC_ADVANCED, {"arc_ref": "goal:forge", "status": "active"}),
            event(EventKind.ARC_ADVANCED, {"arc_ref": "arc:old", "status": "completed"}),
            event(EventKind.PERSONALITY_EVENT, {"summary": "grew braver"}),
            event(EventKind.VALUE_SHIFT, {"value_ref": "value:loyalty", "weight_bp": 7000}),
            event(EventKind.VALUE_SHIFT, {"value_ref": "value:thrift", "weight_bp": 8000}),
            event(EventKind.VALUE_SHIFT, {"value_ref": "value:loyalty", "weight_bp": 9000}),
            event(EventKind.DIRECTIVE_REFUSED, {"directive": "sell the farm"}),
        ],
    )
    snap = await biography.store.snapshot("ori-a", limit=10, memory_window=100)
    assert snap.stream_version == 14
    assert [m.text for m in snap.memories] == ["high", "low"]
    assert [(r.other_ori_id, r.bond, r.respect, r.summary) for r in snap.relationships] == [
        ("ori-b", 40, 30, ""),
        ("ori-c", 5, 0, "met once"),
    ]
    assert snap.arc_refs == ["goal:forge", "arc:harvest"]
    assert snap.personality_events == ["grew braver"]
    assert [(v.value_ref, v.weight_bp) for v in snap.values] == [
        ("value:loyalty", 9000),
        ("value:thrift", 8000),
    ]
    assert snap.totals == {
        "memories": 2,
        "relationships": 2,
        "arc_refs": 2,
        "personality_events": 1,
        "values": 2,
    }


async def test_a_refused_append_leaves_the_projections_untouched(biography: Biography) -> None:
    await biography.append("ori-a", NO_STREAM, [memory("kept")])
    with pytest.raises(WrongExpectedVersion):
        await biography.append("ori-a", NO_STREAM, [memory("dropped", 9999)])
    snap = await biography.store.snapshot("ori-a", limit=10, memory_window=10)
    assert [m.text for m in snap.memories] == ["kept"]


async def test_recent_memories_are_ranked_by_salience_within_the_recent_window(biography: Biography) -> None:
    await biography.append("ori-a", NO_STREAM, [memory("ancient but vivid", 10_000)])
    await biography.append("ori-a", ANY, [memory(f"recent {i}", 1000 + i) for i in range(5)])
    snap = await biography.store.snapshot("ori-a", limit=3, memory_window=5)
    assert [m.text for m in snap.memories] == ["recent 4", "recent 3", "recent 2"]
    assert snap.totals["memories"] == 6


async def test_rehydrate_fits_the_budget_and_reports_what_it_left_out(biography: Biography) -> None:
    await biography.append(
        "ori-a",
        NO_STREAM,
        [
            *[memory(f"memory number {i}", 100 * i) for i in range(20)],
            *[
                event(EventKind.RELATIONSHIP_CHANGED, {"other_ori_id": f"ori-{i}", "bond": i})
                for i in range(5)
            ],
            event(EventKind.ARC_ADVANCED, {"arc_ref": "arc:main"}),
        ],
    )
    roomy = await biography.rehydrate("ori-a", LoadBudget(max_events=100, max_chars=100_000))
    assert roomy.omitted == {}
    assert len(roomy.memories) == 20
    tight = await biography.rehydrate("ori-a", LoadBudget(max_events=6, max_chars=100_000))
    assert tight.arc_refs == ["arc:main"]
    # Sections take turns, best-first: arc, relationship, memory, relationship, memory, relationship.
    assert [r.other_ori_id for r in tight.relationships] == ["ori-4", "ori-3", "ori-2"]
    assert [m.text for m in tight.memories] == ["memory number 19", "memory number 18"]
    assert tight.omitted == {"memories": 18, "relationships": 2}
    by_chars = await biography.rehydrate("ori-a", LoadBudget(max_events=100, max_chars=200))
    assert by_chars.chars_used <= 200
    assert sum(by_chars.omitted.values()) == 26 - (
        len(by_chars.memories) + len(by_chars.relationships) + len(by_chars.arc_refs)
    )


async def test_concurrent_appends_to_one_stream_conflict_instead_of_interleaving(
    biography: Biography,
) -> None:
    await biography.append("ori-a", NO_STREAM, memories(1))
    outcomes = await asyncio.gather(
        *(biography.append("ori-a", exact(0), memories(2)) for _ in range(5)), return_exceptions=True
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(o, WrongExpectedVersion) for o in outcomes if o not in winners)
    assert await biography.store.stream_version("ori-a") == 2


async def test_a_store_whose_last_append_was_followed_by_another_writer_places_after_it(
    store_factory: object,
) -> None:
    """Two stores on one database (two processes): what one store learnt from its own appends (the
    SQLite writer keeps stream heads and the log position between groups) must yield to the other's."""
    first: BiographyStore = store_factory()  # type: ignore[operator]
    other: BiographyStore = store_factory()  # type: ignore[operator]
    await first.open()
    await other.open()
    try:
        await first.append("ori-a", NO_STREAM, memories(2))
        await other.append("ori-a", exact(1), memories(3))
        result = await first.append("ori-a", ANY, memories(2))
        assert (result.last_version, result.first_global_position, result.last_global_position) == (6, 6, 7)
        await other.append("ori-a", exact(6), memories(1))
        with pytest.raises(WrongExpectedVersion) as caught:
            await first.append("ori-a", exact(6), memories(1))
        assert caught.value.actual == 7
        checked = Biography(first, BiographyConfig())
        report = await checked.verify_chain("ori-a")
        assert report.intact
        assert report.events_checked == 8
    finally:
        await first.close()
        await other.close()
