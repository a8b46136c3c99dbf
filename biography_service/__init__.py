"""The Ori biography: an append-only, hash-chained event log on SQLite or PostgreSQL."""
