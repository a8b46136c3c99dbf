"""The gateway's durable state (ledger, runs, audit log, controls): one interface, SQLite and PostgreSQL."""
