"""The behaviour layer's enumerations: routines, goal families, needs, emotions and trait axes."""

from __future__ import annotations

from enum import IntEnum

from egbe.v1 import action_pb2, common_pb2, kernel_pb2, perception_pb2


class Routine(IntEnum):
    """Behaviour-tree routines, in the order the tree tries them (the value hierarchy)."""

    NONE = 0
    MAINTAIN_SAFETY = 1
    SELF_CARE = 2
    VOCATION = 3
    SOCIAL = 4
    CURIOSITY = 5
    OBSERVE = 6


ROUTINE_ACTION: dict[Routine, int] = {
    Routine.MAINTAIN_SAFETY: action_pb2.ACTION_KIND_MAINTAIN_SAFETY,
    Routine.SELF_CARE: action_pb2.ACTION_KIND_SELF_CARE,
    Routine.VOCATION: action_pb2.ACTION_KIND_WORK,
    Routine.SOCIAL: action_pb2.ACTION_KIND_SOCIALIZE,
    Routine.CURIOSITY: action_pb2.ACTION_KIND_EXPLORE,
    Routine.OBSERVE: action_pb2.ACTION_KIND_OBSERVE,
}


class GoalFamily(IntEnum):
    """The protocol's goal families (common.proto GoalFamily); a goal ref carries one of them."""

    NONE = common_pb2.GOAL_FAMILY_UNSPECIFIED
    VOCATION = common_pb2.GOAL_FAMILY_VOCATION
    TRAVEL = common_pb2.GOAL_FAMILY_TRAVEL
    SOCIAL = common_pb2.GOAL_FAMILY_SOCIAL
    SELF_CARE = common_pb2.GOAL_FAMILY_SELF_CARE


class Need(IntEnum):
    """Needs that surface autonomous goals, in tie-break order (Safety first)."""

    NONE = 0
    SAFETY = 1
    SUSTAINING = 2
    SOCIAL = 3
    PURPOSE = 4


class Emotion(IntEnum):
    """Named emotions an Ori shows at a distance, before any dialogue."""

    NONE = 0
    CALM = 1
    CONTENT = 2
    DETERMINED = 3
    TIRED = 4
    LONELY = 5
    ANXIOUS = 6
    GRIEVING = 7


class Trait(IntEnum):
    """Column of each axis in the (agents, 8) trait array; same order as PersonalityTraits."""

    WARMTH = 0
    CURIOSITY = 1
    CAUTION = 2
    AMBITION = 3
    CONSCIENTIOUSNESS = 4
    CANDOR = 5
    DEFIANCE = 6
    PLAYFULNESS = 7


TRAIT_FIELDS: tuple[str, ...] = tuple(f"{axis.name.lower()}_bp" for axis in Trait)

# Values are stored in an (agents, 10) array indexed by ValueDomain number (column 0 unused).
VALUE_COLUMNS = max(kernel_pb2.ValueDomain.values()) + 1

# signal_flags masks the trees read (bit i set <=> PerceptionFlagBit value i).
THREAT_FLAG = 1 << perception_pb2.PERCEPTION_FLAG_BIT_THREAT_PRESENT
MINOR_PRESENT_FLAG = 1 << perception_pb2.PERCEPTION_FLAG_BIT_MINOR_PRESENT
