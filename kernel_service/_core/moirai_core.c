/* The Moirai tick core in C: ladder, grace, damping, cadences and guards.
 * Semantics are kernel_service/core_numpy.py's exactly; differential tests hold the two together.
 * No clock, no RNG, no allocation.
 *
 * Shape, for speed: agents go in blocks of BLOCK (a block's arrays stay in L1 between passes), and
 * each block runs three branch-free bulk passes that the compiler vectorizes (tiers, due calls, the
 * stale-goal guard), then one scalar pass that visits only the agents the bulk passes
 * marked as having something to do (a transition, a changed reason, Clotho, a due call, a guard, a
 * fresh or overridden action). Most agents on most ticks are never touched by scalar code. */
#include <stdint.h>
#include <string.h>

#include "moirai_clones.h"
#include "moirai_core_decls.h"

enum { CLOTHO = 1, LACHESIS = 2, ATROPOS = 3 };
enum {
    R_OPEN_CROSSROADS = 1, R_IMMINENT_IRREVERSIBLE = 2, R_ADDRESSED = 3, R_ON_SCREEN = 4,
    R_PROXIMITY = 5, R_SCENE_COPRESENCE = 6, R_RESIDENT_WORLD = 7, R_OFFLINE_OR_DISTANT = 8,
    R_DAMPING_HOLD = 9, R_DEESCALATION_GRACE = 10, R_COUNT = 16
};
enum {
    F_ON_SCREEN = 1u << 1, F_OPEN_CROSSROADS = 1u << 2, F_IMMINENT_IRREVERSIBLE = 1u << 3,
    F_SCENE_COPRESENCE = 1u << 4, F_PLAYER_NEARBY = 1u << 5
};

/* 256 agents x ~90 bytes of state fit a 48 KiB L1d together with the block's scratch. */
#define BLOCK 256u
#define GROUP 64u /* next_call_floor's groups; BLOCK is a multiple */

enum { K_PLAN = 6, K_REFLECT = 7, K_SUMMARIZE = 8, K_CHANGE_GOAL = 9 };
enum { S_GUARD = 5 };
enum { C_CLOTHO_PLANNING = 1, C_LACHESIS_REFLECTION = 2, C_ATROPOS_SUMMARY = 3, C_GUARD_REFLECTION = 5 };
enum {
    BIT_FRESH = 1, BIT_OUT_OVERRIDDEN = 2, BIT_COGNITION_DECIDED = 4, BIT_OBSERVED = 8,
    CAND_REHYDRATE = 1, GUARD_REPEATED = 1, GUARD_STALE = 2, MOVED_GOAL = 1 /* agent_state.SIGNALS_MOVED_GOAL */
};
/* What the bulk passes mark per agent for the scalar pass (`work[]`): a transition, a changed reason,
 * Clotho (planning phase), a Lachesis/Atropos call that may be due, a stale goal, a fresh or overridden
 * action, a Clotho signal (stamp its tick), a Clotho losing its signal (check the grace period). */
enum {
    W_TRANSITION = 1, W_REASON_CHANGED = 2, W_CLOTHO = 4, W_DUE = 8, W_STALE_FIRE = 16, W_ACTION = 32,
    W_SIGNAL = 64, W_GRACE = 128
};

/* Per block, from the bulk passes to the scalar pass: the state they overwrote, and what they found. */
struct block_scratch {
    uint8_t previous_tier[BLOCK];
    uint8_t previous_reason[BLOCK];
    uint16_t previous_held[BLOCK];
    uint8_t work[BLOCK + 8]; /* +8: settle_block reads it a word at a time */
};

/* The tick's scalars and the array pointers, loaded once. */
struct tick_ctx {
    uint64_t tick;
    uint64_t grace_ticks;
    uint64_t reflection_interval;
    uint64_t summary_interval;
    uint32_t decision_interval;
    uint32_t damping;
    uint32_t repeat_limit;
    uint32_t stale_limit;
    int32_t proximity_limit;
    uint16_t guard_priority;
    uint8_t observed_all;
    uint8_t floors; /* next_call_floor is read and kept (the range starts on a group) */
    struct moirai_agents a;
    struct moirai_outputs o;
    uint32_t n_cand, n_trans, n_guard, n_changed;
};

