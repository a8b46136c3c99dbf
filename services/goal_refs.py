"""The structured goal ref layout of the protocol (see GoalFamily in common.proto), as functions.

bits 28..31 family, 12..27 context tags (bit n-1 for GoalTag n), 0..11 instance. Ref 0 means "no
structured goal"; instance 0 is reserved for goals the Ori surfaced itself from its needs. The
kernel decomposes refs (vectorized, over these constants); cognition and worlds encode them.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.vocabulary import GOAL_FAMILY_NAMES, GOAL_TAG_NAMES

FAMILY_SHIFT = 28
TAG_SHIFT = 12
TAG_BITS = 16
TAG_MASK = (1 << TAG_BITS) - 1
INSTANCE_MASK = (1 << TAG_SHIFT) - 1
AUTONOMOUS_INSTANCE = 0


def encode_goal_ref(family: int, tag_mask: int, instance: int) -> int:
    """Pack a goal ref; raises ValueError on out-of-range parts."""
    if family not in GOAL_FAMILY_NAMES:
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


def tag_bit(tag: str) -> int:
    """The bit of a named tag in the tag field; an unknown name raises ValueError naming it."""
    if tag not in GOAL_TAG_NAMES:
        raise ValueError(f"unknown goal tag {tag!r}; known: {', '.join(GOAL_TAG_NAMES)}")
    return 1 << GOAL_TAG_NAMES.index(tag)


def tag_mask_of(tags: Iterable[str]) -> int:
    """Bit mask of named tags; unknown names raise ValueError naming them."""
    mask = 0
    for tag in tags:
        mask |= tag_bit(tag)
    return mask
