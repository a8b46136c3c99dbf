"""The gateway's domain: admit runs, serve their model and tool boundaries, end them; no gRPC here.

A run is admitted once (kill switches, world-cap reservation of the tier's max tokens from this gateway's
lease of the world cap, per-run budget), then every model call re-checks the run against controls and its
budget, is audited with its ledger update in one transaction, and every way a run ends releases what it
reserved but did not use (to the lease it came from).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gateway.adapters.base import ModelAdapter, ModelReply, ModelRequest
from gateway.config import TIER_NAMES, GatewayConfig, RunBudget
from gateway.cost import Usage, billed_micro_usd, estimate_tokens, estimated_micro_usd
from gateway.inflight import InFlight, InFlightRun, SchemaStats
from gateway.lease import Leases
from gateway.metrics import GatewayMetrics
from gateway.provider_errors import ProviderError, to_gateway_error
from gateway.records import (
    LEASE_SETTLED,
    AuditEntry,
    CallGrant,
    Control,
    ControlAdded,
    ControlKind,
    ControlScope,
    Limits,
    RunEnd,
    RunSpec,
    RunStatus,
    new_run_id,
)
from gateway.routing import ModelRoute, config_fingerprint, select_route
from gateway.run_limits import RunLimits
from gateway.store.base import AdmissionItem, AdmissionOutcome, GatewayStore, call_grant
from services.causes import CAUSE_LABELS
from services.errors import Aborted, EgbeError, FieldViolation, InvalidArgument, NotFound, Unavailable
from services.logging import get_logger

log = get_logger(__name__)
Clock = Callable[[], float]
TEXT_LIMIT = 1_000  # the longest ending detail kept


@dataclass(frozen=True)
class Who:
    """The Ori a run thinks for."""

    tenant_id: str
    world_id: str
    ori_id: str


@dataclass(frozen=True)
class AdmitResult:
    run: RunSpec
    admitted: bool
    reserved_tokens: int
    detail: str
    stopped_by: Control | None = None
    repeated: bool = False
    earlier_result: str = ""
    # Set for a fused run's admission (`_admit(..., with_finish=True)`): its row, to be written with the
    # run's finish instead of on its own.
    unwritten: AdmissionItem | None = None


@dataclass(frozen=True)
class GenerateResult:
    call_id: str
    reply: ModelReply
    model_ref: str
    micro_usd: int
    cost_estimated: bool
    model_latency_us: int  # the adapter's own time for the call (`AdapterTiming`)


class AdapterTiming:
    """How long one adapter call took, timed inside the task that runs it (so not the hop to the task): what
    the model's answer cost, apart from the gateway's own work around it; kept when the call fails."""

    __slots__ = ("latency_us",)

    def __init__(self) -> None:
        self.latency_us = 0

    async def timed(self, call: Awaitable[ModelReply]) -> ModelReply:
        started = time.perf_counter_ns()
        try:
            return await call
        finally:
            self.latency_us = (time.perf_counter_ns() - started) // 1_000


@dataclass(frozen=True)
class FusedRun:
    """A run of one model call: its admission, and when admitted (not a repeat) its call and ending."""

    admission: AdmitResult
    call: GenerateResult | None = None
    ended: RunEnd | None = None


def _aborted(control: Control) -> Aborted:
    return Aborted(
        f"run stopped by operator control: {control.describe()}: {control.reason}",
        metadata={"control_id": control.control_id, "control": control.describe()},
    )


class CognitionGateway:
    """Admission, boundaries and endings of runs over one store and one model adapter."""

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
        self.config = config
        self.store = store
        self.adapter = adapter
        self.metrics = metrics or GatewayMetrics()
        self.fingerprint = config_fingerprint(config)
        self._clock = clock
        self.inflight = InFlight(clock=self._now_ms)
        # This gateway's leases of world caps (docs/gateway.md "Durability"): the holder id must be unique
        # among live gateways sharing the store and stable across restarts (`server.lease_holder`; a
        # gateway built without one, as in-process tests do, holds as "embedded").
        self.leases = Leases(store, lease_holder or config.lease.holder or "embedded", config.lease, clock)
        # Admissions in progress by request id: a concurrent repeat waits for the first one's answer.
        self._requests: dict[str, asyncio.Future[AdmitResult]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._routes: dict[int, ModelRoute] = {}  # each tier's, resolved once: the config never changes
        self.limits = RunLimits(config)  # world caps and run budgets, as operators changed them
        self.metrics.store_conflicts.set_function(lambda: store.conflicts)
        store.on_control_change(self._on_control)
        store.on_limits_change(self._on_limits)
        resync = getattr(store, "on_resync", None)
        if resync is not None:
            resync(self.inflight.replace_controls)

    # -- lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the store, load every active control and settle what this holder's previous life left
        leased, before serving anything."""
        await self.store.open()
        self.inflight.replace_controls(await self.store.load_controls())
        self.limits.replace(await self.store.load_limits())
        charged = await self.store.settle_leases(
            self.leases.holder, audit=self._settlement_record, now_ms=self._now_ms()
        )
        if charged:
            log.warning("settled a lease left by this gateway's previous life", tokens=charged)
        self._tasks.add(asyncio.create_task(self._every(self.config.sweep_interval_seconds, self.sweep)))
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
        await self.leases.return_all(self._now_ms())

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
        for run_id in self.leases.expired(self._now_ms()):
            try:
                await self.end_run(run_id, RunStatus.TIMED_OUT, detail="run deadline passed")
            except EgbeError as exc:  # the store is down (the next sweep retries) or never wrote the run
                log.warning("timed-out run not ended", run_id=run_id, error=str(exc))
        expired = await self.store.expire_runs(now_ms=self._now_ms())
        self.metrics.count(self.metrics.runs_ended, RunStatus.TIMED_OUT.value, amount=expired)
        return expired

    def _probe_soon(self) -> None:
        """Try the store once in the background (one at a time): the writer marks it healthy again as
        soon as it answers, so a passing failure closes admission for a round trip, not a lease tick."""
        if any(task.get_name() == "gateway-store-probe" for task in self._tasks):
            return
        task = asyncio.create_task(self._quietly(self.store.probe), name="gateway-store-probe")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _quietly(work: Callable[[], Awaitable[object]]) -> None:
        with contextlib.suppress(EgbeError):  # still unreachable: the next admission or tick tries again
            await work()

    async def keep_leases(self) -> None:
        """Give back leases no admission drew on lately or whose window is over; while the store is
        marked unreachable, try it (admission stays closed until it answers)."""
        if not self.store.healthy:
            await self.store.probe()
        now_ms = self._now_ms()
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
            recorded_at_ms=min(self._now_ms(), window_end_ms),  # inside the window it charges
            error_class=LEASE_SETTLED,
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def now_ms(self) -> int:
        """This gateway's clock, Unix ms (what control expiries are checked against)."""
        return self._now_ms()

    def _window_start_ms(self, now_ms: int) -> int:
        window = self.config.ledger_window_seconds * 1000
        return now_ms - now_ms % window

    def world_cap_tokens(self, world_id: str = "") -> int:
        """A world's cap: its operator override or the configured one, lowered by the configured homestead
        rest ('' = the configured one)."""
        return self.limits.world_cap_tokens(world_id)

    def _on_limits(self, current: Limits) -> None:
        """Limits changed (here or on another gateway): admission applies them from now on. What this
        gateway's leases of a world whose cap changed hold unreserved goes back to the ledger, so the next
        admission leases under the new cap."""
        for world_id in self.limits.replace(current):
            give_back = functools.partial(self.leases.return_world, world_id, self._now_ms())
            task = asyncio.create_task(self._quietly(give_back))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

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
                task = asyncio.create_task(self._end_after(run.spec.run_id, _aborted(control)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    # -- admission ----------------------------------------------------------------------------------
    async def admit(
        self, who: Who, tier: int, cause: int, *, request_id: str = "", kernel_call_id: str = ""
    ) -> AdmitResult:
        """Controls, world-cap reservation of the tier's max tokens and the run budget, in one transaction."""
        return await self._admit(self._new_run(who, tier, cause, request_id, kernel_call_id))

    def _new_run(self, who: Who, tier: int, cause: int, request_id: str, kernel_call_id: str) -> RunSpec:
        """A run to admit, with its tier's per-run budget; INVALID_ARGUMENT naming each bad field."""
        violations = []
        if tier not in TIER_NAMES:
            violations.append(FieldViolation("tier", "must be CLOTHO, LACHESIS or ATROPOS"))
        if not who.ori_id:
            violations.append(FieldViolation("ori.ori_id", "must be set"))
        if not who.world_id:
            violations.append(FieldViolation("ori.world_id", "must be set"))
        if cause not in CAUSE_LABELS:
            violations.append(FieldViolation("cause", "must name a cognition cause"))
        if violations:
            raise InvalidArgument(violations)
        budget = self.limits.run_budget(tier)
        return RunSpec(
            run_id=new_run_id(self._now_ms()),
            tenant_id=who.tenant_id,
            world_id=who.world_id,
            ori_id=who.ori_id,
            tier=tier,
            cause=cause,
            max_model_calls=budget.max_model_calls,
            max_tool_calls=budget.max_tool_calls,
            max_tokens=budget.max_tokens,
            request_id=request_id or None,
            kernel_call_id=kernel_call_id,
        )

    async def _admit(
        self, spec: RunSpec, first_call_grants: tuple[str, ...] | None = None, *, with_finish: bool = False
    ) -> AdmitResult:
        """Admit from this gateway's lease in memory. A repeated request id answers its first run: one
        this gateway is admitting right now (waited for), or one the store holds (from any gateway)."""
        request_id = spec.request_id
        if not request_id:
            return await self._admit_fresh(spec, first_call_grants, with_finish=with_finish)
        while (first := self._requests.get(request_id)) is not None:
            with contextlib.suppress(Exception):  # a first attempt that failed leaves this one to try
                result = await asyncio.shield(first)
                if result.repeated:
                    return result
                if result.admitted:
                    return AdmitResult(result.run, True, result.reserved_tokens, "repeated", None, True)
        mine = self._requests[request_id] = asyncio.get_running_loop().create_future()
        try:
            result = await self._admit_fresh(spec, first_call_grants)
        except BaseException as error:
            mine.set_exception(error)
            mine.exception()  # (retrieved: only a concurrent repeat may wait for it)
            raise
        finally:
            del self._requests[request_id]
        mine.set_result(result)
        return result

    async def _write_with_request_id(self, item: AdmissionItem) -> AdmitResult | None:
        """Write an admission whose request id may repeat one the store holds (admitted here earlier, or
        by another gateway): the earlier run's answer when it does (a reservation made for the repeat
        goes back to the lease), else None once written."""
        spec = item.run
        if item.outcome is AdmissionOutcome.ADMITTED:
            try:
                admission = await self.store.write_admission(item)
            except BaseException:
                self.leases.release(spec.run_id, spec.max_tokens)  # not written: no call was made on it
                raise
            if not admission.repeated:
                return None
            self.leases.release(spec.run_id, spec.max_tokens)
        else:  # refused now: a repeat still answers the run admitted first
            earlier = await self.store.earlier_admission(str(spec.request_id))
            if earlier is None:
                self.store.post_admission(item)
                return None
            admission = earlier
        return AdmitResult(
            admission.run, True, admission.reserved_tokens, "repeated", None, True, admission.earlier_result
        )

    async def _admit_fresh(
        self, spec: RunSpec, first_call_grants: tuple[str, ...] | None, *, with_finish: bool = False
    ) -> AdmitResult:
        """Controls from the pushed view, then the run's max tokens reserved from the world window's lease
        (leasing more when it cannot hold them); the decision is written without waiting (with a request
        id, once applied, so a repeat finds it). Fails closed while the store is unreachable."""
        if not self.store.healthy:
            self._probe_soon()
            raise Unavailable("the gateway store is unreachable; admission fails closed")
        now_ms = self._now_ms()
        deadline_ms = now_ms + int(self.config.run_timeout_seconds * 1000)
        window_start_ms = self._window_start_ms(now_ms)
        blocking = self.inflight.blocking(spec)
        outcome = AdmissionOutcome.KILLED
        if blocking is None:
            reserved = await self.leases.reserve(
                spec.run_id,
                (spec.world_id, window_start_ms),
                cap_tokens=self.world_cap_tokens(spec.world_id),
                tokens=spec.max_tokens,
                deadline_ms=deadline_ms,
                now_ms=now_ms,
            )
            outcome = AdmissionOutcome.ADMITTED if reserved else AdmissionOutcome.BLOCKED
        item = AdmissionItem(
            spec,
            outcome,
            self.world_cap_tokens(spec.world_id),
            window_start_ms,
            now_ms,
            deadline_ms,
            self.leases.holder,
            first_call_grants,
        )
        tier_name = TIER_NAMES[spec.tier]
        admitted = outcome is AdmissionOutcome.ADMITTED
        if spec.request_id:  # reserved first, in arrival order; a repeat gives it back
            earlier = await self._write_with_request_id(item)
            if earlier is not None:
                return earlier
        elif not (admitted and with_finish):
            self.store.post_admission(item)
        if admitted:
            self.metrics.count(self.metrics.admissions, tier_name)
            self.inflight.track(spec).unwritten = None if spec.request_id or not with_finish else item
            return AdmitResult(spec, True, spec.max_tokens, "admitted")
        if blocking is not None:
            self.metrics.count(self.metrics.blocked, tier_name, "control")
            return AdmitResult(spec, False, 0, f"refused: {blocking.describe()}: {blocking.reason}", blocking)
        self.metrics.count(self.metrics.blocked, tier_name, "world_cap")
        return AdmitResult(
            spec,
            False,
            0,
            f"deferred: the world cap of {self.world_cap_tokens(spec.world_id)} tokens cannot hold the"
            " reservation",
        )

    # -- boundaries ---------------------------------------------------------------------------------
    async def _run_spec(self, run_id: str) -> RunSpec:
        tracked = self.inflight.runs.get(run_id)
        if tracked is not None:
            return tracked.spec
        return await self.store.get_run(run_id)

    def _raise_if_stopped(self, run: InFlightRun) -> None:
        if run.stopped_by is not None:
            raise _aborted(run.stopped_by)

    async def _stop_if_controlled(self, run: InFlightRun) -> None:
        """A boundary's control check, against the pushed view (this gateway's own controls are in it
        before their RPC answers; another gateway's arrive by push): a run a control matches is ended as
        killed (its reservation released) and the boundary answers ABORTED naming the control."""
        if run.stopped_by is not None:
            error = _aborted(run.stopped_by)
            self.metrics.count(self.metrics.runs_stopped, run.stopped_by.scope.name.lower())
            await self._end_after(run.spec.run_id, error)
            raise error

    async def generate(self, run_id: str, request: ModelRequest, *, attempt: int = 1) -> GenerateResult:
        """One model call inside an admitted run: controls and budget first, then the adapter, then audit."""
        if not run_id:
            raise InvalidArgument.field("run_id", "must name an admitted run (AdmitRun or Submit)")
        if request.max_output_tokens < 0:
            raise InvalidArgument.field("max_output_tokens", "must be >= 0")
        spec = await self._run_spec(run_id)
        run = self.inflight.track(spec)
        with self.leases.recording(run_id):
            await self._stop_if_controlled(run)
            route, request = self._routed(spec, request)
            input_tokens = await self.adapter.count_input_tokens(request)
            grant = await self.store.begin_call(
                run_id,
                input_tokens=input_tokens,
                max_output_tokens=request.max_output_tokens,
                tool_grants=request.tool_grants,
            )
            result, entry = await self._call(run, route, request, grant, attempt)
            self.leases.charge(await self.store.record_call(entry, holder=self.leases.holder))
        self._account(run, result)
        return result

    def _routed(self, spec: RunSpec, request: ModelRequest) -> tuple[ModelRoute, ModelRequest]:
        """The tier's route, and the request completed with its model and the run's output bound."""
        route = self._routes.get(spec.tier)
        if route is None:
            route = self._routes[spec.tier] = select_route(self.config.routing, spec.tier)
        return route, ModelRequest(
            **{
                **vars(request),
                "model_class": route.model_class,
                "concrete_model_id": route.concrete_model_id,
                "deferrable": spec.tier == 3,
                "max_output_tokens": request.max_output_tokens or spec.max_tokens,
            }
        )

    async def _call(
        self, run: InFlightRun, route: ModelRoute, request: ModelRequest, grant: CallGrant, attempt: int
    ) -> tuple[GenerateResult, AuditEntry]:
        """The adapter call a boundary granted, and its audit record for the caller to write with the
        ledger update (a call that got no answer is audited here)."""
        spec, run_id = run.spec, run.spec.run_id
        request = ModelRequest(**{**vars(request), "max_output_tokens": grant.max_output_tokens})
        schema = run.schemas.setdefault(request.output_schema or request.mode, SchemaStats())
        schema.attempts += 1
        schema.calls += int(attempt <= 1)
        call_id = f"{run_id}:{grant.call_index}"
        model_ref = self.adapter.name if self.adapter.offline else route.model_ref

        def audit(**outcome: Any) -> AuditEntry:
            return AuditEntry(
                call_id=call_id,
                run_id=run_id,
                tenant_id=spec.tenant_id,
                world_id=spec.world_id,
                ori_id=spec.ori_id,
                tier=spec.tier,
                cause=CAUSE_LABELS[spec.cause],
                model_ref=model_ref,
                model_class=route.model_class,
                input_context=_replay_context(request, attempt),
                policy_decision=f"{self.config.safety_policy_id}:admitted",
                retention_policy_id=self.config.retention_policy_id,
                config_fingerprint=self.fingerprint,
                offline=self.adapter.offline,
                recorded_at_ms=self._now_ms(),
                kernel_call_id=spec.kernel_call_id,
                **outcome,
            )

        timing = AdapterTiming()
        try:
            reply = await self._call_adapter(run, timing.timed(self.adapter.generate(request)))
        except BaseException as error:
            self._write_row(run)
            await self._record_failed_call(
                audit(
                    output="",
                    usage=Usage(),
                    micro_usd=0,
                    cost_estimated=self.adapter.offline,
                    error_class=failure_class(error),
                    model_latency_us=timing.latency_us,
                )
            )
            raise
        exact = not reply.offline
        if exact:
            cost = self.config.cost
            micro_usd = billed_micro_usd(cost, route.model_class, reply.usage, batched=reply.batched)
        else:
            micro_usd = estimated_micro_usd(self.config.cost, route.model_class, reply.usage.total)
        latency_us = timing.latency_us
        entry = audit(
            output=reply.text,
            usage=reply.usage,
            micro_usd=micro_usd,
            cost_estimated=not exact,
            model_latency_us=latency_us,
        )
        return GenerateResult(call_id, reply, model_ref, micro_usd, not exact, latency_us), entry

    async def run_once(
        self,
        who: Who,
        tier: int,
        cause: int,
        request: ModelRequest,
        *,
        request_id: str = "",
        kernel_call_id: str = "",
        result_of: Callable[[AdmitResult, GenerateResult, RunEnd], str] = lambda *_: "",
    ) -> FusedRun:
        """Admit, call the model once and end, with two store transactions: the admission, which is also
        the call's model boundary (controls; the call checked against the fresh run's budget first, so an
        oversized prompt reserves nothing), then the call's audit record, its ledger update and the
        ending together. A control pushed after the admission stops the call as in `generate`; every
        other ending (error, cancel, kill) releases the reservation. `result_of` is what a repeat of
        `request_id` answers."""
        spec = self._new_run(who, tier, cause, request_id, kernel_call_id)
        route, request = self._routed(spec, request)
        input_tokens = await self.adapter.count_input_tokens(request)
        grant = call_grant(
            spec,
            model_calls=0,
            used_tokens=0,
            input_tokens=input_tokens,
            max_output_tokens=request.max_output_tokens,
        )
        admission = await self._admit(spec, first_call_grants=request.tool_grants, with_finish=True)
        if not admission.admitted or admission.repeated:
            return FusedRun(admission)
        run = self.inflight.track(spec)
        try:
            with self.leases.recording(spec.run_id):
                self._raise_if_stopped(run)
                call, entry = await self._call(run, route, request, grant, 1)
                self._account(run, call)
                self.inflight.forget(spec.run_id)
                # What a repeat of the request id answers (none without one): the run as this call ends it.
                used = call.reply.usage.total
                planned = RunEnd(used, max(0, spec.max_tokens - used), ended_now=True)
                row, run.unwritten = run.unwritten, None  # written with the finish, or (it failed) never
                ended = await self.store.finish_call(
                    entry,
                    holder=self.leases.holder,
                    stats=run.stats(),
                    now_ms=self._now_ms(),
                    result=result_of(admission, call, planned) if spec.request_id else "",
                    admission=row,
                )
                self.leases.charge(ended.lease_charge)
                self.leases.release(spec.run_id, ended.lease_return)
        except BaseException as error:
            self._write_row(run)
            await asyncio.shield(self._end_after(spec.run_id, error))
            raise
        self.metrics.count(self.metrics.runs_ended, RunStatus.COMPLETED.value, amount=int(ended.ended_now))
        return FusedRun(admission, call, ended)

    def _write_row(self, run: InFlightRun) -> None:
        """Write a fused run's admission row now (before its ending or a failed call's record), unless
        its finish took it."""
        if run.unwritten is not None:
            self.store.post_admission(run.unwritten)
            run.unwritten = None

    async def _end_after(self, run_id: str, error: BaseException) -> None:
        """End a run its error stopped (releasing its reservation); a store that is down leaves it to the
        sweep, and the caller's own error is the one reported."""
        status = {"killed": RunStatus.KILLED, "cancelled": RunStatus.CANCELLED}.get(
            failure_class(error), RunStatus.FAILED
        )
        try:
            await self.end_run(run_id, status, detail=str(error)[:TEXT_LIMIT] or type(error).__name__)
        except Exception as exc:
            log.warning("run not ended after its error", run_id=run_id, error=str(exc))

    def _account(self, run: InFlightRun, result: GenerateResult) -> None:
        """A recorded call's usage, on the run (for its answer and stats) and in the metrics."""
        usage = result.reply.usage
        run.add_usage(usage, result.micro_usd, estimated=result.cost_estimated)
        self.metrics.record_call(
            TIER_NAMES[run.spec.tier], result.model_ref, usage, result.micro_usd, result.model_latency_us
        )

    async def _record_failed_call(self, entry: AuditEntry) -> None:
        """A call that got no answer is audited too, in the same transaction as its ledger update (zero
        tokens: the provider reports no usage for a failed request), so the ledger still equals the audit
        sum. Shielded: a cancelled or killed call still leaves its record."""
        try:
            charge = await asyncio.shield(self.store.record_call(entry, holder=self.leases.holder))
            self.leases.charge(charge)
        except Exception as exc:  # the store is down: the caller's own error is the one to report
            log.warning("failed model call not audited", call_id=entry.call_id, error=str(exc))

    async def _call_adapter(self, run: InFlightRun, call: Coroutine[Any, Any, ModelReply]) -> ModelReply:
        """Run the adapter's call as a task a pushed control can cancel; provider errors become gateway
        errors."""
        task: asyncio.Task[Any] = asyncio.create_task(call)
        run.tasks.add(task)
        try:
            reply: ModelReply = await task
        except asyncio.CancelledError:
            if run.stopped_by is not None and task.cancelled():
                raise _aborted(run.stopped_by) from None
            task.cancel()
            raise
        except ProviderError as error:
            run.met(error.error_class.value)
            self.metrics.count(self.metrics.provider_errors, error.error_class.value)
            raise to_gateway_error(error) from error
        finally:
            run.tasks.discard(task)
        for error_class in reply.retried_errors:
            run.met(error_class)
            self.metrics.count(self.metrics.provider_errors, error_class)
        return reply

    async def check_tool_call(self, run_id: str, tool_name: str) -> tuple[int, int]:
        if not run_id:
            raise InvalidArgument.field("run_id", "must name an admitted run")
        if not tool_name:
            raise InvalidArgument.field("tool_name", "must be set")
        run = self.inflight.track(await self._run_spec(run_id))
        await self._stop_if_controlled(run)
        return await self.store.count_tool_call(run_id, tool_name)

    async def end_run(
        self, run_id: str, status: RunStatus, *, detail: str = "", fallbacks: int = 0, result: str = ""
    ) -> RunEnd:
        """Reconcile the run and release its unused reservation; idempotent."""
        if not run_id:
            raise InvalidArgument.field("run_id", "must name an admitted run")
        if status is RunStatus.ACTIVE:
            raise InvalidArgument.field("outcome", "must be an ending")
        tracked = self.inflight.forget(run_id)
        stats: dict[str, object] = {}
        # A fallback ending is at least one fallback even when the caller did not count them.
        fallbacks = max(fallbacks, int(status is RunStatus.FALLBACK))
        if tracked is not None:
            if fallbacks:
                name = next(iter(tracked.schemas), "unknown")
                tracked.schemas.setdefault(name, SchemaStats()).fallbacks += fallbacks
            stats = tracked.stats()
        try:
            ended = await self.store.end_run(
                run_id, status, detail=detail, stats=stats, now_ms=self._now_ms(), result=result
            )
        except NotFound:
            # A run this gateway admitted whose row was never written (the store went down): nothing
            # proves it made no call, so its reservation stays leased, to be settled as spent.
            self.leases.strand(run_id)
            raise
        self.leases.release(run_id, ended.lease_return)
        if ended.ended_now:
            self.metrics.count(self.metrics.runs_ended, status.value)
        return ended

    # -- operator controls --------------------------------------------------------------------------
    async def add_control(
        self,
        kind: ControlKind,
        scope: ControlScope,
        target: str,
        *,
        world_id: str = "",
        expires_after_ms: int = 0,
        reason: str,
        operator_id: str,
    ) -> ControlAdded:
        """Commit a control (or answer the identical one still active); `world_id` limits it to one
        world, `expires_after_ms` (0: never) ends it that long after now."""
        violations = []
        if not target:
            violations.append(FieldViolation("target", "must be set"))
        if scope is ControlScope.TIER and target not in TIER_NAMES.values():
            violations.append(FieldViolation("target", "a tier control names clotho, lachesis or atropos"))
        if scope is ControlScope.WORLD and world_id not in ("", target):
            violations.append(FieldViolation("world_id", "a world control names its world in target alone"))
        if not reason.strip():
            violations.append(FieldViolation("reason", "every control needs a reason"))
        if not 0 <= expires_after_ms <= MAX_CONTROL_MS:
            violations.append(FieldViolation("expires_after", "must be between 1 ms and 366 days"))
        if violations:
            raise InvalidArgument(violations)
        now_ms = self._now_ms()
        control = Control(
            uuid.uuid4().hex,
            kind,
            scope,
            target,
            reason,
            operator_id,
            now_ms,
            world_id="" if scope is ControlScope.WORLD else world_id,
            expires_at_ms=now_ms + expires_after_ms if expires_after_ms else 0,
        )
        added = await self.store.add_control(control)
        if not added.existing:
            self.metrics.count(self.metrics.controls, scope.name.lower())
        return added

    async def lift_controls(
        self, scope: ControlScope, target: str, *, world_id: str = "", reason: str, operator_id: str
    ) -> list[Control]:
        if not target:
            raise InvalidArgument.field("target", "must be set")
        return await self.store.lift_controls(
            scope,
            target,
            world_id="" if scope is ControlScope.WORLD else world_id,
            reason=reason,
            operator_id=operator_id,
            now_ms=self._now_ms(),
        )

    async def set_world_cap(
        self, world_id: str, tokens_per_hour: int, *, reason: str, operator_id: str
    ) -> int:
        """Change a world's cap (checked, committed, pushed); answers the cap admission now applies."""
        self.limits.checked_world_cap(world_id, tokens_per_hour)
        _check_reason(reason)
        await self.store.set_world_cap(  # (published to `_on_limits` once committed)
            world_id, tokens_per_hour, operator_id=operator_id, reason=reason, now_ms=self._now_ms()
        )
        return self.world_cap_tokens(world_id)

    async def set_run_budget(
        self,
        tier: int,
        *,
        max_model_calls: int | None,
        max_tool_calls: int | None,
        max_tokens: int | None,
        reason: str,
        operator_id: str,
    ) -> RunBudget:
        """Change a tier's per-run budget (the fields given; checked, committed, pushed)."""
        budget = self.limits.changed_budget(
            tier, max_model_calls=max_model_calls, max_tool_calls=max_tool_calls, max_tokens=max_tokens
        )
        _check_reason(reason)
        await self.store.set_run_budget(  # (published to `_on_limits` once committed)
            tier, budget, operator_id=operator_id, reason=reason, now_ms=self._now_ms()
        )
        return self.limits.run_budget(tier)

    async def record_operator_attempt(
        self, method: str, *, role: str, operator_id: str, allowed: bool, detail: str
    ) -> None:
        await self.store.record_operator_attempt(
            method, role=role, operator_id=operator_id, allowed=allowed, detail=detail, now_ms=self._now_ms()
        )

    def spend_window_start_ms(self, since_ms: int = 0) -> int:
        """The first ledger window a spend report sums: the one holding `since_ms`, or the current one (0).

        A `since_ms` after now is refused: that report would silently sum nothing."""
        now_ms = self._now_ms()
        if since_ms > now_ms:
            raise InvalidArgument.field(
                "since_unix_ms", f"{since_ms} is after the gateway's clock ({now_ms})"
            )
        return self._window_start_ms(since_ms or now_ms)

    # -- the whole run ------------------------------------------------------------------------------
    async def run_guarded(self, spec: RunSpec, work: Awaitable[Any]) -> Any:
        """Await the run's work as a task a pushed control cancels; raises Aborted naming the control."""
        run = self.inflight.track(spec)
        try:
            self._raise_if_stopped(run)
        except Aborted:
            if isinstance(work, Coroutine):
                work.close()  # never started: nothing to cancel (and no "never awaited" warning)
            raise
        task: asyncio.Task[Any] = asyncio.ensure_future(work)
        run.tasks.add(task)
        try:
            return await asyncio.wait_for(task, self.config.run_timeout_seconds)
        except asyncio.CancelledError:
            if run.stopped_by is not None and task.cancelled():
                raise _aborted(run.stopped_by) from None
            raise
        finally:
            run.tasks.discard(task)


MAX_CONTROL_MS = 366 * 24 * 3600 * 1000  # the longest expiry a control may have


def _check_reason(reason: str) -> None:
    if not reason.strip():
        raise InvalidArgument.field("reason", "every change needs a reason")


def failure_class(error: BaseException) -> str:
    """Why a model call got no answer: the provider error class, or what stopped the call."""
    cause = error if isinstance(error, ProviderError) else error.__cause__
    if isinstance(cause, ProviderError):
        return cause.error_class.value
    if isinstance(error, Aborted):
        return "killed"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    return "unknown"


def _replay_context(request: ModelRequest, attempt: int) -> dict[str, object]:
    """Everything needed to replay the call: every prompt part and the call's parameters."""
    return {
        "system_policy": request.system_policy,
        "tool_grants": list(request.tool_grants),
        "task_instruction": request.task_instruction,
        "untrusted": [{"kind": p.kind, "content": p.content} for p in request.untrusted],
        "mode": request.mode,
        "output_schema": request.output_schema,
        "max_output_tokens": request.max_output_tokens,
        "model_class": request.model_class,
        "concrete_model_id": request.concrete_model_id,
        "request_id": request.request_id,
        "attempt": attempt,
        "input_tokens_estimate": estimate_tokens(request.prompt_text()),
    }
