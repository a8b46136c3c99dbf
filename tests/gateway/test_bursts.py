"""Store calls arriving together are applied as one burst, on each backend: endings
(`GatewayStore._end_burst`), model boundaries (`_begin_burst`), calls' records (`_call_burst`) and tool
boundaries (`_tool_burst`).
Each is applied exactly as it would be alone, in arrival order (a run ended twice is ended by the
first, a run's third call is over its budget), and one naming no run, or refused, fails alone while
the burst's others are applied."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.adapters.base import ModelRequest
from gateway.adapters.offline import OfflineAdapter
from gateway.calls import GenerateResult
from gateway.config import GatewayConfig
from gateway.errors import BudgetExhausted, NoSuchRun, RunEnded, ToolNotGranted
from gateway.records import RunEnd, RunStatus
from gateway.runs import Who
from gateway.service import CognitionGateway
from gateway.store.base import GatewayStore
from gateway.store.tx import Tx
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


def _answer(outcome: Any) -> Any:
    """What a caller learns, comparable across worlds (run ids differ)."""
    if isinstance(outcome, BaseException):
        return type(outcome)
    if isinstance(outcome, RunEnd):
        return (outcome.used_tokens, outcome.released_tokens, outcome.ended_now, outcome.lease_return)
    assert isinstance(outcome, GenerateResult)
    return (outcome.call_id.split(":")[1], outcome.reply.usage.total, outcome.micro_usd)


def counting(store: GatewayStore, monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """The size of every burst the store's `name` combine applies from here on."""
    sizes: list[int] = []
    combine = getattr(store, name)

    async def counted(tx: Tx, items: list[Any]) -> Any:
        sizes.append(len(items))
        return await combine(tx, items)

    monkeypatch.setattr(store, name, counted)
    return sizes


async def _world(gateway: CognitionGateway, world: str, runs: list[str]) -> tuple[Any, ...]:
    """Each run's row and audit records, in `runs` order, and the world's ledger."""

    async def read(tx: Tx) -> tuple[list[Any], list[Any]]:
        rows = await tx.all(
            "SELECT run_id, status, detail, used_tokens, released_tokens, result, model_calls, tool_grants"
            " FROM gateway_runs WHERE world_id = ?",
            (world,),
        )
        audited = await tx.all(
            "SELECT run_id, COUNT(*), SUM(input_tokens + output_tokens), SUM(micro_usd) FROM gateway_audit"
            " WHERE world_id = ? GROUP BY run_id",
            (world,),
        )
        return rows, audited

    rows, audited = await gateway.store.transact(read, durable=False)
    by_id = {row[0]: tuple(row[1:]) for row in rows}
    audit_by_id = {row[0]: tuple(int(v) for v in row[1:]) for row in audited}
    spend = await gateway.store.spend(world_id=world, tenant_id="", window_start_ms=0)
    ledger = (
        spend.reserved_tokens,
        spend.consumed_tokens,
        spend.consumed_micro_usd,
        spend.admissions,
        spend.killed,
        spend.killed_in_flight,
    )
    return [by_id[r] for r in runs], [audit_by_id.get(r) for r in runs], ledger


