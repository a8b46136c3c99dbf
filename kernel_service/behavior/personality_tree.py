"""The personality behavior tree, scalar reference: one Ori, legible, the spec of the vectorized kernel.

Routines are tried in the order of the value hierarchy: MaintainSafety (a minor present or a threat,
and the matching safety value clears the threshold), SelfCare under fatigue, Vocation, Social,
Curiosity, and Observe, which always succeeds. A routine's drive mixes two trait axes, the Ori's
strongest value behind that routine and (where one exists) its need; every decision names the
values it honours and the quirks that colour it.
"""

from __future__ import annotations

from dataclasses import dataclass

from egbe.v1 import kernel_pb2
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.profile import Profile, ValueDomain
from kernel_service.behavior.vocabulary import (
    MINOR_PRESENT_FLAG,
    ROUTINE_ACTION,
    THREAT_FLAG,
    Routine,
    Trait,
)

BP = 10_000
D = kernel_pb2.ValueDomain

# Value domains each routine can honour, strongest held first (ties: listed order).
ROUTINE_VALUES: dict[Routine, tuple[ValueDomain, ValueDomain]] = {
    Routine.MAINTAIN_SAFETY: (D.VALUE_DOMAIN_CHILD_SAFETY, D.VALUE_DOMAIN_SAFETY),
    Routine.SELF_CARE: (D.VALUE_DOMAIN_SAFETY, D.VALUE_DOMAIN_JOY),
    Routine.VOCATION: (D.VALUE_DOMAIN_CRAFT, D.VALUE_DOMAIN_COMMUNITY),
    Routine.SOCIAL: (D.VALUE_DOMAIN_KINSHIP, D.VALUE_DOMAIN_COMMUNITY),
    Routine.CURIOSITY: (D.VALUE_DOMAIN_KNOWLEDGE, D.VALUE_DOMAIN_JOY),
    Routine.OBSERVE: (D.VALUE_DOMAIN_AUTONOMY, D.VALUE_DOMAIN_HONESTY),
}


@dataclass(frozen=True)
class TreeInputs:
    """What the tree reads besides the profile; all basis points except the flag bits."""

    need_safety_bp: int = 0
    need_sustaining_bp: int = 0
    need_social_bp: int = 0
    need_purpose_bp: int = 0
    fatigue_bp: int = 0
    signal_flags: int = 0
    hard_objective_bp: int = BP


@dataclass(frozen=True)
class TreeDecision:
    routine: Routine
    action_kind: int
    priority_bp: int
    honoured_values: tuple[ValueDomain, ...]
    quirks: tuple[str, ...]

    @property
    def honoured_value(self) -> ValueDomain:
        """The strongest honoured value, or UNSPECIFIED when the Ori holds none behind this routine."""
        return self.honoured_values[0] if self.honoured_values else D.VALUE_DOMAIN_UNSPECIFIED


def _held(profile: Profile, domains: tuple[ValueDomain, ...]) -> tuple[ValueDomain, ...]:
    """Domains the Ori holds (weight > 0), strongest first; ties keep the listed order."""
    held = [d for d in domains if profile.value(d) > 0]
    return tuple(sorted(held, key=lambda d: -profile.value(d)))


def _drive(a: int, b: int, value: int, need: int) -> int:
    return (a + b + value + need) // 4


def evaluate_personality_tree(profile: Profile, inputs: TreeInputs, config: BehaviorConfig) -> TreeDecision:
    """Walk the routines in order; the first whose condition holds decides."""

    def decide(routine: Routine, priority: int, honoured: tuple[ValueDomain, ...]) -> TreeDecision:
        return TreeDecision(
            routine, ROUTINE_ACTION[routine], min(priority, BP), honoured, profile.quirks_for(routine)
        )

    minor = bool(inputs.signal_flags & MINOR_PRESENT_FLAG)
    threat = bool(inputs.signal_flags & THREAT_FLAG)
    guards: list[ValueDomain] = []
    if minor:
        guards.append(D.VALUE_DOMAIN_CHILD_SAFETY)
    if minor or threat:
        guards.append(D.VALUE_DOMAIN_SAFETY)
    clearing = tuple(d for d in guards if profile.value(d) >= config.safety_value_threshold_bp)
    if clearing:
        honoured = _held(profile, clearing)
        return decide(Routine.MAINTAIN_SAFETY, profile.value(honoured[0]), honoured)

    if inputs.fatigue_bp >= config.fatigue_self_care_bp:
        return decide(Routine.SELF_CARE, inputs.fatigue_bp, _held(profile, ROUTINE_VALUES[Routine.SELF_CARE]))

    t = profile.trait
    candidates = (
        (
            Routine.VOCATION,
            t(Trait.CONSCIENTIOUSNESS),
            t(Trait.AMBITION),
            inputs.need_purpose_bp,
            profile.vocation_ref != 0,
        ),
        (Routine.SOCIAL, t(Trait.WARMTH), t(Trait.PLAYFULNESS), inputs.need_social_bp, True),
        (Routine.CURIOSITY, t(Trait.CURIOSITY), BP - t(Trait.CAUTION), t(Trait.PLAYFULNESS), True),
    )
    for routine, axis_a, axis_b, pull, eligible in candidates:
        honoured = _held(profile, ROUTINE_VALUES[routine])
        strongest = profile.value(honoured[0]) if honoured else 0
        drive = _drive(axis_a, axis_b, strongest, pull)
        if routine == Routine.VOCATION:
            # Grief and anxiety down-weight hard objectives (the emotion multiplier).
            drive = drive * inputs.hard_objective_bp // BP
        if eligible and drive >= config.routine_drive_gate_bp:
            return decide(routine, drive, honoured)

    return decide(Routine.OBSERVE, t(Trait.CAUTION), _held(profile, ROUTINE_VALUES[Routine.OBSERVE]))
