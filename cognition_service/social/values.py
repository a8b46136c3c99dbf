"""An Ori's ranked values as the social layer reads them: nine domains, priority 0..100."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from egbe.v1 import kernel_pb2

PRIORITY_MAX = 100


class Domain(StrEnum):
    """The nine value domains (kernel_pb2.ValueDomain), by name."""

    CHILD_SAFETY = "child_safety"
    SAFETY = "safety"
    CRAFT = "craft"
    KINSHIP = "kinship"
    KNOWLEDGE = "knowledge"
    AUTONOMY = "autonomy"
    HONESTY = "honesty"
    COMMUNITY = "community"
    JOY = "joy"

    @property
    def proto(self) -> int:
        return kernel_pb2.ValueDomain.Value(f"VALUE_DOMAIN_{self.name}")


def clamp_priority(priority: int) -> int:
    return max(0, min(PRIORITY_MAX, priority))


@dataclass(frozen=True)
class RankedValues:
    """Priorities per domain; `ranking` orders them strongest first (ties: domain order)."""

    priorities: Mapping[Domain, int]

    @classmethod
    def of(cls, priorities: Mapping[Domain, int]) -> RankedValues:
        return cls({d: clamp_priority(p) for d, p in priorities.items()})

    def priority(self, domain: Domain) -> int:
        return self.priorities.get(domain, 0)

    @property
    def ranking(self) -> tuple[Domain, ...]:
        order = list(Domain)
        return tuple(sorted(self.priorities, key=lambda d: (-self.priorities[d], order.index(d))))

    def alignment(self, stances: Mapping[Domain, int]) -> int:
        """Σ priority × stance / 100, where a stance is -100 (violates) .. +100 (serves) a value."""
        return sum(self.priority(d) * max(-100, min(100, s)) for d, s in stances.items()) // 100

    def as_payload(self) -> dict[str, int]:
        return {d.value: self.priorities[d] for d in self.ranking}
