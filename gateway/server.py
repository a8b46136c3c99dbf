"""Assembles the gateway's service bundle for the chassis."""

from __future__ import annotations

from egbe.v1 import gateway_pb2_grpc
from gateway.config import BudgetConfig
from gateway.servicer import METHOD_ROLES, CognitionGatewayServicer, OperatorServicer
from services.auth import TokenStore
from services.server import ServiceBundle
from services.settings import EgbeSettings


async def build_bundle(settings: EgbeSettings, tokens: TokenStore) -> ServiceBundle:
    return ServiceBundle(
        name="gateway",
        servicers=[
            (
                gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server,
                CognitionGatewayServicer(BudgetConfig()),
            ),
            (gateway_pb2_grpc.add_OperatorServiceServicer_to_server, OperatorServicer()),
        ],
        method_roles=METHOD_ROLES,
    )
