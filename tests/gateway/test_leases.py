"""Leases of the world cap: admitted from memory, re-leased when dry, shared near the cap, settled after a
crash, and migrated onto a store from before leases."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from pydantic import ValidationError

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.adapters.base import ModelRequest
from gateway.audit import audit_problems
from gateway.config import GatewayConfig
from gateway.errors import StoreUnreachable
from gateway.records import LEASE_SETTLED, RunStatus, Spend
from gateway.runs import Who
from gateway.server import build_store
from gateway.service import CognitionGateway
from services.auth import bearer_metadata
from tests.gateway.harness import (
    CLOTHO,
    gateway_settings,
    generate_request,
    leased_gateway,
    process_target,
    serve_gateway_process,
    start_gateway,
    write_tokens_file,
)

RUN = 4_000  # a Clotho run's reservation
WHO = Who("t", "w", "ada")


async def _spend(gateway: CognitionGateway) -> Spend:
    window = gateway.spend_window_start_ms()
    return await gateway.store.spend(world_id="w", tenant_id="", window_start_ms=window)


async def _admit(gateway: CognitionGateway, ori: str = "ada") -> str | None:
    admitted = await gateway.admit(Who("t", "w", ori), CLOTHO, 1)
    return admitted.run.run_id if admitted.admitted else None


async def test_a_dry_lease_leases_more_and_the_cap_defers_what_no_lease_can_hold(
    tmp_path: Path, database_url: str | None
) -> None:
    async with leased_gateway(
        tmp_path,
        database_url,
        cap=5 * RUN,
        holder="g",
        chunk_tokens=2 * RUN,
        share_bp=10_000,
        refill_below_bp=0,
    ) as gateway:
        leased = []
        runs = []
        for _ in range(5):
            run_id = await _admit(gateway)
            assert run_id is not None
            runs.append(run_id)
            leased.append((await _spend(gateway)).leased_tokens)
        # Two runs a lease, then the last lease is only what the cap has left.
        assert leased == [2 * RUN, 2 * RUN, 4 * RUN, 4 * RUN, 5 * RUN]
        assert await _admit(gateway) is None  # dry, and nothing left to lease: deferred
        spend = await _spend(gateway)
        assert (spend.reserved_tokens, spend.leased_tokens, spend.blocked_by_world_cap) == (
            5 * RUN,
            5 * RUN,
            1,
        )

        # An ending hands the reservation back to the lease: the next run is admitted from it.
        await gateway.end_run(runs.pop(), RunStatus.COMPLETED)
        fused = await gateway.run_once(WHO, CLOTHO, 1, ModelRequest("p", "Objective: bake", mode="dialogue"))
        assert fused.admission.admitted
        assert fused.call is not None
        used = fused.call.reply.usage.total
        spend = await _spend(gateway)
        assert (spend.leased_tokens, spend.consumed_tokens) == (5 * RUN - used, used)

        for run_id in runs:
            await gateway.end_run(run_id, RunStatus.COMPLETED)
        await gateway.return_leases()
        spend = await _spend(gateway)
        assert (spend.reserved_tokens, spend.leased_tokens, spend.consumed_tokens) == (0, 0, used)
        assert used == await gateway.store.audited_tokens()
        assert await gateway.store.lease_tokens() == 0


async def test_a_lease_running_low_leases_ahead_until_the_cap_is_tight(
    tmp_path: Path, database_url: str | None
) -> None:
    async with leased_gateway(
        tmp_path, database_url, cap=10 * RUN, holder="g", chunk_tokens=4 * RUN, share_bp=5_000
    ) as gateway:

        async def admitted_then_leased() -> int:
            assert await _admit(gateway) is not None
            await gateway.leases.leased_ahead()
            return (await _spend(gateway)).leased_tokens

        # The first run leases a chunk. Once admissions leave less than half a chunk (refill_below_bp,
        # 5,000 by default), more is leased behind the admission that went below, before a run needs it:
        # here half of the 6 runs' worth left (share_bp), short of a chunk, so nothing more is leased
        # ahead while the lease drains to nothing (the cap is getting tight).
        leased = [await admitted_then_leased() for _ in range(7)]
        assert leased == [4 * RUN, 4 * RUN, 7 * RUN, 7 * RUN, 7 * RUN, 7 * RUN, 7 * RUN]
        # Then each run that does not fit leases what it can, until the cap is full, never past it.
        admitted = 7
        while await _admit(gateway) is not None:
            admitted += 1
        assert admitted == 10
        spend = await _spend(gateway)
        assert (spend.reserved_tokens, spend.leased_tokens, spend.blocked_by_world_cap) == (
            10 * RUN,
            10 * RUN,
            1,
        )


@pytest.mark.postgres
async def test_two_gateways_near_the_cap_never_overshoot_and_both_admit_while_tokens_remain(
    tmp_path: Path, postgres_dsn: str
) -> None:
    cap = 10 * RUN
    async with (
        leased_gateway(tmp_path / "a", postgres_dsn, cap=cap, holder="a") as a,
        leased_gateway(tmp_path / "b", postgres_dsn, cap=cap, holder="b") as b,
    ):
        owned: dict[str, CognitionGateway] = {}

        async def admit_on(gateway: CognitionGateway, n: int) -> None:
            run_id = await _admit(gateway, f"ori-{n}")
            if run_id is not None:
                owned[run_id] = gateway

        # Together: 30 concurrent admissions on each gateway, sharing one world's ledger.
        await asyncio.gather(*(admit_on(g, n) for n in range(30) for g in (a, b)))
        assert 0 < len(owned) <= cap // RUN
        assert {a, b} <= set(owned.values())  # a lease takes at most a share of what is left
        # Then one at a time, alternating, until both defer: a gateway that cannot hold a run gives back
        # what its lease held, so the cap is filled exactly, never passed.
        deferred_in_a_row, n = 0, 30
        while deferred_in_a_row < 2:
            before = len(owned)
            await admit_on((a, b)[n % 2], n)
            deferred_in_a_row = 0 if len(owned) > before else deferred_in_a_row + 1
            n += 1
        assert len(owned) == cap // RUN
        spend = await _spend(a)
        assert spend.reserved_tokens == spend.leased_tokens == cap

        for run_id, gateway in owned.items():
            await gateway.end_run(run_id, RunStatus.COMPLETED)
        await a.return_leases()
        await b.return_leases()  # (read on b's connection: its return is answered before it commits)
        assert await b.store.ledger_totals() == (0, 0)


async def _kill_process_with_an_outstanding_lease(folder: Path, database_url: str | None) -> tuple[int, str]:
    """A real gateway process: fused runs (consuming tokens), a run left active after a call, then
    SIGKILL. Returns the tokens its calls used and the active run's id."""
    tokens_file, tokens = write_tokens_file(folder)
    process = serve_gateway_process(folder / "g", tokens_file, database_url, {"ANTHROPIC_API_KEY": ""})
    try:
        target = await process_target(process, folder / "g")
        service = bearer_metadata(tokens["service"])
        async with grpc.aio.insecure_channel(target) as channel:
            stub = gateway_pb2_grpc.CognitionGatewayServiceStub(channel)
            admit = gateway_pb2.AdmitRunRequest(
                ori=common_pb2.OriRef(tenant_id="t", world_id="w", ori_id="ada"), tier=CLOTHO, cause=1
            )
            used = 0
            for _ in range(3):
                ran = await stub.Run(
                    gateway_pb2.RunRequest(admit=admit, generate=generate_request("")), metadata=service
                )
                used += ran.generation.usage.input_tokens + ran.generation.usage.output_tokens
            active = await stub.AdmitRun(admit, metadata=service)
            called = await stub.Generate(generate_request(active.run_id), metadata=service)
            used += called.usage.input_tokens + called.usage.output_tokens
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    return used, active.run_id


