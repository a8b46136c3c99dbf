"""The deadline of the call a service is serving, so that the calls it makes on that call's behalf end
no later than its caller stops waiting.

The servicer enters `serving(context)` around its work; each onward call asks `onward_timeout` for
its own timeout. A contextvar carries the deadline because the ports between the servicer and the
stubs speak protocol messages only, and asyncio copies it into the tasks a call fans out to.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from services.grpc_types import Context

# The monotonic time by which the call being served must be answered; None: it has no deadline.
_deadline: ContextVar[float | None] = ContextVar("egbe_served_deadline", default=None)


@contextmanager
def serving(context: Context) -> Iterator[None]:
    """Within: onward calls are bounded by the deadline of the call `context` belongs to."""
    remaining = context.time_remaining()
    token = _deadline.set(None if remaining is None else time.monotonic() + remaining)
    try:
        yield
    finally:
        _deadline.reset(token)


def onward_timeout(configured: float, margin: float) -> float:
    """Seconds an onward call may take: `configured`, or the time the served call has left less
    `margin` (kept to answer in) when that is sooner. Zero or below: that time is spent, and the
    call should not be made."""
    deadline = _deadline.get()
    if deadline is None:
        return configured
    return min(configured, deadline - margin - time.monotonic())
