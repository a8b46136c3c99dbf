"""Pending consolidation fragments: what happened to an Ori while it held a higher tier.

The seed's de-escalation hands the biography the fine-grained state an Ori accumulated at high
fidelity, to be folded into durable events with a no-state-loss report. The kernel keeps, per agent
above Atropos, the sparse moments worth remembering: cognition results merged, loop/drift guard
stamps, and (for Clotho agents) the changes of the action it took, folded into runs, each with its
tick. A consolidation request carries them and clears them. Bounded per agent (oldest dropped
first, and the hand-over says how many), deterministic (a function of the tick's inputs and state),
and part of the kernel snapshot.

Each moment is built as its protobuf fragment when it happens, so the cost is spread over the ticks
that produce the moments; a hand-over, which can be a crowd of Ori leaving the screen on one tick,
only names the fragments and spells out each agent's one open run.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from google.protobuf import json_format, struct_pb2
from numpy.typing import NDArray

from egbe.v1 import action_pb2, biography_pb2, common_pb2, kernel_pb2
from kernel_service.agent_state import guard_names
from services.errors import FieldViolation

FRAGMENT_SCHEMA = "egbe.moirai.fragment.1"
# Enum names by number, looked up per fragment on the tick path (cheaper than Enum.Name).
_ACTION: dict[int, str] = {value: name for name, value in action_pb2.ActionKind.items()}
_SOURCE: dict[int, str] = {value: name for name, value in action_pb2.ActionSource.items()}
_TIER: dict[int, str] = {value: name for name, value in common_pb2.CognitionTier.items()}
_ACTION_NUMBER = {name: value for value, name in _ACTION.items()}
_SOURCE_NUMBER = {name: value for value, name in _SOURCE.items()}


class ActionRun:
    """A Clotho agent's run of action changes between its other moments, as the core answered them:
    how many changes, of which kinds, up to which tick, and the latest action. A fallback tree can
    change an on-screen Ori's action every step, so the changes are folded into the run as they
    happen (a handful of integers) instead of one moment each; the run is spelled out only when
    handed over or snapshotted, and a snapshot restores it as a run."""

    __slots__ = ("counts", "first_tick", "goal_ref", "kind", "last_tick", "priority", "source")

    def __init__(self, tick: int, kind: int, source: int, goal_ref: int, priority: int) -> None:
        self.counts: dict[int, int] = {}
        self.first_tick = self.last_tick = tick
        self.kind, self.source, self.goal_ref, self.priority = kind, source, goal_ref, priority
        self.extend(tick, kind, source, goal_ref, priority)

    def extend(self, tick: int, kind: int, source: int, goal_ref: int, priority: int) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.last_tick = tick
        self.kind, self.source, self.goal_ref, self.priority = kind, source, goal_ref, priority

    def payload(self) -> dict[str, Any]:
        kinds = {_ACTION[kind]: count for kind, count in sorted(self.counts.items())}
        return {
            "text": "acted: " + ", ".join(f"{name} x{count}" for name, count in kinds.items()),
            "template": True,
            "moment": "action",
            "action_kind": _ACTION[self.kind],
            "source": _SOURCE[self.source],
            "goal_ref": self.goal_ref,
            "priority": self.priority,
            "tier": _TIER[common_pb2.COGNITION_TIER_CLOTHO],
            "changes": sum(self.counts.values()),
            "kinds": kinds,
            "last_tick": self.last_tick,
        }

    def fragment(self) -> biography_pb2.ConsolidationFragment:
        return _built(biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, self.first_tick, self.payload())

    @classmethod
    def from_payload(cls, tick: int, payload: dict[str, Any]) -> ActionRun:
        """Inverse of `payload` (a restored snapshot keeps extending the run it held)."""
        run = cls(
            tick,
            _ACTION_NUMBER[payload["action_kind"]],
            _SOURCE_NUMBER[payload["source"]],
            int(payload["goal_ref"]),
            int(payload["priority"]),
        )
        run.counts = {_ACTION_NUMBER[name]: int(count) for name, count in payload["kinds"].items()}
        run.last_tick = int(payload["last_tick"])
        return run


class GuardStamp(NamedTuple):
    """A loop/drift guard's stamp on an Ori above Atropos, spelled out only when handed over."""

    bits: int
    tier: int

    def payload(self) -> dict[str, Any]:
        guards = guard_names(self.bits)
        return {
            "text": f"caught itself: {', '.join(guards)}",
            "template": True,
            "moment": "guard",
            "guards": guards,
            "tier": _TIER[self.tier],
        }


