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
    AGENT_BIT_FRESH_DECISION,
    AGENT_BIT_OBSERVED,
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
    """One tick's scalar inputs to the core: the world tick, whether its frame was full (every agent
    observed), and the config numbers it decides with."""

    tick: int
    observed_all: bool
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
    def for_tick(cls, config: KernelConfig, tick: int, *, observed_all: bool) -> CoreParams:
        return cls(
            tick=tick,
            observed_all=observed_all,
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
    rows: NDArray[np.intp],
    mask: NDArray[np.bool_],
    out: NDArray[np.uint32],
    counts: NDArray[np.uint32],
    which: int,
) -> int:
    chosen = rows[mask]
    out[: len(chosen)] = chosen
    counts[which] = len(chosen)
    return len(chosen)


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


# The ladder's rung -> the tier it asks for (reasons 1..6 are Clotho signals).
CANDIDATE_TIER = np.array(
    [0] + [CLOTHO] * R.TIER_REASON_SCENE_COPRESENCE + [LACHESIS, ATROPOS] + [0] * 7, dtype=np.uint8
)


def run_core_numpy(a: AgentArrays, p: CoreParams) -> None:
    """One tick over every live agent; results land in `a`'s arrays, outputs and counts.

    Shaped like the C core: whole-population passes (tiers, stale goals) in a handful of numpy
    calls, then the rest of the work only over the agents those passes marked (a transition, a changed
    reason, Clotho, a due call, a guard, a fresh or overridden action), usually a few percent."""
    tick = np.uint64(p.tick)
    previous = a.live("tier").copy()
    previous_reason = a.live("tier_reason").copy()
    transition = _assign_tiers(a, p, tick, previous)
    stale_fire = _guard_stale_goals(a, p)
    due = tick >= a.live("next_call_tick")
    marked = (
        transition
        | (a.live("tier_reason") != previous_reason)
        | (a.live("tier") == CLOTHO)
        | due
        | stale_fire
        | (a.live("agent_bits") != 0)
    )
    _settle(a, p, tick, np.flatnonzero(marked), previous, previous_reason, stale_fire)
    a.reason_counts[:] = np.bincount(a.live("tier_reason"), minlength=REASON_COUNT_LEN)[:REASON_COUNT_LEN]
    a.tier_counts[:] = np.bincount(a.live("tier"), minlength=TIER_COUNT_LEN)[:TIER_COUNT_LEN]


def _assign_tiers(
    a: AgentArrays, p: CoreParams, tick: np.uint64, previous: NDArray[np.uint8]
) -> NDArray[np.bool_]:
    """The ladder, then de-escalation grace, then transition damping (urgent rungs bypass it); tier
    state updated in place. Returns which agents changed tier."""
    reason = assign_ladder_reason(a, p.clotho_proximity_mm)
    candidate = CANDIDATE_TIER[reason]
    signal = reason <= R.TIER_REASON_SCENE_COPRESENCE
    last_clotho = a.live("last_clotho_signal_tick")
    np.copyto(last_clotho, tick, where=signal)
    # Grace only concerns a Clotho that lost its signal: few agents, so it runs over their rows.
    losing = np.flatnonzero((previous == CLOTHO) & ~signal)
    graced = losing[(tick - last_clotho[losing]) <= np.uint64(p.deescalation_grace_ticks)]
    candidate[graced] = CLOTHO
    reason[graced] = R.TIER_REASON_DEESCALATION_GRACE
    ticks_in_tier = a.live("ticks_in_tier")
    hold = candidate != previous
    hold &= previous != 0
    hold &= reason > R.TIER_REASON_ON_SCREEN  # not urgent
    hold &= ticks_in_tier < min(p.transition_damping_ticks, 65535)
    np.copyto(candidate, previous, where=hold)
    np.copyto(reason, np.uint8(R.TIER_REASON_DAMPING_HOLD), where=hold)
    transition = candidate != previous
    np.minimum(ticks_in_tier, np.uint16(65534), out=ticks_in_tier)
    ticks_in_tier += np.uint16(1)
    np.copyto(ticks_in_tier, np.uint16(0), where=transition)
    a.live("tier")[:] = candidate
    a.live("tier_reason")[:] = reason
    return transition


