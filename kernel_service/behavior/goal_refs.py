"""The layout of a structured goal ref: family (bits 28..31), context tags (12..27), instance (0..11).

A world interns its goals into uint32 refs; when it lays them out this way the behaviour layer can
decompose them without a lookup table, vectorized. Ref 0 means "no structured goal". Instance 0 is
reserved for goals the Ori surfaced itself from its needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from kernel_service.behavior.vocabulary import GoalFamily

if TYPE_CHECKING:  # the layout itself needs no numpy: htn (and the gateway through it) import it
    import numpy as np
    from numpy.typing import NDArray

FAMILY_SHIFT = 28
TAG_SHIFT = 12
TAG_BITS = 16
TAG_MASK = (1 << TAG_BITS) - 1
INSTANCE_MASK = (1 << TAG_SHIFT) - 1
AUTONOMOUS_INSTANCE = 0


def encode_goal_ref(family: GoalFamily, tag_mask: int, instance: int) -> int:
    """Pack a goal ref; raises ValueError on out-of-range parts."""
    if family == GoalFamily.NONE:
        raise ValueError("a structured goal needs a family")
    if not 0 <= tag_mask <= TAG_MASK:
        raise ValueError(f"tag_mask must fit in {TAG_BITS} bits")
    if not 0 <= instance <= INSTANCE_MASK:
        raise ValueError(f"instance must be 0..{INSTANCE_MASK}")
    return (int(family) << FAMILY_SHIFT) | (tag_mask << TAG_SHIFT) | instance


def goal_family(goal_ref: int) -> int:
    return goal_ref >> FAMILY_SHIFT


def goal_tags(goal_ref: int) -> int:
    return (goal_ref >> TAG_SHIFT) & TAG_MASK


def tag_mask_of(tags: Iterable[str], vocabulary: tuple[str, ...]) -> int:
    """Bit mask of named tags; unknown names raise ValueError naming them."""
    mask = 0
    for tag in tags:
        if tag not in vocabulary:
            raise ValueError(f"unknown tag {tag!r}; known: {', '.join(vocabulary)}")
        mask |= 1 << vocabulary.index(tag)
    return mask


def goal_families(goal_refs: NDArray[np.uint32]) -> NDArray[np.uint32]:
    # A Python int operand keeps the array's uint32 (NEP 50); numpy's stubs say a signed result.
    return cast("NDArray[np.uint32]", goal_refs >> FAMILY_SHIFT)


def goal_tag_masks(goal_refs: NDArray[np.uint32]) -> NDArray[np.uint32]:
    return cast("NDArray[np.uint32]", (goal_refs >> TAG_SHIFT) & TAG_MASK)
