"""Kernel configuration with the seed's defaults, and its FNV-1a fingerprint."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from egbe.v1 import common_pb2
from kernel_service.behavior.config import BehaviorConfig
from services.fingerprint import fingerprint
from services.settings import ChassisSettings

WORLD_TICK_HZ = 20
GAME_MINUTE_TICKS = WORLD_TICK_HZ * 60
GAME_DAY_TICKS = GAME_MINUTE_TICKS * 60 * 24  # 1,728,000: the unit Atropos reasons in


class ClassRates(BaseModel):
    """Micro-USD per 1,000 tokens for each model class: a documented approximation, not a price feed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    opus: int = Field(default=1_500, ge=0, description="Opus-class micro-USD per 1k tokens.")
    sonnet: int = Field(default=300, ge=0, description="Sonnet-class micro-USD per 1k tokens.")
    haiku: int = Field(default=75, ge=0, description="Haiku-class micro-USD per 1k tokens.")


class ContextChars(BaseModel):
    """Nominal prompt-context length per call cause; the token estimate is len/4 plus the call overhead."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clotho_live_planning: int = Field(default=12_000, ge=0, description="Chars of a Clotho planning context.")
    lachesis_reflection: int = Field(default=32_000, ge=0, description="Chars of a Lachesis reflection.")
    atropos_summary: int = Field(default=10_000, ge=0, description="Chars of an Atropos summary context.")
    guard_reflection: int = Field(default=16_000, ge=0, description="Chars of a guard-forced reflection.")
    escalation: int = Field(
        default=12_000, ge=0, description="Chars of the decision context an arbitration escalation sends."
    )
    dialogue: int = Field(
        default=6_000, ge=0, description="Chars of a dialogue context: who the Ori is, the line, the moment."
    )


class KernelConfig(BaseModel):
    """Every number the tick decides with; one source of truth, fingerprinted into every tick report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision_interval_ticks: int = Field(
        default=5, ge=1, le=65535, description="Clotho plans every N ticks (5 = 4 Hz at 20 Hz)."
    )
    transition_damping_ticks: int = Field(
        default=4, ge=0, le=65535, description="Hold the previous tier this long when a non-urgent change."
    )
    deescalation_grace_ticks: int = Field(
        default=20, ge=0, description="Clotho stays Clotho this many ticks after its last Clotho signal."
    )
    clotho_proximity_mm: int = Field(
        default=2_500, ge=0, le=2**31 - 1, description="A player within this distance promotes to Clotho."
    )
    latency_budget_micros: int = Field(default=50_000, gt=0, description="The tick's latency budget.")
    repeated_action_limit: int = Field(
        default=3, ge=1, le=255, description="Identical consecutive decided actions that force a reflection."
    )
    stale_goal_tick_limit: int = Field(
        default=6, ge=1, le=255, description="Ticks a goal may be held without progress before a change."
    )
    lachesis_step_every_ticks: int = Field(
        default=2, ge=1, le=65535, description="Lachesis steps cached BT/HTN plans every N ticks (10 Hz)."
    )
    cognition_hold_ticks: int = Field(
        default=GAME_MINUTE_TICKS,
        ge=0,
        le=GAME_DAY_TICKS,
        description=(
            "A Lachesis Ori holds a merged cognition result's action this many ticks (1,200 = one "
            "game-minute at 20 Hz) before its behaviour layer steps again, then pursues the result's "
            "goal through its HTN; 0 = the next 10 Hz step. Other tiers hold it until it is replaced."
        ),
    )
    reflection_game_minutes: int = Field(
        default=10, ge=1, description="A Lachesis reflection is due every N game-minutes."
    )
    summaries_per_game_day: int = Field(
        default=4, ge=1, le=GAME_DAY_TICKS, description="Atropos narrative summaries per game-day."
    )
    batch_overhead_tokens: int = Field(
        default=800, ge=0, description="Fixed per-call overhead a coalesced batch pays once."
    )
    batch_min_requests: int = Field(
        default=2, ge=2, description="Cross-tier batching needs at least this many eligible calls."
    )
    class_rates: ClassRates = Field(default_factory=ClassRates)
    context_chars: ContextChars = Field(default_factory=ContextChars)
    guard_priority_bp: int = Field(
        default=9_000, ge=0, le=10_000, description="Priority a guard intervention stamps on its action."
    )
    max_pending_fragments: int = Field(
        default=16,
        ge=1,
        le=1_000,
        description="Consolidation fragments kept per agent between hand-overs; the oldest go first.",
    )
    max_batch_agents: int = Field(
        default=2_097_152, ge=1, le=2**31 - 1, description="Largest perception batch accepted, in agents."
    )
    tier_models: dict[str, str] = Field(
        default_factory=lambda: {
            "clotho": "anthropic:claude-opus-class-latest",
            "lachesis": "anthropic:claude-sonnet-class-latest",
            "atropos": "anthropic:claude-haiku-class-latest",
        },
        description="Smallest-qualified model class per tier (the gateway's routing decides the real model).",
    )
    behavior: BehaviorConfig = Field(
        default_factory=BehaviorConfig,
        description="The behaviour layer's thresholds (trees, needs, emotion).",
    )

    @property
    def reflection_interval_ticks(self) -> int:
        return self.reflection_game_minutes * GAME_MINUTE_TICKS

    @property
    def summary_interval_ticks(self) -> int:
        return GAME_DAY_TICKS // self.summaries_per_game_day

    def fingerprint(self, methods: Mapping[str, Any] | None = None) -> common_pb2.ConfigFingerprint:
        """FNV-1a 64 over the canonical JSON (sorted keys, no whitespace) of this config.

        `methods` is the behaviour layer's method library identity (version and content digest) when
        a layer runs: the methods decide actions as much as these numbers do, so a replay under
        different methods must not carry the same fingerprint.
        """
        document: dict[str, Any] = self.model_dump(mode="json")
        if methods is not None:
            document = {"config": document, "methods": dict(methods)}
        return common_pb2.ConfigFingerprint(fnv1a64=fingerprint(document), scope="kernel")

    def class_rate(self, tier: int) -> int:
        """Micro-USD per 1k tokens for the model class a tier routes to."""
        rates: dict[int, int] = {
            common_pb2.COGNITION_TIER_CLOTHO: self.class_rates.opus,
            common_pb2.COGNITION_TIER_LACHESIS: self.class_rates.sonnet,
            common_pb2.COGNITION_TIER_ATROPOS: self.class_rates.haiku,
        }
        return rates[tier]


