"""The shared vocabulary is the protocol's: names derived from the enums, goal refs in its layout."""

from __future__ import annotations

import pytest

from egbe.v1 import common_pb2, kernel_pb2
from scripts import export_output_schemas
from services.goal_refs import encode_goal_ref, goal_family, goal_tags, tag_bit, tag_mask_of
from services.vocabulary import (
    CHOSEN_GOAL_TAGS,
    GOAL_FAMILIES_BY_NAME,
    GOAL_TAG_NAMES,
    PERCEIVED_GOAL_TAGS,
    PERSONALITY_AXES,
    TIER_NAMES,
    VALUE_DOMAIN_NAMES,
)


def test_names_come_from_the_enums() -> None:
    assert TIER_NAMES == {
        common_pb2.COGNITION_TIER_CLOTHO: "clotho",
        common_pb2.COGNITION_TIER_LACHESIS: "lachesis",
        common_pb2.COGNITION_TIER_ATROPOS: "atropos",
    }
    assert VALUE_DOMAIN_NAMES[kernel_pb2.VALUE_DOMAIN_CHILD_SAFETY] == "child_safety"
    assert len(VALUE_DOMAIN_NAMES) == 9
    assert GOAL_FAMILIES_BY_NAME == {"vocation": 1, "travel": 2, "social": 3, "self-care": 4}
    assert GOAL_TAG_NAMES == (
        "station-known",
        "route-known",
        "relationship-repair",
        "need-rest",
        "seek-safety",
        "threat-present",
        "minor-present",
    )
    assert PERCEIVED_GOAL_TAGS == ("need-rest", "threat-present", "minor-present")
    assert CHOSEN_GOAL_TAGS == ("station-known", "route-known", "relationship-repair", "seek-safety")
    assert PERSONALITY_AXES == (
        "warmth",
        "curiosity",
        "caution",
        "ambition",
        "conscientiousness",
        "candor",
        "defiance",
        "playfulness",
    )


def test_a_goal_ref_packs_and_unpacks_in_the_protocols_layout() -> None:
    tags = tag_mask_of(["relationship-repair", "station-known"])
    assert tags == 0b101
    ref = encode_goal_ref(common_pb2.GOAL_FAMILY_SOCIAL, tags, 7)
    assert ref == (3 << 28) | (0b101 << 12) | 7
    assert (goal_family(ref), goal_tags(ref)) == (common_pb2.GOAL_FAMILY_SOCIAL, 0b101)
    assert tag_bit("minor-present") == 1 << (common_pb2.GOAL_TAG_MINOR_PRESENT - 1)
    with pytest.raises(ValueError, match="needs a family"):
        encode_goal_ref(common_pb2.GOAL_FAMILY_UNSPECIFIED, 0, 1)
    with pytest.raises(ValueError, match=r"instance must be 0\.\.4095"):
        encode_goal_ref(common_pb2.GOAL_FAMILY_TRAVEL, 0, 4096)
    with pytest.raises(ValueError, match="unknown goal tag 'flying'"):
        tag_mask_of(["flying"])


def test_the_published_reply_schemas_are_cognitions() -> None:
    """`make protos-check` runs the same comparison; a stale file names itself."""
    assert export_output_schemas.main(["--check"]) == 0
    assert sorted(p.name for p in export_output_schemas.published()) == [
        "egbe.cognition.decision.v1.json",
        "egbe.cognition.dialogue.v1.json",
        "egbe.cognition.reflection.v1.json",
        "egbe.cognition.summary.v1.json",
    ]
