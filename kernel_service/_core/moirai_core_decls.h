/* The C core's declarations, read by cffi's cdef and #included by moirai_core.c. No preprocessor here. */

/* Pointers into the kernel's numpy arrays, in kernel_service/agent_state.py's AGENT_FIELDS order. */
struct moirai_agents {
    uint16_t *signal_flags;
    uint8_t *visual_lod;
    int32_t *player_proximity_mm;
    uint32_t *addressed_by_player_id;
    uint32_t *goal_ref;
    uint64_t *goal_progress_signature;
    uint8_t *tier;
    uint8_t *tier_reason;
    uint16_t *ticks_in_tier;
    uint64_t *last_clotho_signal_tick;
    uint64_t *next_call_tick;
    uint8_t *signals_moved;
    uint8_t *stale_goal_ticks;
    uint8_t *repeated_action_count;
    uint8_t *last_decided_kind;
    uint32_t *last_decided_goal_ref;
    uint8_t *agent_bits;
    uint8_t *cached_kind;
    uint8_t *cached_source;
    uint32_t *cached_goal_ref;
    uint16_t *cached_priority;
    uint16_t *cached_plan_step;
    uint8_t *out_kind;
    uint8_t *out_source;
    uint32_t *out_goal_ref;
    uint16_t *out_priority;
    uint16_t *out_plan_step;
    /* Not an agent field: per 64-slot group (slot >> 6), a lower bound of its next_call_tick values,
     * kept by the core so a group with no call due is not read (AgentArrays.next_call_floor). */
    uint64_t *next_call_floor;
};

/* Capacity-sized output buffers: compacted lists in slot order, plus counts. */
struct moirai_outputs {
    uint32_t *candidate_slot;
    uint8_t *candidate_cause;
    uint8_t *candidate_bits;
    uint32_t *transition_slot;
    uint8_t *transition_from;
    uint8_t *transition_to;
    uint32_t *guard_slot;
    uint8_t *guard_bits;
    uint32_t *changed_slot;
    uint32_t *counts;        /* [candidates, transitions, guards, changed] */
    uint32_t *reason_counts; /* [16] by TierReason */
    uint32_t *tier_counts;   /* [4] by CognitionTier */
};

struct moirai_params {
    uint64_t tick;
    uint32_t begin; /* the slot range [begin, count) this call ticks (0 for the whole population) */
    uint32_t count;
    uint32_t decision_interval_ticks;
    uint32_t transition_damping_ticks;
    uint64_t deescalation_grace_ticks;
    int32_t clotho_proximity_mm;
    uint32_t repeated_action_limit;
    uint32_t stale_goal_tick_limit;
    uint64_t reflection_interval_ticks;
    uint64_t summary_interval_ticks;
    uint16_t guard_priority_bp;
    uint8_t observed_all; /* the frame was full: every agent observed, whatever its AGENT_BIT_OBSERVED */
};

/* One tick over agents [begin, count) (begin a multiple of 64, or next_call_floor is neither read nor
 * kept): the lists are written from the outputs' pointers on (at most
 * count - begin entries each) and the counts cover the range, so disjoint ranges may run concurrently
 * (every per-agent operation reads and writes that agent's state only) and their outputs concatenate in
 * range order to the whole population's. Returns 0, or -1 when a parameter is out of range. */
int moirai_tick(const struct moirai_params *params, struct moirai_agents *agents, struct moirai_outputs *outputs);

/* The row form on the wire, without a Python object per frame.
 * Decode: a serialized PerceptionBatch's frames (field 3) into `table` (rows x 17 int64, PerceptionFrame
 * fields 1..18 in field-number order without field 11) and `progress` (field 11). Returns the number of
 * frames, -1 on malformed input, -2 when there are more than max_rows frames. */
int64_t moirai_decode_rows(const uint8_t *buf, size_t len, uint32_t max_rows, int64_t *table, uint64_t *progress);

/* Encode: one ActionIntent (fields 1..8 and 10; zero values omitted, as protobuf does) per listed slot, each as
 * ActionBatch field 3, ready for ActionBatch.MergeFromString. `ori_blob`/`ori_offsets` hold every
 * agent's ori_id (`n_ori` entries). Returns the bytes written, -1 when `cap` is too small, or -2 when a
 * slot has no entry. */
int64_t moirai_encode_intents(uint32_t count, const uint32_t *slots, const uint8_t *kind, const uint32_t *goal_ref,
                              const uint16_t *priority, const uint8_t *tier, const uint8_t *source,
                              const uint16_t *plan_step, const uint8_t *tier_reason, const uint8_t *ori_blob,
                              const uint32_t *ori_offsets, uint32_t n_ori,
                              uint8_t *out, size_t cap);

