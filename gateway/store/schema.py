"""The gateway's tables, written once; `{serial}` is the one dialect difference."""

from __future__ import annotations

from collections.abc import Callable

SCHEMA = """
CREATE TABLE IF NOT EXISTS gateway_ledger (
    world_id TEXT NOT NULL,
    window_start_ms BIGINT NOT NULL,
    cap_tokens BIGINT NOT NULL,
    reserved_tokens BIGINT NOT NULL DEFAULT 0,
    consumed_tokens BIGINT NOT NULL DEFAULT 0,
    consumed_micro_usd BIGINT NOT NULL DEFAULT 0,
    admissions BIGINT NOT NULL DEFAULT 0,
    blocked_by_world_cap BIGINT NOT NULL DEFAULT 0,
    killed BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (world_id, window_start_ms)
);
CREATE TABLE IF NOT EXISTS gateway_tier_spend (
    world_id TEXT NOT NULL,
    window_start_ms BIGINT NOT NULL,
    tenant_id TEXT NOT NULL,
    tier INTEGER NOT NULL,
    tokens BIGINT NOT NULL,
    micro_usd BIGINT NOT NULL,
    calls BIGINT NOT NULL,
    PRIMARY KEY (world_id, window_start_ms, tenant_id, tier)
);
CREATE TABLE IF NOT EXISTS gateway_runs (
    run_id TEXT PRIMARY KEY,
    request_id TEXT UNIQUE,
    tenant_id TEXT NOT NULL,
    world_id TEXT NOT NULL,
    ori_id TEXT NOT NULL,
    tier INTEGER NOT NULL,
    cause INTEGER NOT NULL,
    window_start_ms BIGINT NOT NULL,
    max_model_calls INTEGER NOT NULL,
    max_tool_calls INTEGER NOT NULL,
    reserved_tokens BIGINT NOT NULL,
    used_tokens BIGINT NOT NULL DEFAULT 0,
    model_calls INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    stats TEXT NOT NULL DEFAULT '{}',
    result TEXT NOT NULL DEFAULT '',
    admitted_at_ms BIGINT NOT NULL,
    deadline_ms BIGINT NOT NULL,
    ended_at_ms BIGINT
);
CREATE INDEX IF NOT EXISTS gateway_runs_active ON gateway_runs (status, deadline_ms);
CREATE INDEX IF NOT EXISTS gateway_runs_ended ON gateway_runs (ended_at_ms);
CREATE TABLE IF NOT EXISTS gateway_audit (
    seq {serial},
    call_id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    world_id TEXT NOT NULL,
    ori_id TEXT NOT NULL,
    tier INTEGER NOT NULL,
    cause TEXT NOT NULL,
    model_ref TEXT NOT NULL,
    model_class TEXT NOT NULL,
    input_context TEXT NOT NULL,
    output TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cache_read_tokens BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    micro_usd BIGINT NOT NULL,
    cost_estimated INTEGER NOT NULL,
    policy_decision TEXT NOT NULL,
    retention_policy_id TEXT NOT NULL,
    config_fingerprint TEXT NOT NULL,
    offline INTEGER NOT NULL,
    recorded_at_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_audit_ori ON gateway_audit (ori_id, seq);
CREATE INDEX IF NOT EXISTS gateway_audit_run ON gateway_audit (run_id, seq);
CREATE TABLE IF NOT EXISTS gateway_controls (
    seq {serial},
    control_id TEXT NOT NULL UNIQUE,
    kind INTEGER NOT NULL,
    scope INTEGER NOT NULL,
    target TEXT NOT NULL,
    reason TEXT NOT NULL,
    operator_id TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    active INTEGER NOT NULL,
    lifted_at_ms BIGINT
);
CREATE INDEX IF NOT EXISTS gateway_controls_target ON gateway_controls (active, scope, target);
CREATE TABLE IF NOT EXISTS gateway_leases (
    holder TEXT NOT NULL,
    world_id TEXT NOT NULL,
    window_start_ms BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (holder, world_id, window_start_ms)
);
CREATE TABLE IF NOT EXISTS gateway_operator_audit (
    seq {serial},
    method TEXT NOT NULL,
    role TEXT NOT NULL,
    operator_id TEXT NOT NULL,
    allowed INTEGER NOT NULL,
    detail TEXT NOT NULL,
    recorded_at_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS gateway_world_caps (
    world_id TEXT PRIMARY KEY,
    tokens_per_hour BIGINT NOT NULL,
    operator_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS gateway_provider_rates (
    provider TEXT PRIMARY KEY,
    requests_booked_us BIGINT NOT NULL,
    tokens_booked_us BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS gateway_run_budgets (
    tier INTEGER PRIMARY KEY,
    max_model_calls INTEGER NOT NULL,
    max_tool_calls INTEGER NOT NULL,
    max_tokens BIGINT NOT NULL,
    operator_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS gateway_eval_scores (
    provider TEXT NOT NULL,
    model_id TEXT NOT NULL,
    suite TEXT NOT NULL,
    suite_version INTEGER NOT NULL,
    score_bp INTEGER NOT NULL,
    cases INTEGER NOT NULL,
    checks_passed INTEGER NOT NULL,
    checks_total INTEGER NOT NULL,
    offline INTEGER NOT NULL,
    recorded_at_ms BIGINT NOT NULL,
    PRIMARY KEY (provider, model_id, suite)
);
"""


