"""Service processes run on uvloop (`egbe serve` and `egbe up` go through `run_event_loop`)."""

from __future__ import annotations

import asyncio

import uvloop

from services.runtime import run_event_loop


def test_run_event_loop_runs_the_coroutine_on_uvloop_and_returns_its_result() -> None:
    async def loop_kind() -> tuple[type[asyncio.AbstractEventLoop], int]:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()), 42

    kind, answer = run_event_loop(loop_kind())
    assert issubclass(kind, uvloop.Loop)
    assert answer == 42
