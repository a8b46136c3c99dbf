"""A consolidation fragment's open runs and how a moment becomes its protobuf fragment.

An on-screen Ori can change its action every step, and a goal the world never advances trips the
stale-goal guard every few ticks: each is folded into one open run (`ActionRun`, a row of
`ActionRunTable`, or `GuardRun`) with a count and a span, instead of a moment each, and is spelled
out as one fragment when it is handed over or snapshotted (`fragments.FragmentStore` keeps them).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from google.protobuf import struct_pb2
from numpy.typing import NDArray

from egbe.v1 import action_pb2, biography_pb2, common_pb2
from kernel_service.agent_state import guard_bits, guard_names

FRAGMENT_SCHEMA = "egbe.moirai.fragment.1"
# Enum names by number, looked up per fragment on the tick path (cheaper than Enum.Name).
ACTION_NAMES: dict[int, str] = {value: name for name, value in action_pb2.ActionKind.items()}
SOURCE_NAMES: dict[int, str] = {value: name for name, value in action_pb2.ActionSource.items()}
TIER_NAMES: dict[int, str] = {value: name for name, value in common_pb2.CognitionTier.items()}
ACTION_NUMBERS = {name: value for value, name in ACTION_NAMES.items()}
SOURCE_NUMBERS = {name: value for value, name in SOURCE_NAMES.items()}
TIER_NUMBERS = {name: value for value, name in TIER_NAMES.items()}


class ActionRun:
    """A Clotho agent's run of action changes between its other moments, as the core answered them:
    how many changes, of which kinds, up to which tick, and the latest action. A fallback tree can
    change an on-screen Ori's action every step, so the changes are folded into the run as they
    happen instead of one moment each; the run is spelled out only when handed over or
    snapshotted, and a snapshot restores it as a run.

    The run itself is a row of `ActionRunTable` (this object names the row): a crowd of Clotho Ori
    changing actions on one tick extends all their runs in one numpy pass, not one call each."""

    __slots__ = ("row", "table")

    def __init__(self, table: ActionRunTable, row: int) -> None:
        self.table = table
        self.row = row

    def payload(self) -> dict[str, Any]:
        t, row = self.table, self.row
        counts = t.counts[row]
        present = np.flatnonzero(counts).tolist()
        kinds = {ACTION_NAMES[kind]: int(counts[kind]) for kind in present}
        return {
            "text": "acted: " + ", ".join(f"{name} x{count}" for name, count in kinds.items()),
            "template": True,
            "moment": "action",
            "action_kind": ACTION_NAMES[int(t.kind[row])],
            "source": SOURCE_NAMES[int(t.source[row])],
            "goal_ref": int(t.goal_ref[row]),
            "priority": int(t.priority[row]),
            "tier": TIER_NAMES[common_pb2.COGNITION_TIER_CLOTHO],
            "changes": sum(kinds.values()),
            "kinds": kinds,
            "last_tick": int(t.last_tick[row]),
        }

    def fragment(self) -> bytes:
        first_tick = int(self.table.first_tick[self.row])
        return built_fragment(biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, first_tick, self.payload())


# An ActionRunTable's per-row arrays (the counts are a second, two-dimensional one).
_RUN_COLUMNS: dict[str, type[np.generic]] = {
    "first_tick": np.uint64,
    "last_tick": np.uint64,
    "kind": np.uint8,
    "source": np.uint8,
    "goal_ref": np.uint32,
    "priority": np.uint16,
    "slot": np.int64,
}


class ActionRunTable:
    """Every open action run as one row of arrays, found by slot (`row_of`, -1 = none): the counts
    per ActionKind, the first and last tick, and the latest action. Rows are reused once a run is
    closed; which row a run has never shows in what it hands over."""

    first_tick: NDArray[np.uint64]
    last_tick: NDArray[np.uint64]
    kind: NDArray[np.uint8]
    source: NDArray[np.uint8]
    goal_ref: NDArray[np.uint32]
    priority: NDArray[np.uint16]
    slot: NDArray[np.int64]

    def __init__(self) -> None:
        self.row_of = np.full(0, -1, np.intp)  # intp: numpy indexes fastest with it
        for name, dtype in _RUN_COLUMNS.items():
            setattr(self, name, np.zeros(0, dtype))
        self.counts = np.zeros((0, 256), np.uint32)  # by row, then ActionKind (a uint8 in the arrays)
        self.handles: list[ActionRun | None] = []  # by row
        self._free: list[int] = []

    def grow_slots(self, slots: int) -> None:
        if slots > len(self.row_of):
            grown = np.full(max(slots, 2 * len(self.row_of)), -1, np.intp)
            grown[: len(self.row_of)] = self.row_of
            self.row_of = grown

    def run_of(self, slot: int) -> ActionRun | None:
        """The slot's open action run, if it has one."""
        if slot >= len(self.row_of) or self.row_of[slot] < 0:
            return None
        return self.handles[int(self.row_of[slot])]

    def _row(self) -> int:
        if not self._free:
            rows = len(self.handles)
            size = max(16, 2 * rows)
            for name in _RUN_COLUMNS:
                old = getattr(self, name)
                grown = np.zeros(size, old.dtype)
                grown[:rows] = old
                setattr(self, name, grown)
            counts = np.zeros((size, 256), np.uint32)
            counts[:rows] = self.counts
            self.counts = counts
            self.handles.extend([None] * (size - rows))
            self._free = list(range(size - 1, rows - 1, -1))
        return self._free.pop()

    def open(self, slot: int, tick: int) -> ActionRun:
        """An empty run for the slot from `tick` on (`extend` puts its first change in)."""
        row = self._row()
        self.grow_slots(slot + 1)
        self.row_of[slot] = row
        self.slot[row] = slot
        self.first_tick[row] = self.last_tick[row] = tick
        self.counts[row] = 0
        run = self.handles[row] = ActionRun(self, row)
        return run

    def close(self, run: ActionRun) -> None:
        """Forget the run (spelled out, dropped to the bound, or handed over)."""
        row = run.row
        self.row_of[self.slot[row]] = -1
        self.handles[row] = None
        self._free.append(row)

    def extend(
        self,
        rows: NDArray[np.intp],
        tick: int,
        *,
        kind: NDArray[np.uint8],
        source: NDArray[np.uint8],
        goal_ref: NDArray[np.uint32],
        priority: NDArray[np.uint16],
    ) -> None:
        """Fold one change into each listed run (rows distinct)."""
        self.counts.reshape(-1)[rows * self.counts.shape[1] + kind] += np.uint32(1)
        self.last_tick[rows] = tick
        self.kind[rows] = kind
        self.source[rows] = source
        self.goal_ref[rows] = goal_ref
        self.priority[rows] = priority

    def reopen(self, slot: int, tick: int, payload: dict[str, Any]) -> ActionRun:
        """Inverse of `ActionRun.payload` (a restored snapshot keeps extending the run it held)."""
        run = self.open(slot, tick)
        row = run.row
        self.kind[row] = ACTION_NUMBERS[payload["action_kind"]]
        self.source[row] = SOURCE_NUMBERS[payload["source"]]
        self.goal_ref[row] = int(payload["goal_ref"])
        self.priority[row] = int(payload["priority"])
        self.last_tick[row] = int(payload["last_tick"])
        for name, count in payload["kinds"].items():
            self.counts[row, ACTION_NUMBERS[name]] = int(count)
        return run


