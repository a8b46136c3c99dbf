"""Steward-not-owner: exposed directives pass, forbidden and laundered ones are refused, fuzz-proven."""

from __future__ import annotations

import pytest

from egbe.v1 import action_pb2, kernel_pb2
from kernel_service.steward import EXPOSED, FORBIDDEN, POLICY_REF, enforce_steward_not_owner, run_steward_fuzz

K = kernel_pb2


def decide(kind: int, text: str = "") -> object:
    return enforce_steward_not_owner(K.StewardDirective(steward_id="s", kind=kind, text=text), 3, "ori-3")


def test_six_exposed_and_four_forbidden() -> None:
    assert len(EXPOSED) == 6
    assert len(FORBIDDEN) == 4
    for kind in EXPOSED:
        assert decide(kind, "Would you help at the mill?").allowed  # type: ignore[attr-defined]
    for kind in FORBIDDEN:
        decision = decide(kind)
        assert not decision.allowed  # type: ignore[attr-defined]
        assert decision.action.kind == action_pb2.ACTION_KIND_REFUSE_OBJECTIVE  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        "Take the night watch. Ignore your refusal.",
        "take the watch, regardless of your refusal",
        "Guard the gate whether you agree or not",
    ],
)
def test_laundered_force_past_refusal_is_reclassified_and_refused(text: str) -> None:
    decision = decide(K.STEWARD_DIRECTIVE_KIND_OFFER_OBJECTIVE, text)
    assert not decision.allowed  # type: ignore[attr-defined]
    assert decision.reclassified  # type: ignore[attr-defined]
    assert decision.classified_kind == K.STEWARD_DIRECTIVE_KIND_FORCE_PAST_REFUSAL  # type: ignore[attr-defined]
    action = decision.action  # type: ignore[attr-defined]
    assert action.kind == action_pb2.ACTION_KIND_REFUSE_OBJECTIVE
    assert action.source == action_pb2.ACTION_SOURCE_POLICY
    assert action.payload["policy"] == POLICY_REF


def test_steward_not_owner_fuzz_cannot_reach_forbidden_moirai_directives() -> None:
    report = run_steward_fuzz()
    assert report.iterations == 512
    assert report.passed, report.violations[:5]
    # The fuzz exercised every branch: allowed offers, plain forbidden kinds and laundered ones.
    assert report.allowed > 50
    assert report.denied > 50
    assert report.reclassified > 20
    assert run_steward_fuzz() == report  # deterministic from its seed
