"""Every mapping between the OperatorService's messages and the gateway's domain: pages and their
tokens, control targets and expiries, and controls, audit records, attempts and spend as messages."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from egbe.v1 import common_pb2, gateway_pb2
from gateway.config import TIER_NAMES
from gateway.records import AuditEntry, Control, ControlAdded, ControlScope, OperatorAttempt, Spend
from gateway.store.limits import WorldLedger
from gateway.wire import usage_message
from services.errors import InvalidArgument
from services.grpc_types import Context

# Operators name themselves in this metadata key (the CLI sends $USER); the audit records it.
OPERATOR_ID_METADATA = "x-egbe-operator"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1_000
_SCOPES = "ORI, TIER, TENANT or WORLD"
ControlRequest = (
    gateway_pb2.KillOriRequest
    | gateway_pb2.KillTierRequest
    | gateway_pb2.KillTenantRequest
    | gateway_pb2.KillWorldRequest
    | gateway_pb2.PauseRequest
    | gateway_pb2.QuarantineRequest
)


def timestamp(ms: int) -> timestamp_pb2.Timestamp:
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
        created_at=timestamp(control.created_at_ms),
        active=control.applies(now_ms),
        world_id=control.world_id,
        expired=control.expired(now_ms),
    )
    if control.expires_at_ms:
        message.expires_at.CopyFrom(timestamp(control.expires_at_ms))
    return message


def audit_message(entry: AuditEntry, *, summary: bool = False) -> gateway_pb2.AuditRecord:
    """A record as a message; `summary`: without its context and output (the summary view)."""
    context = None
    if not summary:
        context = struct_pb2.Struct()
        json_format.ParseDict(entry.input_context, context)
    return gateway_pb2.AuditRecord(
        seq=entry.seq,
        call_id=entry.call_id,
        run_id=entry.run_id,
        ori=common_pb2.OriRef(tenant_id=entry.tenant_id, world_id=entry.world_id, ori_id=entry.ori_id),
        tier=entry.tier,  # type: ignore[arg-type]
        cause=entry.cause,
        model_ref=entry.model_ref,
        model_class=entry.model_class,
        input_context=context,
        output="" if summary else entry.output,
        utterance=utterance(entry.output),
        usage=usage_message(entry.usage),
        cost=common_pb2.CostMicroUsd(micro_usd=entry.micro_usd, estimated=entry.cost_estimated),
        policy_decision=entry.policy_decision,
        retention_policy_id=entry.retention_policy_id,
        config_fingerprint=common_pb2.ConfigFingerprint(fnv1a64=entry.config_fingerprint, scope="gateway"),
        offline=entry.offline,
        recorded_at=timestamp(entry.recorded_at_ms),
        kernel_call_id=entry.kernel_call_id,
        error_class=entry.error_class,
        model_latency_us=entry.model_latency_us,
    )


def utterance(output: str) -> str:
    """What the Ori said, when the output is a dialogue reply (its `utterance`); else empty."""
    if '"utterance"' not in output:
        return ""
    try:
        reply = json.loads(output)
    except ValueError:
        return ""
    said = reply.get("utterance") if isinstance(reply, dict) else None
    return said if isinstance(said, str) else ""


def attempt_message(attempt: OperatorAttempt) -> gateway_pb2.OperatorAttempt:
    return gateway_pb2.OperatorAttempt(
        seq=attempt.seq,
        method=attempt.method,
        role=attempt.role,
        operator_id=attempt.operator_id,
        allowed=attempt.allowed,
        detail=attempt.detail,
        recorded_at=timestamp(attempt.recorded_at_ms),
    )


def page(page_size: int, page_token: str) -> tuple[int, int]:
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


def world_page(page_size: int, page_token: str) -> tuple[int, str]:
    """(limit, after_world) from a page size and an opaque token (the last world served, encoded)."""
    limit, _ = page(page_size, "")
    try:
        after = base64.urlsafe_b64decode(page_token.encode()).decode() if page_token else ""
    except (binascii.Error, UnicodeError, ValueError):
        raise InvalidArgument.field("page_token", "is not a token this service issued") from None
    return limit, after


def operator_id(context: Context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == OPERATOR_ID_METADATA and isinstance(value, str) and value:
            return value[:128]
    return "operator"


def scope(value: int) -> ControlScope:
    try:
        return ControlScope(value)
    except ValueError:
        raise InvalidArgument.field("scope", f"must be {_SCOPES}") from None


def tier_name(tier: int) -> str:
    if tier not in TIER_NAMES:
        raise InvalidArgument.field("tier", "must be CLOTHO, LACHESIS or ATROPOS")
    return TIER_NAMES[tier]


def expires_after_ms(request: ControlRequest) -> int:
    """A request's `expires_after` in ms (0: unset, never expires); a set one must be positive."""
    if not request.HasField("expires_after"):
        return 0
    duration = request.expires_after
    ms = duration.seconds * 1000 + duration.nanos // 1_000_000
    if ms <= 0:
        raise InvalidArgument.field("expires_after", "must be a positive duration (unset: never expires)")
    return ms


