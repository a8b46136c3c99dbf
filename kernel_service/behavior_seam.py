"""The seam between the tick core and the behaviour layer (`kernel_service/behavior/`).

The kernel owns tiers, cadences and guards; the behaviour layer owns what an Ori does cheaply (HTN
plan steps, personality behavior trees). Each tick the kernel asks the layer for fresh cheap actions
for the agents whose turn it is (Lachesis stepping at 10 Hz, and any agent falling back because
cognition is unavailable, killed or over budget). Everything is numpy arrays indexed by slot, so the
layer can be vectorized and the kernel never copies per agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import kernel_pb2

if TYPE_CHECKING:
    from kernel_service.slot_ranges import SlotRanges
    from services.errors import FieldViolation


@dataclass(frozen=True)
class BehaviorSignals:
    """Full-population perception arrays (index = slot), owned by the kernel; read-only to the layer."""

    need_safety_bp: NDArray[np.uint16]
    need_sustaining_bp: NDArray[np.uint16]
    need_social_bp: NDArray[np.uint16]
    need_purpose_bp: NDArray[np.uint16]
    fatigue_bp: NDArray[np.uint16]
    # PerceptionFlagBit bits (threat = bit 6, minor present = bit 7, ...).
    signal_flags: NDArray[np.uint16]
    goal_ref: NDArray[np.uint32]


@dataclass(frozen=True)
class BehaviorDecisions:
    """Full-population output arrays (index = slot); `decide` writes only the rows it is asked for."""

    kind: NDArray[np.uint8]  # ActionKind
    source: NDArray[np.uint8]  # ActionSource: BEHAVIOR_TREE or HTN
    goal_ref: NDArray[np.uint32]
    plan_step: NDArray[np.uint16]
    priority: NDArray[np.uint16]


# The kernel's cached-action arrays a step writes, in BehaviorDecisions' field order.
DECISION_FIELDS = ("kind", "source", "goal_ref", "plan_step", "priority")


class KernelArrays(Protocol):
    """The kernel's per-agent arrays (kernel_service.agent_state.AgentArrays) as the step sees them."""

    @property
    def count(self) -> int:
        """Live agents: rows [0, count)."""

    @property
    def generation(self) -> int:
        """Bumps whenever the arrays are reallocated (a bound C step re-binds its pointers)."""

    @property
    def fields(self) -> dict[str, NDArray[Any]]:
        """Capacity-sized arrays by AGENT_FIELDS name."""


def signals_of(fields: Mapping[str, NDArray[Any]]) -> BehaviorSignals:
    """The kernel's perception arrays the layer reads."""
    return BehaviorSignals(
        need_safety_bp=fields["need_safety_bp"],
        need_sustaining_bp=fields["need_sustaining_bp"],
        need_social_bp=fields["need_social_bp"],
        need_purpose_bp=fields["need_purpose_bp"],
        fatigue_bp=fields["fatigue_bp"],
        signal_flags=fields["signal_flags"],
        goal_ref=fields["goal_ref"],
    )


def decisions_of(fields: Mapping[str, NDArray[Any]]) -> BehaviorDecisions:
    """The kernel's cached-action arrays the layer writes."""
    return BehaviorDecisions(
        kind=fields["cached_kind"],
        source=fields["cached_source"],
        goal_ref=fields["cached_goal_ref"],
        plan_step=fields["cached_plan_step"],
        priority=fields["cached_priority"],
    )


@dataclass(frozen=True)
class Escalations:
    """Agents arbitration sends to cognition this tick (ascending slots) and why (CognitionCause)."""

    slots: NDArray[np.uint32]
    causes: NDArray[np.uint8]


class BehaviorLayer(Protocol):
    """What the kernel needs from the behaviour layer."""

    def register(self, first_slot: int, registrations: Sequence[kernel_pb2.AgentRegistration]) -> None:
        """Take personality, values, quirks, vocation and minor flag for slots first_slot.. onwards."""

    def use_core(self, name: str, ranges: SlotRanges | None = None) -> None:
        """The kernel's tick core ("c" or "numpy"): the step runs in the same implementation, over the
        core's slot ranges (kernel.tick_threads) where it is C."""

    def adopt(self, slot: int, goal_ref: int, hold_until: int) -> None:
        """A cognition result became the slot's cached action at this tick: a Lachesis agent holds it
        until tick `hold_until`, then its cheap behaviour pursues the result's goal."""

    def step(self, tick: int, every: int, kernel: KernelArrays, cognition_available: bool) -> Escalations:
        """The 10 Hz step, deterministically (no clock, no RNG), in place over the kernel's arrays: the
        agents whose turn it is (`(tick + slot) % every == 0`) and who are due get their next cheap
        action as their cached action (fresh-flagged when it changed); returns the Lachesis agents
        arbitration escalates to cognition now (ascending slots), rate-limited."""

    def fingerprint_inputs(self) -> Mapping[str, str]:
        """What beyond KernelConfig decides the layer's actions (its method library), for the fingerprint."""

    def snapshot(self) -> Mapping[str, NDArray[np.generic]]:
        """Every per-agent array, for kernel snapshots and replay."""

    def restore_violations(
        self, arrays: Mapping[str, NDArray[np.generic]], agents: int
    ) -> list[FieldViolation]:
        """Whatever keeps `arrays` from being a state of this layer for `agents` agents, changing nothing."""

    def restore(self, arrays: Mapping[str, NDArray[np.generic]], agents: int = 0) -> None:
        """Inverse of snapshot; refuses (InvalidArgument) what `restore_violations` finds, unchanged."""
