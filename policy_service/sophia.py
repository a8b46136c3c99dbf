"""Sophia grounding: every claim matched to evidence by required-tag subset or significant-term overlap.

The evidence is indexed once (term → items, tag → items), so each claim costs its own terms times the
items holding them: the work grows with the request's size, never with claims × evidence texts
re-read. The wire caps (policy_service/wire.py) bound both counts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

from policy_service.config import PolicyConfig
from policy_service.model import Claim, ClaimGrounding, ClaimKind, Evidence, GroundingReport
from policy_service.text_scan import significant_terms

# An unsupported claim of these kinds asserts something about the world that is not established.
WORLD_FACT_KINDS = frozenset({ClaimKind.FACT, ClaimKind.BACKSTORY})


@dataclass(frozen=True)
class EvidenceIndex:
    """Which evidence items (by position) hold each significant term and each tag."""

    ids: tuple[str, ...]
    by_term: dict[str, list[int]]
    by_tag: dict[str, set[int]]

    @classmethod
    def of(cls, evidence: Sequence[Evidence], config: PolicyConfig) -> EvidenceIndex:
        by_term: defaultdict[str, list[int]] = defaultdict(list)
        by_tag: defaultdict[str, set[int]] = defaultdict(set)
        for position, item in enumerate(evidence):
            for term in significant_terms(item.text, config.significant_term_min_length):
                by_term[term].append(position)
            for tag in item.tags:
                by_tag[tag].add(position)
        return cls(tuple(e.evidence_id for e in evidence), dict(by_term), dict(by_tag))

    def tagged(self, tags: Sequence[str]) -> list[int]:
        """Items whose tags include every one of `tags`, in evidence order."""
        holders = [self.by_tag.get(tag, set()) for tag in set(tags)]
        return sorted(set.intersection(*sorted(holders, key=len)))

    def overlapping(self, terms: set[str], config: PolicyConfig) -> list[int]:
        """Items sharing enough of the claim's terms: at least `min_term_overlap` (or all of them when
        the claim has fewer) and at least `min_term_overlap_bp` of them, in evidence order."""
        if not terms:
            return []
        # Counter over a chained iterable counts in C: the hot loop of a grounding.
        shared = Counter(chain.from_iterable(self.by_term.get(term, ()) for term in terms))
        needed = min(config.min_term_overlap, len(terms))
        return sorted(
            position
            for position, count in shared.items()
            if count >= needed and count * 10_000 >= config.min_term_overlap_bp * len(terms)
        )


def ground_claim(claim: Claim, index: EvidenceIndex, config: PolicyConfig) -> ClaimGrounding:
    """Which evidence items support one claim; supported when at least one does.

    Tags are an explicit contract: a claim with required tags is supported by a tag match only.
    """
    if claim.required_tags:
        positions = index.tagged(claim.required_tags)
    else:
        positions = index.overlapping(
            significant_terms(claim.text, config.significant_term_min_length), config
        )
    supporting = tuple(index.ids[p] for p in positions)
    return ClaimGrounding(claim.claim_id, bool(supporting), supporting)


def ground_claims(
    claims: Sequence[Claim], evidence: Sequence[Evidence], config: PolicyConfig
) -> GroundingReport:
    """Ground every claim; passed only with zero unsupported claims and zero fabricated world facts."""
    index = EvidenceIndex.of(evidence, config)
    groundings = tuple(ground_claim(claim, index, config) for claim in claims)
    unsupported = [c for c, g in zip(claims, groundings, strict=True) if not g.supported]
    fabricated = sum(1 for c in unsupported if c.kind in WORLD_FACT_KINDS)
    return GroundingReport(
        passed=not unsupported and fabricated == 0,
        groundings=groundings,
        unsupported_claim_count=len(unsupported),
        fabricated_world_fact_count=fabricated,
    )
