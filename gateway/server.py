"""Assembles the gateway's bundle: validated config, store, adapter, controls loaded before serving."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from egbe.v1 import gateway_pb2_grpc
from gateway.adapters.base import ModelAdapter
from gateway.adapters.offline import OfflineAdapter
from gateway.adapters.provider_router import ProviderRouter
from gateway.cognition_client import CognitionClient
from gateway.config import GatewayConfig, GatewayServiceSettings, ProviderConfig
from gateway.metrics import GatewayMetrics
from gateway.operator_servicer import OperatorServicer, refusal_auditor
from gateway.rate_limits import ProviderRates
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


def build_adapter(
    config: GatewayConfig, environ: Mapping[str, str] = os.environ, rates: ProviderRates | None = None
) -> ModelAdapter:
    """With no providers table, Anthropic when ANTHROPIC_API_KEY is set, else the offline adapter
    (labelled on every output); with one, a client per provider and each call routed by its class, on
    its providers' rate limits (`rates`) where any is set."""
    if config.providers:
        adapters = {
            name: provider_adapter(config, name, provider, environ)
            for name, provider in config.providers.items()
        }
        return ProviderRouter(adapters, config.routing.class_targets, rates)
    if environ.get(ANTHROPIC_KEY_ENV):
        from gateway.adapters.anthropic import AnthropicAdapter

        return AnthropicAdapter(config)
    return OfflineAdapter()


def provider_adapter(
    config: GatewayConfig, name: str, provider: ProviderConfig, environ: Mapping[str, str]
) -> ModelAdapter:
    """The client of one provider of the table, its key read from the variable the table names."""
    api_key = environ.get(provider.api_key_env) if provider.api_key_env else None
    if provider.kind == "anthropic":
        from gateway.adapters.anthropic import AnthropicAdapter

        return AnthropicAdapter(config, base_url=provider.base_url or None, api_key=api_key, retry=provider)
    if provider.kind == "openai-compatible":
        from gateway.adapters.openai_compatible import OpenAICompatibleAdapter

        return OpenAICompatibleAdapter(name, provider, api_key=api_key)
    return OfflineAdapter()


def lease_holder(settings: GatewayServiceSettings) -> str:
    """The configured lease holder id, else `host:data_dir`: distinct for gateways with their own data
    directories, and the same after a restart (which settles what the previous life left leased)."""
    return settings.gateway.lease.holder or f"{socket.gethostname()}:{settings.data_dir.resolve()}"


async def build_gateway(settings: GatewayServiceSettings) -> CognitionGateway:
    """A started gateway: config refused whole when invalid, controls loaded before it answers anything."""
    config = settings.gateway
    validate_config(config)
    store, metrics = build_store(settings), GatewayMetrics()
    rates = ProviderRates(
        store, config.providers, metrics, max_wait_seconds=config.rate_limit_max_wait_seconds
    )
    gateway = CognitionGateway(
        config,
        store,
        build_adapter(config, rates=rates),
        metrics=metrics,
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

    operator = OperatorServicer(
        gateway, lambda context: tokens.role_of(dict(context.invocation_metadata() or ()))
    )

    async def close() -> None:
        await operator.audit_feed.close()
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
                operator,
            ),
        ],
        method_roles=METHOD_ROLES,
        close=close,
        metrics=gateway.metrics.registry,
        on_refused=refusal_auditor(gateway),
        info={"adapter": gateway.adapter.name, "store": type(gateway.store).__name__},
    )
