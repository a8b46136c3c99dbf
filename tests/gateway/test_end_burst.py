"""Endings arriving together are applied by one store call (`GatewayStore._end_burst`), on each backend:
each exactly as the same ending alone would be, a run ended twice ended by the first, and an ending
naming no run refused alone while the others are applied."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.adapters.base import ModelRequest
from gateway.adapters.offline import OfflineAdapter
from gateway.admission import CognitionGateway, Who
from gateway.config import GatewayConfig
from gateway.records import RunEnd, RunStatus
from gateway.store.base import Tx
from services.errors import NotFound
from tests.gateway.harness import backend_store

CLOTHO = 1
# (which run, how it ends): runs 0-3 are admitted, run 0 makes one call; "none" names no run.
ENDINGS = (
    (0, RunStatus.COMPLETED, ""),
    (1, RunStatus.FAILED, "adapter failed"),
    (1, RunStatus.COMPLETED, ""),  # the same run again: already ended
    (2, RunStatus.KILLED, "kill ori 'ori-2' (c1)"),
    ("none", RunStatus.COMPLETED, ""),
    (3, RunStatus.CANCELLED, "caller cancelled"),
)


@pytest.fixture
async def in_process(tmp_path: Path, database_url: str | None) -> AsyncIterator[CognitionGateway]:
    gateway = CognitionGateway(GatewayConfig(), backend_store(tmp_path, database_url), OfflineAdapter())
    await gateway.start()
    yield gateway
    await gateway.stop()


async def _admitted(gateway: CognitionGateway, world: str) -> list[str]:
    """Five runs in `world` (the fifth stays active), the first with one model call."""
    runs = []
    for n in range(5):
        admitted = await gateway.admit(Who("tenant", world, f"ori-{n}"), CLOTHO, 1)
        assert admitted.admitted
        runs.append(admitted.run.run_id)
    await gateway.generate(runs[0], ModelRequest("policy", "Objective: bake", mode="dialogue"))
    return runs


def _ending(
    gateway: CognitionGateway, runs: list[str], which: int | str, status: RunStatus, detail: str
) -> Any:
    run_id = runs[which] if isinstance(which, int) else f"no-such-run-{len(runs)}"
    return gateway.end_run(run_id, status, detail=detail)


def _answer(outcome: RunEnd | BaseException) -> Any:
    if isinstance(outcome, BaseException):
        return type(outcome)
    return (outcome.used_tokens, outcome.released_tokens, outcome.ended_now, outcome.lease_return)


async def _world(gateway: CognitionGateway, world: str, runs: list[str]) -> tuple[Any, ...]:
    """Each run's row as its ending left it, and the world's ledger."""

    async def rows(tx: Tx) -> list[Any]:
        return await tx.all(
            "SELECT run_id, status, detail, used_tokens, released_tokens, result FROM gateway_runs"
            " WHERE world_id = ?",
            (world,),
        )

    by_id = {row[0]: tuple(row[1:]) for row in await gateway.store.transact(rows, durable=False)}
    spend = await gateway.store.spend(world_id=world, tenant_id="", window_start_ms=0)
    ledger = (
        spend.reserved_tokens,
        spend.consumed_tokens,
        spend.consumed_micro_usd,
        spend.admissions,
        spend.killed,
        spend.killed_in_flight,
    )
    return [by_id[run_id] for run_id in runs], ledger


async def test_endings_arriving_together_are_each_applied_as_alone(
    in_process: CognitionGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, store = in_process, in_process.store
    bursts: list[int] = []
    end_burst = store._end_burst

    async def counted(tx: Tx, items: list[Any]) -> Any:
        bursts.append(len(items))
        return await end_burst(tx, items)

    monkeypatch.setattr(store, "_end_burst", counted)

    alone_runs = await _admitted(gateway, "alone")
    alone = [
        await asyncio.gather(_ending(gateway, alone_runs, *ending), return_exceptions=True)
        for ending in ENDINGS
    ]
    assert bursts == [1] * len(ENDINGS)

    bursts.clear()
    together_runs = await _admitted(gateway, "together")
    together = await asyncio.gather(
        *(_ending(gateway, together_runs, *ending) for ending in ENDINGS), return_exceptions=True
    )
    assert bursts == [len(ENDINGS)]  # one store call for all six

    assert [_answer(o) for o in together] == [_answer(o) for [o] in alone]
    assert isinstance(together[4], NotFound)
    assert [_answer(o)[2] for o in together if not isinstance(o, BaseException)] == [
        True, True, False, True, True,
    ]  # fmt: skip
    assert await _world(gateway, "together", together_runs) == await _world(gateway, "alone", alone_runs)
    rows, (reserved, _, _, admissions, killed, killed_in_flight) = await _world(
        gateway, "together", together_runs
    )
    assert [row[0] for row in rows] == ["completed", "failed", "killed", "cancelled", "active"]
    assert (reserved, admissions, killed, killed_in_flight) == (4_000, 5, 1, 1)
