"""The behaviour step in the C core (`_core/moirai_behavior.c`): one cffi call per tick.

Binds the layer's numbers, tables and compiled methods once, and the kernel's and the layer's arrays
(again only when either is reallocated) with capacity-sized escalation buffers, so a tick allocates
nothing. Semantics are the numpy step's (`PersonalityBehaviorLayer.step` on the numpy core) exactly:
the differential tests hold the two together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from kernel_service._core import ffi, lib
from kernel_service.behavior.personality_tree import ROUTINE_VALUES
from kernel_service.behavior.tree_kernel import ROUTINE_KIND
from kernel_service.behavior_seam import Escalations, KernelArrays
from kernel_service.errors import CoreStateError
from kernel_service.slot_ranges import SlotRanges, compact

if TYPE_CHECKING:
    from kernel_service.behavior.layer import PersonalityBehaviorLayer

C_TYPES = {
    "bool": "uint8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "uint16": "uint16_t",
    "int32": "int32_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
}
KERNEL_FIELDS = frozenset(
    {
        "tier",
        "agent_bits",
        "cached_kind",
        "cached_source",
        "cached_goal_ref",
        "cached_priority",
        "cached_plan_step",
        "need_safety_bp",
        "need_sustaining_bp",
        "need_social_bp",
        "need_purpose_bp",
        "fatigue_bp",
        "signal_flags",
        "goal_ref",
        "signals_moved",
    }
)
# struct moirai_behavior_config's method arrays <- CompiledMethods' fields.
METHOD_FIELDS = {
    "step_kind": "step_kind",
    "method_offset": "offset",
    "method_length": "length",
    "method_family": "family",
    "method_requires": "requires",
    "method_excludes": "excludes",
    "method_priority_bp": "priority_bp",
}
BUFFERS: dict[str, type[np.generic]] = {"escalation_slot": np.uint32, "escalation_cause": np.uint8}


class CBehaviorStep:
    """`PersonalityBehaviorLayer.step` for the C core."""

    def __init__(self, layer: PersonalityBehaviorLayer, ranges: SlotRanges | None = None) -> None:
        self._layer = layer
        self._ranges = ranges or SlotRanges()
        self._b: Any = ffi.new("struct moirai_behavior *")
        self._params: list[Any] = [
            ffi.new("struct moirai_behavior_params *") for _ in range(self._ranges.threads)
        ]
        self._config: Any = ffi.new("struct moirai_behavior_config *")
        self._config_keepalive = self._bind_config()
        self._buffers: dict[str, NDArray[Any]] = {}
        self._keepalive: list[Any] = []
        self._bound: tuple[int, int, int] | None = (
            None  # (id of the kernel arrays, theirs, the layer's generation)
        )
        # Ranges after the first: the pointers with the escalation buffers `begin` entries in.
        self._range_b: list[Any] = []
        self._range_begins: list[int] = []

    def _bind_config(self) -> list[Any]:
        layer, c = self._layer, self._config
        for name, value in layer.config.model_dump().items():
            if hasattr(c, name):
                setattr(c, name, value)
        c.rest_tag = layer.library.tag_bit("need-rest")
        c.threat_tag = layer.library.tag_bit("threat-present")
        c.minor_tag = layer.library.tag_bit("minor-present")
        c.need_goal = [int(goal) for goal in layer.need_goals.by_need]
        c.purpose_with_station_goal = layer.need_goals.purpose_with_station
        c.routine_kind = [int(kind) for kind in ROUTINE_KIND]
        for routine, (first, second) in ROUTINE_VALUES.items():
            c.routine_values[routine] = [int(first), int(second)]
        c.method_count = len(layer.methods.family)
        keepalive = []
        for name, source in METHOD_FIELDS.items():
            values = np.ascontiguousarray(getattr(layer.methods, source))
            keepalive += [values, ffi.from_buffer(f"{C_TYPES[values.dtype.name]}[]", values)]
            setattr(c, name, keepalive[-1])
        return keepalive

    def _bind(self, kernel: KernelArrays) -> None:
        keepalive: list[Any] = []

        def pointer(values: NDArray[Any]) -> Any:
            buffer = ffi.from_buffer(f"{C_TYPES[values.dtype.name]}[]", values, require_writable=True)
            keepalive.append(buffer)
            return buffer

        capacity = len(kernel.fields["tier"])
        if len(self._buffers.get("escalation_slot", ())) < capacity:
            self._buffers = {name: np.zeros(capacity, dtype=dtype) for name, dtype in BUFFERS.items()}
        layer = self._layer
        for name, _ in ffi.typeof("struct moirai_behavior").fields:
            if name == "capacity":
                self._b.capacity = layer.capacity
            elif name in KERNEL_FIELDS:
                setattr(self._b, name, pointer(kernel.fields[name]))
            elif name in BUFFERS:
                setattr(self._b, name, pointer(self._buffers[name]))
            else:
                setattr(self._b, name, pointer(getattr(layer, name)))
        self._keepalive = keepalive
        self._bound = (id(kernel), kernel.generation, layer.generation)
        self._range_begins = []

    def _bind_ranges(self, begins: list[int]) -> None:
        """Copies of the pointers for ranges after the first, escalations written `begin` entries in."""
        copies = []
        for begin in begins:
            b = ffi.new("struct moirai_behavior *")
            ffi.memmove(b, self._b, ffi.sizeof("struct moirai_behavior"))
            for name in BUFFERS:
                setattr(b, name, getattr(self._b, name) + begin)
            copies.append(b)
        self._range_b, self._range_begins = copies, begins

    def run(
        self,
        tick: int,
        every: int,
        kernel: KernelArrays,
        cognition_available: bool,
        slots: NDArray[np.uint32] | None,
    ) -> Escalations:
        if self._bound != (id(kernel), kernel.generation, self._layer.generation):
            self._bind(kernel)
        if slots is not None:  # an explicit list (the layer's own callers; the kernel steps the strided set)
            p = self._params[0]
            self._set(p, tick, every, 0, kernel.count, cognition_available=cognition_available)
            listed = np.ascontiguousarray(slots, dtype=np.uint32)
            escalated = lib.moirai_behavior_step(
                p, self._config, ffi.from_buffer("uint32_t[]", listed), len(listed), self._b
            )
            return self._escalations(_checked([escalated])[0])
        ranges = self._ranges.split(kernel.count)
        begins = [begin for begin, _ in ranges[1:]]
        if begins != self._range_begins:
            self._bind_ranges(begins)

        def step_range(index: int, begin: int, end: int) -> int:
            p = self._params[index]
            self._set(p, tick, every, begin, end, cognition_available=cognition_available)
            b = self._range_b[index - 1] if index else self._b
            return int(lib.moirai_behavior_step(p, self._config, ffi.NULL, 0, b))

        counts = _checked(self._ranges.run(ranges, step_range))
        return self._escalations(compact(list(self._buffers.values()), ranges, counts))

    @staticmethod
    def _set(p: Any, tick: int, every: int, begin: int, end: int, *, cognition_available: bool) -> None:
        p.tick = tick
        p.every = every
        p.first = -tick % every
        p.begin = begin
        p.count = end
        p.cognition_available = cognition_available

    def _escalations(self, count: int) -> Escalations:
        return Escalations(
            self._buffers["escalation_slot"][:count], self._buffers["escalation_cause"][:count]
        )


def _checked(counts: list[int]) -> list[int]:
    """The step's escalation counts, or CoreStateError where it refused the state (-1): a population
    past the layer's rows, or a plan outside the compiled library, which a validated restore never
    leaves; the step stopped at that row rather than read outside an array."""
    if any(count < 0 for count in counts):
        raise CoreStateError("the behaviour step found a plan or population outside the layer's arrays")
    return counts
