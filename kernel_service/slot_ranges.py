"""Splits the C tick's per-agent passes over disjoint slot ranges that run concurrently.

Both C passes (the core's `moirai_tick`, the behaviour step's `moirai_behavior_step`) are memory-bound
loops over independent slots, and cffi releases the GIL during a C call, so with `kernel.tick_threads`
above 1 a persistent pool ticks ranges [b1, b2), ... while the calling thread ticks [0, b1). Each range
writes its compacted lists from its first slot's index on (a range of n slots lists at most n entries,
so ranges never overlap in the capacity-sized buffers) with counts of its own; `compact` then moves
the lists down behind one another in range order and the counts are summed, so the outputs are the
single-threaded tick's byte for byte. No clock, no RNG: which thread ran a range changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from numpy.typing import NDArray

# Range bounds are multiples of this many slots: a 64-byte cache line of the byte-wide arrays, so two
# threads never write the same line.
RANGE_ALIGN = 64

Result = TypeVar("Result")


class SlotRanges:
    """How many threads tick, from how many agents on; `threads == 1` is the plain single call."""

    def __init__(self, threads: int = 1, min_agents: int = 100_000) -> None:
        if threads < 1:
            raise ValueError("tick_threads must be at least 1")
        self.threads = threads
        self.min_agents = min_agents
        self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="egbe-tick") if threads > 1 else None

    def split(self, count: int) -> list[tuple[int, int]]:
        """[(begin, end)] covering [0, count) in order: one range below `min_agents`, else one a thread."""
        if self._pool is None or count < self.min_agents:
            return [(0, count)]
        bounds = [count * i // self.threads // RANGE_ALIGN * RANGE_ALIGN for i in range(self.threads)]
        return list(zip(bounds, [*bounds[1:], count], strict=True))

    def run(self, ranges: Sequence[tuple[int, int]], call: Callable[[int, int, int], Result]) -> list[Result]:
        """`call(index, begin, end)` for every range, the first on this thread; results in range order."""
        if len(ranges) == 1:
            return [call(0, *ranges[0])]
        assert self._pool is not None
        rest = [self._pool.submit(call, index, *bounds) for index, bounds in enumerate(ranges) if index]
        first = call(0, *ranges[0])
        return [first, *(future.result() for future in rest)]


def compact(lists: Sequence[NDArray[Any]], ranges: Sequence[tuple[int, int]], counts: Sequence[int]) -> int:
    """Moves each range's entries (written from index `begin` on) behind the previous range's, in
    range order; returns the total. The first range's entries already start at 0."""
    at = counts[0]
    for (begin, _), count in zip(ranges[1:], counts[1:], strict=True):
        for values in lists:
            values[at : at + count] = values[begin : begin + count]  # numpy copies overlapping slices safely
        at += count
    return at
