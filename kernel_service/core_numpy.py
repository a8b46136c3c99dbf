"""The tick core in numpy: ladder, damping, grace, cadences and guards over the agent arrays.

Same semantics as the C core (`_core/moirai_core.c`), proven byte-identical by differential
tests. No clock, no RNG: every output is a function of the arrays and the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from egbe.v1 import action_pb2, common_pb2, perception_pb2
from kernel_service.agent_state import (
    AGENT_BIT_COGNITION_DECIDED,
    AGENT_BIT_OUT_OVERRIDDEN,
    CANDIDATE_BIT_NEEDS_REHYDRATION,
    COUNT_CANDIDATES,
    COUNT_CHANGED,
    COUNT_GUARDS,
    COUNT_TRANSITIONS,
    GUARD_BIT_REPEATED_ACTION,
    GUARD_BIT_STALE_GOAL,
    REASON_COUNT_LEN,
    TIER_COUNT_LEN,
    AgentArrays,
)
from kernel_service.config import KernelConfig

CLOTHO = common_pb2.COGNITION_TIER_CLOTHO
LACHESIS = common_pb2.COGNITION_TIER_LACHESIS
ATROPOS = common_pb2.COGNITION_TIER_ATROPOS
R = action_pb2  # TierReason, CognitionCause and ActionKind values live in action.proto
FLAG = perception_pb2


@dataclass(frozen=True)
class CoreParams:
    """One tick's scalar inputs to the core: the world tick and the config numbers it decides with."""

    tick: int
    decision_interval_ticks: int
    transition_damping_ticks: int
    deescalation_grace_ticks: int
    clotho_proximity_mm: int
    repeated_action_limit: int
    stale_goal_tick_limit: int
    reflection_interval_ticks: int
    summary_interval_ticks: int
    guard_priority_bp: int

    @classmethod
    def for_tick(cls, config: KernelConfig, tick: int) -> CoreParams:
        return cls(
            tick=tick,
            decision_interval_ticks=config.decision_interval_ticks,
            transition_damping_ticks=config.transition_damping_ticks,
            deescalation_grace_ticks=config.deescalation_grace_ticks,
            clotho_proximity_mm=config.clotho_proximity_mm,
            repeated_action_limit=config.repeated_action_limit,
            stale_goal_tick_limit=config.stale_goal_tick_limit,
            reflection_interval_ticks=config.reflection_interval_ticks,
            summary_interval_ticks=config.summary_interval_ticks,
            guard_priority_bp=config.guard_priority_bp,
        )


def _compact(
    mask: NDArray[np.bool_], out: NDArray[np.uint32], counts: NDArray[np.uint32], which: int
) -> NDArray[np.intp]:
    index = np.flatnonzero(mask)
    out[: len(index)] = index
    counts[which] = len(index)
    return index


# Ladder index bits: PerceptionFlagBit 1..5 shifted down by one, then addressed and within proximity.
ADDRESSED_BIT, PROXIMITY_BIT = 5, 6
RUNGS = (
    (FLAG.PERCEPTION_FLAG_BIT_OPEN_CROSSROADS - 1, R.TIER_REASON_OPEN_CROSSROADS),
    (FLAG.PERCEPTION_FLAG_BIT_IMMINENT_IRREVERSIBLE_ACTION - 1, R.TIER_REASON_IMMINENT_IRREVERSIBLE_ACTION),
    (ADDRESSED_BIT, R.TIER_REASON_ADDRESSED_BY_PLAYER),
    (FLAG.PERCEPTION_FLAG_BIT_ON_SCREEN - 1, R.TIER_REASON_ON_SCREEN),
    (PROXIMITY_BIT, R.TIER_REASON_PROXIMITY),
    (FLAG.PERCEPTION_FLAG_BIT_SCENE_COPRESENCE - 1, R.TIER_REASON_SCENE_COPRESENCE),
    (FLAG.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD - 1, R.TIER_REASON_RESIDENT_WORLD),
)


def _ladder_rung(index: int) -> int:
    """The first matching rung, in the seed's order, for one combination of signals."""
    for bit, reason in RUNGS:
        if index >> bit & 1:
            return reason
    return R.TIER_REASON_OFFLINE_OR_DISTANT


# Every combination's rung, so the vectorized ladder is a single gather.
LADDER = np.array([_ladder_rung(index) for index in range(128)], dtype=np.uint8)


def assign_ladder_reason(a: AgentArrays, proximity_mm: int) -> NDArray[np.uint8]:
    """The priority ladder's first matching rung per agent."""
    index = (a.live("signal_flags") >> 1) & np.uint16(0x1F)
    index |= (a.live("addressed_by_player_id") != 0).view(np.uint8) << np.uint8(ADDRESSED_BIT)
    index |= (a.live("player_proximity_mm") <= proximity_mm).view(np.uint8) << np.uint8(PROXIMITY_BIT)
    reason: NDArray[np.uint8] = LADDER[index]
    return reason


