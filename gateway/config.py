"""Gateway configuration with the seed's defaults: tier budgets and the Solo-world cap."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from egbe.v1 import common_pb2

TIER_NAMES: dict[int, str] = {
    common_pb2.COGNITION_TIER_CLOTHO: "clotho",
    common_pb2.COGNITION_TIER_LACHESIS: "lachesis",
    common_pb2.COGNITION_TIER_ATROPOS: "atropos",
}


class TierTokenBudgets(BaseModel):
    """Per-tier token caps: Clotho per active-minute, Lachesis per reflection, Atropos per game-day."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clotho: int = Field(default=50_000, gt=0, description="Tokens per Clotho active-minute.")
    lachesis: int = Field(default=10_000, gt=0, description="Tokens per Lachesis reflection.")
    atropos: int = Field(default=15_000, gt=0, description="Tokens per Atropos game-day.")

    def cap_for(self, tier: int) -> int:
        return int(getattr(self, TIER_NAMES[tier]))


class BudgetConfig(BaseModel):
    """The two-stage budget: tier clamps, then the per-Solo-world cap."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tier_budgets: TierTokenBudgets = Field(default_factory=TierTokenBudgets)
    world_cap_tokens_per_hour: int = Field(
        default=96_000_000, gt=0, description="Per-Solo-world cognition cap, tokens per real hour."
    )
