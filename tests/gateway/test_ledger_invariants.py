"""Ledger invariants under random interleavings of admissions, calls, endings, fused runs, kills and
resumes."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.adapters.base import ModelRequest
from gateway.adapters.offline import OfflineAdapter
from gateway.config import BudgetConfig, GatewayConfig
from gateway.errors import GatewayError
from gateway.records import AuditEntry, ControlKind, ControlScope, RunEnd, RunStatus
from gateway.runs import Who
from gateway.service import CognitionGateway
from gateway.store.sqlite import SqliteGatewayStore
from gateway.store.tx import Row, Tx
from services.errors import EgbeError

CAP = 20_000
ORIS = ("ada", "bram", "cyd")
Step = tuple[str, int, int]
steps = st.lists(
    st.tuples(
        st.sampled_from(["admit", "generate", "end", "run", "kill", "resume"]),
        st.integers(0, len(ORIS) - 1),
        st.integers(1, 3),  # tier
    ),
    min_size=1,
    max_size=40,
)


async def assert_runs_hold_what_the_ledger_says(store: SqliteGatewayStore) -> None:
    """Each window's `runs_reserved_tokens` is what its active runs reserved and have not consumed."""

    async def read(tx: Tx) -> tuple[list[Row], list[Row]]:
        ledger = await tx.all(
            "SELECT world_id, window_start_ms, runs_reserved_tokens FROM gateway_ledger"
            " WHERE runs_reserved_tokens != 0"
        )
        runs = await tx.all(
            "SELECT world_id, window_start_ms, SUM(reserved_tokens - used_tokens) FROM gateway_runs"
            " WHERE status = 'active' AND reserved_tokens > used_tokens GROUP BY world_id, window_start_ms"
        )
        return ledger, runs

    ledger, runs = await store.transact(read, durable=False)
    assert sorted(ledger) == sorted(runs)


async def _play(gateway: CognitionGateway, chunk: list[Step], runs: list[str]) -> None:
    async def one(action: str, ori_index: int, tier: int) -> None:
        ori = ORIS[ori_index]
        try:
            if action == "admit":
                admitted = await gateway.admit(Who("t", "w", ori), tier, tier)
                if admitted.admitted:
                    runs.append(admitted.run.run_id)
            elif action == "generate" and runs:
                await gateway.generate(
                    runs[ori_index % len(runs)], ModelRequest("p", f"Objective: {ori}", mode="summary")
                )
            elif action == "run":
                await gateway.run_once(
                    Who("t", "w", ori), tier, tier, ModelRequest("p", f"Objective: {ori}", mode="summary")
                )
            elif action == "end" and runs:
                await gateway.end_run(runs[ori_index % len(runs)], RunStatus.COMPLETED)
            elif action == "kill":
                await gateway.add_control(
                    ControlKind.KILL, ControlScope.ORI, ori, reason="r", operator_id="o"
                )
            elif action == "resume":
                await gateway.lift_controls(ControlScope.ORI, ori, reason="r", operator_id="o")
        except (EgbeError, GatewayError):
            pass  # refusals (killed, over budget, ended) are part of the game

    await asyncio.gather(*(one(*step) for step in chunk))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps, concurrency=st.integers(1, 8))
# A run ended while its call was on its way to the audit record, and a deferred admission gave the lease
# back in between: the call's charge must not take tokens the lease no longer holds (reserved -30).
@example(
    plan=[
        ("admit", 0, 1),
        ("admit", 0, 3),
        ("admit", 0, 3),
        ("generate", 0, 1),
        ("admit", 0, 3),
        ("generate", 0, 1),
        ("end", 0, 1),
    ],
    concurrency=4,
)
async def test_reservations_and_consumption_always_add_up(plan: list[Step], concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = GatewayConfig(budget=BudgetConfig(world_cap_tokens_per_hour=CAP))
        store = SqliteGatewayStore(Path(folder) / "g.sqlite3", timeout_seconds=5)
        gateway = CognitionGateway(config, store, OfflineAdapter())
        await gateway.start()
        try:
            runs: list[str] = []
            for start in range(0, len(plan), concurrency):
                await _play(gateway, plan[start : start + concurrency], runs)
                reserved, consumed = await store.ledger_totals()
                assert reserved + consumed <= CAP
                assert consumed == await store.audited_tokens()
                await assert_runs_hold_what_the_ledger_says(store)
            for run_id in runs:
                await gateway.end_run(run_id, RunStatus.COMPLETED)
            await gateway.return_leases()  # every run ended: the leases hold nothing a run reserved
            reserved, consumed = await store.ledger_totals()
            assert reserved == 0
            assert consumed == await store.audited_tokens()
            await assert_runs_hold_what_the_ledger_says(store)
        finally:
            await gateway.stop()


@pytest.mark.parametrize("request_id", ["r-1", ""])
async def test_a_fused_call_finishing_after_a_kill_is_audited_and_released_once(
    tmp_path: Path, request_id: str
) -> None:
    """A kill committed between the call's answer and its finish. A run whose row was written at its
    admission (it has a request id) is ended by the kill's transaction: the call is still audited and
    consumed, the run stays killed. A run whose row its finish writes is not seen by the kill's
    transaction: it completes. Either way nothing is released twice and the ledger equals the audit log."""
    config = GatewayConfig(budget=BudgetConfig(world_cap_tokens_per_hour=CAP))
    store = SqliteGatewayStore(tmp_path / "g.sqlite3", timeout_seconds=5)
    gateway = CognitionGateway(config, store, OfflineAdapter())
    await gateway.start()
    finish = store.finish_call

    async def kill_first(entry: AuditEntry, **kwargs: Any) -> RunEnd:
        await gateway.add_control(ControlKind.KILL, ControlScope.ORI, "ada", reason="r", operator_id="o")
        return await finish(entry, **kwargs)

    store.finish_call = kill_first  # type: ignore[method-assign]
    try:
        fused = await gateway.run_once(
            Who("t", "w", "ada"), 1, 1, ModelRequest("p", "Speak.", mode="dialogue"), request_id=request_id
        )
        assert fused.call is not None
        tokens = fused.call.reply.usage.total
        ended = fused.ended
        assert ended is not None
        killed = bool(request_id)
        assert (ended.used_tokens, ended.ended_now) == (tokens, not killed)
        # What goes back to the lease: the reservation less the call's tokens, once.
        charged = ended.lease_charge.tokens if ended.lease_charge else 0
        assert ended.lease_return - charged == 4_000 - tokens
        await gateway.return_leases()
        reserved, consumed = await store.ledger_totals()
        assert (reserved, consumed) == (0, tokens)
        assert consumed == await store.audited_tokens()
        spend = await store.spend(world_id="w", tenant_id="", window_start_ms=gateway.spend_window_start_ms())
        assert spend.killed == int(killed)
        assert spend.reserved_tokens == 0
        await assert_runs_hold_what_the_ledger_says(store)
        assert not (await gateway.admit(Who("t", "w", "ada"), 1, 1)).admitted  # the kill holds
    finally:
        await gateway.stop()
