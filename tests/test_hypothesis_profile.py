"""The suite's Hypothesis profile: examples are bounded by count, never by a wall-clock deadline."""

from __future__ import annotations

from hypothesis import settings


def test_the_loaded_profile_has_no_per_example_deadline() -> None:
    assert settings().deadline is None