/* A frame's column into an agent array: dst[slots[i]] = values[i] for i < count (slots NULL: slot i),
 * elements `width` bytes wide (1, 2, 4 or 8; else -1). The slots are registered and distinct
 * (validated before). Where a value differs from the one it replaces, moved[slot] |= moved_bit
 * (moved_bit 0: no compare). */
int moirai_scatter(void *dst, const void *values, const uint32_t *slots, uint32_t count, uint32_t width,
                   uint8_t *moved, uint8_t moved_bit);

/* bits[slots[i]] |= bit for i < count. */
void moirai_mark(uint8_t *bits, const uint32_t *slots, uint32_t count, uint8_t bit);

/* A delta answer's slots: the ascending union of three ascending lists without repeats (changed,
 * guarded with their guard bits, merged) into `out`, with each slot's guard bits (0 if unguarded)
 * into `out_bits`; both hold n_changed + n_guarded + n_merged at least. Returns the union's length. */
uint32_t moirai_union_slots(const uint32_t *changed, uint32_t n_changed, const uint32_t *guarded,
                            const uint8_t *guard_bits, uint32_t n_guarded, const uint32_t *merged,
                            uint32_t n_merged, uint32_t *out, uint8_t *out_bits);

/* Encode: one CognitionCallCandidate per entry (zero values omitted, as protobuf does), each as TickResult
 * field 3, ready for TickResult.MergeFromString. Per entry: slot, cause, tier, candidate bits (bit 0 =
 * needs rehydration), token and cost estimates, batch group index into group_blob (-1 = none). String
 * tables (blob + offsets, entry i = blob[offsets[i], offsets[i + 1])): ori and tenant ids by slot, model
 * routes by tier, batch group ids, each table with its entry count. The call id is "world:tick:slot:cause".
 * Returns the bytes written, -1 when `cap` is too small, or -2 when a slot, tier or group has no entry. */
int64_t moirai_encode_candidates(uint32_t count, const uint32_t *slots, const uint8_t *cause, const uint8_t *tier,
                                 const uint8_t *bits, const int64_t *tokens, const int64_t *costs,
                                 const int32_t *group_of, uint64_t tick, const uint8_t *world, uint32_t world_len,
                                 const uint8_t *ori_blob, const uint32_t *ori_offsets, uint32_t n_ori,
                                 const uint8_t *tenant_blob, const uint32_t *tenant_offsets, uint32_t n_tenant,
                                 const uint8_t *route_blob, const uint32_t *route_offsets, uint32_t n_route,
                                 const uint8_t *group_blob, const uint32_t *group_offsets, uint32_t n_group,
                                 uint8_t *out, size_t cap);

/* The behaviour layer's per-tick step (moirai_behavior.c; kernel_service/behavior/c_step.py binds it). The
 * numbers it shares with Python are named here, so cffi checks them against the C build and a test checks
 * them against the protobuf enums and the layer's vocabulary. */
enum moirai_behavior_constants {
    MB_TIER_LACHESIS = 2,
    MB_SOURCE_BEHAVIOR_TREE = 2,
    MB_SOURCE_HTN = 3,
    MB_SOURCE_COGNITION = 4,
    MB_CAUSE_NOVELTY = 6,
    MB_CAUSE_NO_GOAL = 7,
    MB_CAUSE_NO_METHOD = 8,
    MB_BIT_FRESH_DECISION = 1,
    MB_SIGNALS_MOVED_BEHAVIOR = 2,
    MB_THREAT_FLAG = 64,
    MB_MINOR_PRESENT_FLAG = 128,
    MB_ROUTINE_MAINTAIN_SAFETY = 1,
    MB_ROUTINE_SELF_CARE = 2,
    MB_ROUTINE_VOCATION = 3,
    MB_ROUTINE_SOCIAL = 4,
    MB_ROUTINE_CURIOSITY = 5,
    MB_ROUTINE_OBSERVE = 6,
    MB_EMOTION_CALM = 1,
    MB_EMOTION_CONTENT = 2,
    MB_EMOTION_DETERMINED = 3,
    MB_EMOTION_TIRED = 4,
    MB_EMOTION_LONELY = 5,
    MB_EMOTION_ANXIOUS = 6,
    MB_EMOTION_GRIEVING = 7,
    MB_TRAIT_WARMTH = 0,
    MB_TRAIT_CURIOSITY = 1,
    MB_TRAIT_CAUTION = 2,
    MB_TRAIT_AMBITION = 3,
    MB_TRAIT_CONSCIENTIOUSNESS = 4,
    MB_TRAIT_PLAYFULNESS = 7,
    MB_DOMAIN_CHILD_SAFETY = 1,
    MB_DOMAIN_SAFETY = 2,
    MB_FAMILY_VOCATION = 1,
    MB_NEED_PURPOSE = 4,
    MB_GOAL_FAMILY_SHIFT = 28,
    MB_GOAL_TAG_SHIFT = 12,
    MB_GOAL_TAG_MASK = 65535,
    MB_ROUTINES = 7
};

