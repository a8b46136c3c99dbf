"""Runs in the store: admission decisions, model and tool boundaries, calls and endings.

Each is applied by one burst transaction for whatever arrives together (the writer's `combine`), each
item exactly as alone and in arrival order: one locked read of the runs, one statement per table.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.budget import call_grant
from gateway.errors import BudgetExhausted, GatewayError, NoSuchRun, RunEnded, RunKilled, ToolNotGranted
from gateway.records import Admission, AuditEntry, CallGrant, LeaseCharge, RunEnd, RunSpec, RunStatus
from gateway.store.group_commit import Refused
from gateway.store.ledger import LedgerChanges, end_run_row
from gateway.store.rows import (
    AUDIT_TABLE,
    COMPLETE_RUN,
    RUN_COLUMNS,
    RUN_TABLE,
    AdmissionItem,
    AdmissionOutcome,
    Ending,
    RunEnding,
    RunRow,
    audit_row,
    lease_charge,
    run_from,
)
from gateway.store.tx import Statements, StoreCore, T, Tx, insert_rows


@dataclass(frozen=True)
class _CallItem:
    """One model call's audit record waiting for the writer, recorded by gateway `holder`; with a
    `completion` (a completed ending), its fused run ends with it."""

    entry: AuditEntry
    holder: str
    completion: RunEnding | None = None
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
    ending: RunEnding


class RunStore(StoreCore):
    """Admission decisions, boundaries, calls and endings of runs."""

    async def _run_rows(self, tx: Tx, run_ids: Sequence[str], *, lock: bool = True) -> dict[str, RunRow]:
        """These runs' rows (those that exist), locked until the transaction ends unless `lock` is
        false: one read for a burst."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        rows = await tx.all(
            f"SELECT {RUN_COLUMNS} FROM gateway_runs WHERE run_id IN ({', '.join('?' * len(ids))})"
            f"{self._lock_in_order if lock else ''}",
            ids,
        )
        return {row[0]: run_from(row) for row in rows}

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
        ledger = LedgerChanges()
        answers, rows = await self._decide(tx, items, ledger, {})
        insert_rows(tx, *RUN_TABLE, rows)
        ledger.write(tx)
        return answers

    async def _decide(
        self, tx: Tx, items: list[AdmissionItem], ledger: LedgerChanges, endings: dict[str, Ending]
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
            ending = endings.get(run.run_id)
            inserted.append(item.row(ending))
            if ending is None:  # (a fused run is written ended: it never holds its reservation)
                ledger.run_admitted(item)
            answers.append(Admission(run, True, run.max_tokens))
            if run.request_id:  # a repeat later in this burst answers this run
                earlier[run.request_id] = Admission(run, True, run.max_tokens, repeated=True)
        return answers, inserted

    @staticmethod
    async def _earlier_admissions(tx: Tx, request_ids: list[str]) -> dict[str, Admission]:
        """The runs already admitted under these request ids (a repeat answers the first run)."""
        if not request_ids:
            return {}
        rows = await tx.all(
            f"SELECT {RUN_COLUMNS}, result FROM gateway_runs WHERE request_id IN"
            f" ({', '.join('?' * len(request_ids))})",
            request_ids,
        )
        earlier = {}
        for row in rows:
            spec = run_from(row).spec
            earlier[str(spec.request_id)] = Admission(
                spec, True, spec.max_tokens, repeated=True, earlier_result=row[-1]
            )
        return earlier

    def _refuse_ended(self, run: RunRow) -> None:
        if run.status is RunStatus.ACTIVE:
            return
        if run.status is RunStatus.KILLED:
            raise RunKilled(run.spec.run_id, run.detail)
        raise RunEnded(run.spec.run_id, run.status.value)

    async def get_run(self, run_id: str) -> RunSpec:
        """A run's spec, for a run this gateway is not serving (admitted by another gateway, or before a
        restart). Reads arriving together are one read (`_read_runs`)."""
        spec: RunSpec = await self.transact_item(run_id, self._read_runs, durable=False)
        return spec

    async def _read_runs(self, tx: Tx, run_ids: list[str]) -> list[RunSpec | Refused]:
        runs = await self._run_rows(tx, run_ids, lock=False)
        return [run.spec if (run := runs.get(run_id)) else Refused(NoSuchRun(run_id)) for run_id in run_ids]

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

        def count(run: RunRow, item: _BeginItem) -> tuple[RunRow, CallGrant]:
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

        def update(run: RunRow) -> tuple[str, Sequence[Any]]:
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
        count: Callable[[RunRow, Any], tuple[RunRow, T]],
        update: Callable[[RunRow], tuple[str, Sequence[Any]]],
    ) -> list[T | Refused]:
        """Boundaries arriving together, each exactly as alone and in arrival order, in a few statements:
        one locked read of their runs; `count` checks each against its run as the boundaries before it
        left it (raising its refusal, which refuses that boundary alone) and counts it; then `update`
        writes each run counted, once."""
        runs = await self._run_rows(tx, [item.run_id for item in items])
        counted: dict[str, RunRow] = {}
        answers: list[T | Refused] = []
        for item in items:
            run = runs.get(item.run_id)
            try:
                if run is None:
                    raise NoSuchRun(item.run_id)
                run, answer = count(run, item)
            except GatewayError as error:
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
        self.audit_written(entry)
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

        def count(run: RunRow, item: _ToolItem) -> tuple[RunRow, tuple[int, int]]:
            self._refuse_ended(run)
            run_id, limit = run.spec.run_id, run.spec.max_tool_calls
            if item.tool_name not in run.tool_grants:
                raise ToolNotGranted(run_id, item.tool_name, ", ".join(sorted(run.tool_grants)) or "none")
            if run.tool_calls >= limit:
                raise BudgetExhausted(
                    f"run {run_id} used all {limit} tool calls of its {run.spec.tier_name} budget"
                    " (max_tool_calls)",
                    limit="max_tool_calls",
                    run_id=run_id,
                )
            return dataclasses.replace(run, tool_calls=run.tool_calls + 1), (
                run.tool_calls + 1,
                limit - run.tool_calls - 1,
            )

        def update(run: RunRow) -> tuple[str, Sequence[Any]]:
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
        item = _EndItem(run_id, RunEnding(status, detail, json.dumps(stats, sort_keys=True), now_ms, result))
        ended: RunEnd = await self.transact_item(item, self._end_burst, durable=False)
        return ended

    async def _end_burst(self, tx: Tx, items: list[_EndItem]) -> list[RunEnd | Refused]:
        """Each item exactly as a lone ending would apply it, in a few statements for the burst: one locked
        read of the runs, one update per run, one ledger statement per world window. An item naming no
        run is refused alone; a run ended twice in the burst is ended by the first."""
        runs = await self._run_rows(tx, [item.run_id for item in items])
        writes, ledger = Statements(tx), LedgerChanges()
        answers: list[RunEnd | Refused] = []
        for item in items:
            run = runs.get(item.run_id)
            if run is None:
                answers.append(Refused(NoSuchRun(item.run_id)))
            elif run.status is not RunStatus.ACTIVE:
                answers.append(RunEnd(run.used_tokens, 0, ended_now=False, lease_return=run.released_tokens))
            else:
                released = end_run_row(writes, ledger, run, item.ending)
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
        completion = RunEnding(RunStatus.COMPLETED, "", json.dumps(stats, sort_keys=True), now_ms, result)
        ended = await self.transact_item(
            _CallItem(entry, holder, completion, admission), self._call_burst, durable=False
        )
        self.audit_written(entry)
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
        ledger = LedgerChanges()
        endings: dict[str, Ending] = {}
        # Each run's row is written by one statement (PostgreSQL applies one of two updates of a row in
        # one statement): the tokens of runs the burst does not end, summed; an ending holds every call.
        consumed_only: dict[str, int] = {}
        audited: list[tuple[Any, ...]] = []
        answers: list[RunEnd | LeaseCharge | Refused] = []
        for item in items:
            entry = item.entry
            run = runs.get(entry.run_id)
            if run is None:
                answers.append(Refused(NoSuchRun(entry.run_id)))
                continue
            tokens = entry.usage.total
            used = run.used_tokens + tokens
            leaving, beyond = lease_charge(run, tokens, item.holder)
            charge = LeaseCharge((run.spec.world_id, run.window_start_ms), beyond)
            audited.append(audit_row(entry))
            completion = item.completion
            if run.status is RunStatus.ACTIVE and entry.run_id not in fresh:  # (a fused run is written ended)
                # What the run held leaves it: the call's tokens, or at its completion all it has left.
                ledger.run_unreserved(
                    run, min(tokens, run.unused_reservation) if completion is None else run.unused_reservation
                )
            if completion is not None and run.status is RunStatus.ACTIVE:
                # The call's tokens move from the reservation to consumption; the rest is released: to the
                # run's lease (its holder learns it from `lease_return`), or for a run admitted before
                # leases to the ledger, so its whole unused reservation leaves `reserved_tokens`.
                released = max(0, run.unused_reservation - tokens)
                ledger.consumed(run, entry, leaving if run.lease_holder else run.unused_reservation)
                endings[entry.run_id] = Ending(
                    used, completion.stats, completion.now_ms, completion.result, released
                )
                consumed_only.pop(entry.run_id, None)  # (in the ending's `used`)
                answers.append(RunEnd(used, released, True, lease_return=released, lease_charge=charge))
                run = dataclasses.replace(run, status=RunStatus.COMPLETED, released_tokens=released)
            else:
                ledger.consumed(run, entry, leaving)
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
        writes = Statements(tx)
        if fresh:
            _, inserted = await self._decide(tx, list(fresh.values()), ledger, endings)
            writes.insert(*RUN_TABLE, inserted)
        writes.insert(*AUDIT_TABLE, audited)
        writes.executemany(
            COMPLETE_RUN,
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
                f"SELECT {RUN_COLUMNS} FROM gateway_runs WHERE status = ? AND deadline_ms <"
                f" ?{self._lock_in_order}",
                (RunStatus.ACTIVE.value, now_ms),
            )
            ledger = LedgerChanges()
            ending = RunEnding(RunStatus.TIMED_OUT, "run deadline passed", "{}", now_ms)
            for row in rows:
                end_run_row(tx, ledger, run_from(row), ending)
            ledger.write(tx)
            return len(rows)

        return await self.transact(body, durable=False)
