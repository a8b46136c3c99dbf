"""The cognition gateway: its domain assembled (`core` → `calls` → `runs` → `operations`), with what
keeps it running: start and stop, the sweep of runs past their deadline, the leases kept and given back,
the store probed while unreachable, and the controls and limits other gateways push."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Awaitable, Callable

from gateway.adapters.base import ModelAdapter
from gateway.config import GatewayConfig
from gateway.core import Clock
from gateway.cost import Usage
from gateway.errors import GatewayError, RunStopped
from gateway.evals.scores import ScoreBook
from gateway.metrics import GatewayMetrics
from gateway.operations import OperatorActions
from gateway.records import LEASE_SETTLED, AuditEntry, Control, Limits, RunStatus
from gateway.store.base import GatewayStore
from services.errors import EgbeError
from services.logging import get_logger
from services.settings import UserError

log = get_logger(__name__)


class CognitionGateway(OperatorActions):
    """Admission, boundaries and endings of runs, and operator actions, over one store and one model
    adapter."""

    def __init__(
        self,
        config: GatewayConfig,
        store: GatewayStore,
        adapter: ModelAdapter,
        *,
        metrics: GatewayMetrics | None = None,
        clock: Clock = time.time,
        lease_holder: str = "",
    ) -> None:
        super().__init__(config, store, adapter, metrics=metrics, clock=clock, lease_holder=lease_holder)
        store.on_control_change(self._on_control)
        store.on_limits_change(self._on_limits)
        store.on_eval_scores_change(self._on_scores)
        resync = getattr(store, "on_resync", None)
        if resync is not None:
            resync(self.inflight.replace_controls)

    async def start(self) -> None:
        """Open the store, load the recorded eval scores (refused, naming each tier's field and the
        `egbe eval` command, when a selected class is not qualified by them), every active control and
        settle what this holder's previous life left leased, before serving anything."""
        await self.store.open()
        unqualified = self.routes.replace(await self.store.load_eval_scores())
        if unqualified:
            await self.adapter.close()
            await self.store.close()
            raise UserError("\n".join(f"{v.field}: {v.description}" for v in unqualified))
        self.inflight.replace_controls(await self.store.load_controls())
        self.limits.replace(await self.store.load_limits())
        charged = await self.store.settle_leases(
            self.leases.holder, audit=self._settlement_record, now_ms=self.now_ms()
        )
        if charged:
            log.warning("settled a lease left by this gateway's previous life", tokens=charged)
        self._tasks.add(asyncio.create_task(self._every(self.config.sweep_interval_seconds, self.sweep)))
        # Scores recorded by a process that cannot push to this one (SQLite) are read on this tick.
        reload = self._every(self.config.sweep_interval_seconds, self.reload_scores)
        self._tasks.add(asyncio.create_task(reload))
        lease_tick = self.config.lease.idle_return_seconds / 2
        self._tasks.add(asyncio.create_task(self._every(lease_tick, self.keep_leases)))

    async def stop(self) -> None:
        """Stop background work, give back every lease this gateway holds unused, close."""
        for task in self._tasks:
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await self.return_leases()
        except Exception as exc:  # the store is down: the next start settles the lease as spent
            log.warning("leases not returned at stop", error=str(exc))
        await self.adapter.close()
        await self.store.close()

    async def return_leases(self) -> None:
        """Give back everything this gateway's leases hold that no run reserved."""
        await self.leases.return_all(self.now_ms())

    @staticmethod
    async def _every(seconds: float, work: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await work()
            except Exception as exc:  # the store may be down; the next round retries
                log.warning("gateway background work failed", work=work.__name__, error=str(exc))

    async def sweep(self) -> int:
        """Time out runs past their deadline (a caller that never ended them), releasing reservations:
        this gateway's own (each reservation back to its lease) and any left in the store."""
        for run_id in self.leases.expired(self.now_ms()):
            try:
                await self.end_run(run_id, RunStatus.TIMED_OUT, detail="run deadline passed")
            except (EgbeError, GatewayError) as exc:  # the store is down, or it never wrote the run
                log.warning("timed-out run not ended", run_id=run_id, error=str(exc))
        expired = await self.store.expire_runs(now_ms=self.now_ms())
        self.metrics.count(self.metrics.runs_ended, RunStatus.TIMED_OUT.value, amount=expired)
        return expired

    async def keep_leases(self) -> None:
        """Give back leases no admission drew on lately or whose window is over; while the store is
        marked unreachable, try it (admission stays closed until it answers)."""
        if not self.store.healthy:
            await self.store.probe()
        now_ms = self.now_ms()
        window_ms = self._window_start_ms(now_ms)
        await self.leases.return_idle(
            current_window_ms=window_ms,
            previous_window_ms=window_ms - self.config.ledger_window_seconds * 1000,
            now_ms=now_ms,
        )

    def _settlement_record(self, world_id: str, window_start_ms: int, tokens: int) -> AuditEntry:
        """The audit record charging a settled lease: the tokens are counted as input (what the audit sum
        and the ledger's consumption add up), `error_class` says it was no model call."""
        window_end_ms = window_start_ms + self.config.ledger_window_seconds * 1000 - 1
        return AuditEntry(
            call_id=f"lease-settlement:{uuid.uuid4().hex}",
            run_id=f"lease:{self.leases.holder}",
            tenant_id="",
            world_id=world_id,
            ori_id="",
            tier=0,
            cause="lease-settlement",
            model_ref="",
            model_class="",
            input_context={
                "lease_holder": self.leases.holder,
                "window_start_ms": window_start_ms,
                "tokens": tokens,
                "why": "leased by this gateway before it stopped without returning them; nothing proves"
                " them unspent",
            },
            output="",
            usage=Usage(input_tokens=tokens),
            micro_usd=0,
            cost_estimated=True,
            policy_decision=f"{self.config.safety_policy_id}:lease-settled",
            retention_policy_id=self.config.retention_policy_id,
            config_fingerprint=self.fingerprint,
            offline=False,
            recorded_at_ms=min(self.now_ms(), window_end_ms),  # inside the window it charges
            error_class=LEASE_SETTLED,
        )

    async def reload_scores(self) -> None:
        """Read the recorded eval scores again and route by them."""
        self._on_scores(await self.store.load_eval_scores())

    def _on_scores(self, scores: ScoreBook) -> None:
        """Scores were re-recorded: route by them from now on; a tier they no longer qualify has its calls
        refused (FAILED_PRECONDITION naming the field) until they do again."""
        before = {violation.field for violation in self.routes.unqualified.values()}
        for violation in self.routes.replace(scores):
            if violation.field not in before:
                log.warning("a tier is no longer qualified", field=violation.field, why=violation.description)

    def _on_limits(self, current: Limits) -> None:
        """Limits changed (here or on another gateway): admission applies them from now on. What this
        gateway's leases of a world whose cap changed hold unreserved goes back to the ledger, so the next
        admission leases under the new cap."""
        for world_id in self.limits.replace(current):
            give_back = functools.partial(self.leases.return_world, world_id, self.now_ms())
            self._in_background(self._quietly(give_back))

    def _on_control(self, control: Control) -> None:
        """A control was added or lifted: stop matching in-flight work, and end the matching runs this
        gateway admitted (idempotent where the control's transaction already did), so their reservations
        come back to the lease now rather than at their deadline."""
        self.inflight.apply(control)
        if not control.active:
            return
        for run in self.inflight.matching(control):
            # (a run with work in flight ends itself when the control cancels it)
            if self.leases.owns(run.spec.run_id) and not run.tasks:
                self._in_background(self._end_after(run.spec.run_id, RunStopped(control)))
