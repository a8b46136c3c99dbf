"""Sophia grounding: every claim matched to evidence by required-tag subset or significant-term overlap."""

from __future__ import annotations

from collections.abc import Sequence

from policy_service.config import PolicyConfig
from policy_service.model import Claim, ClaimGrounding, ClaimKind, Evidence, GroundingReport
from policy_service.text_scan import significant_terms

# An unsupported claim of these kinds asserts something about the world that is not established.
WORLD_FACT_KINDS = frozenset({ClaimKind.FACT, ClaimKind.BACKSTORY})


def _supports(claim: Claim, evidence: Evidence, claim_terms: set[str], config: PolicyConfig) -> bool:
    if claim.required_tags:
        # Tags are an explicit contract: only a tag match counts, words cannot stand in for it.
        return set(claim.required_tags) <= set(evidence.tags)
    if not claim_terms:
        return False
    shared = claim_terms & significant_terms(evidence.text, config.significant_term_min_length)
    needed = min(config.min_term_overlap, len(claim_terms))
    return len(shared) >= needed and len(shared) * 10_000 >= config.min_term_overlap_bp * len(claim_terms)


def ground_claim(claim: Claim, evidence: Sequence[Evidence], config: PolicyConfig) -> ClaimGrounding:
    """Which evidence items support one claim; supported when at least one does."""
    claim_terms = significant_terms(claim.text, config.significant_term_min_length)
    supporting = tuple(e.evidence_id for e in evidence if _supports(claim, e, claim_terms, config))
    return ClaimGrounding(claim.claim_id, bool(supporting), supporting)


def ground_claims(
    claims: Sequence[Claim], evidence: Sequence[Evidence], config: PolicyConfig
) -> GroundingReport:
    """Ground every claim; passed only with zero unsupported claims and zero fabricated world facts."""
    groundings = tuple(ground_claim(claim, evidence, config) for claim in claims)
    unsupported = [c for c, g in zip(claims, groundings, strict=True) if not g.supported]
    fabricated = sum(1 for c in unsupported if c.kind in WORLD_FACT_KINDS)
    return GroundingReport(
        passed=not unsupported and fabricated == 0,
        groundings=groundings,
        unsupported_claim_count=len(unsupported),
        fabricated_world_fact_count=fabricated,
    )
