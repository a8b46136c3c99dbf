/* The Moirai tick core in C: ladder, grace, damping, cadences and guards, one pass per agent.
 * Semantics are kernel_service/core_numpy.py's exactly; differential tests hold the two together.
 * No clock, no RNG, no allocation. */
#include <stdint.h>
#include <string.h>

#include "moirai_core_decls.h"

enum { CLOTHO = 1, LACHESIS = 2, ATROPOS = 3 };
enum {
    R_OPEN_CROSSROADS = 1, R_IMMINENT_IRREVERSIBLE = 2, R_ADDRESSED = 3, R_ON_SCREEN = 4,
    R_PROXIMITY = 5, R_SCENE_COPRESENCE = 6, R_RESIDENT_WORLD = 7, R_OFFLINE_OR_DISTANT = 8,
    R_DAMPING_HOLD = 9, R_DEESCALATION_GRACE = 10
};
enum {
    F_ON_SCREEN = 1u << 1, F_OPEN_CROSSROADS = 1u << 2, F_IMMINENT_IRREVERSIBLE = 1u << 3,
    F_SCENE_COPRESENCE = 1u << 4, F_PLAYER_NEARBY = 1u << 5
};
enum { K_PLAN = 6, K_REFLECT = 7, K_SUMMARIZE = 8, K_CHANGE_GOAL = 9 };
enum { S_GUARD = 5 };
enum { C_CLOTHO_PLANNING = 1, C_LACHESIS_REFLECTION = 2, C_ATROPOS_SUMMARY = 3, C_GUARD_REFLECTION = 5 };
enum { BIT_FRESH = 1, BIT_OUT_OVERRIDDEN = 2, BIT_COGNITION_DECIDED = 4, CAND_REHYDRATE = 1, GUARD_REPEATED = 1, GUARD_STALE = 2 };

static inline uint8_t ladder_reason(uint16_t flags, uint32_t addressed, int32_t proximity, int32_t limit) {
    if (flags & F_OPEN_CROSSROADS) return R_OPEN_CROSSROADS;
    if (flags & F_IMMINENT_IRREVERSIBLE) return R_IMMINENT_IRREVERSIBLE;
    if (addressed != 0) return R_ADDRESSED;
    if (flags & F_ON_SCREEN) return R_ON_SCREEN;
    if (proximity <= limit) return R_PROXIMITY;
    if (flags & F_SCENE_COPRESENCE) return R_SCENE_COPRESENCE;
    if (flags & F_PLAYER_NEARBY) return R_RESIDENT_WORLD;
    return R_OFFLINE_OR_DISTANT;
}

