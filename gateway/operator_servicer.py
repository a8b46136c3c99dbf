"""OperatorService over gRPC: the operators' controls, run-time limits and reads of the gateway; its
requests and answers map through `operator_wire.py`.

Every attempt by the operator role is audited (a change in its own transaction, a read before it
answers), and so is every refused one; the reads a world server makes with the world role (its progress
line polls GetSpend) are not operator actions and are not recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from google.protobuf import json_format, struct_pb2

from egbe.v1 import gateway_pb2, gateway_pb2_grpc
from gateway import operator_wire, wire
from gateway.audit_feed import AuditFeed, AuditWatcher
from gateway.config import TIER_NAMES
from gateway.errors import NothingToResume, status_error
from gateway.read_audit import ReadWindows, wants_windowed
from gateway.records import AuditEntry, Control, ControlAdded, ControlKind, ControlScope
from gateway.retry_stats import roll_up
from gateway.service import CognitionGateway
from services.auth import Principal, RefusalHook, Role, Scope, caller_scope, require_scope
from services.errors import EgbeError, InvalidArgument, PermissionDenied
from services.grpc_types import Context

_OPERATOR = gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name
T = TypeVar("T")
ScopedAnswer = TypeVar("ScopedAnswer", gateway_pb2.PauseResponse, gateway_pb2.QuarantineResponse)
# The role recorded for a refused operator attempt that presented no known token.
UNAUTHENTICATED = "unauthenticated"
# Told the caller's role from the call's metadata (the chassis has authenticated it already).
RoleOf = Callable[[Context], Role]


class OperatorServicer(gateway_pb2_grpc.OperatorServiceServicer):
    """Operator controls, limits and reads; the chassis admits the roles `servicer.METHOD_ROLES` lists."""

    def __init__(self, gateway: CognitionGateway, role_of: RoleOf) -> None:
        self._gateway = gateway
        self._role_of = role_of
        self.audit_feed = AuditFeed(gateway.store)
        self._read_windows = ReadWindows(self._record_read)

    async def _refusals_audited(self, method: str, context: Context, operation: Awaitable[T]) -> T:
        """A change request; one its checks refuse (or a Resume with nothing to lift) is an attempt too,
        audited as refused (naming the RPC, and why) before its error answers. An allowed one the store
        audits with its change."""
        try:
            return await operation
        except (InvalidArgument, NothingToResume) as error:
            refusal = status_error(error) if isinstance(error, NothingToResume) else error
            await self._gateway.record_operator_attempt(
                method,
                role=Role.OPERATOR.value,
                operator_id=operator_wire.operator_id(context),
                allowed=False,
                detail=refusal.message,
            )
            if refusal is error:
                raise
            raise refusal from error

    async def _control(
        self,
        method: str,
        kind: ControlKind,
        target: Callable[[], tuple[ControlScope, str]],
        request: operator_wire.ControlRequest,
        context: Context,
    ) -> ControlAdded:
        """Add a control: `target` gives its scope and target (refusing a bad one); the request its
        reason, world and expiry."""
        # (a world's kill names its world as the target)
        world_id = "" if isinstance(request, gateway_pb2.KillWorldRequest) else request.world_id

        async def add() -> ControlAdded:
            scope, name = target()
            wire.check_texts(wire.ID_CHARS, target=name, world_id=world_id)
            wire.check_texts(wire.TEXT_CHARS, reason=request.reason)
            return await self._gateway.add_control(
                kind,
                scope,
                name,
                world_id=world_id,
                expires_after_ms=operator_wire.expires_after_ms(request),
                reason=request.reason,
                operator_id=operator_wire.operator_id(context),
            )

        return await self._refusals_audited(method, context, add())

    async def _scoped_control(
        self,
        method: str,
        kind: ControlKind,
        request: gateway_pb2.PauseRequest | gateway_pb2.QuarantineRequest,
        context: Context,
        answer: type[ScopedAnswer],
    ) -> ScopedAnswer:
        """A control on the scope and target the request names (Pause, Quarantine), answered alike."""
        added = await self._control(
            method, kind, lambda: (operator_wire.scope(request.scope), request.target), request, context
        )
        return answer(
            control=self._message(added.control),
            existing=added.existing,
            warning=operator_wire.warning(added),
        )

    async def _audited_read(self, method: str, context: Context, detail: str = "") -> None:
        """An operator's read is recorded before it runs (once a window when it asks, `read_audit.py`);
        a world server's is not."""
        if self._role_of(context) is not Role.OPERATOR:
            return
        who = operator_wire.operator_id(context)
        if wants_windowed(context):
            await self._read_windows.read(method, who, detail)
        else:
            await self._record_read(method, who, detail)

    async def _record_read(self, method: str, operator_id: str, detail: str) -> None:
        await self._gateway.record_operator_attempt(
            method, role=Role.OPERATOR.value, operator_id=operator_id, allowed=True, detail=detail
        )

    def _message(self, control: Control) -> gateway_pb2.Control:
        return operator_wire.control_message(control, self._gateway.now_ms())

    async def KillOri(
        self, request: gateway_pb2.KillOriRequest, context: Context
    ) -> gateway_pb2.KillOriResponse:
        added = await self._control(
            "KillOri", ControlKind.KILL, lambda: (ControlScope.ORI, request.ori_id), request, context
        )
        return gateway_pb2.KillOriResponse(
            control=self._message(added.control),
            runs_aborted=added.runs_ended,
            existing=added.existing,
            warning=operator_wire.warning(added),
        )

    async def KillTier(
        self, request: gateway_pb2.KillTierRequest, context: Context
    ) -> gateway_pb2.KillTierResponse:
        added = await self._control(
            "KillTier",
            ControlKind.KILL,
            lambda: (ControlScope.TIER, operator_wire.tier_name(request.tier)),
            request,
            context,
        )
        return gateway_pb2.KillTierResponse(
            control=self._message(added.control), runs_aborted=added.runs_ended, existing=added.existing
        )

    async def KillTenant(
        self, request: gateway_pb2.KillTenantRequest, context: Context
    ) -> gateway_pb2.KillTenantResponse:
        added = await self._control(
            "KillTenant", ControlKind.KILL, lambda: (ControlScope.TENANT, request.tenant_id), request, context
        )
        return gateway_pb2.KillTenantResponse(
            control=self._message(added.control), runs_aborted=added.runs_ended, existing=added.existing
        )

    async def KillWorld(
        self, request: gateway_pb2.KillWorldRequest, context: Context
    ) -> gateway_pb2.KillWorldResponse:
        added = await self._control(
            "KillWorld", ControlKind.KILL, lambda: (ControlScope.WORLD, request.world_id), request, context
        )
        return gateway_pb2.KillWorldResponse(
            control=self._message(added.control),
            runs_aborted=added.runs_ended,
            existing=added.existing,
            warning=operator_wire.warning(added),
        )

    async def Pause(self, request: gateway_pb2.PauseRequest, context: Context) -> gateway_pb2.PauseResponse:
        return await self._scoped_control(
            "Pause", ControlKind.PAUSE, request, context, gateway_pb2.PauseResponse
        )

    async def Resume(
        self, request: gateway_pb2.ResumeRequest, context: Context
    ) -> gateway_pb2.ResumeResponse:
        async def lift() -> list[Control]:
            wire.check_texts(wire.ID_CHARS, target=request.target, world_id=request.world_id)
            wire.check_texts(wire.TEXT_CHARS, reason=request.reason)
            return await self._gateway.lift_controls(
                operator_wire.scope(request.scope),
                request.target,
                world_id=request.world_id,
                reason=request.reason,
                operator_id=operator_wire.operator_id(context),
            )

        lifted = await self._refusals_audited("Resume", context, lift())
        return gateway_pb2.ResumeResponse(lifted=[self._message(c) for c in lifted])

    async def Quarantine(
        self, request: gateway_pb2.QuarantineRequest, context: Context
    ) -> gateway_pb2.QuarantineResponse:
        return await self._scoped_control(
            "Quarantine", ControlKind.QUARANTINE, request, context, gateway_pb2.QuarantineResponse
        )

    async def SetWorldCap(
        self, request: gateway_pb2.SetWorldCapRequest, context: Context
    ) -> gateway_pb2.SetWorldCapResponse:
        async def change() -> int:
            wire.check_texts(wire.ID_CHARS, world_id=request.world_id)
            wire.check_texts(wire.TEXT_CHARS, reason=request.reason)
            return await self._gateway.set_world_cap(
                request.world_id,
                request.tokens_per_hour,
                reason=request.reason,
                operator_id=operator_wire.operator_id(context),
            )

        cap = await self._refusals_audited("SetWorldCap", context, change())
        return gateway_pb2.SetWorldCapResponse(
            world_id=request.world_id, tokens_per_hour=request.tokens_per_hour, world_cap_tokens=cap
        )

    async def SetRunBudget(
        self, request: gateway_pb2.SetRunBudgetRequest, context: Context
    ) -> gateway_pb2.SetRunBudgetResponse:
        def given(name: str) -> int | None:
            return int(getattr(request, name)) if request.HasField(name) else None  # type: ignore[arg-type]

        async def change() -> gateway_pb2.RunBudget:
            wire.check_texts(wire.TEXT_CHARS, reason=request.reason)
            budget = await self._gateway.set_run_budget(
                request.tier,
                max_model_calls=given("max_model_calls"),
                max_tool_calls=given("max_tool_calls"),
                max_tokens=given("max_tokens"),
                reason=request.reason,
                operator_id=operator_wire.operator_id(context),
            )
            return gateway_pb2.RunBudget(
                max_model_calls=budget.max_model_calls,
                max_tool_calls=budget.max_tool_calls,
                max_tokens=budget.max_tokens,
            )

        budget = await self._refusals_audited("SetRunBudget", context, change())
        return gateway_pb2.SetRunBudgetResponse(tier=request.tier, budget=budget)

    async def ListControls(
        self, request: gateway_pb2.ListControlsRequest, context: Context
    ) -> gateway_pb2.ListControlsResponse:
        limit, after = operator_wire.page(request.page_size, request.page_token)
        await self._audited_read("ListControls", context)
        rows = await self._gateway.store.list_controls(
            include_inactive=request.include_inactive,
            after_seq=after,
            limit=limit,
            now_ms=self._gateway.now_ms(),
        )
        scope = caller_scope()
        return gateway_pb2.ListControlsResponse(
            controls=[self._message(c) for _, c in rows if scope.unrestricted or _control_in(scope, c)],
            next_page_token=str(rows[-1][0]) if len(rows) == limit else "",
        )

    async def GetSpend(
        self, request: gateway_pb2.GetSpendRequest, context: Context
    ) -> gateway_pb2.GetSpendResponse:
        wire.check_texts(wire.ID_CHARS, world_id=request.world_id, tenant_id=request.tenant_id)
        require_scope(tenant=request.tenant_id, world=request.world_id)
        await self._audited_read("GetSpend", context, request.world_id)
        window_start_ms = self._gateway.spend_window_start_ms(request.since_unix_ms)
        spend = await self._gateway.store.spend(
            world_id=request.world_id, tenant_id=request.tenant_id, window_start_ms=window_start_ms
        )
        cap = (
            self._gateway.world_cap_tokens(request.world_id)
            if request.world_id
            else spend.world_cap_tokens or self._gateway.world_cap_tokens()
        )
        return operator_wire.spend_response(spend, cap, window_start_ms)

    async def ListWorlds(
        self, request: gateway_pb2.ListWorldsRequest, context: Context
    ) -> gateway_pb2.ListWorldsResponse:
        limit, after = operator_wire.world_page(request.page_size, request.page_token)
        await self._audited_read("ListWorlds", context)
        window_start_ms = self._gateway.spend_window_start_ms(request.since_unix_ms)
        worlds = await self._gateway.store.list_worlds(
            after_world=after, limit=limit, window_start_ms=window_start_ms, now_ms=self._gateway.now_ms()
        )
        now_ms = self._gateway.now_ms()
        scope = caller_scope()
        return gateway_pb2.ListWorldsResponse(
            worlds=[
                operator_wire.world_message(world, self._gateway.world_cap_tokens(world.world_id), now_ms)
                for world in worlds
                if scope.holds_world(world.world_id)
            ],
            next_page_token=operator_wire.world_page_token(worlds, limit),
            window_start_unix_ms=window_start_ms,
        )

    async def ListAuditRecords(
        self, request: gateway_pb2.ListAuditRecordsRequest, context: Context
    ) -> gateway_pb2.ListAuditRecordsResponse:
        limit, after = operator_wire.page(request.page_size, request.page_token)
        wire.check_texts(
            wire.ID_CHARS * 2,
            ori_id=request.ori_id,
            run_id=request.run_id,
            kernel_call_id=request.kernel_call_id,
        )
        wire.check_texts(wire.ID_CHARS, world_id=request.world_id)
        if request.tier and request.tier not in TIER_NAMES:
            raise InvalidArgument.field("tier", "must be unset, CLOTHO, LACHESIS or ATROPOS")
        summary = operator_wire.SUMMARY_VIEWS.get(request.view)
        if summary is None:
            raise InvalidArgument.field("view", "must be unset, SUMMARY or FULL")
        await self._audited_read("ListAuditRecords", context)
        entries = await self._gateway.store.list_audit(
            ori_id=request.ori_id,
            tier=request.tier,
            run_id=request.run_id,
            kernel_call_id=request.kernel_call_id,
            world_id=request.world_id,
            after_seq=after,
            limit=limit,
            summary=summary,
        )
        return gateway_pb2.ListAuditRecordsResponse(
            records=[operator_wire.audit_message(e, summary=summary) for e in entries],
            next_page_token=str(entries[-1].seq) if len(entries) == limit else "",
        )

    async def WatchAudit(
        self, request: gateway_pb2.WatchAuditRequest, context: Context
    ) -> AsyncIterator[gateway_pb2.WatchAuditResponse]:
        """At once the records already written after the start (or an empty message: the watch is
        established), then each batch the feed reads, or with `min_interval_ms` what came in each
        interval; a watcher that lagged reads on from the store where it was and watches again. Leaving
        (the stream ends, is cancelled or its deadline passes) drops its queue."""
        start = operator_wire.watch_start(request)
        wire.check_texts(wire.ID_CHARS, world_id=request.world_id)
        await self._audited_read("WatchAudit", context, request.world_id)
        feed, store, world = self.audit_feed, self._gateway.store, request.world_id
        cursor, newest, lagged, opened = start.after_seq, start.newest, False, False
        while True:
            watcher = await feed.watch(world, start.interval_seconds)
            try:
                if newest:  # the newest few, then on from the last of them
                    latest = await store.list_audit(world_id=world, limit=newest, summary=True, newest=True)
                    cursor, newest = (latest[-1].seq if latest else cursor), 0
                    if latest:
                        yield start.message(latest, lagged=False, seq=cursor)
                        opened = True
                while backlog := await store.list_audit(
                    world_id=world, after_seq=cursor, limit=operator_wire.MAX_PAGE_SIZE, summary=True
                ):
                    cursor = backlog[-1].seq
                    yield start.message(backlog, lagged=lagged, seq=cursor)
                    lagged, opened = False, True
                if not opened:
                    yield start.message([], lagged=False, seq=cursor)
                    opened = True
                sent_at = time.monotonic()
                while not watcher.lagged:  # (a lagged watcher's queue is full: get() does not wait)
                    fresh = [
                        e
                        for e in await _gathered(watcher, sent_at + start.interval_seconds)
                        if e.seq > cursor
                    ]
                    if fresh:
                        cursor = fresh[-1].seq
                        yield start.message(fresh, lagged=lagged, seq=cursor)
                        lagged, sent_at = False, time.monotonic()
                lagged = True
            finally:
                feed.leave(watcher)

    async def GetRetryStats(
        self, request: gateway_pb2.GetRetryStatsRequest, context: Context
    ) -> gateway_pb2.GetRetryStatsResponse:
        await self._audited_read("GetRetryStats", context)
        runs = await self._gateway.store.recent_run_stats(
            limit=request.limit or self._gateway.config.retry_stats_window
        )
        stats = struct_pb2.Struct()
        json_format.ParseDict(roll_up(runs), stats)
        return gateway_pb2.GetRetryStatsResponse(stats=stats)

    async def ListOperatorAttempts(
        self, request: gateway_pb2.ListOperatorAttemptsRequest, context: Context
    ) -> gateway_pb2.ListOperatorAttemptsResponse:
        limit, after = operator_wire.page(request.page_size, request.page_token)
        wire.check_texts(wire.ID_CHARS, method=request.method, operator_id=request.operator_id)
        if request.decision not in operator_wire.DECISIONS:
            raise InvalidArgument.field("decision", "must be unset, ALLOWED or REFUSED")
        # This read is itself an attempt: recorded first, so a page can show the read that served it.
        await self._audited_read("ListOperatorAttempts", context)
        attempts = await self._gateway.store.list_operator_attempts(
            limit=limit,
            after_seq=after,
            allowed=operator_wire.DECISIONS[request.decision],
            method=request.method,
            operator_id=request.operator_id,
        )
        return gateway_pb2.ListOperatorAttemptsResponse(
            attempts=[operator_wire.attempt_message(a) for a in attempts],
            next_page_token=str(attempts[-1].seq) if len(attempts) == limit else "",
        )


