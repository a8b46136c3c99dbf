"""Chooses the tick core: the C core built by cffi, or the bit-identical numpy fallback."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from kernel_service.agent_state import AGENT_BIT_OBSERVED, MOVED_BITS, AgentArrays
from kernel_service.core_numpy import CoreParams, run_core_numpy
from kernel_service.slot_ranges import SlotRanges

CORE_ENV = "EGBE_KERNEL_CORE"


class TickCore(Protocol):
    """One tick over every live agent, in place; `observed_all` when the tick's frame was full."""

    name: str
    ranges: SlotRanges  # how many threads tick disjoint slot ranges (the C core; numpy runs one)

    def run(self, arrays: AgentArrays, params: CoreParams, *, tick: int, observed_all: bool) -> None: ...

    def apply_frame(
        self, arrays: AgentArrays, slots: NDArray[np.uint32] | None, columns: Mapping[str, NDArray[Any]]
    ) -> None:
        """Write a frame's columns: a full frame's (`slots` None) to every live agent, a partial one's
        to the listed slots (validated: registered and distinct), marking those agents observed
        (AGENT_BIT_OBSERVED). Either way, an agent whose value moved gets the column's MOVED_BITS in
        `signals_moved`."""
        ...


class NumpyCore:
    """The pure-numpy fallback."""

    name = "numpy"

    def __init__(self) -> None:
        self.ranges = SlotRanges()

    def run(self, arrays: AgentArrays, params: CoreParams, *, tick: int, observed_all: bool) -> None:
        run_core_numpy(arrays, params, tick=tick, observed_all=observed_all)

    def apply_frame(
        self, arrays: AgentArrays, slots: NDArray[np.uint32] | None, columns: Mapping[str, NDArray[Any]]
    ) -> None:
        index: slice | NDArray[np.intp] = slice(0, arrays.count) if slots is None else slots.astype(np.intp)
        fields = arrays.fields
        moved = fields["signals_moved"]
        for name, values in columns.items():
            bits = MOVED_BITS.get(name, 0)
            if bits:
                moved[index] |= (fields[name][index] != values).view(np.uint8) * np.uint8(bits)
            fields[name][index] = values
        if slots is not None:
            fields["agent_bits"][index] |= np.uint8(AGENT_BIT_OBSERVED)


def c_core_available() -> bool:
    """Whether the install built the C extension."""
    try:
        from kernel_service._core import lib  # noqa: F401
    except ImportError:
        return False
    return True


def select_core(
    name: str | None = None,
    *,
    configured: str = "auto",
    tick_threads: int = 1,
    tick_threads_min_agents: int = 100_000,
) -> TickCore:
    """`c` or `numpy` when named; else EGBE_KERNEL_CORE, else `configured`; `auto` = C when built. The C
    core ticks populations of `tick_threads_min_agents` or more over `tick_threads` threads."""
    choice = (name or os.environ.get(CORE_ENV) or configured).lower()
    if choice == "numpy":
        return NumpyCore()
    if choice == "c" or (choice == "auto" and c_core_available()):
        from kernel_service.core_c import CCore

        return CCore(SlotRanges(tick_threads, tick_threads_min_agents))
    if choice == "auto":
        return NumpyCore()
    raise ValueError(f"{CORE_ENV} must be 'c' or 'numpy', not {choice!r}")