def _guard_stale_goals(a: AgentArrays, p: CoreParams) -> NDArray[np.bool_]:
    """A goal held `stale_goal_tick_limit` observed ticks without progress forces a goal change;
    observed progress restarts the count. An agent a delta frame left out was not observed: its
    count holds. The seen signals are stored for every agent (an unobserved agent's have not
    changed). Clears the observed bit; returns where the guard fires."""
    goal = a.live("goal_ref")
    progress = a.live("goal_progress_signature")
    seen_goal = a.live("seen_goal_ref")
    seen_progress = a.live("seen_progress_signature")
    same = goal == seen_goal
    same &= progress == seen_progress
    seen_goal[:] = goal
    seen_progress[:] = progress
    bits = a.live("agent_bits")
    stale = a.live("stale_goal_ticks")
    has_goal = goal != 0
    counted = np.minimum(stale, np.uint8(254))
    counted += np.uint8(1)
    np.copyto(counted, np.uint8(1), where=~same)
    np.copyto(counted, np.uint8(0), where=~has_goal)
    fire = counted >= p.stale_goal_tick_limit
    fire &= has_goal
    if p.observed_all:
        np.copyto(counted, np.uint8(0), where=fire)
        stale[:] = counted
    else:
        observed = (bits & AGENT_BIT_OBSERVED) != 0
        fire &= observed
        np.copyto(counted, np.uint8(0), where=fire)
        np.copyto(stale, counted, where=observed)
    bits &= np.uint8(~AGENT_BIT_OBSERVED & 0xFF)
    return fire


