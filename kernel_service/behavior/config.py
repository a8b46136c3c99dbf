"""Every default number of the behaviour layer, in one pydantic model (thresholds in basis points)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

BasisPoints = int


class BehaviorConfig(BaseModel):
    """Thresholds and multipliers of the personality trees, needs, emotion and HTN stepping."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    safety_value_threshold_bp: BasisPoints = Field(
        default=7_000,
        ge=1,
        le=10_000,
        description="MaintainSafety fires only if the safety value clears this.",
    )
    fatigue_self_care_bp: BasisPoints = Field(
        default=6_000, ge=0, le=10_000, description="Fatigue at or above this puts SelfCare before work."
    )
    need_rest_tag_bp: BasisPoints = Field(
        default=6_000, ge=0, le=10_000, description="Fatigue at or above this sets the `need-rest` HTN tag."
    )
    routine_drive_gate_bp: BasisPoints = Field(
        default=5_000,
        ge=0,
        le=10_000,
        description="Vocation/Social/Curiosity fires when its drive (traits, value, need) clears this.",
    )
    need_goal_threshold_bp: BasisPoints = Field(
        default=5_000,
        ge=0,
        le=10_000,
        description="An unmet need becomes an autonomous goal at this pressure.",
    )
    grieving_hard_objective_bp: BasisPoints = Field(
        default=4_000, ge=0, le=10_000, description="Hard-objective (Vocation) multiplier while grieving."
    )
    anxious_hard_objective_bp: BasisPoints = Field(
        default=7_000, ge=0, le=10_000, description="Hard-objective (Vocation) multiplier while anxious."
    )
    grief_bp: BasisPoints = Field(
        default=5_000, ge=1, le=10_000, description="Grief at or above this names the emotion Grieving."
    )
    aroused_bp: BasisPoints = Field(
        default=6_000, ge=0, le=10_000, description="Arousal at or above this reads Anxious or Determined."
    )
    tired_fatigue_bp: BasisPoints = Field(
        default=7_000, ge=0, le=10_000, description="Fatigue at or above this reads Tired."
    )
    lonely_need_bp: BasisPoints = Field(
        default=6_000,
        ge=0,
        le=10_000,
        description="Social need at or above this (and low mood) reads Lonely.",
    )
    content_valence_bp: int = Field(
        default=3_000, ge=-10_000, le=10_000, description="Valence at or above this reads Content."
    )
    mood_decay_shift: int = Field(
        default=3,
        ge=1,
        le=8,
        description="Episode mood decays by 1/2**shift per decision, so a loss fades over a few dozen ticks.",
    )
    escalation_cooldown_ticks: int = Field(
        default=2_400,
        ge=1,
        le=2**32,
        description=(
            "After arbitration escalates an Ori to cognition it stays on its tree/plan this many ticks "
            "(2 game-minutes at 20 Hz) before it may escalate again; first escalations are staggered by "
            "slot over one such window."
        ),
    )
