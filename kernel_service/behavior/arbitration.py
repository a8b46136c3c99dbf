"""Arbitration: behaviour tree, HTN plan, or escalation to model cognition, per Ori per tick."""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from numpy.typing import NDArray


class Arbitration(IntEnum):
    NONE = 0
    BEHAVIOR_TREE = 1
    HTN_PLAN = 2
    COGNITION = 3


def arbitrate(cognition_available: bool, novelty: bool, has_goal: bool, method_applies: bool) -> Arbitration:
    """Scalar reference. `cognition_available` already folds in kill switches and the tier budget."""
    if not cognition_available:
        return Arbitration.BEHAVIOR_TREE
    if novelty or not has_goal:
        return Arbitration.COGNITION
    return Arbitration.HTN_PLAN if method_applies else Arbitration.COGNITION


def arbitrate_rows(
    cognition_available: NDArray[np.bool_],
    novelty: NDArray[np.bool_],
    has_goal: NDArray[np.bool_],
    method_applies: NDArray[np.bool_],
) -> NDArray[np.uint8]:
    """Vectorized `arbitrate`."""
    planned = np.where(has_goal & ~novelty & method_applies, Arbitration.HTN_PLAN, Arbitration.COGNITION)
    return np.where(cognition_available, planned, Arbitration.BEHAVIOR_TREE).astype(np.uint8)
