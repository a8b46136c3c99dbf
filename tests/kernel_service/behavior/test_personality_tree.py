"""Personality trees: routine order, and the vectorized kernel equals the scalar reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from egbe.v1 import kernel_pb2
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.personality_tree import TreeInputs, evaluate_personality_tree
from kernel_service.behavior.profile import Profile, ProfileDraft
from kernel_service.behavior.tree_kernel import TreeRows, evaluate_trees
from kernel_service.behavior.vocabulary import (
    MINOR_PRESENT_FLAG,
    THREAT_FLAG,
    VALUE_COLUMNS,
    Routine,
)

CONFIG = BehaviorConfig()
D = kernel_pb2.ValueDomain
bp = st.integers(0, 10_000)
# Values near the gates, so the boundaries get exercised.
edgy_bp = st.one_of(bp, st.sampled_from([0, 4_999, 5_000, 6_000, 6_999, 7_000, 7_001, 10_000]))

profiles = st.builds(
    Profile,
    traits=st.tuples(*[edgy_bp] * 8),
    values=st.dictionaries(st.integers(1, VALUE_COLUMNS - 1), edgy_bp, max_size=9),
    quirks=st.just(()),
    vocation_ref=st.integers(0, 2),
)
inputs = st.builds(
    TreeInputs,
    need_safety_bp=edgy_bp,
    need_sustaining_bp=edgy_bp,
    need_social_bp=edgy_bp,
    need_purpose_bp=edgy_bp,
    fatigue_bp=edgy_bp,
    signal_flags=st.sampled_from(
        [0, THREAT_FLAG, MINOR_PRESENT_FLAG, THREAT_FLAG | MINOR_PRESENT_FLAG, 0xFFFF]
    ),
    hard_objective_bp=st.sampled_from([10_000, 7_000, 4_000]),
)


def _rows(cases: list[tuple[Profile, TreeInputs]]) -> TreeRows:
    values = np.zeros((VALUE_COLUMNS, len(cases)), dtype=np.uint16)
    for i, (profile, _) in enumerate(cases):
        for domain, weight in profile.values.items():
            values[domain, i] = weight

    def col(name: str, dtype: type[np.generic]) -> np.ndarray:
        return np.array([getattr(x, name) for _, x in cases], dtype=dtype)

    return TreeRows(
        traits=np.ascontiguousarray(np.array([p.traits for p, _ in cases], dtype=np.uint16).T),
        values=values,
        vocation_ref=np.array([p.vocation_ref for p, _ in cases], dtype=np.uint32),
        need_social_bp=col("need_social_bp", np.uint16),
        need_purpose_bp=col("need_purpose_bp", np.uint16),
        fatigue_bp=col("fatigue_bp", np.uint16),
        signal_flags=col("signal_flags", np.uint16),
        hard_objective_bp=col("hard_objective_bp", np.int32),
    )


@settings(max_examples=300, deadline=None)  # a loaded shared machine is not a regression
@given(st.lists(st.tuples(profiles, inputs), min_size=1, max_size=40))
def test_vectorized_trees_equal_the_scalar_reference(cases: list[tuple[Profile, TreeInputs]]) -> None:
    got = evaluate_trees(_rows(cases), CONFIG)
    for i, (profile, row) in enumerate(cases):
        expected = evaluate_personality_tree(profile, row, CONFIG)
        assert int(got.routine[i]) == expected.routine
        assert int(got.action_kind[i]) == expected.action_kind
        assert int(got.priority_bp[i]) == expected.priority_bp
        assert int(got.honoured_value[i]) == expected.honoured_value


def _decide(draft: ProfileDraft, **signals: int) -> tuple[Routine, tuple[int, ...]]:
    decision = evaluate_personality_tree(draft.build(), TreeInputs(**signals), CONFIG)
    return decision.routine, decision.honoured_values


WORKER = ProfileDraft(
    traits={"conscientiousness": 9000, "ambition": 9000},
    values={"craft": 9000, "child_safety": 7000, "safety": 8000},
    vocation_ref=1,
)


def test_maintain_safety_needs_the_safety_value_to_clear_7000() -> None:
    assert _decide(WORKER, signal_flags=MINOR_PRESENT_FLAG) == (
        Routine.MAINTAIN_SAFETY,
        (D.VALUE_DOMAIN_SAFETY, D.VALUE_DOMAIN_CHILD_SAFETY),
    )
    low = ProfileDraft(traits=WORKER.traits, values={"craft": 9000, "child_safety": 6999}, vocation_ref=1)
    assert _decide(low, signal_flags=MINOR_PRESENT_FLAG)[0] == Routine.VOCATION
    assert _decide(WORKER, signal_flags=THREAT_FLAG) == (Routine.MAINTAIN_SAFETY, (D.VALUE_DOMAIN_SAFETY,))


def test_routine_order_safety_then_self_care_then_vocation() -> None:
    assert _decide(WORKER, signal_flags=THREAT_FLAG, fatigue_bp=9000)[0] == Routine.MAINTAIN_SAFETY
    assert _decide(WORKER, fatigue_bp=6000)[0] == Routine.SELF_CARE
    assert _decide(WORKER, fatigue_bp=5999)[0] == Routine.VOCATION


def test_no_vocation_without_a_trade_and_grief_downweights_work() -> None:
    jobless = ProfileDraft(traits=WORKER.traits, values=WORKER.values, vocation_ref=0)
    assert _decide(jobless)[0] == Routine.OBSERVE
    assert _decide(WORKER, hard_objective_bp=4_000)[0] == Routine.OBSERVE


def test_decision_reports_quirks_for_its_routine() -> None:
    profile = ProfileDraft(
        traits=WORKER.traits,
        values=WORKER.values,
        vocation_ref=1,
        quirks=("vocation:whistles", "social:hugs", "blinks"),
    ).build()
    decision = evaluate_personality_tree(profile, TreeInputs(), CONFIG)
    assert decision.routine == Routine.VOCATION
    assert decision.quirks == ("vocation:whistles", "blinks")
    assert decision.honoured_value == D.VALUE_DOMAIN_CRAFT