@dataclass
class _Tick:
    """Intermediate per-agent arrays one tick passes between its phases."""

    tick: np.uint64
    slot: NDArray[np.uint64]
    reason: NDArray[np.uint8]
    previous: NDArray[np.uint8]
    previous_reason: NDArray[np.uint8]
    candidate: NDArray[np.uint8]
    transition: NDArray[np.bool_]
    entered_clotho: NDArray[np.bool_]
    cause: NDArray[np.uint8]
    kind: NDArray[np.uint8]
    source: NDArray[np.uint8]
    goal: NDArray[np.uint32]
    priority: NDArray[np.uint16]
    step: NDArray[np.uint16]
    repeat_fire: NDArray[np.bool_]
    stale_fire: NDArray[np.bool_]


def run_core_numpy(a: AgentArrays, p: CoreParams) -> None:
    """One tick over every live agent; results land in `a`'s arrays, outputs and counts."""
    t = _assign_tiers(a, p)
    _dispatch(a, p, t)
    _guard(a, p, t)
    _emit(a, t)


def _assign_tiers(a: AgentArrays, p: CoreParams) -> _Tick:
    """The ladder, then de-escalation grace, then transition damping (urgent rungs bypass it)."""
    n = a.count
    tick = np.uint64(p.tick)
    reason = assign_ladder_reason(a, p.clotho_proximity_mm)
    clotho_signal = reason <= R.TIER_REASON_SCENE_COPRESENCE
    candidate = np.where(
        clotho_signal,
        np.uint8(CLOTHO),
        np.where(reason == R.TIER_REASON_RESIDENT_WORLD, np.uint8(LACHESIS), np.uint8(ATROPOS)),
    ).astype(np.uint8)
    last_clotho = a.live("last_clotho_signal_tick")
    last_clotho[clotho_signal] = tick

    previous = a.live("tier").copy()
    previous_reason = a.live("tier_reason").copy()
    ticks_in_tier = a.live("ticks_in_tier")
    grace = (
        (previous == CLOTHO)
        & ~clotho_signal
        & ((tick - last_clotho) <= np.uint64(p.deescalation_grace_ticks))
    )
    candidate[grace] = CLOTHO
    reason[grace] = R.TIER_REASON_DEESCALATION_GRACE
    urgent = (reason >= R.TIER_REASON_OPEN_CROSSROADS) & (reason <= R.TIER_REASON_ON_SCREEN)
    hold = (
        (previous != 0)
        & (candidate != previous)
        & ~urgent
        & (ticks_in_tier < min(p.transition_damping_ticks, 65535))
    )
    candidate[hold] = previous[hold]
    reason[hold] = R.TIER_REASON_DAMPING_HOLD
    transition = candidate != previous
    np.copyto(ticks_in_tier, np.where(transition, 0, np.minimum(ticks_in_tier, 65534) + 1).astype(np.uint16))
    a.live("tier")[:] = candidate
    a.live("tier_reason")[:] = reason
    empty = np.zeros(n, dtype=bool)
    return _Tick(
        tick=tick,
        slot=np.arange(n, dtype=np.uint64),
        reason=reason,
        previous=previous,
        previous_reason=previous_reason,
        candidate=candidate,
        transition=transition,
        entered_clotho=transition & (candidate == CLOTHO),
        cause=np.zeros(n, dtype=np.uint8),
        kind=a.live("cached_kind").copy(),
        source=a.live("cached_source").copy(),
        goal=a.live("cached_goal_ref").copy(),
        priority=a.live("cached_priority").copy(),
        step=a.live("cached_plan_step").copy(),
        repeat_fire=empty,
        stale_fire=empty,
    )


def _dispatch(a: AgentArrays, p: CoreParams, t: _Tick) -> None:
    """Clotho plans on escalation and every decision interval (phase by slot); Lachesis reflections
    and Atropos summaries come due at slot-staggered ticks. Everything else holds the cached action."""
    tick = t.tick
    is_clotho = t.candidate == CLOTHO
    # 64-bit division is the costly step here, so each modulo runs only over the agents it concerns.
    clotho = np.flatnonzero(is_clotho)
    on_phase = ((tick + t.slot[clotho]) % np.uint64(p.decision_interval_ticks)) == 0
    plan = np.zeros(len(is_clotho), dtype=bool)
    plan[clotho] = t.entered_clotho[clotho] | on_phase
    reflection, summary = np.uint64(p.reflection_interval_ticks), np.uint64(p.summary_interval_ticks)
    next_call = a.live("next_call_tick")
    entered = np.flatnonzero(t.transition & ~is_clotho)
    entered_interval = np.where(t.candidate[entered] == LACHESIS, reflection, summary)
    next_call[entered] = tick + np.uint64(1) + t.slot[entered] % entered_interval
    due = ~is_clotho & (tick >= next_call)
    due_rows = np.flatnonzero(due)
    next_call[due_rows] = tick + np.where(t.candidate[due_rows] == LACHESIS, reflection, summary)
    t.cause[plan] = R.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING
    t.kind[plan] = R.ACTION_KIND_PLAN
    reflect_due = due & (t.candidate == LACHESIS)
    summary_due = due & (t.candidate == ATROPOS)
    t.cause[reflect_due] = R.COGNITION_CAUSE_LACHESIS_REFLECTION
    t.kind[reflect_due] = R.ACTION_KIND_REFLECT
    t.cause[summary_due] = R.COGNITION_CAUSE_ATROPOS_SUMMARY
    t.kind[summary_due] = R.ACTION_KIND_SUMMARIZE


