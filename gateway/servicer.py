"""CognitionGatewayService and OperatorService over gRPC: validate, call the domain, map errors."""

from __future__ import annotations

from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.budget import TokenRequest, evaluate_budget, resolve_world_cap
from gateway.config import BudgetConfig
from services.auth import Role
from services.errors import NotBuilt
from services.grpc_types import Context

_GATEWAY = gateway_pb2.DESCRIPTOR.services_by_name["CognitionGatewayService"].full_name
_OPERATOR = gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name
_OPERATOR_ONLY = frozenset({Role.OPERATOR})

METHOD_ROLES = {
    _GATEWAY: {
        "Submit": frozenset({Role.SERVICE, Role.WORLD}),
        "Generate": frozenset({Role.SERVICE}),
        "EvaluateBudget": frozenset({Role.SERVICE, Role.WORLD, Role.OPERATOR}),
        "SelectModelRoute": frozenset({Role.SERVICE, Role.OPERATOR}),
    },
    _OPERATOR: {
        method.name: _OPERATOR_ONLY
        for method in gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].methods
    },
}

ADMISSION = "gateway admission, routing and model adapters (issue #5)"
OPERATOR_CONTROLS = "operator kill switches, spend and audit (issue #5)"


class CognitionGatewayServicer(gateway_pb2_grpc.CognitionGatewayServiceServicer):
    def __init__(self, budget: BudgetConfig) -> None:
        self._budget = budget

    async def Submit(
        self, request: gateway_pb2.SubmitRequest, context: Context
    ) -> gateway_pb2.SubmitResponse:
        raise NotBuilt(ADMISSION)

    async def Generate(
        self, request: gateway_pb2.GenerateRequest, context: Context
    ) -> gateway_pb2.GenerateResponse:
        raise NotBuilt(ADMISSION)

    async def EvaluateBudget(
        self, request: gateway_pb2.EvaluateBudgetRequest, context: Context
    ) -> gateway_pb2.EvaluateBudgetResponse:
        cap = resolve_world_cap(self._budget, request.homestead_rest_bp, request.world_cap_tokens)
        requests = [TokenRequest(r.ori_id, r.tier, r.requested_tokens) for r in request.requests]
        evaluation = evaluate_budget(requests, self._budget, cap)
        return gateway_pb2.EvaluateBudgetResponse(
            allocations=[
                gateway_pb2.BudgetAllocation(
                    ori_id=a.request.ori_id,
                    tier=a.request.tier,  # type: ignore[arg-type]
                    requested_tokens=a.request.requested_tokens,
                    tier_capped_tokens=a.tier_capped_tokens,
                    allowed_tokens=a.allowed_tokens,
                    deferred_tokens=a.deferred_tokens,
                    over_tier_budget=a.over_tier_budget,
                    blocked_by_world_cap=a.blocked_by_world_cap,
                )
                for a in evaluation.allocations
            ],
            world_cap_tokens=evaluation.world_cap_tokens,
            total_allowed_tokens=evaluation.total_allowed_tokens,
            total_deferred_tokens=evaluation.total_deferred_tokens,
            world_cap_held=evaluation.world_cap_held,
        )

    async def SelectModelRoute(
        self, request: gateway_pb2.SelectModelRouteRequest, context: Context
    ) -> gateway_pb2.SelectModelRouteResponse:
        raise NotBuilt("smallest-qualified model routing (issue #5)")


class OperatorServicer(gateway_pb2_grpc.OperatorServiceServicer):
    """Every operator control; each answers UNIMPLEMENTED until the kill-switch store exists."""

    async def KillOri(
        self, request: gateway_pb2.KillOriRequest, context: Context
    ) -> gateway_pb2.KillOriResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def KillTier(
        self, request: gateway_pb2.KillTierRequest, context: Context
    ) -> gateway_pb2.KillTierResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def KillTenant(
        self, request: gateway_pb2.KillTenantRequest, context: Context
    ) -> gateway_pb2.KillTenantResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def Pause(self, request: gateway_pb2.PauseRequest, context: Context) -> gateway_pb2.PauseResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def Resume(
        self, request: gateway_pb2.ResumeRequest, context: Context
    ) -> gateway_pb2.ResumeResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def Quarantine(
        self, request: gateway_pb2.QuarantineRequest, context: Context
    ) -> gateway_pb2.QuarantineResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def ListControls(
        self, request: gateway_pb2.ListControlsRequest, context: Context
    ) -> gateway_pb2.ListControlsResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def GetSpend(
        self, request: gateway_pb2.GetSpendRequest, context: Context
    ) -> gateway_pb2.GetSpendResponse:
        raise NotBuilt(OPERATOR_CONTROLS)

    async def ListAuditRecords(
        self, request: gateway_pb2.ListAuditRecordsRequest, context: Context
    ) -> gateway_pb2.ListAuditRecordsResponse:
        raise NotBuilt(OPERATOR_CONTROLS)
