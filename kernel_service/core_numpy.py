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
    SIGNALS_MOVED_GOAL,
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
    """The config numbers the core decides with: built once per kernel, passed every tick unchanged
    (the C core copies them into its parameter struct only when given a different object)."""

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
    def from_config(cls, config: KernelConfig) -> CoreParams:
        return cls(
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


# Ladder rungs in the seed's order are TierReason 1..8; the ladder's table below is built from them.
if list(range(1, 9)) != [
    R.TIER_REASON_OPEN_CROSSROADS,
    R.TIER_REASON_IMMINENT_IRREVERSIBLE_ACTION,
    R.TIER_REASON_ADDRESSED_BY_PLAYER,
    R.TIER_REASON_ON_SCREEN,
    R.TIER_REASON_PROXIMITY,
    R.TIER_REASON_SCENE_COPRESENCE,
    R.TIER_REASON_RESIDENT_WORLD,
    R.TIER_REASON_OFFLINE_OR_DISTANT,
] or list(range(1, 6)) != [
    FLAG.PERCEPTION_FLAG_BIT_ON_SCREEN,
    FLAG.PERCEPTION_FLAG_BIT_OPEN_CROSSROADS,
    FLAG.PERCEPTION_FLAG_BIT_IMMINENT_IRREVERSIBLE_ACTION,
    FLAG.PERCEPTION_FLAG_BIT_SCENE_COPRESENCE,
    FLAG.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD,
]:
    raise ImportError("core_numpy's ladder assumes the TierReason and PerceptionFlagBit numbering")
if (CLOTHO, LACHESIS, ATROPOS) != (1, 2, 3):
    raise ImportError("core_numpy's tier arithmetic assumes CognitionTier Clotho 1, Lachesis 2, Atropos 3")
# Cadence causes are worked out by arithmetic (planning 1; a due call 3 less whether it is Lachesis's),
# the bits of the candidate and guard lists as bool bytes.
if (
    R.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING,
    R.COGNITION_CAUSE_LACHESIS_REFLECTION,
    R.COGNITION_CAUSE_ATROPOS_SUMMARY,
) != (1, 2, 3) or (
    CANDIDATE_BIT_NEEDS_REHYDRATION,
    GUARD_BIT_REPEATED_ACTION,
    GUARD_BIT_STALE_GOAL,
) != (1, 1, 2):
    raise ImportError("core_numpy assumes cadence causes 1..3 and single-bit candidate and guard bits")

u8 = np.uint8
# The key the ladder looks up: signal flag bits 1..5 where they are, bit 0 = addressed by a player,
# bit 6 = within the Clotho proximity. A numpy call costs about a microsecond whatever it does, so
# one gather from this 128-entry table beats the ~20 byte-wide ops that would work the rung out.
_KEY_FLAGS = u8(0b0011_1110)
_KEY_ADDRESSED = 1
_KEY_NEAR_SHIFT = u8(6)


def _ladder_table() -> NDArray[np.uint8]:
    table = np.zeros(128, dtype=u8)
    for key in range(128):
        tests = [
            key & 1 << FLAG.PERCEPTION_FLAG_BIT_OPEN_CROSSROADS,
            key & 1 << FLAG.PERCEPTION_FLAG_BIT_IMMINENT_IRREVERSIBLE_ACTION,
            key & _KEY_ADDRESSED,
            key & 1 << FLAG.PERCEPTION_FLAG_BIT_ON_SCREEN,
            key & 1 << int(_KEY_NEAR_SHIFT),
            key & 1 << FLAG.PERCEPTION_FLAG_BIT_SCENE_COPRESENCE,
            key & 1 << FLAG.PERCEPTION_FLAG_BIT_PLAYER_NEARBY_IN_WORLD,
            True,
        ]
        table[key] = next(rung for rung, matched in enumerate(tests, start=1) if matched)
    return table


_LADDER = _ladder_table()
# The action kind of a call, by cause (0 = no call; the guard's reflection is a reflection).
_CALL_KIND = np.zeros(R.COGNITION_CAUSE_GUARD_REFLECTION + 1, dtype=u8)
_CALL_KIND[R.COGNITION_CAUSE_CLOTHO_LIVE_PLANNING] = R.ACTION_KIND_PLAN
_CALL_KIND[R.COGNITION_CAUSE_LACHESIS_REFLECTION] = R.ACTION_KIND_REFLECT
_CALL_KIND[R.COGNITION_CAUSE_ATROPOS_SUMMARY] = R.ACTION_KIND_SUMMARIZE
_CALL_KIND[R.COGNITION_CAUSE_GUARD_REFLECTION] = R.ACTION_KIND_REFLECT


def assign_ladder_reason(a: AgentArrays, proximity_mm: int, out: NDArray[np.uint8]) -> None:
    """The priority ladder's first matching rung per agent, into `out`."""
    key = a.live("signal_flags").astype(u8)  # flag bits 1..5 live in the low byte
    key &= _KEY_FLAGS
    key |= a.live("addressed_by_player_id").astype(bool).view(u8)
    near = np.less_equal(a.live("player_proximity_mm"), proximity_mm).view(u8)
    near <<= _KEY_NEAR_SHIFT
    key |= near
    _LADDER.take(key, out=out, mode="clip")  # every key is < 128; "clip" writes `out` unbuffered


def run_core_numpy(a: AgentArrays, p: CoreParams, *, tick: int, observed_all: bool) -> None:
    """One tick over every live agent; results land in `a`'s arrays, outputs and counts.
    `observed_all`: the tick's frame was full, so every agent was observed (else AGENT_BIT_OBSERVED says).

    Shaped like the C core: whole-population passes (tiers, stale goals) in a handful of numpy
    calls, then the rest of the work only over the agents those passes marked (a transition, a changed
    reason, Clotho, a due call, a guard, a fresh or overridden action), usually a few percent. At
    10,200 agents a numpy call costs more than the work it does, so every pass is written for the
    fewest calls: in place, into the agent arrays, no mask built twice."""
    now = np.uint64(tick)
    tier = a.live("tier")
    reason = a.live("tier_reason")
    previous = tier.copy()
    previous_reason = reason.copy()
    _assign_tiers(a, p, now, previous)
    stale_fire = _guard_stale_goals(a, p, observed_all=observed_all)
    marked = tier != previous  # a transition
    marked |= reason != previous_reason
    marked |= tier == CLOTHO
    marked |= now >= a.live("next_call_tick")  # a call may be due
    marked |= stale_fire
    marked |= a.live("agent_bits").astype(bool)  # a fresh or overridden action
    _settle(
        a,
        p,
        now,
        marked.nonzero()[0],  # not np.flatnonzero: its Python wrapper costs more than the search
        previous=previous,
        previous_reason=previous_reason,
        stale_fire=stale_fire,
    )
    _count_tiers_and_reasons(a)


def _count_tiers_and_reasons(a: AgentArrays) -> None:
    """How many agents hold each tier (1..3) and each reason (1..10): a byte compare and a count per
    value, the last value's count by subtraction (after a tick no agent holds 0 or anything higher).
    bincount would first widen every byte to 64 bits: slower in the tick even at 10,200 agents (196
    against 175 us a tick in-process), and by half again from ~50,000 agents up."""
    equal = np.empty(a.count, dtype=bool)
    _count_values(a.live("tier"), a.tier_counts, ATROPOS, equal)
    _count_values(a.live("tier_reason"), a.reason_counts, R.TIER_REASON_DEESCALATION_GRACE, equal)


def _count_values(
    values: NDArray[np.uint8], counts: NDArray[np.uint32], highest: int, equal: NDArray[np.bool_]
) -> None:
    counts[:] = 0
    for value in range(1, highest):
        counts[value] = np.count_nonzero(np.equal(values, value, out=equal))
    counts[highest] = len(values) - int(counts.sum())


def _assign_tiers(a: AgentArrays, p: CoreParams, tick: np.uint64, previous: NDArray[np.uint8]) -> None:
    """The ladder, then de-escalation grace, then transition damping (urgent rungs bypass it), into
    the tier state in place; an agent changed tier (a transition) where its tier now differs from
    `previous`."""
    tier = a.live("tier")
    reason = a.live("tier_reason")
    assign_ladder_reason(a, p.clotho_proximity_mm, out=reason)
    signal = reason <= R.TIER_REASON_SCENE_COPRESENCE
    # Clotho 1 on a signal (rungs 1..6), Lachesis 2 for a resident of the world (7), else Atropos 3:
    # 3 less the signal less whether the rung is at most 7. Arithmetic, not a gather.
    np.less_equal(reason, R.TIER_REASON_RESIDENT_WORLD, out=tier.view(bool))
    tier += signal.view(u8)  # bools as bytes: a bool operand would take numpy's casting loop
    np.subtract(u8(ATROPOS), tier, out=tier)
    last_clotho = a.live("last_clotho_signal_tick")
    last_clotho[signal] = tick
    ticks_in_tier = a.live("ticks_in_tier")
    # Grace and damping only concern agents whose candidate differs from their tier, usually a few,
    # so they run over those rows. A Clotho losing its signal is one of them (its candidate is not Clotho).
    differs = (tier != previous).nonzero()[0]
    was = previous[differs]
    rung = reason[differs]
    graced = was == CLOTHO
    graced &= (tick - last_clotho[differs]) <= np.uint64(p.deescalation_grace_ticks)
    hold = was != 0
    hold &= rung > R.TIER_REASON_ON_SCREEN  # not urgent
    hold &= ticks_in_tier[differs] < min(p.transition_damping_ticks, 65535)
    np.greater(hold, graced, out=hold)  # a graced agent is not held: it stays Clotho for its own reason
    rung[hold] = R.TIER_REASON_DAMPING_HOLD
    rung[graced] = R.TIER_REASON_DEESCALATION_GRACE
    reason[differs] = rung
    hold |= graced
    tier[differs[hold]] = was[hold]
    ticks_in_tier += ticks_in_tier != np.uint16(65535)  # saturating
    ticks_in_tier[differs[~hold]] = 0


def _guard_stale_goals(a: AgentArrays, p: CoreParams, *, observed_all: bool) -> NDArray[np.bool_]:
    """A goal held `stale_goal_tick_limit` observed ticks without progress forces a goal change;
    observed progress (the frame moved the goal or its signature: SIGNALS_MOVED_GOAL, cleared here)
    restarts the count. An agent a delta frame left out was not observed: its count holds. Clears the
    observed bit; returns where the guard fires."""
    goal = a.live("goal_ref")
    moved = a.live("signals_moved")
    same = (moved & u8(SIGNALS_MOVED_GOAL)) == 0
    moved &= u8(~SIGNALS_MOVED_GOAL & 0xFF)
    bits = a.live("agent_bits")
    stale = a.live("stale_goal_ticks")
    # counted = has_goal * (1 + same * min(stale, 254)) as the C core writes it, here as
    # (same and has_goal) * min(stale, 254) + has_goal: no masks to invert. A full frame observed
    # every agent, so the count is worked out in place.
    has_goal = goal.astype(bool).view(u8)
    same &= has_goal.view(bool)
    counted = stale if observed_all else stale.copy()
    counted -= (counted == u8(255)).view(u8)  # min(stale, 254) (a scalar min is numpy's slow loop)
    counted *= same.view(u8)
    counted += has_goal
    fire: NDArray[np.bool_] = counted >= p.stale_goal_tick_limit  # the limit is >= 1: no goal never fires
    if observed_all:
        np.copyto(counted, u8(0), where=fire)
    else:
        observed = (bits & AGENT_BIT_OBSERVED) != 0
        fire &= observed
        np.copyto(counted, u8(0), where=fire)
        np.copyto(stale, counted, where=observed)
    bits &= u8(~AGENT_BIT_OBSERVED & 0xFF)
    return fire


def _settle(
    a: AgentArrays,
    p: CoreParams,
    tick: np.uint64,
    rows: NDArray[np.intp],
    *,
    previous: NDArray[np.uint8],
    previous_reason: NDArray[np.uint8],
    stale_fire: NDArray[np.bool_],
) -> None:
    """Over the marked rows only: cadences, the repeated-action guard, the answer, the lists."""
    f = a.fields
    candidate = f["tier"][rows]
    before = previous[rows]
    transition = candidate != before
    cause = _cadence(a, p, tick, rows, candidate=candidate, transition=transition)
    bits = f["agent_bits"][rows]
    repeat_fire = _repeat_guard(a, p, rows, bits)
    stale = stale_fire[rows]
    guarded = repeat_fire | stale
    guards = bool(guarded.any())  # rare: the guards' rewrites are skipped without one
    if guards:
        cause[repeat_fire] = R.COGNITION_CAUSE_GUARD_REFLECTION
    overridden = cause.astype(bool)
    if guards:
        overridden |= stale
    f["agent_bits"][rows] = overridden.view(u8) * u8(AGENT_BIT_OUT_OVERRIDDEN)
    changed = f["tier_reason"][rows] != previous_reason[rows]
    changed |= transition
    # The answer equals the cached action unless it was freshly decided or overridden now or last tick.
    answer = (bits & u8(AGENT_BIT_FRESH_DECISION | AGENT_BIT_OUT_OVERRIDDEN)).astype(bool)
    answer |= overridden
    if answer.any():
        changed[answer] |= _answer(
            a,
            p,
            rows[answer],
            call_kind=_CALL_KIND.take(cause[answer]),
            guards=(repeat_fire[answer], stale[answer]) if guards else None,
        )
    _emit(a, rows, cause=cause, transition=transition, before=before, candidate=candidate, changed=changed)
    if guards:
        n = _compact(rows, guarded, a.outputs["guard_slot"], a.counts, COUNT_GUARDS)
        guard_bits = stale[guarded].view(u8) << u8(1)  # GUARD_BIT_STALE_GOAL
        guard_bits |= repeat_fire[guarded].view(u8)  # GUARD_BIT_REPEATED_ACTION
        a.outputs["guard_bits"][:n] = guard_bits
    else:
        a.counts[COUNT_GUARDS] = 0


def _cadence(
    a: AgentArrays,
    p: CoreParams,
    tick: np.uint64,
    rows: NDArray[np.intp],
    *,
    candidate: NDArray[np.uint8],
    transition: NDArray[np.bool_],
) -> NDArray[np.uint8]:
    """Clotho plans on escalation and every decision interval (phase by slot); Lachesis reflections and
    Atropos summaries come due at slot-staggered ticks. Returns each row's call cause (0: none)."""
    slot = rows.astype(np.uint64)
    is_clotho = candidate == CLOTHO
    lachesis = candidate == LACHESIS
    plan = (tick + slot) % np.uint64(p.decision_interval_ticks) == 0
    plan |= transition
    plan &= is_clotho
    interval = np.where(lachesis, np.uint64(p.reflection_interval_ticks), np.uint64(p.summary_interval_ticks))
    next_call = a.fields["next_call_tick"][rows]
    entered = np.greater(transition, is_clotho)  # entered Lachesis or Atropos
    if entered.any():
        next_call[entered] = slot[entered] % interval[entered] + (tick + np.uint64(1))
    due = np.greater_equal(tick, next_call)
    np.greater(due, is_clotho, out=due)
    if due.any():
        next_call[due] = interval[due] + tick
    a.fields["next_call_tick"][rows] = next_call
    # Due: a Lachesis reflection (2) or else an Atropos summary (3); planning: 1.
    cause: NDArray[np.uint8] = np.subtract(u8(R.COGNITION_CAUSE_ATROPOS_SUMMARY), lachesis.view(u8))
    cause *= due.view(u8)
    cause |= plan.view(u8)
    return cause


def _repeat_guard(
    a: AgentArrays, p: CoreParams, rows: NDArray[np.intp], bits: NDArray[np.uint8]
) -> NDArray[np.bool_]:
    """Repeated decided actions (cognition's, not the behaviour tree's) force a reflection."""
    decided: NDArray[np.bool_] = (bits & AGENT_BIT_COGNITION_DECIDED) != 0
    if not decided.any():
        return decided
    f = a.fields
    at = rows[decided]
    kind = f["cached_kind"][at]
    goal = f["cached_goal_ref"][at]
    same = (kind == f["last_decided_kind"][at]) & (goal == f["last_decided_goal_ref"][at])
    repeated = np.where(same, np.minimum(f["repeated_action_count"][at], 254) + 1, 1).astype(np.uint8)
    f["last_decided_kind"][at] = kind
    f["last_decided_goal_ref"][at] = goal
    fire = repeated >= p.repeated_action_limit
    repeated[fire] = 0
    f["repeated_action_count"][at] = repeated
    repeat_fire = np.zeros(len(rows), dtype=bool)
    repeat_fire[decided] = fire
    return repeat_fire


def _answer(
    a: AgentArrays,
    p: CoreParams,
    at: NDArray[np.intp],
    *,
    call_kind: NDArray[np.uint8],
    guards: tuple[NDArray[np.bool_], NDArray[np.bool_]] | None,
) -> NDArray[np.bool_]:
    """The output action of these agents: cached, the call's kind over it (a repeated-action guard's
    reflection among them), a stale-goal guard's rewrite over that. `guards`: where the repeated-action
    and stale-goal guards fired (None: neither did). Stored; returns where it differs from the last
    answer."""
    f = a.fields
    kind = f["cached_kind"][at]
    np.copyto(kind, call_kind, where=call_kind != 0)
    source = f["cached_source"][at]
    goal = f["cached_goal_ref"][at]
    priority = f["cached_priority"][at]
    step = f["cached_plan_step"][at]
    if guards is not None:
        repeat_fire, stale_fire = guards
        kind[stale_fire] = R.ACTION_KIND_CHANGE_GOAL
        goal[stale_fire] = f["goal_ref"][at[stale_fire]]
        guard = repeat_fire | stale_fire
        source[guard] = R.ACTION_SOURCE_GUARD
        priority[guard] = p.guard_priority_bp
    differs: NDArray[np.bool_] = (
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
    return differs


def _emit(
    a: AgentArrays,
    rows: NDArray[np.intp],
    *,
    cause: NDArray[np.uint8],
    transition: NDArray[np.bool_],
    before: NDArray[np.uint8],
    candidate: NDArray[np.uint8],
    changed: NDArray[np.bool_],
) -> None:
    """The candidate, transition and changed lists, in slot order (`rows` is sorted), and their counts."""
    out = a.outputs
    counts = a.counts
    issued = cause.astype(bool)
    n = _compact(rows, issued, out["candidate_slot"], counts, COUNT_CANDIDATES)
    out["candidate_cause"][:n] = cause[issued]
    entered_clotho = transition[issued]  # an escalation to Clotho needs its context rehydrated
    entered_clotho &= candidate[issued] == CLOTHO
    out["candidate_bits"][:n] = entered_clotho.view(u8)  # CANDIDATE_BIT_NEEDS_REHYDRATION is bit 0
    n = _compact(rows, transition, out["transition_slot"], counts, COUNT_TRANSITIONS)
    out["transition_from"][:n] = before[transition]
    out["transition_to"][:n] = candidate[transition]
    _compact(rows, changed, out["changed_slot"], counts, COUNT_CHANGED)
