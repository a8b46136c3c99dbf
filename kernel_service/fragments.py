"""Pending consolidation fragments: what happened to an Ori while it held a higher tier.

The seed's de-escalation hands the biography the fine-grained state an Ori accumulated at high
fidelity, to be folded into durable events with a no-state-loss report. The kernel keeps, per agent
above Atropos, the sparse moments worth remembering: cognition results merged, loop/drift guard
stamps, and (for Clotho agents) each change of the action it took, each with its tick. A
consolidation request carries them and clears them. Bounded per agent (oldest dropped first, and
the hand-over says how many), deterministic (a function of the tick's inputs and state), and part of
the kernel snapshot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2, biography_pb2, common_pb2, kernel_pb2
from kernel_service.agent_state import GUARD_BIT_REPEATED_ACTION, GUARD_BIT_STALE_GOAL
from services.errors import FieldViolation

FRAGMENT_SCHEMA = "egbe.moirai.fragment.1"
_ACTION = action_pb2.ActionKind
_SOURCE = action_pb2.ActionSource
_TIER = common_pb2.CognitionTier


class _Pending:
    """One agent's fragments awaiting hand-over."""

    __slots__ = ("elided", "fragments", "next_sequence")

    def __init__(self, limit: int) -> None:
        self.fragments: deque[biography_pb2.ConsolidationFragment] = deque(maxlen=limit)
        self.elided = 0
        self.next_sequence = 0


class FragmentStore:
    """Per-slot bounded fragment queues; slots with nothing pending hold no entry."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending: dict[int, _Pending] = {}

    def __len__(self) -> int:
        return sum(len(p.fragments) for p in self._pending.values())

    def pending(self, slot: int) -> Sequence[biography_pb2.ConsolidationFragment]:
        entry = self._pending.get(slot)
        return tuple(entry.fragments) if entry else ()

    def _add(
        self,
        slot: int,
        ori_id: str,
        kind: biography_pb2.OriEventKind.ValueType,
        tick: int,
        payload: dict[str, Any],
    ) -> None:
        entry = self._pending.get(slot)
        if entry is None:
            entry = self._pending[slot] = _Pending(self.limit)
        if len(entry.fragments) == self.limit:
            entry.elided += 1
        fragment = biography_pb2.ConsolidationFragment(
            fragment_id=f"{ori_id}:fragment:{entry.next_sequence}", kind=kind, world_tick=tick
        )
        fragment.payload.update({"schema": FRAGMENT_SCHEMA, **payload})
        entry.next_sequence += 1
        entry.fragments.append(fragment)

    def record_merged(
        self,
        tick: int,
        results: Sequence[action_pb2.ActionIntent],
        tiers: NDArray[np.uint8],
        ori_ids: Sequence[str],
    ) -> None:
        """A cognition result merged into an Ori above Atropos is a decision it made at high fidelity."""
        for intent in results:
            tier = int(tiers[intent.slot])
            if tier == common_pb2.COGNITION_TIER_ATROPOS:
                continue
            kind = _ACTION.Name(intent.kind)
            payload: dict[str, Any] = {
                "text": f"decided {kind} by cognition",
                "template": True,
                "moment": "cognition-result",
                "action_kind": kind,
                "goal_ref": intent.goal_ref,
                "priority": intent.priority,
                "tier": _TIER.Name(_TIER.ValueType(tier)),
            }
            run_id = intent.payload.fields.get("run_id") if intent.HasField("payload") else None
            if run_id is not None and run_id.string_value:
                payload["run_id"] = run_id.string_value
            self._add(
                intent.slot, ori_ids[intent.slot], biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED, tick, payload
            )

    def record_guards(
        self,
        tick: int,
        slots: NDArray[np.uint32],
        bits: NDArray[np.uint8],
        tiers: NDArray[np.uint8],
        ori_ids: Sequence[str],
    ) -> None:
        """A loop/drift guard that rewrote an Ori's action above Atropos: the Ori caught itself."""
        for slot, guard in zip(slots.tolist(), bits.tolist(), strict=True):
            tier = int(tiers[slot])
            if tier == common_pb2.COGNITION_TIER_ATROPOS:
                continue
            guards = [
                name
                for bit, name in (
                    (GUARD_BIT_REPEATED_ACTION, "repeated-action"),
                    (GUARD_BIT_STALE_GOAL, "stale-goal"),
                )
                if guard & bit
            ]
            self._add(
                slot,
                ori_ids[slot],
                biography_pb2.ORI_EVENT_KIND_REFLECTED,
                tick,
                {
                    "text": f"caught itself: {', '.join(guards)}",
                    "template": True,
                    "moment": "guard",
                    "guards": guards,
                    "tier": _TIER.Name(_TIER.ValueType(tier)),
                },
            )

    def record_actions(
        self, tick: int, slots: NDArray[np.intp], fields: dict[str, NDArray[Any]], ori_ids: Sequence[str]
    ) -> None:
        """Each change of a Clotho agent's answered action (the kernel passes only those slots)."""
        for slot, kind, source, goal, priority in zip(
            slots.tolist(),
            fields["out_kind"][slots].tolist(),
            fields["out_source"][slots].tolist(),
            fields["out_goal_ref"][slots].tolist(),
            fields["out_priority"][slots].tolist(),
            strict=True,
        ):
            name = _ACTION.Name(_ACTION.ValueType(kind))
            self._add(
                slot,
                ori_ids[slot],
                biography_pb2.ORI_EVENT_KIND_MEMORY_FORMED,
                tick,
                {
                    "text": f"acted: {name}",
                    "template": True,
                    "moment": "action",
                    "action_kind": name,
                    "source": _SOURCE.Name(_SOURCE.ValueType(source)),
                    "goal_ref": goal,
                    "priority": priority,
                    "tier": _TIER.Name(common_pb2.COGNITION_TIER_CLOTHO),
                },
            )

    def take(self, slot: int, ori_id: str, tick: int) -> list[biography_pb2.ConsolidationFragment]:
        """Hand over and clear a slot's fragments; a leading fragment names any dropped to the bound."""
        entry = self._pending.pop(slot, None)
        if entry is None:
            return []
        fragments = list(entry.fragments)
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

    def snapshot(self) -> list[kernel_pb2.PendingFragments]:
        return [
            kernel_pb2.PendingFragments(
                slot=slot, fragments=list(p.fragments), elided=p.elided, next_sequence=p.next_sequence
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
            seen.add(entry.slot)
        return violations

    def restore(self, entries: Sequence[kernel_pb2.PendingFragments]) -> None:
        """Inverse of snapshot; the caller checked `restore_violations` first."""
        self._pending = {}
        for entry in entries:
            pending = _Pending(self.limit)
            pending.fragments.extend(entry.fragments)
            pending.elided = entry.elided
            pending.next_sequence = entry.next_sequence
            self._pending[entry.slot] = pending
