"""The personality behavior tree vectorized over struct-of-arrays rows; equal to `personality_tree`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import kernel_pb2
from kernel_service.behavior.config import BehaviorConfig
from kernel_service.behavior.personality_tree import BP, ROUTINE_VALUES
from kernel_service.behavior.vocabulary import (
    MINOR_PRESENT_FLAG,
    ROUTINE_ACTION,
    THREAT_FLAG,
    Routine,
    Trait,
)

I32 = NDArray[np.int32]
D = kernel_pb2.ValueDomain

ROUTINE_KIND = np.zeros(len(Routine), dtype=np.uint8)
for _routine, _kind in ROUTINE_ACTION.items():
    ROUTINE_KIND[_routine] = _kind


@dataclass(frozen=True)
class TreeRows:
    """Inputs for n agents: profile rows gathered from the SoA state plus this tick's signals."""

    traits: NDArray[np.uint16]  # (8, n): row = Trait axis
    values: NDArray[np.uint16]  # (VALUE_COLUMNS, n): row = ValueDomain number
    vocation_ref: NDArray[np.uint32]
    need_social_bp: NDArray[np.uint16]
    need_purpose_bp: NDArray[np.uint16]
    fatigue_bp: NDArray[np.uint16]
    signal_flags: NDArray[np.uint16]
    hard_objective_bp: NDArray[np.int32]


@dataclass(frozen=True)
class TreeResults:
    routine: NDArray[np.uint8]
    action_kind: NDArray[np.uint8]
    priority_bp: NDArray[np.uint16]
    honoured_value: NDArray[np.uint8]


def _strongest(values: NDArray[np.uint16], routine: Routine) -> tuple[I32, I32]:
    """Weight and domain of the routine's strongest held value (domain 0 when none is held)."""
    first, second = ROUTINE_VALUES[routine]
    w_first, w_second = values[first].astype(np.int32), values[second].astype(np.int32)
    first_wins = w_first >= w_second
    weight = np.where(first_wins, w_first, w_second)
    domain = np.where(weight > 0, np.where(first_wins, first, second), 0).astype(np.int32)
    return weight, domain


def evaluate_trees(rows: TreeRows, config: BehaviorConfig) -> TreeResults:
    """Every routine's condition for all rows at once; the first true one in routine order wins."""
    traits, values = rows.traits, rows.values
    flags = rows.signal_flags
    minor = (flags & MINOR_PRESENT_FLAG) != 0
    threat = (flags & THREAT_FLAG) != 0

    w_child = values[D.VALUE_DOMAIN_CHILD_SAFETY].astype(np.int32)
    w_safety = values[D.VALUE_DOMAIN_SAFETY].astype(np.int32)
    child_ok = minor & (w_child >= config.safety_value_threshold_bp)
    safety_ok = (minor | threat) & (w_safety >= config.safety_value_threshold_bp)
    child_first = child_ok & (~safety_ok | (w_child >= w_safety))
    guard_domain = np.where(child_first, D.VALUE_DOMAIN_CHILD_SAFETY, D.VALUE_DOMAIN_SAFETY)
    guard_priority = np.where(child_first, w_child, w_safety)

    fatigue = rows.fatigue_bp.astype(np.int32)
    tired = fatigue >= config.fatigue_self_care_bp
    _, care_domain = _strongest(values, Routine.SELF_CARE)

    def trait(axis: Trait) -> I32:
        column: I32 = traits[axis].astype(np.int32)
        return column

    voc_weight, voc_domain = _strongest(values, Routine.VOCATION)
    voc_drive = (
        ((trait(Trait.CONSCIENTIOUSNESS) + trait(Trait.AMBITION) + voc_weight + rows.need_purpose_bp) // 4)
        * rows.hard_objective_bp
        // BP
    )
    voc_ok = (rows.vocation_ref != 0) & (voc_drive >= config.routine_drive_gate_bp)

    soc_weight, soc_domain = _strongest(values, Routine.SOCIAL)
    soc_drive = (trait(Trait.WARMTH) + trait(Trait.PLAYFULNESS) + soc_weight + rows.need_social_bp) // 4
    soc_ok = soc_drive >= config.routine_drive_gate_bp

    cur_weight, cur_domain = _strongest(values, Routine.CURIOSITY)
    cur_drive = (
        trait(Trait.CURIOSITY) + (BP - trait(Trait.CAUTION)) + cur_weight + trait(Trait.PLAYFULNESS)
    ) // 4
    cur_ok = cur_drive >= config.routine_drive_gate_bp

    _, obs_domain = _strongest(values, Routine.OBSERVE)

    conditions = [child_ok | safety_ok, tired, voc_ok, soc_ok, cur_ok]
    routine = np.select(
        conditions,
        [Routine.MAINTAIN_SAFETY, Routine.SELF_CARE, Routine.VOCATION, Routine.SOCIAL, Routine.CURIOSITY],
        Routine.OBSERVE,
    ).astype(np.uint8)
    priority = np.select(
        conditions, [guard_priority, fatigue, voc_drive, soc_drive, cur_drive], trait(Trait.CAUTION)
    )
    honoured = np.select(
        conditions, [guard_domain, care_domain, voc_domain, soc_domain, cur_domain], obs_domain
    )
    return TreeResults(
        routine=routine,
        action_kind=ROUTINE_KIND[routine],
        priority_bp=np.minimum(priority, BP).astype(np.uint16),
        honoured_value=honoured.astype(np.uint8),
    )
