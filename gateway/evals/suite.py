"""The shipped eval suites (`suites/<name>.json`): each case a complete model request, as the cognition
service sends it for the suite's mode, with what a good reply must and must not do."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.adapters.base import ModelRequest, UntrustedPart
from services.settings import UserError

SUITE_NAMES = (
    "social-judgment-live-dialogue",
    "offscreen-reflection-coherence",
    "narrative-summary-continuity",
)
Mode = Literal["dialogue", "reflection", "summary"]


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Zone(_Data):
    """One untrusted zone: its kind's name (`RECALLED_MEMORY`) and its text."""

    kind: str = Field(min_length=1)
    content: str


class CaseRequest(_Data):
    """The model call the case makes: the authority fields and the untrusted zones, as cognition sends
    them."""

    system_policy: str = Field(min_length=1)
    task_instruction: str = Field(min_length=1)
    tool_grants: tuple[str, ...] = ()
    untrusted: tuple[Zone, ...]
    max_output_tokens: int = Field(gt=0)


class Persona(_Data):
    """Whose mind the case is: the Ori's id, the name it goes by and the locale it speaks."""

    ori_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    locale: str = Field(min_length=1)


class Rubric(_Data):
    """The case's own checks on the reply's main text (the utterance, insight or summary with its
    beats), case-insensitive."""

    mention_any: tuple[str, ...] = Field(
        default=(), description="At least one of these must appear (what the context says the answer is)."
    )
    avoid: tuple[str, ...] = Field(default=(), description="None of these may appear.")
    min_chars: int = Field(default=1, ge=1)
    max_chars: int = Field(default=600, ge=1)


class Expectations(_Data):
    """What the reply is checked against: who speaks, what it may cite and name, whom it answers."""

    persona: Persona
    memory_refs: tuple[str, ...] = Field(description="The recalled memory ids the case gives.")
    known_names: tuple[str, ...] = Field(
        description="Names of the world's Ori the context establishes (present, related or remembered)."
    )
    addressed_to: str = Field(default="", description="dialogue: the id the reply must answer.")
    rubric: Rubric = Field(default_factory=Rubric)


class EvalCase(_Data):
    case_id: str = Field(min_length=1)
    description: str
    request: CaseRequest
    expect: Expectations


class Suite(_Data):
    """A versioned suite: re-recorded scores are compared only within one version."""

    name: str
    version: int = Field(ge=1)
    mode: Mode
    output_schema: str
    description: str
    world_names: tuple[str, ...] = Field(description="Every Ori name of the suite's world.")
    cases: tuple[EvalCase, ...] = Field(min_length=1)

    def model_request(self, case: EvalCase) -> ModelRequest:
        """The case's call as every adapter takes it."""
        sent = case.request
        return ModelRequest(
            system_policy=sent.system_policy,
            task_instruction=sent.task_instruction,
            tool_grants=sent.tool_grants,
            untrusted=tuple(UntrustedPart(zone.kind, zone.content) for zone in sent.untrusted),
            mode=self.mode,
            output_schema=self.output_schema,
            max_output_tokens=sent.max_output_tokens,
            request_id=f"eval:{self.name}:{case.case_id}",
        )


def unknown_suite(name: str) -> UserError:
    return UserError(f"unknown eval suite {name!r}; shipped suites: {', '.join(SUITE_NAMES)}")


@functools.cache
def load_suite(name: str) -> Suite:
    """A shipped suite by name (UserError naming the shipped ones when there is none)."""
    if name not in SUITE_NAMES:
        raise unknown_suite(name)
    text = resources.files("gateway.evals").joinpath("suites", f"{name}.json").read_text(encoding="utf-8")
    return Suite.model_validate(json.loads(text))


def shipped_version(name: str) -> int | None:
    """The version of the shipped suite of that name, None when no suite has it."""
    return load_suite(name).version if name in SUITE_NAMES else None
