"""Per-agent struct-of-arrays state: perception signals, tier state, cached and output actions.

Every array is indexed by dense slot and allocated with spare capacity, so registration grows it
rarely and a tick never allocates. The C core and the numpy fallback read and write these very
arrays (the C core through pointers, without copies).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2

# name -> dtype, in the order the C struct declares its pointers (_core/moirai_core_decls.h).
AGENT_FIELDS: dict[str, type[np.generic]] = {
    # Perception signals; delta frames overwrite only the listed slots, the rest keep their values.
    "signal_flags": np.uint16,  # bit i <=> PerceptionFlagBit i
    "visual_lod": np.uint8,
    "player_proximity_mm": np.int32,
    "addressed_by_player_id": np.uint32,
    "goal_ref": np.uint32,
    "goal_progress_signature": np.uint64,
    "need_safety_bp": np.uint16,
    "need_sustaining_bp": np.uint16,
    "need_social_bp": np.uint16,
    "need_purpose_bp": np.uint16,
    "fatigue_bp": np.uint16,
    # Tier state.
    "tier": np.uint8,  # CognitionTier
    "tier_reason": np.uint8,  # TierReason
    "ticks_in_tier": np.uint16,  # saturating
    "last_clotho_signal_tick": np.uint64,
    "next_call_tick": np.uint64,  # next Lachesis reflection or Atropos summary
    # Loop/drift guard state.
    "signals_moved": np.uint8,  # SIGNALS_MOVED_* below: which readers a frame's changed values concern
    "stale_goal_ticks": np.uint8,
    "repeated_action_count": np.uint8,
    "last_decided_kind": np.uint8,
    "last_decided_goal_ref": np.uint32,
    "agent_bits": np.uint8,  # AGENT_BIT_* below
    # The cached action: what the Ori keeps doing between decisions (behaviour layer / cognition write it).
    "cached_kind": np.uint8,
    "cached_source": np.uint8,
    "cached_goal_ref": np.uint32,
    "cached_priority": np.uint16,
    "cached_plan_step": np.uint16,
    # The action the last tick answered (compared to find what changed for delta answers).
    "out_kind": np.uint8,
    "out_source": np.uint8,
    "out_goal_ref": np.uint32,
    "out_priority": np.uint16,
    "out_plan_step": np.uint16,
}

# agent_bits: the cached action was freshly decided since the last tick (behaviour step or cognition).
AGENT_BIT_FRESH_DECISION = 1
# agent_bits: ...and the decision came from cognition. Only these count toward the repeated-action
# guard: a behaviour tree repeating its routine is not a loop (the stale-goal guard watches it), a
# model answering the same thing three times is.
AGENT_BIT_COGNITION_DECIDED = 4
# agent_bits: the last answer differed from the cached action (a call or guard overrode it), or the
# agent was never answered; otherwise the answer equals the cached action and the C core skips it.
AGENT_BIT_OUT_OVERRIDDEN = 2
# agent_bits: this tick's delta frame listed the agent (set when the frame is applied, cleared by the
# core). A full frame observes every agent without setting it. An agent a frame left out has not been
# observed, so the stale-goal guard does not count the tick against it.
AGENT_BIT_OBSERVED = 8

SIGNAL_FIELDS = tuple(list(AGENT_FIELDS)[:11])

# signals_moved: applying a frame compares each value it writes with the one it replaces and marks
# the agent for the reader that must look again, so neither re-reads (nor keeps a copy of) every
# agent's signals each tick to find the few that moved: at a million agents those compares were ~60
# of the ~140 bytes a tick streamed per agent.
# This tick's frame moved the goal or its progress signature (the stale-goal guard's "no progress"
# is the bit clear); the core clears it each tick.
SIGNALS_MOVED_GOAL = 1
# A behaviour input (needs, fatigue, flags, goal) moved since the behaviour layer last stepped the
# agent; the step clears it for every agent it steps, so it stays set across the ticks the agent is
# not due. A value that moves and moves back leaves it set: the layer then re-evaluates inputs it
# has seen, which changes nothing.
SIGNALS_MOVED_BEHAVIOR = 2
MOVED_BITS: dict[str, int] = {
    "signal_flags": SIGNALS_MOVED_BEHAVIOR,
    "goal_ref": SIGNALS_MOVED_GOAL | SIGNALS_MOVED_BEHAVIOR,
    "goal_progress_signature": SIGNALS_MOVED_GOAL,
    "need_safety_bp": SIGNALS_MOVED_BEHAVIOR,
    "need_sustaining_bp": SIGNALS_MOVED_BEHAVIOR,
    "need_social_bp": SIGNALS_MOVED_BEHAVIOR,
    "need_purpose_bp": SIGNALS_MOVED_BEHAVIOR,
    "fatigue_bp": SIGNALS_MOVED_BEHAVIOR,
}

# Capacity-sized per-tick outputs: compacted lists in slot order, written by the core.
OUTPUT_FIELDS: dict[str, type[np.generic]] = {
    "candidate_slot": np.uint32,
    "candidate_cause": np.uint8,  # CognitionCause
    "candidate_bits": np.uint8,  # CANDIDATE_BIT_*
    "transition_slot": np.uint32,
    "transition_from": np.uint8,
    "transition_to": np.uint8,
    "guard_slot": np.uint32,
    "guard_bits": np.uint8,  # GUARD_BIT_*
    "changed_slot": np.uint32,
}
CANDIDATE_BIT_NEEDS_REHYDRATION = 1
GUARD_BIT_REPEATED_ACTION = 1
GUARD_BIT_STALE_GOAL = 2
_GUARD_NAMES = ((GUARD_BIT_REPEATED_ACTION, "repeated-action"), (GUARD_BIT_STALE_GOAL, "stale-goal"))


def guard_names(bits: int) -> list[str]:
    """The guards a stamp's bits name, in bit order: what audit payloads and fragments carry."""
    return [name for bit, name in _GUARD_NAMES if bits & bit]


