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
from typing import Any

import numpy as np
from google.protobuf import json_format
from numpy.typing import NDArray

from egbe.v1 import action_pb2, biography_pb2, common_pb2, kernel_pb2
from kernel_service.fragment_runs import (
    ACTION_NAMES,
    FRAGMENT_SCHEMA,
    TIER_NAMES,
    ActionRun,
    ActionRunTable,
    GuardRun,
    GuardStamp,
    Run,
    built_fragment,
    fill_struct,
)
from kernel_service.wire_bytes import field_tag, length_delimited
from services.errors import FieldViolation, InvalidArgument

# (sequence, the moment's fragment without its id as deterministic wire bytes, or an open run).
# Open runs sit at the end of an agent's moments: an action run, a guard run, or a guard run
# followed by an action run (a new guard stamp closes the action run before it).
Moment = tuple[int, bytes | Run]


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
            kind = ACTION_NAMES[intent.kind]
            payload: dict[str, Any] = {
                "text": f"decided {kind} by cognition",
                "template": True,
                "moment": "cognition-result",
                "action_kind": kind,
                "goal_ref": intent.goal_ref,
                "priority": intent.priority,
                "tier": TIER_NAMES[tier],
            }
            run_id = intent.payload.fields.get("run_id") if intent.HasField("payload") else None
            if run_id is not None and run_id.string_value:
                payload["run_id"] = run_id.string_value
            self._promote(intent.slot)
            self._add(intent.slot, built_fragment(biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, tick, payload))

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
            fill_struct(
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

    def restored(self, entries: Sequence[kernel_pb2.PendingFragments], agents: int) -> FragmentStore:
        """A new store holding `entries` (this one unchanged), or InvalidArgument naming what keeps
        them from fitting a population of `agents` or what in an open run cannot be read back."""
        violations = self.restore_violations(entries, agents)
        if violations:
            raise InvalidArgument(violations)
        store = FragmentStore(self.limit)
        try:
            store.restore(entries)
        except (KeyError, ValueError, TypeError, OverflowError, AttributeError, IndexError) as exc:
            raise InvalidArgument.field(
                "snapshot.pending_fragments", f"an open run this kernel did not write: {exc!r}"
            ) from exc
        return store

    def restore(self, entries: Sequence[kernel_pb2.PendingFragments]) -> None:
        """Inverse of snapshot (every slot restored in the listed form); the caller checked
        `restore_violations` first, and a payload that cannot be read back raises midway (`restored`
        does this on a store of its own)."""
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