/* The layer's numbers (BehaviorConfig), the tags and goals it sets itself, its routine tables and the
 * compiled HTN methods (behavior/compiled_plans.py): bound once per layer. */
struct moirai_behavior_config {
    int32_t safety_value_threshold_bp;
    int32_t fatigue_self_care_bp;
    int32_t need_rest_tag_bp;
    int32_t routine_drive_gate_bp;
    int32_t need_goal_threshold_bp;
    int32_t grieving_hard_objective_bp;
    int32_t anxious_hard_objective_bp;
    int32_t grief_bp;
    int32_t aroused_bp;
    int32_t tired_fatigue_bp;
    int32_t lonely_need_bp;
    int32_t content_valence_bp;
    int32_t mood_decay_shift;
    uint64_t escalation_cooldown_ticks;
    uint32_t rest_tag;
    uint32_t threat_tag;
    uint32_t minor_tag;
    uint32_t need_goal[5];            /* by Need; 0 = none */
    uint32_t purpose_with_station_goal;
    uint8_t routine_kind[7];          /* ActionKind by Routine */
    uint8_t routine_values[7][2];     /* the two value domains a routine honours, strongest first */
    uint32_t method_count;
    const uint8_t *step_kind;
    const int32_t *method_offset;
    const int32_t *method_length;
    const uint32_t *method_family;
    const uint32_t *method_requires;
    const uint32_t *method_excludes;
    const int32_t *method_priority_bp;
};

/* Pointers into the kernel's arrays (agent_state.AGENT_FIELDS), the layer's (behavior/layer.py _ARRAYS;
 * traits and values are (axes, capacity) row-major), and the escalation output buffers (capacity-sized). */
struct moirai_behavior {
    const uint8_t *tier;
    uint8_t *agent_bits;
    uint8_t *cached_kind;
    uint8_t *cached_source;
    uint32_t *cached_goal_ref;
    uint16_t *cached_priority;
    uint16_t *cached_plan_step;
    const uint16_t *need_safety_bp;
    const uint16_t *need_sustaining_bp;
    const uint16_t *need_social_bp;
    const uint16_t *need_purpose_bp;
    const uint16_t *fatigue_bp;
    const uint16_t *signal_flags;
    const uint32_t *goal_ref;
    uint8_t *signals_moved;

    uint32_t capacity; /* the layer's: the row stride of traits and values */
    const uint16_t *traits;
    const uint16_t *values;
    const uint32_t *vocation_ref;
    uint8_t *evaluated;
    uint16_t *seen_safety;
    uint16_t *seen_sustaining;
    uint16_t *seen_social;
    uint16_t *seen_purpose;
    uint16_t *seen_fatigue;
    uint16_t *seen_flags;
    uint32_t *seen_goal;
    uint8_t *tree_routine;
    uint8_t *tree_kind;
    uint16_t *tree_priority;
    uint8_t *tree_value;
    uint8_t *emotion;
    int32_t *hard_objective_bp;
    int32_t *mood_valence;
    int32_t *mood_arousal;
    int32_t *grief;
    uint8_t *mood_active;
    uint32_t *goal;
    uint32_t *plan_tags;
    int16_t *plan_method;
    int32_t *plan_cursor;
    uint16_t *plan_priority;
    uint8_t *novel;
    uint64_t *escalate_after;
    const uint32_t *cognition_goal;
    uint8_t *goal_adopted;
    const uint64_t *hold_until;

    uint32_t *escalation_slot;
    uint8_t *escalation_cause;
};

struct moirai_behavior_params {
    uint64_t tick;
    uint32_t first; /* the strided set: slots first, first + every, ... from begin below count */
    uint32_t every;
    uint32_t begin; /* 0 for the whole population; disjoint ranges may step concurrently */
    uint32_t count;
    uint8_t cognition_available; /* Lachesis cognition: arbitration may escalate */
};

/* One tick's step over the due slots (the strided set in [begin, count), or `slots[0, n_slots)` ascending
 * when `slots` is not NULL): a row whose inputs changed is re-evaluated (novelty, emotion, tree, needs -> goal, re-plan), then
 * every due row steps its cached plan, is marked fresh if its action changed, and is arbitrated. Returns the
 * number of escalations written, or -1 when the state is out of range (count above the layer's capacity, a
 * listed slot at or past count, a plan method or cursor outside the compiled library): the step stops at
 * that row, before reading outside any array. */
int64_t moirai_behavior_step(const struct moirai_behavior_params *params, const struct moirai_behavior_config *config,
                              const uint32_t *slots, uint32_t n_slots, struct moirai_behavior *b);