@pytest.mark.slow
async def test_a_gateway_killed_with_a_lease_out_is_settled_as_spent_when_it_restarts(
    tmp_path: Path, database_url: str | None
) -> None:
    used, active_run = await _kill_process_with_an_outstanding_lease(tmp_path, database_url)

    harness = await start_gateway(gateway_settings(tmp_path / "g", database_url))  # the same holder
    try:
        spend = await harness.spend("w")
        records = await harness.audit_records()
        [settlement] = [r for r in records if r.error_class == LEASE_SETTLED]
        audited = sum(r.usage.input_tokens + r.usage.output_tokens for r in records)
        # What the lease held is charged, never released: the ledger equals the audit log, settlement
        # included, and is never below what was used, even when the kill took the last call's record
        # (answered once applied, before its commit): that call's tokens were in the lease.
        assert spend.consumed_tokens == audited >= used
        assert sum(t.calls for t in spend.by_tier) == len(records)  # the settlement counted as a call
        assert settlement.usage.input_tokens > 0
        assert spend.reserved_tokens == 0  # the run left active was ended with its lease
        assert not (await harness.end(active_run)).released_tokens
        assert (await harness.run("bram")).admission.admitted  # and the gateway admits again
    finally:
        await harness.stop()
    store = build_store(gateway_settings(tmp_path / "g", database_url))
    await store.open()
    try:
        reserved, consumed = await store.ledger_totals()
        assert (reserved, consumed) == (0, await store.audited_tokens())
        entries = await store.list_audit(ori_id="", tier=0, run_id="", after_seq=0, limit=100)
        assert audit_problems(entries) == []
    finally:
        await store.close()


