"""The world caps and per-run budgets admission applies: the configured ones, as operators changed them at
run time (`SetWorldCap`, `SetRunBudget`). Every gateway sharing a store holds the same changes (committed,
then pushed), so each checks a change's range here before the store commits it.
"""

from __future__ import annotations

from gateway.budget import resolve_world_cap
from gateway.config import TIER_NAMES, GatewayConfig, RunBudget
from gateway.records import Limits
from services.errors import FieldViolation, InvalidArgument

MAX_WORLD_CAP_TOKENS = 10**12
MAX_MODEL_CALLS = 1_000
MAX_TOOL_CALLS = 1_000
MAX_RUN_TOKENS = 10_000_000


class RunLimits:
    """The configured limits, and the operators' changes in force (replaced whole at each push)."""

    def __init__(self, config: GatewayConfig) -> None:
        self._config = config
        self._default_cap = resolve_world_cap(config.budget)
        self.current = Limits()

    def world_cap_tokens(self, world_id: str = "") -> int:
        """A world's cap per ledger window: its override or the configured cap, lowered by the configured
        homestead rest; '' = the configured cap."""
        override = self.current.world_caps.get(world_id, 0)
        if not override:
            return self._default_cap
        return resolve_world_cap(self._config.budget, override_tokens=override)

    def run_budget(self, tier: int) -> RunBudget:
        override = self.current.run_budgets.get(tier)
        if override is None:
            return self._config.run_budgets.for_tier(tier)
        calls, tools, tokens = override
        return RunBudget(max_model_calls=calls, max_tool_calls=tools, max_tokens=tokens)

    def replace(self, current: Limits) -> set[str]:
        """The limits in force now; answers the worlds whose cap changed."""
        before, self.current = self.current.world_caps, current
        worlds = before.keys() | current.world_caps.keys()
        return {world for world in worlds if before.get(world) != current.world_caps.get(world)}

    @staticmethod
    def checked_world_cap(world_id: str, tokens_per_hour: int) -> None:
        violations = []
        if not world_id:
            violations.append(FieldViolation("world_id", "must name a world"))
        if not 1 <= tokens_per_hour <= MAX_WORLD_CAP_TOKENS:
            violations.append(
                FieldViolation("tokens_per_hour", f"must be between 1 and {MAX_WORLD_CAP_TOKENS:,}")
            )
        if violations:
            raise InvalidArgument(violations)

    def changed_budget(
        self, tier: int, *, max_model_calls: int | None, max_tool_calls: int | None, max_tokens: int | None
    ) -> tuple[int, int, int]:
        """The tier's budget in force with the fields given changed, each checked against its range."""
        if tier not in TIER_NAMES:
            raise InvalidArgument.field("tier", "must be CLOTHO, LACHESIS or ATROPOS")
        now = self.run_budget(tier)
        ranges = (
            ("max_model_calls", max_model_calls, now.max_model_calls, 1, MAX_MODEL_CALLS),
            ("max_tool_calls", max_tool_calls, now.max_tool_calls, 0, MAX_TOOL_CALLS),
            ("max_tokens", max_tokens, now.max_tokens, 1, MAX_RUN_TOKENS),
        )
        violations = [
            FieldViolation(name, f"must be between {low:,} and {high:,}")
            for name, value, _, low, high in ranges
            if value is not None and not low <= value <= high
        ]
        if all(value is None for _, value, *_ in ranges):
            fields = "max_model_calls, max_tool_calls or max_tokens"
            violations.append(FieldViolation("max_model_calls", f"set at least one of {fields}"))
        if violations:
            raise InvalidArgument(violations)
        calls, tools, tokens = (now_value if value is None else value for _, value, now_value, _, _ in ranges)
        return calls, tools, tokens
