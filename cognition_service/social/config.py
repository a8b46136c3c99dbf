"""Every default number of the social layer, in one pydantic model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SocialConfig(BaseModel):
    """Negotiation bars, learning rate, crossroads counsel and life-arc thresholds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    refuse_alignment: int = Field(
        default=-30, description="Value alignment at or below this refuses an objective outright."
    )
    accept_alignment: int = Field(
        default=0, description="Alignment below this (above the refusal bar) draws a counter-offer."
    )
    learning_rate_pct: int = Field(
        default=25, ge=0, le=100, description="Share of a demonstrated value signal taken into a priority."
    )
    counsel_respect_min: int = Field(default=65, ge=0, le=100, description="Respect that holds a crossroads.")
    counsel_bond_min: int = Field(default=70, ge=0, le=100, description="Bond that holds a crossroads.")
    counsel_bonus: int = Field(
        default=20,
        ge=0,
        description="Score bonus of the counselled option at full respect (scaled by respect).",
    )
    risk_penalty_pct: int = Field(
        default=50, ge=0, le=100, description="Share of an option's risk (0..100) subtracted from its score."
    )
    stage_flourishing_min: int = Field(
        default=60, ge=0, le=100, description="Flourishing an Ori needs to move to its next life stage."
    )
    stage_sessions_min: int = Field(
        default=3, ge=1, description="Sessions an Ori spends in a life stage before it can move on."
    )
