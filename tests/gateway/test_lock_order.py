"""Gateways sharing PostgreSQL take their row locks in one order (run rows by id, then ledger windows and
leases by key), so two transactions that touch the same rows never wait on each other in a cycle: a
deadlock would cost a second (PostgreSQL's deadlock_timeout) and fail one of them.

Each test holds a lock from outside so the two gateways' transactions queue up in the order that
deadlocks when they lock in different orders, then lets go."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.adapters.base import ModelReply, ModelRequest
from gateway.adapters.offline import OfflineAdapter
from gateway.errors import GatewayError, StoreUnreachable
from gateway.records import ControlKind, ControlScope, RunStatus
from gateway.runs import Who
from gateway.service import CognitionGateway
from services.errors import EgbeError, Unavailable
from tests.gateway.harness import CLOTHO, leased_gateway

pytestmark = pytest.mark.postgres

CAP = 10**9


async def _admitted(gateway: CognitionGateway, *worlds: str) -> list[str]:
    """A run in each world, its row written (an admission's write is posted, not waited for)."""
    runs = []
    for world in worlds:
        admitted = await gateway.admit(Who("t", world, "ada"), CLOTHO, 1)
        assert admitted.admitted
        runs.append(admitted.run.run_id)
    await gateway.store.probe()  # (a round trip through the writer, after the posted admissions)
    return runs


async def _until_waiting_for_locks(dsn: str, waiting: int) -> None:
    """Until `waiting` transactions of this database wait for a lock."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as watcher:
        for _ in range(500):
            row = await (
                await watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).fetchone()
            assert row is not None
            if row[0] >= waiting:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"{waiting} transactions never waited for a lock")


@asynccontextmanager
async def _ledger_row_locked(dsn: str, world: str) -> AsyncIterator[None]:
    """World `world`'s ledger row locked by an outside transaction until the block ends."""
    async with await psycopg.AsyncConnection.connect(dsn) as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM gateway_ledger WHERE world_id = %s FOR UPDATE", (world,))
        yield


async def _both(*calls: Any) -> list[Any]:
    """Calls arriving together (one burst), all answered."""
    return await asyncio.gather(*calls)


@pytest.mark.parametrize("held", ["x", "y"])
async def test_bursts_touching_two_worlds_in_opposite_orders_do_not_deadlock(
    tmp_path: Path, postgres_dsn: str, held: str
) -> None:
    async with (
        leased_gateway(tmp_path / "a", postgres_dsn, cap=CAP, holder="a") as a,
        leased_gateway(tmp_path / "b", postgres_dsn, cap=CAP, holder="b") as b,
    ):
        a_runs = dict(zip("xy", await _admitted(a, "x", "y"), strict=True))
        b_runs = dict(zip("xy", await _admitted(b, "x", "y"), strict=True))
        killed = RunStatus.KILLED  # (a kill is counted in the ledger: each ending writes its window)
        async with _ledger_row_locked(postgres_dsn, held):
            # b's burst waits at the held row, a's then queues behind it there. Were their orders
            # opposite, one of the two held rows would have b waiting on a row a holds when let go.
            b_ends = asyncio.ensure_future(
                _both(b.end_run(b_runs["y"], killed), b.end_run(b_runs["x"], killed))
            )
            await _until_waiting_for_locks(postgres_dsn, 1)
            a_ends = asyncio.ensure_future(
                _both(a.end_run(a_runs["x"], killed), a.end_run(a_runs["y"], killed))
            )
            await _until_waiting_for_locks(postgres_dsn, 2)
        ended = await asyncio.gather(a_ends, b_ends)

        assert [end.ended_now for ends in ended for end in ends] == [True] * 4
        assert a.store.conflicts == b.store.conflicts == 0  # no deadlock (then a second run) on the way
        for world in ("x", "y"):
            spend = await a.store.spend(world_id=world, tenant_id="", window_start_ms=0)
            assert (spend.admissions, spend.killed) == (2, 2)


@pytest.mark.parametrize("held", ["x", "y"])
@pytest.mark.parametrize("lone_burst", [False, True])
async def test_batches_of_several_bodies_write_the_ledger_in_one_order(
    tmp_path: Path, postgres_dsn: str, held: str, lone_burst: bool
) -> None:
    """b's batch holds an ending (world y), then an admission (world x): written body by body, it would
    lock y, then x. Its ledger changes wait for the batch's end and go in key order, as a's do: a batch
    the other way round (an admission in x, then an ending in y), or one burst of two endings, whose
    one statement runs its parts in the order given (PostgreSQL runs a statement's CTEs last first)."""
    async with (
        leased_gateway(tmp_path / "a", postgres_dsn, cap=CAP, holder="a") as a,
        leased_gateway(tmp_path / "b", postgres_dsn, cap=CAP, holder="b") as b,
    ):
        a_x, a_y = await _admitted(a, "x", "y")
        [b_y] = (await _admitted(b, "x", "y"))[1:]
        killed = RunStatus.KILLED
        async with _ledger_row_locked(postgres_dsn, held):
            b_batch = asyncio.ensure_future(
                _both(b.end_run(b_y, killed), b.admit(Who("t", "x", "bo"), CLOTHO, 1))
            )
            await _until_waiting_for_locks(postgres_dsn, 1)
            if lone_burst:  # (one body, one statement: the endings' changes go in it)
                a_batch = asyncio.ensure_future(_both(a.end_run(a_x, killed), a.end_run(a_y, killed)))
            else:
                a_batch = asyncio.ensure_future(
                    _both(a.admit(Who("t", "x", "al"), CLOTHO, 1), a.end_run(a_y, killed))
                )
            await _until_waiting_for_locks(postgres_dsn, 2)
        await asyncio.gather(a_batch, b_batch)

        assert a.store.conflicts == b.store.conflicts == 0


async def test_a_restarted_gateway_settling_its_runs_does_not_deadlock_with_another_ending_one(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        leased_gateway(tmp_path / "a", postgres_dsn, cap=CAP, holder="a") as a,
        leased_gateway(tmp_path / "b", postgres_dsn, cap=CAP, holder="b") as b,
    ):
        [left] = await _admitted(b, "w")  # b's previous life admitted it, and its lease is still out
        async with _ledger_row_locked(postgres_dsn, "w"):
            # b, restarted, settles its lease (the ledger row: it waits), then its active runs; a ends
            # one of them meanwhile (its run row, then the ledger row: it queues behind b).
            settled = asyncio.ensure_future(
                b.store.settle_leases("b", audit=b._settlement_record, now_ms=b.now_ms())
            )
            await _until_waiting_for_locks(postgres_dsn, 1)
            ending = asyncio.ensure_future(a.end_run(left, RunStatus.KILLED))  # (a kill writes the ledger)
            await _until_waiting_for_locks(postgres_dsn, 2)
        charged, ended = await asyncio.gather(settled, ending)

        assert charged > 0
        assert a.store.conflicts == b.store.conflicts == 0
        assert not ended.ended_now  # the settlement ended it first
        assert await _status(a, left) == RunStatus.FAILED.value


async def test_a_transaction_a_deadlock_rolled_back_is_run_again(tmp_path: Path, postgres_dsn: str) -> None:
    async with leased_gateway(tmp_path, postgres_dsn, cap=CAP, holder="a") as gateway:
        [run] = await _admitted(gateway, "w")
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as outside:
            # (so the gateway's transaction is the one that finds the deadlock, and loses it)
            await outside.execute("SET deadlock_timeout = '60s'")
            async with outside.transaction():
                await outside.execute("SELECT 1 FROM gateway_ledger WHERE world_id = 'w' FOR UPDATE")
                # The ending locks the run, then waits for the ledger row; the outside transaction then
                # waits for the run: a cycle, which PostgreSQL breaks by rolling the gateway's back.
                ending = asyncio.ensure_future(gateway.end_run(run, RunStatus.KILLED))
                await _until_waiting_for_locks(postgres_dsn, 1)
                await outside.execute("SELECT 1 FROM gateway_runs WHERE run_id = %s FOR UPDATE", (run,))
        ended = await ending

        assert ended.ended_now
        assert gateway.store.conflicts == 1
        assert b"egbe_gateway_store_conflicts_total 1.0" in gateway.metrics.exposition()
        assert gateway.store.healthy  # a conflict is not a lost database: admission stays open
        assert await _status(gateway, run) == RunStatus.KILLED.value
        spend = await gateway.store.spend(world_id="w", tenant_id="", window_start_ms=0)
        assert (spend.admissions, spend.killed) == (1, 1)  # applied once


async def _status(gateway: CognitionGateway, run_id: str) -> str:
    row = await gateway.store.transact(
        lambda tx: tx.one("SELECT status FROM gateway_runs WHERE run_id = ?", (run_id,)), durable=False
    )
    assert row is not None
    return str(row[0])


async def test_one_request_id_admitted_on_two_gateways_at_once_is_one_run(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """A client retrying on another gateway while the first still admits: the later admission waits for
    the earlier one's transaction and answers its run as a repeat."""
    async with (
        leased_gateway(tmp_path / "a", postgres_dsn, cap=CAP, holder="a") as a,
        leased_gateway(tmp_path / "b", postgres_dsn, cap=CAP, holder="b") as b,
    ):
        for n in range(20):
            who = Who("t", "w", f"ori-{n}")
            first, second = await asyncio.gather(
                a.admit(who, CLOTHO, 1, request_id=f"request-{n}"),
                b.admit(who, CLOTHO, 1, request_id=f"request-{n}"),
            )
            assert first.run.run_id == second.run.run_id
            assert sorted([first.repeated, second.repeated]) == [False, True]
        spend = await a.store.spend(world_id="w", tenant_id="", window_start_ms=0)
        assert spend.admissions == 20
        assert a.store.conflicts == b.store.conflicts == 0


class _HeldAdapter(OfflineAdapter):
    """The offline adapter, answering once `release` is set: a model call still under way until then."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()

    async def generate(self, request: ModelRequest) -> ModelReply:
        self.called.set()
        await self.release.wait()
        return await super().generate(request)


async def test_a_request_id_retried_on_another_gateway_during_its_call_is_running_then_answered(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """A client retrying a fused run on another gateway while the first gateway's model call is under
    way: the retry admits nothing and says the run is still going (the RPC's ABORTED naming it); once
    the run ended, a retry answers what the run answered."""
    async with (
        leased_gateway(tmp_path / "a", postgres_dsn, cap=CAP, holder="a") as a,
        leased_gateway(tmp_path / "b", postgres_dsn, cap=CAP, holder="b") as b,
    ):
        held = a.adapter = _HeldAdapter()
        who, prompt = Who("t", "w", "ada"), ModelRequest("p", "Objective: bake", mode="summary")

        def answered(*_: object) -> str:
            return "the first run's answer"

        first = asyncio.create_task(
            a.run_once(who, CLOTHO, 1, prompt, request_id="req-1", result_of=answered)
        )
        await held.called.wait()
        during = await b.run_once(who, CLOTHO, 1, prompt, request_id="req-1")
        assert (during.admission.repeated, during.admission.earlier_result, during.call) == (True, "", None)
        held.release.set()
        ran = await first
        assert ran.call is not None
        after = await b.run_once(who, CLOTHO, 1, prompt, request_id="req-1")
        assert after.admission.run.run_id == during.admission.run.run_id == ran.admission.run.run_id
        assert (after.admission.repeated, after.admission.earlier_result) == (True, "the first run's answer")
        spend = await b.store.spend(world_id="w", tenant_id="", window_start_ms=0)
        assert spend.admissions == 1
        assert await b.store.audited_tokens() == ran.call.reply.usage.total


async def test_two_gateways_under_mixed_load_answer_everything_and_the_ledger_adds_up(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Admissions (some retried on the other gateway under one request id), model calls, fused runs,
    endings of either gateway's runs and kills, over three worlds, on two gateways at once. Two bodies
    of one batch can still lock run rows in another order than the other gateway's batch (each body
    locks its own in order), here where both gateways end and call each other's runs at random: the
    deadlock that follows rolls one batch back, which runs again, so no caller sees it (it would get
    UNAVAILABLE), and the ledger adds up."""
    plan = random.Random(7452)
    async with (
        leased_gateway(tmp_path / "a", postgres_dsn, cap=CAP, holder="a") as a,
        leased_gateway(tmp_path / "b", postgres_dsn, cap=CAP, holder="b") as b,
    ):
        runs: list[str] = []

        async def step(n: int) -> None:
            gateway = plan.choice((a, b))
            world, ori = plan.choice("xyz"), f"ori-{plan.randrange(6)}"
            who, prompt = Who("t", world, ori), ModelRequest("p", f"Objective: {ori}", mode="summary")
            action = plan.choice(["admit", "retried", "generate", "end", "run", "run", "kill"])
            try:
                if action in ("admit", "retried"):
                    request_id = f"request-{n // 2}" if action == "retried" else ""
                    admitted = await gateway.admit(who, CLOTHO, 1, request_id=request_id)
                    if admitted.admitted and not admitted.repeated:
                        runs.append(admitted.run.run_id)
                elif action == "generate" and runs:
                    await gateway.generate(plan.choice(runs), prompt)
                elif action == "end" and runs:
                    await gateway.end_run(
                        plan.choice(runs), plan.choice([RunStatus.COMPLETED, RunStatus.KILLED])
                    )
                elif action == "run":
                    await gateway.run_once(who, CLOTHO, 1, prompt)
                elif action == "kill":
                    await gateway.add_control(
                        ControlKind.KILL, ControlScope.ORI, ori, reason="r", operator_id="o"
                    )
                    await gateway.lift_controls(ControlScope.ORI, ori, reason="r", operator_id="o")
            except (Unavailable, StoreUnreachable):
                raise  # (a deadlock would surface as this, had the writer not run its batch again)
            except (EgbeError, GatewayError):
                pass  # refusals (killed, over budget, ended) are part of the load

        for start in range(0, 480, 24):
            await asyncio.gather(*(step(n) for n in range(start, start + 24)))

        for run_id in runs:
            await a.end_run(run_id, RunStatus.COMPLETED)
        await a.return_leases()
        await b.return_leases()
        reserved, consumed = await b.store.ledger_totals()
        assert reserved == await b.store.lease_tokens()
        assert consumed == await b.store.audited_tokens()