async def _execute(
    database_url: str | None, folder: Path, statements: list[tuple[str, tuple[Any, ...]]]
) -> None:
    if database_url is None:
        with sqlite3.connect(folder / GatewayConfig().sqlite_file) as connection:
            for sql, params in statements:
                connection.execute(sql, params)
        return
    with psycopg.connect(database_url, autocommit=True) as connection:
        for sql, params in statements:
            connection.execute(sql.replace("?", "%s").encode(), params)


async def test_a_store_from_before_leases_migrates_and_its_runs_release_to_the_ledger(
    tmp_path: Path, database_url: str | None
) -> None:
    settings = gateway_settings(tmp_path, database_url)
    store = build_store(settings)
    await store.open()
    await store.close()
    now_ms = int(time.time() * 1000)
    window_ms = now_ms - now_ms % (settings.gateway.ledger_window_seconds * 1000)
    # Back to the previous schema version, holding a run admitted as it admitted them: reserved on the
    # ledger row itself.
    await _execute(
        database_url,
        tmp_path,
        [
            ("DROP TABLE gateway_leases", ()),
            ("DROP TABLE gateway_tier_spend", ()),
            ("ALTER TABLE gateway_ledger DROP COLUMN calls", ()),
            ("ALTER TABLE gateway_ledger DROP COLUMN runs_reserved_tokens", ()),
            ("ALTER TABLE gateway_runs DROP COLUMN lease_holder", ()),
            ("ALTER TABLE gateway_runs DROP COLUMN released_tokens", ()),
            (
                "INSERT INTO gateway_ledger (world_id, window_start_ms, cap_tokens, reserved_tokens,"
                " admissions) VALUES ('world-1', ?, 96000000, ?, 1)",
                (window_ms, RUN),
            ),
            (
                "INSERT INTO gateway_runs (run_id, tenant_id, world_id, ori_id, tier, cause, window_start_ms,"
                " max_model_calls, max_tool_calls, reserved_tokens, status, admitted_at_ms, deadline_ms)"
                " VALUES ('legacy', 'tenant-a', 'world-1', 'ada', 1, 1, ?, 2, 2, ?, 'active', ?, ?)",
                (window_ms, RUN, now_ms, now_ms + 300_000),
            ),
        ],
    )
    harness = await start_gateway(settings)
    try:
        assert (await harness.spend("world-1")).reserved_tokens == RUN  # (filled from the run)
        called = await harness.generate("legacy")
        ended = await harness.end("legacy")
        used = called.usage.input_tokens + called.usage.output_tokens
        assert (ended.used_tokens, ended.released_tokens) == (used, RUN - used)
        assert (await harness.run("bram")).admission.admitted  # a run from a lease beside it
        assert (await harness.spend("world-1")).reserved_tokens == 0
    finally:
        await harness.stop()
    store = build_store(settings)
    await store.open()
    try:
        reserved, consumed = await store.ledger_totals()
        assert (reserved, consumed) == (0, await store.audited_tokens())
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chunk_tokens", 0),
        ("share_bp", 0),
        ("share_bp", 10_001),
        ("refill_below_bp", -1),
        ("refill_below_bp", 10_001),
        ("idle_return_seconds", 0),
    ],
)
def test_bad_lease_settings_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        GatewayConfig.model_validate({"lease": {field: value}})
    assert [error["loc"] for error in refused.value.errors()] == [("lease", field)]