/* `when` (0 or 1) ? `yes` : `no`, as masks: a chain of ?: becomes a many-armed PHI that GCC will
 * not vectorize, while masks stay straight-line code. */
static inline uint8_t pick8(uint8_t when, uint8_t yes, uint8_t no) {
    const uint8_t mask = (uint8_t)(0u - when);
    return (uint8_t)((yes & mask) | (no & ~mask));
}
static inline uint16_t pick16(uint8_t when, uint16_t yes, uint16_t no) {
    const uint16_t mask = (uint16_t)(0u - when);
    return (uint16_t)((yes & mask) | (no & ~mask));
}
/* The ladder's first matching rung, picked from the lowest rung up. */
static inline uint8_t ladder_reason(uint16_t flags, uint32_t addressed, int32_t proximity, int32_t limit) {
    uint8_t reason = pick8((flags & F_PLAYER_NEARBY) != 0, R_RESIDENT_WORLD, R_OFFLINE_OR_DISTANT);
    reason = pick8((flags & F_SCENE_COPRESENCE) != 0, R_SCENE_COPRESENCE, reason);
    reason = pick8(proximity <= limit, R_PROXIMITY, reason);
    reason = pick8((flags & F_ON_SCREEN) != 0, R_ON_SCREEN, reason);
    reason = pick8(addressed != 0, R_ADDRESSED, reason);
    reason = pick8((flags & F_IMMINENT_IRREVERSIBLE) != 0, R_IMMINENT_IRREVERSIBLE, reason);
    return pick8((flags & F_OPEN_CROSSROADS) != 0, R_OPEN_CROSSROADS, reason);
}

/* Bulk pass 1: ladder and damping, tier state updated in place. The 64-bit grace check (a Clotho
 * that lost its signal) is left to the scalar pass, which corrects the few agents it applies to. */
BULK_PASS void assign_tiers(const struct tick_ctx *c, uint32_t begin, uint32_t end, struct block_scratch *restrict s) {
    const uint16_t *restrict flags = c->a.signal_flags;
    const uint32_t *restrict addressed = c->a.addressed_by_player_id;
    const int32_t *restrict proximity = c->a.player_proximity_mm;
    uint8_t *restrict tier = c->a.tier;
    uint8_t *restrict tier_reason = c->a.tier_reason;
    uint16_t *restrict ticks_in_tier = c->a.ticks_in_tier;
    const int32_t limit = c->proximity_limit;
    const uint32_t damping = c->damping;
    for (uint32_t i = begin; i < end; i++) {
        /* Bitwise & and |, picks, and every load unconditional: no control flow, so the loop vectorizes. */
        uint8_t reason = ladder_reason(flags[i], addressed[i], proximity[i], limit);
        const uint8_t signal = reason <= R_SCENE_COPRESENCE;
        uint8_t candidate = pick8(signal, CLOTHO, pick8(reason == R_RESIDENT_WORLD, LACHESIS, ATROPOS));
        const uint8_t previous = tier[i];
        const uint8_t previous_reason = tier_reason[i];
        const uint16_t held = ticks_in_tier[i];
        const uint8_t urgent = reason <= R_ON_SCREEN; /* reasons start at 1 */
        const uint8_t hold = (previous != 0) & (candidate != previous) & !urgent & (held < damping);
        candidate = pick8(hold, previous, candidate);
        reason = pick8(hold, R_DAMPING_HOLD, reason);
        const uint8_t transition = candidate != previous;
        ticks_in_tier[i] = pick16(transition, 0, (uint16_t)((held < 65534 ? held : 65534) + 1));
        tier[i] = candidate;
        tier_reason[i] = reason;
        s->previous_tier[i - begin] = previous;
        s->previous_reason[i - begin] = previous_reason;
        s->previous_held[i - begin] = held;
        s->work[i - begin] = (uint8_t)(transition * W_TRANSITION | (reason != previous_reason) * W_REASON_CHANGED |
                                       (candidate == CLOTHO) * W_CLOTHO | signal * W_SIGNAL |
                                       ((previous == CLOTHO) & !signal) * W_GRACE);
    }
}