# (sequence, the moment's fragment without its id, or the agent's open run of action changes).
Moment = tuple[int, biography_pb2.ConsolidationFragment | ActionRun]


def _built(kind: int, tick: int, payload: dict[str, Any]) -> biography_pb2.ConsolidationFragment:
    fragment = biography_pb2.ConsolidationFragment(
        kind=biography_pb2.OriEventKind.ValueType(kind), world_tick=tick
    )
    fragment.payload.update({"schema": FRAGMENT_SCHEMA, **payload})
    return fragment


@functools.cache
def _guard_payload(stamp: GuardStamp) -> bytes:
    """A guard stamp's payload, serialized once per (guard bits, tier): a guard can fire for a crowd
    at once, and Struct.update is Python while parsing bytes is not."""
    payload = struct_pb2.Struct()
    payload.update({"schema": FRAGMENT_SCHEMA, **stamp.payload()})
    return payload.SerializeToString(deterministic=True)


def _named(ori_id: str, moment: Moment, *, keep: bool = True) -> biography_pb2.ConsolidationFragment:
    """The moment's fragment under its id: a named copy while the store `keep`s the moment, else
    the stored message itself (a hand-over, which is on the tick, copies nothing it need not)."""
    sequence, kept = moment
    if isinstance(kept, ActionRun):
        fragment = kept.fragment()
    elif keep:
        fragment = biography_pb2.ConsolidationFragment()
        fragment.CopyFrom(kept)
    else:
        fragment = kept
    fragment.fragment_id = f"{ori_id}:fragment:{sequence}"
    return fragment


