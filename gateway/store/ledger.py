"""The ledger of world caps and this store's leases of it.

`LedgerChanges` gathers what one transaction changes in the ledger and writes it with one statement per
world window, one per window's tenant and tier (its audited calls, `gateway_tier_spend`) and one per
lease, in key order (docs/gateway.md "Lock order"); `DeferredLedger` holds a
batch's changes to its end. `LeaseStore` leases blocks of a world window's cap to a gateway, takes them
back, and settles what a gateway's previous life left leased.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.records import AuditEntry, RunStatus
from gateway.store.rows import (
    AUDIT_TABLE,
    END_RUN,
    RUN_COLUMNS,
    AdmissionItem,
    AdmissionOutcome,
    RunEnding,
    RunRow,
    audit_row,
    run_from,
)
from gateway.store.tx import Statements, StoreCore, Tx, insert_rows

# Where `LedgerChanges` counts each admission decision in a window's change.
_COUNTER_OF = {AdmissionOutcome.ADMITTED: 1, AdmissionOutcome.BLOCKED: 2, AdmissionOutcome.KILLED: 3}
# Audited calls added to a window's tenant's and tier's spend (what GetSpend's `by_tier` sums): kept with
# the ledger so that reading them never scans the audit log.
_ADD_TIER_SPEND = (
    "INSERT INTO gateway_tier_spend (world_id, window_start_ms, tenant_id, tier, tokens, micro_usd, calls)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (world_id, window_start_ms, tenant_id, tier) DO UPDATE SET"
    " tokens = gateway_tier_spend.tokens + excluded.tokens,"
    " micro_usd = gateway_tier_spend.micro_usd + excluded.micro_usd,"
    " calls = gateway_tier_spend.calls + excluded.calls"
)


class LedgerChanges:
    """What one transaction changes in the ledger, gathered and then written with one statement per
    world window and one per lease (`write`), however many admissions and calls it holds."""

    def __init__(self) -> None:
        # (world, window) -> [cap (-1: no admission told it), admissions, blocked, killed,
        #                     from reservations, consumed, micro-USD, killed in flight, calls,
        #                     held by active runs]
        self._windows: dict[tuple[str, int], list[int]] = {}
        # (world, window, tenant, tier) -> [tokens, micro-USD, calls] of the audited calls
        self._tiers: dict[tuple[str, int, str, int], list[int]] = {}
        self._leases: dict[tuple[str, str, int], int] = {}

    def _window(self, world_id: str, window_start_ms: int) -> list[int]:
        return self._windows.setdefault((world_id, window_start_ms), [-1, 0, 0, 0, 0, 0, 0, 0, 0, 0])

    def _audited(self, key: tuple[str, int, str, int], tokens: int, micro_usd: int) -> None:
        """One audit record counted: in its window's calls and its tenant's and tier's spend."""
        self._window(key[0], key[1])[8] += 1
        tier = self._tiers.setdefault(key, [0, 0, 0])
        tier[0] += tokens
        tier[1] += micro_usd
        tier[2] += 1

    def decided(self, item: AdmissionItem, *, counted: bool = True) -> None:
        """An admission decision: the window's cap as the deciding gateway sees it, and (`counted`; a
        repeat of an admitted request id is not) its counter."""
        window = self._window(item.run.world_id, item.window_start_ms)
        window[0] = item.cap_tokens
        if counted:
            window[_COUNTER_OF[item.outcome]] += 1

    def run_admitted(self, item: AdmissionItem) -> None:
        """A run written active: its reservation is held by it (`runs_reserved_tokens`) until it is
        consumed or the run ends."""
        self._window(item.run.world_id, item.window_start_ms)[9] += item.run.max_tokens

    def run_unreserved(self, run: RunRow, tokens: int) -> None:
        """An active run's reservation no longer held by it: `tokens` consumed, or released at its end."""
        self._window(run.spec.world_id, run.window_start_ms)[9] -= tokens

    def lease_settled(self, entry: AuditEntry, window_start_ms: int) -> None:
        """A settled lease's tokens (its audit record's) from the ledger's reservation into consumption."""
        window = self._window(entry.world_id, window_start_ms)
        window[4] += entry.usage.total
        window[5] += entry.usage.total
        window[6] += entry.micro_usd
        self._audited(
            (entry.world_id, window_start_ms, entry.tenant_id, entry.tier), entry.usage.total, entry.micro_usd
        )

    def consumed(self, run: RunRow, entry: AuditEntry, from_reservation: int) -> None:
        """An audited call's tokens into consumption, counted in its run's window; what came from the
        run's reservation leaves `reserved_tokens`, and the lease it was drawn from."""
        window = self._window(run.spec.world_id, run.window_start_ms)
        window[4] += from_reservation
        window[5] += entry.usage.total
        window[6] += entry.micro_usd
        key = (run.spec.world_id, run.window_start_ms, entry.tenant_id, entry.tier)
        self._audited(key, entry.usage.total, entry.micro_usd)
        if run.lease_holder:
            self._leases[run.lease_key] = self._leases.get(run.lease_key, 0) + from_reservation

    def ended(self, run: RunRow, released: int, *, killed: bool) -> None:
        """A run's ending: what it released leaves `reserved_tokens` for a run admitted before leases
        (a lease's run hands it back to its lease, in the holder's memory); a kill is counted, as a
        kill in flight."""
        window = self._window(run.spec.world_id, run.window_start_ms)
        window[4] += 0 if run.lease_holder else released
        window[3] += killed
        window[7] += killed
        self.run_unreserved(run, released)

    def merge(self, other: LedgerChanges) -> None:
        """`other`'s changes added to these (an admission's cap: the latest told)."""
        for key, change in other._windows.items():
            window = self._window(*key)
            window[0] = change[0] if change[0] >= 0 else window[0]
            for index in range(1, len(change)):
                window[index] += change[index]
        for tier_key, spend in other._tiers.items():
            tier = self._tiers.setdefault(tier_key, [0, 0, 0])
            for index, value in enumerate(spend):
                tier[index] += value
        for lease, tokens in other._leases.items():
            self._leases[lease] = self._leases.get(lease, 0) + tokens

    def write(self, tx: Tx | Statements) -> None:
        """Written now, or (a batch of several bodies) at the batch's end with every other body's."""
        if tx.deferred is not None:
            tx.deferred.stage(self)
        else:
            self.write_now(tx)

    def write_now(self, tx: Tx | Statements) -> None:
        """Windows, then tenants' and tiers' spend, then leases, each in key order (the lock order,
        docs/gateway.md "Lock order"); a window nothing changed (a lease's run ended, no kill) is not
        written, nor locked. (A tier's spend changes only with its window's calls, so a transaction
        that locks a tier's row already holds its window's.)"""
        for (world_id, window_start_ms), change in sorted(self._windows.items()):
            (
                cap,
                admissions,
                blocked,
                killed,
                from_reservations,
                consumed,
                micro_usd,
                in_flight,
                calls,
                held,
            ) = change
            if cap < 0 and not any(change[1:]):
                continue
            if cap >= 0:  # an admission's window: created if new (`_LOCK_LEDGER`'s upsert, counted)
                tx.execute(
                    "INSERT INTO gateway_ledger (world_id, window_start_ms, cap_tokens, admissions,"
                    " blocked_by_world_cap, killed, reserved_tokens, consumed_tokens, consumed_micro_usd,"
                    " killed_in_flight, calls, runs_reserved_tokens)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (world_id, window_start_ms) DO UPDATE"
                    " SET cap_tokens = excluded.cap_tokens,"
                    " admissions = gateway_ledger.admissions + excluded.admissions,"
                    " blocked_by_world_cap = gateway_ledger.blocked_by_world_cap"
                    " + excluded.blocked_by_world_cap,"
                    " killed = gateway_ledger.killed + excluded.killed,"
                    " reserved_tokens = gateway_ledger.reserved_tokens + excluded.reserved_tokens,"
                    " consumed_tokens = gateway_ledger.consumed_tokens + excluded.consumed_tokens,"
                    " consumed_micro_usd = gateway_ledger.consumed_micro_usd + excluded.consumed_micro_usd,"
                    " killed_in_flight = gateway_ledger.killed_in_flight + excluded.killed_in_flight,"
                    " calls = gateway_ledger.calls + excluded.calls, runs_reserved_tokens ="
                    " gateway_ledger.runs_reserved_tokens + excluded.runs_reserved_tokens",
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
                        calls,
                        held,
                    ),
                )
            else:  # (no admission: no admission counters; kills here are kills in flight)
                tx.execute(
                    "UPDATE gateway_ledger SET reserved_tokens = reserved_tokens - ?,"
                    " consumed_tokens = consumed_tokens + ?, consumed_micro_usd = consumed_micro_usd + ?,"
                    " killed = killed + ?, killed_in_flight = killed_in_flight + ?, calls = calls + ?,"
                    " runs_reserved_tokens = runs_reserved_tokens + ?"
                    " WHERE world_id = ? AND window_start_ms = ?",
                    (
                        from_reservations,
                        consumed,
                        micro_usd,
                        killed,
                        in_flight,
                        calls,
                        held,
                        world_id,
                        window_start_ms,
                    ),
                )
        for key, (tokens, micro_usd, calls) in sorted(self._tiers.items()):
            tx.execute(_ADD_TIER_SPEND, (*key, tokens, micro_usd, calls))
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
        self._staged = LedgerChanges()  # the running body's
        self._kept = LedgerChanges()

    def stage(self, changes: LedgerChanges) -> None:
        self._staged.merge(changes)

    def keep(self) -> None:
        self._kept.merge(self._staged)
        self._staged = LedgerChanges()

    def drop(self) -> None:
        self._staged = LedgerChanges()

    def write(self, tx: Tx) -> None:
        self._kept.write_now(tx)
        self._kept = LedgerChanges()


