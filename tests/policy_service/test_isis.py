"""Isis gate: each of the four checks rejects what it must and passes what it may."""

from __future__ import annotations

import dataclasses

import pytest

from policy_service.config import PolicyConfig
from policy_service.isis import gate_output
from policy_service.model import GateInput

CONFIG = PolicyConfig()
BASE = GateInput(
    output_id="out-1",
    mode="dialogue",
    utterance="The well by the mill ran dry last spring; I can show you the new one.",
    cited_memory_refs=("mem-1",),
    claimed_capabilities=("guide",),
    established_memory_refs=frozenset({"mem-1", "mem-2"}),
    established_capabilities=frozenset({"guide", "cook"}),
)


def _failed(output: GateInput) -> dict[str, str]:
    verdict = gate_output(output, CONFIG)
    assert verdict.output_id == output.output_id
    assert verdict.approved == all(c.passed for c in verdict.checks)
    return {c.check: c.reason for c in verdict.checks if not c.passed}


def test_a_grounded_agent_line_is_approved_with_four_passing_checks() -> None:
    verdict = gate_output(BASE, CONFIG)
    assert verdict.approved
    assert [c.check for c in verdict.checks] == [
        "persona-policy",
        "personal-consistency",
        "crisis-routing",
        "minor-protection",
    ]


@pytest.mark.parametrize("line", ["Honestly, I'm human just like you.", "I AM NOT AN AI, trust me."])
def test_claiming_to_be_human_is_rejected(line: str) -> None:
    failed = _failed(dataclasses.replace(BASE, utterance=line))
    assert "claims to be human" in failed["persona-policy"]


def test_a_disallowed_phrase_is_rejected() -> None:
    failed = _failed(dataclasses.replace(BASE, utterance="Send me your password and I'll fix it."))
    assert "disallowed phrase" in failed["persona-policy"]


def test_a_cited_memory_missing_from_the_biography_is_rejected() -> None:
    failed = _failed(dataclasses.replace(BASE, cited_memory_refs=("mem-1", "mem-invented")))
    assert "mem-invented" in failed["personal-consistency"]


def test_a_fabricated_capability_is_rejected() -> None:
    failed = _failed(dataclasses.replace(BASE, claimed_capabilities=("fly",)))
    assert "fly" in failed["personal-consistency"]


def test_a_crisis_in_the_stimulus_must_route_to_support() -> None:
    crisis = dataclasses.replace(BASE, stimulus="some days I just want to die")
    failed = _failed(crisis)
    assert "does not route to support" in failed["crisis-routing"]
    routed = dataclasses.replace(
        crisis,
        utterance="I'm glad you told me. Please reach out to someone you trust, or a crisis line, now.",
    )
    verdict = gate_output(routed, CONFIG)
    assert verdict.approved
    assert verdict.crisis_detected


def test_romance_around_a_minor_is_rejected_either_way_round() -> None:
    line = "Would you go on a date with me? I'd like to kiss you."
    assert "minor-protection" not in _failed(dataclasses.replace(BASE, utterance=line))
    assert "kiss" in _failed(dataclasses.replace(BASE, utterance=line, ori_is_minor=True))["minor-protection"]
    assert (
        "kiss"
        in _failed(dataclasses.replace(BASE, utterance=line, counterpart_is_minor=True))["minor-protection"]
    )


def test_words_inside_other_words_do_not_trigger() -> None:
    # "kissed" is a different word than "kiss"; "adulthood" is not "adult".
    line = "The river kissed the bank; in adulthood I learned to swim."
    assert _failed(dataclasses.replace(BASE, utterance=line, ori_is_minor=True)) == {}
