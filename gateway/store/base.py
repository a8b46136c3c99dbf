"""The store interface and its transactions, written once over a minimal cursor; backends supply connections.

Every ledger change happens in one transaction with the check that allows it: admission locks the
world's ledger row (PostgreSQL `FOR UPDATE`, SQLite `BEGIN IMMEDIATE`), so concurrent admissions
serialize on it and the sum of reservations can never pass the cap.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from gateway.config import TIER_NAMES
from gateway.cost import Usage
from gateway.records import (
    Admission,
    AuditEntry,
    CallGrant,
    Control,
    ControlAdded,
    ControlKind,
    ControlScope,
    LeaseCharge,
    Limits,
    OperatorAttempt,
    RunEnd,
    RunSpec,
    RunStatus,
    Spend,
    TierSpend,
)
from gateway.store import limits
from gateway.store.group_commit import GroupCommitter, Refused
from services.errors import (
    Aborted,
    EgbeError,
    FailedPrecondition,
    FieldViolation,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)

T = TypeVar("T")
ItemT = TypeVar("ItemT")
Row = tuple[Any, ...]
CONTROLS_CHANNEL = "egbe_gateway_controls"


class Tx(Protocol):
    """What a transaction body (a coroutine) may do: run SQL written with `?` placeholders, queue a
    notification. `execute` may only queue a statement (PostgreSQL sends it, pipelined, with the next read
    or the committer's sync), so its error can surface there; reads are awaited."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    async def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def insert_statements(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> list[tuple[str, Sequence[Any]]]:
        """The statements that insert `rows` into `table`: one however many rows (PostgreSQL: the rows
        as one JSON parameter), or one per row where that costs nothing more (SQLite)."""
        ...

    def execute_together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Statements that each change rows none of the others touch, as one: PostgreSQL sends a single
        statement (data-modifying CTEs, which share one snapshot), SQLite runs them in turn."""
        ...

    def notify(self, payload: str) -> None: ...

    # Set by the writer for a batch of several bodies: ledger changes wait there for the batch's end
    # (`DeferredLedger`); None writes them with the body's own statements.
    deferred: DeferredLedger | None

    def serialize(self, keys: Sequence[str]) -> None:
        """Hold these keys until the transaction ends: a transaction of another gateway holding one of
        them waits for this one's end before it goes on (PostgreSQL: advisory locks, taken in key order;
        SQLite: nothing, as BEGIN IMMEDIATE already serializes every writer of the file)."""
        ...


_RUN_COLUMNS = (
    "run_id, tenant_id, world_id, ori_id, tier, cause, max_model_calls, max_tool_calls, reserved_tokens,"
    " request_id, status, used_tokens, model_calls, tool_calls, window_start_ms, detail, kernel_call_id,"
    " tool_grants, lease_holder, released_tokens"
)
_CONTROL_COLUMNS = (
    "control_id, kind, scope, target, reason, operator_id, created_at_ms, active, world_id, expires_at_ms"
)
# An active control that still applies at a time (the parameter, Unix ms).
_APPLIES = "active = 1 AND (expires_at_ms = 0 OR expires_at_ms > ?)"
_AUDIT_COLUMNS = (
    "call_id, run_id, tenant_id, world_id, ori_id, tier, cause, model_ref, model_class, input_context,"
    " output, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, micro_usd,"
    " cost_estimated, policy_decision, retention_policy_id, config_fingerprint, offline, recorded_at_ms,"
    " kernel_call_id, error_class, model_latency_us"
)


# Where `_audit_row` and `AdmissionItem.row` go (`insert_rows`, `_Statements.insert`).
_AUDIT_TABLE = ("gateway_audit", tuple(_AUDIT_COLUMNS.split(", ")))
_RUN_TABLE = (
    "gateway_runs",
    (
        "run_id", "request_id", "tenant_id", "world_id", "ori_id", "tier", "cause", "window_start_ms",
        "max_model_calls", "max_tool_calls", "reserved_tokens", "status", "admitted_at_ms", "deadline_ms",
        "kernel_call_id", "model_calls", "tool_grants", "lease_holder", "used_tokens", "stats",
        "ended_at_ms", "result", "released_tokens",
    ),
)  # fmt: skip


def _audit_row(entry: AuditEntry) -> tuple[Any, ...]:
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
class _RunEnding:
    """How a run is ended (`stats` already JSON; `result` is what a repeat of its request id answers)."""

    status: RunStatus
    detail: str
    stats: str
    now_ms: int
    result: str = ""


@dataclass(frozen=True)
class _CallItem:
    """One model call's audit record waiting for the writer, recorded by gateway `holder`; with a
    `completion` (a completed ending), its fused run ends with it."""

    entry: AuditEntry
    holder: str
    completion: _RunEnding | None = None
    # The run's admission when its row was not written yet: written first, in the same transaction.
    admission: AdmissionItem | None = None


@dataclass(frozen=True)
class _BeginItem:
    """One model boundary waiting for the writer."""

    run_id: str
    input_tokens: int
    max_output_tokens: int
    tool_grants: frozenset[str]


@dataclass(frozen=True)
class _ToolItem:
    """One tool boundary waiting for the writer."""

    run_id: str
    tool_name: str


@dataclass(frozen=True)
class _EndItem:
    """One run's ending waiting for the writer."""

    run_id: str
    ending: _RunEnding


@dataclass(frozen=True)
class _Ending:
    """How a completed run's row ends: what `end_run` would write."""

    used_tokens: int
    stats: str
    now_ms: int
    result: str
    released_tokens: int

    def update(self, run_id: str) -> tuple[Any, ...]:
        """The parameters of `_COMPLETE_RUN`."""
        return (self.used_tokens, self.stats, self.now_ms, self.result, self.released_tokens, run_id)


_COMPLETE_RUN = (
    "UPDATE gateway_runs SET used_tokens = ?, status = 'completed', detail = '', stats = ?,"
    " ended_at_ms = ?, result = ?, released_tokens = ? WHERE run_id = ?"
)
_END_RUN = (
    "UPDATE gateway_runs SET status = ?, detail = ?, stats = ?, ended_at_ms = ?, released_tokens = ?,"
    " result = ? WHERE run_id = ?"
)


