"""Goal refs decomposed a whole column at a time, over the protocol's layout (services.goal_refs)."""

from __future__ import annotations

from typing import cast

import numpy as np
from numpy.typing import NDArray

from services.goal_refs import FAMILY_SHIFT, TAG_MASK, TAG_SHIFT


def goal_families(goal_refs: NDArray[np.uint32]) -> NDArray[np.uint32]:
    # A Python int operand keeps the array's uint32 (NEP 50); numpy's stubs say a signed result.
    return cast("NDArray[np.uint32]", goal_refs >> FAMILY_SHIFT)


def goal_tag_masks(goal_refs: NDArray[np.uint32]) -> NDArray[np.uint32]:
    return cast("NDArray[np.uint32]", (goal_refs >> TAG_SHIFT) & TAG_MASK)
