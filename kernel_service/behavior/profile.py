"""An Ori's personality profile (traits, ranked values, quirks) as the scalar reference reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from egbe.v1 import kernel_pb2
from kernel_service.behavior.vocabulary import TRAIT_FIELDS, Routine, Trait
from services.errors import FieldViolation

BP = 10_000

# A kernel_pb2.ValueDomain number.
ValueDomain: TypeAlias = int


@dataclass(frozen=True)
class Profile:
    """Eight trait axes and value weights in basis points; quirks may be scoped `routine:text`."""

    traits: tuple[int, ...]
    values: Mapping[ValueDomain, int]
    quirks: tuple[str, ...] = ()
    vocation_ref: int = 0
    minor: bool = False

    def trait(self, axis: Trait) -> int:
        return self.traits[axis]

    def value(self, domain: ValueDomain) -> int:
        return self.values.get(domain, 0)

    def quirks_for(self, routine: Routine) -> tuple[str, ...]:
        """Unscoped quirks colour every routine; `vocation:hums` colours only Vocation."""
        shown: list[str] = []
        for quirk in self.quirks:
            scope, sep, _ = quirk.partition(":")
            if not sep or scope.strip().lower().replace("-", "_") == routine.name.lower():
                shown.append(quirk)
        return tuple(shown)


@dataclass(frozen=True)
class ProfileDraft:
    """Keyword-friendly way to build a Profile (tests, fixtures)."""

    traits: Mapping[str, int] = field(default_factory=dict)
    values: Mapping[str, int] = field(default_factory=dict)
    quirks: tuple[str, ...] = ()
    vocation_ref: int = 0
    minor: bool = False

    def build(self) -> Profile:
        axes = tuple(int(self.traits.get(name.removesuffix("_bp"), 0)) for name in TRAIT_FIELDS)
        values: dict[ValueDomain, int] = {
            int(kernel_pb2.ValueDomain.Value(f"VALUE_DOMAIN_{name.upper()}")): int(weight)
            for name, weight in self.values.items()
        }
        return Profile(axes, values, tuple(self.quirks), self.vocation_ref, self.minor)


def profile_from_registration(registration: kernel_pb2.AgentRegistration) -> Profile:
    """The one place a registration's proto fields become a Profile."""
    traits = tuple(int(getattr(registration.traits, name)) for name in TRAIT_FIELDS)
    values: dict[ValueDomain, int] = {}
    for ranked in registration.values:
        values[ranked.domain] = int(ranked.weight_bp)
    return Profile(
        traits, values, tuple(registration.quirks), int(registration.vocation_ref), bool(registration.minor)
    )


def registration_violations(
    registrations: Sequence[kernel_pb2.AgentRegistration], field_prefix: str = "agents"
) -> list[FieldViolation]:
    """Every out-of-range trait or value of a registration batch, named by field path."""
    violations: list[FieldViolation] = []
    for i, registration in enumerate(registrations):
        at = f"{field_prefix}[{i}]"
        for name in TRAIT_FIELDS:
            if getattr(registration.traits, name) > BP:
                violations.append(FieldViolation(f"{at}.traits.{name}", f"must be 0..{BP} basis points"))
        seen: set[int] = set()
        for v, ranked in enumerate(registration.values):
            if ranked.domain not in kernel_pb2.ValueDomain.values() or ranked.domain == 0:
                violations.append(
                    FieldViolation(f"{at}.values[{v}].domain", "must name one of the nine domains")
                )
            elif ranked.domain in seen:
                violations.append(FieldViolation(f"{at}.values[{v}].domain", "domain ranked twice"))
            seen.add(ranked.domain)
            if ranked.weight_bp > BP:
                violations.append(
                    FieldViolation(f"{at}.values[{v}].weight_bp", f"must be 0..{BP} basis points")
                )
    return violations
