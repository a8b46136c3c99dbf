"""Chooses the backend from settings: PostgreSQL when database_url is set, else SQLite under data_dir."""

from __future__ import annotations

from biography_service.config import BiographyConfig
from biography_service.store.base import BiographyStore
from services.settings import ChassisSettings


def store_for(settings: ChassisSettings, config: BiographyConfig) -> BiographyStore:
    """An unopened store for these settings; the caller opens (migrates) and closes it."""
    if settings.database_url:
        from biography_service.store.postgres import PostgresStore

        return PostgresStore(
            settings.database_url,
            pool_max=config.postgres_pool_max,
            poll_seconds=config.subscription_poll_seconds,
            max_group=config.group_commit_max,
        )
    from biography_service.store.sqlite import SqliteStore

    return SqliteStore(settings.data_dir / config.sqlite_file, max_group=config.group_commit_max)
