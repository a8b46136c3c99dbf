"""Scenario files: the shipped ones load; a bad one is refused with the path of every invalid field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from world.scenario import (
    FORBIDDEN_DIRECTIVES,
    ScenarioError,
    builtin_scenario_names,
    load_scenario,
    load_scenario_file,
    parse_scenario,
)


def _hamlet_document() -> dict[str, object]:
    from importlib import resources

    return json.loads((resources.files("world") / "scenarios" / "hamlet.json").read_text())  # type: ignore[no-any-return]


def test_shipped_scenarios_load() -> None:
    assert {"hamlet", "solo-ceiling"} <= set(builtin_scenario_names())
    hamlet = load_scenario("hamlet")
    assert len(hamlet.ori) == 12
    assert any(o.minor for o in hamlet.ori)
    script = hamlet.player
    assert script.path
    assert script.addresses
    assert script.crossroads
    assert script.irreversible_actions
    assert any(d.kind in FORBIDDEN_DIRECTIVES for d in script.steward_directives)
    assert any(d.kind not in FORBIDDEN_DIRECTIVES for d in script.steward_directives)
    ceiling = load_scenario("solo-ceiling")
    bands: dict[str, int] = {"scene": len(ceiling.ori)}
    for cohort in ceiling.cohorts:
        bands[cohort.band.value] = bands.get(cohort.band.value, 0) + cohort.count
    assert bands == {"scene": 24, "resident": 400, "distant": 1_000}
    assert ceiling.duration_ticks == 72_000  # a game-hour at 20 Hz


def test_every_invalid_field_is_named() -> None:
    doc = _hamlet_document()
    bad = copy.deepcopy(doc)
    bad["ori"][0]["personality"]["warmth_bp"] = 12_000  # type: ignore[index]
    bad["ori"][3]["values"][0]["domain"] = "greed"  # type: ignore[index]
    bad["map"]["width_mm"] = -5  # type: ignore[index]
    bad["player"]["speed_mm_per_tick"] = 0  # type: ignore[index]
    bad["surprise"] = True
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(bad, "bad.json")
    paths = {path for path, _ in caught.value.violations}
    assert paths == {
        "ori[0].personality.warmth_bp",
        "ori[3].values[0].domain",
        "map.width_mm",
        "player.speed_mm_per_tick",
        "surprise",
    }
    assert "ori[0].personality.warmth_bp" in str(caught.value)


def test_cross_references_are_checked_with_paths() -> None:
    bad = copy.deepcopy(_hamlet_document())
    bad["ori"][1]["relationships"][0]["with_ori"] = "nobody"  # type: ignore[index]
    bad["player"]["addresses"][0]["ori"] = "ghost"  # type: ignore[index]
    bad["player"]["path"][1]["location"] = "atlantis"  # type: ignore[index]
    bad["ori"][2]["values"] = [  # type: ignore[index]
        {"domain": "joy", "weight_bp": 100},
        {"domain": "craft", "weight_bp": 900},
    ]
    bad["player"]["steward_directives"][0]["at_tick"] = 99_999  # type: ignore[index]
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(bad)
    paths = {path for path, _ in caught.value.violations}
    assert paths == {
        "ori[1].relationships[0].with_ori",
        "player.addresses[0].ori",
        "player.path[1].location",
        "ori[2].values",
        "player.steward_directives[0].at_tick",
    }


def test_unreadable_and_unknown_files_are_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ScenarioError, match="not readable JSON"):
        load_scenario_file(broken)
    with pytest.raises(ScenarioError, match="no such scenario"):
        load_scenario(str(tmp_path / "missing.json"))


def test_identity_and_situation_text_limits_are_the_protocols() -> None:
    bad = copy.deepcopy(_hamlet_document())
    bad["ori"][0]["persona"] = "x" * 2_001  # type: ignore[index]
    bad["ori"][0]["quirks"] = ["y" * 241]  # type: ignore[index]
    bad["ori"][1]["name"] = "z" * 129  # type: ignore[index]
    bad["player"]["crossroads"][0]["options"] = [f"option {i}" for i in range(9)]  # type: ignore[index]
    bad["player"]["crossroads"][1]["options"] = ["w" * 241]  # type: ignore[index]
    bad["player"]["name"] = ""  # type: ignore[index]
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(bad)
    assert {path for path, _ in caught.value.violations} == {
        "ori[0].persona",
        "ori[0].quirks[0]",
        "ori[1].name",
        "player.crossroads[0].options",
        "player.crossroads[1].options[0]",
        "player.name",
    }
    hamlet = load_scenario("hamlet")
    assert all(o.persona for o in hamlet.ori)
    assert hamlet.player.name == "the player"
    assert [c.options for c in hamlet.player.crossroads] == [
        ["stay at the forge", "follow Tobi to the river"],
        ["open the sluice and flood the lower orchard", "keep the sluice shut and risk the mill"],
    ]
