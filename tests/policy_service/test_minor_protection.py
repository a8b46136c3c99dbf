"""Minor protection across the four surfaces, fail-closed for minor-coded Ori."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policy_service.config import PolicyConfig
from policy_service.minor_protection import check_minor_protection
from policy_service.model import ProtectionRequest, ProtectionSurface

CONFIG = PolicyConfig()


@pytest.mark.parametrize(
    ("surface", "tags"),
    [
        (ProtectionSurface.DEATH_PATH, ()),
        (ProtectionSurface.RELATIONSHIP_EDGE, ("romantic",)),
        (ProtectionSurface.SCENARIO, ("exploitative",)),
        (ProtectionSurface.INCARNATION, ("mature",)),
        (ProtectionSurface.SCENARIO, ("festival", "death")),
    ],
)
def test_each_surface_blocks_its_harm_for_a_minor(surface: ProtectionSurface, tags: tuple[str, ...]) -> None:
    minor = check_minor_protection(ProtectionRequest(True, surface, tags), CONFIG)
    adult = check_minor_protection(ProtectionRequest(False, surface, tags), CONFIG)
    assert not minor.allowed
    assert any(not c.passed and c.reason for c in minor.checks)
    assert adult.allowed


def test_a_romantic_edge_towards_a_minor_counterpart_is_blocked() -> None:
    request = ProtectionRequest(
        False, ProtectionSurface.RELATIONSHIP_EDGE, ("romantic",), counterpart_is_minor=True
    )
    assert not check_minor_protection(request, CONFIG).allowed


@pytest.mark.parametrize(
    ("surface", "tags"),
    [
        (ProtectionSurface.RELATIONSHIP_EDGE, ("mentorship", "friendship")),
        (ProtectionSurface.SCENARIO, ("harvest-festival",)),
        (ProtectionSurface.INCARNATION, ("all-ages",)),
    ],
)
def test_harmless_changes_are_allowed_for_a_minor(surface: ProtectionSurface, tags: tuple[str, ...]) -> None:
    assert check_minor_protection(ProtectionRequest(True, surface, tags), CONFIG).allowed


@given(
    tags=st.lists(
        st.sampled_from(["romantic", "kiss", "friendship", "mentor", "rivalry", "flirt"]), max_size=4
    ),
    ori_minor=st.booleans(),
    counterpart_minor=st.booleans(),
)
def test_no_romantic_edge_ever_involves_a_minor(
    tags: list[str], ori_minor: bool, counterpart_minor: bool
) -> None:
    request = ProtectionRequest(
        ori_minor, ProtectionSurface.RELATIONSHIP_EDGE, tuple(tags), counterpart_minor
    )
    verdict = check_minor_protection(request, CONFIG)
    romantic = bool(set(tags) & {"romantic", "kiss", "flirt"})
    assert verdict.allowed == (not (romantic and (ori_minor or counterpart_minor)))