class KernelSettings(BaseModel):
    """How the kernel service runs: its core, where the dispatcher sends work, the policy that judges
    steward directives, and the tick log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    core: Literal["auto", "c", "numpy"] = Field(
        default="auto",
        description="Tick core; EGBE_KERNEL_CORE=c|numpy overrides. auto = C when built, else numpy.",
    )
    tick_threads: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Threads ticking disjoint slot ranges in the C core and behaviour step (byte-identical "
        "results); above 1 only where the kernel has a spare core while the world waits on it.",
    )
    tick_threads_min_agents: int = Field(
        default=100_000, ge=1, description="Populations below this tick on one thread whatever tick_threads."
    )
    gateway_target: str | None = Field(
        default=None, description="Dispatcher forwards candidates to this gateway; unset = report only."
    )
    biography_target: str | None = Field(
        default=None, description="Dispatcher carries lifecycle requests here; unset = report only."
    )
    policy_target: str | None = Field(
        default=None,
        description="The policy service that judges steward directives' words (ClassifyStewardText); "
        "unset = ApplyStewardDirective answers FAILED_PRECONDITION.",
    )
    policy_timeout_seconds: float = Field(
        default=5.0, gt=0, le=60, description="How long a steward directive waits for the policy's verdict."
    )
    tick_log_path: Path | None = Field(default=None, description="Record every tick to this file.")
    snapshot_every_ticks: int = Field(
        default=1_200, ge=1, description="A state snapshot joins the tick log this often (in ticks)."
    )
    behavior_layer: bool = Field(
        default=True,
        description="Step Lachesis agents' HTN plans and personality trees (kernel_service/behavior).",
    )
    dispatch_queue_limit: int = Field(
        default=10_000, ge=1, description="Candidates waiting for the gateway beyond this are shed."
    )
    config: KernelConfig = Field(default_factory=KernelConfig)


class KernelServiceSettings(ChassisSettings):
    """What a kernel process needs: the chassis settings and the kernel service's own."""

    kernel: KernelSettings = Field(
        default_factory=KernelSettings, description="The Moirai kernel: core, dispatch targets, tick log."
    )
