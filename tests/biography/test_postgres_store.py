"""PostgreSQL store specifics: how its connections send parameters."""

from __future__ import annotations

import pytest

from biography_service.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres


async def test_store_connections_send_python_ints_as_bigint(postgres_dsn: str) -> None:
    # Every integer column is BIGINT; a fixed int8 dumper halves the cost of a group's arrays.
    store = PostgresStore(postgres_dsn, pool_max=1, poll_seconds=0.2, max_group=8)
    await store.open()
    try:
        async with store._pool.connection() as connection:
            cursor = await connection.execute("SELECT pg_typeof(%s)::text, pg_typeof(%b)::text", (7, [1, 2]))
            assert await cursor.fetchone() == ("bigint", "bigint[]")
    finally:
        await store.close()
