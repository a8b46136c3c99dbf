/* The behaviour layer's per-tick step in C: the due check, change detection, re-evaluation of the rows
 * whose inputs changed (novelty, emotion, personality tree, needs -> goal, HTN re-plan), plan stepping, the
 * fresh-decision mark and arbitration, over the kernel's and the layer's arrays in place, one call a tick.
 * Semantics are the numpy step's exactly (kernel_service/behavior/layer.py `PersonalityBehaviorLayer.step`
 * on the numpy core, with tree_kernel.py, emotion.py, needs.py and compiled_plans.py); differential tests
 * hold the two together. No clock, no RNG, no allocation. Every per-row operation reads and writes that
 * row's state only. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "moirai_clones.h"
#include "moirai_core_decls.h"

enum { BP = 10000 };

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

static inline int32_t clamp32(int32_t x, int32_t low, int32_t high) {
    return x < low ? low : x > high ? high : x;
}

static inline int32_t value_of(const struct moirai_behavior *b, uint32_t domain, uint32_t s) {
    return b->values[(size_t)domain * b->capacity + s];
}

static inline int32_t trait_of(const struct moirai_behavior *b, uint32_t axis, uint32_t s) {
    return b->traits[(size_t)axis * b->capacity + s];
}

/* The routine's strongest held value: its weight, and its domain (0 when none is held). */
static inline int32_t strongest(const struct moirai_behavior_config *c, const struct moirai_behavior *b, uint32_t s,
                                uint32_t routine, uint8_t *domain) {
    const uint8_t first = c->routine_values[routine][0], second = c->routine_values[routine][1];
    const int32_t w_first = value_of(b, first, s), w_second = value_of(b, second, s);
    const int first_wins = w_first >= w_second;
    const int32_t weight = first_wins ? w_first : w_second;
    *domain = weight > 0 ? (first_wins ? first : second) : 0;
    return weight;
}

/* emotion.evaluate_emotions for one row: returns the emotion, sets the hard-objective multiplier. */
static inline uint8_t feel(const struct moirai_behavior_config *c, const struct moirai_behavior *b, uint32_t s,
                           const int32_t needs[4], int32_t fatigue, int32_t *hard_objective) {
    int32_t pressure = needs[0];
    for (int i = 1; i < 4; i++) pressure = needs[i] > pressure ? needs[i] : pressure;
    /* 64-bit: a mood restored at the int32 extremes must not overflow (numpy widens alike). */
    const int64_t raw_valence = (int64_t)b->mood_valence[s] + BP / 4 - pressure / 2;
    const int32_t valence = (int32_t)(raw_valence < -BP ? -BP : raw_valence > BP ? BP : raw_valence);
    const int32_t mood_arousal = b->mood_arousal[s];
    const int32_t arousal = clamp32((mood_arousal > needs[0] ? mood_arousal : needs[0]) - fatigue / 2, 0, BP);
    const int aroused = arousal >= c->aroused_bp;
    uint8_t emotion = MB_EMOTION_CALM;
    if (b->grief[s] >= c->grief_bp) emotion = MB_EMOTION_GRIEVING;
    else if (aroused && valence < 0) emotion = MB_EMOTION_ANXIOUS;
    else if (fatigue >= c->tired_fatigue_bp) emotion = MB_EMOTION_TIRED;
    else if (needs[2] >= c->lonely_need_bp && valence < 0) emotion = MB_EMOTION_LONELY;
    else if (aroused) emotion = MB_EMOTION_DETERMINED;
    else if (valence >= c->content_valence_bp) emotion = MB_EMOTION_CONTENT;
    *hard_objective = emotion == MB_EMOTION_GRIEVING  ? c->grieving_hard_objective_bp
                      : emotion == MB_EMOTION_ANXIOUS ? c->anxious_hard_objective_bp
                                                      : BP;
    return emotion;
}

/* A routine's drive (Vocation, Social or Curiosity): two trait axes, its strongest held value (whose
 * domain it reports) and, where one exists, its need; Vocation is a hard objective, weighted by emotion. */
static inline int32_t drive(const struct moirai_behavior *b, const struct moirai_behavior_config *c, uint32_t s,
                            uint32_t routine, const int32_t needs[4], int32_t hard_objective, uint8_t *domain) {
    const int32_t weight = strongest(c, b, s, routine, domain);
    switch (routine) {
    case MB_ROUTINE_VOCATION:
        return ((trait_of(b, MB_TRAIT_CONSCIENTIOUSNESS, s) + trait_of(b, MB_TRAIT_AMBITION, s) + weight + needs[3]) /
                4) * hard_objective / BP;
    case MB_ROUTINE_SOCIAL:
        return (trait_of(b, MB_TRAIT_WARMTH, s) + trait_of(b, MB_TRAIT_PLAYFULNESS, s) + weight + needs[2]) / 4;
    default: /* Curiosity */
        return (trait_of(b, MB_TRAIT_CURIOSITY, s) + (BP - trait_of(b, MB_TRAIT_CAUTION, s)) + weight +
                trait_of(b, MB_TRAIT_PLAYFULNESS, s)) / 4;
    }
}

