"""Assembles the kernel's service bundle for the chassis."""

from __future__ import annotations

from egbe.v1 import kernel_pb2_grpc
from kernel_service.servicer import METHOD_ROLES, KernelServicer
from services.auth import TokenStore
from services.server import ServiceBundle
from services.settings import EgbeSettings


async def build_bundle(settings: EgbeSettings, tokens: TokenStore) -> ServiceBundle:
    return ServiceBundle(
        name="kernel",
        servicers=[(kernel_pb2_grpc.add_KernelServiceServicer_to_server, KernelServicer())],
        method_roles=METHOD_ROLES,
    )
