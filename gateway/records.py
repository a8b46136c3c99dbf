"""Plain records the gateway's domain and stores exchange: runs, controls, audit entries, spend."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from gateway.config import TIER_NAMES
from gateway.cost import Usage


def new_run_id(now_ms: int) -> str:
    """A run's id: its admission's Unix time in ms (12 hex digits), then 80 random bits (20 hex digits),
    as long as the uuid4 hex ids it replaced.

    Ids made later sort later, so the indexes keyed by run id (runs; audit records by run and by call)
    grow at their right edge rather than at a random leaf each. Over tables of 200,000 runs, writing a
    run row and its audit record took SQLite (its WAL copies included) 39–43 % less time that way;
    PostgreSQL showed no clear difference at that size (`bench/run_id_locality.py`)."""
    return f"{now_ms:012x}{os.urandom(10).hex()}"


class ControlKind(IntEnum):
    """Mirrors egbe.v1.ControlKind."""

    KILL = 1
    PAUSE = 2
    QUARANTINE = 3


class ControlScope(IntEnum):
    """Mirrors egbe.v1.ControlScope."""

    ORI = 1
    TIER = 2
    TENANT = 3
    WORLD = 4


# What a control names: its scope, its target and the one world it applies in ('' = every world; a WORLD
# control's target is its world, so its own world id is '').
ControlKey = tuple[ControlScope, str, str]


class RunStatus(StrEnum):
    """Every way a run can be; all but ACTIVE are endings that release the reservation."""

    ACTIVE = "active"
    COMPLETED = "completed"
    FALLBACK = "fallback"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    KILLED = "killed"
    # A model call found no turn under its providers' rate limits before its deadline (never sent).
    DEFERRED = "deferred"


@dataclass(frozen=True)
class RunSpec:
    """Who a run thinks for, under which tier and cause, and what it may spend."""

    run_id: str
    tenant_id: str
    world_id: str
    ori_id: str
    tier: int
    cause: int
    max_model_calls: int
    max_tool_calls: int
    max_tokens: int
    request_id: str | None = None
    # The kernel's cognition call id (CognitionCallCandidate.call_id) this run serves, if any.
    kernel_call_id: str = ""

    @property
    def tier_name(self) -> str:
        return TIER_NAMES[self.tier]

    @property
    def control_targets(self) -> tuple[ControlKey, ...]:
        """Every key a control that stops this run names: its ori, tier and tenant, each in every world or
        in this run's world, and this run's world itself."""
        world = self.world_id
        return (
            (ControlScope.ORI, self.ori_id, ""),
            (ControlScope.TIER, self.tier_name, ""),
            (ControlScope.TENANT, self.tenant_id, ""),
            (ControlScope.WORLD, world, ""),
            (ControlScope.ORI, self.ori_id, world),
            (ControlScope.TIER, self.tier_name, world),
            (ControlScope.TENANT, self.tenant_id, world),
        )


@dataclass(frozen=True)
class Admission:
    """The admission decision: admitted with a reservation, or why not."""

    run: RunSpec
    admitted: bool
    reserved_tokens: int
    # True when this answered an earlier admission with the same request id.
    repeated: bool = False
    # What the earlier run answered when it ended ('' while it runs): a repeat returns it.
    earlier_result: str = ""


@dataclass(frozen=True)
class Control:
    control_id: str
    kind: ControlKind
    scope: ControlScope
    target: str
    reason: str
    operator_id: str
    created_at_ms: int
    active: bool = True  # False once lifted (an expired control stays active here: see `applies`)
    world_id: str = ""  # the one world it applies in; '' = every world
    expires_at_ms: int = 0  # when it stops applying; 0 = never

    @property
    def key(self) -> ControlKey:
        return self.scope, self.target, self.world_id

    def expired(self, now_ms: int) -> bool:
        return 0 < self.expires_at_ms <= now_ms

    def applies(self, now_ms: int) -> bool:
        """Active (not lifted) and not expired."""
        return self.active and not self.expired(now_ms)

    def matches(self, run: RunSpec, now_ms: int) -> bool:
        return self.applies(now_ms) and self.key in run.control_targets

    def describe(self) -> str:
        where = f" in world {self.world_id!r}" if self.world_id else ""
        named = f"{self.kind.name.lower()} {self.scope.name.lower()} {self.target!r}{where}"
        return f"{named} ({self.control_id})"


@dataclass(frozen=True)
class ControlAdded:
    """What committing a control did: the control (an identical one already active when `existing`),
    the runs it ended, and whether its target was ever seen (an Ori or a world with a run)."""

    control: Control
    runs_ended: int
    existing: bool
    seen: bool


@dataclass(frozen=True)
class Limits:
    """What operators changed at run time: world caps (tokens per hour) by world, and per-run budgets by
    tier as (max_model_calls, max_tool_calls, max_tokens)."""

    world_caps: dict[str, int] = field(default_factory=dict)
    run_budgets: dict[int, tuple[int, int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class CallGrant:
    """Permission for one model call inside a run: its ordinal and the output tokens it may use."""

    run: RunSpec
    call_index: int
    max_output_tokens: int


# The error class of a lease settlement's audit record: no model call, the tokens a crashed gateway's lease
# held, charged because nothing proves them unspent.
LEASE_SETTLED = "lease_settled"


@dataclass(frozen=True)
class AuditEntry:
    """One model call, with everything needed to attribute and replay it."""

    call_id: str
    run_id: str
    tenant_id: str
    world_id: str
    ori_id: str
    tier: int
    cause: str
    model_ref: str
    model_class: str
    input_context: dict[str, object]
    output: str
    usage: Usage
    micro_usd: int
    cost_estimated: bool
    policy_decision: str
    retention_policy_id: str
    config_fingerprint: str
    offline: bool
    recorded_at_ms: int
    kernel_call_id: str = ""
    # Empty when the model answered; else why the call failed (provider error class, killed, cancelled).
    error_class: str = ""
    # How long the adapter took (until it answered or failed), timed by the gateway's monotonic clock.
    model_latency_us: int = 0
    seq: int = 0


@dataclass(frozen=True)
class OperatorAttempt:
    """One audited call of OperatorService, allowed or refused."""

    seq: int
    method: str
    role: str
    operator_id: str
    allowed: bool
    detail: str
    recorded_at_ms: int


@dataclass(frozen=True)
class LeaseCharge:
    """Tokens a recorded call took from its gateway's lease beyond the run's reservation (a call that
    finished after its run ended, or calls that together overran it): the gateway takes them from what
    its lease of that world window (`key`) has available."""

    key: tuple[str, int]
    tokens: int


@dataclass(frozen=True)
class RunEnd:
    used_tokens: int
    released_tokens: int
    ended_now: bool
    # What the run's ending (now or earlier) handed back to the lease its reservation came from: the
    # holder adds it to what it may admit, once (gateway/lease.py).
    lease_return: int = 0
    # What its last call took from that lease beyond the run's reservation (the run had ended, or its
    # calls overran it): the holder takes it from what it may admit.
    lease_charge: LeaseCharge | None = None


@dataclass(frozen=True)
class TierSpend:
    tier: int
    tokens: int
    micro_usd: int
    calls: int


@dataclass(frozen=True)
class Spend:
    world_cap_tokens: int
    reserved_tokens: int  # by active runs, not yet consumed
    leased_tokens: int  # by the ledger itself: every gateway's lease (holding those runs' reservations)
    consumed_tokens: int
    consumed_micro_usd: int
    admissions: int
    blocked_by_world_cap: int
    killed: int
    killed_in_flight: int
    by_tier: list[TierSpend] = field(default_factory=list)
