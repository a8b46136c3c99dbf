"""The HTN method library: authored families, tag gating, refusal of invalid files, compiled selection."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from egbe.v1 import action_pb2, common_pb2
from kernel_service.behavior.compiled_plans import NO_METHOD, CompiledMethods
from kernel_service.behavior.htn import (
    DEFAULT_METHODS_PATH,
    MethodLibraryInvalid,
    load_method_library,
    parse_method_library,
)
from kernel_service.behavior.vocabulary import GoalFamily
from services.vocabulary import GOAL_TAG_NAMES

LIBRARY = load_method_library()
A = action_pb2


def _bits(*tags: str) -> int:
    return sum(LIBRARY.tag_bit(t) for t in tags)


def _plan(family: GoalFamily, *tags: str) -> tuple[str, list[str], list[int]]:
    chosen = LIBRARY.decompose(family, _bits(*tags))
    assert chosen is not None
    _, method = chosen
    return method.method_id, [s.task for s in method.steps], [s.action_kind for s in method.steps]


def test_known_worksite_takes_the_rich_vocation_path() -> None:
    method_id, tasks, kinds = _plan(GoalFamily.VOCATION, "station-known")
    assert method_id == "vocation.station-work"
    assert tasks == ["orient", "gather-tools", "perform-work", "inspect", "record-memory"]
    assert kinds == [
        A.ACTION_KIND_OBSERVE,
        A.ACTION_KIND_USE_PROP,
        A.ACTION_KIND_WORK,
        A.ACTION_KIND_OBSERVE,
        A.ACTION_KIND_FORM_MEMORY,
    ]


def test_unknown_worksite_falls_to_low_risk_practice() -> None:
    assert _plan(GoalFamily.VOCATION)[0] == "vocation.low-risk-practice"


def test_relationship_repair_method() -> None:
    method_id, tasks, _ = _plan(GoalFamily.SOCIAL, "relationship-repair")
    assert method_id == "social.relationship-repair"
    assert tasks == ["regulate", "approach", "offer-repair", "listen", "remember"]
    assert _plan(GoalFamily.SOCIAL)[0] == "social.visit"


def test_travel_and_self_care_families() -> None:
    assert _plan(GoalFamily.TRAVEL, "route-known")[0] == "travel.known-route"
    assert _plan(GoalFamily.TRAVEL, "route-known", "seek-safety")[0] == "travel.seek-shelter"
    assert _plan(GoalFamily.TRAVEL)[0] == "travel.cautious-wayfinding"
    assert _plan(GoalFamily.SELF_CARE, "need-rest")[0] == "self-care.rest"
    assert _plan(GoalFamily.SELF_CARE)[0] == "self-care.tend"


def test_a_threat_leaves_vocation_without_a_method() -> None:
    assert LIBRARY.decompose(GoalFamily.VOCATION, _bits("station-known", "threat-present")) is None
    assert LIBRARY.decompose(GoalFamily.NONE, 0) is None


def _document() -> dict[str, object]:
    return tomllib.loads(DEFAULT_METHODS_PATH.read_text())


def test_invalid_field_is_refused_with_its_path() -> None:
    doc = _document()
    doc["methods"][0]["steps"][1]["action"] = "teleport"  # type: ignore[index]
    doc["methods"][2]["priority"] = 101  # type: ignore[index]
    with pytest.raises(MethodLibraryInvalid) as refused:
        parse_method_library(doc, Path("methods.toml"))
    fields = {v.field for v in refused.value.violations}
    assert fields == {"methods.0.steps.1.action", "methods.2.priority"}
    assert "methods.toml" in str(refused.value)


def test_cross_references_are_checked() -> None:
    doc = _document()
    methods = doc["methods"]
    methods[0]["requires"] = ["no-such-tag"]  # type: ignore[index]
    methods[1]["id"] = methods[0]["id"]  # type: ignore[index]
    doc["methods"] = [m for m in methods if m["family"] != "travel"]  # type: ignore[union-attr,index]
    with pytest.raises(MethodLibraryInvalid) as refused:
        parse_method_library(doc, Path("m.toml"))
    described = {(v.field, v.description) for v in refused.value.violations}
    assert ("methods.0.requires.0", "unknown tag 'no-such-tag'") in described
    assert ("methods.1.id", "duplicate method id 'vocation.station-work'") in described
    assert ("methods", "no method for family 'travel'") in described


def test_families_and_tags_are_the_protocols() -> None:
    assert LIBRARY.tags == GOAL_TAG_NAMES
    assert LIBRARY.tag_bit("minor-present") == 1 << (common_pb2.GOAL_TAG_MINOR_PRESENT - 1)
    doc = _document()
    doc["methods"][0]["family"] = "farming"  # type: ignore[index]
    doc["tags"] = ["station-known"]  # the vocabulary is the protocol's, not the file's
    with pytest.raises(MethodLibraryInvalid) as refused:
        parse_method_library(doc, Path("m.toml"))
    assert [v.field for v in refused.value.violations] == ["tags"]
    del doc["tags"]
    with pytest.raises(MethodLibraryInvalid) as refused:
        parse_method_library(doc, Path("m.toml"))
    assert [(v.field, v.description) for v in refused.value.violations] == [
        ("methods.0.family", "unknown family 'farming'; known: vocation, travel, social, self-care")
    ]


def test_bad_toml_and_wrong_schema_version_are_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("schema_version = [")
    with pytest.raises(MethodLibraryInvalid, match="not valid TOML"):
        load_method_library(broken)
    doc = _document()
    doc["schema_version"] = 2
    with pytest.raises(MethodLibraryInvalid) as refused:
        parse_method_library(doc, broken)
    assert [v.field for v in refused.value.violations] == ["schema_version"]


COMPILED = CompiledMethods.compile(LIBRARY)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, (1 << len(LIBRARY.tags)) - 1)), min_size=1))
def test_compiled_selection_equals_the_scalar_planner(rows: list[tuple[int, int]]) -> None:
    family = np.array([f for f, _ in rows], dtype=np.uint32)
    tags = np.array([t for _, t in rows], dtype=np.uint32)
    chosen = COMPILED.select(family, tags)
    for (f, t), got in zip(rows, chosen.tolist(), strict=True):
        expected = LIBRARY.decompose(f, t)
        assert got == (expected[0] if expected else NO_METHOD)
        if expected:
            start = COMPILED.offset[got]
            steps = COMPILED.step_kind[start : start + COMPILED.length[got]].tolist()
            assert steps == [s.action_kind for s in expected[1].steps]