def insert_rows(tx: Tx, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows into `table`, in the statements the backend writes them with (`Tx.insert_statements`)."""
    for sql, params in tx.insert_statements(table, columns, rows):
        tx.execute(sql, params)


class _Statements:
    """Writes gathered to go to the database together (`Tx.execute_together`)."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx
        self.gathered: list[tuple[str, Sequence[Any]]] = []

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.gathered.extend(self._tx.insert_statements(table, columns, rows))

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.gathered.append((sql, params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.gathered.extend((sql, row) for row in rows)

    @property
    def deferred(self) -> DeferredLedger | None:
        return self._tx.deferred


class _LedgerChanges:
    """What one transaction changes in the ledger, gathered and then written with one statement per
    world window and one per lease (`write`), however many admissions and calls it holds."""

    def __init__(self) -> None:
        # (world, window) -> [cap (-1: no admission told it), admissions, blocked, killed,
        #                     from reservations, consumed, micro-USD, killed in flight]
        self._windows: dict[tuple[str, int], list[int]] = {}
        self._leases: dict[tuple[str, str, int], int] = {}

    def _window(self, world_id: str, window_start_ms: int) -> list[int]:
        return self._windows.setdefault((world_id, window_start_ms), [-1, 0, 0, 0, 0, 0, 0, 0])

    def decided(self, item: AdmissionItem, *, counted: bool = True) -> None:
        """An admission decision: the window's cap as the deciding gateway sees it, and (`counted`; a
        repeat of an admitted request id is not) its counter."""
        window = self._window(item.run.world_id, item.window_start_ms)
        window[0] = item.cap_tokens
        if counted:
            window[_COUNTER_OF[item.outcome]] += 1

    def consumed(self, run: _RunRow, tokens: int, from_reservation: int, micro_usd: int) -> None:
        """A call's tokens into consumption; what came from the run's reservation leaves
        `reserved_tokens`, and the lease it was drawn from."""
        window = self._window(run.spec.world_id, run.window_start_ms)
        window[4] += from_reservation
        window[5] += tokens
        window[6] += micro_usd
        if run.lease_holder:
            self._leases[run.lease_key] = self._leases.get(run.lease_key, 0) + from_reservation

    def ended(self, run: _RunRow, released: int, *, killed: bool) -> None:
        """A run's ending: what it released leaves `reserved_tokens` for a run admitted before leases
        (a lease's run hands it back to its lease, in the holder's memory); a kill is counted, as a
        kill in flight."""
        window = self._window(run.spec.world_id, run.window_start_ms)
        window[4] += 0 if run.lease_holder else released
        window[3] += killed
        window[7] += killed

    def merge(self, other: _LedgerChanges) -> None:
        """`other`'s changes added to these (an admission's cap: the latest told)."""
        for key, change in other._windows.items():
            window = self._window(*key)
            window[0] = change[0] if change[0] >= 0 else window[0]
            for index in range(1, len(change)):
                window[index] += change[index]
        for lease, tokens in other._leases.items():
            self._leases[lease] = self._leases.get(lease, 0) + tokens

    def write(self, tx: Tx | _Statements) -> None:
        """Written now, or (a batch of several bodies) at the batch's end with every other body's."""
        if tx.deferred is not None:
            tx.deferred.stage(self)
        else:
            self.write_now(tx)

    def write_now(self, tx: Tx | _Statements) -> None:
        """Windows, then leases, each in key order (the lock order, docs/gateway.md "Lock order"); a
        window nothing changed (a lease's run ended, no kill) is not written, nor locked."""
        for (world_id, window_start_ms), change in sorted(self._windows.items()):
            cap, admissions, blocked, killed, from_reservations, consumed, micro_usd, in_flight = change
            if cap < 0 and not any(change[1:]):
                continue
            if cap >= 0:  # an admission's window: created if new (`_LOCK_LEDGER`'s upsert, counted)
                tx.execute(
                    "INSERT INTO gateway_ledger (world_id, window_start_ms, cap_tokens, admissions,"
                    " blocked_by_world_cap, killed, reserved_tokens, consumed_tokens, consumed_micro_usd,"
                    " killed_in_flight) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (world_id, window_start_ms) DO UPDATE"
                    " SET cap_tokens = excluded.cap_tokens,"
                    " admissions = gateway_ledger.admissions + excluded.admissions,"
                    " blocked_by_world_cap = gateway_ledger.blocked_by_world_cap"
                    " + excluded.blocked_by_world_cap,"
                    " killed = gateway_ledger.killed + excluded.killed,"
                    " reserved_tokens = gateway_ledger.reserved_tokens + excluded.reserved_tokens,"
                    " consumed_tokens = gateway_ledger.consumed_tokens + excluded.consumed_tokens,"
                    " consumed_micro_usd = gateway_ledger.consumed_micro_usd + excluded.consumed_micro_usd,"
                    " killed_in_flight = gateway_ledger.killed_in_flight + excluded.killed_in_flight",
                    (
                        world_id,
                        window_start_ms,
                        cap,
                        admissions,
                        blocked,
                        killed,
                        -from_reservations,
                        consumed,
                        micro_usd,
                        in_flight,
                    ),
                )
            else:  # (no admission: no admission counters; kills here are kills in flight)
                tx.execute(
                    "UPDATE gateway_ledger SET reserved_tokens = reserved_tokens - ?,"
                    " consumed_tokens = consumed_tokens + ?, consumed_micro_usd = consumed_micro_usd + ?,"
                    " killed = killed + ?, killed_in_flight = killed_in_flight + ?"
                    " WHERE world_id = ? AND window_start_ms = ?",
                    (from_reservations, consumed, micro_usd, killed, in_flight, world_id, window_start_ms),
                )
        for (holder, world_id, window_start_ms), tokens in sorted(self._leases.items()):
            if tokens:
                tx.execute(
                    "UPDATE gateway_leases SET tokens = tokens - ? WHERE holder = ? AND world_id = ?"
                    " AND window_start_ms = ?",
                    (tokens, holder, world_id, window_start_ms),
                )


class DeferredLedger:
    """The ledger changes of a batch of several bodies, written once at its end (`write`, which the
    writer also calls before a body submitted to read the ledger, `transact(reads_ledger=True)`): every
    window and lease the batch changes is then locked in key order, where each body writing its own in
    turn could lock two in the other order than another gateway's batch and deadlock with it. A body's
    changes are kept once its savepoint is released (`keep`), or dropped with it (`drop`)."""

    def __init__(self) -> None:
        self._staged = _LedgerChanges()  # the running body's
        self._kept = _LedgerChanges()

    def stage(self, changes: _LedgerChanges) -> None:
        self._staged.merge(changes)

    def keep(self) -> None:
        self._kept.merge(self._staged)
        self._staged = _LedgerChanges()

    def drop(self) -> None:
        self._staged = _LedgerChanges()

    def write(self, tx: Tx) -> None:
        self._kept.write_now(tx)
        self._kept = _LedgerChanges()


def _end(
    writes: Tx | _Statements,
    ledger: _LedgerChanges,
    run: _RunRow,
    ending: _RunEnding,
) -> int:
    """End an active run and release its unused reservation: back to the lease it came from (the
    holder hands it to its `available` when it learns the ending, `RunEnd.lease_return`), or, for a
    run admitted before leases, to the ledger (`ledger`, which the caller writes once for every run it
    ends). Returns the tokens released."""
    released = run.unused_reservation
    writes.execute(
        _END_RUN,
        (
            ending.status.value,
            ending.detail,
            ending.stats,
            ending.now_ms,
            released,
            ending.result,
            run.spec.run_id,
        ),
    )
    ledger.ended(run, released, killed=ending.status is RunStatus.KILLED)
    return released


class AdmissionOutcome(StrEnum):
    """What the gateway decided in memory; the store writes it (and for an admission, the run's row)."""

    ADMITTED = "admitted"
    KILLED = "killed"  # an active control in the gateway's pushed view matched the run
    BLOCKED = "blocked"  # the world cap: the lease could not hold the run and the ledger had no more


# Where `_LedgerChanges` counts each admission decision in a window's change.
_COUNTER_OF = {AdmissionOutcome.ADMITTED: 1, AdmissionOutcome.BLOCKED: 2, AdmissionOutcome.KILLED: 3}


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

    def row(self, ending: _Ending | None = None) -> tuple[Any, ...]:
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

    def fresh_row(self) -> _RunRow:
        """The run's row as `row()` writes it."""
        grants = frozenset(self.first_call_grants or ())
        model_calls = int(self.first_call_grants is not None)
        return _RunRow(
            self.run, RunStatus.ACTIVE, 0, model_calls, 0, self.window_start_ms, "", grants, self.holder, 0
        )


@dataclass(frozen=True)
class _RunRow:
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


def _run_from(row: Row) -> _RunRow:
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
    return _RunRow(
        spec, RunStatus(row[10]), row[11], row[12], row[13], row[14], row[15], grants, row[18], row[19]
    )


def _charge(run: _RunRow, tokens: int, holder: str) -> tuple[int, int]:
    """A call's tokens: how many leave `reserved_tokens` (and the run's lease), and how many of those the
    recording gateway `holder` must take from its lease's `available` because the run's reservation no
    longer held them. A run's own gateway takes every token from its lease, so what it admits from
    memory never counts tokens already consumed; another gateway takes only what the run's reservation
    still holds (the rest is consumed beside the leases, as before leases)."""
    from_reservation = min(tokens, run.unused_reservation) if run.status is RunStatus.ACTIVE else 0
    if run.lease_holder and run.lease_holder == holder:
        return tokens, tokens - from_reservation
    return from_reservation, 0


def _no_run(run_id: str) -> NotFound:
    """Every request naming a run carries it in `run_id`, so the refusal names that field."""
    return NotFound(
        f"no run {run_id!r}",
        metadata={"run_id": run_id},
        violations=[FieldViolation("run_id", "names no run admitted by this gateway")],
    )


# The runs a control's scope names: the column, and the value for a target.
_RUN_FILTER = {
    ControlScope.ORI: "ori_id = ?",
    ControlScope.TIER: "tier = ?",
    ControlScope.TENANT: "tenant_id = ?",
    ControlScope.WORLD: "world_id = ?",
}


def _run_value(scope: ControlScope, target: str) -> object:
    if scope is ControlScope.TIER:
        return next(tier for tier, name in TIER_NAMES.items() if name == target)
    return target


def _control_from(row: Row) -> Control:
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


def _audit_from(row: Row) -> AuditEntry:
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


def call_grant(
    run: RunSpec, *, model_calls: int, used_tokens: int, input_tokens: int, max_output_tokens: int
) -> CallGrant:
    """A model call fits the run's budget (calls and tokens so far); else RESOURCE_EXHAUSTED naming the
    limit. The grant's output tokens are what the run has left after the prompt."""
    if model_calls >= run.max_model_calls:
        raise ResourceExhausted(
            f"run {run.run_id} used all {run.max_model_calls} model calls of its "
            f"{run.tier_name} budget (max_model_calls)",
            metadata={"limit": "max_model_calls", "run_id": run.run_id},
        )
    remaining = run.max_tokens - used_tokens
    if input_tokens >= remaining:
        raise ResourceExhausted(
            f"run {run.run_id} has {max(remaining, 0)} of its {run.max_tokens} tokens left and the "
            f"prompt needs {input_tokens} (max_tokens)",
            metadata={"limit": "max_tokens", "run_id": run.run_id},
        )
    return CallGrant(run, model_calls + 1, min(max_output_tokens, remaining - input_tokens))


class GatewayStore(ABC):
    """Ledger, runs, audit log and controls; every method is one transaction; failures fail closed."""

    def __init__(self, for_update: str) -> None:
        # PostgreSQL locks the selected ledger/run row; SQLite's BEGIN IMMEDIATE already holds the write lock.
        self._for_update = for_update
        # Run rows are locked in id order, as every gateway sharing the database locks them.
        self._lock_in_order = f" ORDER BY run_id{for_update}"
        self._control_listeners: list[Callable[[Control], None]] = []
        self._limits_listeners: list[Callable[[Limits], None]] = []

    # Set by each backend: its one writer (group commit) and how long a caller waits for it.
    _writer: GroupCommitter[Any]
    _timeout: float

    # -- backend -------------------------------------------------------------------------------------
    @abstractmethod
    async def open(self) -> None:
        """Connect and create the schema; raises when the store cannot be reached."""

    @abstractmethod
    async def close(self) -> None: ...

    async def transact(
        self,
        body: Callable[[Tx], Awaitable[T]],
        *,
        durable: bool = True,
        locks_ledger: bool = False,
        reads_ledger: bool = False,
    ) -> T:
        """Run `body` in one transaction on the backend's writer; database failures become Unavailable
        (fail closed).

        `durable`: answer only once committed to disk; otherwise once committed without waiting for the
        disk (in a batch of several, once applied: visible to every later body, and committed with the
        batch). See "Durability" in docs/gateway.md.
        `locks_ledger`: the body locks ledger rows itself, or reads what they hold to decide (a lease):
        it runs in a transaction of its own. In a batch of several bodies the others' ledger changes
        wait for the batch's end (`DeferredLedger`), where it would not see them, and where it would
        hold its rows while later bodies lock their runs (the lock order, docs/gateway.md).
        `reads_ledger`: the body reads the ledger or the leases: the batch's deferred changes are written
        before it, so it sees every write made before it (a posted admission's counters, say).
        """
        result: T = await self._writer.submit(
            body,
            timeout_seconds=self._timeout,
            durable=durable,
            alone=locks_ledger,
            reads_deferred=reads_ledger,
        )
        return result

    async def transact_item(
        self,
        item: ItemT,
        combine: Callable[[Tx, list[ItemT]], Awaitable[Sequence[T | Refused]]],
        *,
        durable: bool = True,
    ) -> T:
        """Like `transact`, but items arriving together are applied by one `combine(tx, items)` (its
        `Refused` answer for an item raises that item's error)."""
        result: T = await self._writer.submit(
            item, timeout_seconds=self._timeout, durable=durable, combine=combine
        )
        return result

    @property
    def healthy(self) -> bool:
        """False while the store is known to be unreachable (the writer lost the database; PostgreSQL: or
        the control push channel is down): admission fails closed even with lease left in memory."""
        return self._writer.healthy

    @property
    def conflicts(self) -> int:
        """Transactions the database rolled back for a conflict with another gateway's, since start (each
        was run again; docs/gateway.md "Lock order")."""
        return self._writer.conflicts

    async def probe(self) -> None:
        """One round trip through the writer: it marks the store healthy again once the database answers."""
        await self.transact(lambda tx: tx.one("SELECT 1"), durable=False)

    def on_control_change(self, listener: Callable[[Control], None]) -> None:
        """Called for every control added or lifted, by this process or (PostgreSQL) any other."""
        self._control_listeners.append(listener)

    def _publish(self, controls: Sequence[Control]) -> None:
        for control in controls:
            for listener in self._control_listeners:
                listener(control)

    # -- admission and runs -------------------------------------------------------------------------
    # Creates the world's ledger row for the window when new, in any case locks it (PostgreSQL holds the
    # upsert's row lock to COMMIT; SQLite's BEGIN IMMEDIATE already holds the write lock) and returns what
    # it holds: one statement where an insert and a locked read would be two.
    _LOCK_LEDGER = (
        "INSERT INTO gateway_ledger (world_id, window_start_ms, cap_tokens) VALUES (?, ?, ?)"
        " ON CONFLICT (world_id, window_start_ms) DO UPDATE SET cap_tokens = excluded.cap_tokens"
        " RETURNING reserved_tokens, consumed_tokens"
    )

    async def _run_rows(self, tx: Tx, run_ids: Sequence[str], *, lock: bool = True) -> dict[str, _RunRow]:
        """These runs' rows (those that exist), locked until the transaction ends unless `lock` is
        false: one read for a burst."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        rows = await tx.all(
            f"SELECT {_RUN_COLUMNS} FROM gateway_runs WHERE run_id IN ({', '.join('?' * len(ids))})"
            f"{self._lock_in_order if lock else ''}",
            ids,
        )
        return {row[0]: _run_from(row) for row in rows}

    def post_admission(self, item: AdmissionItem) -> None:
        """Write an admission decision without waiting for it: the run's row (its reservation came from
        this gateway's lease in memory) and the ledger's counters. Applied in order with everything else
        this gateway writes, so its later transactions find the row; never waited for (docs/gateway.md
        "Durability")."""
        self._writer.post(item, combine=self._admission_burst)

    async def write_admission(self, item: AdmissionItem) -> Admission:
        """Like `post_admission`, answered once applied, for an admission with a request id: a repeat of
        one already written (by any gateway) answers the first run instead, and writes nothing."""
        admission: Admission = await self.transact_item(item, self._admission_burst, durable=False)
        return admission

    async def earlier_admission(self, request_id: str) -> Admission | None:
        """The run already admitted under this request id, if any."""
        earlier = await self.transact(lambda tx: self._earlier_admissions(tx, [request_id]), durable=False)
        return earlier.get(request_id)

    async def _admission_burst(self, tx: Tx, items: list[AdmissionItem]) -> list[Admission]:
        """Admission decisions in arrival order, in a few statements for the burst: one read of the
        repeated request ids (when there are any), one multi-row insert of the new runs, one counter
        upsert per world window. An admitted run whose request id was already admitted is answered as a
        repeat (the caller gives its reservation back to its lease)."""
        ledger = _LedgerChanges()
        answers, rows = await self._decide(tx, items, ledger, {})
        insert_rows(tx, *_RUN_TABLE, rows)
        ledger.write(tx)
        return answers

    async def _decide(
        self, tx: Tx, items: list[AdmissionItem], ledger: _LedgerChanges, endings: dict[str, _Ending]
    ) -> tuple[list[Admission], list[tuple[Any, ...]]]:
        """Admission decisions: the answers, the rows of the runs to insert (as `endings` ends them, for
        fused runs written with their finish), and the decisions into `ledger`."""
        admitted = [i for i in items if i.outcome is AdmissionOutcome.ADMITTED]
        request_ids = [i.run.request_id for i in admitted if i.run.request_id]
        # A request id another gateway is admitting right now (a client retrying elsewhere): wait for its
        # transaction, so the read below finds its run and this one is answered as its repeat.
        tx.serialize(request_ids)
        earlier = await self._earlier_admissions(tx, request_ids)
        answers: list[Admission] = []
        inserted: list[tuple[Any, ...]] = []
        for item in items:
            run = item.run
            if item.outcome is not AdmissionOutcome.ADMITTED:
                ledger.decided(item)
                answers.append(Admission(run, False, 0))
                continue
            repeated = earlier.get(run.request_id or "")
            ledger.decided(item, counted=repeated is None)
            if repeated is not None:
                answers.append(repeated)
                continue
            inserted.append(item.row(endings.get(run.run_id)))
            answers.append(Admission(run, True, run.max_tokens))
            if run.request_id:  # a repeat later in this burst answers this run
                earlier[run.request_id] = Admission(run, True, run.max_tokens, repeated=True)
        return answers, inserted

    # -- leases of the world cap --------------------------------------------------------------------
    async def lease(
        self,
        holder: str,
        key: tuple[str, int],
        *,
        cap_tokens: int,
        need: int,
        chunk: int,
        share_bp: int,
        now_ms: int,
    ) -> int:
        """Lease at least `need` tokens of a world window's cap to `holder`, or none (0) when the ledger
        has fewer than that left unleased and unconsumed: checked under the ledger row's lock, so every
        lease together never passes the cap. Asks for `chunk`, but at most `share_bp` of what is left
        (never less than `need`), so gateways sharing the ledger leave room to each other near the cap.
        Durable: no run is admitted from a lease a crash could lose."""

        async def body(tx: Tx) -> int:
            row = await tx.one(self._LOCK_LEDGER, (*key, cap_tokens))
            assert row is not None  # the upsert returns its row
            unleased = cap_tokens - int(row[0]) - int(row[1])
            if unleased < need:
                return 0
            granted = min(unleased, max(need, min(chunk, unleased * share_bp // 10_000)))
            await self._move_lease(tx, holder, key, granted, now_ms)
            return granted

        return await self.transact(body, durable=True, locks_ledger=True)

    async def return_lease(self, holder: str, key: tuple[str, int], *, tokens: int, now_ms: int) -> None:
        """Give back unused leased tokens to the ledger (not waiting for the disk: a return a crash loses
        only leaves the tokens leased, to be settled as spent)."""
        await self.transact(
            lambda tx: self._move_lease(tx, holder, key, -tokens, now_ms), durable=False, locks_ledger=True
        )

    @staticmethod
    async def _move_lease(tx: Tx, holder: str, key: tuple[str, int], tokens: int, now_ms: int) -> None:
        """Tokens from the ledger to a lease (negative: back); the ledger row exists and is locked."""
        tx.execute(
            "UPDATE gateway_ledger SET reserved_tokens = reserved_tokens + ?"
            " WHERE world_id = ? AND window_start_ms = ?",
            (tokens, *key),
        )
        tx.execute(
            "INSERT INTO gateway_leases (holder, world_id, window_start_ms, tokens, updated_at_ms)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (holder, world_id, window_start_ms) DO UPDATE SET"
            " tokens = gateway_leases.tokens + excluded.tokens, updated_at_ms = excluded.updated_at_ms",
            (holder, *key, tokens, now_ms),
        )

    async def settle_leases(
        self, holder: str, *, audit: Callable[[str, int, int], AuditEntry], now_ms: int
    ) -> int:
        """At start: settle what `holder`'s previous life left leased (it crashed, or stopped with runs in
        flight). Nothing proves those tokens unspent (its last admissions' rows and calls may never have
        been written), so they are charged: moved from reserved to consumed, with a settlement audit record
        (`audit(world, window, tokens)`) in the same transaction so the ledger still equals the audit log;
        the runs it left active are ended. Returns the tokens charged."""

        async def body(tx: Tx) -> int:
            # Its active runs first: another gateway recording or ending one locks the run before the
            # ledger and the lease (the lock order).
            await tx.all(
                f"SELECT run_id FROM gateway_runs WHERE status = ? AND lease_holder = ?{self._lock_in_order}",
                (RunStatus.ACTIVE.value, holder),
            )
            leases = await tx.all(
                "SELECT world_id, window_start_ms, tokens FROM gateway_leases WHERE holder = ? AND tokens > 0"
                f" ORDER BY world_id, window_start_ms{self._for_update}",
                (holder,),
            )
            charged = 0
            for world_id, window_start_ms, tokens in leases:
                entry = audit(world_id, int(window_start_ms), int(tokens))
                insert_rows(tx, *_AUDIT_TABLE, [_audit_row(entry)])
                tx.execute(
                    "UPDATE gateway_ledger SET reserved_tokens = reserved_tokens - ?,"
                    " consumed_tokens = consumed_tokens + ? WHERE world_id = ? AND window_start_ms = ?",
                    (tokens, tokens, world_id, window_start_ms),
                )
                charged += int(tokens)
            tx.execute(
                "UPDATE gateway_leases SET tokens = 0, updated_at_ms = ? WHERE holder = ?", (now_ms, holder)
            )
            tx.execute(
                "UPDATE gateway_runs SET status = ?, detail = ?, ended_at_ms = ?"
                " WHERE status = ? AND lease_holder = ?",
                (
                    RunStatus.FAILED.value,
                    "its gateway's lease was settled at a restart",
                    now_ms,
                    RunStatus.ACTIVE.value,
                    holder,
                ),
            )
            return charged

        return await self.transact(body, durable=True, locks_ledger=True)

    async def lease_tokens(self, holder: str = "") -> int:
        """What leases hold (one holder's, or every one's): the invariant checks read this."""
        row = await self.transact(
            lambda tx: tx.one(
                "SELECT COALESCE(SUM(tokens), 0) FROM gateway_leases WHERE ? = '' OR holder = ?",
                (holder, holder),
            ),
            durable=False,
            reads_ledger=True,
        )
        assert row is not None
        return int(row[0])

    @staticmethod
    async def _earlier_admissions(tx: Tx, request_ids: list[str]) -> dict[str, Admission]:
        """The runs already admitted under these request ids (a repeat answers the first run)."""
        if not request_ids:
            return {}
        rows = await tx.all(
            f"SELECT {_RUN_COLUMNS}, result FROM gateway_runs WHERE request_id IN"
            f" ({', '.join('?' * len(request_ids))})",
            request_ids,
        )
        earlier = {}
        for row in rows:
            spec = _run_from(row).spec
            earlier[str(spec.request_id)] = Admission(
                spec, True, spec.max_tokens, repeated=True, earlier_result=row[-1]
            )
        return earlier

    def _refuse_ended(self, run: _RunRow) -> None:
        if run.status is RunStatus.ACTIVE:
            return
        if run.status is RunStatus.KILLED:
            raise Aborted(
                f"run {run.spec.run_id} was stopped by {run.detail}",
                metadata={"run_id": run.spec.run_id, "control": run.detail},
            )
        raise FailedPrecondition(f"run {run.spec.run_id} already ended ({run.status.value})")

    async def get_run(self, run_id: str) -> RunSpec:
        """A run's spec, for a run this gateway is not serving (admitted by another gateway, or before a
        restart). Reads arriving together are one read (`_read_runs`)."""
        spec: RunSpec = await self.transact_item(run_id, self._read_runs, durable=False)
        return spec

    async def _read_runs(self, tx: Tx, run_ids: list[str]) -> list[RunSpec | Refused]:
        runs = await self._run_rows(tx, run_ids, lock=False)
        return [run.spec if (run := runs.get(run_id)) else Refused(_no_run(run_id)) for run_id in run_ids]

    async def begin_call(
        self,
        run_id: str,
        *,
        input_tokens: int,
        max_output_tokens: int,
        tool_grants: Sequence[str],
    ) -> CallGrant:
        """A model boundary: the run is active and the call fits the run's budget (the caller checked the
        controls in its pushed view). The call's tool grants join the run's, so a later tool boundary can
        refuse an ungranted tool. Boundaries arriving together are checked and counted by one
        `_begin_burst`.
        """

        item = _BeginItem(run_id, input_tokens, max_output_tokens, frozenset(tool_grants))
        grant: CallGrant = await self.transact_item(item, self._begin_burst, durable=False)
        return grant

    async def _begin_burst(self, tx: Tx, items: list[_BeginItem]) -> list[CallGrant | Refused]:
        """Model boundaries: each counts a call and joins its tool grants to the run's."""

        def count(run: _RunRow, item: _BeginItem) -> tuple[_RunRow, CallGrant]:
            self._refuse_ended(run)
            grant = call_grant(
                run.spec,
                model_calls=run.model_calls,
                used_tokens=run.used_tokens,
                input_tokens=item.input_tokens,
                max_output_tokens=item.max_output_tokens,
            )
            grants = run.tool_grants | item.tool_grants
            return dataclasses.replace(run, model_calls=run.model_calls + 1, tool_grants=grants), grant

        def update(run: _RunRow) -> tuple[str, Sequence[Any]]:
            grants = "\n".join(sorted(run.tool_grants))
            return "UPDATE gateway_runs SET model_calls = ?, tool_grants = ? WHERE run_id = ?", (
                run.model_calls,
                grants,
                run.spec.run_id,
            )

        return await self._counting_burst(tx, items, count, update)

    async def _counting_burst(
        self,
        tx: Tx,
        items: Sequence[_BeginItem | _ToolItem],
        count: Callable[[_RunRow, Any], tuple[_RunRow, T]],
        update: Callable[[_RunRow], tuple[str, Sequence[Any]]],
    ) -> list[T | Refused]:
        """Boundaries arriving together, each exactly as alone and in arrival order, in a few statements:
        one locked read of their runs; `count` checks each against its run as the boundaries before it
        left it (raising its refusal, which refuses that boundary alone) and counts it; then `update`
        writes each run counted, once."""
        runs = await self._run_rows(tx, [item.run_id for item in items])
        counted: dict[str, _RunRow] = {}
        answers: list[T | Refused] = []
        for item in items:
            run = runs.get(item.run_id)
            try:
                if run is None:
                    raise _no_run(item.run_id)
                run, answer = count(run, item)
            except EgbeError as error:
                answers.append(Refused(error))
                continue
            runs[item.run_id] = counted[item.run_id] = run
            answers.append(answer)
        tx.execute_together([update(run) for run in counted.values()])
        return answers

    async def record_call(self, entry: AuditEntry, *, holder: str) -> LeaseCharge:
        """Write the call's audit record and move its tokens from reservation to consumption, together;
        what the recording gateway (`holder`) must take from its lease beyond the run's reservation.
        Calls arriving together are applied by one `_call_burst`."""
        charge = await self.transact_item(_CallItem(entry, holder), self._call_burst, durable=False)
        assert isinstance(charge, LeaseCharge)  # (a call without a completion answers its charge)
        return charge

    async def count_tool_call(self, run_id: str, tool_name: str) -> tuple[int, int]:
        """A tool boundary: the run is active and the tool was granted to its model calls (the caller
        checked the controls in its pushed view); count it; (used, remaining).

        Grants come only from the trusted prompt part the cognition service builds, never from model
        output or an untrusted zone, so this is where an injected "use tool X" is stopped. Tool
        boundaries arriving together are checked and counted by one `_tool_burst`.
        """

        counted: tuple[int, int] = await self.transact_item(
            _ToolItem(run_id, tool_name), self._tool_burst, durable=False
        )
        return counted

    async def _tool_burst(self, tx: Tx, items: list[_ToolItem]) -> list[tuple[int, int] | Refused]:
        """Tool boundaries: each counts a tool call of a granted tool."""

        def count(run: _RunRow, item: _ToolItem) -> tuple[_RunRow, tuple[int, int]]:
            self._refuse_ended(run)
            run_id, limit = run.spec.run_id, run.spec.max_tool_calls
            if item.tool_name not in run.tool_grants:
                granted = ", ".join(sorted(run.tool_grants)) or "none"
                raise PermissionDenied(
                    f"tool {item.tool_name!r} was not granted to run {run_id} (granted: {granted})",
                    violations=[
                        FieldViolation("tool_name", "must name a tool granted to the run's model calls")
                    ],
                )
            if run.tool_calls >= limit:
                raise ResourceExhausted(
                    f"run {run_id} used all {limit} tool calls of its {run.spec.tier_name} budget"
                    " (max_tool_calls)",
                    metadata={"limit": "max_tool_calls", "run_id": run_id},
                )
            return dataclasses.replace(run, tool_calls=run.tool_calls + 1), (
                run.tool_calls + 1,
                limit - run.tool_calls - 1,
            )

        def update(run: _RunRow) -> tuple[str, Sequence[Any]]:
            return "UPDATE gateway_runs SET tool_calls = ? WHERE run_id = ?", (
                run.tool_calls,
                run.spec.run_id,
            )

        return await self._counting_burst(tx, items, count, update)

    async def end_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        detail: str,
        stats: dict[str, Any],
        now_ms: int,
        result: str = "",
    ) -> RunEnd:
        """Reconcile and release; `result` is kept for repeats of the request id. Idempotent. Endings
        arriving together are applied by one `_end_burst`."""
        item = _EndItem(run_id, _RunEnding(status, detail, json.dumps(stats, sort_keys=True), now_ms, result))
        ended: RunEnd = await self.transact_item(item, self._end_burst, durable=False)
        return ended

    async def _end_burst(self, tx: Tx, items: list[_EndItem]) -> list[RunEnd | Refused]:
        """Each item exactly as a lone ending would apply it, in a few statements for the burst: one locked
        read of the runs, one update per run, one ledger statement per world window. An item naming no
        run is refused alone; a run ended twice in the burst is ended by the first."""
        runs = await self._run_rows(tx, [item.run_id for item in items])
        writes, ledger = _Statements(tx), _LedgerChanges()
        answers: list[RunEnd | Refused] = []
        for item in items:
            run = runs.get(item.run_id)
            if run is None:
                answers.append(Refused(_no_run(item.run_id)))
            elif run.status is not RunStatus.ACTIVE:
                answers.append(RunEnd(run.used_tokens, 0, ended_now=False, lease_return=run.released_tokens))
            else:
                released = _end(writes, ledger, run, item.ending)
                runs[item.run_id] = dataclasses.replace(
                    run, status=item.ending.status, released_tokens=released
                )
                answers.append(RunEnd(run.used_tokens, released, ended_now=True, lease_return=released))
        ledger.write(writes)
        tx.execute_together(writes.gathered)
        return answers

    async def finish_call(
        self,
        entry: AuditEntry,
        *,
        holder: str,
        stats: dict[str, Any],
        now_ms: int,
        result: str = "",
        admission: AdmissionItem | None = None,
    ) -> RunEnd:
        """A fused run's call and its completion in one transaction: the audit record with its ledger
        update, and the release of what the run reserved but did not use. Finishes arriving together are
        applied by one `_call_burst` (answered once applied, as `record_call` and `end_run` are)."""
        completion = _RunEnding(RunStatus.COMPLETED, "", json.dumps(stats, sort_keys=True), now_ms, result)
        ended = await self.transact_item(
            _CallItem(entry, holder, completion, admission), self._call_burst, durable=False
        )
        assert isinstance(ended, RunEnd)  # (a call with a completion answers the run's ending)
        return ended

    async def _call_burst(self, tx: Tx, items: list[_CallItem]) -> list[RunEnd | LeaseCharge | Refused]:
        """Each call exactly as alone, in arrival order (`record_call`, or for a fused run's finish
        `record_call` then `end_run`), in a few statements for the burst: one locked read of the runs
        written before, one multi-row audit insert, one run insert (the fused runs not written yet,
        already ended) or update each, one ledger statement per world window and one per lease. A run a
        control already ended keeps its ending (its call is still audited and consumed). A call naming
        no run is refused alone."""
        fresh = {i.admission.run.run_id: i.admission for i in items if i.admission is not None}
        runs = {run_id: admission.fresh_row() for run_id, admission in fresh.items()}
        runs.update(await self._run_rows(tx, [i.entry.run_id for i in items if i.admission is None]))
        ledger = _LedgerChanges()
        endings: dict[str, _Ending] = {}
        # Each run's row is written by one statement (PostgreSQL applies one of two updates of a row in
        # one statement): the tokens of runs the burst does not end, summed; an ending holds every call.
        consumed_only: dict[str, int] = {}
        audited: list[tuple[Any, ...]] = []
        answers: list[RunEnd | LeaseCharge | Refused] = []
        for item in items:
            entry = item.entry
            run = runs.get(entry.run_id)
            if run is None:
                answers.append(Refused(_no_run(entry.run_id)))
                continue
            tokens = entry.usage.total
            used = run.used_tokens + tokens
            leaving, beyond = _charge(run, tokens, item.holder)
            charge = LeaseCharge((run.spec.world_id, run.window_start_ms), beyond)
            audited.append(_audit_row(entry))
            completion = item.completion
            if completion is not None and run.status is RunStatus.ACTIVE:
                # The call's tokens move from the reservation to consumption; the rest is released: to the
                # run's lease (its holder learns it from `lease_return`), or for a run admitted before
                # leases to the ledger, so its whole unused reservation leaves `reserved_tokens`.
                released = max(0, run.unused_reservation - tokens)
                ledger.consumed(
                    run, tokens, leaving if run.lease_holder else run.unused_reservation, entry.micro_usd
                )
                endings[entry.run_id] = _Ending(
                    used, completion.stats, completion.now_ms, completion.result, released
                )
                consumed_only.pop(entry.run_id, None)  # (in the ending's `used`)
                answers.append(RunEnd(used, released, True, lease_return=released, lease_charge=charge))
                run = dataclasses.replace(run, status=RunStatus.COMPLETED, released_tokens=released)
            else:
                ledger.consumed(run, tokens, leaving, entry.micro_usd)
                ending = endings.get(entry.run_id)
                if ending is not None:  # ended earlier in this burst
                    endings[entry.run_id] = dataclasses.replace(ending, used_tokens=used)
                else:
                    consumed_only[entry.run_id] = consumed_only.get(entry.run_id, 0) + tokens
                if completion is None:
                    answers.append(charge)
                else:
                    answers.append(
                        RunEnd(used, 0, False, lease_return=run.released_tokens, lease_charge=charge)
                    )
            runs[entry.run_id] = dataclasses.replace(run, used_tokens=used)
        # Each run, audit record, ledger window and lease is written once, so the writes go together.
        writes = _Statements(tx)
        if fresh:
            _, inserted = await self._decide(tx, list(fresh.values()), ledger, endings)
            writes.insert(*_RUN_TABLE, inserted)
        writes.insert(*_AUDIT_TABLE, audited)
        writes.executemany(
            _COMPLETE_RUN,
            [ending.update(run_id) for run_id, ending in endings.items() if run_id not in fresh],
        )
        writes.executemany(
            "UPDATE gateway_runs SET used_tokens = used_tokens + ? WHERE run_id = ?",
            [(tokens, run_id) for run_id, tokens in consumed_only.items()],
        )
        ledger.write(writes)
        tx.execute_together(writes.gathered)
        return answers

    async def expire_runs(self, *, now_ms: int) -> int:
        """Time out every active run past its deadline, releasing its reservation."""

        async def body(tx: Tx) -> int:
            rows = await tx.all(
                f"SELECT {_RUN_COLUMNS} FROM gateway_runs WHERE status = ? AND deadline_ms <"
                f" ?{self._lock_in_order}",
                (RunStatus.ACTIVE.value, now_ms),
            )
            ledger = _LedgerChanges()
            ending = _RunEnding(RunStatus.TIMED_OUT, "run deadline passed", "{}", now_ms)
            for row in rows:
                _end(tx, ledger, _run_from(row), ending)
            ledger.write(tx)
            return len(rows)

        return await self.transact(body, durable=False)

    # -- controls -----------------------------------------------------------------------------------
    async def add_control(self, control: Control) -> ControlAdded:
        """Commit a control and end every active run it matches, with its operator audit row; or, while
        an identical control (kind, scope, target, world) still applies, answer that one and commit only
        the attempt's audit row. Serialized on that identity, so gateways sharing the store never commit
        two."""
        scope, target, world_id = control.scope, control.target, control.world_id
        now_ms = control.created_at_ms
        identity = f"{int(control.kind)}:{int(scope)}:{target}:{world_id}"

        async def body(tx: Tx) -> ControlAdded:
            tx.serialize([f"control:{identity}"])
            row = await tx.one(
                f"SELECT {_CONTROL_COLUMNS} FROM gateway_controls WHERE kind = ? AND scope = ? AND target = ?"
                f" AND world_id = ? AND {_APPLIES} ORDER BY seq LIMIT 1",
                (control.kind, scope, target, world_id, now_ms),
            )
            existing = None if row is None else _control_from(row)
            where = f" in {world_id}" if world_id else ""
            await self._record_attempt(
                tx,
                f"{control.kind.name}:{scope.name}",
                role="operator",
                operator_id=control.operator_id,
                allowed=True,
                detail=f"{target}{where}: {control.reason}"
                + (f" (already active: {existing.control_id})" if existing else ""),
                now_ms=now_ms,
            )
            seen = await self._seen(tx, scope, target, world_id)
            if existing is not None:
                return ControlAdded(existing, 0, existing=True, seen=seen)
            tx.execute(
                f"INSERT INTO gateway_controls ({_CONTROL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
                (
                    control.control_id,
                    control.kind,
                    scope,
                    target,
                    control.reason,
                    control.operator_id,
                    now_ms,
                    world_id,
                    control.expires_at_ms,
                ),
            )
            filters = [_RUN_FILTER[scope]]
            values = [_run_value(scope, target)]
            if world_id:
                filters.append("world_id = ?")
                values.append(world_id)
            rows = await tx.all(
                f"SELECT {_RUN_COLUMNS} FROM gateway_runs WHERE status = ? AND {' AND '.join(filters)}"
                f"{self._lock_in_order}",
                (RunStatus.ACTIVE.value, *values),
            )
            ledger = _LedgerChanges()
            ending = _RunEnding(RunStatus.KILLED, control.describe(), "{}", now_ms)
            for run_row in rows:
                _end(tx, ledger, _run_from(run_row), ending)
            ledger.write(tx)
            tx.notify(control.control_id)
            return ControlAdded(control, len(rows), existing=False, seen=seen or bool(rows))

        added = await self.transact(body)
        if not added.existing:
            self._publish([control])
        return added

    @staticmethod
    async def _seen(tx: Tx, scope: ControlScope, target: str, world_id: str) -> bool:
        """Whether an Ori (a model call of it in the audit log, in the world when one is named) or a world
        (a ledger window) was ever seen; a tier or a tenant counts as seen."""
        if scope is ControlScope.WORLD:
            row = await tx.one("SELECT 1 FROM gateway_ledger WHERE world_id = ? LIMIT 1", (target,))
        elif scope is ControlScope.ORI:
            row = await tx.one(
                "SELECT 1 FROM gateway_audit WHERE ori_id = ? AND (? = '' OR world_id = ?) LIMIT 1",
                (target, world_id, world_id),
            )
        else:
            return True
        return row is not None

    async def lift_controls(
        self,
        scope: ControlScope,
        target: str,
        *,
        world_id: str,
        reason: str,
        operator_id: str,
        now_ms: int,
    ) -> list[Control]:
        """Resume: deactivate every control on the scope and target that still applies (only those of
        `world_id` when it is set, else whatever their world), with the attempt's audit row; none is
        NOT_FOUND naming the target (nothing committed)."""
        where = f"{_APPLIES} AND scope = ? AND target = ? AND (? = '' OR world_id = ?)"
        params = (now_ms, scope, target, world_id, world_id)

        async def body(tx: Tx) -> list[Control]:
            rows = await tx.all(f"SELECT {_CONTROL_COLUMNS} FROM gateway_controls WHERE {where}", params)
            if not rows:
                place = f" in world {world_id!r}" if world_id else ""
                raise NotFound(
                    f"no active control on {scope.name.lower()} {target!r}{place} to resume",
                    metadata={"target": target},
                    violations=[FieldViolation("target", "no active control names it")],
                )
            tx.execute(
                f"UPDATE gateway_controls SET active = 0, lifted_at_ms = ? WHERE {where}", (now_ms, *params)
            )
            await self._record_attempt(
                tx,
                f"RESUME:{scope.name}",
                role="operator",
                operator_id=operator_id,
                allowed=True,
                detail=f"{target}{f' in {world_id}' if world_id else ''}: {reason}",
                now_ms=now_ms,
            )
            lifted = [dataclasses.replace(_control_from(row), active=False) for row in rows]
            for control in lifted:
                tx.notify(control.control_id)
            return lifted

        lifted = await self.transact(body)
        self._publish(lifted)
        return lifted

    async def get_control(self, control_id: str) -> Control | None:
        async def body(tx: Tx) -> Control | None:
            row = await tx.one(
                f"SELECT {_CONTROL_COLUMNS} FROM gateway_controls WHERE control_id = ?", (control_id,)
            )
            return None if row is None else _control_from(row)

        return await self.transact(body, durable=False)

    async def list_controls(
        self, *, include_inactive: bool, after_seq: int, limit: int, now_ms: int
    ) -> list[tuple[int, Control]]:
        """Controls after `after_seq` in commit order: those that apply at `now_ms`, or every one."""

        async def body(tx: Tx) -> list[tuple[int, Control]]:
            rows = await tx.all(
                f"SELECT seq, {_CONTROL_COLUMNS} FROM gateway_controls"
                f" WHERE seq > ? AND (({_APPLIES}) OR ? = 1) ORDER BY seq LIMIT ?",
                (after_seq, now_ms, int(include_inactive), limit),
            )
            return [(row[0], _control_from(row[1:])) for row in rows]

        return await self.transact(body, durable=False)

    # -- limits operators change at run time, and the ledger by world ----------------------------------
    def on_limits_change(self, listener: Callable[[Limits], None]) -> None:
        """Called with every limit in force whenever one changes, by this process or (PostgreSQL) any
        other, and (PostgreSQL) when the push channel reconnects."""
        self._limits_listeners.append(listener)

    def _publish_limits(self, current: Limits) -> None:
        for listener in self._limits_listeners:
            listener(current)

    async def load_limits(self) -> Limits:
        return await self.transact(limits.load_limits, durable=False)

    async def set_world_cap(
        self, world_id: str, tokens_per_hour: int, *, operator_id: str, reason: str, now_ms: int
    ) -> Limits:
        """Commit a world's cap with its operator audit row, and push it to every gateway."""
        current = await self.transact(
            lambda tx: limits.set_world_cap(
                tx, world_id, tokens_per_hour, operator_id=operator_id, reason=reason, now_ms=now_ms
            )
        )
        self._publish_limits(current)
        return current

    async def set_run_budget(
        self, tier: int, budget: tuple[int, int, int], *, operator_id: str, reason: str, now_ms: int
    ) -> Limits:
        """Commit a tier's per-run budget with its operator audit row, and push it to every gateway."""
        current = await self.transact(
            lambda tx: limits.set_run_budget(
                tx, tier, budget, operator_id=operator_id, reason=reason, now_ms=now_ms
            )
        )
        self._publish_limits(current)
        return current

    async def list_worlds(
        self, *, after_world: str, limit: int, window_start_ms: int, now_ms: int
    ) -> list[limits.WorldLedger]:
        """A page of the worlds the ledger knows (`limits.world_ledgers`), each with the controls scoped to
        it that apply at `now_ms`."""

        async def body(tx: Tx) -> list[limits.WorldLedger]:
            worlds = await limits.world_ledgers(
                tx, after_world=after_world, limit=limit, window_start_ms=window_start_ms
            )
            if not worlds:
                return worlds
            by_id = {world.world_id: world for world in worlds}
            marks = ", ".join("?" * len(by_id))
            rows = await tx.all(
                f"SELECT {_CONTROL_COLUMNS} FROM gateway_controls WHERE {_APPLIES} AND"
                f" ((scope = ? AND target IN ({marks})) OR world_id IN ({marks})) ORDER BY seq",
                (now_ms, ControlScope.WORLD, *by_id, *by_id),
            )
            for row in rows:
                control = _control_from(row)
                by_id[control.world_id or control.target].controls.append(control)
            return worlds

        return await self.transact(body, durable=False, reads_ledger=True)

    # -- operator audit -----------------------------------------------------------------------------
    @staticmethod
    async def _record_attempt(
        tx: Tx, method: str, *, role: str, operator_id: str, allowed: bool, detail: str, now_ms: int
    ) -> None:
        tx.execute(
            "INSERT INTO gateway_operator_audit (method, role, operator_id, allowed, detail, recorded_at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (method, role, operator_id, int(allowed), detail, now_ms),
        )

    async def record_operator_attempt(
        self, method: str, *, role: str, operator_id: str, allowed: bool, detail: str, now_ms: int
    ) -> None:
        await self.transact(
            lambda tx: self._record_attempt(
                tx, method, role=role, operator_id=operator_id, allowed=allowed, detail=detail, now_ms=now_ms
            )
        )

    async def list_operator_attempts(
        self,
        *,
        limit: int,
        after_seq: int = 0,
        allowed: bool | None = None,
        method: str = "",
        operator_id: str = "",
    ) -> list[OperatorAttempt]:
        """Audited operator attempts after `after_seq`, oldest first; `allowed` None means both."""

        async def body(tx: Tx) -> list[OperatorAttempt]:
            rows = await tx.all(
                "SELECT seq, method, role, operator_id, allowed, detail, recorded_at_ms"
                " FROM gateway_operator_audit WHERE seq > ? AND (? = -1 OR allowed = ?)"
                " AND (? = '' OR method = ?) AND (? = '' OR operator_id = ?) ORDER BY seq LIMIT ?",
                (
                    after_seq,
                    *(2 * [-1 if allowed is None else int(allowed)]),
                    method,
                    method,
                    operator_id,
                    operator_id,
                    limit,
                ),
            )
            return [
                OperatorAttempt(row[0], row[1], row[2], row[3], bool(row[4]), row[5], row[6]) for row in rows
            ]

        return await self.transact(body, durable=False)

    # -- audit log and spend ------------------------------------------------------------------------
    async def list_audit(
        self, *, ori_id: str, tier: int, run_id: str, after_seq: int, limit: int, kernel_call_id: str = ""
    ) -> list[AuditEntry]:
        async def body(tx: Tx) -> list[AuditEntry]:
            rows = await tx.all(
                f"SELECT seq, {_AUDIT_COLUMNS} FROM gateway_audit WHERE seq > ? AND (? = '' OR ori_id = ?)"
                " AND (? = 0 OR tier = ?) AND (? = '' OR run_id = ?) AND (? = '' OR kernel_call_id = ?)"
                " ORDER BY seq LIMIT ?",
                (after_seq, *(2 * [ori_id]), *(2 * [tier]), *(2 * [run_id]), *(2 * [kernel_call_id]), limit),
            )
            return [_audit_from(row) for row in rows]

        return await self.transact(body, durable=False)

    async def spend(self, *, world_id: str, tenant_id: str, window_start_ms: int) -> Spend:
        """The ledger (one world, or all) and audited spend by tier, summed over every window from the one
        starting at `window_start_ms` to the current one. `reserved_tokens` is what active runs reserved
        and have not consumed; `leased_tokens` the ledger's own reservation (every lease, which holds
        those runs' reservations and what its gateway has not given to a run yet)."""

        async def body(tx: Tx) -> Spend:
            ledger = await tx.one(
                "SELECT COALESCE(MAX(cap_tokens), 0), COALESCE(SUM(reserved_tokens), 0),"
                " COALESCE(SUM(consumed_tokens), 0), COALESCE(SUM(consumed_micro_usd), 0),"
                " COALESCE(SUM(admissions), 0), COALESCE(SUM(blocked_by_world_cap), 0),"
                " COALESCE(SUM(killed), 0), COALESCE(SUM(killed_in_flight), 0)"
                " FROM gateway_ledger WHERE window_start_ms >= ? AND (? = '' OR world_id = ?)",
                (window_start_ms, world_id, world_id),
            )
            assert ledger is not None  # an aggregate always answers one row
            runs = await tx.one(
                "SELECT COALESCE(SUM(CASE WHEN reserved_tokens > used_tokens"
                " THEN reserved_tokens - used_tokens ELSE 0 END), 0) FROM gateway_runs"
                " WHERE status = ? AND window_start_ms >= ? AND (? = '' OR world_id = ?)",
                (RunStatus.ACTIVE.value, window_start_ms, world_id, world_id),
            )
            assert runs is not None
            tiers = await tx.all(
                "SELECT tier, SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens),"
                " SUM(micro_usd), COUNT(*) FROM gateway_audit WHERE recorded_at_ms >= ?"
                " AND (? = '' OR world_id = ?) AND (? = '' OR tenant_id = ?) GROUP BY tier ORDER BY tier",
                (window_start_ms, world_id, world_id, tenant_id, tenant_id),
            )
            cap, leased, consumed, micro_usd, admissions, blocked, killed, killed_in_flight = (
                int(v) for v in ledger
            )
            return Spend(
                world_cap_tokens=cap,
                reserved_tokens=int(runs[0]),
                leased_tokens=leased,
                consumed_tokens=consumed,
                consumed_micro_usd=micro_usd,
                admissions=admissions,
                blocked_by_world_cap=blocked,
                killed=killed,
                killed_in_flight=killed_in_flight,
                by_tier=[TierSpend(int(t), int(tok), int(usd), int(n)) for t, tok, usd, n in tiers],
            )

        return await self.transact(body, durable=False, reads_ledger=True)

    async def ledger_totals(self) -> tuple[int, int]:
        """(reserved, consumed) over every world and window: the invariant checks read this."""

        async def body(tx: Tx) -> tuple[int, int]:
            row = await tx.one(
                "SELECT COALESCE(SUM(reserved_tokens), 0), COALESCE(SUM(consumed_tokens), 0) FROM"
                " gateway_ledger"
            )
            assert row is not None
            return int(row[0]), int(row[1])

        return await self.transact(body, durable=False, reads_ledger=True)

    async def audited_tokens(self) -> int:
        async def body(tx: Tx) -> int:
            row = await tx.one(
                "SELECT COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens +"
                " cache_write_tokens), 0)"
                " FROM gateway_audit"
            )
            assert row is not None
            return int(row[0])

        return await self.transact(body, durable=False)

    async def recent_run_stats(self, *, limit: int) -> list[dict[str, Any]]:
        """The stats of the most recently ended runs, newest first."""

        async def body(tx: Tx) -> list[dict[str, Any]]:
            rows = await tx.all(
                "SELECT stats FROM gateway_runs WHERE ended_at_ms IS NOT NULL ORDER BY ended_at_ms DESC"
                " LIMIT ?",
                (limit,),
            )
            return [json.loads(row[0]) for row in rows]

        return await self.transact(body, durable=False)

    async def load_controls(self) -> list[Control]:
        """Every active control, read before the gateway serves."""

        async def body(tx: Tx) -> list[Control]:
            return [
                _control_from(row)
                for row in await tx.all(
                    f"SELECT {_CONTROL_COLUMNS} FROM gateway_controls WHERE active = 1 ORDER BY seq"
                )
            ]

        return await self.transact(body, durable=False)
