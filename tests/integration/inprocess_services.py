"""Start Egbe service bundles in this process on port 0, and dial them with a role's token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc

from assembly.settings import EgbeSettings
from services.auth import Role, TokenStore, bearer_metadata
from services.server import RunningService, ServiceBundle, start_service
from services.settings import Endpoint

TOKENS = {
    Role.WORLD: "world-token-0123456789abcdef",
    Role.SERVICE: "service-token-0123456789abcdef",
    Role.OPERATOR: "operator-token-0123456789abcdef",
}


def token_store() -> TokenStore:
    return TokenStore({role: [token] for role, token in TOKENS.items()})


def metadata(role: Role = Role.SERVICE) -> tuple[tuple[str, str], ...]:
    return bearer_metadata(TOKENS[role])


@dataclass
class Served:
    """Running services by bundle name, and where each listens."""

    running: dict[str, RunningService]

    def target(self, name: str) -> str:
        return self.running[name].target


@asynccontextmanager
async def serve_bundles(bundles: Sequence[ServiceBundle], settings: EgbeSettings) -> AsyncIterator[Served]:
    tokens = token_store()
    running: dict[str, RunningService] = {}
    try:
        for bundle in bundles:
            running[bundle.name] = await start_service(bundle, Endpoint(port=0), tokens, settings)
        yield Served(running)
    finally:
        for service in running.values():
            await service.stop()


@asynccontextmanager
async def channel_to(target: str) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(target) as channel:
        yield channel
