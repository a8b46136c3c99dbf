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
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import kernel_pb2


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


@dataclass(frozen=True)
class Escalations:
    """Agents arbitration sends to cognition this tick (ascending slots) and why (CognitionCause)."""

    slots: NDArray[np.uint32]
    causes: NDArray[np.uint8]


class BehaviorLayer(Protocol):
    """What the kernel needs from the behaviour layer."""

    def register(self, first_slot: int, registrations: Sequence[kernel_pb2.AgentRegistration]) -> None:
        """Take personality, values, quirks, vocation and minor flag for slots first_slot.. onwards."""

    def decide(self, slots: NDArray[np.uint32], signals: BehaviorSignals, out: BehaviorDecisions) -> None:
        """Deterministically fill `out[slots]` with each agent's next cheap action (no clock, no RNG)."""

    def arbitrate(
        self, slots: NDArray[np.uint32], eligible: NDArray[np.bool_], tick: int, cognition_available: bool
    ) -> Escalations:
        """After `decide` over `slots` (ascending): which `eligible` ones escalate to cognition now,
        rate-limited."""

    def fingerprint_inputs(self) -> Mapping[str, str]:
        """What beyond KernelConfig decides the layer's actions (its method library), for the fingerprint."""

    def snapshot(self) -> Mapping[str, NDArray[np.generic]]:
        """Every per-agent array, for kernel snapshots and replay."""

    def restore(self, arrays: Mapping[str, NDArray[np.generic]]) -> None:
        """Inverse of snapshot."""
