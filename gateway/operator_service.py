"""OperatorService over gRPC: the operators' controls, run-time limits and reads of the gateway.

Every attempt by the operator role is audited (a change in its own transaction, a read before it
answers), and so is every refused one; the reads a world server makes with the world role (its progress
line polls GetSpend) are not operator actions and are not recorded.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import TypeVar

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from egbe.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc
from gateway.admission import CognitionGateway
from gateway.config import TIER_NAMES
from gateway.records import AuditEntry, Control, ControlAdded, ControlKind, ControlScope, OperatorAttempt
from gateway.retry_stats import roll_up
from gateway.servicer import ID_CHARS, TEXT_CHARS, check_texts
from gateway.store.limits import WorldLedger
from services.auth import Principal, Role
from services.errors import EgbeError, InvalidArgument, NotFound
from services.grpc_types import Context

_OPERATOR = gateway_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name
T = TypeVar("T")
# Operators name themselves in this metadata key (the CLI sends $USER); the audit records it.
OPERATOR_ID_METADATA = "x-egbe-operator"
# The role recorded for a refused operator attempt that presented no known token.
UNAUTHENTICATED = "unauthenticated"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1_000
_SCOPES = "ORI, TIER, TENANT or WORLD"
# Told the caller's role from the call's metadata (the chassis has authenticated it already).
RoleOf = Callable[[Context], Role]
ControlRequest = (
    gateway_pb2.KillOriRequest
    | gateway_pb2.KillTierRequest
    | gateway_pb2.KillTenantRequest
    | gateway_pb2.KillWorldRequest
    | gateway_pb2.PauseRequest
    | gateway_pb2.QuarantineRequest
)


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def control_message(control: Control, now_ms: int) -> gateway_pb2.Control:
    message = gateway_pb2.Control(
        control_id=control.control_id,
        kind=int(control.kind),  # type: ignore[arg-type]
        scope=int(control.scope),  # type: ignore[arg-type]
        target=control.target,
        reason=control.reason,
        operator_id=control.operator_id,
        created_at=_timestamp(control.created_at_ms),
        active=control.applies(now_ms),
        world_id=control.world_id,
        expired=control.expired(now_ms),
    )
    if control.expires_at_ms:
        message.expires_at.CopyFrom(_timestamp(control.expires_at_ms))
    return message


def audit_message(entry: AuditEntry) -> gateway_pb2.AuditRecord:
    context = struct_pb2.Struct()
    json_format.ParseDict(entry.input_context, context)
    return gateway_pb2.AuditRecord(
        call_id=entry.call_id,
        run_id=entry.run_id,
        ori=common_pb2.OriRef(tenant_id=entry.tenant_id, world_id=entry.world_id, ori_id=entry.ori_id),
        tier=entry.tier,  # type: ignore[arg-type]
        cause=entry.cause,
        model_ref=entry.model_ref,
        model_class=entry.model_class,
        input_context=context,
        output=entry.output,
        usage=common_pb2.TokenUsage(
            input_tokens=entry.usage.input_tokens,
            output_tokens=entry.usage.output_tokens,
            cache_read_tokens=entry.usage.cache_read_tokens,
            cache_write_tokens=entry.usage.cache_write_tokens,
        ),
        cost=common_pb2.CostMicroUsd(micro_usd=entry.micro_usd, estimated=entry.cost_estimated),
        policy_decision=entry.policy_decision,
        retention_policy_id=entry.retention_policy_id,
        config_fingerprint=common_pb2.ConfigFingerprint(fnv1a64=entry.config_fingerprint, scope="gateway"),
        offline=entry.offline,
        recorded_at=_timestamp(entry.recorded_at_ms),
        kernel_call_id=entry.kernel_call_id,
        error_class=entry.error_class,
        model_latency_us=entry.model_latency_us,
    )


def attempt_message(attempt: OperatorAttempt) -> gateway_pb2.OperatorAttempt:
    return gateway_pb2.OperatorAttempt(
        seq=attempt.seq,
        method=attempt.method,
        role=attempt.role,
        operator_id=attempt.operator_id,
        allowed=attempt.allowed,
        detail=attempt.detail,
        recorded_at=_timestamp(attempt.recorded_at_ms),
    )


def _page(page_size: int, page_token: str) -> tuple[int, int]:
    """(limit, after_seq) from a page size and an opaque token (the last sequence number served)."""
    if page_size < 0:
        raise InvalidArgument.field("page_size", "must be >= 0")
    try:
        after = int(page_token) if page_token else 0
    except ValueError:
        after = -1
    if not 0 <= after < 2**63:
        raise InvalidArgument.field("page_token", "is not a token this service issued")
    return min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE), after


def _world_page(page_size: int, page_token: str) -> tuple[int, str]:
    """(limit, after_world) from a page size and an opaque token (the last world served, encoded)."""
    limit, _ = _page(page_size, "")
    try:
        after = base64.urlsafe_b64decode(page_token.encode()).decode() if page_token else ""
    except (binascii.Error, UnicodeError, ValueError):
        raise InvalidArgument.field("page_token", "is not a token this service issued") from None
    return limit, after


def _operator_id(context: Context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == OPERATOR_ID_METADATA and isinstance(value, str) and value:
            return value[:128]
    return "operator"


def _scope(value: int) -> ControlScope:
    try:
        return ControlScope(value)
    except ValueError:
        raise InvalidArgument.field("scope", f"must be {_SCOPES}") from None


def _tier_name(tier: int) -> str:
    if tier not in TIER_NAMES:
        raise InvalidArgument.field("tier", "must be CLOTHO, LACHESIS or ATROPOS")
    return TIER_NAMES[tier]


def _expires_after_ms(request: ControlRequest) -> int:
    """A request's `expires_after` in ms (0: unset, never expires); a set one must be positive."""
    if not request.HasField("expires_after"):
        return 0
    duration = request.expires_after
    ms = duration.seconds * 1000 + duration.nanos // 1_000_000
    if ms <= 0:
        raise InvalidArgument.field("expires_after", "must be a positive duration (unset: never expires)")
    return ms


