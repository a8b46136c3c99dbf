"""Pending consolidation fragments: what happened to an Ori while it held a higher tier.

The seed's de-escalation hands the biography the fine-grained state an Ori accumulated at high
fidelity, to be folded into durable events with a no-state-loss report. The kernel keeps, per agent
above Atropos, the sparse moments worth remembering: cognition results merged, loop/drift guard
stamps, and (for Clotho agents) the changes of the action it took, folded into runs, each with its
tick. A consolidation request carries them and clears them. Bounded per agent (oldest dropped
first, and the hand-over says how many), deterministic (a function of the tick's inputs and state),
and part of the kernel snapshot.

Each moment is serialized as its protobuf fragment when it happens, so the cost is spread over the
ticks that produce the moments; a hand-over, which can be a crowd of Ori leaving the screen on one
tick, spells out each agent's one open run and appends every fragment, named, to its request in one
parse of their wire bytes (no message is built, copied or merged per fragment on that tick).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from google.protobuf import json_format, struct_pb2
from numpy.typing import NDArray

from egbe.v1 import action_pb2, biography_pb2, common_pb2, kernel_pb2
from kernel_service.agent_state import guard_bits, guard_names
from kernel_service.wire_bytes import field_tag, length_delimited
from services.errors import FieldViolation

FRAGMENT_SCHEMA = "egbe.moirai.fragment.1"
# Enum names by number, looked up per fragment on the tick path (cheaper than Enum.Name).
_ACTION: dict[int, str] = {value: name for name, value in action_pb2.ActionKind.items()}
_SOURCE: dict[int, str] = {value: name for name, value in action_pb2.ActionSource.items()}
_TIER: dict[int, str] = {value: name for name, value in common_pb2.CognitionTier.items()}
_ACTION_NUMBER = {name: value for value, name in _ACTION.items()}
_SOURCE_NUMBER = {name: value for value, name in _SOURCE.items()}
_TIER_NUMBER = {name: value for value, name in _TIER.items()}


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
        kinds = {_ACTION[kind]: int(counts[kind]) for kind in present}
        return {
            "text": "acted: " + ", ".join(f"{name} x{count}" for name, count in kinds.items()),
            "template": True,
            "moment": "action",
            "action_kind": _ACTION[int(t.kind[row])],
            "source": _SOURCE[int(t.source[row])],
            "goal_ref": int(t.goal_ref[row]),
            "priority": int(t.priority[row]),
            "tier": _TIER[common_pb2.COGNITION_TIER_CLOTHO],
            "changes": sum(kinds.values()),
            "kinds": kinds,
            "last_tick": int(t.last_tick[row]),
        }

    def fragment(self) -> bytes:
        first_tick = int(self.table.first_tick[self.row])
        return _built(biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, first_tick, self.payload())


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
        self.kind[row] = _ACTION_NUMBER[payload["action_kind"]]
        self.source[row] = _SOURCE_NUMBER[payload["source"]]
        self.goal_ref[row] = int(payload["goal_ref"])
        self.priority[row] = int(payload["priority"])
        self.last_tick[row] = int(payload["last_tick"])
        for name, count in payload["kinds"].items():
            self.counts[row, _ACTION_NUMBER[name]] = int(count)
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
            "tier": _TIER[self.stamp.tier],
            "count": self.count,
            "last_tick": self.last_tick,
        }

    def fragment(self) -> bytes:
        return _built(biography_pb2.ORI_EVENT_KIND_REFLECTED, self.first_tick, self.payload())

    @classmethod
    def from_payload(cls, tick: int, payload: dict[str, Any]) -> GuardRun:
        """Inverse of `payload`; a stamp from before runs were counted is a run of one."""
        run = cls(tick, GuardStamp(guard_bits(payload["guards"]), _TIER_NUMBER[payload["tier"]]))
        run.count = int(payload.get("count", 1))
        run.last_tick = int(payload.get("last_tick", tick))
        return run


Run = ActionRun | GuardRun
# (sequence, the moment's fragment without its id as deterministic wire bytes, or an open run).
# Open runs sit at the end of an agent's moments: an action run, a guard run, or a guard run
# followed by an action run (a new guard stamp closes the action run before it).
Moment = tuple[int, bytes | Run]


def _set_value(value: struct_pb2.Value, item: Any) -> None:
    """One JSON-like item into a Struct value, field by field: `Struct.update` walks the same tree
    in Python through generic helpers and costs several times more per key."""
    if isinstance(item, str):
        value.string_value = item
    elif isinstance(item, bool):
        value.bool_value = item
    elif isinstance(item, int | float):
        value.number_value = item
    elif isinstance(item, dict):
        _fill(value.struct_value, item)
    else:
        values = value.list_value.values
        for element in item:
            _set_value(values.add(), element)


def _fill(struct: struct_pb2.Struct, payload: dict[str, Any]) -> None:
    fields = struct.fields
    for key, item in payload.items():
        _set_value(fields[key], item)


def _built(kind: int, tick: int, payload: dict[str, Any]) -> bytes:
    fragment = biography_pb2.ConsolidationFragment(
        kind=biography_pb2.OriEventKind.ValueType(kind), world_tick=tick
    )
    _fill(fragment.payload, {"schema": FRAGMENT_SCHEMA, **payload})
    return fragment.SerializeToString(deterministic=True)


# Wire tags (field number, wire type 2: length-delimited) of the two fields a hand-over writes as bytes.
_FRAGMENT_ID_TAG = field_tag(biography_pb2.ConsolidationFragment.FRAGMENT_ID_FIELD_NUMBER, 2)
_REQUEST_FRAGMENTS_TAG = field_tag(action_pb2.LifecycleRequest.FRAGMENTS_FIELD_NUMBER, 2)


def _named_bytes(ori_id: str, moment: Moment) -> bytes:
    """The moment's fragment under its id, as wire bytes: a field appended to a message's bytes
    sets it when they are parsed."""
    sequence, kept = moment
    body = kept if isinstance(kept, bytes) else kept.fragment()
    return body + length_delimited(_FRAGMENT_ID_TAG, f"{ori_id}:fragment:{sequence}".encode())


def _named(ori_id: str, moment: Moment) -> biography_pb2.ConsolidationFragment:
    return biography_pb2.ConsolidationFragment.FromString(_named_bytes(ori_id, moment))


def _moment(
    fragment: biography_pb2.ConsolidationFragment, *, reopen: bool, slot: int, actions: ActionRunTable
) -> Moment:
    """Inverse of `_named`; a run the snapshot held open is `reopen`ed, to keep folding as it would have."""
    sequence = int(fragment.fragment_id.rsplit(":", 1)[1])
    if reopen:
        payload = json_format.MessageToDict(fragment.payload)
        if payload["moment"] == "action":
            return sequence, actions.reopen(slot, fragment.world_tick, payload)
        return sequence, GuardRun.from_payload(fragment.world_tick, payload)
    kept = biography_pb2.ConsolidationFragment()
    kept.CopyFrom(fragment)
    kept.ClearField("fragment_id")
    return sequence, kept.SerializeToString(deterministic=True)


def _open_runs(fragments: Sequence[biography_pb2.ConsolidationFragment]) -> set[int]:
    """Which of a snapshot's fragments were open runs: the trailing action or guard run, and a guard
    run just before a trailing action run."""
    kinds = [fragment.payload.fields["moment"].string_value for fragment in fragments[-2:]]
    last = len(fragments) - 1
    if not kinds or kinds[-1] not in ("action", "guard"):
        return set()
    if kinds == ["guard", "action"]:
        return {last - 1, last}
    return {last}


class _Pending:
    """One agent's moments awaiting hand-over."""

    __slots__ = ("elided", "moments", "next_sequence")

    def __init__(self, limit: int) -> None:
        self.moments: deque[Moment] = deque(maxlen=limit)
        self.elided = 0
        self.next_sequence = 0


