"""The golden harness: each fixture profile must land in its expected routine and honour its value.

A case passes only if the scalar reference tree and the vectorized layer (through register/decide,
the kernel's own path) both land where the fixture says.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from egbe.v1 import kernel_pb2
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.emotion import EmotionalEpisode, Mood, evaluate_emotion
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.personality_tree import TreeInputs, evaluate_personality_tree
from kernel_service.behavior.profile import profile_from_registration
from kernel_service.behavior.vocabulary import MINOR_PRESENT_FLAG, THREAT_FLAG, TRAIT_FIELDS, Routine
from kernel_service.behavior_seam import BehaviorDecisions, BehaviorSignals

Bp = Annotated[int, Field(ge=0, le=10_000)]


class GoldenSignals(BaseModel):
    model_config = ConfigDict(extra="forbid")

    need_safety: Bp = 0
    need_sustaining: Bp = 0
    need_social: Bp = 0
    need_purpose: Bp = 0
    fatigue: Bp = 0
    threat: bool = False
    minor_present: bool = False

    @property
    def flags(self) -> int:
        return (THREAT_FLAG if self.threat else 0) | (MINOR_PRESENT_FLAG if self.minor_present else 0)


class GoldenEpisode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    valence_bp: Annotated[int, Field(ge=-10_000, le=10_000)]
    arousal_bp: Bp
    loss: bool = False


class GoldenCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    traits: dict[str, Bp] = Field(default_factory=dict)
    values: dict[str, Bp] = Field(default_factory=dict)
    quirks: list[str] = Field(default_factory=list)
    vocation_ref: int = Field(default=0, ge=0)
    signals: GoldenSignals = Field(default_factory=GoldenSignals)
    episodes: list[GoldenEpisode] = Field(default_factory=list)
    expect_routine: str
    expect_value: str

    def registration(self) -> kernel_pb2.AgentRegistration:
        traits = kernel_pb2.PersonalityTraits(**{f"{axis}_bp": bp for axis, bp in self.traits.items()})
        values = [
            kernel_pb2.RankedValue(
                domain=kernel_pb2.ValueDomain.Value(f"VALUE_DOMAIN_{d.upper()}"), weight_bp=w
            )
            for d, w in self.values.items()
        ]
        return kernel_pb2.AgentRegistration(
            traits=traits, values=values, quirks=self.quirks, vocation_ref=self.vocation_ref
        )


class GoldenFixture(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: list[GoldenCase] = Field(min_length=1)


@dataclass(frozen=True)
class GoldenOutcome:
    name: str
    expected: tuple[str, str]
    scalar: tuple[str, str]
    vectorized: tuple[str, str]
    quirks: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.scalar == self.expected and self.vectorized == self.expected


def _names(routine: int, value: int) -> tuple[str, str]:
    domain = (
        kernel_pb2.ValueDomain.Name(kernel_pb2.ValueDomain.ValueType(value))
        .removeprefix("VALUE_DOMAIN_")
        .lower()
    )
    return Routine(routine).name.lower(), domain


def run_golden_harness(path: Path, config: BehaviorConfig | None = None) -> list[GoldenOutcome]:
    """Evaluate every case of a fixture file both ways; the caller asserts `passed`."""
    config = config or BehaviorConfig()
    fixture = GoldenFixture.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))
    cases = fixture.cases
    n = len(cases)
    for case in cases:
        if not set(case.traits) <= {f.removesuffix("_bp") for f in TRAIT_FIELDS}:
            raise ValueError(f"{path}: case {case.name!r} names an unknown trait axis")
    layer = PersonalityBehaviorLayer(config, capacity=n)
    registrations = [case.registration() for case in cases]
    layer.register(0, registrations)
    for slot, case in enumerate(cases):
        for episode in case.episodes:
            layer.record_episode(slot, EmotionalEpisode(episode.valence_bp, episode.arousal_bp, episode.loss))

    def column(name: str) -> np.ndarray:
        return np.array([getattr(case.signals, name) for case in cases], dtype=np.uint16)

    signals = BehaviorSignals(
        need_safety_bp=column("need_safety"),
        need_sustaining_bp=column("need_sustaining"),
        need_social_bp=column("need_social"),
        need_purpose_bp=column("need_purpose"),
        fatigue_bp=column("fatigue"),
        signal_flags=np.array([case.signals.flags for case in cases], dtype=np.uint16),
        goal_ref=np.zeros(n, dtype=np.uint32),
    )
    out = BehaviorDecisions(
        kind=np.zeros(n, np.uint8),
        source=np.zeros(n, np.uint8),
        goal_ref=np.zeros(n, np.uint32),
        plan_step=np.zeros(n, np.uint16),
        priority=np.zeros(n, np.uint16),
    )
    layer.decide(np.arange(n, dtype=np.uint32), signals, out)

    outcomes = []
    for slot, (case, registration) in enumerate(zip(cases, registrations, strict=True)):
        mood = Mood()
        for episode in case.episodes:
            mood = mood.fold(EmotionalEpisode(episode.valence_bp, episode.arousal_bp, episode.loss))
        s = case.signals
        needs = (s.need_safety, s.need_sustaining, s.need_social, s.need_purpose)
        emotion = evaluate_emotion(mood, needs, s.fatigue, config)
        decision = evaluate_personality_tree(
            profile_from_registration(registration),
            TreeInputs(*needs, s.fatigue, s.flags, emotion.hard_objective_bp),
            config,
        )
        report = layer.report(slot)
        outcomes.append(
            GoldenOutcome(
                name=case.name,
                expected=(case.expect_routine, case.expect_value),
                scalar=_names(decision.routine, decision.honoured_value),
                vectorized=_names(report.routine, report.honoured_value),
                quirks=decision.quirks,
            )
        )
    return outcomes