def end_run_row(
    writes: Tx | Statements,
    ledger: LedgerChanges,
    run: RunRow,
    ending: RunEnding,
) -> int:
    """End an active run and release its unused reservation: back to the lease it came from (the
    holder hands it to its `available` when it learns the ending, `RunEnd.lease_return`), or, for a
    run admitted before leases, to the ledger (`ledger`, which the caller writes once for every run it
    ends). Returns the tokens released."""
    released = run.unused_reservation
    writes.execute(
        END_RUN,
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


class LeaseStore(StoreCore):
    """Leases of the world cap, and the ledger's totals."""

    # Creates the world's ledger row for the window when new, in any case locks it (PostgreSQL holds the
    # upsert's row lock to COMMIT; SQLite's BEGIN IMMEDIATE already holds the write lock) and returns what
    # it holds: one statement where an insert and a locked read would be two.
    _LOCK_LEDGER = (
        "INSERT INTO gateway_ledger (world_id, window_start_ms, cap_tokens) VALUES (?, ?, ?)"
        " ON CONFLICT (world_id, window_start_ms) DO UPDATE SET cap_tokens = excluded.cap_tokens"
        " RETURNING reserved_tokens, consumed_tokens"
    )

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
            # ledger and the lease (the lock order). What they still hold leaves their windows' rows.
            runs = await tx.all(
                f"SELECT {RUN_COLUMNS} FROM gateway_runs WHERE status = ? AND lease_holder = ?"
                f"{self._lock_in_order}",
                (RunStatus.ACTIVE.value, holder),
            )
            ledger = LedgerChanges()
            for row in runs:
                run = run_from(row)
                ledger.run_unreserved(run, run.unused_reservation)
            leases = await tx.all(
                "SELECT world_id, window_start_ms, tokens FROM gateway_leases WHERE holder = ? AND tokens > 0"
                f" ORDER BY world_id, window_start_ms{self._for_update}",
                (holder,),
            )
            charged = 0
            for world_id, window_start_ms, tokens in leases:
                entry = audit(world_id, int(window_start_ms), int(tokens))
                insert_rows(tx, *AUDIT_TABLE, [audit_row(entry)])
                ledger.lease_settled(entry, int(window_start_ms))
                charged += int(tokens)
            ledger.write(tx)
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
