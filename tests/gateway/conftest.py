"""Gateway fixtures: an in-process gateway on each storage backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_anthropic import FakeAnthropic
from tests.gateway.harness import GatewayHarness, gateway_settings, start_gateway


@pytest.fixture(autouse=True)
def offline_unless_a_test_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's ANTHROPIC_API_KEY must never make these tests call (and pay for) the real API."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


@pytest.fixture(autouse=True)
def every_gateway_test_inside_one_ledger_window(inside_one_ledger_window: None) -> None:
    """Gateway tests read exact spend figures, so each starts well inside one ledger window."""


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


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    """The local fake of the Messages API, and the environment that makes a gateway use it (Anthropic
    adapter, real SDK, real HTTP)."""
    server = FakeAnthropic().start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    yield server
    server.stop()
