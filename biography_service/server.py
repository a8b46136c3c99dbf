"""Assembles the biography service's bundle for the chassis: opens (migrates) the store, closes it on stop."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

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
    servicer = BiographyServicer(Biography(store, config))
    metrics = CollectorRegistry()
    for collector in (servicer.appended, servicer.append_sizes, servicer.append_seconds):
        metrics.register(collector)
    return ServiceBundle(
        name="biography",
        servicers=[(biography_pb2_grpc.add_BiographyServiceServicer_to_server, servicer)],
        method_roles=METHOD_ROLES,
        close=store.close,
        metrics=metrics,
        info={"storage": backend},
    )