class FragmentStore:
    """Per-slot bounded fragment queues; slots with nothing pending hold no entry."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending: dict[int, _Pending] = {}
        # Each listed slot's open action run (also in its moments), indexed by slot: a Clotho
        # crowd's action changes extend their runs in one numpy pass.
        self._actions = ActionRunTable()
        # Compact form of the commonest state, for slots with no `_pending` entry: nothing but one
        # open guard run. A stale-goal wave over a large population opens and counts these in numpy,
        # with no Python object per Ori; anything else that happens to the slot promotes it first.
        self._listed = np.zeros(0, np.bool_)  # the slot has a `_pending` entry
        self._guard_bits = np.zeros(0, np.uint8)  # 0 = no compact open run
        self._guard_tier = np.zeros(0, np.uint8)
        self._guard_first = np.zeros(0, np.uint64)
        self._guard_last = np.zeros(0, np.uint64)
        self._guard_count = np.zeros(0, np.uint32)

    def __len__(self) -> int:
        return sum(len(p.moments) for p in self._pending.values()) + int(np.count_nonzero(self._guard_bits))

    def reserve(self, slots: int) -> None:
        """Size the per-slot arrays for `slots` agents now. The kernel calls this as its population
        grows, so no tick pays for growing them: at a million agents, growing on the first guard
        wave to reach a new highest slot cost 60-140 ms (tens of MB allocated, zeroed and copied)."""
        self._grow(slots)
        self._actions.grow_slots(slots)

    def _grow(self, slots: int) -> None:
        if slots <= len(self._listed):
            return
        size = max(slots, 2 * len(self._listed))
        for name in ("_listed", "_guard_bits", "_guard_tier", "_guard_first", "_guard_last", "_guard_count"):
            old = getattr(self, name)
            grown = np.zeros(size, old.dtype)
            grown[: len(old)] = old
            setattr(self, name, grown)

    def _compact_run(self, slot: int) -> GuardRun | None:
        """The slot's compact open guard run as the object it stands for, if it has one."""
        if slot >= len(self._guard_bits) or not self._guard_bits[slot]:
            return None
        run = GuardRun(
            int(self._guard_first[slot]), GuardStamp(int(self._guard_bits[slot]), int(self._guard_tier[slot]))
        )
        run.count, run.last_tick = int(self._guard_count[slot]), int(self._guard_last[slot])
        return run

    def _promote(self, slot: int) -> None:
        """Move a compact open guard run into the slot's `_pending` entry (the same moment, sequence 0)."""
        run = self._compact_run(slot)
        if run is not None:
            self._guard_bits[slot] = 0
            self._add(slot, run)

    def pending(self, slot: int, ori_id: str) -> list[biography_pb2.ConsolidationFragment]:
        """A slot's fragments as they would be handed over now (without the elided note)."""
        self._promote(slot)
        entry = self._pending.get(slot)
        return [_named(ori_id, moment) for moment in entry.moments] if entry else []

    def _entry(self, slot: int) -> _Pending:
        entry = self._pending.get(slot)
        if entry is None:
            entry = self._pending[slot] = _Pending(self.limit)
            self._grow(slot + 1)
            self._listed[slot] = True
        return entry

    def _add(
        self, slot: int, kept: bytes | Run, *, closes: tuple[type[Run], ...] = (ActionRun, GuardRun)
    ) -> None:
        """Append a moment, first closing (spelling out) the open runs of the `closes` types."""
        entry = self._entry(slot)
        moments = entry.moments
        for index in range(max(-2, -len(moments)), 0):
            sequence, moment = moments[index]
            if isinstance(moment, closes):
                moments[index] = (sequence, moment.fragment())
                if isinstance(moment, ActionRun):
                    self._actions.close(moment)
        if len(moments) == self.limit:
            entry.elided += 1
            dropped = moments[0][1]
            if isinstance(dropped, ActionRun):  # the bound drops the open run itself
                self._actions.close(dropped)
        moments.append((entry.next_sequence, kept))
        entry.next_sequence += 1

    def _open(self, slot: int, run: type[Run]) -> Run | None:
        """The slot's open run of that type, if any (open runs are the last two moments at most)."""
        self._promote(slot)
        entry = self._pending.get(slot)
        moments = entry.moments if entry is not None else ()
        for index in range(max(-2, -len(moments)), 0):
            moment = moments[index][1]
            if isinstance(moment, run):
                return moment
        return None

    def record_merged(
        self, tick: int, results: Sequence[action_pb2.ActionIntent], tiers: NDArray[np.uint8]
    ) -> None:
        """A cognition result merged into an Ori above Atropos is a decision it made at high fidelity."""
        for intent in results:
            tier = int(tiers[intent.slot])
            if tier == common_pb2.COGNITION_TIER_ATROPOS:
                continue
            kind = _ACTION[intent.kind]
            payload: dict[str, Any] = {
                "text": f"decided {kind} by cognition",
                "template": True,
                "moment": "cognition-result",
                "action_kind": kind,
                "goal_ref": intent.goal_ref,
                "priority": intent.priority,
                "tier": _TIER[tier],
            }
            run_id = intent.payload.fields.get("run_id") if intent.HasField("payload") else None
            if run_id is not None and run_id.string_value:
                payload["run_id"] = run_id.string_value
            self._promote(intent.slot)
            self._add(intent.slot, _built(biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, tick, payload))

    def record_guards(
        self, tick: int, slots: NDArray[np.uint32], bits: NDArray[np.uint8], tiers: NDArray[np.uint8]
    ) -> None:
        """A loop/drift guard that rewrote an Ori's action above Atropos: the Ori caught itself.

        A guard can fire for most of a population on one tick, so Atropos rows are dropped in numpy,
        and slots with nothing else pending open or count their compact run in numpy; a repeat of
        the Ori's open stamp only counts."""
        stamped_tiers = tiers[slots]
        above = stamped_tiers != common_pb2.COGNITION_TIER_ATROPOS
        slots, bits, stamped_tiers = slots[above], bits[above], stamped_tiers[above]
        if len(slots) == 0:
            return
        self._grow(int(slots.max()) + 1)
        unlisted = ~self._listed[slots]
        open_bits = self._guard_bits[slots]
        repeat = (
            unlisted & (open_bits == bits) & (self._guard_tier[slots] == stamped_tiers) & (open_bits != 0)
        )
        fresh = unlisted & (open_bits == 0)
        repeated = slots[repeat]
        self._guard_count[repeated] += np.uint32(1)
        self._guard_last[repeated] = tick
        opened = slots[fresh]
        self._guard_bits[opened] = bits[fresh]
        self._guard_tier[opened] = stamped_tiers[fresh]
        self._guard_first[opened] = tick
        self._guard_last[opened] = tick
        self._guard_count[opened] = 1
        rest = ~(repeat | fresh)
        for slot, guard, tier in zip(
            slots[rest].tolist(), bits[rest].tolist(), stamped_tiers[rest].tolist(), strict=True
        ):
            stamp = GuardStamp(guard, tier)
            run = self._open(slot, GuardRun)
            if isinstance(run, GuardRun) and run.stamp == stamp:
                run.extend(tick)
            else:
                self._add(slot, GuardRun(tick, stamp))

    def record_actions(self, tick: int, slots: NDArray[np.intp], fields: dict[str, NDArray[Any]]) -> None:
        """Each change of a Clotho agent's answered action (the kernel passes only those slots),
        folded into the agent's open run of action changes, or opening one."""
        if len(slots) == 0:
            return
        self._grow(int(slots.max()) + 1)
        for slot in slots[self._guard_bits[slots] != 0].tolist():
            self._promote(slot)
        actions = self._actions
        actions.grow_slots(len(self._listed))
        rows = actions.row_of[slots]
        if int(rows.min()) < 0:  # a slot without an open run opens one (its first change goes in below)
            for slot in slots[rows < 0].tolist():
                self._add(slot, actions.open(slot, tick), closes=())
            rows = actions.row_of[slots]
        actions.extend(
            rows,
            tick,
            kind=fields["out_kind"][slots],
            source=fields["out_source"][slots],
            goal_ref=fields["out_goal_ref"][slots],
            priority=fields["out_priority"][slots],
        )

    def take_into(self, request: action_pb2.LifecycleRequest, tick: int) -> None:
        """Hand over and clear the request's slot's fragments, appended to it in one parse; a leading
        fragment names any dropped to the bound."""
        self._promote(request.slot)
        entry = self._pending.pop(request.slot, None)
        if entry is None:
            return
        self._listed[request.slot] = False
        ori_id = request.ori.ori_id
        named = [_named_bytes(ori_id, moment) for moment in entry.moments]
        if (run := self._actions.run_of(request.slot)) is not None:
            self._actions.close(run)  # spelled out above
        if entry.elided:
            first_tick = (
                biography_pb2.ConsolidationFragment.FromString(named[0]).world_tick if named else tick
            )
            elided = biography_pb2.ConsolidationFragment(
                fragment_id=f"{ori_id}:elided:{entry.next_sequence}",
                kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
                world_tick=first_tick,
            )
            _fill(
                elided.payload,
                {
                    "schema": FRAGMENT_SCHEMA,
                    "text": f"{entry.elided} earlier moments at this tier were not kept",
                    "template": True,
                    "moment": "elided",
                    "elided": entry.elided,
                    "bound": self.limit,
                },
            )
            named.insert(0, elided.SerializeToString(deterministic=True))
        request.MergeFromString(b"".join(length_delimited(_REQUEST_FRAGMENTS_TAG, body) for body in named))
        # The sequence survives the hand-over so ids stay unique for the Ori's next stint.
        if entry.next_sequence:
            self._entry(request.slot).next_sequence = entry.next_sequence

    def snapshot(self, ori_ids: Sequence[str]) -> list[kernel_pb2.PendingFragments]:
        """Every slot's moments; a compact open guard run is written as the run it stands for."""
        entries = [
            kernel_pb2.PendingFragments(
                slot=slot,
                fragments=[_named(ori_ids[slot], moment) for moment in p.moments],
                elided=p.elided,
                next_sequence=p.next_sequence,
            )
            for slot, p in self._pending.items()
        ]
        for slot in np.flatnonzero(self._guard_bits).tolist():
            run = self._compact_run(slot)
            assert run is not None  # the slot's bits are set
            entries.append(
                kernel_pb2.PendingFragments(
                    slot=slot, fragments=[_named(ori_ids[slot], (0, run))], next_sequence=1
                )
            )
        return sorted(entries, key=lambda entry: entry.slot)

    def restore_violations(
        self, entries: Sequence[kernel_pb2.PendingFragments], agents: int
    ) -> list[FieldViolation]:
        """What keeps a snapshot's pending fragments from fitting a population of `agents`."""
        violations = []
        seen: set[int] = set()
        for index, entry in enumerate(entries):
            field = f"snapshot.pending_fragments[{index}]"
            if entry.slot >= agents or entry.slot in seen:
                violations.append(FieldViolation(f"{field}.slot", f"unknown or repeated slot {entry.slot}"))
            if len(entry.fragments) > self.limit:
                violations.append(FieldViolation(f"{field}.fragments", f"holds more than {self.limit}"))
            for i, fragment in enumerate(entry.fragments):
                sequence = fragment.fragment_id.rsplit(":", 1)[-1]
                if not sequence.isdigit() or int(sequence) >= entry.next_sequence:
                    violations.append(
                        FieldViolation(
                            f"{field}.fragments[{i}].fragment_id", "not a fragment this kernel numbered"
                        )
                    )
            seen.add(entry.slot)
        return violations

    def restore(self, entries: Sequence[kernel_pb2.PendingFragments]) -> None:
        """Inverse of snapshot (every slot restored in the listed form); the caller checked
        `restore_violations` first."""
        self._pending = {}
        self._actions = ActionRunTable()
        self._guard_bits[:] = 0
        self._listed[:] = False
        if entries:
            self._grow(max(entry.slot for entry in entries) + 1)
        for entry in entries:
            pending = _Pending(self.limit)
            reopen = _open_runs(entry.fragments)
            pending.moments.extend(
                _moment(fragment, reopen=index in reopen, slot=entry.slot, actions=self._actions)
                for index, fragment in enumerate(entry.fragments)
            )
            pending.elided = entry.elided
            pending.next_sequence = entry.next_sequence
            self._pending[entry.slot] = pending
            self._listed[entry.slot] = True
