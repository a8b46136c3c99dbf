"""Needs → goals: the most pressing unmet need becomes a structured goal the HTN planner can decompose."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kernel_service.behavior.htn import MethodLibrary
from kernel_service.behavior.vocabulary import GoalFamily, Need
from services.goal_refs import AUTONOMOUS_INSTANCE, encode_goal_ref


@dataclass(frozen=True)
class NeedGoals:
    """The goal ref each need surfaces, laid out for vectorized lookup (index = Need)."""

    by_need: NDArray[np.uint32]
    purpose_with_station: int

    @classmethod
    def for_library(cls, library: MethodLibrary) -> NeedGoals:
        """Safety → seek shelter (Travel), Sustaining → SelfCare, Social → Social, Purpose → Vocation."""

        def ref(family: GoalFamily, *tags: str) -> int:
            mask = sum(library.tag_bit(tag) for tag in tags)
            return encode_goal_ref(family, mask, AUTONOMOUS_INSTANCE)

        by_need = np.zeros(len(Need), dtype=np.uint32)
        by_need[Need.SAFETY] = ref(GoalFamily.TRAVEL, "seek-safety")
        by_need[Need.SUSTAINING] = ref(GoalFamily.SELF_CARE)
        by_need[Need.SOCIAL] = ref(GoalFamily.SOCIAL)
        by_need[Need.PURPOSE] = ref(GoalFamily.VOCATION)
        # An Ori with a registered vocation knows its worksite, so its own purpose takes the rich path.
        return cls(by_need, ref(GoalFamily.VOCATION, "station-known"))

    def goal_for(self, need: Need, has_vocation: bool) -> int:
        if need == Need.PURPOSE and has_vocation:
            return self.purpose_with_station
        return int(self.by_need[need])


def most_pressing_need(pressures: tuple[int, int, int, int], threshold_bp: int) -> Need:
    """Scalar reference: highest pressure (Safety, Sustaining, Social, Purpose win ties in that order)."""
    best = max(range(4), key=lambda i: (pressures[i], -i))
    return Need(best + 1) if pressures[best] >= threshold_bp else Need.NONE


def most_pressing_needs(pressures: NDArray[np.uint16], threshold_bp: int) -> NDArray[np.uint8]:
    """Vectorized: `pressures` is (n, 4) in Need order; argmax keeps the first maximum, as the scalar."""
    best = np.argmax(pressures, axis=1)
    top = np.take_along_axis(pressures, best[:, None], axis=1)[:, 0]
    return np.where(top >= threshold_bp, best + 1, Need.NONE).astype(np.uint8)


def surface_goals(
    needs: NDArray[np.uint8], vocation_ref: NDArray[np.uint32], goals: NeedGoals
) -> NDArray[np.uint32]:
    """Goal ref per row for the surfaced need (0 where no need is pressing)."""
    refs = goals.by_need[needs]
    return np.where(
        (needs == Need.PURPOSE) & (vocation_ref != 0), np.uint32(goals.purpose_with_station), refs
    )
