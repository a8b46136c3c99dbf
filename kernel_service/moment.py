"""The moment of a cognition call: what the kernel knew of the Ori on the tick that issued it.

Captured right after the tick, when the dispatcher takes its calls: a numpy take per value over the
calls' slots (copies, so later ticks change nothing) and the batch's situation text by reference.
Each CallMoment message, with its words (emotion, goal, plan step, guards), is built only when the
dispatcher submits that call, outside the tick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2, perception_pb2
from kernel_service.agent_state import AgentArrays, guard_names
from kernel_service.behavior.compiled_plans import NO_METHOD
from kernel_service.behavior.htn import MethodLibrary
from kernel_service.behavior.layer import PersonalityBehaviorLayer
from kernel_service.behavior.vocabulary import Emotion
from kernel_service.behavior_seam import BehaviorLayer
from kernel_service.situations import Situations
from kernel_service.tick_result import GuardStamps
from services.goal_refs import goal_family, goal_tags
from services.vocabulary import GOAL_FAMILY_NAMES

# Kernel arrays a moment reads, by CallMoment field (goal, step and source as the tick answered them;
# the goal falls back to the one perceived when the answer names none).
_KERNEL_VALUES = {
    "player_proximity_mm": "player_proximity_mm",
    "need_safety_bp": "need_safety_bp",
    "need_sustaining_bp": "need_sustaining_bp",
    "need_social_bp": "need_social_bp",
    "need_purpose_bp": "need_purpose_bp",
    "fatigue_bp": "fatigue_bp",
    "signal_flags": "signal_flags",
    "goal_ref": "out_goal_ref",
    "perceived_goal_ref": "goal_ref",
    "plan_step": "out_plan_step",
    "source": "out_source",
    "tier_reason": "tier_reason",
}
_THREAT = 1 << perception_pb2.PERCEPTION_FLAG_BIT_THREAT_PRESENT
_MINOR = 1 << perception_pb2.PERCEPTION_FLAG_BIT_MINOR_PRESENT


def goal_words(goal_ref: int, library: MethodLibrary | None) -> str:
    """A structured goal ref in words: its family, then its context tags ("vocation: station-known");
    "" for no goal or a ref outside the layout (a world's own interned goal)."""
    name = GOAL_FAMILY_NAMES.get(goal_family(goal_ref), "")
    if goal_ref == 0 or not name:
        return ""
    tags = goal_tags(goal_ref)
    named = [tag for bit, tag in enumerate(library.tags) if tags >> bit & 1] if library is not None else []
    return f"{name}: {', '.join(named)}" if named else name


class Moments:
    """One tick's call moments, index for index with its TickResult's candidates."""

    def __init__(
        self,
        slots: NDArray[np.uint32],
        values: Mapping[str, NDArray[Any]],
        situations: Situations,
        layer: PersonalityBehaviorLayer | None,
        display_names: Sequence[str],
    ) -> None:
        self._slots = slots
        self._values = values
        self._situations = situations.by_slot
        self._library = layer.library if layer is not None else None
        self._names = display_names

    def display_name(self, index: int) -> str:
        """The called Ori's display name ("" without an identity), for logs."""
        slot = int(self._slots[index])
        return self._names[slot] if slot < len(self._names) else ""

    def fill(self, index: int, moment: action_pb2.CallMoment) -> None:
        """Write call `index`'s moment into `moment` (the submitted candidate's own field)."""
        value = {name: int(column[index]) for name, column in self._values.items()}
        situation = self._situations.get(int(self._slots[index]))
        if situation is not None:
            moment.situation.CopyFrom(situation)
        moment.player_proximity_mm = value["player_proximity_mm"]
        moment.need_safety_bp = value["need_safety_bp"]
        moment.need_sustaining_bp = value["need_sustaining_bp"]
        moment.need_social_bp = value["need_social_bp"]
        moment.need_purpose_bp = value["need_purpose_bp"]
        moment.fatigue_bp = value["fatigue_bp"]
        moment.threat_present = bool(value["signal_flags"] & _THREAT)
        moment.minor_present = bool(value["signal_flags"] & _MINOR)
        moment.goal_ref = value["goal_ref"]
        moment.goal = goal_words(value["goal_ref"], self._library)
        moment.plan_step = value["plan_step"]
        moment.tier_reason = action_pb2.TierReason.ValueType(value["tier_reason"])
        moment.guards.extend(guard_names(value["guard_bits"]))
        if self._library is not None:
            emotion = value["emotion"]
            moment.emotion = Emotion(emotion).name.lower() if emotion else ""
            method = value["plan_method"]
            if value["source"] == action_pb2.ACTION_SOURCE_HTN and method != NO_METHOD:
                steps = self._library.methods[method].steps
                if value["plan_step"] < len(steps):
                    moment.plan_step_name = steps[value["plan_step"]].task


def capture_moments(
    arrays: AgentArrays,
    behavior: BehaviorLayer | None,
    *,
    slots: NDArray[np.uint32],
    situations: Situations,
    guards: GuardStamps,
    display_names: Sequence[str],
) -> Moments:
    """Take the values of `slots` (the last tick's calls) from the kernel's and the layer's arrays."""
    index = slots.astype(np.intp)
    f = arrays.fields
    values = {name: f[field].take(index) for name, field in _KERNEL_VALUES.items()}
    goal = values["goal_ref"]
    np.copyto(goal, values.pop("perceived_goal_ref"), where=goal == 0)
    guard_bits = np.zeros(len(slots), np.uint8)
    if len(guards.slots):
        # Guard stamps ascend by slot: a binary search finds each call's stamp, if any.
        at = np.minimum(np.searchsorted(guards.slots, slots), len(guards.slots) - 1)
        stamped = guards.slots[at] == slots
        guard_bits[stamped] = guards.bits[at[stamped]]
    values["guard_bits"] = guard_bits
    layer = behavior if isinstance(behavior, PersonalityBehaviorLayer) else None
    if layer is not None:
        values["emotion"] = layer.emotion.take(index)
        values["plan_method"] = layer.plan_method.take(index)
    return Moments(slots, values, situations, layer, display_names)