async def test_endings_arriving_together_are_each_applied_as_alone(
    in_process: CognitionGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = in_process
    bursts = counting(gateway.store, monkeypatch, "_end_burst")

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
    assert isinstance(together[4], NoSuchRun)
    assert [_answer(o)[2] for o in together if not isinstance(o, BaseException)] == [
        True, True, False, True, True,
    ]  # fmt: skip
    assert await _world(gateway, "together", together_runs) == await _world(gateway, "alone", alone_runs)
    rows, _, (reserved, _, _, admissions, killed, killed_in_flight) = await _world(
        gateway, "together", together_runs
    )
    assert [row[0] for row in rows] == ["completed", "failed", "killed", "cancelled", "active"]
    assert (reserved, admissions, killed, killed_in_flight) == (4_000, 5, 1, 1)


# (which run, its tool grants): run 0 already made one of its two Clotho calls; run 2 is ended first.
CALLS = ((0, ()), (0, ()), (1, ("lookup",)), (2, ()), (3, ("lookup", "map")), (1, ("map",)))


async def test_model_calls_arriving_together_are_each_applied_as_alone(
    in_process: CognitionGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = in_process
    begins = counting(gateway.store, monkeypatch, "_begin_burst")
    records = counting(gateway.store, monkeypatch, "_call_burst")

    async def prepared(world: str) -> list[str]:
        runs = await _admitted(gateway, world)
        await gateway.end_run(runs[2], RunStatus.COMPLETED)
        return runs

    def call(runs: list[str], which: int, grants: tuple[str, ...]) -> Any:
        request = ModelRequest("policy", f"Objective: {which}", mode="dialogue", tool_grants=grants)
        return gateway.generate(runs[which], request)

    alone_runs = await prepared("alone")
    alone = [await asyncio.gather(call(alone_runs, *c), return_exceptions=True) for c in CALLS]
    begins.clear()
    records.clear()
    together_runs = await prepared("together")
    together = await asyncio.gather(*(call(together_runs, *c) for c in CALLS), return_exceptions=True)
    assert max(begins) > 1  # boundaries checked together
    assert max(records) > 1  # and calls recorded together

    assert [_answer(o) for o in together] == [_answer(o) for [o] in alone]
    assert [type(o) for o in together if isinstance(o, BaseException)] == [BudgetExhausted, RunEnded]
    assert await _world(gateway, "together", together_runs) == await _world(gateway, "alone", alone_runs)
    rows, audited, _ = await _world(gateway, "together", together_runs)
    assert [(row[5], row[6]) for row in rows[:4]] == [
        (2, ""),
        (2, "lookup\nmap"),
        (0, ""),
        (1, "lookup\nmap"),
    ]
    assert [a[0] if a else 0 for a in audited] == [2, 2, 0, 1, 0]


# (which run, the tool): run 0 was granted "lookup", run 1 nothing, run 2 "lookup" and ended; Clotho
# allows two tool calls a run.
TOOL_CALLS = ((0, "lookup"), (0, "lookup"), (0, "lookup"), (1, "lookup"), (2, "lookup"), ("none", "x"))


async def test_tool_calls_arriving_together_are_each_applied_as_alone(
    in_process: CognitionGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, store = in_process, in_process.store
    bursts = counting(store, monkeypatch, "_tool_burst")

    async def prepared(world: str) -> list[str]:
        runs = await _admitted(gateway, world)
        for which in (0, 2):
            granted = ModelRequest("policy", "Objective: bake", mode="dialogue", tool_grants=("lookup",))
            await gateway.generate(runs[which], granted)
        await gateway.end_run(runs[2], RunStatus.COMPLETED)
        return runs

    def tool_call(runs: list[str], which: int | str, tool: str) -> Any:
        return store.count_tool_call(runs[which] if isinstance(which, int) else "no-such-run", tool)

    alone_runs = await prepared("alone")
    alone = [await asyncio.gather(tool_call(alone_runs, *t), return_exceptions=True) for t in TOOL_CALLS]
    bursts.clear()
    together_runs = await prepared("together")
    together = await asyncio.gather(
        *(tool_call(together_runs, *t) for t in TOOL_CALLS), return_exceptions=True
    )
    assert bursts == [len(TOOL_CALLS)]

    def answer(outcome: Any) -> Any:
        return type(outcome) if isinstance(outcome, BaseException) else outcome

    assert [answer(o) for o in together] == [answer(o) for [o] in alone]
    assert [answer(o) for o in together] == [
        (1, 1), (2, 0), BudgetExhausted, ToolNotGranted, RunEnded, NoSuchRun,
    ]  # fmt: skip

    async def tool_calls(tx: Tx) -> list[Any]:
        return await tx.all(
            "SELECT world_id, tool_calls FROM gateway_runs WHERE run_id IN (?, ?)", together_runs[:2]
        )

    assert sorted(await store.transact(tool_calls, durable=False)) == [("together", 0), ("together", 2)]


async def test_reads_of_runs_arriving_together_are_one_read(
    in_process: CognitionGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a gateway reads of runs it is not serving (admitted elsewhere, or before a restart)."""
    gateway, store = in_process, in_process.store
    reads = counting(store, monkeypatch, "_read_runs")
    runs = await _admitted(gateway, "world")
    asked = [runs[1], "no-such-run", runs[3], runs[1]]
    together = await asyncio.gather(*(store.get_run(run_id) for run_id in asked), return_exceptions=True)
    assert reads == [len(asked)]
    assert [getattr(o, "run_id", type(o)) for o in together] == [runs[1], NoSuchRun, runs[3], runs[1]]
    assert [getattr(o, "ori_id", None) for o in together] == ["ori-1", None, "ori-3", "ori-1"]