# Columns added since the tables were first created: (table, column, declaration). A store opened on an
# older database gains them (SQLite's ADD COLUMN has no IF NOT EXISTS, so the caller says what exists).
ADDED_COLUMNS = (
    ("gateway_runs", "kernel_call_id", "TEXT NOT NULL DEFAULT ''"),
    ("gateway_audit", "kernel_call_id", "TEXT NOT NULL DEFAULT ''"),
    ("gateway_audit", "error_class", "TEXT NOT NULL DEFAULT ''"),
    # The tools the run's model calls were granted (newline-separated, sorted): a tool call must name one.
    ("gateway_runs", "tool_grants", "TEXT NOT NULL DEFAULT ''"),
    # Admitted runs a control ended in flight (also in `killed`): what tells them from refusals.
    ("gateway_ledger", "killed_in_flight", "BIGINT NOT NULL DEFAULT 0"),
    # The gateway whose lease a run's reservation came from ('' before leases), and what its ending
    # handed back to that lease.
    ("gateway_runs", "lease_holder", "TEXT NOT NULL DEFAULT ''"),
    ("gateway_runs", "released_tokens", "BIGINT NOT NULL DEFAULT 0"),
    # How long the model adapter took for the call (0 for calls audited before it was timed).
    ("gateway_audit", "model_latency_us", "BIGINT NOT NULL DEFAULT 0"),
    # The one world a control applies in ('' = every world), and when it stops applying (0 = never).
    ("gateway_controls", "world_id", "TEXT NOT NULL DEFAULT ''"),
    ("gateway_controls", "expires_at_ms", "BIGINT NOT NULL DEFAULT 0"),
    # The audit records counted in the window (with `gateway_tier_spend`, by tenant and tier): what
    # ListWorlds and GetSpend read in place of counting the audit log. Filled from the log when added.
    ("gateway_ledger", "calls", "BIGINT NOT NULL DEFAULT 0"),
    # What the window's active runs reserved and have not consumed (each run's reservation less its use):
    # what ListWorlds and GetSpend report as reserved, kept here in place of summing the active runs.
    ("gateway_ledger", "runs_reserved_tokens", "BIGINT NOT NULL DEFAULT 0"),
)
# Each audit record's ledger window: its run's, or for a lease settlement (no run row) the world's latest
# window starting at or before the record.
_RECORD_WINDOW = (
    "SELECT a.world_id, a.tenant_id, a.tier, a.input_tokens + a.output_tokens + a.cache_read_tokens"
    " + a.cache_write_tokens AS tokens, a.micro_usd,"
    " COALESCE(r.window_start_ms, (SELECT MAX(l.window_start_ms) FROM gateway_ledger l"
    " WHERE l.world_id = a.world_id AND l.window_start_ms <= a.recorded_at_ms)) AS window_start_ms"
    " FROM gateway_audit a LEFT JOIN gateway_runs r ON r.run_id = a.run_id"
)
# What fills an added column from the rows already there, run just after it is added.
FILLS = {
    ("gateway_ledger", "calls"): (
        "INSERT INTO gateway_tier_spend (world_id, window_start_ms, tenant_id, tier, tokens, micro_usd,"  # noqa: S608
        " calls) SELECT world_id, window_start_ms, tenant_id, tier, SUM(tokens), SUM(micro_usd), COUNT(*)"
        f" FROM ({_RECORD_WINDOW}) AS audited WHERE window_start_ms IS NOT NULL"
        " GROUP BY world_id, window_start_ms, tenant_id, tier ON CONFLICT DO NOTHING",
        "UPDATE gateway_ledger SET calls = COALESCE((SELECT SUM(t.calls) FROM gateway_tier_spend t"
        " WHERE t.world_id = gateway_ledger.world_id"
        " AND t.window_start_ms = gateway_ledger.window_start_ms), 0)",
    ),
    ("gateway_ledger", "runs_reserved_tokens"): (
        "UPDATE gateway_ledger SET runs_reserved_tokens = COALESCE((SELECT SUM(CASE WHEN"
        " r.reserved_tokens > r.used_tokens THEN r.reserved_tokens - r.used_tokens ELSE 0 END)"
        " FROM gateway_runs r WHERE r.status = 'active' AND r.world_id = gateway_ledger.world_id"
        " AND r.window_start_ms = gateway_ledger.window_start_ms), 0)",
    ),
}
# Indexes over added columns, created once the columns exist.
LATER_INDEXES = (
    "CREATE INDEX IF NOT EXISTS gateway_audit_kernel_call ON gateway_audit (kernel_call_id, seq)",
    "CREATE INDEX IF NOT EXISTS gateway_operator_audit_allowed ON gateway_operator_audit (allowed, seq)",
    # A world's audit records in order (ListAuditRecords' and WatchAudit's world filter).
    "CREATE INDEX IF NOT EXISTS gateway_audit_world ON gateway_audit (world_id, seq)",
)


def schema_statements(serial: str) -> list[str]:
    return [s.strip() for s in SCHEMA.replace("{serial}", serial).split(";") if s.strip()]


def upgrade_statements(columns: Callable[[str], set[str]]) -> list[str]:
    """ALTER TABLE for every added column `columns(table)` lacks (each followed by what fills it), then
    the indexes over them."""
    alters = [
        statement
        for table, column, declaration in ADDED_COLUMNS
        if column not in columns(table)
        for statement in (
            f"ALTER TABLE {table} ADD COLUMN {column} {declaration}",
            *FILLS.get((table, column), ()),
        )
    ]
    return [*alters, *LATER_INDEXES]
