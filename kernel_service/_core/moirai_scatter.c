/* A delta frame's columns into the agent arrays: values[i] lands at slot slots[i]. numpy's fancy
 * assignment costs ~4 ns an element at a million agents (index checks, a generic inner loop); the
 * slots were validated (registered, strictly increasing) before this runs, so a plain loop will do.
 * kernel_service/tick_core.py's NumpyCore holds the numpy equivalent; tests keep the two identical. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "moirai_core_decls.h"

#define SCATTER(type)                                                                        \
    do {                                                                                     \
        type *restrict d = (type *)dst;                                                      \
        const type *restrict v = (const type *)values;                                       \
        for (uint32_t i = 0; i < count; i++) d[slots[i]] = v[i];                             \
    } while (0)

int moirai_scatter(void *dst, const void *values, const uint32_t *slots, uint32_t count, uint32_t width) {
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
