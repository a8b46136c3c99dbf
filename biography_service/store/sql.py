"""The SQL both backends speak: schema migrations, statements (`?` placeholders) and row decoding."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from biography_service.errors import CorruptEvent
from biography_service.events import EventKind, RecordedEvent
from biography_service.projections import (
    ArcUpsert,
    IdentityUpsert,
    IdentityValuesPrune,
    MemoryRow,
    PersonalityRow,
    ProjectionOp,
    RelationshipUpsert,
    ValueUpsert,
)

# Ends a CREATE TABLE whose primary key is its access path: on SQLite the rows then live in the key's
# B-tree (no rowid table beside an index of the key); PostgreSQL has no such clause and drops it.
WITHOUT_ROWID = " WITHOUT ROWID"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    only: str | None = None  # the one backend the change concerns; the other records it as done

    def statements_for(self, backend: str) -> tuple[str, ...]:
        """The statements as `backend` ("sqlite" or "postgres") runs them."""
        if self.only is not None and self.only != backend:
            return ()
        if backend == "sqlite":
            return self.statements
        return tuple(statement.removesuffix(WITHOUT_ROWID) for statement in self.statements)


def _keyed_by_position(table: str, columns: str, ref_column_types: str) -> tuple[str, ...]:
    """Rebuild a per-event projection table (one row per event or consolidated fragment, named by
    `ref`) keyed by its place in the Ori's log, (ori_id, stream_version, seq), instead of (ori_id, ref).

    An event's row has its event id as ref, which is random: keyed by it, every append dirtied a leaf
    page of that index per event (a third of the WAL written per event, docs/performance.md). Keyed by
    position, an Ori's rows are appended at the end of its key range, and the key is also the recency
    order the snapshot reads (the separate recency index goes). An event id never repeats (events'
    own unique constraint), so only fragment rows, which a later consolidation may fold again, keep a
    unique ref: a partial index the folded upsert names as its conflict target.
    """
    return (
        f"CREATE TABLE {table}_by_position ("
        " ori_id TEXT NOT NULL, stream_version BIGINT NOT NULL, seq BIGINT NOT NULL,"
        f" ref TEXT NOT NULL, folded BIGINT NOT NULL, {ref_column_types},"
        f" PRIMARY KEY (ori_id, stream_version, seq)){WITHOUT_ROWID}",
        # A row is folded when the event at its place is a consolidation.
        f"INSERT INTO {table}_by_position (ori_id, stream_version, seq, ref, folded, {columns})"  # noqa: S608
        f" SELECT p.ori_id, p.stream_version, p.seq, p.ref, COALESCE((SELECT 1 FROM events e"
        " WHERE e.ori_id = p.ori_id AND e.stream_version = p.stream_version"
        f" AND e.kind = 'Consolidated'), 0), {columns} FROM {table} p",
        f"DROP TABLE {table}",
        f"ALTER TABLE {table}_by_position RENAME TO {table}",
        f"CREATE UNIQUE INDEX {table}_folded_ref ON {table} (ori_id, ref) WHERE folded = 1",
    )


EVENT_COLUMNS = (
    "event_id, ori_id, stream_version, global_position, kind, payload, world_tick,"
    " recorded_at_us, provenance_ref, previous_hash, hash"
)

MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ( version BIGINT PRIMARY KEY, description TEXT NOT NULL)"
)

# Append-only: a later schema change is a new Migration, never an edit of an applied one.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "event log, global head, projections",
        (
            # (ori_id, stream_version) as primary key: two writers can never both hold a version.
            "CREATE TABLE events ("
            " ori_id TEXT NOT NULL,"
            " stream_version BIGINT NOT NULL,"
            " global_position BIGINT NOT NULL UNIQUE,"
            " event_id TEXT NOT NULL UNIQUE,"
            " kind TEXT NOT NULL,"
            " payload TEXT NOT NULL,"
            " world_tick BIGINT NOT NULL,"
            " recorded_at_us BIGINT NOT NULL,"
            " provenance_ref TEXT NOT NULL,"
            " previous_hash TEXT NOT NULL,"
            " hash TEXT NOT NULL,"
            " PRIMARY KEY (ori_id, stream_version))",
            # One row whose lock serializes appends, so global positions commit in order with no gap.
            "CREATE TABLE log_head (id BIGINT PRIMARY KEY CHECK (id = 1), position BIGINT NOT NULL)",
            "INSERT INTO log_head (id, position) VALUES (1, 0)",
            "CREATE TABLE memories ("
            " ori_id TEXT NOT NULL, ref TEXT NOT NULL, stream_version BIGINT NOT NULL, seq BIGINT NOT NULL,"
            " text TEXT NOT NULL, salience_bp BIGINT NOT NULL, world_tick BIGINT NOT NULL,"
            " PRIMARY KEY (ori_id, ref))",
            "CREATE INDEX memories_recent ON memories (ori_id, stream_version, seq)",
            "CREATE TABLE relationships ("
            " ori_id TEXT NOT NULL, other_ori_id TEXT NOT NULL,"
            " bond BIGINT NOT NULL, respect BIGINT NOT NULL,"
            " summary TEXT NOT NULL, ended BIGINT NOT NULL, stream_version BIGINT NOT NULL,"
            " PRIMARY KEY (ori_id, other_ori_id))",
            "CREATE TABLE arcs ("
            " ori_id TEXT NOT NULL, arc_ref TEXT NOT NULL, status TEXT NOT NULL,"
            " stream_version BIGINT NOT NULL, PRIMARY KEY (ori_id, arc_ref))",
            "CREATE TABLE personality_events ("
            " ori_id TEXT NOT NULL, ref TEXT NOT NULL, stream_version BIGINT NOT NULL, seq BIGINT NOT NULL,"
            " summary TEXT NOT NULL, PRIMARY KEY (ori_id, ref))",
            "CREATE TABLE ori_values ("
            " ori_id TEXT NOT NULL, value_ref TEXT NOT NULL, weight_bp BIGINT NOT NULL,"
            " stream_version BIGINT NOT NULL, PRIMARY KEY (ori_id, value_ref))",
        ),
    ),
    Migration(
        2,
        "personality events indexed by recency",
        # Rehydration takes the most recent personality events; without this index it sorted all of
        # an Ori's (a 10,000-event Ori: 2,000 rows, ~1.3 ms of SQLite per Rehydrate).
        ("CREATE INDEX personality_recent ON personality_events (ori_id, stream_version, seq)",),
    ),
    Migration(
        3,
        "memories and personality events keyed by log position",
        (
            *_keyed_by_position(
                "memories",
                "text, salience_bp, world_tick",
                "text TEXT NOT NULL, salience_bp BIGINT NOT NULL, world_tick BIGINT NOT NULL",
            ),
            *_keyed_by_position("personality_events", "summary", "summary TEXT NOT NULL"),
        ),
    ),
    Migration(
        4,
        "SQLite: events stored by global position",
        (
            # The global position becomes the rowid (exactly `INTEGER PRIMARY KEY`): the table's own
            # B-tree is then the $all order, and the separate unique index of positions, one more
            # B-tree insert per event, goes. PostgreSQL keeps its heap and its unique index as they are.
            "CREATE TABLE events_by_position ("
            " global_position INTEGER PRIMARY KEY,"
            " ori_id TEXT NOT NULL,"
            " stream_version BIGINT NOT NULL,"
            " event_id TEXT NOT NULL UNIQUE,"
            " kind TEXT NOT NULL,"
            " payload TEXT NOT NULL,"
            " world_tick BIGINT NOT NULL,"
            " recorded_at_us BIGINT NOT NULL,"
            " provenance_ref TEXT NOT NULL,"
            " previous_hash TEXT NOT NULL,"
            " hash TEXT NOT NULL,"
            " UNIQUE (ori_id, stream_version))",
            f"INSERT INTO events_by_position ({EVENT_COLUMNS})"  # noqa: S608
            f" SELECT {EVENT_COLUMNS} FROM events ORDER BY global_position",
            "DROP TABLE events",
            "ALTER TABLE events_by_position RENAME TO events",
        ),
        only="sqlite",
    ),
    Migration(
        5,
        "PostgreSQL: event ids as uuid",
        # 16 bytes compared as bytes, where text took 37 and a collation-aware comparison: the unique
        # index every append probes and grows at a random place is half the size. Ids reach the store
        # as canonical UUID strings (wire.py) and are read back as text (postgres.py), so nothing else
        # changes.
        ("ALTER TABLE events ALTER COLUMN event_id TYPE uuid USING event_id::uuid",),
        only="postgres",
    ),
    Migration(
        6,
        "identities, values set by an identity, memories folded by their text",
        (
            "CREATE TABLE identities ("
            " ori_id TEXT NOT NULL PRIMARY KEY, identity_version BIGINT NOT NULL, identity TEXT NOT NULL,"
            f" stream_version BIGINT NOT NULL){WITHOUT_ROWID}",
            "ALTER TABLE ori_values ADD COLUMN identity_stream_version BIGINT",
            "ALTER TABLE memories ADD COLUMN text_key TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE memories ADD COLUMN copies BIGINT NOT NULL DEFAULT 1",
            # Rows projected before: the nearest key SQL can compute on both backends (new rows collapse
            # inner whitespace too, projections.memory_key).
            "UPDATE memories SET text_key = lower(trim(text))",
        ),
    ),
)

# Statements below interpolate only constant column lists and placeholder counts, never input.

INSERT_EVENT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"  # noqa: S608
STREAM_HEAD = "SELECT stream_version, hash FROM events WHERE ori_id = ? ORDER BY stream_version DESC LIMIT 1"
LOG_HEAD = "SELECT position FROM log_head WHERE id = 1"
SET_LOG_HEAD = "UPDATE log_head SET position = ? WHERE id = 1"
READ_FORWARD = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE ori_id = ? AND stream_version >= ?"  # noqa: S608
    " ORDER BY stream_version LIMIT ?"
)
READ_BACKWARD = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE ori_id = ? AND stream_version <= ?"  # noqa: S608
    " ORDER BY stream_version DESC LIMIT ?"
)
READ_ALL = (
    f"SELECT {EVENT_COLUMNS} FROM events WHERE global_position >= ?"  # noqa: S608
    " ORDER BY global_position LIMIT ?"
)


# Ids bound in one `IN (...)` query (events_by_ids, identity_heads): well under every backend's limit
# on bound parameters.
IDS_PER_QUERY = 500


def events_by_ids(count: int) -> str:
    marks = ", ".join("?" * count)
    return f"SELECT {EVENT_COLUMNS} FROM events WHERE event_id IN ({marks})"  # noqa: S608


def read_all_for(ori_count: int) -> str:
    """$all restricted to some streams."""
    marks = ", ".join("?" * ori_count)
    return (
        f"SELECT {EVENT_COLUMNS} FROM events WHERE global_position >= ? AND ori_id IN ({marks})"  # noqa: S608
        " ORDER BY global_position LIMIT ?"
    )


# Each kind's stored name by member: a dict lookup, where `.value` is a descriptor call per event.
_KIND_NAMES = {kind: kind.value for kind in EventKind}


def event_row(event: RecordedEvent, payload_json: str) -> tuple[Any, ...]:
    """The event's row in EVENT_COLUMNS order (the tuple unpacked at once: built for every event)."""
    (
        event_id,
        ori_id,
        stream_version,
        position,
        kind,
        _,
        world_tick,
        recorded_at_us,
        provenance,
        previous,
        digest,
    ) = event
    return (
        event_id,
        ori_id,
        stream_version,
        position,
        _KIND_NAMES[kind],
        payload_json,
        world_tick,
        recorded_at_us,
        provenance,
        previous,
        digest,
    )


