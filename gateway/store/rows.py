"""The store's rows: the tables' columns, and each row to and from the records the domain uses.

A run's row carries its spec, its counters and how it ended; an admission decision waits for the writer
as an `AdmissionItem`, which is also the row it inserts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.cost import Usage
from gateway.records import AuditEntry, Control, ControlKind, ControlScope, RunSpec, RunStatus
from gateway.store.tx import Row

RUN_COLUMNS = (
    "run_id, tenant_id, world_id, ori_id, tier, cause, max_model_calls, max_tool_calls, reserved_tokens,"
    " request_id, status, used_tokens, model_calls, tool_calls, window_start_ms, detail, kernel_call_id,"
    " tool_grants, lease_holder, released_tokens"
)
CONTROL_COLUMNS = (
    "control_id, kind, scope, target, reason, operator_id, created_at_ms, active, world_id, expires_at_ms"
)
# An active control that still applies at a time (the parameter, Unix ms).
APPLIES = "active = 1 AND (expires_at_ms = 0 OR expires_at_ms > ?)"
AUDIT_COLUMNS = (
    "call_id, run_id, tenant_id, world_id, ori_id, tier, cause, model_ref, model_class, input_context,"
    " output, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, micro_usd,"
    " cost_estimated, policy_decision, retention_policy_id, config_fingerprint, offline, recorded_at_ms,"
    " kernel_call_id, error_class, model_latency_us"
)

# The audit columns without the bulk of a record (its context, read as empty): the summary view, which
# keeps the output only to give what an Ori said (`operator_wire.utterance`).
AUDIT_SUMMARY_COLUMNS = AUDIT_COLUMNS.replace("input_context,", "'{}',")

# Where `audit_row` and `AdmissionItem.row` go (`insert_rows`, `Statements.insert`).
AUDIT_TABLE = ("gateway_audit", tuple(AUDIT_COLUMNS.split(", ")))
RUN_TABLE = (
    "gateway_runs",
    (
        "run_id", "request_id", "tenant_id", "world_id", "ori_id", "tier", "cause", "window_start_ms",
        "max_model_calls", "max_tool_calls", "reserved_tokens", "status", "admitted_at_ms", "deadline_ms",
        "kernel_call_id", "model_calls", "tool_grants", "lease_holder", "used_tokens", "stats",
        "ended_at_ms", "result", "released_tokens",
    ),
)  # fmt: skip


def audit_row(entry: AuditEntry) -> tuple[Any, ...]:
    return (
        entry.call_id,
        entry.run_id,
        entry.tenant_id,
        entry.world_id,
        entry.ori_id,
        entry.tier,
        entry.cause,
        entry.model_ref,
        entry.model_class,
        json.dumps(entry.input_context, sort_keys=True),
        entry.output,
        entry.usage.input_tokens,
        entry.usage.output_tokens,
        entry.usage.cache_read_tokens,
        entry.usage.cache_write_tokens,
        entry.micro_usd,
        int(entry.cost_estimated),
        entry.policy_decision,
        entry.retention_policy_id,
        entry.config_fingerprint,
        int(entry.offline),
        entry.recorded_at_ms,
        entry.kernel_call_id,
        entry.error_class,
        entry.model_latency_us,
    )


@dataclass(frozen=True)
class RunEnding:
    """How a run is ended (`stats` already JSON; `result` is what a repeat of its request id answers)."""

    status: RunStatus
    detail: str
    stats: str
    now_ms: int
    result: str = ""


@dataclass(frozen=True)
class Ending:
    """How a completed run's row ends: what `end_run` would write."""

    used_tokens: int
    stats: str
    now_ms: int
    result: str
    released_tokens: int

    def update(self, run_id: str) -> tuple[Any, ...]:
        """The parameters of `COMPLETE_RUN`."""
        return (self.used_tokens, self.stats, self.now_ms, self.result, self.released_tokens, run_id)


COMPLETE_RUN = (
    "UPDATE gateway_runs SET used_tokens = ?, status = 'completed', detail = '', stats = ?,"
    " ended_at_ms = ?, result = ?, released_tokens = ? WHERE run_id = ?"
)
END_RUN = (
    "UPDATE gateway_runs SET status = ?, detail = ?, stats = ?, ended_at_ms = ?, released_tokens = ?,"
    " result = ? WHERE run_id = ?"
)


class AdmissionOutcome(StrEnum):
    """What the gateway decided in memory; the store writes it (and for an admission, the run's row)."""

    ADMITTED = "admitted"
    KILLED = "killed"  # an active control in the gateway's pushed view matched the run
    BLOCKED = "blocked"  # the world cap: the lease could not hold the run and the ledger had no more