def _moment(fragment: biography_pb2.ConsolidationFragment, *, last: bool) -> Moment:
    """Inverse of `_named`; the last moment, when it is a run of action changes, is open again."""
    sequence = int(fragment.fragment_id.rsplit(":", 1)[1])
    if last and fragment.payload.fields["moment"].string_value == "action":
        payload = json_format.MessageToDict(fragment.payload)
        return sequence, ActionRun.from_payload(fragment.world_tick, payload)
    kept = biography_pb2.ConsolidationFragment()
    kept.CopyFrom(fragment)
    kept.ClearField("fragment_id")
    return sequence, kept


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

    def __len__(self) -> int:
        return sum(len(p.moments) for p in self._pending.values())

    def pending(self, slot: int, ori_id: str) -> list[biography_pb2.ConsolidationFragment]:
        """A slot's fragments as they would be handed over now (without the elided note)."""
        entry = self._pending.get(slot)
        return [_named(ori_id, moment) for moment in entry.moments] if entry else []

    def _add(self, slot: int, kept: biography_pb2.ConsolidationFragment | ActionRun) -> None:
        entry = self._pending.get(slot)
        if entry is None:
            entry = self._pending[slot] = _Pending(self.limit)
        moments = entry.moments
        open_run = moments[-1][1] if moments else None
        if isinstance(open_run, ActionRun):  # a new moment closes the open run
            moments[-1] = (moments[-1][0], open_run.fragment())
        if len(moments) == self.limit:
            entry.elided += 1
        moments.append((entry.next_sequence, kept))
        entry.next_sequence += 1

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
            self._add(intent.slot, _built(biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, tick, payload))

    def record_guards(
        self, tick: int, slots: NDArray[np.uint32], bits: NDArray[np.uint8], tiers: NDArray[np.uint8]
    ) -> None:
        """A loop/drift guard that rewrote an Ori's action above Atropos: the Ori caught itself.

        A guard can fire for most of a population on one tick, so Atropos rows are dropped in numpy
        and each payload is parsed from bytes serialized once per kind of stamp."""
        stamped_tiers = tiers[slots]
        above = stamped_tiers != common_pb2.COGNITION_TIER_ATROPOS
        for slot, guard, tier in zip(
            slots[above].tolist(), bits[above].tolist(), stamped_tiers[above].tolist(), strict=True
        ):
            fragment = biography_pb2.ConsolidationFragment(
                kind=biography_pb2.ORI_EVENT_KIND_REFLECTED, world_tick=tick
            )
            fragment.payload.MergeFromString(_guard_payload(GuardStamp(guard, tier)))
            self._add(slot, fragment)

    def record_actions(self, tick: int, slots: NDArray[np.intp], fields: dict[str, NDArray[Any]]) -> None:
        """Each change of a Clotho agent's answered action (the kernel passes only those slots),
        folded into the agent's open run of action changes, or opening one."""
        pending = self._pending
        for slot, kind, source, goal, priority in zip(
            slots.tolist(),
            fields["out_kind"][slots].tolist(),
            fields["out_source"][slots].tolist(),
            fields["out_goal_ref"][slots].tolist(),
            fields["out_priority"][slots].tolist(),
            strict=True,
        ):
            entry = pending.get(slot)
            last = entry.moments[-1][1] if entry is not None and entry.moments else None
            if isinstance(last, ActionRun):
                last.extend(tick, kind, source, goal, priority)
            else:
                self._add(slot, ActionRun(tick, kind, source, goal, priority))

    def take(self, slot: int, ori_id: str, tick: int) -> list[biography_pb2.ConsolidationFragment]:
        """Hand over and clear a slot's fragments; a leading fragment names any dropped to the bound."""
        entry = self._pending.pop(slot, None)
        if entry is None:
            return []
        fragments = [_named(ori_id, moment, keep=False) for moment in entry.moments]
        if entry.elided:
            elided = biography_pb2.ConsolidationFragment(
                fragment_id=f"{ori_id}:elided:{entry.next_sequence}",
                kind=biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
                world_tick=fragments[0].world_tick if fragments else tick,
            )
            elided.payload.update(
                {
                    "schema": FRAGMENT_SCHEMA,
                    "text": f"{entry.elided} earlier moments at this tier were not kept",
                    "template": True,
                    "moment": "elided",
                    "elided": entry.elided,
                    "bound": self.limit,
                }
            )
            fragments.insert(0, elided)
        # The sequence survives the hand-over so ids stay unique for the Ori's next stint.
        if entry.next_sequence:
            self._pending[slot] = _Pending(self.limit)
            self._pending[slot].next_sequence = entry.next_sequence
        return fragments

    def snapshot(self, ori_ids: Sequence[str]) -> list[kernel_pb2.PendingFragments]:
        return [
            kernel_pb2.PendingFragments(
                slot=slot,
                fragments=[_named(ori_ids[slot], moment) for moment in p.moments],
                elided=p.elided,
                next_sequence=p.next_sequence,
            )
            for slot, p in sorted(self._pending.items())
        ]

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
        """Inverse of snapshot; the caller checked `restore_violations` first."""
        self._pending = {}
        for entry in entries:
            pending = _Pending(self.limit)
            last = len(entry.fragments) - 1
            pending.moments.extend(
                _moment(fragment, last=index == last) for index, fragment in enumerate(entry.fragments)
            )
            pending.elided = entry.elided
            pending.next_sequence = entry.next_sequence
            self._pending[entry.slot] = pending
