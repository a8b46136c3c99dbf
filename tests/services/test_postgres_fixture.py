"""The PostgreSQL fixture gives each test its own empty database on a real server."""

from __future__ import annotations

import psycopg


def test_fresh_database_is_empty_and_writable(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE probe (id int PRIMARY KEY)")
        conn.execute("INSERT INTO probe VALUES (1)")
        assert conn.execute("SELECT id FROM probe").fetchall() == [(1,)]
