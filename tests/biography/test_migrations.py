"""Databases written by earlier schemas open under the current one with their log, chains and
projections intact (both backends). The old rows are written with the old schema's own statements,
spelled out here, since the store's statements follow the current schema."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from biography_service.appending import AppendPlan, StreamHead, plan_append
from biography_service.config import BiographyConfig
from biography_service.consolidation import Fragment, fold_by_kind
from biography_service.errors import EventIdConflict
from biography_service.events import ANY, EventKind, NewEvent, exact
from biography_service.projections import MemoryRow, PersonalityRow
from biography_service.service import Biography
from biography_service.store import sql
from biography_service.store.base import BiographyStore
from tests.biography.events_for_tests import event, memories, memory

# The version-2 projection writes (the schema the third migration converts).
_V2_MEMORY = (
    "INSERT INTO memories (ori_id, ref, stream_version, seq, text, salience_bp, world_tick)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (ori_id, ref) DO UPDATE SET"
    " stream_version = excluded.stream_version, seq = excluded.seq, text = excluded.text,"
    " salience_bp = excluded.salience_bp, world_tick = excluded.world_tick"
)
_V2_PERSONALITY = (
    "INSERT INTO personality_events (ori_id, ref, stream_version, seq, summary) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (ori_id, ref) DO UPDATE SET stream_version = excluded.stream_version,"
    " seq = excluded.seq, summary = excluded.summary"
)


def _v2_writes(ori_id: str, batches: Sequence[Sequence[NewEvent]]) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements a version-2 store ran for these appends (memories and personality only)."""
    writes: list[tuple[str, tuple[Any, ...]]] = []
    head, position = StreamHead(None), 0
    for batch in batches:
        plan = plan_append(
            ori_id, ANY, batch, head=head, already=[], next_global_position=position + 1, recorded_at_us=7
        )
        assert isinstance(plan, AppendPlan)
        for recorded, payload_json in zip(plan.events, plan.payload_json, strict=True):
            writes.append((sql.INSERT_EVENT, sql.event_row(recorded, payload_json)))
        for op in plan.projection_ops:
            if isinstance(op, MemoryRow):
                writes.append((_V2_MEMORY, (ori_id, *op[:6])))  # the columns before text_key
            else:
                assert isinstance(op, PersonalityRow)
                writes.append((_V2_PERSONALITY, (ori_id, *op[:-1])))
        head, position = (
            StreamHead(plan.events[-1].stream_version, plan.events[-1].hash),
            position + len(batch),
        )
    writes.append((sql.SET_LOG_HEAD, (position,)))
    return writes


async def _execute_directly(store: BiographyStore, writes: list[tuple[str, tuple[Any, ...]]]) -> None:
    if hasattr(store, "_path"):
        with sqlite3.connect(store._path) as connection:
            for statement, params in writes:
                connection.execute(statement, params)
        return
    async with await psycopg.AsyncConnection.connect(store._dsn) as connection:  # type: ignore[attr-defined]
        for statement, params in writes:
            await connection.execute(statement.replace("?", "%s"), params)


def _fragment(fragment_id: str, text: str, tick: int) -> Fragment:
    return Fragment(fragment_id, EventKind.MEMORY_FORMED, {"text": text, "salience_bp": 100 * tick}, tick)


async def test_a_version_2_database_is_upgraded_with_its_log_and_projections(store_factory: object) -> None:
    """The log keeps its order and chains; memories and personality events (event rows and folded
    fragments, one fragment folded twice) keep their ranking; after the upgrade a fragment folded again
    still replaces its row, and a repeated event id is still refused."""
    batches = [
        [memory("first", 3000, tick=1), *memories(2, "m")],
        [event(EventKind.PERSONALITY_EVENT, {"summary": f"grew {i}"}, tick=i) for i in range(4)],
        fold_by_kind("ori-a", "r1", [_fragment("f1", "old f1", 1), _fragment("f2", "f2", 2)]),
        fold_by_kind("ori-a", "r2", [_fragment("f1", "new f1", 9)]),
    ]
    old: BiographyStore = store_factory(migrations=sql.MIGRATIONS[:2])  # type: ignore[operator]
    await old.open()
    await _execute_directly(old, _v2_writes("ori-a", batches))
    await old.close()
    upgraded: BiographyStore = store_factory()  # type: ignore[operator]
    await upgraded.open()
    try:
        biography = Biography(upgraded, BiographyConfig())
        assert (await biography.verify_chain("ori-a")).events_checked == 9
        logged = await upgraded.read_all(1, 100)
        assert [e.event_id for e in logged] == [e.event_id for batch in batches for e in batch]
        assert [e.global_position for e in logged] == list(range(1, 10))
        snapshot = await upgraded.snapshot("ori-a", limit=10, memory_window=10)
        assert [(m.ref, m.text) for m in snapshot.memories] == [
            (batches[0][2].event_id, "m1"),
            (batches[0][1].event_id, "m0"),
            (batches[0][0].event_id, "first"),
            ("f1", "new f1"),
            ("f2", "f2"),
        ]
        assert snapshot.totals["memories"] == 5
        assert snapshot.personality_events == ["grew 3", "grew 2", "grew 1", "grew 0"]
        await biography.consolidate("ori-a", [_fragment("f2", "newer f2", 99)], "r3")
        again = await upgraded.snapshot("ori-a", limit=10, memory_window=10)
        assert again.totals["memories"] == 5
        assert (again.memories[0].ref, again.memories[0].text) == ("f2", "newer f2")
        assert (await upgraded.append("ori-a", exact(9), memories(1, "n"))).last_version == 10
        with pytest.raises(EventIdConflict):
            await upgraded.append("ori-b", ANY, [batches[0][0]])
    finally:
        await upgraded.close()
