"""Operator controls and run-time limits in the store: a control commits with the end of every active run
it matches (and its operator audit row), and is pushed to every gateway; so are the limits."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from gateway.config import TIER_NAMES
from gateway.errors import NothingToResume
from gateway.records import Control, ControlAdded, ControlScope, Limits, RunStatus
from gateway.store import limits
from gateway.store.ledger import LedgerChanges, end_run_row
from gateway.store.reports import record_change
from gateway.store.rows import APPLIES, CONTROL_COLUMNS, RUN_COLUMNS, RunEnding, control_from, run_from
from gateway.store.tx import StoreCore, Tx

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


class ControlStore(StoreCore):
    """Controls and limits, and the listeners every change is pushed to."""

    def __init__(self, for_update: str) -> None:
        super().__init__(for_update)
        self._control_listeners: list[Callable[[Control], None]] = []
        self._limits_listeners: list[Callable[[Limits], None]] = []

    def on_control_change(self, listener: Callable[[Control], None]) -> None:
        """Called for every control added or lifted, by this process or (PostgreSQL) any other."""
        self._control_listeners.append(listener)

    def _publish(self, controls: Sequence[Control]) -> None:
        for control in controls:
            for listener in self._control_listeners:
                listener(control)

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
                f"SELECT {CONTROL_COLUMNS} FROM gateway_controls WHERE kind = ? AND scope = ? AND target = ?"
                f" AND world_id = ? AND {APPLIES} ORDER BY seq LIMIT 1",
                (control.kind, scope, target, world_id, now_ms),
            )
            existing = None if row is None else control_from(row)
            where = f" in {world_id}" if world_id else ""
            record_change(
                tx,
                f"{control.kind.name}:{scope.name}",
                operator_id=control.operator_id,
                detail=f"{target}{where}: {control.reason}"
                + (f" (already active: {existing.control_id})" if existing else ""),
                now_ms=now_ms,
            )
            seen = await self._seen(tx, scope, target, world_id)
            if existing is not None:
                return ControlAdded(existing, 0, existing=True, seen=seen)
            tx.execute(
                f"INSERT INTO gateway_controls ({CONTROL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
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
                f"SELECT {RUN_COLUMNS} FROM gateway_runs WHERE status = ? AND {' AND '.join(filters)}"
                f"{self._lock_in_order}",
                (RunStatus.ACTIVE.value, *values),
            )
            ledger = LedgerChanges()
            ending = RunEnding(RunStatus.KILLED, control.describe(), "{}", now_ms)
            for run_row in rows:
                end_run_row(tx, ledger, run_from(run_row), ending)
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
        where = f"{APPLIES} AND scope = ? AND target = ? AND (? = '' OR world_id = ?)"
        params = (now_ms, scope, target, world_id, world_id)

        async def body(tx: Tx) -> list[Control]:
            rows = await tx.all(f"SELECT {CONTROL_COLUMNS} FROM gateway_controls WHERE {where}", params)
            if not rows:
                place = f" in world {world_id!r}" if world_id else ""
                raise NothingToResume(
                    f"no active control on {scope.name.lower()} {target!r}{place} to resume", target
                )
            tx.execute(
                f"UPDATE gateway_controls SET active = 0, lifted_at_ms = ? WHERE {where}", (now_ms, *params)
            )
            record_change(
                tx,
                f"RESUME:{scope.name}",
                operator_id=operator_id,
                detail=f"{target}{f' in {world_id}' if world_id else ''}: {reason}",
                now_ms=now_ms,
            )
            lifted = [dataclasses.replace(control_from(row), active=False) for row in rows]
            for control in lifted:
                tx.notify(control.control_id)
            return lifted

        lifted = await self.transact(body)
        self._publish(lifted)
        return lifted

    async def get_control(self, control_id: str) -> Control | None:
        async def body(tx: Tx) -> Control | None:
            row = await tx.one(
                f"SELECT {CONTROL_COLUMNS} FROM gateway_controls WHERE control_id = ?", (control_id,)
            )
            return None if row is None else control_from(row)

        return await self.transact(body, durable=False)

    async def list_controls(
        self, *, include_inactive: bool, after_seq: int, limit: int, now_ms: int
    ) -> list[tuple[int, Control]]:
        """Controls after `after_seq` in commit order: those that apply at `now_ms`, or every one."""

        async def body(tx: Tx) -> list[tuple[int, Control]]:
            rows = await tx.all(
                f"SELECT seq, {CONTROL_COLUMNS} FROM gateway_controls"
                f" WHERE seq > ? AND (({APPLIES}) OR ? = 1) ORDER BY seq LIMIT ?",
                (after_seq, now_ms, int(include_inactive), limit),
            )
            return [(row[0], control_from(row[1:])) for row in rows]

        return await self.transact(body, durable=False)

    async def load_controls(self) -> list[Control]:
        """Every active control, read before the gateway serves."""

        async def body(tx: Tx) -> list[Control]:
            return [
                control_from(row)
                for row in await tx.all(
                    f"SELECT {CONTROL_COLUMNS} FROM gateway_controls WHERE active = 1 ORDER BY seq"
                )
            ]

        return await self.transact(body, durable=False)

    # -- limits operators change at run time, and the ledger by world ----------------------------------
    def on_limits_change(self, listener: Callable[[Limits], None]) -> None:
        """Called with every limit in force whenever one changes, by this process or (PostgreSQL) any
        other, and (PostgreSQL) when the push channel reconnects."""
        self._limits_listeners.append(listener)

    def _publish_limits(self, current: Limits) -> None:
        for listener in self._limits_listeners:
            listener(current)

    async def _change_limits(self, change: Callable[[Tx], Awaitable[Limits]]) -> Limits:
        """Commit a change of the limits, then push every limit in force to the listeners."""
        current = await self.transact(change)
        self._publish_limits(current)
        return current

    async def load_limits(self) -> Limits:
        return await self.transact(limits.load_limits, durable=False)

    async def set_world_cap(
        self, world_id: str, tokens_per_hour: int, *, operator_id: str, reason: str, now_ms: int
    ) -> Limits:
        """Commit a world's cap with its operator audit row, and push it to every gateway."""
        return await self._change_limits(
            lambda tx: limits.set_world_cap(
                tx, world_id, tokens_per_hour, operator_id=operator_id, reason=reason, now_ms=now_ms
            )
        )

    async def set_run_budget(
        self, tier: int, budget: tuple[int, int, int], *, operator_id: str, reason: str, now_ms: int
    ) -> Limits:
        """Commit a tier's per-run budget with its operator audit row, and push it to every gateway."""
        return await self._change_limits(
            lambda tx: limits.set_run_budget(
                tx, tier, budget, operator_id=operator_id, reason=reason, now_ms=now_ms
            )
        )

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
                f"SELECT {CONTROL_COLUMNS} FROM gateway_controls WHERE {APPLIES} AND"
                f" ((scope = ? AND target IN ({marks})) OR world_id IN ({marks})) ORDER BY seq",
                (now_ms, ControlScope.WORLD, *by_id, *by_id),
            )
            for row in rows:
                control = control_from(row)
                by_id[control.world_id or control.target].controls.append(control)
            return worlds

        return await self.transact(body, durable=False, reads_ledger=True)