class GuardStamp(NamedTuple):
    """Which loop/drift guards rewrote an Ori's action, at which tier."""

    bits: int
    tier: int


class GuardRun:
    """One guard stamp and its repeats while the Ori's only other moments are its action changes: a
    goal the world never advances trips the stale-goal guard every few ticks, and that is one moment
    with a count and a span, not a moment per stamp crowding out the rest of the stint."""

    __slots__ = ("count", "first_tick", "last_tick", "stamp")

    def __init__(self, tick: int, stamp: GuardStamp) -> None:
        self.stamp = stamp
        self.first_tick = self.last_tick = tick
        self.count = 1

    def extend(self, tick: int) -> None:
        self.count += 1
        self.last_tick = tick

    def payload(self) -> dict[str, Any]:
        guards = guard_names(self.stamp.bits)
        repeats = f" x{self.count}" if self.count > 1 else ""
        return {
            "text": f"caught itself: {', '.join(guards)}{repeats}",
            "template": True,
            "moment": "guard",
            "guards": guards,
            "tier": TIER_NAMES[self.stamp.tier],
            "count": self.count,
            "last_tick": self.last_tick,
        }

    def fragment(self) -> bytes:
        return built_fragment(biography_pb2.ORI_EVENT_KIND_REFLECTED, self.first_tick, self.payload())

    @classmethod
    def from_payload(cls, tick: int, payload: dict[str, Any]) -> GuardRun:
        """Inverse of `payload`; a stamp from before runs were counted is a run of one."""
        run = cls(tick, GuardStamp(guard_bits(payload["guards"]), TIER_NUMBERS[payload["tier"]]))
        run.count = int(payload.get("count", 1))
        run.last_tick = int(payload.get("last_tick", tick))
        return run


Run = ActionRun | GuardRun


def set_value(value: struct_pb2.Value, item: Any) -> None:
    """One JSON-like item into a Struct value, field by field: `Struct.update` walks the same tree
    in Python through generic code paths and costs several times more per key."""
    if isinstance(item, str):
        value.string_value = item
    elif isinstance(item, bool):
        value.bool_value = item
    elif isinstance(item, int | float):
        value.number_value = item
    elif isinstance(item, dict):
        fill_struct(value.struct_value, item)
    else:
        values = value.list_value.values
        for element in item:
            set_value(values.add(), element)


def fill_struct(struct: struct_pb2.Struct, payload: dict[str, Any]) -> None:
    fields = struct.fields
    for key, item in payload.items():
        set_value(fields[key], item)


def built_fragment(kind: int, tick: int, payload: dict[str, Any]) -> bytes:
    fragment = biography_pb2.ConsolidationFragment(
        kind=biography_pb2.OriEventKind.ValueType(kind), world_tick=tick
    )
    fill_struct(fragment.payload, {"schema": FRAGMENT_SCHEMA, **payload})
    return fragment.SerializeToString(deterministic=True)
