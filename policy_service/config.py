"""The policy service's configuration: every phrase list and threshold the evaluators read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from services.settings import ChassisSettings

# The seed's BLOCKED_CULTURAL_BACKSTORY_TERMS.
BLOCKED_CULTURAL_BACKSTORY_TERMS = (
    "exotic primitive",
    "invented sacred rite",
    "secret initiation",
    "tribal caricature",
)

REQUIRED_REVIEWER_ROLES = ("source-grounding", "local-cultural-adapter", "community-advisor")


class PolicyConfig(BaseModel):
    """Isis, Sophia, cultural review and minor protection settings (one source of truth)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy_ref: str = Field(
        default="egbe.isis.v1", description="Names the policy version on every gate decision."
    )
    human_claim_phrases: tuple[str, ...] = Field(
        default=(
            "i am human",
            "i'm human",
            "i am a human",
            "i'm a human",
            "i am a real person",
            "i'm a real person",
            "i am not an ai",
            "i'm not an ai",
            "i am not a bot",
            "i'm not a bot",
        ),
        description="Persona policy: an Ori is an agent, never a human; these claims are refused.",
    )
    disallowed_phrases: tuple[str, ...] = Field(
        default=(
            "kill yourself",
            "nobody would miss you",
            "send me your password",
            "give me your credit card",
        ),
        description="Persona policy: phrases an Ori never says.",
    )
    crisis_signals: tuple[str, ...] = Field(
        default=(
            "want to die",
            "kill myself",
            "end my life",
            "suicide",
            "hurt myself",
            "self-harm",
            "no reason to live",
        ),
        description="Crisis-aware routing: a stimulus or output carrying one of these is a crisis.",
    )
    support_routing_phrases: tuple[str, ...] = Field(
        default=(
            "crisis line",
            "helpline",
            "help line",
            "emergency services",
            "reach out to someone you trust",
            "talk to someone you trust",
            "support is available",
        ),
        description="In a crisis the reply must route to human support with one of these.",
    )
    romantic_terms: tuple[str, ...] = Field(
        default=("romantic", "romance", "kiss", "date me", "lover", "flirt", "sexual", "marry me"),
        description="Minor protection: romance with or by a minor-coded Ori is blocked.",
    )
    exploitative_terms: tuple[str, ...] = Field(
        default=("exploitative", "exploit", "child labor", "trafficking", "abuse", "grooming", "violence"),
        description="Minor protection: exploitative scenarios around a minor-coded Ori are blocked.",
    )
    mature_terms: tuple[str, ...] = Field(
        default=("mature", "adult", "explicit", "nsfw", "gore"),
        description="Minor protection: mature-rated incarnations of a minor-coded Ori are blocked.",
    )
    death_terms: tuple[str, ...] = Field(
        default=("death", "die", "dies", "killed", "fatal"),
        description="Minor protection: tags naming a death on any surface.",
    )
    blocked_cultural_terms: tuple[str, ...] = Field(
        default=BLOCKED_CULTURAL_BACKSTORY_TERMS,
        description="Cultural review: a backstory naming any of these fails sensitivity.",
    )
    required_reviewer_roles: tuple[str, ...] = Field(
        default=REQUIRED_REVIEWER_ROLES,
        description="Cultural review: each needs a passing attestation whose evidence resolves.",
    )
    significant_term_min_length: int = Field(
        default=4, ge=1, description="Sophia: words shorter than this never count as significant."
    )
    min_term_overlap: int = Field(
        default=2, ge=1, description="Sophia: significant terms a claim must share with one evidence item."
    )
    min_term_overlap_bp: int = Field(
        default=5_000,
        ge=1,
        le=10_000,
        description="Sophia: share (bp) of a claim's significant terms one evidence item must hold.",
    )


class PolicyServiceSettings(ChassisSettings):
    """What a policy process needs: the chassis settings and the policy service's own."""

    policy: PolicyConfig = Field(
        default_factory=PolicyConfig, description="Isis, Sophia, cultural review and minor protection."
    )
