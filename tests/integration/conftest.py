"""A BiographyService served in-process on loopback, once per storage backend."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from assembly.settings import EgbeSettings
from biography_service.config import BiographyConfig
from biography_service.server import build_bundle
from egbe.v1 import biography_pb2_grpc
from services.auth import Role, TokenStore
from services.server import start_service
from services.settings import Endpoint

SERVICE_TOKEN = "service-token-0123456789"
WORLD_TOKEN = "world-token-0123456789ab"


@contextlib.asynccontextmanager
async def _served(
    tmp_path: Path, dsn: str | None, **limits: int
) -> AsyncIterator[biography_pb2_grpc.BiographyServiceStub]:
    """The service with small batch and payload limits, unless `limits` sets biography config fields."""
    settings = EgbeSettings(
        data_dir=tmp_path,
        database_url=dsn,
        endpoints={"biography": Endpoint(port=0)},
        biography={"max_batch_events": 5, "max_payload_bytes": 256, **limits},
    )
    tokens = TokenStore({Role.SERVICE: [SERVICE_TOKEN], Role.WORLD: [WORLD_TOKEN]})
    running = await start_service(
        await build_bundle(settings, tokens), settings.endpoints["biography"], tokens, settings
    )
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            yield biography_pb2_grpc.BiographyServiceStub(channel)
    finally:
        await running.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def stub(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[biography_pb2_grpc.BiographyServiceStub]:
    """The service on each backend."""
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else None
    async with _served(tmp_path, dsn) as served:
        yield served


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def default_limits_stub(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[biography_pb2_grpc.BiographyServiceStub]:
    """The service on each backend with the shipped limits (batch, payload and page sizes)."""
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else None
    defaults = BiographyConfig()
    async with _served(
        tmp_path,
        dsn,
        max_batch_events=defaults.max_batch_events,
        max_payload_bytes=defaults.max_payload_bytes,
    ) as served:
        yield served


@pytest.fixture
async def sqlite_stub(tmp_path: Path) -> AsyncIterator[biography_pb2_grpc.BiographyServiceStub]:
    """The service on SQLite, for what the servicer decides before any storage is touched."""
    async with _served(tmp_path, None) as served:
        yield served