/* Bulk pass 2: a Lachesis reflection or Atropos summary may be due (the scalar pass decides). Slots
 * go in 64-slot groups: a group whose floor (a lower bound of its due ticks) is past this tick has no
 * call due and is not read, which at a reflection every 12,000 ticks is nearly every group, saving 8
 * bytes streamed per agent. A group that is read gets its exact floor back; the scalar pass lowers a
 * floor when it moves a due tick below it (a raise leaves a lower bound). */
BULK_PASS void mark_due(const struct tick_ctx *c, uint32_t begin, uint32_t end, struct block_scratch *restrict s) {
    const uint64_t *restrict next_call = c->a.next_call_tick;
    uint64_t *restrict floor = c->a.next_call_floor;
    const uint64_t tick = c->tick;
    for (uint32_t group = begin; group < end; group += GROUP) {
        const uint32_t stop = end - group < GROUP ? end : group + GROUP;
        if (c->floors && tick < floor[group / GROUP]) continue;
        uint64_t lowest = UINT64_MAX;
        for (uint32_t i = group; i < stop; i++) {
            const uint64_t due = next_call[i];
            s->work[i - begin] |= (uint8_t)((tick >= due) * W_DUE);
            lowest = due < lowest ? due : lowest;
        }
        if (c->floors) floor[group / GROUP] = lowest;
    }
}

/* Bulk pass 3: the stale-goal guard, over the agents this tick's frame observed; an agent absent
 * from a delta frame was not observed, so its counter holds. Progress is the frame having moved the
 * goal or its signature (MOVED_GOAL, which this clears, as it clears the observed bit). */
BULK_PASS void guard_stale_goals(const struct tick_ctx *c, uint32_t begin, uint32_t end, struct block_scratch *restrict s) {
    const uint32_t *restrict goal = c->a.goal_ref;
    uint8_t *restrict moved = c->a.signals_moved;
    uint8_t *restrict stale_ticks = c->a.stale_goal_ticks;
    uint8_t *restrict agent_bits = c->a.agent_bits;
    const uint32_t limit = c->stale_limit;
    const uint8_t observed_all = c->observed_all;
    for (uint32_t i = begin; i < end; i++) {
        const uint32_t g = goal[i];
        const uint8_t m = moved[i];
        const uint8_t same = (m & MOVED_GOAL) == 0;
        moved[i] = (uint8_t)(m & ~MOVED_GOAL);
        const uint8_t bits = agent_bits[i];
        const uint8_t observed = observed_all | ((bits & BIT_OBSERVED) != 0);
        const uint8_t held = stale_ticks[i];
        const uint8_t has_goal = g != 0;
        const uint8_t counted = (uint8_t)(has_goal * (1 + same * (held < 254 ? held : 254)));
        const uint8_t fire = observed & has_goal & (counted >= limit);
        stale_ticks[i] = pick8(observed, (uint8_t)(counted * !fire), held);
        agent_bits[i] = (uint8_t)(bits & ~BIT_OBSERVED);
        s->work[i - begin] |= (uint8_t)(fire * W_STALE_FIRE |
                                     ((bits & (BIT_FRESH | BIT_OUT_OVERRIDDEN | BIT_COGNITION_DECIDED)) != 0) * W_ACTION);
    }
}

