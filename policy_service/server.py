"""Assembles the policy service's bundle for the chassis."""

from __future__ import annotations

from egbe.v1 import policy_pb2_grpc
from policy_service.servicer import METHOD_ROLES, PolicyServicer
from services.auth import TokenStore
from services.server import ServiceBundle
from services.settings import EgbeSettings


async def build_bundle(settings: EgbeSettings, tokens: TokenStore) -> ServiceBundle:
    return ServiceBundle(
        name="policy",
        servicers=[(policy_pb2_grpc.add_PolicyServiceServicer_to_server, PolicyServicer(settings.policy))],
        method_roles=METHOD_ROLES,
    )