def _settle(
    a: AgentArrays,
    p: CoreParams,
    tick: np.uint64,
    rows: NDArray[np.intp],
    previous: NDArray[np.uint8],
    previous_reason: NDArray[np.uint8],
    stale_fire: NDArray[np.bool_],
) -> None:
    """Over the marked rows only: cadences, the repeated-action guard, the answer, the lists."""
    f = a.fields
    slot = rows.astype(np.uint64)
    candidate = f["tier"][rows]
    before = previous[rows]
    transition = candidate != before
    is_clotho = candidate == CLOTHO
    # Clotho plans on escalation and every decision interval (phase by slot).
    plan = is_clotho & (transition | ((tick + slot) % np.uint64(p.decision_interval_ticks) == 0))
    # Lachesis reflections and Atropos summaries come due at slot-staggered ticks.
    lachesis = candidate == LACHESIS
    interval = np.where(lachesis, np.uint64(p.reflection_interval_ticks), np.uint64(p.summary_interval_ticks))
    next_call = f["next_call_tick"][rows]
    entered = transition & ~is_clotho
    next_call[entered] = tick + np.uint64(1) + slot[entered] % interval[entered]
    due = ~is_clotho & (tick >= next_call)
    next_call[due] = tick + interval[due]
    f["next_call_tick"][rows] = next_call
    cause = np.where(
        plan,
        np.uint8(R.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING),
        np.where(
            due,
            np.where(
                lachesis,
                np.uint8(R.COGNITION_CAUSE_LACHESIS_REFLECTION),
                np.uint8(R.COGNITION_CAUSE_ATROPOS_SUMMARY),
            ),
            np.uint8(0),
        ),
    )
    call_kind = np.where(
        plan,
        np.uint8(R.ACTION_KIND_PLAN),
        np.where(
            due,
            np.where(lachesis, np.uint8(R.ACTION_KIND_REFLECT), np.uint8(R.ACTION_KIND_SUMMARIZE)),
            np.uint8(0),
        ),
    )

    # Repeated decided actions (cognition's, not the behaviour tree's) force a reflection.
    bits = f["agent_bits"][rows]
    decided = (bits & AGENT_BIT_COGNITION_DECIDED) != 0
    cached_kind = f["cached_kind"][rows]
    cached_goal = f["cached_goal_ref"][rows]
    repeated = f["repeated_action_count"][rows]
    same_action = (cached_kind == f["last_decided_kind"][rows]) & (
        cached_goal == f["last_decided_goal_ref"][rows]
    )
    repeated = np.where(decided, np.where(same_action, np.minimum(repeated, 254) + 1, 1), repeated).astype(
        np.uint8
    )
    decided_rows = rows[decided]
    f["last_decided_kind"][decided_rows] = cached_kind[decided]
    f["last_decided_goal_ref"][decided_rows] = cached_goal[decided]
    repeat_fire = decided & (repeated >= p.repeated_action_limit)
    repeated[repeat_fire] = 0
    f["repeated_action_count"][rows] = repeated

    stale = stale_fire[rows]
    cause[repeat_fire] = R.COGNITION_CAUSE_GUARD_REFLECTION
    overridden = (cause != 0) | stale
    f["agent_bits"][rows] = np.where(overridden, np.uint8(AGENT_BIT_OUT_OVERRIDDEN), np.uint8(0))
    changed = transition | (f["tier_reason"][rows] != previous_reason[rows])

    # The answer equals the cached action unless it was freshly decided or overridden now or last tick.
    answer = overridden | ((bits & (AGENT_BIT_FRESH_DECISION | AGENT_BIT_OUT_OVERRIDDEN)) != 0)
    at = rows[answer]
    kind = np.where(call_kind[answer] != 0, call_kind[answer], cached_kind[answer])
    source = f["cached_source"][at]
    goal = cached_goal[answer]
    priority = f["cached_priority"][at]
    step = f["cached_plan_step"][at]
    guard = repeat_fire[answer] | stale[answer]
    kind[repeat_fire[answer]] = R.ACTION_KIND_REFLECT
    stale_at = stale[answer]
    kind[stale_at] = R.ACTION_KIND_CHANGE_GOAL
    goal[stale_at] = f["goal_ref"][at[stale_at]]
    source[guard] = R.ACTION_SOURCE_GUARD
    priority[guard] = p.guard_priority_bp
    changed[answer] |= (
        (kind != f["out_kind"][at])
        | (source != f["out_source"][at])
        | (goal != f["out_goal_ref"][at])
        | (priority != f["out_priority"][at])
        | (step != f["out_plan_step"][at])
    )
    f["out_kind"][at] = kind
    f["out_source"][at] = source
    f["out_goal_ref"][at] = goal
    f["out_priority"][at] = priority
    f["out_plan_step"][at] = step
    _emit(a, rows, cause, transition, before, candidate, transition & is_clotho, repeat_fire, stale, changed)


def _emit(
    a: AgentArrays,
    rows: NDArray[np.intp],
    cause: NDArray[np.uint8],
    transition: NDArray[np.bool_],
    before: NDArray[np.uint8],
    candidate: NDArray[np.uint8],
    rehydrate: NDArray[np.bool_],
    repeat_fire: NDArray[np.bool_],
    stale_fire: NDArray[np.bool_],
    changed: NDArray[np.bool_],
) -> None:
    """The compacted lists, in slot order (`rows` is sorted), and their counts."""
    out = a.outputs
    counts = a.counts
    issued = cause != 0
    n = _compact(rows, issued, out["candidate_slot"], counts, COUNT_CANDIDATES)
    out["candidate_cause"][:n] = cause[issued]
    out["candidate_bits"][:n] = np.where(rehydrate[issued], CANDIDATE_BIT_NEEDS_REHYDRATION, 0)
    n = _compact(rows, transition, out["transition_slot"], counts, COUNT_TRANSITIONS)
    out["transition_from"][:n] = before[transition]
    out["transition_to"][:n] = candidate[transition]
    guarded = repeat_fire | stale_fire
    n = _compact(rows, guarded, out["guard_slot"], counts, COUNT_GUARDS)
    out["guard_bits"][:n] = np.where(repeat_fire[guarded], GUARD_BIT_REPEATED_ACTION, 0) | np.where(
        stale_fire[guarded], GUARD_BIT_STALE_GOAL, 0
    )
    _compact(rows, changed, out["changed_slot"], counts, COUNT_CHANGED)