/* The scalar pass for one marked agent: cadences, the repeated-action guard, the answer, the lists. */
static void settle_agent(struct tick_ctx *c, uint32_t i, const struct block_scratch *s, uint32_t k) {
    struct moirai_agents *const a = &c->a;
    const uint64_t tick = c->tick, slot = i;
    const uint8_t previous = s->previous_tier[k];
    uint8_t work = s->work[k];
    if (work & W_SIGNAL) a->last_clotho_signal_tick[i] = tick;
    if ((work & W_GRACE) && tick - a->last_clotho_signal_tick[i] <= c->grace_ticks) {
        /* De-escalation grace: Clotho stays Clotho, which no damping hold can change. */
        const uint16_t held = s->previous_held[k];
        a->tier[i] = CLOTHO;
        a->tier_reason[i] = R_DEESCALATION_GRACE;
        a->ticks_in_tier[i] = (uint16_t)((held < 65534 ? held : 65534) + 1);
        work = (uint8_t)((work & ~(W_TRANSITION | W_REASON_CHANGED)) | W_CLOTHO |
                         (s->previous_reason[k] != R_DEESCALATION_GRACE) * W_REASON_CHANGED);
    }
    const uint8_t candidate = a->tier[i];
    const int transition = (work & W_TRANSITION) != 0;
    const int entered_clotho = transition && candidate == CLOTHO;
    uint8_t cause = 0, call_kind = 0;
    if (candidate == CLOTHO) {
        if (entered_clotho || (tick + slot) % c->decision_interval == 0) {
            cause = C_CLOTHO_PLANNING;
            call_kind = K_PLAN;
        }
    } else if (transition || (work & W_DUE)) {
        const uint64_t interval = candidate == LACHESIS ? c->reflection_interval : c->summary_interval;
        if (transition) {
            const uint64_t due = tick + 1 + slot % interval;
            a->next_call_tick[i] = due;
            if (c->floors && due < a->next_call_floor[i / GROUP]) a->next_call_floor[i / GROUP] = due;
        }
        if (tick >= a->next_call_tick[i]) {
            a->next_call_tick[i] = tick + interval; /* a raise: the floor stays a lower bound */
            cause = candidate == LACHESIS ? C_LACHESIS_REFLECTION : C_ATROPOS_SUMMARY;
            call_kind = candidate == LACHESIS ? K_REFLECT : K_SUMMARIZE;
        }
    }

    const uint8_t bits = a->agent_bits[i];
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
        if (repeated >= c->repeat_limit) {
            repeat_fire = 1;
            repeated = 0;
        }
        a->repeated_action_count[i] = repeated;
    }
    const int stale_fire = (work & W_STALE_FIRE) != 0;
    if (repeat_fire) cause = C_GUARD_REFLECTION;
    const int overridden = cause != 0 || stale_fire;
    a->agent_bits[i] = overridden ? BIT_OUT_OVERRIDDEN : 0;
    int changed = (work & (W_TRANSITION | W_REASON_CHANGED)) != 0;
    /* The answer equals the cached action unless it was freshly decided or overridden now or last
     * tick (BIT_OUT_OVERRIDDEN); only then are the cached and output actions read at all. */
    if (overridden || (bits & (BIT_FRESH | BIT_OUT_OVERRIDDEN))) {
        uint8_t kind = a->cached_kind[i];
        uint8_t source = a->cached_source[i];
        uint32_t goal = a->cached_goal_ref[i];
        uint16_t priority = a->cached_priority[i];
        const uint16_t step = a->cached_plan_step[i];
        if (call_kind) kind = call_kind;
        if (repeat_fire) kind = K_REFLECT;
        if (stale_fire) {
            kind = K_CHANGE_GOAL;
            goal = a->goal_ref[i];
        }
        if (repeat_fire || stale_fire) {
            source = S_GUARD;
            priority = c->guard_priority;
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
    struct moirai_outputs *const o = &c->o;
    if (repeat_fire || stale_fire) {
        o->guard_slot[c->n_guard] = i;
        o->guard_bits[c->n_guard] = (uint8_t)((repeat_fire ? GUARD_REPEATED : 0) | (stale_fire ? GUARD_STALE : 0));
        c->n_guard++;
    }
    if (cause) {
        o->candidate_slot[c->n_cand] = i;
        o->candidate_cause[c->n_cand] = cause;
        o->candidate_bits[c->n_cand] = entered_clotho ? CAND_REHYDRATE : 0;
        c->n_cand++;
    }
    if (transition) {
        o->transition_slot[c->n_trans] = i;
        o->transition_from[c->n_trans] = previous;
        o->transition_to[c->n_trans] = candidate;
        c->n_trans++;
    }
    if (changed) o->changed_slot[c->n_changed++] = i;
}

/* Visits the marked agents in slot order, skipping eight unmarked agents per word. */
static void settle_block(struct tick_ctx *c, uint32_t begin, uint32_t end, const struct block_scratch *s) {
    const uint32_t n = end - begin;
    for (uint32_t j = 0; j < n; j += 8) {
        uint64_t word;
        memcpy(&word, s->work + j, sizeof word);
        while (word) {
            const uint32_t byte = (uint32_t)__builtin_ctzll(word) >> 3;
            word &= ~(0xFFull << (byte * 8));
            settle_agent(c, begin + j + byte, s, j + byte);
        }
    }
}

/* counts[v] = how many of values[0, n) equal v, for v in [1, limit): one long sweep per value, in
 * runs of at most 65535 so a 16-bit total cannot overflow, which vectorizes twice as wide as 32 bits. */
BULK_PASS void count_values(const uint8_t *restrict values, uint32_t n, uint32_t limit, uint32_t *restrict counts) {
    for (uint32_t v = 1; v < limit; v++) {
        uint32_t count = 0;
        for (uint32_t start = 0; start < n; start += 65535) {
            const uint32_t stop = n - start < 65535 ? n : start + 65535;
            const uint8_t value = (uint8_t)v; /* compared as a byte, or GCC widens every lane to 32 bits */
            uint16_t total = 0;
            for (uint32_t i = start; i < stop; i++) total += values[i] == value;
            count += total;
        }
        counts[v] = count;
    }
}

TICK_CLONES int moirai_tick(const struct moirai_params *p, struct moirai_agents *agents, struct moirai_outputs *o) {
    if (p->decision_interval_ticks == 0 || p->reflection_interval_ticks == 0 || p->summary_interval_ticks == 0 ||
        p->begin > p->count)
        return -1;
    struct tick_ctx c = {
        .tick = p->tick,
        .grace_ticks = p->deescalation_grace_ticks,
        .reflection_interval = p->reflection_interval_ticks,
        .summary_interval = p->summary_interval_ticks,
        .decision_interval = p->decision_interval_ticks,
        .damping = p->transition_damping_ticks < 65535u ? p->transition_damping_ticks : 65535u,
        .repeat_limit = p->repeated_action_limit,
        .stale_limit = p->stale_goal_tick_limit,
        .proximity_limit = p->clotho_proximity_mm,
        .guard_priority = p->guard_priority_bp,
        .observed_all = p->observed_all != 0,
        .floors = p->begin % GROUP == 0,
        .a = *agents,
        .o = *o,
    };
    uint32_t reason_counts[R_COUNT] = {0};
    uint32_t tier_counts[4] = {0};
    struct block_scratch scratch;
    for (uint32_t begin = p->begin; begin < p->count; begin += BLOCK) {
        const uint32_t end = p->count - begin < BLOCK ? p->count : begin + BLOCK;
        memset(scratch.work + (end - begin), 0, BLOCK + 8 - (end - begin));
        assign_tiers(&c, begin, end, &scratch);
        mark_due(&c, begin, end, &scratch);
        guard_stale_goals(&c, begin, end, &scratch);
        settle_block(&c, begin, end, &scratch);
    }
    count_values(c.a.tier_reason + p->begin, p->count - p->begin, R_DEESCALATION_GRACE + 1, reason_counts);
    count_values(c.a.tier + p->begin, p->count - p->begin, ATROPOS + 1, tier_counts);
    memcpy(o->reason_counts, reason_counts, sizeof reason_counts);
    memcpy(o->tier_counts, tier_counts, sizeof tier_counts);
    o->counts[0] = c.n_cand;
    o->counts[1] = c.n_trans;
    o->counts[2] = c.n_guard;
    o->counts[3] = c.n_changed;
    return 0;
}
