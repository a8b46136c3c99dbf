"""The structured reply each cognition mode must produce: cognition's output contract.

A model reply is JSON validated against the schema of its mode; the cognition service re-asks with
the validation error when a reply fails, and falls back to the behaviour tree after the retries.
These models are published as JSON Schemas beside the protocol (protos/egbe/v1/schemas/, written by
scripts/export_output_schemas.py), which is how the gateway's offline adapter knows them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from services.vocabulary import CHOSEN_GOAL_TAGS, GOAL_FAMILY_NAMES

Text = Annotated[str, Field(min_length=1, max_length=600)]
Ref = Annotated[str, Field(min_length=1, max_length=128)]


class ClaimKindName(StrEnum):
    FACT = "fact"
    OPINION = "opinion"
    BACKSTORY = "backstory"


class StatedClaim(BaseModel):
    """Something the Ori asserts; Sophia grounds it against evidence."""

    model_config = ConfigDict(extra="forbid")

    kind: ClaimKindName
    text: Text


class DialogueReply(BaseModel):
    """A spoken line (mode dialogue → SAY)."""

    model_config = ConfigDict(extra="forbid")

    utterance: Text
    addressed_to: Ref
    emotion: Annotated[str, Field(min_length=1, max_length=32)]
    cited_memory_refs: list[Ref] = Field(default_factory=list, max_length=8)
    claims: list[StatedClaim] = Field(default_factory=list, max_length=8)
    # Capabilities the line says the Ori has; Isis refuses any the Ori does not have.
    claimed_capabilities: list[Ref] = Field(default_factory=list, max_length=8)


# The protocol's goal families, and the context tags a chosen goal may carry (not the ones the
# kernel sets from perception).
GoalFamilyName = StrEnum(  # type: ignore[misc]
    "GoalFamilyName", {name.upper().replace("-", "_"): name for name in GOAL_FAMILY_NAMES.values()}
)
GoalTag = StrEnum("GoalTag", {tag: tag for tag in CHOSEN_GOAL_TAGS})  # type: ignore[misc]


class ChosenGoal(BaseModel):
    """A structured goal in the kernel's HTN terms: after the decision, the Ori's cheap behaviour
    decomposes it into a plan instead of calling cognition again for want of a goal."""

    model_config = ConfigDict(extra="forbid")

    family: GoalFamilyName
    tags: list[GoalTag] = Field(default_factory=list, max_length=8)


class DecisionReply(BaseModel):
    """A chosen action (mode decision → USE_PROP) and, optionally, the goal it serves."""

    model_config = ConfigDict(extra="forbid")

    action: Annotated[str, Field(min_length=1, max_length=64)]
    target: Ref
    rationale: Text
    goal: ChosenGoal | None = None
    cited_memory_refs: list[Ref] = Field(default_factory=list, max_length=8)
    claimed_capabilities: list[Ref] = Field(default_factory=list, max_length=8)


class ReflectionReply(BaseModel):
    """An insight about the Ori's recent life (mode reflection → FORM_MEMORY, Reflected event)."""

    model_config = ConfigDict(extra="forbid")

    insight: Text
    salience_bp: int = Field(ge=0, le=10_000)
    cited_memory_refs: list[Ref] = Field(default_factory=list, max_length=8)


class SummaryReply(BaseModel):
    """A narrative beat of a distant Ori's day (mode summary → FORM_MEMORY, MemoryFormed event)."""

    model_config = ConfigDict(extra="forbid")

    summary: Text
    beats: list[Text] = Field(min_length=1, max_length=8)
    arc_ref: Ref | None = None


class OutputSchemaName(StrEnum):
    """Names carried in GenerateRequest.output_schema."""

    DIALOGUE = "egbe.cognition.dialogue.v1"
    DECISION = "egbe.cognition.decision.v1"
    REFLECTION = "egbe.cognition.reflection.v1"
    SUMMARY = "egbe.cognition.summary.v1"


OUTPUT_SCHEMAS: dict[OutputSchemaName, type[BaseModel]] = {
    OutputSchemaName.DIALOGUE: DialogueReply,
    OutputSchemaName.DECISION: DecisionReply,
    OutputSchemaName.REFLECTION: ReflectionReply,
    OutputSchemaName.SUMMARY: SummaryReply,
}