async def _gathered(watcher: AuditWatcher, not_before: float) -> list[AuditEntry]:
    """The watcher's next batch, and (waiting until `not_before` first) every batch queued behind it."""
    entries = await watcher.batches.get()
    wait = not_before - time.monotonic()
    if wait > 0:
        await asyncio.sleep(wait)
    while not watcher.batches.empty():
        entries = entries + watcher.batches.get_nowait()
    return entries


def _control_in(scope: Scope, control: Control) -> bool:
    """Whether a scoped world token sees this control: one that applies in its worlds (or in every
    world), and names none of another tenant's or world's."""
    if control.scope is ControlScope.TENANT and not scope.holds_tenant(control.target):
        return False
    if control.scope is ControlScope.WORLD and not scope.holds_world(control.target):
        return False
    return not control.world_id or scope.holds_world(control.world_id)


# Refused attempts are recorded one row each up to this many per caller (its role and token id, or
# `unauthenticated`, and the host it called from) in a window; the rest of the window's are counted and
# written as one row when it ends.
REFUSED_ROWS_PER_WINDOW = 10
REFUSAL_WINDOW_SECONDS = 60.0
# Callers kept apart at once; refusals from any further caller share one window (host "other hosts"),
# so a flood from many hosts writes at most this many windows' rows.
MAX_CALLERS = 32
OTHER_HOSTS = "other hosts"
AGGREGATE_METHOD = "AGGREGATE:REFUSED"


