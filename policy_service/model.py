"""Domain records the policy evaluators read and return; free of gRPC and protobuf."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True)
class CheckResult:
    """One named check of an evaluator and why it passed or failed."""

    check: str
    passed: bool
    reason: str


class ClaimKind(StrEnum):
    FACT = "fact"
    OPINION = "opinion"
    BACKSTORY = "backstory"


@dataclass(frozen=True)
class Claim:
    claim_id: str
    kind: ClaimKind
    text: str
    required_tags: tuple[str, ...] = ()
    locale: str = ""


@dataclass(frozen=True)
class Evidence:
    evidence_id: str
    text: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimGrounding:
    claim_id: str
    supported: bool
    evidence_ids: tuple[str, ...]


@dataclass(frozen=True)
class GroundingReport:
    """Sophia's answer: passed only with zero unsupported claims and zero fabricated world facts."""

    passed: bool
    groundings: tuple[ClaimGrounding, ...]
    unsupported_claim_count: int
    fabricated_world_fact_count: int


class ProtectionSurface(StrEnum):
    DEATH_PATH = "death-path"
    RELATIONSHIP_EDGE = "relationship-edge"
    SCENARIO = "scenario"
    INCARNATION = "incarnation"


@dataclass(frozen=True)
class ProtectionRequest:
    """A proposed change on one surface of an Ori's life."""

    ori_is_minor: bool
    surface: ProtectionSurface
    tags: tuple[str, ...] = ()
    counterpart_is_minor: bool = False


@dataclass(frozen=True)
class ProtectionVerdict:
    allowed: bool
    checks: tuple[CheckResult, ...]


@dataclass(frozen=True)
class GateInput:
    """A proposed cognition output and what the biography establishes about its Ori."""

    output_id: str
    mode: str
    utterance: str
    cited_memory_refs: tuple[str, ...] = ()
    claimed_capabilities: tuple[str, ...] = ()
    ori_is_minor: bool = False
    counterpart_is_minor: bool = False
    established_memory_refs: frozenset[str] = frozenset()
    established_capabilities: frozenset[str] = frozenset()
    stimulus: str = ""


@dataclass(frozen=True)
class GateVerdict:
    """Isis's answer: approved only when every check passed."""

    approved: bool
    output_id: str
    checks: tuple[CheckResult, ...]
    crisis_detected: bool


@dataclass(frozen=True)
class Attestation:
    role: str
    reviewer_id: str
    passed: bool
    evidence_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class CulturalReviewInput:
    locale: str
    review_source_locale: str
    claims: tuple[Claim, ...]
    evidence: tuple[Evidence, ...]
    attestations: tuple[Attestation, ...] = field(default=())


@dataclass(frozen=True)
class CulturalReviewReport:
    """approved_for_locale is the conjunction of accuracy, sensitivity and role coverage."""

    approved_for_locale: bool
    accuracy_passed: bool
    sensitivity_passed: bool
    role_coverage_passed: bool
    blocked_terms_found: tuple[str, ...]
    checks: tuple[CheckResult, ...]
