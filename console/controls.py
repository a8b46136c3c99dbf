"""What an operator asks of the gateway from the Controls page, read from a submitted form: a control
(kill, pause, quarantine or resume an Ori, a tier, a tenant or a world), a world's cap or a tier's run
budget. Each order is checked whole before anything is sent, shown back for confirmation, then sent with
the signed-in operator's own token."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from console.clients import Caller, ConsoleClients
from egbe.v1 import common_pb2, gateway_pb2
from services.vocabulary import TIERS_BY_NAME

ACTIONS = ("kill", "pause", "quarantine", "resume")
SCOPES: dict[str, gateway_pb2.ControlScope.ValueType] = {
    "ori": gateway_pb2.CONTROL_SCOPE_ORI,
    "tier": gateway_pb2.CONTROL_SCOPE_TIER,
    "tenant": gateway_pb2.CONTROL_SCOPE_TENANT,
    "world": gateway_pb2.CONTROL_SCOPE_WORLD,
}
ScopedRequest = TypeVar(
    "ScopedRequest",
    gateway_pb2.KillOriRequest,
    gateway_pb2.KillTierRequest,
    gateway_pb2.KillTenantRequest,
    gateway_pb2.KillWorldRequest,
    gateway_pb2.PauseRequest,
    gateway_pb2.QuarantineRequest,
)
MAX_TEXT = 500
MAX_ID = 128


class OrderInvalid(ValueError):
    """A form field is missing or wrong; `field` names it."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


def _text(form: Mapping[str, str], name: str, *, required: bool = True, limit: int = MAX_ID) -> str:
    value = form.get(name, "").strip()
    if required and not value:
        raise OrderInvalid(name, "is required")
    if len(value) > limit:
        raise OrderInvalid(name, f"is longer than {limit} characters")
    return value


def _number(form: Mapping[str, str], name: str, *, low: int, high: int, required: bool = True) -> int | None:
    raw = form.get(name, "").strip().replace(",", "").replace("_", "")
    if not raw:
        if required:
            raise OrderInvalid(name, "is required")
        return None
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise OrderInvalid(name, f"must be a whole number from {low:,} to {high:,}")
    return int(raw)


def _tier(form: Mapping[str, str], name: str) -> int:
    tier = TIERS_BY_NAME.get(_text(form, name))
    if tier is None:
        raise OrderInvalid(name, f"must be one of {', '.join(TIERS_BY_NAME)}")
    return tier


@dataclass(frozen=True)
class ControlOrder:
    """Kill, pause, quarantine or resume one target, optionally in one world and for a while."""

    action: str
    scope: str
    target: str
    world_id: str
    reason: str
    expires_minutes: int | None

    def fields(self) -> dict[str, str]:
        """The form fields that make this order again (the confirmation page's hidden inputs)."""
        return {
            "kind": "control",
            "action": self.action,
            "scope": self.scope,
            "target": self.target,
            "world_id": self.world_id,
            "reason": self.reason,
            "expires_minutes": "" if self.expires_minutes is None else str(self.expires_minutes),
        }

    @property
    def world_shown(self) -> str:
        """The world whose stream shows this order ("" when it concerns every world)."""
        return self.target if self.scope == "world" else self.world_id

    def describe(self) -> str:
        where = f" in world {self.world_id}" if self.world_id else ""
        until = f" for {self.expires_minutes} min" if self.expires_minutes else ""
        return f"{self.action.upper()} {self.scope} {self.target}{where}{until}: {self.reason}"

    def _scoped(self, request: ScopedRequest) -> ScopedRequest:
        """The order's reason, world and expiry on a control request."""
        request.reason = self.reason
        if not isinstance(request, gateway_pb2.KillWorldRequest):
            request.world_id = self.world_id
        if self.expires_minutes:
            request.expires_after.seconds = self.expires_minutes * 60
        return request

    async def send(self, clients: ConsoleClients, caller: Caller) -> str:
        """Send the order as `caller`; the gateway's answer in one line."""
        md, stub, scope = caller.metadata(), clients.operator, SCOPES[self.scope]
        if self.action == "resume":
            resumed = await stub.Resume(
                gateway_pb2.ResumeRequest(
                    scope=scope, target=self.target, reason=self.reason, world_id=self.world_id
                ),
                metadata=md,
            )
            return f"resumed: {len(resumed.lifted)} control(s) lifted"
        if self.action == "pause":
            paused = await stub.Pause(
                self._scoped(gateway_pb2.PauseRequest(scope=scope, target=self.target)), metadata=md
            )
            return _added(paused.control, paused.existing, paused.warning)
        if self.action == "quarantine":
            held = await stub.Quarantine(
                self._scoped(gateway_pb2.QuarantineRequest(scope=scope, target=self.target)), metadata=md
            )
            return _added(held.control, held.existing, held.warning)
        killed: (
            gateway_pb2.KillOriResponse
            | gateway_pb2.KillTierResponse
            | gateway_pb2.KillTenantResponse
            | gateway_pb2.KillWorldResponse
        )
        if self.scope == "ori":
            killed = await stub.KillOri(
                self._scoped(gateway_pb2.KillOriRequest(ori_id=self.target)), metadata=md
            )
        elif self.scope == "tier":
            tier = common_pb2.CognitionTier.ValueType(TIERS_BY_NAME[self.target])
            killed = await stub.KillTier(self._scoped(gateway_pb2.KillTierRequest(tier=tier)), metadata=md)
        elif self.scope == "tenant":
            killed = await stub.KillTenant(
                self._scoped(gateway_pb2.KillTenantRequest(tenant_id=self.target)), metadata=md
            )
        else:
            killed = await stub.KillWorld(
                self._scoped(gateway_pb2.KillWorldRequest(world_id=self.target)), metadata=md
            )
        added = _added(killed.control, killed.existing, killed.warning)
        return f"{added}; {killed.runs_aborted} run(s) stopped"


