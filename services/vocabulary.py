"""Names of the protocol's shared enumerations, derived from the generated code in one place.

Tiers, value domains, goal families and goal tags are numbers on the wire and words in
configuration, prompts, replies and method files. Every service takes the words from here, so a
name exists once: as the lowercase suffix of its proto enum value (`GOAL_FAMILY_SELF_CARE` is
"self-care" where hyphenated, `COGNITION_TIER_CLOTHO` is "clotho"), or for a personality axis as
its PersonalityTraits field name less `_bp`.
"""

from __future__ import annotations

from google.protobuf.descriptor import EnumDescriptor

from egbe.v1 import common_pb2, kernel_pb2


def _names(enum: EnumDescriptor, prefix: str, separator: str) -> dict[int, str]:
    """Each value but UNSPECIFIED (0), by number: its suffix after `prefix`, lowercased."""
    return {
        value.number: value.name.removeprefix(prefix).lower().replace("_", separator)
        for value in enum.values
        if value.number
    }


TIER_NAMES: dict[int, str] = _names(common_pb2.CognitionTier.DESCRIPTOR, "COGNITION_TIER_", "_")
TIERS_BY_NAME: dict[str, int] = {name: tier for tier, name in TIER_NAMES.items()}

# Value domains read as identifiers in identities and scenarios: "child_safety".
VALUE_DOMAIN_NAMES: dict[int, str] = _names(kernel_pb2.ValueDomain.DESCRIPTOR, "VALUE_DOMAIN_", "_")
VALUE_DOMAINS_BY_NAME: dict[str, int] = {name: domain for domain, name in VALUE_DOMAIN_NAMES.items()}

# Personality axes read as words in identities and prompts: "warmth" (PersonalityTraits.warmth_bp).
PERSONALITY_AXES: tuple[str, ...] = tuple(
    field.name.removesuffix("_bp") for field in kernel_pb2.PersonalityTraits.DESCRIPTOR.fields
)

# Goal families and tags read as slugs in method files and replies: "self-care", "station-known".
GOAL_FAMILY_NAMES: dict[int, str] = _names(common_pb2.GoalFamily.DESCRIPTOR, "GOAL_FAMILY_", "-")
GOAL_FAMILIES_BY_NAME: dict[str, int] = {name: family for family, name in GOAL_FAMILY_NAMES.items()}
# Index i is bit i of a goal ref's tag field (GoalTag number i + 1).
GOAL_TAG_NAMES: tuple[str, ...] = tuple(
    name for _, name in sorted(_names(common_pb2.GoalTag.DESCRIPTOR, "GOAL_TAG_", "-").items())
)
# The tags the kernel sets from perception on every evaluation (see GoalTag in common.proto).
PERCEIVED_GOAL_TAGS: tuple[str, ...] = tuple(
    GOAL_TAG_NAMES[tag - 1]
    for tag in (
        common_pb2.GOAL_TAG_NEED_REST,
        common_pb2.GOAL_TAG_THREAT_PRESENT,
        common_pb2.GOAL_TAG_MINOR_PRESENT,
    )
)
# The tags a goal chosen outside the kernel (by cognition, by a world) may carry.
CHOSEN_GOAL_TAGS: tuple[str, ...] = tuple(tag for tag in GOAL_TAG_NAMES if tag not in PERCEIVED_GOAL_TAGS)
