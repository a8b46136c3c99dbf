"""The HTN method library (a versioned TOML file validated by pydantic) and the scalar planner."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from egbe.v1 import action_pb2
from kernel_service.behavior.goal_refs import TAG_BITS
from kernel_service.behavior.vocabulary import GoalFamily
from services.errors import FieldViolation

DEFAULT_METHODS_PATH = Path(__file__).with_name("methods.toml")

# Tags the layer derives from perception or surfaces with autonomous goals; every library declares them.
LAYER_TAGS = ("station-known", "need-rest", "seek-safety", "threat-present", "minor-present")
# The ones it sets from perception on every evaluation (fatigue, threat, a minor present): a goal
# chosen by cognition never carries them, so it cannot pin a situation that has passed.
PERCEIVED_TAGS = ("need-rest", "threat-present", "minor-present")

Slug = Annotated[str, Field(pattern=r"^[a-z][a-z0-9.-]{0,63}$")]


class FamilyName(StrEnum):
    VOCATION = "vocation"
    TRAVEL = "travel"
    SOCIAL = "social"
    SELF_CARE = "self-care"

    @property
    def family(self) -> GoalFamily:
        return GoalFamily[self.name]


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
    family: FamilyName
    priority: int = Field(ge=0, le=100)
    requires: list[Slug] = Field(default_factory=list)
    excludes: list[Slug] = Field(default_factory=list)
    steps: list[StepSpec] = Field(min_length=1, max_length=16)


class MethodLibrarySpec(BaseModel):
    """The file's shape; cross-references (tags, ids, families) are checked by `_cross_check`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    library_version: Annotated[str, Field(min_length=1, max_length=64)]
    tags: list[Slug] = Field(min_length=1, max_length=TAG_BITS)
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
    family: GoalFamily
    priority: int
    requires_mask: int
    excludes_mask: int
    steps: tuple[PlannedStep, ...]

    def applies(self, tag_mask: int) -> bool:
        return (tag_mask & self.requires_mask) == self.requires_mask and not (tag_mask & self.excludes_mask)


@dataclass(frozen=True)
class MethodLibrary:
    """Methods ordered by family, then priority (highest first), then file order."""

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
    known = set(spec.tags)
    for i, tag in enumerate(spec.tags):
        if tag in spec.tags[:i]:
            violations.append(FieldViolation(f"tags.{i}", f"duplicate tag {tag!r}"))
    seen_ids: set[str] = set()
    for m, method in enumerate(spec.methods):
        if method.id in seen_ids:
            violations.append(FieldViolation(f"methods.{m}.id", f"duplicate method id {method.id!r}"))
        seen_ids.add(method.id)
        for key in ("requires", "excludes"):
            for t, tag in enumerate(getattr(method, key)):
                if tag not in known:
                    violations.append(FieldViolation(f"methods.{m}.{key}.{t}", f"unknown tag {tag!r}"))
    violations.extend(
        FieldViolation("tags", f"missing tag {tag!r} the behaviour layer sets itself")
        for tag in LAYER_TAGS
        if tag not in known
    )
    missing = set(FamilyName) - {method.family for method in spec.methods}
    violations.extend(
        FieldViolation("methods", f"no method for family {name.value!r}") for name in sorted(missing)
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
    tags = tuple(spec.tags)

    def mask(names: list[str]) -> int:
        return sum(1 << tags.index(name) for name in set(names))

    ranked = sorted(enumerate(spec.methods), key=lambda im: (im[1].family.family, -im[1].priority, im[0]))
    methods = tuple(
        Method(
            method_id=spec_m.id,
            family=spec_m.family.family,
            priority=spec_m.priority,
            requires_mask=mask(spec_m.requires),
            excludes_mask=mask(spec_m.excludes),
            steps=tuple(PlannedStep(step.task, step.action.action_kind) for step in spec_m.steps),
        )
        for _, spec_m in ranked
    )
    return MethodLibrary(spec.library_version, tags, methods)


def load_method_library(path: Path = DEFAULT_METHODS_PATH) -> MethodLibrary:
    """Read and validate a method file; a TOML syntax error is refused the same way."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise MethodLibraryInvalid(path, [FieldViolation("<file>", f"not valid TOML: {exc}")]) from exc
    return parse_method_library(document, path)
