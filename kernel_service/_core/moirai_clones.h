/* Function multi-versioning for the bulk (vectorized) loops of the tick core, the behaviour step and
 * the frame scatter (a full frame's 64-bit compare needs SSE4.1 or better to vectorize).
 * On x86-64 with GCC and glibc (which resolves ifuncs) a marked function is compiled three times, for
 * AVX-512 (x86-64-v4: mask registers and byte narrowing, still 256-bit vectors under GCC's generic
 * tuning; ~13 % fewer cycles than AVX2 at 10,200 agents on Zen 4), AVX2 and the baseline, and the
 * loader picks the best this CPU runs, so one build serves every machine. Elsewhere it is compiled
 * once for the build's target. Not part of the cffi declarations (cdef cannot read #if). */
#ifndef MOIRAI_CLONES_H
#define MOIRAI_CLONES_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define TICK_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define TICK_CLONES
#endif
/* A bulk pass is inlined into its marked caller, so each clone compiles it for its own target. */
#define BULK_PASS static inline __attribute__((always_inline))

#endif
