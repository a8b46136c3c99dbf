/* The behaviour layer's per-tick step in C: the due check, change detection, plan stepping, the
 * fresh-decision mark and arbitration, over the kernel's and the layer's arrays in place.
 * Semantics are kernel_service/behavior/layer.py's numpy step exactly (`PersonalityBehaviorLayer.step`
 * with the numpy core); differential tests hold the two together. No clock, no RNG, no allocation.
 *
 * Rows whose inputs changed are not evaluated here: they are listed for the layer's vectorized numpy
 * evaluation (trees, emotion, needs -> goals, re-plan), then settled by moirai_behavior_settle. Every
 * per-row operation reads and writes that row's state only, so stepping the unchanged rows before the
 * changed ones were evaluated gives what stepping them all afterwards would. */
#include <stddef.h>
#include <stdint.h>

#include "moirai_core_decls.h"

/* Due this tick: holding no cognition-made action, or Lachesis once the hold on one has run out. */
static inline int due(const struct moirai_behavior *b, uint32_t s, uint64_t tick) {
    return b->cached_source[s] != MB_SOURCE_COGNITION ||
           (b->tier[s] == MB_TIER_LACHESIS && tick >= b->hold_until[s]);
}

/* The inputs differ from those the row was last evaluated on (or it never was, its mood is settling,
 * or cognition handed it a goal). */
static inline int inputs_changed(const struct moirai_behavior *b, uint32_t s) {
    return (b->evaluated[s] == 0) | (b->mood_active[s] != 0) | (b->goal_adopted[s] != 0) |
           (b->need_safety_bp[s] != b->seen_safety[s]) | (b->need_sustaining_bp[s] != b->seen_sustaining[s]) |
           (b->need_social_bp[s] != b->seen_social[s]) | (b->need_purpose_bp[s] != b->seen_purpose[s]) |
           (b->fatigue_bp[s] != b->seen_fatigue[s]) | (b->signal_flags[s] != b->seen_flags[s]) |
           (b->goal_ref[s] != b->seen_goal[s]);
}

/* The row's next cheap action: its plan's step (cursor advanced, a finished plan starting over) unless
 * it has none or MaintainSafety preempts it, else its tree's routine. Written to the cached action, and
 * marked a fresh decision only when it differs from what was held. */
static inline void act(const struct moirai_behavior *b, uint32_t s) {
    const int16_t method = b->plan_method[s];
    uint8_t kind, source;
    uint16_t step, priority;
    if (method >= 0 && b->tree_routine[s] != MB_ROUTINE_MAINTAIN_SAFETY) {
        const int32_t cursor = b->plan_cursor[s];
        kind = b->step_kind[b->method_offset[method] + cursor];
        source = MB_SOURCE_HTN;
        step = (uint16_t)cursor;
        priority = b->plan_priority[s];
        b->plan_cursor[s] = cursor + 1 >= b->method_length[method] ? 0 : cursor + 1;
    } else {
        kind = b->tree_kind[s];
        source = MB_SOURCE_BEHAVIOR_TREE;
        step = 0;
        priority = b->tree_priority[s];
    }
    const uint32_t goal = b->goal[s];
    if (kind != b->cached_kind[s] || source != b->cached_source[s] || goal != b->cached_goal_ref[s] ||
        priority != b->cached_priority[s] || step != b->cached_plan_step[s]) {
        b->cached_kind[s] = kind;
        b->cached_source[s] = source;
        b->cached_goal_ref[s] = goal;
        b->cached_priority[s] = priority;
        b->cached_plan_step[s] = step;
        b->agent_bits[s] |= MB_BIT_FRESH_DECISION;
    }
}

/* Arbitration for one stepped row: novelty is consumed either way; a Lachesis row escalates (novelty,
 * no structured goal, or no applicable method) when cognition is available and its cooldown passed.
 * Returns the cause, or 0. */
static inline uint8_t arbitrate(const struct moirai_behavior_params *p, const struct moirai_behavior *b, uint32_t s) {
    const uint8_t novelty = b->novel[s];
    if (novelty) b->novel[s] = 0;
    if (!p->cognition_available || b->tier[s] != MB_TIER_LACHESIS) return 0;
    const uint32_t goal = b->goal[s];
    if (!novelty && goal != 0 && b->plan_method[s] >= 0) return 0; /* its HTN plan runs it */
    if (b->escalate_after[s] > p->tick) return 0;
    b->escalate_after[s] = p->tick + p->escalation_cooldown_ticks;
    return novelty ? MB_CAUSE_NOVELTY : goal != 0 ? MB_CAUSE_NO_METHOD : MB_CAUSE_NO_GOAL;
}

void moirai_behavior_step(const struct moirai_behavior_params *p, const uint32_t *slots, uint32_t n_slots,
                          struct moirai_behavior *b, uint32_t *counts) {
    const uint64_t tick = p->tick;
    uint32_t n_changed = 0, n_escalated = 0;
    const uint32_t n = slots != NULL ? n_slots
                       : p->first < p->count ? (p->count - p->first + p->every - 1) / p->every
                                             : 0;
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t s = slots != NULL ? slots[k] : p->first + k * p->every;
        if (!due(b, s, tick)) continue;
        if (inputs_changed(b, s)) {
            b->changed_rows[n_changed++] = s;
            continue;
        }
        act(b, s);
        const uint8_t cause = arbitrate(p, b, s);
        if (cause) {
            b->escalation_slot[n_escalated] = s;
            b->escalation_cause[n_escalated++] = cause;
        }
    }
    counts[0] = n_changed;
    counts[1] = n_escalated;
}

void moirai_behavior_settle(const struct moirai_behavior_params *p, struct moirai_behavior *b, uint32_t *counts) {
    uint32_t n_late = 0;
    for (uint32_t k = 0; k < counts[0]; k++) {
        const uint32_t s = b->changed_rows[k];
        act(b, s);
        const uint8_t cause = arbitrate(p, b, s);
        if (cause) {
            b->late_slot[n_late] = s;
            b->late_cause[n_late++] = cause;
        }
    }
    /* Both lists ascend: merge from the back into the escalation buffers, which hold room for both. */
    uint32_t i = counts[1], j = n_late, out = counts[1] + n_late;
    while (j > 0) {
        if (i > 0 && b->escalation_slot[i - 1] > b->late_slot[j - 1]) {
            i--;
            b->escalation_slot[--out] = b->escalation_slot[i];
            b->escalation_cause[out] = b->escalation_cause[i];
        } else {
            j--;
            b->escalation_slot[--out] = b->late_slot[j];
            b->escalation_cause[out] = b->late_cause[j];
        }
    }
    counts[1] += n_late;
}
