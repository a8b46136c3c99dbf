"""What the store reports: the operator audit (every operator attempt, allowed or refused), the model-call
audit log, spend by world and tier, and the stats of recent runs."""

from __future__ import annotations

import json
from typing import Any

from gateway.records import AuditEntry, OperatorAttempt, Spend, TierSpend
from gateway.store.rows import AUDIT_COLUMNS, AUDIT_SUMMARY_COLUMNS, audit_from
from gateway.store.tx import StoreCore, Tx


def record_attempt(
    tx: Tx, method: str, *, role: str, operator_id: str, allowed: bool, detail: str, now_ms: int
) -> None:
    """An operator attempt's audit row, in the transaction of the change it made (if any)."""
    tx.execute(
        "INSERT INTO gateway_operator_audit (method, role, operator_id, allowed, detail, recorded_at_ms)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (method, role, operator_id, int(allowed), detail, now_ms),
    )


def record_change(tx: Tx, method: str, *, operator_id: str, detail: str, now_ms: int) -> None:
    """The audit row of a change an operator committed, in the change's own transaction."""
    record_attempt(
        tx, method, role="operator", operator_id=operator_id, allowed=True, detail=detail, now_ms=now_ms
    )


class ReportStore(StoreCore):
    """The operator audit, the audit log and spend."""

    async def record_operator_attempt(
        self, method: str, *, role: str, operator_id: str, allowed: bool, detail: str, now_ms: int
    ) -> None:
        async def body(tx: Tx) -> None:
            record_attempt(
                tx, method, role=role, operator_id=operator_id, allowed=allowed, detail=detail, now_ms=now_ms
            )

        await self.transact(body)

    async def list_operator_attempts(
        self,
        *,
        limit: int,
        after_seq: int = 0,
        allowed: bool | None = None,
        method: str = "",
        operator_id: str = "",
    ) -> list[OperatorAttempt]:
        """Audited operator attempts after `after_seq`, oldest first; `allowed` None means both."""

        async def body(tx: Tx) -> list[OperatorAttempt]:
            rows = await tx.all(
                "SELECT seq, method, role, operator_id, allowed, detail, recorded_at_ms"
                " FROM gateway_operator_audit WHERE seq > ? AND (? = -1 OR allowed = ?)"
                " AND (? = '' OR method = ?) AND (? = '' OR operator_id = ?) ORDER BY seq LIMIT ?",
                (
                    after_seq,
                    *(2 * [-1 if allowed is None else int(allowed)]),
                    method,
                    method,
                    operator_id,
                    operator_id,
                    limit,
                ),
            )
            return [
                OperatorAttempt(row[0], row[1], row[2], row[3], bool(row[4]), row[5], row[6]) for row in rows
            ]

        return await self.transact(body, durable=False)

    async def list_audit(
        self,
        *,
        ori_id: str = "",
        tier: int = 0,
        run_id: str = "",
        after_seq: int = 0,
        limit: int,
        kernel_call_id: str = "",
        world_id: str = "",
        summary: bool = False,
        newest: bool = False,
    ) -> list[AuditEntry]:
        """Audit records after `after_seq`, oldest first; `newest`: the last `limit` of them instead (still
        oldest first); `summary`: without their context and output (read as empty)."""
        columns = AUDIT_SUMMARY_COLUMNS if summary else AUDIT_COLUMNS

        async def body(tx: Tx) -> list[AuditEntry]:
            rows = await tx.all(
                f"SELECT seq, {columns} FROM gateway_audit WHERE seq > ? AND (? = '' OR ori_id = ?)"
                " AND (? = 0 OR tier = ?) AND (? = '' OR run_id = ?) AND (? = '' OR kernel_call_id = ?)"
                f" AND (? = '' OR world_id = ?) ORDER BY seq{' DESC' if newest else ''} LIMIT ?",
                (
                    after_seq,
                    *(2 * [ori_id]),
                    *(2 * [tier]),
                    *(2 * [run_id]),
                    *(2 * [kernel_call_id]),
                    *(2 * [world_id]),
                    limit,
                ),
            )
            entries = [audit_from(row) for row in rows]
            return entries[::-1] if newest else entries

        return await self.transact(body, durable=False)

    async def audit_numbers(self, *, after_seq: int, limit: int) -> list[tuple[int, str]]:
        """(seq, call id) of the audit records after `after_seq`, oldest first: how the live fan-out
        numbers the records handed to it, without reading them back."""
        rows = await self.transact(
            lambda tx: tx.all(
                "SELECT seq, call_id FROM gateway_audit WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, limit),
            ),
            durable=False,
        )
        return [(int(seq), str(call_id)) for seq, call_id in rows]

    async def spend(self, *, world_id: str, tenant_id: str, window_start_ms: int) -> Spend:
        """The ledger (one world, or all) and the audited calls' spend by tier (each counted in its run's
        window), summed over every window from the one starting at `window_start_ms` to the current one.
        `reserved_tokens` is what active runs reserved and have not consumed; `leased_tokens` the
        ledger's own reservation (every lease, which holds those runs' reservations and what its gateway
        has not given to a run yet)."""

        async def body(tx: Tx) -> Spend:
            ledger = await tx.one(
                "SELECT COALESCE(MAX(cap_tokens), 0), COALESCE(SUM(reserved_tokens), 0),"
                " COALESCE(SUM(consumed_tokens), 0), COALESCE(SUM(consumed_micro_usd), 0),"
                " COALESCE(SUM(admissions), 0), COALESCE(SUM(blocked_by_world_cap), 0),"
                " COALESCE(SUM(killed), 0), COALESCE(SUM(killed_in_flight), 0),"
                " COALESCE(SUM(runs_reserved_tokens), 0)"
                " FROM gateway_ledger WHERE window_start_ms >= ? AND (? = '' OR world_id = ?)",
                (window_start_ms, world_id, world_id),
            )
            assert ledger is not None  # an aggregate always answers one row
            tiers = await tx.all(
                "SELECT tier, SUM(tokens), SUM(micro_usd), SUM(calls) FROM gateway_tier_spend"
                " WHERE window_start_ms >= ? AND (? = '' OR world_id = ?) AND (? = '' OR tenant_id = ?)"
                " GROUP BY tier ORDER BY tier",
                (window_start_ms, world_id, world_id, tenant_id, tenant_id),
            )
            cap, leased, consumed, micro_usd, admissions, blocked, killed, killed_in_flight, held = (
                int(v) for v in ledger
            )
            return Spend(
                world_cap_tokens=cap,
                reserved_tokens=held,
                leased_tokens=leased,
                consumed_tokens=consumed,
                consumed_micro_usd=micro_usd,
                admissions=admissions,
                blocked_by_world_cap=blocked,
                killed=killed,
                killed_in_flight=killed_in_flight,
                by_tier=[TierSpend(int(t), int(tok), int(usd), int(n)) for t, tok, usd, n in tiers],
            )

        return await self.transact(body, durable=False, reads_ledger=True)

    async def audited_tokens(self) -> int:
        async def body(tx: Tx) -> int:
            row = await tx.one(
                "SELECT COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens +"
                " cache_write_tokens), 0)"
                " FROM gateway_audit"
            )
            assert row is not None
            return int(row[0])

        return await self.transact(body, durable=False)

    async def recent_run_stats(self, *, limit: int) -> list[dict[str, Any]]:
        """The stats of the most recently ended runs, newest first."""

        async def body(tx: Tx) -> list[dict[str, Any]]:
            rows = await tx.all(
                "SELECT stats FROM gateway_runs WHERE ended_at_ms IS NOT NULL ORDER BY ended_at_ms DESC"
                " LIMIT ?",
                (limit,),
            )
            return [json.loads(row[0]) for row in rows]

        return await self.transact(body, durable=False)
