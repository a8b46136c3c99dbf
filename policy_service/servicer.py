"""PolicyService over gRPC: validate, evaluate, map errors; any failure is a rejection."""

from __future__ import annotations

from egbe.v1 import policy_pb2, policy_pb2_grpc
from services.auth import Role
from services.errors import NotBuilt
from services.grpc_types import Context

METHOD_ROLES = {
    policy_pb2.DESCRIPTOR.services_by_name["PolicyService"].full_name: {
        method.name: frozenset({Role.SERVICE})
        for method in policy_pb2.DESCRIPTOR.services_by_name["PolicyService"].methods
    }
}

EVALUATORS = "the Isis gate and Sophia grounding evaluators (issue #6)"


class PolicyServicer(policy_pb2_grpc.PolicyServiceServicer):
    async def Gate(self, request: policy_pb2.GateRequest, context: Context) -> policy_pb2.GateResponse:
        raise NotBuilt(EVALUATORS)

    async def Ground(self, request: policy_pb2.GroundRequest, context: Context) -> policy_pb2.GroundResponse:
        raise NotBuilt(EVALUATORS)

    async def ReviewCulturalBackstory(
        self, request: policy_pb2.ReviewCulturalBackstoryRequest, context: Context
    ) -> policy_pb2.ReviewCulturalBackstoryResponse:
        raise NotBuilt(EVALUATORS)

    async def CheckMinorProtection(
        self, request: policy_pb2.CheckMinorProtectionRequest, context: Context
    ) -> policy_pb2.CheckMinorProtectionResponse:
        raise NotBuilt(EVALUATORS)
