"""The C tick core: binds the agent arrays' memory into cffi structs once, then one call per tick."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kernel_service._core import ffi, lib
from kernel_service.agent_state import AGENT_BIT_OBSERVED, OUTPUT_FIELDS, AgentArrays
from kernel_service.core_numpy import CoreParams

C_TYPES = {
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "int32": "int32_t",
}


class CCore:
    """Runs `moirai_tick` over the numpy arrays in place, without copies: one cffi call per tick."""

    name = "c"

    def __init__(self) -> None:
        self._agents: Any = ffi.new("struct moirai_agents *")
        self._outputs: Any = ffi.new("struct moirai_outputs *")
        self._params: Any = ffi.new("struct moirai_params *")
        self._keepalive: list[Any] = []
        self._bound: tuple[int, int] | None = None  # (id of the arrays, their generation)
        self._config: CoreParams | None = None  # the params last copied into self._params

    def _bind(self, arrays: AgentArrays) -> None:
        keepalive: list[Any] = []

        def pointer(values: Any) -> Any:
            buffer = ffi.from_buffer(f"{C_TYPES[values.dtype.name]}[]", values, require_writable=True)
            keepalive.append(buffer)
            return buffer

        for name, _ in ffi.typeof("struct moirai_agents").fields:
            setattr(self._agents, name, pointer(arrays.fields[name]))
        for name in OUTPUT_FIELDS:
            setattr(self._outputs, name, pointer(arrays.outputs[name]))
        self._outputs.counts = pointer(arrays.counts)
        self._outputs.reason_counts = pointer(arrays.reason_counts)
        self._outputs.tier_counts = pointer(arrays.tier_counts)
        self._keepalive = keepalive
        self._bound = (id(arrays), arrays.generation)

    def run(self, arrays: AgentArrays, params: CoreParams, *, tick: int, observed_all: bool) -> None:
        if self._bound != (id(arrays), arrays.generation):
            self._bind(arrays)
        p = self._params
        if params is not self._config:  # the config numbers change with the kernel, not the tick
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
        p.tick = tick
        p.count = arrays.count
        p.observed_all = observed_all
        if lib.moirai_tick(p, self._agents, self._outputs) != 0:
            raise ValueError("the C core refused its parameters (an interval of zero)")

    def apply_delta(
        self, arrays: AgentArrays, slots: NDArray[np.uint32], columns: Mapping[str, NDArray[Any]]
    ) -> None:
        """One C loop per column (numpy's fancy assignment is several times slower at scale)."""
        slots = np.ascontiguousarray(slots, dtype=np.uint32)
        count = len(slots)
        at = ffi.from_buffer("uint32_t[]", slots)
        fields = arrays.fields
        for name, values in columns.items():
            target = fields[name]
            source = np.ascontiguousarray(values, dtype=target.dtype)
            lib.moirai_scatter(
                ffi.from_buffer(target, require_writable=True),
                ffi.from_buffer(source),
                at,
                count,
                target.itemsize,
            )
        bits = ffi.from_buffer("uint8_t[]", fields["agent_bits"], require_writable=True)
        lib.moirai_mark(bits, at, count, AGENT_BIT_OBSERVED)