async def test_idle_leases_go_back_to_the_ledger(tmp_path: Path) -> None:
    async with leased_gateway(tmp_path, None, cap=10 * RUN, holder="g", idle_return_seconds=0.05) as gateway:
        run_id = await _admit(gateway)
        assert run_id is not None
        await gateway.end_run(run_id, RunStatus.COMPLETED)
        assert (await _spend(gateway)).leased_tokens > 0
        await _until(gateway, lambda spend: spend.leased_tokens == 0)


async def _until(gateway: CognitionGateway, done: Callable[[Spend], bool]) -> None:
    for _ in range(500):
        if done(await _spend(gateway)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never reached: {await _spend(gateway)}")


@pytest.mark.postgres
async def test_admission_fails_closed_while_the_control_push_is_down_even_with_lease_left(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with leased_gateway(tmp_path, postgres_dsn, cap=100 * RUN, holder="g") as gateway:
        assert await _admit(gateway) is not None  # the lease now holds far more than one run
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            )
        for _ in range(500):  # the listener notices its connection is gone
            if not gateway.store.healthy:
                break
            await asyncio.sleep(0.01)
        # A kill pushed now could be missed: admission refuses rather than admit from the lease.
        with pytest.raises(StoreUnreachable):
            await _admit(gateway)
        for _ in range(500):  # reconnected and the controls reloaded: admission opens again
            if gateway.store.healthy:
                break
            await asyncio.sleep(0.01)
        assert await _admit(gateway) is not None


async def test_a_lease_goes_back_when_its_window_is_over(tmp_path: Path) -> None:
    now = [time.time()]
    window_s = GatewayConfig().ledger_window_seconds
    async with leased_gateway(tmp_path, None, cap=10 * RUN, holder="g", clock=lambda: now[0]) as gateway:
        run_id = await _admit(gateway)
        assert run_id is not None
        first = await gateway.store.lease_tokens()
        assert first >= RUN
        now[0] += window_s  # the next window: a run that ends now gives back to the old window's lease
        assert await _admit(gateway) is not None  # drawn on a new lease, for the new window
        await gateway.end_run(run_id, RunStatus.COMPLETED)
        await gateway.keep_leases()
        # The old window's lease went back whole; the new window's holds the new run (not idle yet).
        assert await gateway.store.lease_tokens() == first
        old = await gateway.store.spend(world_id="w", tenant_id="", window_start_ms=0)
        new = await _spend(gateway)
        assert old.leased_tokens == new.leased_tokens == first


async def test_runs_sort_and_fall_due_in_admission_order_and_an_ended_one_never(tmp_path: Path) -> None:
    now = [1_000.0]
    async with leased_gateway(tmp_path, None, cap=10 * RUN, holder="g", clock=lambda: now[0]) as gateway:
        admitted = []
        for ori in ("ada", "bram", "cato"):
            run_id = await _admit(gateway, ori)
            assert run_id is not None
            admitted.append(run_id)
            now[0] += 100  # the next admitted 100 s later
        ada, bram, cato = admitted
        assert ada < bram < cato  # (run ids sort in admission order: 32 hex digits, time first)
        assert all(len(run_id) == 32 and set(run_id) <= set("0123456789abcdef") for run_id in admitted)
        await gateway.end_run(bram, RunStatus.COMPLETED)
        timeout_ms = int(gateway.config.run_timeout_seconds * 1000)
        first_due_ms = 1_000_000 + timeout_ms
        assert gateway.leases.expired(first_due_ms) == []  # (due after its deadline, not at it)
        assert gateway.leases.expired(first_due_ms + 150_000) == [ada]
        assert gateway.leases.expired(first_due_ms + 250_000) == [ada, cato]
