"""Assembles the policy service's bundle for the chassis."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from egbe.v1 import policy_pb2_grpc
from policy_service.config import PolicyServiceSettings
from policy_service.servicer import METHOD_ROLES, PolicyServicer
from services.auth import TokenStore
from services.server import ServiceBundle


async def build_bundle(settings: PolicyServiceSettings, tokens: TokenStore) -> ServiceBundle:
    servicer = PolicyServicer(settings.policy)
    metrics = CollectorRegistry()
    metrics.register(servicer.decisions)
    return ServiceBundle(
        name="policy",
        servicers=[(policy_pb2_grpc.add_PolicyServiceServicer_to_server, servicer)],
        method_roles=METHOD_ROLES,
        metrics=metrics,
    )
