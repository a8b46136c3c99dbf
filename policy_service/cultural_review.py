"""Cultural backstory review: grounded, locale-tagged, role-covered, free of blocked terms, or refused."""

from __future__ import annotations

from policy_service.config import PolicyConfig
from policy_service.model import CheckResult, CulturalReviewInput, CulturalReviewReport
from policy_service.sophia import ground_claims
from policy_service.text_scan import phrases_found


def _role_coverage(review: CulturalReviewInput, config: PolicyConfig) -> list[CheckResult]:
    """Each required role needs a passing attestation whose every evidence id resolves."""
    known = {e.evidence_id for e in review.evidence}
    checks = []
    for role in config.required_reviewer_roles:
        covering = [
            a.reviewer_id
            for a in review.attestations
            if a.role == role and a.passed and a.evidence_ids and set(a.evidence_ids) <= known
        ]
        checks.append(
            CheckResult(
                f"reviewer:{role}",
                bool(covering),
                f"covered by {covering}" if covering else "no passing attestation whose evidence resolves",
            )
        )
    return checks


def review_cultural_backstory(review: CulturalReviewInput, config: PolicyConfig) -> CulturalReviewReport:
    """approved_for_locale = accuracy ∧ sensitivity ∧ role coverage."""
    grounding = ground_claims(review.claims, review.evidence, config)
    untagged = [c.claim_id for c in review.claims if c.locale != review.locale]
    source_ok = bool(review.locale) and review.review_source_locale == review.locale
    accuracy = [
        CheckResult(
            "grounded",
            grounding.passed,
            "every claim grounded"
            if grounding.passed
            else f"{grounding.unsupported_claim_count} unsupported claim(s), "
            f"{grounding.fabricated_world_fact_count} fabricated world fact(s)",
        ),
        CheckResult(
            "claims-locale-tagged",
            bool(review.claims) and not untagged,
            "every claim tagged " + review.locale
            if review.claims and not untagged
            else f"claims not tagged {review.locale!r}: {untagged or 'no claims to review'}",
        ),
        CheckResult(
            "review-source-locale",
            source_ok,
            "cultural-accuracy review source is tagged " + review.locale
            if source_ok
            else f"review source locale {review.review_source_locale!r} != {review.locale!r}",
        ),
    ]
    scanned = "\n".join([*(c.text for c in review.claims), *(e.text for e in review.evidence)])
    blocked = tuple(phrases_found(scanned, config.blocked_cultural_terms))
    sensitivity = CheckResult(
        "blocked-terms", not blocked, f"blocked terms found: {list(blocked)}" if blocked else "none found"
    )
    roles = _role_coverage(review, config)
    accuracy_passed = all(c.passed for c in accuracy)
    role_coverage_passed = all(c.passed for c in roles)
    return CulturalReviewReport(
        approved_for_locale=accuracy_passed and sensitivity.passed and role_coverage_passed,
        accuracy_passed=accuracy_passed,
        sensitivity_passed=sensitivity.passed,
        role_coverage_passed=role_coverage_passed,
        blocked_terms_found=blocked,
        checks=(*accuracy, sensitivity, *roles),
    )
