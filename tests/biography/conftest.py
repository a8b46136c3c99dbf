"""One store fixture per backend: every contract test runs against SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from biography_service.config import BiographyConfig
from biography_service.service import Biography
from biography_service.store.base import BiographyStore
from biography_service.store.postgres import PostgresStore
from biography_service.store.sqlite import SqliteStore

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
# Small pages so tests cross page boundaries with few events.
TEST_CONFIG = BiographyConfig(subscription_page_size=16, subscription_poll_seconds=0.2, max_page_size=50)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def store_factory(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> object:
    """Builds unopened stores on one database (several stores = several processes' view of it);
    keyword options (e.g. `migrations`) go to the store."""
    if backend == "postgres":
        dsn: str = request.getfixturevalue("postgres_dsn")
        return lambda **options: PostgresStore(
            dsn,
            pool_max=4,
            poll_seconds=TEST_CONFIG.subscription_poll_seconds,
            max_group=TEST_CONFIG.group_commit_max,
            **options,
        )
    return lambda **options: SqliteStore(
        tmp_path / "biography.sqlite3", max_group=TEST_CONFIG.group_commit_max, **options
    )


@pytest.fixture
async def store(store_factory: object) -> AsyncIterator[BiographyStore]:
    opened: BiographyStore = store_factory()  # type: ignore[operator]
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture
def biography(store: BiographyStore) -> Biography:
    return Biography(store, TEST_CONFIG)