@dataclass(frozen=True)
class AdmissionItem:
    """One admission decision waiting for the writer."""

    run: RunSpec
    outcome: AdmissionOutcome
    cap_tokens: int
    window_start_ms: int
    now_ms: int
    deadline_ms: int
    holder: str
    # Set for a fused run (`Run`): the admission is also its first model boundary, so the run row starts
    # with that call counted and its tool grants recorded.
    first_call_grants: tuple[str, ...] | None = None

    def row(self, ending: Ending | None = None) -> tuple[Any, ...]:
        """The run's row as admitted, or (`ending`: a fused run written with its finish) as it ended."""
        run = self.run
        grants = self.first_call_grants
        status = RunStatus.ACTIVE if ending is None else RunStatus.COMPLETED
        ended = (
            (0, "{}", None, "", 0)
            if ending is None
            else (ending.used_tokens, ending.stats, ending.now_ms, ending.result, ending.released_tokens)
        )
        return (
            run.run_id,
            run.request_id or None,
            run.tenant_id,
            run.world_id,
            run.ori_id,
            run.tier,
            run.cause,
            self.window_start_ms,
            run.max_model_calls,
            run.max_tool_calls,
            run.max_tokens,
            status.value,
            self.now_ms,
            self.deadline_ms,
            run.kernel_call_id,
            int(grants is not None),
            "\n".join(sorted(set(grants or ()))),
            self.holder,
            *ended,
        )

    def fresh_row(self) -> RunRow:
        """The run's row as `row()` writes it."""
        grants = frozenset(self.first_call_grants or ())
        model_calls = int(self.first_call_grants is not None)
        return RunRow(
            self.run, RunStatus.ACTIVE, 0, model_calls, 0, self.window_start_ms, "", grants, self.holder, 0
        )


@dataclass(frozen=True)
class RunRow:
    spec: RunSpec
    status: RunStatus
    used_tokens: int
    model_calls: int
    tool_calls: int
    window_start_ms: int
    detail: str
    tool_grants: frozenset[str]
    # The gateway whose lease the run's reservation came from ('' for a run admitted before leases,
    # reserved on the ledger itself), and what its ending handed back to that lease.
    lease_holder: str
    released_tokens: int

    @property
    def unused_reservation(self) -> int:
        return max(0, self.spec.max_tokens - self.used_tokens)

    @property
    def lease_key(self) -> tuple[str, str, int]:
        return self.lease_holder, self.spec.world_id, self.window_start_ms


def run_from(row: Row) -> RunRow:
    spec = RunSpec(
        run_id=row[0],
        tenant_id=row[1],
        world_id=row[2],
        ori_id=row[3],
        tier=row[4],
        cause=row[5],
        max_model_calls=row[6],
        max_tool_calls=row[7],
        max_tokens=row[8],
        request_id=row[9],
        kernel_call_id=row[16],
    )
    grants = frozenset(row[17].split("\n")) - {""}
    return RunRow(
        spec, RunStatus(row[10]), row[11], row[12], row[13], row[14], row[15], grants, row[18], row[19]
    )


def lease_charge(run: RunRow, tokens: int, holder: str) -> tuple[int, int]:
    """A call's tokens: how many leave `reserved_tokens` (and the run's lease), and how many of those the
    recording gateway `holder` must take from its lease's `available` because the run's reservation no
    longer held them. A run's own gateway takes every token from its lease, so what it admits from
    memory never counts tokens already consumed; another gateway takes only what the run's reservation
    still holds (the rest is consumed beside the leases, as before leases)."""
    from_reservation = min(tokens, run.unused_reservation) if run.status is RunStatus.ACTIVE else 0
    if run.lease_holder and run.lease_holder == holder:
        return tokens, tokens - from_reservation
    return from_reservation, 0


def control_from(row: Row) -> Control:
    return Control(
        control_id=row[0],
        kind=ControlKind(row[1]),
        scope=ControlScope(row[2]),
        target=row[3],
        reason=row[4],
        operator_id=row[5],
        created_at_ms=row[6],
        active=bool(row[7]),
        world_id=row[8],
        expires_at_ms=row[9],
    )


def audit_from(row: Row) -> AuditEntry:
    return AuditEntry(
        seq=row[0],
        call_id=row[1],
        run_id=row[2],
        tenant_id=row[3],
        world_id=row[4],
        ori_id=row[5],
        tier=row[6],
        cause=row[7],
        model_ref=row[8],
        model_class=row[9],
        input_context=json.loads(row[10]),
        output=row[11],
        usage=Usage(row[12], row[13], row[14], row[15]),
        micro_usd=row[16],
        cost_estimated=bool(row[17]),
        policy_decision=row[18],
        retention_policy_id=row[19],
        config_fingerprint=row[20],
        offline=bool(row[21]),
        recorded_at_ms=row[22],
        kernel_call_id=row[23],
        error_class=row[24],
        model_latency_us=row[25],
    )