/* tree_kernel.evaluate_trees for one row: the first routine whose condition holds, in routine order. */
static inline void decide_tree(const struct moirai_behavior_config *c, struct moirai_behavior *b, uint32_t s,
                               const int32_t needs[4], int32_t fatigue, uint16_t flags, int32_t hard_objective) {
    const int minor = (flags & MB_MINOR_PRESENT_FLAG) != 0, threat = (flags & MB_THREAT_FLAG) != 0;
    const int32_t w_child = value_of(b, MB_DOMAIN_CHILD_SAFETY, s), w_safety = value_of(b, MB_DOMAIN_SAFETY, s);
    const int child_ok = minor && w_child >= c->safety_value_threshold_bp;
    const int safety_ok = (minor || threat) && w_safety >= c->safety_value_threshold_bp;
    uint8_t routine, honoured;
    int32_t priority;
    if (child_ok || safety_ok) {
        const int child_first = child_ok && (!safety_ok || w_child >= w_safety);
        routine = MB_ROUTINE_MAINTAIN_SAFETY;
        priority = child_first ? w_child : w_safety;
        honoured = child_first ? MB_DOMAIN_CHILD_SAFETY : MB_DOMAIN_SAFETY;
    } else if (fatigue >= c->fatigue_self_care_bp) {
        routine = MB_ROUTINE_SELF_CARE;
        priority = fatigue;
        strongest(c, b, s, MB_ROUTINE_SELF_CARE, &honoured);
    } else {
        routine = MB_ROUTINE_OBSERVE; /* always succeeds, unless a driven routine clears the gate first */
        priority = trait_of(b, MB_TRAIT_CAUTION, s);
        strongest(c, b, s, MB_ROUTINE_OBSERVE, &honoured);
        for (uint32_t r = MB_ROUTINE_VOCATION; r <= MB_ROUTINE_CURIOSITY; r++) {
            uint8_t domain;
            const int32_t d = drive(b, c, s, r, needs, hard_objective, &domain);
            if (d >= c->routine_drive_gate_bp && (r != MB_ROUTINE_VOCATION || b->vocation_ref[s] != 0)) {
                routine = (uint8_t)r;
                priority = d;
                honoured = domain;
                break;
            }
        }
    }
    b->tree_routine[s] = routine;
    b->tree_kind[s] = c->routine_kind[routine];
    b->tree_priority[s] = (uint16_t)(priority < BP ? priority : BP);
    b->tree_value[s] = honoured;
}

/* compiled_plans.CompiledMethods.select: the first applicable method of the goal's family, else -1. */
static inline int16_t select_method(const struct moirai_behavior_config *c, uint32_t goal, uint32_t tags) {
    if (goal == 0) return -1;
    const uint32_t family = goal >> MB_GOAL_FAMILY_SHIFT;
    for (uint32_t i = 0; i < c->method_count; i++)
        if (c->method_family[i] == family && (tags & c->method_requires[i]) == c->method_requires[i] &&
            (tags & c->method_excludes[i]) == 0)
            return (int16_t)i;
    return -1;
}

/* The layer's `_evaluate_rows` for one row whose inputs changed: novelty, emotion, tree, the goal (perception's,
 * else cognition's, else the most pressing need's), re-plan when goal or tags moved, inputs remembered, mood
 * decayed after it was read. */
