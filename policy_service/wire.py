"""The one mapping between policy protos and the evaluators' domain records, with input validation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from egbe.v1 import common_pb2, policy_pb2
from policy_service.model import (
    Attestation,
    CheckResult,
    Claim,
    ClaimKind,
    CulturalReviewInput,
    Evidence,
    GateInput,
    ProtectionRequest,
    ProtectionSurface,
)
from services.errors import FieldViolation, InvalidArgument
from services.protocol_limits import (
    GROUND_CLAIM_CHARS,
    GROUND_CLAIMS,
    GROUND_EVIDENCE,
    GROUND_EVIDENCE_CHARS,
    GROUND_ID_CHARS,
    GROUND_LOCALE_CHARS,
    GROUND_TAG_CHARS,
    GROUND_TAGS,
)

CLAIM_KINDS = {
    policy_pb2.CLAIM_KIND_FACT: ClaimKind.FACT,
    policy_pb2.CLAIM_KIND_OPINION: ClaimKind.OPINION,
    policy_pb2.CLAIM_KIND_BACKSTORY: ClaimKind.BACKSTORY,
}
# ClassifyStewardText: texts per request, characters per field name and per text. (Ground's and
# ReviewCulturalBackstory's limits are services.protocol_limits': cognition checks them too.)
MAX_STEWARD_TEXTS = 16
MAX_STEWARD_FIELD_CHARS = 128
MAX_STEWARD_TEXT_CHARS = 4_000
SURFACES = {
    policy_pb2.PROTECTION_SURFACE_DEATH_PATH: ProtectionSurface.DEATH_PATH,
    policy_pb2.PROTECTION_SURFACE_RELATIONSHIP_EDGE: ProtectionSurface.RELATIONSHIP_EDGE,
    policy_pb2.PROTECTION_SURFACE_SCENARIO: ProtectionSurface.SCENARIO,
    policy_pb2.PROTECTION_SURFACE_INCARNATION: ProtectionSurface.INCARNATION,
}


def _require(violations: list[FieldViolation]) -> None:
    if violations:
        raise InvalidArgument(violations)


def _ori_violations(ori: common_pb2.OriRef, field: str = "ori") -> list[FieldViolation]:
    return [] if ori.ori_id else [FieldViolation(f"{field}.ori_id", "required")]


def _unique_ids(ids: Sequence[str], field: str, id_name: str) -> list[FieldViolation]:
    violations = []
    seen: set[str] = set()
    for i, value in enumerate(ids):
        if not value:
            violations.append(FieldViolation(f"{field}[{i}].{id_name}", "required"))
        elif len(value) > GROUND_ID_CHARS:
            violations.append(
                FieldViolation(f"{field}[{i}].{id_name}", f"at most {GROUND_ID_CHARS} characters")
            )
        elif value in seen:
            violations.append(FieldViolation(f"{field}[{i}].{id_name}", f"duplicate id {value!r}"))
        seen.add(value)
    return violations


def _bounded(items: Sequence[object], field: str, limit: int) -> list[FieldViolation]:
    if len(items) > limit:
        return [FieldViolation(field, f"holds {len(items)}; the limit is {limit}")]
    return []


def _sized(text: str, field: str, limit: int) -> list[FieldViolation]:
    if len(text) > limit:
        return [FieldViolation(field, f"is {len(text)} characters; the limit is {limit}")]
    return []


def _tags(tags: Sequence[str], field: str) -> list[FieldViolation]:
    violations = _bounded(tags, field, GROUND_TAGS)
    for i, tag in enumerate(tags[:GROUND_TAGS]):
        violations += _sized(tag, f"{field}[{i}]", GROUND_TAG_CHARS)
    return violations


def claims_from_wire(
    claims: Sequence[policy_pb2.Claim], field: str
) -> tuple[list[Claim], list[FieldViolation]]:
    """The claims, each checked against the per-request limits (only the first GROUND_CLAIMS are read)."""
    parsed: list[Claim] = []
    violations = _bounded(claims, field, GROUND_CLAIMS)
    claims = claims[:GROUND_CLAIMS]
    violations += _unique_ids([c.claim_id for c in claims], field, "claim_id")
    for i, claim in enumerate(claims):
        violations += _sized(claim.text, f"{field}[{i}].text", GROUND_CLAIM_CHARS)
        violations += _tags(claim.required_tags, f"{field}[{i}].required_tags")
        violations += _sized(claim.locale, f"{field}[{i}].locale", GROUND_LOCALE_CHARS)
        kind = CLAIM_KINDS.get(claim.kind)
        if kind is None:
            violations.append(FieldViolation(f"{field}[{i}].kind", "must be fact, opinion or backstory"))
            continue
        if not claim.text.strip():
            violations.append(FieldViolation(f"{field}[{i}].text", "required"))
        parsed.append(Claim(claim.claim_id, kind, claim.text, tuple(claim.required_tags), claim.locale))
    return parsed, violations


def evidence_from_wire(
    evidence: Sequence[policy_pb2.Evidence], field: str
) -> tuple[list[Evidence], list[FieldViolation]]:
    """The evidence, checked against the per-request limits (only the first GROUND_EVIDENCE are read)."""
    violations = _bounded(evidence, field, GROUND_EVIDENCE)
    items = evidence[:GROUND_EVIDENCE]
    violations += _unique_ids([e.evidence_id for e in items], field, "evidence_id")
    for i, item in enumerate(items):
        violations += _sized(item.text, f"{field}[{i}].text", GROUND_EVIDENCE_CHARS)
        violations += _tags(item.tags, f"{field}[{i}].tags")
    return [Evidence(e.evidence_id, e.text, tuple(e.tags)) for e in items], violations


def gate_input(request: policy_pb2.GateRequest) -> GateInput:
    violations = _ori_violations(request.ori)
    if not request.output_id:
        violations.append(FieldViolation("output_id", "required"))
    if not request.mode:
        violations.append(FieldViolation("mode", "required"))
    if request.tier == common_pb2.COGNITION_TIER_UNSPECIFIED:
        violations.append(FieldViolation("tier", "must be clotho, lachesis or atropos"))
    _require(violations)
    return GateInput(
        output_id=request.output_id,
        mode=request.mode,
        utterance=request.utterance,
        cited_memory_refs=tuple(request.cited_memory_refs),
        claimed_capabilities=tuple(request.claimed_capabilities),
        ori_is_minor=request.ori_is_minor,
        counterpart_is_minor=request.counterpart_is_minor,
        established_memory_refs=frozenset(request.established_memory_refs),
        established_capabilities=frozenset(request.established_capabilities),
        stimulus=request.stimulus,
    )


def ground_input(request: policy_pb2.GroundRequest) -> tuple[list[Claim], list[Evidence]]:
    claims, claim_violations = claims_from_wire(request.claims, "claims")
    evidence, evidence_violations = evidence_from_wire(request.evidence, "evidence")
    _require([*_ori_violations(request.ori), *claim_violations, *evidence_violations])
    return claims, evidence


def cultural_review_input(request: policy_pb2.ReviewCulturalBackstoryRequest) -> CulturalReviewInput:
    claims, claim_violations = claims_from_wire(request.claims, "claims")
    evidence, evidence_violations = evidence_from_wire(request.evidence, "evidence")
    violations = [*_ori_violations(request.ori), *claim_violations, *evidence_violations]
    if not request.locale:
        violations.append(FieldViolation("locale", "required (BCP-47, e.g. yo-NG)"))
    _require(violations)
    return CulturalReviewInput(
        locale=request.locale,
        review_source_locale=request.review_source_locale,
        claims=tuple(claims),
        evidence=tuple(evidence),
        attestations=tuple(
            Attestation(a.role, a.reviewer_id, a.passed, tuple(a.evidence_ids)) for a in request.attestations
        ),
    )


def protection_request(request: policy_pb2.CheckMinorProtectionRequest) -> ProtectionRequest:
    surface = SURFACES.get(request.surface)
    violations = _ori_violations(request.ori)
    if surface is None:
        violations.append(
            FieldViolation("surface", "must be death-path, relationship-edge, scenario or incarnation")
        )
    _require(violations)
    assert surface is not None
    return ProtectionRequest(
        ori_is_minor=request.ori_is_minor,
        surface=surface,
        tags=tuple(request.tags),
        counterpart_is_minor=request.counterpart_is_minor,
    )


def steward_texts(request: policy_pb2.ClassifyStewardTextRequest) -> list[tuple[str, str]]:
    """The (field, text) pairs to classify; at least one, each within the limits."""
    texts = request.texts
    violations = _bounded(texts, "texts", MAX_STEWARD_TEXTS)
    if not texts:
        violations.append(FieldViolation("texts", "must hold at least one text"))
    for i, item in enumerate(texts[:MAX_STEWARD_TEXTS]):
        violations += _sized(item.field, f"texts[{i}].field", MAX_STEWARD_FIELD_CHARS)
        violations += _sized(item.text, f"texts[{i}].text", MAX_STEWARD_TEXT_CHARS)
    _require(violations)
    return [(item.field, item.text) for item in texts]


def checks_to_wire(checks: Iterable[CheckResult]) -> list[policy_pb2.PolicyCheck]:
    return [policy_pb2.PolicyCheck(check=c.check, passed=c.passed, reason=c.reason) for c in checks]
