"""The world-cap ledger under 500 concurrent runs: never over the cap, and equal to the audit log after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from egbe.v1 import common_pb2, gateway_pb2
from services.auth import Role
from tests.gateway.harness import CLOTHO, GatewayHarness, gateway_settings, start_gateway

CLOTHO_RESERVATION = 4_000
CAP = 5 * CLOTHO_RESERVATION  # room for five Clotho reservations at once
RUNS = 500


@pytest.fixture
async def capped(tmp_path: Path, database_url: str | None) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(tmp_path, database_url)
    budget = settings.gateway.budget.model_copy(update={"world_cap_tokens_per_hour": CAP})
    harness = await start_gateway(
        settings.model_copy(update={"gateway": settings.gateway.model_copy(update={"budget": budget})})
    )
    yield harness
    await harness.stop()


@pytest.mark.slow
async def test_500_concurrent_admissions_never_reserve_past_the_cap(capped: GatewayHarness) -> None:
    admissions = await asyncio.gather(*(capped.admit(f"ori-{n}") for n in range(RUNS)))
    admitted = [a for a in admissions if a.admitted]
    assert sum(a.reserved_tokens for a in admitted) <= CAP
    assert len(admitted) == CAP // CLOTHO_RESERVATION  # the cap is filled exactly, never passed
    spend = await capped.spend()
    assert spend.reserved_tokens == len(admitted) * CLOTHO_RESERVATION
    assert spend.blocked_by_world_cap == RUNS - len(admitted)
    await asyncio.gather(*(capped.end(a.run_id) for a in admitted))
    assert (await capped.spend()).reserved_tokens == 0


async def _full_run(harness: GatewayHarness, n: int) -> int:
    """Admit, call once, end; the tokens the run consumed (0 when the cap deferred it)."""
    admitted = await harness.admit(f"ori-{n}")
    if not admitted.admitted:
        return 0
    try:
        reply = await harness.generate(admitted.run_id)
    except grpc.aio.AioRpcError:
        await harness.end(admitted.run_id, gateway_pb2.RUN_OUTCOME_FAILED)
        raise
    ended = await harness.end(admitted.run_id)
    assert ended.used_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    return int(ended.used_tokens)


@pytest.mark.slow
async def test_500_concurrent_runs_leave_the_ledger_equal_to_the_audit_log(capped: GatewayHarness) -> None:
    used = await asyncio.gather(*(_full_run(capped, n) for n in range(RUNS)))
    spend = await capped.spend()
    records = await capped.audit_records()
    audited = sum(r.usage.input_tokens + r.usage.output_tokens for r in records)
    assert spend.reserved_tokens == 0  # every ending released its reservation
    assert spend.consumed_tokens == audited == sum(used)
    assert spend.consumed_tokens <= CAP
    assert len(records) == sum(1 for u in used if u)
    assert spend.consumed_micro_usd == sum(r.cost.micro_usd for r in records)

    # Then run one at a time until the cap defers: it defers only when a reservation no longer fits.
    for n in range(RUNS, RUNS + CAP):
        if not await _full_run(capped, n):
            break
    spend = await capped.spend()
    assert CAP - CLOTHO_RESERVATION < spend.consumed_tokens <= CAP
    assert spend.consumed_tokens == sum(
        r.usage.input_tokens + r.usage.output_tokens for r in await capped.audit_records()
    )


async def test_a_burst_applies_repeats_kills_and_the_cap_in_arrival_order(capped: GatewayHarness) -> None:
    """Concurrent admissions share one transaction; each still sees those before it, as if serial."""
    await capped.operator.KillOri(
        gateway_pb2.KillOriRequest(ori_id="stopped", reason="burst test"), metadata=capped.metadata_operator()
    )

    async def admit(ori: str, request_id: str = "") -> gateway_pb2.AdmitRunResponse:
        reply: gateway_pb2.AdmitRunResponse = await capped.gateway.AdmitRun(
            gateway_pb2.AdmitRunRequest(
                ori=common_pb2.OriRef(tenant_id="tenant-a", world_id="world-1", ori_id=ori),
                tier=CLOTHO,
                cause=1,  # type: ignore[arg-type]
                request_id=request_id,
            ),
            metadata=capped.metadata(Role.SERVICE),
        )
        return reply

    repeats = [admit("same", "one-request") for _ in range(20)]
    others = [admit(f"ori-{n}") for n in range(20)]
    killed = [admit("stopped") for _ in range(5)]
    outcomes = await asyncio.gather(*repeats, *others, *killed, return_exceptions=True)
    repeated = outcomes[:20]
    assert all(isinstance(r, gateway_pb2.AdmitRunResponse) for r in repeated)
    assert len({r.run_id for r in repeated}) == 1  # type: ignore[union-attr]
    assert all(
        isinstance(k, grpc.aio.AioRpcError) and k.code() == grpc.StatusCode.ABORTED for k in outcomes[40:]
    )
    fresh = [r for r in outcomes[20:40] if isinstance(r, gateway_pb2.AdmitRunResponse) and r.admitted]
    assert len(fresh) + 1 == CAP // CLOTHO_RESERVATION  # the repeated run holds one of the five places
    spend = await capped.spend()
    assert spend.reserved_tokens == CAP
    assert (spend.admissions, spend.blocked_by_world_cap, spend.killed) == (CAP // CLOTHO_RESERVATION, 16, 5)


@pytest.mark.slow
async def test_500_concurrent_fused_runs_stay_under_the_cap_and_equal_to_the_audit_log(
    capped: GatewayHarness,
) -> None:
    replies = await asyncio.gather(*(capped.run(f"ori-{n}") for n in range(RUNS)))
    completed = [r for r in replies if r.outcome == gateway_pb2.RUN_OUTCOME_COMPLETED]
    deferred = [r for r in replies if r.outcome == gateway_pb2.RUN_OUTCOME_DEFERRED_BY_WORLD_CAP]
    assert len(completed) + len(deferred) == RUNS
    spend = await capped.spend()
    records = await capped.audit_records()
    audited = sum(r.usage.input_tokens + r.usage.output_tokens for r in records)
    assert spend.reserved_tokens == 0  # every ending released its reservation
    assert spend.consumed_tokens == audited == sum(r.ending.used_tokens for r in completed)
    assert spend.consumed_tokens <= CAP
    assert len(records) == len(completed) == spend.admissions
    assert spend.blocked_by_world_cap == len(deferred)