static void evaluate(const struct moirai_behavior_config *c, struct moirai_behavior *b, uint32_t s) {
    const int32_t needs[4] = {b->need_safety_bp[s], b->need_sustaining_bp[s], b->need_social_bp[s],
                              b->need_purpose_bp[s]};
    const int32_t fatigue = b->fatigue_bp[s];
    const uint16_t flags = b->signal_flags[s];
    const uint32_t goal_in = b->goal_ref[s];
    const int evaluated = b->evaluated[s] != 0;
    /* A rising edge of threat or minor-present since the last evaluation is novelty. */
    if (evaluated && (flags & ~b->seen_flags[s] & (MB_THREAT_FLAG | MB_MINOR_PRESENT_FLAG))) b->novel[s] = 1;

    int32_t hard_objective;
    b->emotion[s] = feel(c, b, s, needs, fatigue, &hard_objective);
    b->hard_objective_bp[s] = hard_objective;
    decide_tree(c, b, s, needs, fatigue, flags, hard_objective);

    uint32_t best = 0;
    for (uint32_t i = 1; i < 4; i++) best = needs[i] > needs[best] ? i : best; /* the first maximum */
    const uint32_t need = needs[best] >= c->need_goal_threshold_bp ? best + 1 : 0;
    const uint32_t surfaced = need == MB_NEED_PURPOSE && b->vocation_ref[s] != 0 ? c->purpose_with_station_goal
                                                                                  : c->need_goal[need];
    const uint32_t adopted = b->cognition_goal[s];
    const uint32_t goal = goal_in != 0 ? goal_in : adopted != 0 ? adopted : surfaced;
    uint32_t tags = (goal >> MB_GOAL_TAG_SHIFT) & MB_GOAL_TAG_MASK;
    if (fatigue >= c->need_rest_tag_bp) tags |= c->rest_tag;
    if (flags & MB_THREAT_FLAG) tags |= c->threat_tag;
    if (flags & MB_MINOR_PRESENT_FLAG) tags |= c->minor_tag;
    if (goal != b->goal[s] || tags != b->plan_tags[s] || !evaluated) {
        b->plan_method[s] = select_method(c, goal, tags);
        b->plan_cursor[s] = 0;
    }
    b->goal[s] = goal;
    b->plan_tags[s] = tags;
    const int16_t method = b->plan_method[s];
    uint16_t plan_priority = 0;
    if (method >= 0) {
        const int32_t weight = c->method_family[method] == MB_FAMILY_VOCATION ? hard_objective : BP;
        plan_priority = (uint16_t)(c->method_priority_bp[method] * weight / BP);
    }
    b->plan_priority[s] = plan_priority;

    b->seen_safety[s] = (uint16_t)needs[0];
    b->seen_sustaining[s] = (uint16_t)needs[1];
    b->seen_social[s] = (uint16_t)needs[2];
    b->seen_purpose[s] = (uint16_t)needs[3];
    b->seen_fatigue[s] = (uint16_t)fatigue;
    b->seen_flags[s] = flags;
    b->seen_goal[s] = goal_in;
    b->evaluated[s] = 1;
    b->goal_adopted[s] = 0;
    if (b->mood_active[s]) { /* Mood.decayed; a settled mood stops forcing re-evaluation */
        const int32_t shift = c->mood_decay_shift;
        const int32_t valence = b->mood_valence[s], arousal = b->mood_arousal[s], grief = b->grief[s];
        b->mood_valence[s] = valence - (valence >> shift);
        b->mood_arousal[s] = arousal - (arousal >> shift);
        b->grief[s] = grief - (grief >> shift);
        b->mood_active[s] = b->mood_valence[s] != 0 || b->mood_arousal[s] != 0 || b->grief[s] != 0;
    }
}

/* The row's next cheap action: its plan's step (cursor advanced, a finished plan starting over) unless
 * it has none or MaintainSafety preempts it, else its tree's routine. Written to the cached action, and
 * marked a fresh decision only when it differs from what was held. */