def _warning(added: ControlAdded) -> str:
    """Why the answer warns: the control names an Ori or a world no run of which was ever seen."""
    control = added.control
    if added.seen:
        return ""
    if control.scope is ControlScope.WORLD:
        return f"no run of world {control.target!r} has been seen by this gateway; check the id"
    where = f" in world {control.world_id!r}" if control.world_id else ""
    return f"no run of Ori {control.target!r}{where} has been seen by this gateway; check the id"


class OperatorServicer(gateway_pb2_grpc.OperatorServiceServicer):
    """Operator controls, limits and reads; the chassis admits the roles `servicer.METHOD_ROLES` lists."""

    def __init__(self, gateway: CognitionGateway, role_of: RoleOf) -> None:
        self._gateway = gateway
        self._role_of = role_of

    async def _refusals_audited(self, method: str, context: Context, operation: Awaitable[T]) -> T:
        """A change request; one its checks refuse (or a Resume with nothing to lift) is an attempt too,
        audited as refused (naming the RPC, and why) before its error answers. An allowed one the store
        audits with its change."""
        try:
            return await operation
        except (InvalidArgument, NotFound) as error:
            await self._gateway.record_operator_attempt(
                method,
                role=Role.OPERATOR.value,
                operator_id=_operator_id(context),
                allowed=False,
                detail=error.message,
            )
            raise

    async def _control(
        self,
        method: str,
        kind: ControlKind,
        target: Callable[[], tuple[ControlScope, str]],
        request: gateway_pb2.KillOriRequest
        | gateway_pb2.KillTierRequest
        | gateway_pb2.KillTenantRequest
        | gateway_pb2.KillWorldRequest
        | gateway_pb2.PauseRequest
        | gateway_pb2.QuarantineRequest,
        context: Context,
    ) -> ControlAdded:
        """Add a control: `target` gives its scope and target (refusing a bad one); the request its
        reason, world and expiry."""
        world_id = (
            getattr(request, "world_id", "") if not isinstance(request, gateway_pb2.KillWorldRequest) else ""
        )

        async def add() -> ControlAdded:
            scope, name = target()
            check_texts(ID_CHARS, target=name, world_id=world_id)
            check_texts(TEXT_CHARS, reason=request.reason)
            return await self._gateway.add_control(
                kind,
                scope,
                name,
                world_id=world_id,
                expires_after_ms=_expires_after_ms(request),
                reason=request.reason,
                operator_id=_operator_id(context),
            )

        return await self._refusals_audited(method, context, add())

    async def _audited_read(self, method: str, context: Context, detail: str = "") -> None:
        """An operator's read is recorded before it runs; a world server's is not."""
        if self._role_of(context) is not Role.OPERATOR:
            return
        await self._gateway.record_operator_attempt(
            method, role=Role.OPERATOR.value, operator_id=_operator_id(context), allowed=True, detail=detail
        )

    def _message(self, control: Control) -> gateway_pb2.Control:
        return control_message(control, self._gateway.now_ms())

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
            warning=_warning(added),
        )

    async def KillTier(
        self, request: gateway_pb2.KillTierRequest, context: Context
    ) -> gateway_pb2.KillTierResponse:
        added = await self._control(
            "KillTier",
            ControlKind.KILL,
            lambda: (ControlScope.TIER, _tier_name(request.tier)),
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
            warning=_warning(added),
        )

    async def Pause(self, request: gateway_pb2.PauseRequest, context: Context) -> gateway_pb2.PauseResponse:
        added = await self._control(
            "Pause", ControlKind.PAUSE, lambda: (_scope(request.scope), request.target), request, context
        )
        return gateway_pb2.PauseResponse(
            control=self._message(added.control), existing=added.existing, warning=_warning(added)
        )

    async def Resume(
        self, request: gateway_pb2.ResumeRequest, context: Context
    ) -> gateway_pb2.ResumeResponse:
        async def lift() -> list[Control]:
            check_texts(ID_CHARS, target=request.target, world_id=request.world_id)
            check_texts(TEXT_CHARS, reason=request.reason)
            return await self._gateway.lift_controls(
                _scope(request.scope),
                request.target,
                world_id=request.world_id,
                reason=request.reason,
                operator_id=_operator_id(context),
            )

        lifted = await self._refusals_audited("Resume", context, lift())
        return gateway_pb2.ResumeResponse(lifted=[self._message(c) for c in lifted])

    async def Quarantine(
        self, request: gateway_pb2.QuarantineRequest, context: Context
    ) -> gateway_pb2.QuarantineResponse:
        added = await self._control(
            "Quarantine",
            ControlKind.QUARANTINE,
            lambda: (_scope(request.scope), request.target),
            request,
            context,
        )
        return gateway_pb2.QuarantineResponse(
            control=self._message(added.control), existing=added.existing, warning=_warning(added)
        )

    async def SetWorldCap(
        self, request: gateway_pb2.SetWorldCapRequest, context: Context
    ) -> gateway_pb2.SetWorldCapResponse:
        async def change() -> int:
            check_texts(ID_CHARS, world_id=request.world_id)
            check_texts(TEXT_CHARS, reason=request.reason)
            return await self._gateway.set_world_cap(
                request.world_id,
                request.tokens_per_hour,
                reason=request.reason,
                operator_id=_operator_id(context),
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
            check_texts(TEXT_CHARS, reason=request.reason)
            budget = await self._gateway.set_run_budget(
                request.tier,
                max_model_calls=given("max_model_calls"),
                max_tool_calls=given("max_tool_calls"),
                max_tokens=given("max_tokens"),
                reason=request.reason,
                operator_id=_operator_id(context),
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
        limit, after = _page(request.page_size, request.page_token)
        await self._audited_read("ListControls", context)
        rows = await self._gateway.store.list_controls(
            include_inactive=request.include_inactive,
            after_seq=after,
            limit=limit,
            now_ms=self._gateway.now_ms(),
        )
        return gateway_pb2.ListControlsResponse(
            controls=[self._message(c) for _, c in rows],
            next_page_token=str(rows[-1][0]) if len(rows) == limit else "",
        )

    async def GetSpend(
        self, request: gateway_pb2.GetSpendRequest, context: Context
    ) -> gateway_pb2.GetSpendResponse:
        check_texts(ID_CHARS, world_id=request.world_id, tenant_id=request.tenant_id)
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
        return gateway_pb2.GetSpendResponse(
            world_cap_tokens=cap,
            reserved_tokens=spend.reserved_tokens,
            consumed_tokens=spend.consumed_tokens,
            consumed_micro_usd=spend.consumed_micro_usd,
            by_tier=[
                gateway_pb2.TierSpend(tier=t.tier, tokens=t.tokens, micro_usd=t.micro_usd, calls=t.calls)  # type: ignore[arg-type]
                for t in spend.by_tier
            ],
            admissions=spend.admissions,
            blocked_by_world_cap=spend.blocked_by_world_cap,
            killed=spend.killed,
            killed_in_flight=spend.killed_in_flight,
            window_start_unix_ms=window_start_ms,
        )

    async def ListWorlds(
        self, request: gateway_pb2.ListWorldsRequest, context: Context
    ) -> gateway_pb2.ListWorldsResponse:
        limit, after = _world_page(request.page_size, request.page_token)
        await self._audited_read("ListWorlds", context)
        window_start_ms = self._gateway.spend_window_start_ms(request.since_unix_ms)
        worlds = await self._gateway.store.list_worlds(
            after_world=after, limit=limit, window_start_ms=window_start_ms, now_ms=self._gateway.now_ms()
        )
        last = base64.urlsafe_b64encode(worlds[-1].world_id.encode()).decode() if worlds else ""
        return gateway_pb2.ListWorldsResponse(
            worlds=[self._world(world) for world in worlds],
            next_page_token=last if len(worlds) == limit else "",
            window_start_unix_ms=window_start_ms,
        )

    def _world(self, world: WorldLedger) -> gateway_pb2.WorldSpend:
        return gateway_pb2.WorldSpend(
            world_id=world.world_id,
            world_cap_tokens=self._gateway.world_cap_tokens(world.world_id),
            reserved_tokens=world.reserved_tokens,
            consumed_tokens=world.consumed_tokens,
            consumed_micro_usd=world.consumed_micro_usd,
            calls=world.calls,
            admissions=world.admissions,
            blocked_by_world_cap=world.blocked_by_world_cap,
            killed=world.killed,
            active_controls=[self._message(control) for control in world.controls],
        )

    async def ListAuditRecords(
        self, request: gateway_pb2.ListAuditRecordsRequest, context: Context
    ) -> gateway_pb2.ListAuditRecordsResponse:
        limit, after = _page(request.page_size, request.page_token)
        check_texts(
            ID_CHARS * 2, ori_id=request.ori_id, run_id=request.run_id, kernel_call_id=request.kernel_call_id
        )
        if request.tier and request.tier not in TIER_NAMES:
            raise InvalidArgument.field("tier", "must be unset, CLOTHO, LACHESIS or ATROPOS")
        await self._audited_read("ListAuditRecords", context)
        entries = await self._gateway.store.list_audit(
            ori_id=request.ori_id,
            tier=request.tier,
            run_id=request.run_id,
            kernel_call_id=request.kernel_call_id,
            after_seq=after,
            limit=limit,
        )
        return gateway_pb2.ListAuditRecordsResponse(
            records=[audit_message(e) for e in entries],
            next_page_token=str(entries[-1].seq) if len(entries) == limit else "",
        )

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
        limit, after = _page(request.page_size, request.page_token)
        check_texts(ID_CHARS, method=request.method, operator_id=request.operator_id)
        if request.decision not in _DECISIONS:
            raise InvalidArgument.field("decision", "must be unset, ALLOWED or REFUSED")
        # This read is itself an attempt: recorded first, so a page can show the read that served it.
        await self._audited_read("ListOperatorAttempts", context)
        attempts = await self._gateway.store.list_operator_attempts(
            limit=limit,
            after_seq=after,
            allowed=_DECISIONS[request.decision],
            method=request.method,
            operator_id=request.operator_id,
        )
        return gateway_pb2.ListOperatorAttemptsResponse(
            attempts=[attempt_message(a) for a in attempts],
            next_page_token=str(attempts[-1].seq) if len(attempts) == limit else "",
        )


_DECISIONS: dict[int, bool | None] = {
    gateway_pb2.OPERATOR_ATTEMPT_DECISION_UNSPECIFIED: None,
    gateway_pb2.OPERATOR_ATTEMPT_DECISION_ALLOWED: True,
    gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED: False,
}


def refusal_auditor(gateway: CognitionGateway) -> Callable[[str, EgbeError, Principal | None], None]:
    """Records refused operator attempts (wrong role, no token); the chassis calls it before answering.

    A caller with a known token is recorded by its role and token id (never the token); one without
    is recorded as `unauthenticated`."""
    tasks: set[asyncio.Task[None]] = set()

    def audit(method: str, error: EgbeError, principal: Principal | None) -> None:
        if not method.startswith(f"/{_OPERATOR}/"):
            return
        role, token_id = (principal.role.value, principal.token_id) if principal else (UNAUTHENTICATED, "")
        task = asyncio.get_running_loop().create_task(
            gateway.record_operator_attempt(
                method.rsplit("/", 1)[-1],
                role=role,
                operator_id=token_id,
                allowed=False,
                detail=error.message,
            )
        )
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return audit
