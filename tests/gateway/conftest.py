"""Gateway fixtures: an in-process gateway on each storage backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from tests.gateway.harness import GatewayHarness, gateway_settings, start_gateway


@pytest.fixture(autouse=True)
def offline_unless_a_test_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's ANTHROPIC_API_KEY must never make these tests call (and pay for) the real API."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


# A test's spend figures are one ledger window's (an hour, aligned to the clock): a test that began in
# the window's last seconds would see its runs split over two windows and its exact counts fail.
WINDOW_MARGIN_SECONDS = 30.0


@pytest.fixture(autouse=True)
async def inside_one_ledger_window() -> None:
    """Start every gateway test with at least WINDOW_MARGIN_SECONDS left in the current ledger window:
    at most once an hour of suite time, the test waits for the next window to begin."""
    window = GatewayConfig().ledger_window_seconds
    left = window - time.time() % window
    if left < WINDOW_MARGIN_SECONDS:
        await asyncio.sleep(left + 0.05)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """None for the embedded SQLite store, a fresh PostgreSQL database otherwise."""
    if request.param == "sqlite":
        return None
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


@pytest.fixture
async def gateway(tmp_path: Path, database_url: str | None) -> AsyncIterator[GatewayHarness]:
    harness = await start_gateway(gateway_settings(tmp_path, database_url))
    yield harness
    await harness.stop()