def _guard(a: AgentArrays, p: CoreParams, t: _Tick) -> None:
    """Repeated decided actions force a reflection; a goal held without progress forces a change."""
    bits = a.live("agent_bits")
    fresh = (bits & AGENT_BIT_COGNITION_DECIDED) != 0
    cached_kind = a.live("cached_kind")
    cached_goal = a.live("cached_goal_ref")
    last_kind = a.live("last_decided_kind")
    last_goal = a.live("last_decided_goal_ref")
    repeated = a.live("repeated_action_count")
    same_action = (cached_kind == last_kind) & (cached_goal == last_goal)
    np.copyto(
        repeated,
        np.where(fresh, np.where(same_action, np.minimum(repeated, 254) + 1, 1), repeated).astype(np.uint8),
    )
    last_kind[fresh] = cached_kind[fresh]
    last_goal[fresh] = cached_goal[fresh]
    t.repeat_fire = fresh & (repeated >= p.repeated_action_limit)
    repeated[t.repeat_fire] = 0

    signal_goal = a.live("goal_ref")
    progress = a.live("goal_progress_signature")
    seen_goal = a.live("seen_goal_ref")
    seen_progress = a.live("seen_progress_signature")
    stale = a.live("stale_goal_ticks")
    has_goal = signal_goal != 0
    no_progress = (signal_goal == seen_goal) & (progress == seen_progress)
    np.copyto(
        stale,
        np.where(has_goal, np.where(no_progress, np.minimum(stale, 254) + 1, 1), 0).astype(np.uint8),
    )
    seen_goal[:] = signal_goal
    seen_progress[:] = progress
    t.stale_fire = has_goal & (stale >= p.stale_goal_tick_limit)
    stale[t.stale_fire] = 0

    guard_fire = t.repeat_fire | t.stale_fire
    overridden = (t.cause != 0) | guard_fire
    np.copyto(bits, np.where(overridden, np.uint8(AGENT_BIT_OUT_OVERRIDDEN), np.uint8(0)))
    t.kind[t.repeat_fire] = R.ACTION_KIND_REFLECT
    t.cause[t.repeat_fire] = R.COGNITION_CAUSE_GUARD_REFLECTION
    t.kind[t.stale_fire] = R.ACTION_KIND_CHANGE_GOAL
    t.goal[t.stale_fire] = signal_goal[t.stale_fire]
    t.source[guard_fire] = R.ACTION_SOURCE_GUARD
    t.priority[guard_fire] = p.guard_priority_bp


def _emit(a: AgentArrays, t: _Tick) -> None:
    """Compacted outputs in slot order, the changed set, the new output actions, and the counts."""
    f = a.fields
    n = a.count
    out = a.outputs
    counts = a.counts
    index = _compact(t.cause != 0, out["candidate_slot"], counts, COUNT_CANDIDATES)
    out["candidate_cause"][: len(index)] = t.cause[index]
    out["candidate_bits"][: len(index)] = np.where(
        t.entered_clotho[index], CANDIDATE_BIT_NEEDS_REHYDRATION, 0
    )
    index = _compact(t.transition, out["transition_slot"], counts, COUNT_TRANSITIONS)
    out["transition_from"][: len(index)] = t.previous[index]
    out["transition_to"][: len(index)] = t.candidate[index]
    index = _compact(t.repeat_fire | t.stale_fire, out["guard_slot"], counts, COUNT_GUARDS)
    out["guard_bits"][: len(index)] = np.where(t.repeat_fire[index], GUARD_BIT_REPEATED_ACTION, 0) | np.where(
        t.stale_fire[index], GUARD_BIT_STALE_GOAL, 0
    )
    changed = (
        t.transition
        | (t.reason != t.previous_reason)
        | (t.kind != f["out_kind"][:n])
        | (t.source != f["out_source"][:n])
        | (t.goal != f["out_goal_ref"][:n])
        | (t.priority != f["out_priority"][:n])
        | (t.step != f["out_plan_step"][:n])
    )
    _compact(changed, out["changed_slot"], counts, COUNT_CHANGED)
    a.live("out_kind")[:] = t.kind
    a.live("out_source")[:] = t.source
    a.live("out_goal_ref")[:] = t.goal
    a.live("out_priority")[:] = t.priority
    a.live("out_plan_step")[:] = t.step
    a.reason_counts[:] = np.bincount(t.reason, minlength=REASON_COUNT_LEN)[:REASON_COUNT_LEN]
    a.tier_counts[:] = np.bincount(t.candidate, minlength=TIER_COUNT_LEN)[:TIER_COUNT_LEN]