class _Window:
    """One caller's refusals in the current window: rows written, and the rest counted by method."""

    __slots__ = ("counted", "started", "written")

    def __init__(self, started: float) -> None:
        self.started = started
        self.written = 0
        self.counted: Counter[str] = Counter()


Caller = tuple[str, str, str]  # role, token id, host


def peer_host(peer: str) -> str:
    """A gRPC peer address without its port ("ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7")."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6") and ":" in address:
        return f"{kind}:{address.rsplit(':', 1)[0]}"
    return peer


class RefusalAudit:
    """Records refused attempts (no token or a wrong role on OperatorService; a known token refused
    anywhere on the gateway, for its role or its scope); the chassis calls it before answering.

    A caller with a known token is recorded by its role and token id (never the token); one without is
    recorded as `unauthenticated`; each row names the host the call came from. A flood of refusals
    must not flood the audit: each caller (role, token, host) gets at most `REFUSED_ROWS_PER_WINDOW`
    rows per `REFUSAL_WINDOW_SECONDS`, and the refusals past that are counted and written as one
    `AGGREGATE:REFUSED` row when the window ends (its detail: how many, by RPC). At most `MAX_CALLERS`
    windows are open at once; a caller past them shares the `other hosts` window of its token."""

    def __init__(self, gateway: CognitionGateway, clock: Callable[[], float] = time.monotonic) -> None:
        self._gateway = gateway
        self._clock = clock
        self._rows = REFUSED_ROWS_PER_WINDOW
        self._seconds = REFUSAL_WINDOW_SECONDS
        self._windows: dict[Caller, _Window] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, method: str, error: EgbeError, principal: Principal | None, peer: str) -> None:
        if not (
            method.startswith(f"/{_OPERATOR}/")
            or (principal is not None and isinstance(error, PermissionDenied))
        ):
            return
        role, token_id = (principal.role.value, principal.token_id) if principal else (UNAUTHENTICATED, "")
        now = self._clock()
        caller = self._caller((role, token_id, peer_host(peer)), now)
        window = self._windows.get(caller)
        if window is None or now - window.started >= self._seconds:
            window = self._windows[caller] = _Window(now)
        name = method.rsplit("/", 1)[-1]
        if window.written < self._rows:
            window.written += 1
            self._record(caller, name, error.message)
            return
        if not window.counted:
            delay = window.started + self._seconds - now
            asyncio.get_running_loop().call_later(delay, self._aggregate, caller, window)
        window.counted[name] += 1

    def _caller(self, caller: Caller, now: float) -> Caller:
        """The window key of `caller`: its own while fewer than `MAX_CALLERS` windows are open (ended
        windows are dropped first; a pending count keeps its own reference), else `other hosts`."""
        if caller in self._windows or len(self._windows) < MAX_CALLERS:
            return caller
        for key in [k for k, w in self._windows.items() if now - w.started >= self._seconds]:
            del self._windows[key]
        return caller if len(self._windows) < MAX_CALLERS else (caller[0], caller[1], OTHER_HOSTS)

    def _aggregate(self, caller: Caller, window: _Window) -> None:
        """The window's refusals past its rows, as one row."""
        if self._windows.get(caller) is window:
            del self._windows[caller]
        by_method = ", ".join(f"{name} x{count}" for name, count in sorted(window.counted.items()))
        total = window.counted.total()
        detail = (
            f"{total} more refused attempts within {self._seconds:g} s, counted and not recorded one by one"
            f" (at most {self._rows} rows per caller): {by_method}"
        )
        self._record(caller, AGGREGATE_METHOD, detail)

    def _record(self, caller: Caller, method: str, detail: str) -> None:
        role, token_id, host = caller
        task = asyncio.get_running_loop().create_task(
            self._gateway.record_operator_attempt(
                method, role=role, operator_id=token_id, allowed=False, detail=f"{detail} (from {host})"
            )
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def refusal_auditor(gateway: CognitionGateway) -> RefusalHook:
    """The chassis's `on_refused` hook of a gateway: its refused attempts, bounded (`RefusalAudit`)."""
    return RefusalAudit(gateway)
