"""What a restored behaviour state must be before the layer takes it: checked whole, changing nothing.

The behaviour step indexes with its state (a plan's method and cursor into the compiled library,
a routine into its tables) and both cores read every row below the population, so a snapshot is
held to the layout and ranges a layer of this library can itself produce: each array's dtype and
length, room for the whole population, every enum-like byte within its enum, basis points within
0..10000, a mood within the range its folds keep, and each plan within the compiled methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kernel_service.behavior.compiled_plans import NO_METHOD, CompiledMethods
from kernel_service.behavior.vocabulary import VALUE_COLUMNS, Emotion, Routine
from kernel_service.bounds import MAX_ACTION_KIND, MAX_BP, first_outside
from services.errors import FieldViolation

# Value ranges (inclusive) of the arrays that hold more than a free-running number.
RANGES: dict[str, tuple[int, int]] = {
    "registered": (0, 1),
    "traits": (0, MAX_BP),
    "values": (0, MAX_BP),
    "minor": (0, 1),
    "evaluated": (0, 1),
    "tree_routine": (0, max(Routine)),
    "tree_kind": (0, MAX_ACTION_KIND),
    "tree_priority": (0, MAX_BP),
    "tree_value": (0, VALUE_COLUMNS - 1),
    "emotion": (0, max(Emotion)),
    "hard_objective_bp": (0, MAX_BP),
    "mood_valence": (-MAX_BP, MAX_BP),
    "mood_arousal": (0, MAX_BP),
    "grief": (0, MAX_BP),
    "mood_active": (0, 1),
    "plan_priority": (0, MAX_BP),
    "novel": (0, 1),
    "goal_adopted": (0, 1),
}


def state_violations(
    arrays: Mapping[str, NDArray[np.generic]],
    layout: Mapping[str, tuple[type[np.generic], tuple[int, ...]]],
    methods: CompiledMethods,
    agents: int,
) -> list[FieldViolation]:
    """Everything that keeps `arrays` (a snapshot's, flattened or shaped) from being this layer's
    state for a population of `agents`, each named by its array."""
    quirks = arrays.get("quirks")
    if quirks is None or quirks.dtype.kind != "U" or quirks.ndim != 1:
        return [FieldViolation("quirks", "missing from snapshot or not text")]
    capacity = len(quirks)
    if capacity < agents:
        return [FieldViolation("quirks", f"{capacity} rows; the population has {agents}")]
    violations = [
        FieldViolation(name, "not an array of the behaviour layer")
        for name in arrays
        if name != "quirks" and name not in layout
    ]
    for name, (dtype, shape) in layout.items():
        array = arrays.get(name)
        if array is None:
            violations.append(FieldViolation(name, "missing from snapshot"))
        elif array.dtype != np.dtype(dtype) or array.size != capacity * int(np.prod(shape, dtype=int)):
            violations.append(FieldViolation(name, f"expected {np.dtype(dtype)}{(*shape, capacity)}"))
        elif name in RANGES and (bad := first_outside(array.reshape(-1), *RANGES[name])) is not None:
            low, high = RANGES[name]
            violations.append(FieldViolation(name, f"value at {bad} is outside {low}..{high}"))
    if violations:
        return violations
    return _plan_violations(arrays["plan_method"].reshape(-1), arrays["plan_cursor"].reshape(-1), methods)


def _plan_violations(
    method: NDArray[Any], cursor: NDArray[Any], methods: CompiledMethods
) -> list[FieldViolation]:
    """A plan is no method with cursor 0, or a compiled method with a cursor within its steps."""
    count = len(methods.length)
    if (bad := first_outside(method, NO_METHOD, count - 1)) is not None:
        return [FieldViolation("plan_method", f"value at {bad} names no method (-1..{count - 1})")]
    planned = method != NO_METHOD
    steps = np.where(planned, methods.length[np.maximum(method, 0)], 1)
    wrong = (cursor < 0) | (cursor >= steps)
    if bool(wrong.any()):
        bad = int(np.argmax(wrong))
        return [FieldViolation("plan_cursor", f"value at {bad} is outside its plan's steps")]
    return []
