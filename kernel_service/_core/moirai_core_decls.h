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

/* A frame's column into an agent array: dst[slots[i]] = values[i] for i < count, elements `width`
 * bytes wide (1, 2, 4 or 8; else -1). The slots are registered and distinct (validated before). */
int moirai_scatter(void *dst, const void *values, const uint32_t *slots, uint32_t count, uint32_t width);

/* bits[slots[i]] |= bit for i < count. */
void moirai_mark(uint8_t *bits, const uint32_t *slots, uint32_t count, uint8_t bit);

/* Encode: one CognitionCallCandidate per entry (zero values omitted, as protobuf does), each as TickResult
 * field 3, ready for TickResult.MergeFromString. Per entry: slot, cause, tier, candidate bits (bit 0 =
 * needs rehydration), token and cost estimates, batch group index into group_blob (-1 = none). String
 * tables (blob + offsets, entry i = blob[offsets[i], offsets[i + 1])): ori and tenant ids by slot, model
 * routes by tier, batch group ids. The call id is "world:tick:slot:cause". Returns the bytes written,
 * or -1 when `cap` is too small. */
int64_t moirai_encode_candidates(uint32_t count, const uint32_t *slots, const uint8_t *cause, const uint8_t *tier,
                                 const uint8_t *bits, const int64_t *tokens, const int64_t *costs,
                                 const int32_t *group_of, uint64_t tick, const uint8_t *world, uint32_t world_len,
                                 const uint8_t *ori_blob, const uint32_t *ori_offsets, const uint8_t *tenant_blob,
                                 const uint32_t *tenant_offsets, const uint8_t *route_blob,
                                 const uint32_t *route_offsets, const uint8_t *group_blob,
                                 const uint32_t *group_offsets, uint8_t *out, size_t cap);
