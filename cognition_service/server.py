"""Assembles the cognition service's bundle for the chassis."""

from __future__ import annotations

from cognition_service.servicer import METHOD_ROLES, CognitionServicer
from egbe.v1 import cognition_pb2_grpc
from services.auth import TokenStore
from services.server import ServiceBundle
from services.settings import EgbeSettings


async def build_bundle(settings: EgbeSettings, tokens: TokenStore) -> ServiceBundle:
    return ServiceBundle(
        name="cognition",
        servicers=[(cognition_pb2_grpc.add_CognitionServiceServicer_to_server, CognitionServicer())],
        method_roles=METHOD_ROLES,
    )
