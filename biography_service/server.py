"""Assembles the biography service's bundle for the chassis."""

from __future__ import annotations

from biography_service.servicer import METHOD_ROLES, BiographyServicer
from egbe.v1 import biography_pb2_grpc
from services.auth import TokenStore
from services.server import ServiceBundle
from services.settings import EgbeSettings


async def build_bundle(settings: EgbeSettings, tokens: TokenStore) -> ServiceBundle:
    return ServiceBundle(
        name="biography",
        servicers=[(biography_pb2_grpc.add_BiographyServiceServicer_to_server, BiographyServicer())],
        method_roles=METHOD_ROLES,
    )
