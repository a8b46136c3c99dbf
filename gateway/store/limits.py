"""Transaction bodies for what operators change and read across worlds: world caps and per-run budgets
set at run time (each with its operator audit row and a push to every gateway), and the ledger by world.

`controls.ControlStore` runs these through the store's writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.config import TIER_NAMES
from gateway.records import Control, Limits
from gateway.store.reports import record_change

if TYPE_CHECKING:
    from gateway.store.tx import Tx

# The push payload that tells every gateway to reload the limits (a control's payload is its id, 32 hex
# digits, so the two never collide).
LIMITS_CHANGED = "limits"


async def load_limits(tx: Tx) -> Limits:
    caps = await tx.all("SELECT world_id, tokens_per_hour FROM gateway_world_caps")
    budgets = await tx.all(
        "SELECT tier, max_model_calls, max_tool_calls, max_tokens FROM gateway_run_budgets"
    )
    return Limits(
        world_caps={str(world): int(tokens) for world, tokens in caps},
        run_budgets={int(t): (int(calls), int(tools), int(tokens)) for t, calls, tools, tokens in budgets},
    )


async def set_world_cap(
    tx: Tx, world_id: str, tokens_per_hour: int, *, operator_id: str, reason: str, now_ms: int
) -> Limits:
    tx.execute(
        "INSERT INTO gateway_world_caps (world_id, tokens_per_hour, operator_id, reason, updated_at_ms)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (world_id) DO UPDATE SET"
        " tokens_per_hour = excluded.tokens_per_hour, operator_id = excluded.operator_id,"
        " reason = excluded.reason, updated_at_ms = excluded.updated_at_ms",
        (world_id, tokens_per_hour, operator_id, reason, now_ms),
    )
    detail = f"{world_id}: {tokens_per_hour} tokens/hour: {reason}"
    record_change(tx, "SET:WORLD_CAP", operator_id=operator_id, detail=detail, now_ms=now_ms)
    tx.notify(LIMITS_CHANGED)
    return await load_limits(tx)


async def set_run_budget(
    tx: Tx, tier: int, budget: tuple[int, int, int], *, operator_id: str, reason: str, now_ms: int
) -> Limits:
    calls, tools, tokens = budget
    tx.execute(
        "INSERT INTO gateway_run_budgets (tier, max_model_calls, max_tool_calls, max_tokens, operator_id,"
        " reason, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tier) DO UPDATE SET"
        " max_model_calls = excluded.max_model_calls, max_tool_calls = excluded.max_tool_calls,"
        " max_tokens = excluded.max_tokens, operator_id = excluded.operator_id, reason = excluded.reason,"
        " updated_at_ms = excluded.updated_at_ms",
        (tier, calls, tools, tokens, operator_id, reason, now_ms),
    )
    detail = f"{TIER_NAMES[tier]}: {calls} model calls, {tools} tool calls, {tokens} tokens: {reason}"
    record_change(tx, "SET:RUN_BUDGET", operator_id=operator_id, detail=detail, now_ms=now_ms)
    tx.notify(LIMITS_CHANGED)
    return await load_limits(tx)


@dataclass
class WorldLedger:
    """One world's figures over the windows summed, as `GatewayStore.spend` reports them for it."""

    world_id: str
    reserved_tokens: int = 0
    consumed_tokens: int = 0
    consumed_micro_usd: int = 0
    admissions: int = 0
    blocked_by_world_cap: int = 0
    killed: int = 0
    calls: int = 0
    # Active, unexpired controls scoped to it (a WORLD control on it, or one with its world id).
    controls: list[Control] = field(default_factory=list)


async def world_ledgers(tx: Tx, *, after_world: str, limit: int, window_start_ms: int) -> list[WorldLedger]:
    """Every world with a ledger row (any window), in id order after `after_world`; the figures sum the
    windows from `window_start_ms` on (zero for a world with none there)."""
    rows = await tx.all(
        "SELECT world_id,"
        " COALESCE(SUM(CASE WHEN window_start_ms >= ? THEN consumed_tokens ELSE 0 END), 0),"
        " COALESCE(SUM(CASE WHEN window_start_ms >= ? THEN consumed_micro_usd ELSE 0 END), 0),"
        " COALESCE(SUM(CASE WHEN window_start_ms >= ? THEN admissions ELSE 0 END), 0),"
        " COALESCE(SUM(CASE WHEN window_start_ms >= ? THEN blocked_by_world_cap ELSE 0 END), 0),"
        " COALESCE(SUM(CASE WHEN window_start_ms >= ? THEN killed ELSE 0 END), 0),"
        " COALESCE(SUM(CASE WHEN window_start_ms >= ? THEN calls ELSE 0 END), 0),"
        " COALESCE(SUM(CASE WHEN window_start_ms >= ? THEN runs_reserved_tokens ELSE 0 END), 0)"
        " FROM gateway_ledger WHERE world_id > ? GROUP BY world_id ORDER BY world_id LIMIT ?",
        (*[window_start_ms] * 7, after_world, limit),
    )
    return [
        WorldLedger(
            str(row[0]),
            consumed_tokens=int(row[1]),
            consumed_micro_usd=int(row[2]),
            admissions=int(row[3]),
            blocked_by_world_cap=int(row[4]),
            killed=int(row[5]),
            calls=int(row[6]),
            reserved_tokens=int(row[7]),
        )
        for row in rows
    ]