def decode_event(row: Sequence[Any]) -> RecordedEvent:
    try:
        return _decode(row)
    except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        raise CorruptEvent(str(row[1]), int(row[2]), str(exc)) from exc


def _decode(row: Sequence[Any]) -> RecordedEvent:
    payload = json.loads(row[5])
    if not isinstance(payload, dict):
        raise TypeError("payload is not a JSON object")
    return RecordedEvent(
        event_id=row[0],
        ori_id=row[1],
        stream_version=int(row[2]),
        global_position=int(row[3]),
        kind=EventKind(row[4]),
        payload=payload,
        world_tick=int(row[6]),
        recorded_at_us=int(row[7]),
        provenance_ref=row[8],
        previous_hash=row[9],
        hash=row[10],
    )


MEMORY_COLUMNS = "ori_id, ref, stream_version, seq, text, salience_bp, world_tick, text_key, copies, folded"
# An event's own memory: a new row (its place and its ref, the event id, are new).
INSERT_MEMORY = f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"  # noqa: S608
# A consolidated fragment's: folding a fragment again moves its row to the new place.
_UPSERT_FOLDED_MEMORY = (
    f"{INSERT_MEMORY} ON CONFLICT (ori_id, ref) WHERE folded = 1 DO UPDATE SET"
    " stream_version = excluded.stream_version, seq = excluded.seq, text = excluded.text,"
    " salience_bp = excluded.salience_bp, world_tick = excluded.world_tick,"
    " text_key = excluded.text_key, copies = excluded.copies"
)
# Absent bond/respect/summary keep the values already projected.
_UPSERT_RELATIONSHIP = (
    "INSERT INTO relationships (ori_id, other_ori_id, bond, respect, summary, ended, stream_version)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (ori_id, other_ori_id) DO UPDATE SET"
    " bond = COALESCE(?, relationships.bond), respect = COALESCE(?, relationships.respect),"
    " summary = COALESCE(?, relationships.summary), ended = excluded.ended,"
    " stream_version = excluded.stream_version"
)
_UPSERT_ARC = (
    "INSERT INTO arcs (ori_id, arc_ref, status, stream_version) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (ori_id, arc_ref) DO UPDATE SET status = excluded.status,"
    " stream_version = excluded.stream_version"
)
_INSERT_PERSONALITY = (
    "INSERT INTO personality_events (ori_id, ref, stream_version, seq, summary, folded)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_UPSERT_FOLDED_PERSONALITY = (
    f"{_INSERT_PERSONALITY} ON CONFLICT (ori_id, ref) WHERE folded = 1 DO UPDATE SET"
    " stream_version = excluded.stream_version, seq = excluded.seq, summary = excluded.summary"
)
_UPSERT_VALUE = (
    "INSERT INTO ori_values (ori_id, value_ref, weight_bp, stream_version, identity_stream_version)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (ori_id, value_ref) DO UPDATE SET weight_bp = excluded.weight_bp,"
    " stream_version = excluded.stream_version, identity_stream_version = excluded.identity_stream_version"
)
# Runs after the group's value upserts (its statement is first seen after theirs): it removes only rows
# an identity older than its own set, so running it late gives what running it in log order gives.
_PRUNE_IDENTITY_VALUES = "DELETE FROM ori_values WHERE ori_id = ? AND identity_stream_version < ?"
_UPSERT_IDENTITY = (
    "INSERT INTO identities (ori_id, identity_version, identity, stream_version) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (ori_id) DO UPDATE SET identity_version = excluded.identity_version,"
    " identity = excluded.identity, stream_version = excluded.stream_version"
)


