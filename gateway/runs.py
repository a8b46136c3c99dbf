"""A run from admission to ending: admitted once (controls from the pushed view, the world-cap
reservation of the tier's max tokens from this gateway's lease, the per-run budget), then every model and
tool boundary re-checks the run against the controls and its budget, and every way a run ends releases
what it reserved but did not use (to the lease it came from).

A run this gateway admitted has one record in memory, its `InFlightRun` (`InFlight.track`): its tasks,
the control that stopped it, what it has spent, and (a fused run) its admission row not written yet. The
admission hands that record on (`AdmitResult.tracked`), so a fused run never looks it up again; its
reservation is the lease's (`Leases`), its row the store's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.adapters.base import ModelRequest
from gateway.budget import call_grant
from gateway.calls import GenerateResult, ModelCalls, failure_class
from gateway.config import TIER_NAMES
from gateway.errors import CallDeferred, ForeignRun, NoSuchRun, RunStopped, StoreUnreachable
from gateway.inflight import InFlightRun, SchemaStats
from gateway.provider_errors import ProviderErrorClass
from gateway.records import Control, RunEnd, RunSpec, RunStatus, new_run_id
from gateway.store.rows import AdmissionItem, AdmissionOutcome
from services.causes import CAUSE_LABELS
from services.errors import FieldViolation, InvalidArgument
from services.logging import get_logger

log = get_logger(__name__)
TEXT_LIMIT = 1_000  # the longest ending detail kept


@dataclass(frozen=True)
class Who:
    """The Ori a run thinks for."""

    tenant_id: str
    world_id: str
    ori_id: str


class Requester(StrEnum):
    """Which request admits a run. Each keeps its own `request_id` namespace: a repeat answers the first
    request's response, and the responses of a Submit, an AdmitRun and a Run are different messages."""

    SUBMIT = "submit"
    ADMIT = "admit"
    RUN = "run"


def check_bound(admitted: Who, tier: int, asked: Who | None, asked_tier: int) -> None:
    """A call that names an Ori or a tier must name its run's admitted ones (ForeignRun naming `ori` or
    `tier`): a run id borrowed from another Ori's admission never makes this Ori think."""
    if asked is not None and asked != admitted:
        raise ForeignRun("ori", _named(asked), _named(admitted))
    if asked_tier and asked_tier != tier:
        raise ForeignRun("tier", str(asked_tier), str(tier))


def _named(who: Who) -> str:
    return f"{who.tenant_id}/{who.world_id}/{who.ori_id}"


@dataclass(frozen=True)
class AdmitResult:
    run: RunSpec
    admitted: bool
    reserved_tokens: int
    detail: str
    stopped_by: Control | None = None
    repeated: bool = False
    earlier_result: str = ""
    # The run this gateway now tracks in flight (an admitted, fresh run): its one record of the run's state.
    tracked: InFlightRun | None = None


@dataclass(frozen=True)
class FusedRun:
    """A run of one model call: its admission, and when admitted (not a repeat) its call and ending, or
    why its call was deferred (`deferred_by`: no provider had a turn for it; the run is ended)."""

    admission: AdmitResult
    call: GenerateResult | None = None
    ended: RunEnd | None = None
    deferred_by: str = ""


