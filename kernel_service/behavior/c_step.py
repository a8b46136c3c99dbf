"""The behaviour step in the C core (`_core/moirai_behavior.c`): one cffi call per tick in the usual case.

Binds the kernel's and the layer's arrays into a cffi struct once (again only when either is
reallocated), with capacity-sized output buffers, so a tick allocates nothing. Rows whose inputs
changed come back listed; the layer's vectorized numpy evaluation runs for them alone, and a second
call steps and arbitrates them. Semantics are the numpy step's (`PersonalityBehaviorLayer.step` on
the numpy core) exactly; the differential tests hold the two together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from kernel_service._core import ffi, lib
from kernel_service.behavior_seam import Escalations, KernelArrays, signals_of

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
    }
)
METHOD_FIELDS = {"step_kind": "step_kind", "method_offset": "offset", "method_length": "length"}
BUFFERS: dict[str, type[np.generic]] = {
    "changed_rows": np.uint32,
    "escalation_slot": np.uint32,
    "escalation_cause": np.uint8,
    "late_slot": np.uint32,
    "late_cause": np.uint8,
}


class CBehaviorStep:
    """`PersonalityBehaviorLayer.step` for the C core."""

    def __init__(self, layer: PersonalityBehaviorLayer) -> None:
        self._layer = layer
        self._b: Any = ffi.new("struct moirai_behavior *")
        self._params: Any = ffi.new("struct moirai_behavior_params *")
        self._params.escalation_cooldown_ticks = layer.config.escalation_cooldown_ticks
        self._counts = np.zeros(2, dtype=np.uint32)
        self._counts_ptr: Any = ffi.from_buffer("uint32_t[]", self._counts, require_writable=True)
        self._buffers: dict[str, NDArray[Any]] = {}
        self._keepalive: list[Any] = []
        self._bound: tuple[int, int, int] | None = (
            None  # (id of the kernel arrays, theirs, the layer's generation)
        )

    def _bind(self, kernel: KernelArrays) -> None:
        keepalive: list[Any] = []

        def pointer(values: NDArray[Any]) -> Any:
            buffer = ffi.from_buffer(f"{C_TYPES[values.dtype.name]}[]", values, require_writable=True)
            keepalive.append(buffer)
            return buffer

        capacity = len(kernel.fields["tier"])
        if len(self._buffers.get("changed_rows", ())) < capacity:
            self._buffers = {name: np.zeros(capacity, dtype=dtype) for name, dtype in BUFFERS.items()}
        layer, methods = self._layer, self._layer.methods
        for name, _ in ffi.typeof("struct moirai_behavior").fields:
            if name in KERNEL_FIELDS:
                values = kernel.fields[name]
            elif name in METHOD_FIELDS:
                values = getattr(methods, METHOD_FIELDS[name])
            elif name in BUFFERS:
                values = self._buffers[name]
            else:
                values = getattr(layer, name)
            setattr(self._b, name, pointer(values))
        self._keepalive = keepalive
        self._bound = (id(kernel), kernel.generation, layer.generation)

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
        p = self._params
        p.tick = tick
        p.every = every
        p.first = -tick % every
        p.count = kernel.count
        p.cognition_available = cognition_available
        if slots is None:
            lib.moirai_behavior_step(p, ffi.NULL, 0, self._b, self._counts_ptr)
        else:
            listed = np.ascontiguousarray(slots, dtype=np.uint32)
            lib.moirai_behavior_step(
                p, ffi.from_buffer("uint32_t[]", listed), len(listed), self._b, self._counts_ptr
            )
        changed = int(self._counts[0])
        if changed:
            rows = self._buffers["changed_rows"][:changed].astype(np.intp)
            self._layer.evaluate_rows(rows, signals_of(kernel.fields))
            lib.moirai_behavior_settle(p, self._b, self._counts_ptr)
        escalated = int(self._counts[1])
        return Escalations(
            self._buffers["escalation_slot"][:escalated], self._buffers["escalation_cause"][:escalated]
        )