# The ops whose parameters are the Ori id followed by the op's own fields, in column order.
_UPSERTS: dict[type, str] = {
    ArcUpsert: _UPSERT_ARC,
    ValueUpsert: _UPSERT_VALUE,
    IdentityValuesPrune: _PRUNE_IDENTITY_VALUES,
    IdentityUpsert: _UPSERT_IDENTITY,
}
# Rows of one event or fragment each: the statement for an event's own row and for a folded fragment's.
_ROWS: dict[type, tuple[str, str]] = {
    MemoryRow: (INSERT_MEMORY, _UPSERT_FOLDED_MEMORY),
    PersonalityRow: (_INSERT_PERSONALITY, _UPSERT_FOLDED_PERSONALITY),
}


def projection_statements(ori_id: str, ops: Sequence[ProjectionOp]) -> dict[str, list[tuple[Any, ...]]]:
    """Parameter rows per statement, in op order within each statement (each statement owns one table)."""
    grouped: dict[str, list[tuple[Any, ...]]] = {}
    for op in ops:
        kind = type(op)
        rows_statements = _ROWS.get(kind)
        if rows_statements is not None:
            statement, params = rows_statements[cast(MemoryRow | PersonalityRow, op).folded], (ori_id, *op)
        elif kind is RelationshipUpsert:
            statement, params = _relationship(ori_id, cast(RelationshipUpsert, op))
        else:
            statement, params = _UPSERTS[kind], (ori_id, *op)
        rows = grouped.get(statement)
        if rows is None:
            grouped[statement] = [params]
        else:
            rows.append(params)
    return grouped


