"""The cognition service's configuration: assembly limits, mode budgets, retries and the Psyche plan."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cognition_service.social.config import SocialConfig
from services.settings import ChassisSettings


class AssemblyLimits(BaseModel):
    """The seed's DEFAULT_CONTEXT_ASSEMBLY_LIMITS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    perception: int = Field(default=12, ge=0)
    traits: int = Field(default=12, ge=0)
    values: int = Field(default=8, ge=0)
    quirks: int = Field(default=8, ge=0)
    memories: int = Field(default=8, ge=0)
    relationships: int = Field(default=8, ge=0)
    objectives: int = Field(default=6, ge=0)
    item_chars: int = Field(default=240, ge=8, description="Longest text of one item.")
    total_chars: int = Field(default=16_384, ge=64, description="Character budget of the whole context.")
    stimulus_chars: int = Field(
        default=4_096,
        ge=8,
        description="Longest stimulus: the line heard, a crossroads and its options, an irreversible action.",
    )
    persona_chars: int = Field(default=960, ge=8, description="Longest persona text.")


class ModeSettings(BaseModel):
    """What one cognition mode may spend and which tools it is granted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_budget_us: int = Field(gt=0, description="Cognition time (not model time) for the mode.")
    max_output_tokens: int = Field(gt=0)
    tool_grants: tuple[str, ...] = ()
    action_priority: int = Field(ge=0, le=10_000, description="Priority of the committed action.")


def _default_modes() -> dict[str, ModeSettings]:
    return {
        "dialogue": ModeSettings(latency_budget_us=10_000, max_output_tokens=400, action_priority=8_000),
        "decision": ModeSettings(
            latency_budget_us=10_000,
            max_output_tokens=300,
            tool_grants=("world.use_prop",),
            action_priority=7_000,
        ),
        "reflection": ModeSettings(
            latency_budget_us=50_000,
            max_output_tokens=500,
            tool_grants=("biography.recall",),
            action_priority=4_000,
        ),
        "summary": ModeSettings(
            latency_budget_us=100_000,
            max_output_tokens=800,
            tool_grants=("biography.recall",),
            action_priority=3_000,
        ),
    }


def _default_spoken_reply_stages() -> dict[str, int]:
    # The seed fixes only the sum (646 ms of a 1,000 ms budget); this split is ours, documented in docs/.
    return {
        "speech_endpointing": 150,
        "cognition": 10,
        "grounding_and_gate": 16,
        "model_first_token": 300,
        "tts_first_audio": 120,
        "viseme_alignment": 20,
        "transport": 30,
    }


def _default_templates() -> dict[str, str]:
    # Authored per locale (never translated at run time); {name} is the addressee.
    return {
        "en-US": "I hear you, {name}. Give me a moment to think that through.",
        "es-ES": "Te escucho, {name}. Dame un momento para pensarlo bien.",
        "yo-NG": "Mo gbọ́ ẹ, {name}. Fún mi ní ìṣẹ́jú kan láti ronú lé e lórí.",
    }


class CognitionConfig(BaseModel):
    """Every default number of the cognition pipeline, in one place."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limits: AssemblyLimits = Field(default_factory=AssemblyLimits)
    modes: dict[str, ModeSettings] = Field(default_factory=_default_modes)
    max_validation_retries: int = Field(
        default=2, ge=0, description="Re-asks with the validation error appended before the fallback."
    )
    max_policy_rerequests: int = Field(
        default=1, ge=0, description="Re-asks after a policy or grounding rejection before the fallback."
    )
    rpc_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest a peer-service call may take; less when the call being served has less left.",
    )
    rpc_deadline_margin_seconds: float = Field(
        default=0.05,
        ge=0,
        description="Kept back from the served call's deadline to answer in: a peer call's deadline is "
        "the served call's less this, and none is sent once less than this is left.",
    )
    locales: tuple[str, ...] = ("en-US", "es-ES", "yo-NG")
    dialogue_templates: dict[str, str] = Field(default_factory=_default_templates)
    tts_codec: str = "opus"
    tts_sample_rate_hz: int = 48_000
    tts_channels: int = 1
    spoken_reply_budget_ms: int = Field(default=1_000, gt=0)
    spoken_reply_stages_ms: dict[str, int] = Field(default_factory=_default_spoken_reply_stages)
    viseme_ms_per_char: int = Field(default=60, gt=0, description="Speaking pace used to time visemes.")
    social: SocialConfig = Field(
        default_factory=SocialConfig,
        description="The social layer's thresholds (negotiation, crossroads, arcs).",
    )

    @model_validator(mode="after")
    def _complete(self) -> CognitionConfig:
        missing_modes = {"dialogue", "decision", "reflection", "summary"} - set(self.modes)
        if missing_modes:
            raise ValueError(f"modes missing {sorted(missing_modes)}")
        missing_templates = set(self.locales) - set(self.dialogue_templates)
        if missing_templates:
            raise ValueError(f"dialogue_templates missing locales {sorted(missing_templates)}")
        if sum(self.spoken_reply_stages_ms.values()) > self.spoken_reply_budget_ms:
            raise ValueError("spoken_reply_stages_ms sum past spoken_reply_budget_ms")
        return self


class CognitionServiceSettings(ChassisSettings):
    """What a cognition process needs: the chassis settings and the cognition service's own."""

    cognition: CognitionConfig = Field(
        default_factory=CognitionConfig, description="Assembly limits, mode budgets, retries, Psyche plan."
    )
