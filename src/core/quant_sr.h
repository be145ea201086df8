/* src/core/quant_sr.h — defines: the random words of stochastic rounding, generated with
 * Philox-4x32-10 (qsync/rng.h) 16 blocks at a time in AVX-512 registers, with a scalar
 * fallback that yields the same bits.
 *
 * Mapping (fixed; part of the reproducibility contract): global element index j belongs to
 * group g = j / 64 at position p = j % 64 = 16·w + l (w = p / 16, l = p % 16), and its word is
 *     word w of qs_philox4x32(key, ctr_hi = counter, ctr_lo = 16·g + l).
 * A 16-lane vector Philox on counters 16g..16g+15 therefore yields the 64 words of group g
 * directly in element order (one register per 16 consecutive elements). Every element uses
 * its own word: no two elements of one (key, counter) share a random word. */
#ifndef QSYNC_CORE_QUANT_SR_H
#define QSYNC_CORE_QUANT_SR_H

#include <stdbool.h>
#include <stdint.h>

#include "core/hd.h"
#include "core/numfmt.h"
#include "qsync/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one definition of the mapping above (host and device, QS_HD): the Philox block of
 * group g, lane l (0..15) holds in out[w] the word of global index 64·g + 16·w + l. A kernel
 * that computes one block per thread gets four elements' words from one Philox call. */
static inline QS_HD void qs_sr_block(uint64_t key, uint64_t counter, uint64_t g, uint32_t l, uint32_t out[4]) {
    qs_philox4x32(key, counter, (g << 4) | (uint64_t)l, out);
}
/* The random word of one global index j (qs_sr_word is this, out of line). */
static inline QS_HD uint32_t qs_sr_word_inline(uint64_t key, uint64_t counter, uint64_t j) {
    uint32_t out[4];
    qs_sr_block(key, counter, j >> 6, (uint32_t)(j & 15u), out);
    return out[(j >> 4) & 3u];
}

/* r[i] = random word of global index sr->offset + i0 + i, for 0 <= i < len (len >= 0). Uses
 * the AVX-512 generator when compiled in and enabled, else the scalar one (same bits). */
void qs_sr_bits(const qs_sr *sr, int64_t i0, int64_t len, uint32_t *r);
/* Same, always with the scalar generator (for tests). */
void qs_sr_bits_scalar(const qs_sr *sr, int64_t i0, int64_t len, uint32_t *r);
/* The random word of one global index j (scalar; reference for tests). */
uint32_t qs_sr_word(uint64_t key, uint64_t counter, uint64_t j);

/* Whether this build has the AVX-512 generator (compiled with __AVX512F__). */
bool qs_sr_vector_available(void);
/* Enable/disable the vector generator process-wide (default on when available). For tests and
 * benchmarks only: do not call while conversions are running on other threads. Results are
 * identical either way. */
void qs_sr_set_vector(bool on);

#ifdef __cplusplus
}
#endif
#endif
