"""The golden BT harness over the fixture profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kernel_service.behavior.golden_harness import run_golden_harness

FIXTURE = Path(__file__).with_name("golden_profiles.toml")


def test_every_golden_profile_lands_in_its_routine_and_honours_its_value() -> None:
    outcomes = run_golden_harness(FIXTURE)
    assert len(outcomes) == 10
    failures = [o for o in outcomes if not o.passed]
    assert failures == []


def test_harness_reports_a_profile_that_misses(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(
        '[[cases]]\nname = "watcher"\ntraits = { caution = 9000 }\nvalues = { autonomy = 7000 }\n'
        'expect_routine = "vocation"\nexpect_value = "craft"\n'
    )
    (outcome,) = run_golden_harness(wrong)
    assert not outcome.passed
    assert outcome.scalar == ("observe", "autonomy")
    assert outcome.vectorized == ("observe", "autonomy")


def test_quirks_scoped_to_a_routine_show_only_there() -> None:
    by_name = {o.name: o for o in run_golden_harness(FIXTURE)}
    assert by_name["diligent-smith"].quirks == ("vocation:hums while hammering",)


def test_unknown_trait_axis_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[cases]]\nname = "x"\ntraits = { charisma = 1 }\nexpect_routine = "observe"\nexpect_value = "x"\n'
    )
    with pytest.raises(ValueError, match="unknown trait axis"):
        run_golden_harness(bad)
