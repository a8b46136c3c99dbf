"""Two-stage budget: tier clamps, then the Solo-world cap in tier priority order, never overspent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from egbe.v1 import common_pb2
from gateway.budget import TokenRequest, evaluate_budget, resolve_world_cap, worst_case_requests
from gateway.config import BudgetConfig
from services.errors import InvalidArgument
from tests.conftest import ROOT

CLOTHO, LACHESIS, ATROPOS = (
    common_pb2.COGNITION_TIER_CLOTHO,
    common_pb2.COGNITION_TIER_LACHESIS,
    common_pb2.COGNITION_TIER_ATROPOS,
)
CONFIG = BudgetConfig()


def test_worst_case_saturates_the_cap_to_the_token() -> None:
    evaluation = evaluate_budget(worst_case_requests(CONFIG), CONFIG, resolve_world_cap(CONFIG))
    assert evaluation.total_allowed_tokens == 96_000_000
    assert evaluation.total_deferred_tokens == 15_000_000
    assert evaluation.world_cap_held
    by_tier: dict[int, list[int]] = {}
    for a in evaluation.allocations:
        by_tier.setdefault(a.request.tier, [0, 0])
        by_tier[a.request.tier][0] += a.allowed_tokens
        by_tier[a.request.tier][1] += a.deferred_tokens
    assert by_tier == {CLOTHO: [72_000_000, 0], LACHESIS: [24_000_000, 0], ATROPOS: [0, 15_000_000]}


def test_worst_case_cli_json() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "assembly.cli", "budget", "worst-case", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(result.stdout)
    assert report["total_allowed_tokens"] == 96_000_000
    assert report["total_deferred_tokens"] == 15_000_000
    assert report["world_cap_held"] is True
    assert report["tiers"]["atropos"] == {
        "requests": 1_000,
        "requested_tokens": 15_000_000,
        "allowed_tokens": 0,
        "deferred_tokens": 15_000_000,
    }


def test_request_over_tier_cap_is_clamped_and_flagged() -> None:
    (allocation,) = evaluate_budget([TokenRequest("a", LACHESIS, 12_000)], CONFIG, 1_000_000).allocations
    assert allocation.tier_capped_tokens == 10_000
    assert allocation.allowed_tokens == 10_000
    assert allocation.over_tier_budget
    assert not allocation.blocked_by_world_cap


def test_world_cap_serves_clotho_before_lachesis_before_atropos() -> None:
    requests = [
        TokenRequest("atropos", ATROPOS, 5_000),
        TokenRequest("lachesis", LACHESIS, 5_000),
        TokenRequest("clotho", CLOTHO, 5_000),
    ]
    allocations = evaluate_budget(requests, CONFIG, 8_000).allocations
    assert [a.allowed_tokens for a in allocations] == [0, 3_000, 5_000]
    assert [a.blocked_by_world_cap for a in allocations] == [True, True, False]


@pytest.mark.parametrize(
    ("rest_bp", "expected"),
    [(0, 96_000_000), (5_000, 48_000_000), (10_000, 96_000_000), (20_000, 96_000_000)],
)
def test_homestead_rest_can_only_lower_the_cap(rest_bp: int, expected: int) -> None:
    assert resolve_world_cap(CONFIG, rest_bp) == expected


@pytest.mark.parametrize(
    ("request_bp", "override", "expected"),
    [(0, 0, 48_000_000), (2_500, 0, 24_000_000), (7_500, 0, 48_000_000), (0, 10_000, 5_000)],
)
def test_a_configured_homestead_rest_lowers_every_cap_and_a_request_only_lowers_it_further(
    request_bp: int, override: int, expected: int
) -> None:
    rested = BudgetConfig(homestead_rest_bp=5_000)
    assert resolve_world_cap(rested, request_bp, override) == expected


def test_unspecified_tier_is_invalid() -> None:
    with pytest.raises(InvalidArgument) as caught:
        evaluate_budget([TokenRequest("a", common_pb2.COGNITION_TIER_UNSPECIFIED, 1)], CONFIG, 10)
    assert [v.field for v in caught.value.violations] == ["requests[0].tier"]


@given(
    st.lists(st.tuples(st.sampled_from([CLOTHO, LACHESIS, ATROPOS]), st.integers(0, 100_000)), max_size=60),
    st.integers(0, 500_000),
)
def test_never_overspends_and_defers_only_what_the_cap_refused(
    requests: list[tuple[int, int]], cap: int
) -> None:
    evaluation = evaluate_budget(
        [TokenRequest(str(i), t, n) for i, (t, n) in enumerate(requests)], CONFIG, cap
    )
    assert evaluation.total_allowed_tokens <= cap
    assert evaluation.world_cap_held
    for a in evaluation.allocations:
        assert a.allowed_tokens + a.deferred_tokens == min(
            a.request.requested_tokens, CONFIG.tier_budgets.cap_for(a.request.tier)
        )
    if evaluation.total_deferred_tokens:
        assert evaluation.total_allowed_tokens == cap  # something deferred only once the cap is spent
