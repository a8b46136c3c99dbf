"""The C tick core: binds the agent arrays' memory into cffi structs once, then one call per tick."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kernel_service._core import ffi, lib
from kernel_service.agent_state import (
    AGENT_BIT_OBSERVED,
    MOVED_BITS,
    OUTPUT_FIELDS,
    REASON_COUNT_LEN,
    TIER_COUNT_LEN,
    AgentArrays,
)
from kernel_service.core_numpy import CoreParams
from kernel_service.slot_ranges import SlotRanges, compact

C_TYPES = {
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "int32": "int32_t",
}


# The compacted lists by the count (COUNT_*) that says how many entries each holds.
LISTS_BY_COUNT = (
    ("candidate_slot", "candidate_cause", "candidate_bits"),
    ("transition_slot", "transition_from", "transition_to"),
    ("guard_slot", "guard_bits"),
    ("changed_slot",),
)


class CCore:
    """Runs `moirai_tick` over the numpy arrays in place, without copies: one cffi call per tick, or
    one per slot range concurrently (`ranges`, kernel.tick_threads) with outputs merged to the same bytes."""

    name = "c"

    def __init__(self, ranges: SlotRanges | None = None) -> None:
        self.ranges = ranges or SlotRanges()
        self._agents: Any = ffi.new("struct moirai_agents *")
        self._outputs: Any = ffi.new("struct moirai_outputs *")
        self._params: list[Any] = [ffi.new("struct moirai_params *") for _ in range(self.ranges.threads)]
        self._keepalive: list[Any] = []
        self._bound: tuple[int, int] | None = None  # (id of the arrays, their generation)
        self._pointers: dict[str, Any] = {}  # each agent field's cffi pointer, as bound
        self._config: CoreParams | None = None  # the params last copied into self._params
        # Ranges after the first: outputs pointing `begin` entries into the lists, and counts of their own.
        self._range_outputs: list[Any] = []
        self._range_counts: list[dict[str, NDArray[np.uint32]]] = []
        self._range_begins: list[int] = []

    def _bind(self, arrays: AgentArrays) -> None:
        keepalive: list[Any] = []

        def pointer(values: Any) -> Any:
            buffer = ffi.from_buffer(f"{C_TYPES[values.dtype.name]}[]", values, require_writable=True)
            keepalive.append(buffer)
            return buffer

        # Every field (the struct takes the core's; a frame may carry the others): apply_frame's too.
        self._pointers = {name: pointer(values) for name, values in arrays.fields.items()}
        self._pointers["next_call_floor"] = pointer(arrays.next_call_floor)
        for name, _ in ffi.typeof("struct moirai_agents").fields:
            setattr(self._agents, name, self._pointers[name])
        for name in OUTPUT_FIELDS:
            setattr(self._outputs, name, pointer(arrays.outputs[name]))
        self._outputs.counts = pointer(arrays.counts)
        self._outputs.reason_counts = pointer(arrays.reason_counts)
        self._outputs.tier_counts = pointer(arrays.tier_counts)
        self._keepalive = keepalive
        self._bound = (id(arrays), arrays.generation)
        self._range_begins = []

    def _bind_ranges(self, begins: list[int]) -> None:
        """Outputs for ranges after the first, each list `begin` entries in (rebuilt when bounds move)."""
        outputs, counts = [], []
        for begin in begins:
            out = ffi.new("struct moirai_outputs *")
            for name in OUTPUT_FIELDS:
                setattr(out, name, getattr(self._outputs, name) + begin)
            own = {
                "counts": np.zeros(4, dtype=np.uint32),
                "reason_counts": np.zeros(REASON_COUNT_LEN, dtype=np.uint32),
                "tier_counts": np.zeros(TIER_COUNT_LEN, dtype=np.uint32),
            }
            for name, values in own.items():
                setattr(out, name, ffi.from_buffer("uint32_t[]", values, require_writable=True))
            outputs.append(out)
            counts.append(own)
        self._range_outputs, self._range_counts, self._range_begins = outputs, counts, begins

    def run(self, arrays: AgentArrays, params: CoreParams, *, tick: int, observed_all: bool) -> None:
        if self._bound != (id(arrays), arrays.generation):
            self._bind(arrays)
        if params is not self._config:  # the config numbers change with the kernel, not the tick
            for p in self._params:
                p.decision_interval_ticks = params.decision_interval_ticks
                p.transition_damping_ticks = params.transition_damping_ticks
                p.deescalation_grace_ticks = params.deescalation_grace_ticks
                p.clotho_proximity_mm = params.clotho_proximity_mm
                p.repeated_action_limit = params.repeated_action_limit
                p.stale_goal_tick_limit = params.stale_goal_tick_limit
                p.reflection_interval_ticks = params.reflection_interval_ticks
                p.summary_interval_ticks = params.summary_interval_ticks
                p.guard_priority_bp = params.guard_priority_bp
            self._config = params
        ranges = self.ranges.split(arrays.count)
        begins = [begin for begin, _ in ranges[1:]]
        if begins != self._range_begins:
            self._bind_ranges(begins)

        def tick_range(index: int, begin: int, end: int) -> int:
            p = self._params[index]
            p.tick = tick
            p.begin = begin
            p.count = end
            p.observed_all = observed_all
            return int(
                lib.moirai_tick(p, self._agents, self._range_outputs[index - 1] if index else self._outputs)
            )

        if any(status != 0 for status in self.ranges.run(ranges, tick_range)):
            raise ValueError("the C core refused its parameters (an interval of zero)")
        if len(ranges) > 1:
            self._merge(arrays, ranges)

    def _merge(self, arrays: AgentArrays, ranges: list[tuple[int, int]]) -> None:
        """The ranges' outputs as the single call's: lists concatenated in range order, counts summed."""
        for name in ("reason_counts", "tier_counts"):
            total = getattr(arrays, name)
            for own in self._range_counts:
                total += own[name]
        for which, names in enumerate(LISTS_BY_COUNT):
            counts = [int(arrays.counts[which]), *(int(own["counts"][which]) for own in self._range_counts)]
            arrays.counts[which] = compact([arrays.outputs[name] for name in names], ranges, counts)

    def apply_frame(
        self, arrays: AgentArrays, slots: NDArray[np.uint32] | None, columns: Mapping[str, NDArray[Any]]
    ) -> None:
        """One C loop per column (numpy's fancy assignment is several times slower at scale), marking
        moved signals as it goes, through the pointers bound for the tick (~1 µs a column less)."""
        if self._bound != (id(arrays), arrays.generation):
            self._bind(arrays)
        count = arrays.count if slots is None else len(slots)
        at = ffi.NULL
        if slots is not None:
            slots = np.ascontiguousarray(slots, dtype=np.uint32)
            at = ffi.from_buffer("uint32_t[]", slots)
        pointers = self._pointers
        moved = pointers["signals_moved"]
        fields = arrays.fields
        for name, values in columns.items():
            target = fields[name]
            lib.moirai_scatter(
                pointers[name],
                ffi.from_buffer(np.ascontiguousarray(values, dtype=target.dtype)),
                at,
                count,
                target.itemsize,
                moved,
                MOVED_BITS.get(name, 0),
            )
        if slots is not None:
            lib.moirai_mark(pointers["agent_bits"], at, count, AGENT_BIT_OBSERVED)
