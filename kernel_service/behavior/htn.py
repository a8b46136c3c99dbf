"""The HTN method library (a versioned TOML file validated by pydantic) and the scalar planner.

Families and tags are the protocol's (GoalFamily, GoalTag): a method names them as the chassis
vocabulary spells them, and a goal ref's tag bit i is the protocol's tag i.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from egbe.v1 import action_pb2
from services.errors import FieldViolation
from services.goal_refs import tag_mask_of
from services.vocabulary import GOAL_FAMILIES_BY_NAME, GOAL_FAMILY_NAMES, GOAL_TAG_NAMES

DEFAULT_METHODS_PATH = Path(__file__).with_name("methods.toml")

Slug = Annotated[str, Field(pattern=r"^[a-z][a-z0-9.-]{0,63}$")]


class StepAction(StrEnum):
    """The ActionKinds a primitive HTN step may emit."""

    OBSERVE = "observe"
    MOVE = "move"
    SAY = "say"
    USE_PROP = "use-prop"
    FORM_MEMORY = "form-memory"
    MAINTAIN_SAFETY = "maintain-safety"
    SELF_CARE = "self-care"
    WORK = "work"
    SOCIALIZE = "socialize"
    EXPLORE = "explore"
    REST = "rest"

    @property
    def action_kind(self) -> int:
        return action_pb2.ActionKind.Value(f"ACTION_KIND_{self.name}")


class StepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    task: Slug
    action: StepAction


class MethodSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Slug
    family: Slug
    priority: int = Field(ge=0, le=100)
    requires: list[Slug] = Field(default_factory=list)
    excludes: list[Slug] = Field(default_factory=list)
    steps: list[StepSpec] = Field(min_length=1, max_length=16)


class MethodLibrarySpec(BaseModel):
    """The file's shape; cross-references (tags, ids, families) are checked by `_cross_check`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    library_version: Annotated[str, Field(min_length=1, max_length=64)]
    methods: list[MethodSpec] = Field(min_length=1)


class MethodLibraryInvalid(ValueError):
    """The method file was refused; names the file and the path of each invalid field."""

    def __init__(self, path: Path, violations: list[FieldViolation]) -> None:
        self.path = path
        self.violations = violations
        listed = "; ".join(f"{v.field}: {v.description}" for v in violations)
        super().__init__(f"{path}: invalid HTN method library: {listed}")


@dataclass(frozen=True)
class PlannedStep:
    task: str
    action_kind: int


@dataclass(frozen=True)
class Method:
    """A validated method: its tags as bit masks over the library's tag vocabulary."""

    method_id: str
    family: int  # a GoalFamily number
    priority: int
    requires_mask: int
    excludes_mask: int
    steps: tuple[PlannedStep, ...]

    def applies(self, tag_mask: int) -> bool:
        return (tag_mask & self.requires_mask) == self.requires_mask and not (tag_mask & self.excludes_mask)


@dataclass(frozen=True)
class MethodLibrary:
    """Methods ordered by family, then priority (highest first), then file order; `tags` is the
    protocol's tag vocabulary (index = bit)."""

    library_version: str
    tags: tuple[str, ...]
    methods: tuple[Method, ...]

    def tag_bit(self, tag: str) -> int:
        return 1 << self.tags.index(tag)

    def decompose(self, family: int, tag_mask: int) -> tuple[int, Method] | None:
        """Scalar planner: the highest-priority applicable method of the family, with its index."""
        for index, method in enumerate(self.methods):
            if method.family == family and method.applies(tag_mask):
                return index, method
        return None


def _cross_check(spec: MethodLibrarySpec) -> list[FieldViolation]:
    violations: list[FieldViolation] = []
    seen_ids: set[str] = set()
    for m, method in enumerate(spec.methods):
        if method.id in seen_ids:
            violations.append(FieldViolation(f"methods.{m}.id", f"duplicate method id {method.id!r}"))
        seen_ids.add(method.id)
        if method.family not in GOAL_FAMILIES_BY_NAME:
            violations.append(
                FieldViolation(
                    f"methods.{m}.family",
                    f"unknown family {method.family!r}; known: {', '.join(GOAL_FAMILIES_BY_NAME)}",
                )
            )
        for key in ("requires", "excludes"):
            for t, tag in enumerate(getattr(method, key)):
                if tag not in GOAL_TAG_NAMES:
                    violations.append(FieldViolation(f"methods.{m}.{key}.{t}", f"unknown tag {tag!r}"))
    covered = {method.family for method in spec.methods}
    violations.extend(
        FieldViolation("methods", f"no method for family {name!r}")
        for name in sorted(GOAL_FAMILY_NAMES.values())
        if name not in covered
    )
    return violations


def parse_method_library(document: object, path: Path) -> MethodLibrary:
    """Validate a parsed document; raise MethodLibraryInvalid listing every invalid field."""
    try:
        spec = MethodLibrarySpec.model_validate(document)
    except ValidationError as exc:
        raise MethodLibraryInvalid(
            path,
            [
                FieldViolation(".".join(str(p) for p in err["loc"]) or "<root>", err["msg"])
                for err in exc.errors()
            ],
        ) from exc
    violations = _cross_check(spec)
    if violations:
        raise MethodLibraryInvalid(path, violations)
    ranked = sorted(
        enumerate(spec.methods), key=lambda im: (GOAL_FAMILIES_BY_NAME[im[1].family], -im[1].priority, im[0])
    )
    methods = tuple(
        Method(
            method_id=spec_m.id,
            family=GOAL_FAMILIES_BY_NAME[spec_m.family],
            priority=spec_m.priority,
            requires_mask=tag_mask_of(set(spec_m.requires)),
            excludes_mask=tag_mask_of(set(spec_m.excludes)),
            steps=tuple(PlannedStep(step.task, step.action.action_kind) for step in spec_m.steps),
        )
        for _, spec_m in ranked
    )
    return MethodLibrary(spec.library_version, GOAL_TAG_NAMES, methods)


def load_method_library(path: Path = DEFAULT_METHODS_PATH) -> MethodLibrary:
    """Read and validate a method file; a TOML syntax error is refused the same way."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise MethodLibraryInvalid(path, [FieldViolation("<file>", f"not valid TOML: {exc}")]) from exc
    return parse_method_library(document, path)
