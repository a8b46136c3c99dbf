"""What operators change through the gateway: controls (kill, pause, quarantine, resume) and the limits
changed at run time (world caps, per-run budgets), each checked here, committed by the store with its
operator audit row and pushed to every gateway; and the window a spend report starts from."""

from __future__ import annotations

import uuid

from gateway.config import TIER_NAMES, RunBudget
from gateway.records import Control, ControlAdded, ControlKind, ControlScope
from gateway.runs import RunGateway
from services.errors import FieldViolation, InvalidArgument

MAX_CONTROL_MS = 366 * 24 * 3600 * 1000  # the longest expiry a control may have


class OperatorActions(RunGateway):
    """Controls and limits as operators change them."""

    async def add_control(
        self,
        kind: ControlKind,
        scope: ControlScope,
        target: str,
        *,
        world_id: str = "",
        expires_after_ms: int = 0,
        reason: str,
        operator_id: str,
    ) -> ControlAdded:
        """Commit a control (or answer the identical one still active); `world_id` limits it to one
        world, `expires_after_ms` (0: never) ends it that long after now."""
        violations = []
        if not target:
            violations.append(FieldViolation("target", "must be set"))
        if scope is ControlScope.TIER and target not in TIER_NAMES.values():
            violations.append(FieldViolation("target", "a tier control names clotho, lachesis or atropos"))
        if scope is ControlScope.WORLD and world_id not in ("", target):
            violations.append(FieldViolation("world_id", "a world control names its world in target alone"))
        if not reason.strip():
            violations.append(FieldViolation("reason", "every control needs a reason"))
        if not 0 <= expires_after_ms <= MAX_CONTROL_MS:
            violations.append(FieldViolation("expires_after", "must be between 1 ms and 366 days"))
        if violations:
            raise InvalidArgument(violations)
        now_ms = self.now_ms()
        control = Control(
            uuid.uuid4().hex,
            kind,
            scope,
            target,
            reason,
            operator_id,
            now_ms,
            world_id="" if scope is ControlScope.WORLD else world_id,
            expires_at_ms=now_ms + expires_after_ms if expires_after_ms else 0,
        )
        added = await self.store.add_control(control)
        if not added.existing:
            self.metrics.count(self.metrics.controls, scope.name.lower())
        return added

    async def lift_controls(
        self, scope: ControlScope, target: str, *, world_id: str = "", reason: str, operator_id: str
    ) -> list[Control]:
        if not target:
            raise InvalidArgument.field("target", "must be set")
        return await self.store.lift_controls(
            scope,
            target,
            world_id="" if scope is ControlScope.WORLD else world_id,
            reason=reason,
            operator_id=operator_id,
            now_ms=self.now_ms(),
        )

    async def set_world_cap(
        self, world_id: str, tokens_per_hour: int, *, reason: str, operator_id: str
    ) -> int:
        """Change a world's cap (checked, committed, pushed); answers the cap admission now applies."""
        self.limits.checked_world_cap(world_id, tokens_per_hour)
        _check_reason(reason)
        await self.store.set_world_cap(  # (published to `_on_limits` once committed)
            world_id, tokens_per_hour, operator_id=operator_id, reason=reason, now_ms=self.now_ms()
        )
        return self.world_cap_tokens(world_id)

    async def set_run_budget(
        self,
        tier: int,
        *,
        max_model_calls: int | None,
        max_tool_calls: int | None,
        max_tokens: int | None,
        reason: str,
        operator_id: str,
    ) -> RunBudget:
        """Change a tier's per-run budget (the fields given; checked, committed, pushed)."""
        budget = self.limits.changed_budget(
            tier, max_model_calls=max_model_calls, max_tool_calls=max_tool_calls, max_tokens=max_tokens
        )
        _check_reason(reason)
        await self.store.set_run_budget(  # (published to `_on_limits` once committed)
            tier, budget, operator_id=operator_id, reason=reason, now_ms=self.now_ms()
        )
        return self.limits.run_budget(tier)

    async def record_operator_attempt(
        self, method: str, *, role: str, operator_id: str, allowed: bool, detail: str
    ) -> None:
        await self.store.record_operator_attempt(
            method, role=role, operator_id=operator_id, allowed=allowed, detail=detail, now_ms=self.now_ms()
        )

    def spend_window_start_ms(self, since_ms: int = 0) -> int:
        """The first ledger window a spend report sums: the one holding `since_ms`, or the current one (0).

        A `since_ms` after now is refused: that report would silently sum nothing."""
        now_ms = self.now_ms()
        if since_ms > now_ms:
            raise InvalidArgument.field(
                "since_unix_ms", f"{since_ms} is after the gateway's clock ({now_ms})"
            )
        return self._window_start_ms(since_ms or now_ms)


def _check_reason(reason: str) -> None:
    if not reason.strip():
        raise InvalidArgument.field("reason", "every change needs a reason")
