"""The bounds the kernel holds every request and every restored state to, in one place.

Ids are kept, logged and sent on to every peer, so they are bounded and printable; ticks stay
below 2^63 so that a tick plus any interval the config allows (a reflection interval, a cognition
hold, an escalation cooldown: each at most a few game-days of ticks) still fits the uint64 arrays,
and so that a world at the last tick it may use is not then refused every later tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2
from services.errors import FieldViolation

MAX_ID_CHARS = 128
MAX_TICK = 2**63 - 1
MAX_BP = 10_000
# Enum values the arrays hold as bytes; each enum is numbered 0..max without gaps.
MAX_ACTION_KIND = max(action_pb2.ActionKind.values())
MAX_ACTION_SOURCE = max(action_pb2.ActionSource.values())
MAX_PLAN_STEP = 2**16 - 1  # cached_plan_step is uint16


def id_violation(field: str, value: str, *, required: bool = False) -> FieldViolation | None:
    """Why `value` is no acceptable id (None when it is): at most MAX_ID_CHARS printable characters."""
    if not value:
        return FieldViolation(field, "must be set") if required else None
    if len(value) > MAX_ID_CHARS:
        return FieldViolation(field, f"{len(value)} characters; at most {MAX_ID_CHARS}")
    if not value.isprintable():
        return FieldViolation(field, "must be printable text (no NUL or control characters)")
    return None


def id_violations(field: str, values: Iterable[str], *, required: bool = False) -> list[FieldViolation]:
    """`id_violation` for each of `values`, named `field[i]`."""
    found = (id_violation(f"{field}[{i}]", value, required=required) for i, value in enumerate(values))
    return [violation for violation in found if violation is not None]


def first_outside(values: NDArray[Any], low: int, high: int) -> int | None:
    """The index of the first value outside [low, high], or None (compared without wrapping)."""
    if len(values) == 0:
        return None
    wide: NDArray[Any] = values.view(np.uint8) if values.dtype == np.bool_ else values
    bad = (wide < low) | (wide > high)
    return int(np.argmax(bad)) if bool(bad.any()) else None