def warning(added: ControlAdded) -> str:
    """Why the answer warns: the control names an Ori or a world no run of which was ever seen."""
    control = added.control
    if added.seen:
        return ""
    if control.scope is ControlScope.WORLD:
        return f"no run of world {control.target!r} has been seen by this gateway; check the id"
    where = f" in world {control.world_id!r}" if control.world_id else ""
    return f"no run of Ori {control.target!r}{where} has been seen by this gateway; check the id"


# Whether a view of audit records is the summary (True) or the full record (False).
SUMMARY_VIEWS: dict[int, bool] = {
    gateway_pb2.AUDIT_RECORD_VIEW_UNSPECIFIED: False,
    gateway_pb2.AUDIT_RECORD_VIEW_SUMMARY: True,
    gateway_pb2.AUDIT_RECORD_VIEW_FULL: False,
}


MAX_WATCH_INTERVAL_MS = 10_000  # (well inside what a watcher's queue holds: `audit_feed`)


@dataclass(frozen=True)
class WatchStart:
    """A WatchAudit request, checked: where it starts and how its messages are shaped."""

    after_seq: int
    newest: int
    max_records: int  # 0: every record
    interval_seconds: float

    def message(self, entries: list[AuditEntry], *, lagged: bool, seq: int) -> gateway_pb2.WatchAuditResponse:
        """The records after the last message, at most `max_records` (the newest) in the summary view;
        `seq` is where the watch has reached."""
        sent = entries[-self.max_records :] if self.max_records else entries
        return gateway_pb2.WatchAuditResponse(
            records=[audit_message(e, summary=True) for e in sent],
            lagged=lagged,
            skipped=len(entries) - len(sent),
            seq=seq,
        )


def watch_start(request: gateway_pb2.WatchAuditRequest) -> WatchStart:
    """A WatchAudit request's start and shape, each field checked."""
    if request.after_seq < 0:
        raise InvalidArgument.field("after_seq", "must be >= 0")
    if not 0 <= request.newest <= MAX_PAGE_SIZE:
        raise InvalidArgument.field("newest", f"must be 0 (unset) to {MAX_PAGE_SIZE}")
    if request.newest and request.after_seq:
        raise InvalidArgument.field("newest", "must be unset when after_seq is given")
    if not 0 <= request.max_records <= MAX_PAGE_SIZE:
        raise InvalidArgument.field("max_records", f"must be 0 (every record) to {MAX_PAGE_SIZE}")
    if not 0 <= request.min_interval_ms <= MAX_WATCH_INTERVAL_MS:
        raise InvalidArgument.field("min_interval_ms", f"must be 0 to {MAX_WATCH_INTERVAL_MS}")
    return WatchStart(request.after_seq, request.newest, request.max_records, request.min_interval_ms / 1000)


DECISIONS: dict[int, bool | None] = {
    gateway_pb2.OPERATOR_ATTEMPT_DECISION_UNSPECIFIED: None,
    gateway_pb2.OPERATOR_ATTEMPT_DECISION_ALLOWED: True,
    gateway_pb2.OPERATOR_ATTEMPT_DECISION_REFUSED: False,
}


def spend_response(spend: Spend, cap: int, window_start_ms: int) -> gateway_pb2.GetSpendResponse:
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


def world_message(world: WorldLedger, cap: int, now_ms: int) -> gateway_pb2.WorldSpend:
    return gateway_pb2.WorldSpend(
        world_id=world.world_id,
        world_cap_tokens=cap,
        reserved_tokens=world.reserved_tokens,
        consumed_tokens=world.consumed_tokens,
        consumed_micro_usd=world.consumed_micro_usd,
        calls=world.calls,
        admissions=world.admissions,
        blocked_by_world_cap=world.blocked_by_world_cap,
        killed=world.killed,
        active_controls=[control_message(control, now_ms) for control in world.controls],
    )


def world_page_token(worlds: list[WorldLedger], limit: int) -> str:
    """The token of the page after these worlds ('' when this page is the last)."""
    last = base64.urlsafe_b64encode(worlds[-1].world_id.encode()).decode() if worlds else ""
    return last if len(worlds) == limit else ""
