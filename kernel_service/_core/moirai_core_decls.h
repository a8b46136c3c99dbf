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
    uint32_t *seen_goal_ref;
    uint64_t *seen_progress_signature;
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

/* One tick over agents [0, count). Returns 0, or -1 when a parameter is out of range. */
int moirai_tick(const struct moirai_params *params, struct moirai_agents *agents, struct moirai_outputs *outputs);

/* The row form on the wire, without a Python object per frame.
 * Decode: a serialized PerceptionBatch's frames (field 3) into `table` (rows x 17 int64, PerceptionFrame
 * fields 1..18 in field-number order without field 11) and `progress` (field 11). Returns the number of
 * frames, -1 on malformed input, -2 when there are more than max_rows frames. */
int64_t moirai_decode_rows(const uint8_t *buf, size_t len, uint32_t max_rows, int64_t *table, uint64_t *progress);

/* Encode: one ActionIntent (fields 1..8 and 10; zero values omitted, as protobuf does) per listed slot, each as
 * ActionBatch field 3, ready for ActionBatch.MergeFromString. `ori_blob`/`ori_offsets` hold every
 * agent's ori_id. Returns the bytes written, or -1 when `cap` is too small. */
int64_t moirai_encode_intents(uint32_t count, const uint32_t *slots, const uint8_t *kind, const uint32_t *goal_ref,
                              const uint16_t *priority, const uint8_t *tier, const uint8_t *source,
                              const uint16_t *plan_step, const uint8_t *tier_reason, const uint8_t *ori_blob,
                              const uint32_t *ori_offsets,
                              uint8_t *out, size_t cap);

/* The behaviour layer's per-tick step (moirai_behavior.c; kernel_service/behavior/c_step.py binds it). The
 * numbers it shares with Python are named here, so cffi checks them against the C build and a test checks
 * them against the protobuf enums and the layer's vocabulary. */
enum moirai_behavior_constants {
    MB_TIER_LACHESIS = 2,
    MB_SOURCE_BEHAVIOR_TREE = 2,
    MB_SOURCE_HTN = 3,
    MB_SOURCE_COGNITION = 4,
    MB_ROUTINE_MAINTAIN_SAFETY = 1,
    MB_CAUSE_NOVELTY = 6,
    MB_CAUSE_NO_GOAL = 7,
    MB_CAUSE_NO_METHOD = 8,
    MB_BIT_FRESH_DECISION = 1
};

/* Pointers into the kernel's arrays (agent_state.AGENT_FIELDS), the layer's (behavior/layer.py _ARRAYS), the
 * compiled methods, and the step's capacity-sized output buffers. */
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

    const uint8_t *evaluated;
    const uint8_t *mood_active;
    const uint8_t *goal_adopted;
    const uint16_t *seen_safety;
    const uint16_t *seen_sustaining;
    const uint16_t *seen_social;
    const uint16_t *seen_purpose;
    const uint16_t *seen_fatigue;
    const uint16_t *seen_flags;
    const uint32_t *seen_goal;
    const uint8_t *tree_routine;
    const uint8_t *tree_kind;
    const uint16_t *tree_priority;
    const uint32_t *goal;
    const int16_t *plan_method;
    int32_t *plan_cursor;
    const uint16_t *plan_priority;
    uint8_t *novel;
    uint64_t *escalate_after;
    const uint64_t *hold_until;

    const uint8_t *step_kind;
    const int32_t *method_offset;
    const int32_t *method_length;

    uint32_t *changed_rows;
    uint32_t *escalation_slot;
    uint8_t *escalation_cause;
    uint32_t *late_slot;  /* scratch: the settled rows' escalations, before they are merged in slot order */
    uint8_t *late_cause;
};

struct moirai_behavior_params {
    uint64_t tick;
    uint64_t escalation_cooldown_ticks;
    uint32_t first; /* the strided set: slots first, first + every, ... below count */
    uint32_t every;
    uint32_t count;
    uint8_t cognition_available; /* Lachesis cognition: arbitration may escalate */
};

/* Phase 1 over the due slots (the strided set, or `slots[0, n_slots)` ascending when `slots` is not NULL):
 * an unchanged row steps its cached plan, is marked fresh if its action changed, and is arbitrated; a row
 * whose inputs changed is listed in changed_rows for the numpy evaluation. counts = [changed, escalations]. */
void moirai_behavior_step(const struct moirai_behavior_params *params, const uint32_t *slots, uint32_t n_slots,
                          struct moirai_behavior *b, uint32_t *counts);

/* Phase 2, after changed_rows[0, counts[0]) were evaluated: step, mark and arbitrate them, and merge their
 * escalations with phase 1's in slot order (counts[1] grows). */
void moirai_behavior_settle(const struct moirai_behavior_params *params, struct moirai_behavior *b, uint32_t *counts);