class RunGateway(ModelCalls):
    """Admission, boundaries and endings of runs."""

    async def admit(
        self,
        who: Who,
        tier: int,
        cause: int,
        *,
        request_id: str = "",
        kernel_call_id: str = "",
        requester: Requester = Requester.ADMIT,
    ) -> AdmitResult:
        """Controls, world-cap reservation of the tier's max tokens and the run budget, in one transaction."""
        spec = self._new_run(who, tier, cause, request_id, kernel_call_id, requester=requester)
        return await self._admit(spec)

    def _new_run(
        self, who: Who, tier: int, cause: int, request_id: str, kernel_call_id: str, *, requester: Requester
    ) -> RunSpec:
        """A run to admit, with its tier's per-run budget; INVALID_ARGUMENT naming each bad field. Its
        request id is kept in its requester's namespace."""
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
        self.routes.route(tier)  # FAILED_PRECONDITION while the tier's class is not qualified
        budget = self.limits.run_budget(tier)
        return RunSpec(
            run_id=new_run_id(self.now_ms()),
            tenant_id=who.tenant_id,
            world_id=who.world_id,
            ori_id=who.ori_id,
            tier=tier,
            cause=cause,
            max_model_calls=budget.max_model_calls,
            max_tool_calls=budget.max_tool_calls,
            max_tokens=budget.max_tokens,
            request_id=f"{requester.value}:{request_id}" if request_id else None,
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
            raise StoreUnreachable()
        now_ms = self.now_ms()
        deadline_ms = now_ms + int(self.config.run_timeout_seconds * 1000)
        window_start_ms = self._window_start_ms(now_ms)
        blocking = self.inflight.blocking(spec)
        cap_tokens = self.limits.world_cap_tokens(spec.world_id)  # the cap this decision is made under
        outcome = AdmissionOutcome.KILLED
        if blocking is None:
            reserved = await self.leases.reserve(
                spec.run_id,
                (spec.world_id, window_start_ms),
                cap_tokens=cap_tokens,
                tokens=spec.max_tokens,
                deadline_ms=deadline_ms,
                now_ms=now_ms,
            )
            outcome = AdmissionOutcome.ADMITTED if reserved else AdmissionOutcome.BLOCKED
        item = AdmissionItem(
            spec,
            outcome,
            cap_tokens,
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
            run = self.inflight.track(spec)
            run.unwritten = None if spec.request_id or not with_finish else item
            return AdmitResult(spec, True, spec.max_tokens, "admitted", tracked=run)
        if blocking is not None:
            self.metrics.count(self.metrics.blocked, tier_name, "control")
            return AdmitResult(spec, False, 0, f"refused: {blocking.describe()}: {blocking.reason}", blocking)
        self.metrics.count(self.metrics.blocked, tier_name, "world_cap")
        return AdmitResult(
            spec,
            False,
            0,
            f"deferred: the world cap of {cap_tokens} tokens cannot hold the reservation",
        )

    async def _run_spec(self, run_id: str) -> RunSpec:
        tracked = self.inflight.runs.get(run_id)
        if tracked is not None:
            return tracked.spec
        return await self.store.get_run(run_id)

    def _raise_if_stopped(self, run: InFlightRun) -> None:
        if run.stopped_by is not None:
            raise RunStopped(run.stopped_by)

    async def _stop_if_controlled(self, run: InFlightRun) -> None:
        """A boundary's control check, against the pushed view (this gateway's own controls are in it
        before their RPC answers; another gateway's arrive by push): a run a control matches is ended as
        killed (its reservation released) and the boundary answers ABORTED naming the control."""
        if run.stopped_by is not None:
            error = RunStopped(run.stopped_by)
            self.metrics.count(self.metrics.runs_stopped, run.stopped_by.scope.name.lower())
            await self._end_after(run.spec.run_id, error)
            raise error

    async def generate(
        self,
        run_id: str,
        request: ModelRequest,
        *,
        attempt: int = 1,
        asked: Who | None = None,
        asked_tier: int = 0,
    ) -> GenerateResult:
        """One model call inside an admitted run: the Ori and tier it names are the run's, then controls
        and budget, then the adapter, then audit."""
        if not run_id:
            raise InvalidArgument.field("run_id", "must name an admitted run (AdmitRun or Submit)")
        if request.max_output_tokens < 0:
            raise InvalidArgument.field("max_output_tokens", "must be >= 0")
        spec = await self._run_spec(run_id)
        check_bound(Who(spec.tenant_id, spec.world_id, spec.ori_id), spec.tier, asked, asked_tier)
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
        spec = self._new_run(who, tier, cause, request_id, kernel_call_id, requester=Requester.RUN)
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
        run = admission.tracked
        if run is None:  # refused, or a repeat
            return FusedRun(admission)
        try:
            with self.leases.recording(spec.run_id):
                if run.stopped_by is not None:
                    raise RunStopped(run.stopped_by)
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
                    now_ms=self.now_ms(),
                    result=result_of(admission, call, planned) if spec.request_id else "",
                    admission=row,
                )
                self.leases.charge(ended.lease_charge)
                self.leases.release(spec.run_id, ended.lease_return)
        except BaseException as error:
            self._write_row(run)
            await asyncio.shield(self._end_after(spec.run_id, error))
            if isinstance(error, CallDeferred):
                return FusedRun(admission, deferred_by=str(error))
            raise
        self.metrics.count(self.metrics.runs_ended, RunStatus.COMPLETED.value, amount=int(ended.ended_now))
        return FusedRun(admission, call, ended)

    async def _end_after(self, run_id: str, error: BaseException) -> None:
        """End a run its error stopped (releasing its reservation); a store that is down leaves it to the
        sweep, and the caller's own error is the one reported."""
        status = {
            "killed": RunStatus.KILLED,
            "cancelled": RunStatus.CANCELLED,
            ProviderErrorClass.DEFERRED.value: RunStatus.DEFERRED,
        }.get(failure_class(error), RunStatus.FAILED)
        try:
            await self.end_run(run_id, status, detail=str(error)[:TEXT_LIMIT] or type(error).__name__)
        except Exception as exc:
            log.warning("run not ended after its error", run_id=run_id, error=str(exc))

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
                run_id, status, detail=detail, stats=stats, now_ms=self.now_ms(), result=result
            )
        except NoSuchRun:
            # A run this gateway admitted whose row was never written (the store went down): nothing
            # proves it made no call, so its reservation stays leased, to be settled as spent.
            self.leases.strand(run_id)
            raise
        self.leases.release(run_id, ended.lease_return)
        if ended.ended_now:
            self.metrics.count(self.metrics.runs_ended, status.value)
        return ended

    async def run_guarded(self, spec: RunSpec, work: Awaitable[Any], timeout_seconds: float) -> Any:
        """Await the run's work as a task a pushed control cancels, for at most `timeout_seconds`; raises
        RunStopped naming the control."""
        run = self.inflight.track(spec)
        try:
            self._raise_if_stopped(run)
        except RunStopped:
            if isinstance(work, Coroutine):
                work.close()  # never started: nothing to cancel (and no "never awaited" warning)
            raise
        task: asyncio.Task[Any] = asyncio.ensure_future(work)
        run.tasks.add(task)
        try:
            return await asyncio.wait_for(task, timeout_seconds)
        except asyncio.CancelledError:
            if run.stopped_by is not None and task.cancelled():
                raise RunStopped(run.stopped_by) from None
            raise
        finally:
            run.tasks.discard(task)
