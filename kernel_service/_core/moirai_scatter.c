/* A frame's columns into the agent arrays: values[i] lands at slot slots[i] (a full frame's at slot
 * i), marking the agents whose value moved (agent_state.MOVED_BITS). numpy's fancy assignment costs ~4 ns an element at a million agents (index checks, a generic inner loop); the
 * slots were validated (registered, strictly increasing) before this runs, so a plain loop will do.
 * kernel_service/tick_core.py's NumpyCore holds the numpy equivalent; tests keep the two identical. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "moirai_clones.h"
#include "moirai_core_decls.h"

/* The compare reads the line the store writes anyway. A partial frame stores a mark only where a
 * value moved, so the marks' lines stay clean on a frame that repeats its values; a full frame
 * writes them all, branch-free, so the loop vectorizes. */
#define SCATTER(type)                                                                        \
    do {                                                                                     \
        type *restrict d = (type *)dst;                                                      \
        const type *restrict v = (const type *)values;                                       \
        uint8_t *restrict m = moved;                                                         \
        if (moved_bit == 0 && slots != NULL) {                                               \
            for (uint32_t i = 0; i < count; i++) d[slots[i]] = v[i];                         \
        } else if (moved_bit == 0) {                                                         \
            memcpy(d, v, (size_t)count * sizeof(type));                                      \
        } else if (slots != NULL) {                                                          \
            for (uint32_t i = 0; i < count; i++) {                                           \
                const uint32_t s = slots[i];                                                 \
                if (i + 32 < count) __builtin_prefetch(d + slots[i + 32], 1);                \
                if (d[s] != v[i]) m[s] |= moved_bit;                                         \
                d[s] = v[i];                                                                 \
            }                                                                                \
        } else {                                                                             \
            for (uint32_t i = 0; i < count; i++) { /* every line is written: vectorized */ \
                m[i] |= (uint8_t)((d[i] != v[i]) * moved_bit);                               \
                d[i] = v[i];                                                                 \
            }                                                                                \
        }                                                                                    \
    } while (0)

TICK_CLONES int moirai_scatter(void *dst, const void *values, const uint32_t *slots, uint32_t count, uint32_t width,
                   uint8_t *moved, uint8_t moved_bit) {
    switch (width) {
    case 1: SCATTER(uint8_t); return 0;
    case 2: SCATTER(uint16_t); return 0;
    case 4: SCATTER(uint32_t); return 0;
    case 8: SCATTER(uint64_t); return 0;
    default: return -1;
    }
}

void moirai_mark(uint8_t *bits, const uint32_t *slots, uint32_t count, uint8_t bit) {
    for (uint32_t i = 0; i < count; i++) bits[slots[i]] |= bit;
}

/* A delta answer's slots: the union of the changed slots, the guarded slots and the merged slots
 * (each list ascending and without repeats), ascending, with each answered slot's guard bits (0 when
 * no guard fired for it). One merge pass over the three lists: the numpy way marks a byte per agent
 * and scans them all, ~1 ms a tick at a million agents against this pass's tens of microseconds. */
uint32_t moirai_union_slots(const uint32_t *changed, uint32_t n_changed, const uint32_t *guarded,
                            const uint8_t *guard_bits, uint32_t n_guarded, const uint32_t *merged,
                            uint32_t n_merged, uint32_t *out, uint8_t *out_bits) {
    uint32_t c = 0, g = 0, m = 0, n = 0;
    while (c < n_changed || g < n_guarded || m < n_merged) {
        uint32_t slot = UINT32_MAX;
        if (c < n_changed && changed[c] < slot) slot = changed[c];
        if (g < n_guarded && guarded[g] < slot) slot = guarded[g];
        if (m < n_merged && merged[m] < slot) slot = merged[m];
        uint8_t bits = 0;
        if (c < n_changed && changed[c] == slot) c++;
        if (g < n_guarded && guarded[g] == slot) bits = guard_bits[g++];
        if (m < n_merged && merged[m] == slot) m++;
        out[n] = slot;
        out_bits[n++] = bits;
    }
    return n;
}
