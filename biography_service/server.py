"""Assembles the biography service's bundle for the chassis: opens (migrates) the store, closes it on stop."""

from __future__ import annotations

from biography_service.config import BiographyServiceSettings
from biography_service.service import Biography
from biography_service.servicer import METHOD_ROLES, BiographyServicer
from biography_service.store.factory import store_for
from egbe.v1 import biography_pb2_grpc
from services.auth import TokenStore
from services.server import ServiceBundle


async def build_bundle(settings: BiographyServiceSettings, tokens: TokenStore) -> ServiceBundle:
    config = settings.biography
    store = store_for(settings, config)
    await store.open()
    backend = "postgres" if settings.database_url else "sqlite"
    return ServiceBundle(
        name="biography",
        servicers=[
            (
                biography_pb2_grpc.add_BiographyServiceServicer_to_server,
                BiographyServicer(Biography(store, config)),
            )
        ],
        method_roles=METHOD_ROLES,
        close=store.close,
        info={"storage": backend},
    )
