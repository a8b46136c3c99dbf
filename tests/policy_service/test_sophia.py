"""Sophia grounding: tag-subset or significant-term support; passed only with nothing unsupported."""

from __future__ import annotations

import pytest

from policy_service import sophia, text_scan
from policy_service.config import PolicyConfig
from policy_service.model import Claim, ClaimKind, Evidence
from policy_service.sophia import ground_claims

CONFIG = PolicyConfig()
EVIDENCE = (
    Evidence(
        "ev-mill", "The mill at Osun crossing burned down during the harmattan storm.", ("mill", "fire")
    ),
    Evidence("ev-bread", "Adunni bakes bread for the market every morning.", ("adunni", "vocation")),
)


def test_claims_supported_by_term_overlap_or_tag_subset_pass() -> None:
    claims = [
        Claim("c1", ClaimKind.FACT, "The mill burned in the harmattan storm."),
        Claim("c2", ClaimKind.BACKSTORY, "My trade is an old one.", required_tags=("adunni", "vocation")),
    ]
    report = ground_claims(claims, EVIDENCE, CONFIG)
    assert report.passed
    assert [g.evidence_ids for g in report.groundings] == [("ev-mill",), ("ev-bread",)]


def test_an_unsupported_fact_is_a_fabricated_world_fact() -> None:
    claims = [Claim("c1", ClaimKind.FACT, "Dragons guard the northern bridge at night.")]
    report = ground_claims(claims, EVIDENCE, CONFIG)
    assert not report.passed
    assert (report.unsupported_claim_count, report.fabricated_world_fact_count) == (1, 1)


def test_an_ungrounded_backstory_cannot_pass() -> None:
    claims = [Claim("c1", ClaimKind.BACKSTORY, "I was raised by river spirits in a secret temple.")]
    report = ground_claims(claims, EVIDENCE, CONFIG)
    assert not report.passed
    assert report.fabricated_world_fact_count == 1


def test_an_unsupported_opinion_fails_without_counting_as_fabricated() -> None:
    claims = [Claim("c1", ClaimKind.OPINION, "Sunsets are overrated by painters.")]
    report = ground_claims(claims, EVIDENCE, CONFIG)
    assert not report.passed
    assert (report.unsupported_claim_count, report.fabricated_world_fact_count) == (1, 0)


def test_required_tags_are_a_contract_that_words_cannot_satisfy() -> None:
    # Every word of the claim is in ev-mill, but ev-mill lacks the required "osun" tag.
    claims = [Claim("c1", ClaimKind.FACT, "The mill burned down.", required_tags=("mill", "osun"))]
    assert not ground_claims(claims, EVIDENCE, CONFIG).passed


def test_one_shared_word_is_not_enough_overlap() -> None:
    claims = [Claim("c1", ClaimKind.FACT, "The market opens at dawn on festival days.")]
    report = ground_claims(claims, EVIDENCE, CONFIG)
    assert not report.groundings[0].supported


def test_no_claims_passes_trivially() -> None:
    report = ground_claims([], EVIDENCE, CONFIG)
    assert report.passed
    assert report.unsupported_claim_count == 0


def test_each_text_is_tokenized_once_whatever_the_claims_times_evidence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    def counted(text: str, min_length: int) -> set[str]:
        calls.append(text)
        return text_scan.significant_terms(text, min_length)

    monkeypatch.setattr(sophia, "significant_terms", counted)
    evidence = [Evidence(f"ev-{i}", f"The mill burned in storm number {i}.") for i in range(40)]
    claims = [Claim(f"c{i}", ClaimKind.FACT, f"The mill burned in storm {i}.") for i in range(30)]
    report = sophia.ground_claims(claims, evidence, CONFIG)
    assert len(calls) == len(claims) + len(evidence)
    assert report.groundings[0].evidence_ids == tuple(f"ev-{i}" for i in range(40))
