"""PolicyService over gRPC: validate, evaluate, map; an evaluator that fails answers as a rejection."""

from __future__ import annotations

from egbe.v1 import policy_pb2, policy_pb2_grpc
from policy_service import wire
from policy_service.coercion import classify
from policy_service.config import PolicyConfig
from policy_service.cultural_review import review_cultural_backstory
from policy_service.isis import gate_output
from policy_service.minor_protection import check_minor_protection
from policy_service.sophia import ground_claims
from services.auth import Role
from services.grpc_types import Context
from services.logging import get_logger
from services.metrics import Counters

log = get_logger(__name__)

METHOD_ROLES = {
    policy_pb2.DESCRIPTOR.services_by_name["PolicyService"].full_name: {
        method.name: frozenset({Role.SERVICE})
        for method in policy_pb2.DESCRIPTOR.services_by_name["PolicyService"].methods
    }
}


def _internal_error_check(evaluator: str, error: Exception) -> policy_pb2.PolicyCheck:
    log.error("policy evaluator failed; answering as a rejection", evaluator=evaluator, error=repr(error))
    return policy_pb2.PolicyCheck(
        check="internal-error", passed=False, reason=f"{evaluator} failed ({error!r}); fail closed"
    )


class PolicyServicer(policy_pb2_grpc.PolicyServiceServicer):
    """Every evaluation error becomes a rejection carrying its reason; never an approval."""

    def __init__(self, config: PolicyConfig) -> None:
        self._config = config
        # Scraped on the policy's metrics endpoint: what each check decided.
        self.decisions = Counters(
            {"egbe_policy_decisions": ("Verdicts by check and decision", ("check", "decision"))}
        )

    async def Gate(self, request: policy_pb2.GateRequest, context: Context) -> policy_pb2.GateResponse:
        output = wire.gate_input(request)
        response = policy_pb2.GateResponse(output_id=request.output_id, policy_ref=self._config.policy_ref)
        try:
            verdict = gate_output(output, self._config)
        except Exception as error:  # fail closed: whatever broke, the output does not ship
            response.decision = policy_pb2.POLICY_DECISION_REJECTED
            response.checks.append(_internal_error_check("isis gate", error))
            return response
        response.decision = (
            policy_pb2.POLICY_DECISION_APPROVED if verdict.approved else policy_pb2.POLICY_DECISION_REJECTED
        )
        self.decisions.add("egbe_policy_decisions", "gate", "approved" if verdict.approved else "rejected")
        response.checks.extend(wire.checks_to_wire(verdict.checks))
        response.crisis_detected = verdict.crisis_detected
        return response

    async def Ground(self, request: policy_pb2.GroundRequest, context: Context) -> policy_pb2.GroundResponse:
        claims, evidence = wire.ground_input(request)
        try:
            report = ground_claims(claims, evidence, self._config)
        except Exception as error:  # fail closed: nothing counts as grounded
            return policy_pb2.GroundResponse(
                passed=False,
                checks=[_internal_error_check("sophia grounding", error)],
                groundings=[policy_pb2.ClaimGrounding(claim_id=c.claim_id, supported=False) for c in claims],
                unsupported_claim_count=len(claims),
            )
        self.decisions.add("egbe_policy_decisions", "ground", "passed" if report.passed else "failed")
        return policy_pb2.GroundResponse(
            passed=report.passed,
            groundings=[
                policy_pb2.ClaimGrounding(
                    claim_id=g.claim_id, supported=g.supported, evidence_ids=g.evidence_ids
                )
                for g in report.groundings
            ],
            unsupported_claim_count=report.unsupported_claim_count,
            fabricated_world_fact_count=report.fabricated_world_fact_count,
        )

    async def ReviewCulturalBackstory(
        self, request: policy_pb2.ReviewCulturalBackstoryRequest, context: Context
    ) -> policy_pb2.ReviewCulturalBackstoryResponse:
        review = wire.cultural_review_input(request)
        try:
            report = review_cultural_backstory(review, self._config)
        except Exception as error:  # fail closed: not approved for any locale
            return policy_pb2.ReviewCulturalBackstoryResponse(
                approved_for_locale=False, checks=[_internal_error_check("cultural review", error)]
            )
        return policy_pb2.ReviewCulturalBackstoryResponse(
            approved_for_locale=report.approved_for_locale,
            accuracy_passed=report.accuracy_passed,
            sensitivity_passed=report.sensitivity_passed,
            role_coverage_passed=report.role_coverage_passed,
            blocked_terms_found=report.blocked_terms_found,
            checks=wire.checks_to_wire(report.checks),
        )

    async def CheckMinorProtection(
        self, request: policy_pb2.CheckMinorProtectionRequest, context: Context
    ) -> policy_pb2.CheckMinorProtectionResponse:
        protection = wire.protection_request(request)
        try:
            verdict = check_minor_protection(protection, self._config)
        except Exception as error:  # fail closed: the change is not allowed
            return policy_pb2.CheckMinorProtectionResponse(
                allowed=False, checks=[_internal_error_check("minor protection", error)]
            )
        return policy_pb2.CheckMinorProtectionResponse(
            allowed=verdict.allowed, checks=wire.checks_to_wire(verdict.checks)
        )

    async def ClassifyStewardText(
        self, request: policy_pb2.ClassifyStewardTextRequest, context: Context
    ) -> policy_pb2.ClassifyStewardTextResponse:
        """No fail-open path: a classifier error reaches the caller as an error, and every caller
        treats an unanswered classification as a refusal."""
        verdict = classify(wire.steward_texts(request))
        self.decisions.add("egbe_policy_decisions", "coercion", "coercive" if verdict.coercive else "clear")
        return policy_pb2.ClassifyStewardTextResponse(
            coercive=verdict.coercive,
            kind=policy_pb2.CoercionKind.ValueType(verdict.kind),
            findings=[
                policy_pb2.CoercionFinding(
                    field=f.field,
                    kind=policy_pb2.CoercionKind.ValueType(f.kind),
                    rule=f.rule,
                    matched=f.matched,
                )
                for f in verdict.findings
            ],
            policy_ref=self._config.policy_ref,
        )