def _relationship(ori_id: str, op: RelationshipUpsert) -> tuple[str, tuple[Any, ...]]:
    return _UPSERT_RELATIONSHIP, (
        ori_id,
        op.other_ori_id,
        op.bond or 0,
        op.respect or 0,
        op.summary or "",
        int(op.ended),
        op.stream_version,
        op.bond,
        op.respect,
        op.summary,
    )


SNAPSHOT_TOTALS = (
    "SELECT"
    " (SELECT MAX(stream_version) FROM events WHERE ori_id = ?),"
    " (SELECT COUNT(DISTINCT text_key) FROM memories WHERE ori_id = ?),"
    " (SELECT COUNT(*) FROM relationships WHERE ori_id = ? AND ended = 0),"
    " (SELECT COUNT(*) FROM arcs WHERE ori_id = ? AND status = 'active'),"
    " (SELECT COUNT(*) FROM personality_events WHERE ori_id = ?),"
    " (SELECT COUNT(*) FROM ori_values WHERE ori_id = ?)"
)
# Among the most recent rows, the rows of one fact (one text_key) fold into one: the newest row's ref,
# text and tick, the highest salience, and how many repeats it stands for.
SNAPSHOT_MEMORIES = (
    "SELECT ref, text, salience_bp, world_tick, copies FROM"
    " (SELECT ref, text, world_tick, stream_version, seq,"
    "  MAX(salience_bp) OVER (PARTITION BY text_key) AS salience_bp,"
    "  SUM(copies) OVER (PARTITION BY text_key) AS copies,"
    "  ROW_NUMBER() OVER (PARTITION BY text_key ORDER BY stream_version DESC, seq DESC) AS newest"
    "  FROM (SELECT ref, text, salience_bp, world_tick, stream_version, seq, text_key, copies"
    "   FROM memories WHERE ori_id = ? ORDER BY stream_version DESC, seq DESC LIMIT ?) AS recent"
    " ) AS folded"
    " WHERE newest = 1 ORDER BY salience_bp DESC, stream_version DESC, seq DESC LIMIT ?"
)
SNAPSHOT_RELATIONSHIPS = (
    "SELECT other_ori_id, bond, respect, summary FROM relationships WHERE ori_id = ? AND ended = 0"
    " ORDER BY ABS(bond) + ABS(respect) DESC, stream_version DESC, other_ori_id LIMIT ?"
)
SNAPSHOT_ARCS = (
    "SELECT arc_ref FROM arcs WHERE ori_id = ? AND status = 'active'"
    " ORDER BY stream_version DESC, arc_ref LIMIT ?"
)
SNAPSHOT_PERSONALITY = (
    "SELECT summary FROM personality_events WHERE ori_id = ? ORDER BY stream_version DESC, seq DESC LIMIT ?"
)
SNAPSHOT_IDENTITY = "SELECT identity_version, identity FROM identities WHERE ori_id = ?"
SNAPSHOT_VALUES = (
    "SELECT value_ref, weight_bp FROM ori_values WHERE ori_id = ? ORDER BY weight_bp DESC, value_ref LIMIT ?"
)


def identity_heads(ori_count: int) -> str:
    """Each listed stream that exists: its last version and its latest identity (NULLs when none)."""
    marks = ", ".join("?" * ori_count)
    return (
        "SELECT h.ori_id, h.version, i.identity_version, i.identity, i.stream_version FROM"  # noqa: S608
        f" (SELECT ori_id, MAX(stream_version) AS version FROM events WHERE ori_id IN ({marks})"
        " GROUP BY ori_id) AS h LEFT JOIN identities i ON i.ori_id = h.ori_id"
    )
