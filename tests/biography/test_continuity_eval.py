"""The continuity eval on its fixed case set, on both backends: it passes the 95% bar, and can fail."""

from __future__ import annotations

from biography_service.rehydration import LoadBudget
from biography_service.service import Biography
from tests.biography.conftest import TEST_CONFIG
from tests.biography.continuity_eval import (
    CONTINUITY_EVAL_PASS_THRESHOLD_BASIS_POINTS,
    FIXED_CASE_SEEDS,
    build_case,
    evaluate_continuity,
)

DEFAULT_BUDGET = LoadBudget(TEST_CONFIG.rehydrate_max_events, TEST_CONFIG.rehydrate_max_chars)


async def test_rehydrated_context_cites_the_expected_refs_after_a_game_day_offscreen(
    biography: Biography,
) -> None:
    report = await evaluate_continuity(biography, DEFAULT_BUDGET)
    assert len(report.results) == len(FIXED_CASE_SEEDS)
    assert report.pass_rate_basis_points >= CONTINUITY_EVAL_PASS_THRESHOLD_BASIS_POINTS, [
        (r.ori_id, sorted(r.missing_refs)) for r in report.results if not r.passed
    ]
    assert report.passed
    # The day's chores did not all fit: the budget is real and rehydration reported what it left out.
    assert all(r.omitted.get("memories", 0) > 0 for r in report.results)


async def test_the_eval_fails_when_the_budget_cannot_hold_what_mattered(biography: Biography) -> None:
    starved = await evaluate_continuity(
        biography, LoadBudget(max_events=2, max_chars=10_000), seeds=(0, 1, 2, 3)
    )
    assert not starved.passed
    assert starved.pass_rate_basis_points < CONTINUITY_EVAL_PASS_THRESHOLD_BASIS_POINTS


def test_the_case_set_is_fixed() -> None:
    assert build_case(7) == build_case(7)
    assert build_case(7).expected_refs != build_case(8).expected_refs