static inline void act(const struct moirai_behavior_config *c, struct moirai_behavior *b, uint32_t s) {
    const int16_t method = b->plan_method[s];
    uint8_t kind, source;
    uint16_t step, priority;
    if (method >= 0 && b->tree_routine[s] != MB_ROUTINE_MAINTAIN_SAFETY) {
        const int32_t cursor = b->plan_cursor[s];
        kind = c->step_kind[c->method_offset[method] + cursor];
        source = MB_SOURCE_HTN;
        step = (uint16_t)cursor;
        priority = b->plan_priority[s];
        b->plan_cursor[s] = cursor + 1 >= c->method_length[method] ? 0 : cursor + 1;
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
static inline uint8_t arbitrate(const struct moirai_behavior_params *p, const struct moirai_behavior_config *c,
                                const struct moirai_behavior *b, uint32_t s) {
    const uint8_t novelty = b->novel[s];
    if (novelty) b->novel[s] = 0;
    if (!p->cognition_available || b->tier[s] != MB_TIER_LACHESIS) return 0;
    const uint32_t goal = b->goal[s];
    if (!novelty && goal != 0 && b->plan_method[s] >= 0) return 0; /* its HTN plan runs it */
    if (b->escalate_after[s] > p->tick) return 0;
    b->escalate_after[s] = p->tick + c->escalation_cooldown_ticks;
    return novelty ? MB_CAUSE_NOVELTY : goal != 0 ? MB_CAUSE_NO_METHOD : MB_CAUSE_NO_GOAL;
}

/* What the bulk pass marks per slot for the scalar pass: its inputs changed (re-evaluate), or stepping
 * it may do something (the rest of step_row). An unmarked stepped row would change nothing. */
enum { WORK_CHANGED = 1, WORK_STEP = 2 };

/* A bulk pass over the slots [begin, end), stepped this tick or not: work[i] for slot begin + i.
 * Branch-free over contiguous arrays, so the compiler vectorizes it (~1 ns a slot): the scalar step
 * costs ~20 loads and several branches a row, and on most ticks most rows step to the action they
 * already hold. WORK_CHANGED: the row was never evaluated, its mood is settling, cognition handed it
 * a goal, or a frame moved one of its inputs since it last stepped (SIGNALS_MOVED_BEHAVIOR, a
 * superset of inputs_changed: re-evaluating inputs already seen changes nothing; one byte read
 * instead of the inputs and their seen copies, ~30 bytes a row). WORK_STEP is set unless step_row
 * provably changes nothing: nothing changed, the row runs no plan (whose cursor moves), its cached
 * action is its tree's (which also rules out a cognition-made one, whose hold the scalar due check
 * reads), no novelty is pending, and arbitration stays quiet (not Lachesis, cognition unavailable,
 * its plan runs it, or its cooldown has not passed).
 *
 * "Its cached action is its tree's" is read off the source alone: a cached source of BEHAVIOR_TREE
 * was written only by act() on the tree path, which wrote the tree's action (kind, priority, goal,
 * step 0), and the tree's action and the goal change only in evaluate(), which act() follows at once
 * (re-syncing the cached action or taking the plan path, source HTN). The kernel's other writers of
 * the cached action set other sources (a merged cognition result COGNITION, registration CACHED).
 * Comparing the five fields instead streamed ~16 more bytes a row: ~0.6 ms a tick at 10^6 agents. */
BULK_PASS void mark_work(const struct moirai_behavior_params *p, const struct moirai_behavior *b, uint32_t begin,
                         uint32_t end, uint8_t *restrict work, const uint8_t available) {
    const uint8_t *restrict evaluated = b->evaluated + begin, *restrict mood_active = b->mood_active + begin,
                            *restrict goal_adopted = b->goal_adopted + begin, *restrict moved = b->signals_moved + begin;
    const uint8_t *restrict source = b->cached_source + begin, *restrict tier = b->tier + begin,
                            *restrict routine = b->tree_routine + begin, *restrict novel = b->novel + begin;
    const int16_t *restrict method = b->plan_method + begin;
    const uint32_t *restrict goal = b->goal + begin;
    const uint64_t *restrict escalate_after = b->escalate_after + begin;
    const uint64_t tick = p->tick;
    const uint32_t n = end - begin;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t changed = (uint8_t)((evaluated[i] == 0) | (mood_active[i] != 0) | (goal_adopted[i] != 0) |
                                          ((moved[i] & MB_SIGNALS_MOVED_BEHAVIOR) != 0));
        const uint8_t has_method = method[i] >= 0;
        const uint8_t plan = has_method & (routine[i] != MB_ROUTINE_MAINTAIN_SAFETY);
        const uint8_t holds_tree = source[i] == MB_SOURCE_BEHAVIOR_TREE;
        /* A constant `available` (see the call site) compiles to a loop that reads none of the four. */
        const uint8_t quiet = (novel[i] == 0) & (!available || (tier[i] != MB_TIER_LACHESIS) |
                                                                  ((goal[i] != 0) & has_method) |
                                                                  (escalate_after[i] > tick));
        work[i] = (uint8_t)(changed * WORK_CHANGED |
                            (changed | (source[i] == MB_SOURCE_COGNITION) | plan | !holds_tree | !quiet) * WORK_STEP);
    }
}

/* The row's plan indexes the compiled library: no method (-1) with cursor 0, or a method and a cursor
 * within its steps. Restores are validated before they reach the core; this keeps a state that slipped
 * past from reading outside the method arrays. */
static inline int plan_in_range(const struct moirai_behavior_config *c, const struct moirai_behavior *b,
                                uint32_t s) {
    const int16_t method = b->plan_method[s];
    const int32_t cursor = b->plan_cursor[s];
    if (method < 0) return method == -1 && cursor == 0;
    return (uint32_t)method < c->method_count && cursor >= 0 && cursor < c->method_length[method];
}

/* One stepped row: due check, re-evaluation when its inputs changed, its next action, arbitration.
 * Returns 0, or -1 (nothing of the row changed) when its plan is out of range. */
static inline int step_row(const struct moirai_behavior_params *p, const struct moirai_behavior_config *c,
                           struct moirai_behavior *b, uint32_t s, int changed, uint32_t *n_escalated) {
    if (!due(b, s, p->tick)) return 0;
    if (!plan_in_range(c, b, s)) return -1;
    if (b->signals_moved[s] & MB_SIGNALS_MOVED_BEHAVIOR) b->signals_moved[s] &= (uint8_t)~MB_SIGNALS_MOVED_BEHAVIOR;
    if (changed) evaluate(c, b, s);
    act(c, b, s);
    const uint8_t cause = arbitrate(p, c, b, s);
    if (cause) {
        b->escalation_slot[*n_escalated] = s;
        b->escalation_cause[(*n_escalated)++] = cause;
    }
    return 0;
}

/* The strided set (slots first, first + every, ...) in blocks of this many slots: the bulk pass runs
 * over every slot of a block, so it pays while `every` is small (the kernel's is 2). */
#define STEP_BLOCK 512u
#define BULK_MAX_EVERY 4u

TICK_CLONES int64_t moirai_behavior_step(const struct moirai_behavior_params *p,
                                         const struct moirai_behavior_config *c, const uint32_t *slots,
                                         uint32_t n_slots, struct moirai_behavior *shared) {
    /* A private copy of the pointers: stores through the byte-wide arrays may alias anything, and
     * through `shared` the compiler would reload each pointer after every such store. */
    struct moirai_behavior local = *shared;
    struct moirai_behavior *const b = &local;
    uint32_t n_escalated = 0;
    if (p->count > b->capacity) return -1; /* the layer's arrays hold fewer rows than the population */
    if (slots != NULL) {
        for (uint32_t k = 0; k < n_slots; k++)
            if (slots[k] >= p->count || step_row(p, c, b, slots[k], inputs_changed(b, slots[k]), &n_escalated))
                return -1;
        return n_escalated;
    }
    if (p->every == 0) return 0;
    uint32_t s = p->first; /* the strided set's first slot at or after begin */
    if (s < p->begin) s += (p->begin - s + p->every - 1) / p->every * p->every;
    if (s >= p->count) return 0;
    if (p->every > BULK_MAX_EVERY) {
        for (; s < p->count; s += p->every)
            if (step_row(p, c, b, s, inputs_changed(b, s), &n_escalated)) return -1;
        return n_escalated;
    }
    /* stride[j] = (j % every == 0): a block starting `phase` slots past a stepped slot steps its offset i
     * when stride[i + phase] (blocks start on stepped slots, so phase is 0 unless `every` does not
     * divide STEP_BLOCK). */
    uint8_t work[STEP_BLOCK + 8], stride[STEP_BLOCK + 8 + BULK_MAX_EVERY];
    for (uint32_t j = 0; j < sizeof stride; j++) stride[j] = j % p->every == 0;
    for (uint32_t begin = s; begin < p->count; begin += STEP_BLOCK) {
        const uint32_t end = p->count - begin < STEP_BLOCK ? p->count : begin + STEP_BLOCK;
        const uint32_t n = end - begin, phase = (begin - s) % p->every;
        /* Two inlined copies: while Lachesis cognition is unavailable (an outage, a killed tier, a
         * spent budget, no gateway) arbitration never escalates, and that copy streams ~13 fewer
         * bytes a slot (tiers, goals, cooldowns). */
        if (p->cognition_available)
            mark_work(p, b, begin, end, work, 1);
        else
            mark_work(p, b, begin, end, work, 0);
        for (uint32_t i = n; i < STEP_BLOCK + 8; i++) work[i] = 0;
        const uint8_t *const stepped = stride + phase;
        for (uint32_t j = 0; j < n; j += 8) {
            uint64_t word, keep;
            memcpy(&word, work + j, sizeof word);
            memcpy(&keep, stepped + j, sizeof keep);
            /* Bytes of 0 or 1 times 0xFF carry nothing: a byte mask of the stepped rows. */
            uint64_t hit = word & keep * 0xFF & 0x0101010101010101ull * WORK_STEP;
            while (hit) {
                const uint32_t byte = (uint32_t)__builtin_ctzll(hit) >> 3;
                hit &= ~(0xFFull << (byte * 8));
                if (step_row(p, c, b, begin + j + byte, work[j + byte] & WORK_CHANGED, &n_escalated)) return -1;
            }
        }
    }
    return n_escalated;
}