def guard_bits(names: Iterable[str]) -> int:
    """Inverse of `guard_names` (a restored snapshot's guard moments); unknown names set nothing."""
    named = set(names)
    return sum(bit for bit, name in _GUARD_NAMES if name in named)


REASON_COUNT_LEN = 16
TIER_COUNT_LEN = 4
# counts[]: how many entries each compacted list holds after a tick.
COUNT_CANDIDATES, COUNT_TRANSITIONS, COUNT_GUARDS, COUNT_CHANGED = range(4)


HUGE_PAGE = 2 << 20
CACHE_LINE = 64


def _alloc(fields: Mapping[str, type[np.generic]], capacity: int) -> dict[str, NDArray[Any]]:
    """Every field's array, zeroed, carved from one buffer, each starting on a cache line.

    numpy asks the kernel for transparent huge pages on a buffer of 4 MiB or more (madvise); starting
    the buffer on a 2 MiB boundary lets them back all of it. A million-agent tick then walks a few
    dozen TLB entries instead of ~20,000 4 KiB pages (in a VM each miss is a two-level page walk):
    about 15 % of that tick. Separate arrays would get huge pages only where one of 4 MiB or more
    happens to cover an aligned 2 MiB, and the byte-wide fields never."""
    sizes = {
        name: -(-np.dtype(dtype).itemsize * capacity // CACHE_LINE) * CACHE_LINE
        for name, dtype in fields.items()
    }
    total = sum(sizes.values())
    pad = HUGE_PAGE if total >= 2 * HUGE_PAGE else CACHE_LINE
    buffer = np.zeros(total + pad, dtype=np.uint8)
    offset = -buffer.ctypes.data % pad
    arrays = {}
    for name, dtype in fields.items():
        arrays[name] = buffer[offset : offset + np.dtype(dtype).itemsize * capacity].view(dtype)
        offset += sizes[name]
    return arrays


class AgentArrays:
    """The population's arrays (capacity-sized; rows [0, count) are live) and the tick's output buffers."""

    def __init__(self, capacity: int = 1024) -> None:
        self.count = 0
        self.capacity = 0
        self.fields: dict[str, NDArray[Any]] = {}
        self.outputs: dict[str, NDArray[Any]] = {}
        self.counts = np.zeros(4, dtype=np.uint32)
        self.reason_counts = np.zeros(REASON_COUNT_LEN, dtype=np.uint32)
        self.tier_counts = np.zeros(TIER_COUNT_LEN, dtype=np.uint32)
        self.generation = 0  # bumps whenever arrays are reallocated, so the C core re-binds its pointers
        self._grow_to(capacity)

    def _grow_to(self, capacity: int) -> None:
        fields = _alloc(AGENT_FIELDS, capacity)
        for name, old in self.fields.items():
            fields[name][: self.count] = old[: self.count]
        self.fields = fields
        self.outputs = _alloc(OUTPUT_FIELDS, capacity)
        # Not state: the C core's lower bound of next_call_tick per 64-slot group (0 always is one),
        # so a tick skips the groups with no call due (_core/moirai_core.c mark_due). Registration
        # needs no reset: a new agent's due tick is first read after its transition into Lachesis or
        # Atropos sets it, which lowers its group's floor.
        self.next_call_floor = np.zeros(-(-capacity // 64), dtype=np.uint64)
        self.capacity = capacity
        self.generation += 1

    def add(self, how_many: int) -> int:
        """Append `how_many` fresh agents (cached action OBSERVE, source CACHED); returns the first slot."""
        first = self.count
        needed = first + how_many
        if needed > self.capacity:
            self._grow_to(max(needed, self.capacity * 2))
        self.count = needed
        self.fields["cached_kind"][first:needed] = action_pb2.ACTION_KIND_OBSERVE
        self.fields["cached_source"][first:needed] = action_pb2.ACTION_SOURCE_CACHED
        self.fields["player_proximity_mm"][first:needed] = 2**31 - 1
        self.fields["agent_bits"][first:needed] = AGENT_BIT_OUT_OVERRIDDEN
        return first

    def live(self, name: str) -> NDArray[Any]:
        """The live rows of one field (a view, never a copy)."""
        return self.fields[name][: self.count]

    def snapshot(self) -> dict[str, NDArray[Any]]:
        """A copy of every live per-agent array."""
        return {name: self.live(name).copy() for name in AGENT_FIELDS}

    def restore(self, arrays: Mapping[str, NDArray[np.generic]]) -> None:
        """Replace the population with a snapshot's arrays."""
        count = len(arrays["tier"])
        self.count = 0
        self.fields = {}
        self._grow_to(max(count, 1024))
        self.count = count
        for name, dtype in AGENT_FIELDS.items():
            self.fields[name][:count] = np.asarray(arrays[name], dtype=dtype)
