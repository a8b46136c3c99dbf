"""Operator reads audited once a window, for a caller that asks for it (the console's poll loop).

A program that reads the same thing every second (the console) would write a row a read. When its calls
carry `x-egbe-audit: windowed`, its first read of each method in a window is recorded at once, as any
read is, and the rest of that window's are counted and written as one row when the window ends. Nothing
is left out: the rows give every read's method and operator and how many there were. Controls are never
windowed, and a caller without the header (`egbe ops`) is recorded a row a read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from services.grpc_types import Context

AUDIT_METADATA = "x-egbe-audit"
WINDOWED = "windowed"
READ_WINDOW_SECONDS = 60.0

# Records one allowed read: (method, operator_id, detail).
RecordRead = Callable[[str, str, str], Coroutine[Any, Any, None]]


def wants_windowed(context: Context) -> bool:
    return any(k == AUDIT_METADATA and v == WINDOWED for k, v in context.invocation_metadata() or ())


class ReadWindows:
    """Windowed reads by (method, operator): when each window began and how many reads it counted."""

    def __init__(self, record: RecordRead, clock: Callable[[], float] = time.monotonic) -> None:
        self._record = record
        self._clock = clock
        self._windows: dict[tuple[str, str], tuple[float, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def read(self, method: str, operator_id: str, detail: str) -> None:
        """One windowed read: recorded if it opens a window, else counted in it."""
        key, now = (method, operator_id), self._clock()
        window = self._windows.get(key)
        if window is not None and now - window[0] < READ_WINDOW_SECONDS:
            if window[1] == 0:
                delay = window[0] + READ_WINDOW_SECONDS - now
                asyncio.get_running_loop().call_later(delay, self._close, key, window[0])
            self._windows[key] = (window[0], window[1] + 1)
            return
        self._windows[key] = (now, 0)
        note = f"reads audited once a {READ_WINDOW_SECONDS:g} s window"
        await self._record(method, operator_id, f"{detail} ({note})" if detail else note)

    def _close(self, key: tuple[str, str], started: float) -> None:
        """The window's counted reads, as one row."""
        window = self._windows.get(key)
        if window is None or window[0] != started:
            return
        del self._windows[key]
        method, operator_id = key
        detail = f"{window[1]} more {method} reads within {READ_WINDOW_SECONDS:g} s, counted in this row"
        task = asyncio.get_running_loop().create_task(self._record(method, operator_id, detail))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
