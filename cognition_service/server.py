"""Assembles the cognition service's bundle for the chassis."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from cognition_service.config import CognitionServiceSettings
from cognition_service.grpc_peers import GrpcPeers
from cognition_service.servicer import METHOD_ROLES, CognitionServicer
from egbe.v1 import cognition_pb2_grpc
from services.auth import Role, TokenStore
from services.channels import channel_opener
from services.runtime import published_targets
from services.server import ServiceBundle


async def build_bundle(settings: CognitionServiceSettings, tokens: TokenStore) -> ServiceBundle:
    # Peers are dialled on the first Think: under `egbe up` they publish their ports after we start.
    peers = GrpcPeers(
        lambda: published_targets(settings),
        lambda: tokens.token_for(Role.SERVICE),
        timeout_seconds=settings.cognition.rpc_timeout_seconds,
        deadline_margin_seconds=settings.cognition.rpc_deadline_margin_seconds,
        dial=channel_opener(settings),
    )
    servicer = CognitionServicer(
        settings.cognition, peers.peers, lambda: peers.social(settings.cognition.social)
    )
    metrics = CollectorRegistry()
    metrics.register(servicer.stage_seconds)
    metrics.register(servicer.outcomes)
    return ServiceBundle(
        name="cognition",
        servicers=[(cognition_pb2_grpc.add_CognitionServiceServicer_to_server, servicer)],
        method_roles=METHOD_ROLES,
        close=peers.close,
        metrics=metrics,
    )