def _added(control: gateway_pb2.Control, existing: bool, warning: str) -> str:
    said = f"control {control.control_id} {'already active' if existing else 'committed'}"
    return f"{said} (warning: {warning})" if warning else said


@dataclass(frozen=True)
class CapOrder:
    """A world's cap in tokens per ledger window."""

    world_id: str
    tokens_per_hour: int
    reason: str

    def fields(self) -> dict[str, str]:
        return {
            "kind": "cap",
            "world_id": self.world_id,
            "tokens_per_hour": str(self.tokens_per_hour),
            "reason": self.reason,
        }

    @property
    def world_shown(self) -> str:
        return self.world_id

    def describe(self) -> str:
        return f"SET CAP of world {self.world_id} to {self.tokens_per_hour:,} tokens per hour: {self.reason}"

    async def send(self, clients: ConsoleClients, caller: Caller) -> str:
        changed = await clients.operator.SetWorldCap(
            gateway_pb2.SetWorldCapRequest(
                world_id=self.world_id, tokens_per_hour=self.tokens_per_hour, reason=self.reason
            ),
            metadata=caller.metadata(),
        )
        return f"world {changed.world_id} cap now {changed.world_cap_tokens:,} tokens"


@dataclass(frozen=True)
class BudgetOrder:
    """A tier's per-run budget; a limit left blank keeps the one in force."""

    tier: str
    max_model_calls: int | None
    max_tool_calls: int | None
    max_tokens: int | None
    reason: str

    def fields(self) -> dict[str, str]:
        def shown(value: int | None) -> str:
            return "" if value is None else str(value)

        return {
            "kind": "budget",
            "tier": self.tier,
            "max_model_calls": shown(self.max_model_calls),
            "max_tool_calls": shown(self.max_tool_calls),
            "max_tokens": shown(self.max_tokens),
            "reason": self.reason,
        }

    world_shown = ""  # a tier's budget concerns every world

    def describe(self) -> str:
        limits = ", ".join(
            f"{name} {value:,}"
            for name, value in (
                ("model calls", self.max_model_calls),
                ("tool calls", self.max_tool_calls),
                ("tokens", self.max_tokens),
            )
            if value is not None
        )
        return f"SET RUN BUDGET of tier {self.tier}: {limits}: {self.reason}"

    async def send(self, clients: ConsoleClients, caller: Caller) -> str:
        request = gateway_pb2.SetRunBudgetRequest(
            tier=common_pb2.CognitionTier.ValueType(TIERS_BY_NAME[self.tier]), reason=self.reason
        )
        if self.max_model_calls is not None:
            request.max_model_calls = self.max_model_calls
        if self.max_tool_calls is not None:
            request.max_tool_calls = self.max_tool_calls
        if self.max_tokens is not None:
            request.max_tokens = self.max_tokens
        changed = await clients.operator.SetRunBudget(request, metadata=caller.metadata())
        budget = changed.budget
        return (
            f"tier {self.tier} runs now get {budget.max_model_calls} model calls, "
            f"{budget.max_tool_calls} tool calls, {budget.max_tokens:,} tokens"
        )


Order = ControlOrder | CapOrder | BudgetOrder


def parse_order(form: Mapping[str, str]) -> Order:
    """The order a Controls form describes, checked whole; OrderInvalid names the first bad field."""
    kind = form.get("kind", "")
    reason = _text(form, "reason", limit=MAX_TEXT)
    if kind == "cap":
        return CapOrder(
            _text(form, "world_id"),
            _number(form, "tokens_per_hour", low=1, high=1_000_000_000_000) or 0,
            reason,
        )
    if kind == "budget":
        order = BudgetOrder(
            _text(form, "tier"),
            _number(form, "max_model_calls", low=1, high=1_000, required=False),
            _number(form, "max_tool_calls", low=0, high=1_000, required=False),
            _number(form, "max_tokens", low=1, high=10_000_000, required=False),
            reason,
        )
        _tier(form, "tier")
        if (order.max_model_calls, order.max_tool_calls, order.max_tokens) == (None, None, None):
            raise OrderInvalid("max_model_calls", "set at least one limit")
        return order
    if kind != "control":
        raise OrderInvalid("kind", "must be control, cap or budget")
    action = _text(form, "action")
    if action not in ACTIONS:
        raise OrderInvalid("action", f"must be one of {', '.join(ACTIONS)}")
    scope = _text(form, "scope")
    if scope not in SCOPES:
        raise OrderInvalid("scope", f"must be one of {', '.join(SCOPES)}")
    target = _text(form, "target")
    if scope == "tier":
        _tier(form, "target")
    world_id = _text(form, "world_id", required=False)
    if scope == "world" and world_id:
        raise OrderInvalid("world_id", "leave it empty when the scope is a world: the target is the world")
    expires = (
        None if action == "resume" else _number(form, "expires_minutes", low=1, high=525_600, required=False)
    )
    return ControlOrder(action, scope, target, world_id, reason, expires)