int moirai_tick(const struct moirai_params *p, struct moirai_agents *agents, struct moirai_outputs *o) {
    if (p->decision_interval_ticks == 0 || p->reflection_interval_ticks == 0 || p->summary_interval_ticks == 0)
        return -1;
    /* Locals, not p-> / agents-> in the loop: a store through a uint8_t pointer may alias anything, so
     * the compiler would otherwise reload every pointer and parameter on every iteration. */
    const uint64_t tick = p->tick;
    const uint32_t count = p->count;
    const uint32_t damping = p->transition_damping_ticks < 65535u ? p->transition_damping_ticks : 65535u;
    const uint32_t decision_interval = p->decision_interval_ticks;
    const uint64_t grace_ticks = p->deescalation_grace_ticks;
    const int32_t proximity_limit = p->clotho_proximity_mm;
    const uint32_t repeat_limit = p->repeated_action_limit;
    const uint32_t stale_limit = p->stale_goal_tick_limit;
    const uint64_t reflection_interval = p->reflection_interval_ticks;
    const uint64_t summary_interval = p->summary_interval_ticks;
    const uint16_t guard_priority = p->guard_priority_bp;
    const struct moirai_agents a_local = *agents;
    const struct moirai_agents *const a = &a_local;
    uint32_t *restrict const candidate_slot = o->candidate_slot;
    uint8_t *restrict const candidate_cause = o->candidate_cause;
    uint8_t *restrict const candidate_bits = o->candidate_bits;
    uint32_t *restrict const transition_slot = o->transition_slot;
    uint8_t *restrict const transition_from = o->transition_from;
    uint8_t *restrict const transition_to = o->transition_to;
    uint32_t *restrict const guard_slot = o->guard_slot;
    uint8_t *restrict const guard_bits = o->guard_bits;
    uint32_t *restrict const changed_slot = o->changed_slot;
    uint32_t reason_counts[16] = {0};
    uint32_t tier_counts[4] = {0};
    uint32_t n_cand = 0, n_trans = 0, n_guard = 0, n_changed = 0;

    for (uint32_t i = 0; i < count; i++) {
        const uint16_t flags = a->signal_flags[i];
        uint8_t reason = ladder_reason(flags, a->addressed_by_player_id[i], a->player_proximity_mm[i],
                                       proximity_limit);
        const int clotho_signal = reason <= R_SCENE_COPRESENCE;
        uint8_t candidate = clotho_signal ? CLOTHO : (reason == R_RESIDENT_WORLD ? LACHESIS : ATROPOS);
        if (clotho_signal) a->last_clotho_signal_tick[i] = tick;

        const uint8_t previous = a->tier[i];
        const uint8_t previous_reason = a->tier_reason[i];
        const uint16_t ticks_in_tier = a->ticks_in_tier[i];
        if (previous == CLOTHO && !clotho_signal &&
            tick - a->last_clotho_signal_tick[i] <= grace_ticks) {
            candidate = CLOTHO;
            reason = R_DEESCALATION_GRACE;
        }
        const int urgent = reason >= R_OPEN_CROSSROADS && reason <= R_ON_SCREEN;
        if (previous != 0 && candidate != previous && !urgent && ticks_in_tier < damping) {
            candidate = previous;
            reason = R_DAMPING_HOLD;
        }
        const int transition = candidate != previous;
        a->ticks_in_tier[i] = transition ? 0 : (uint16_t)((ticks_in_tier < 65534 ? ticks_in_tier : 65534) + 1);
        /* Stores only on change: an untouched cache line is never written back. */
        if (transition) a->tier[i] = candidate;
        if (reason != previous_reason) a->tier_reason[i] = reason;

        const int is_clotho = candidate == CLOTHO;
        const int entered_clotho = transition && is_clotho;
        const uint64_t slot = i;
        uint8_t cause = 0;
        uint8_t call_kind = 0;
        if (is_clotho) {
            if (entered_clotho || (tick + slot) % decision_interval == 0) {
                cause = C_CLOTHO_PLANNING;
                call_kind = K_PLAN;
            }
        } else {
            const uint64_t interval = candidate == LACHESIS ? reflection_interval : summary_interval;
            if (transition) a->next_call_tick[i] = tick + 1 + slot % interval;
            if (tick >= a->next_call_tick[i]) {
                a->next_call_tick[i] = tick + interval;
                cause = candidate == LACHESIS ? C_LACHESIS_REFLECTION : C_ATROPOS_SUMMARY;
                call_kind = candidate == LACHESIS ? K_REFLECT : K_SUMMARIZE;
            }
        }

        const uint8_t bits = a->agent_bits[i];
        const int fresh = (bits & BIT_FRESH) != 0;
        int repeat_fire = 0;
        if (bits & BIT_COGNITION_DECIDED) {
            const uint8_t decided_kind = a->cached_kind[i];
            const uint32_t decided_goal = a->cached_goal_ref[i];
            uint8_t repeated = a->repeated_action_count[i];
            if (decided_kind == a->last_decided_kind[i] && decided_goal == a->last_decided_goal_ref[i])
                repeated = (uint8_t)((repeated < 254 ? repeated : 254) + 1);
            else
                repeated = 1;
            a->last_decided_kind[i] = decided_kind;
            a->last_decided_goal_ref[i] = decided_goal;
            if (repeated >= repeat_limit) {
                repeat_fire = 1;
                repeated = 0;
            }
            a->repeated_action_count[i] = repeated;
        }

        const uint32_t signal_goal = a->goal_ref[i];
        const uint64_t progress = a->goal_progress_signature[i];
        uint8_t stale = 0;
        int stale_fire = 0;
        if (signal_goal != 0) {
            const uint8_t held = a->stale_goal_ticks[i];
            stale = (signal_goal == a->seen_goal_ref[i] && progress == a->seen_progress_signature[i])
                        ? (uint8_t)((held < 254 ? held : 254) + 1)
                        : 1;
            if (stale >= stale_limit) {
                stale_fire = 1;
                stale = 0;
            }
        }
        if (a->stale_goal_ticks[i] != stale) a->stale_goal_ticks[i] = stale;
        if (a->seen_goal_ref[i] != signal_goal) a->seen_goal_ref[i] = signal_goal;
        if (a->seen_progress_signature[i] != progress) a->seen_progress_signature[i] = progress;

        if (repeat_fire) cause = C_GUARD_REFLECTION;
        const int overridden = cause != 0 || stale_fire;
        const uint8_t new_bits = overridden ? BIT_OUT_OVERRIDDEN : 0;
        if (new_bits != bits) a->agent_bits[i] = new_bits;
        int changed = transition || reason != previous_reason;
        /* The answer equals the cached action unless it was freshly decided or overridden now or last
         * tick (BIT_OUT_OVERRIDDEN); only then are the cached and output actions read at all. */
        if (fresh || overridden || (bits & BIT_OUT_OVERRIDDEN)) {
            uint8_t kind = a->cached_kind[i];
            uint8_t source = a->cached_source[i];
            uint32_t goal = a->cached_goal_ref[i];
            uint16_t priority = a->cached_priority[i];
            const uint16_t step = a->cached_plan_step[i];
            if (call_kind) kind = call_kind;
            if (repeat_fire) kind = K_REFLECT;
            if (stale_fire) {
                kind = K_CHANGE_GOAL;
                goal = signal_goal;
            }
            if (repeat_fire || stale_fire) {
                source = S_GUARD;
                priority = guard_priority;
            }
            if (kind != a->out_kind[i] || source != a->out_source[i] || goal != a->out_goal_ref[i] ||
                priority != a->out_priority[i] || step != a->out_plan_step[i]) {
                changed = 1;
                a->out_kind[i] = kind;
                a->out_source[i] = source;
                a->out_goal_ref[i] = goal;
                a->out_priority[i] = priority;
                a->out_plan_step[i] = step;
            }
        }
        if (repeat_fire || stale_fire) {
            guard_slot[n_guard] = i;
            guard_bits[n_guard] = (uint8_t)((repeat_fire ? GUARD_REPEATED : 0) | (stale_fire ? GUARD_STALE : 0));
            n_guard++;
        }
        if (cause) {
            candidate_slot[n_cand] = i;
            candidate_cause[n_cand] = cause;
            candidate_bits[n_cand] = entered_clotho ? CAND_REHYDRATE : 0;
            n_cand++;
        }
        if (transition) {
            transition_slot[n_trans] = i;
            transition_from[n_trans] = previous;
            transition_to[n_trans] = candidate;
            n_trans++;
        }
        if (changed) changed_slot[n_changed++] = i;
        reason_counts[reason & 15]++;
        tier_counts[candidate & 3]++;
    }
    memcpy(o->reason_counts, reason_counts, sizeof reason_counts);
    memcpy(o->tier_counts, tier_counts, sizeof tier_counts);
    o->counts[0] = n_cand;
    o->counts[1] = n_trans;
    o->counts[2] = n_guard;
    o->counts[3] = n_changed;
    return 0;
}
