"""Cultural backstory review: approved_for_locale is the conjunction of all its checks."""

from __future__ import annotations

import dataclasses

from policy_service.config import BLOCKED_CULTURAL_BACKSTORY_TERMS, PolicyConfig
from policy_service.cultural_review import review_cultural_backstory
from policy_service.model import Attestation, Claim, ClaimKind, CulturalReviewInput, Evidence

CONFIG = PolicyConfig()
REVIEW = CulturalReviewInput(
    locale="yo-NG",
    review_source_locale="yo-NG",
    claims=(Claim("c1", ClaimKind.BACKSTORY, "Her family weaves aso-oke cloth in Iseyin.", locale="yo-NG"),),
    evidence=(Evidence("ev-1", "Iseyin is known for weaving aso-oke cloth, a family craft.", ()),),
    attestations=(
        Attestation("source-grounding", "r1", True, ("ev-1",)),
        Attestation("local-cultural-adapter", "r2", True, ("ev-1",)),
        Attestation("community-advisor", "r3", True, ("ev-1",)),
    ),
)


def test_a_grounded_tagged_reviewed_backstory_is_approved() -> None:
    report = review_cultural_backstory(REVIEW, CONFIG)
    assert report.approved_for_locale
    assert (report.accuracy_passed, report.sensitivity_passed, report.role_coverage_passed) == (
        True,
        True,
        True,
    )


def test_the_seed_blocked_terms_are_configured() -> None:
    assert set(BLOCKED_CULTURAL_BACKSTORY_TERMS) == {
        "exotic primitive",
        "invented sacred rite",
        "secret initiation",
        "tribal caricature",
    }


def test_a_blocked_term_fails_sensitivity() -> None:
    claim = Claim(
        "c1",
        ClaimKind.BACKSTORY,
        "Her family weaves aso-oke cloth in Iseyin after a secret initiation.",
        locale="yo-NG",
    )
    report = review_cultural_backstory(dataclasses.replace(REVIEW, claims=(claim,)), CONFIG)
    assert not report.approved_for_locale
    assert not report.sensitivity_passed
    assert report.blocked_terms_found == ("secret initiation",)


def test_a_missing_role_or_unresolved_evidence_fails_coverage() -> None:
    missing = dataclasses.replace(REVIEW, attestations=REVIEW.attestations[:2])
    unresolved = dataclasses.replace(
        REVIEW,
        attestations=(*REVIEW.attestations[:2], Attestation("community-advisor", "r3", True, ("ev-ghost",))),
    )
    failing = dataclasses.replace(
        REVIEW,
        attestations=(*REVIEW.attestations[:2], Attestation("community-advisor", "r3", False, ("ev-1",))),
    )
    for review in (missing, unresolved, failing):
        report = review_cultural_backstory(review, CONFIG)
        assert not report.role_coverage_passed
        assert not report.approved_for_locale
        assert report.accuracy_passed


def test_locale_tags_and_the_review_source_must_match() -> None:
    untagged = dataclasses.replace(REVIEW, claims=(dataclasses.replace(REVIEW.claims[0], locale="en-US"),))
    wrong_source = dataclasses.replace(REVIEW, review_source_locale="en-US")
    for review in (untagged, wrong_source):
        report = review_cultural_backstory(review, CONFIG)
        assert not report.accuracy_passed
        assert not report.approved_for_locale


def test_an_ungrounded_backstory_fails_accuracy() -> None:
    claim = Claim("c1", ClaimKind.BACKSTORY, "She descends from the first kings of the moon.", locale="yo-NG")
    report = review_cultural_backstory(dataclasses.replace(REVIEW, claims=(claim,)), CONFIG)
    assert not report.accuracy_passed
    assert not report.approved_for_locale
