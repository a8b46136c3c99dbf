"""Assembles the gateway's bundle: validated config, store, adapter, controls loaded before serving."""

from __future__ import annotations

import os
import socket

from egbe.v1 import gateway_pb2_grpc
from gateway.adapters.base import ModelAdapter
from gateway.adapters.offline import OfflineAdapter
from gateway.cognition_client import CognitionClient
from gateway.config import GatewayConfig, GatewayServiceSettings
from gateway.operator_servicer import OperatorServicer, refusal_auditor
from gateway.routing import validate_config
from gateway.service import CognitionGateway
from gateway.servicer import METHOD_ROLES, CognitionGatewayServicer
from gateway.store.base import GatewayStore
from gateway.store.postgres import PostgresGatewayStore
from gateway.store.sqlite import SqliteGatewayStore
from services.auth import Role, TokenStore
from services.channels import channel_opener
from services.runtime import published_targets
from services.server import ServiceBundle

ANTHROPIC_KEY_ENV = "ANTHROPIC_API_KEY"


def build_store(settings: GatewayServiceSettings) -> GatewayStore:
    config = settings.gateway
    if settings.database_url:
        return PostgresGatewayStore(
            settings.database_url,
            timeout_seconds=config.store_timeout_seconds,
            poll_wait_us=config.postgres_poll_wait_us,
        )
    return SqliteGatewayStore(
        settings.data_dir / config.sqlite_file,
        timeout_seconds=config.store_timeout_seconds,
        synchronous=config.sqlite_synchronous,
    )


def build_adapter(config: GatewayConfig) -> ModelAdapter:
    """Anthropic when ANTHROPIC_API_KEY is set, else the offline adapter (labelled on every output)."""
    if os.environ.get(ANTHROPIC_KEY_ENV):
        from gateway.adapters.anthropic import AnthropicAdapter

        return AnthropicAdapter(config)
    return OfflineAdapter()


def lease_holder(settings: GatewayServiceSettings) -> str:
    """The configured lease holder id, else `host:data_dir`: distinct for gateways with their own data
    directories, and the same after a restart (which settles what the previous life left leased)."""
    return settings.gateway.lease.holder or f"{socket.gethostname()}:{settings.data_dir.resolve()}"


async def build_gateway(settings: GatewayServiceSettings) -> CognitionGateway:
    """A started gateway: config refused whole when invalid, controls loaded before it answers anything."""
    validate_config(settings.gateway)
    gateway = CognitionGateway(
        settings.gateway,
        build_store(settings),
        build_adapter(settings.gateway),
        lease_holder=lease_holder(settings),
    )
    await gateway.start()
    return gateway


async def build_bundle(settings: GatewayServiceSettings, tokens: TokenStore) -> ServiceBundle:
    gateway = await build_gateway(settings)
    cognition = CognitionClient(
        lambda: published_targets(settings)["cognition"],
        lambda: tokens.token_for(Role.SERVICE),
        channel_opener(settings),
    )

    async def close() -> None:
        await cognition.close()
        await gateway.stop()

    return ServiceBundle(
        name="gateway",
        servicers=[
            (
                gateway_pb2_grpc.add_CognitionGatewayServiceServicer_to_server,
                CognitionGatewayServicer(gateway, cognition),
            ),
            (
                gateway_pb2_grpc.add_OperatorServiceServicer_to_server,
                OperatorServicer(
                    gateway, lambda context: tokens.role_of(dict(context.invocation_metadata() or ()))
                ),
            ),
        ],
        method_roles=METHOD_ROLES,
        close=close,
        metrics=gateway.metrics.registry,
        on_refused=refusal_auditor(gateway),
        info={"adapter": gateway.adapter.name, "store": type(gateway.store).__name__},
    )
