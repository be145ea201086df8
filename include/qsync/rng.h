/* qsync/rng.h — defines: the counter-based generator (Philox-4x32-10). A stream is
 * (key, counter); the same key and counter always give the same numbers, on every backend
 * and rank, so draws can be addressed by (seed, step, layer, element) without hidden state.
 * Resuming a run only needs the counters saved in the checkpoint. */
#ifndef QSYNC_RNG_H
#define QSYNC_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define QS_RNG_HD __host__ __device__
#else
#define QS_RNG_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox-4x32-10 block: 4 uint32 outputs for a 64-bit key and a 128-bit counter.
 * Inline so that element-wise kernels (dropout, stochastic rounding) can vectorise it.
 * Constants from Salmon et al., SC'11, "Parallel random numbers: as easy as 1, 2, 3". */
static inline QS_RNG_HD void qs_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Derive a key for a sub-stream, e.g. qs_rng_key(seed, "dropout", node_index). */
uint64_t qs_rng_key(uint64_t seed, const char *purpose, uint64_t index);

/* A sequential stream over one key; `counter` counts 128-bit blocks consumed. */
typedef struct qs_rng {
    uint64_t key;
    uint64_t counter;
    uint32_t buf[4];
    int buf_used; /* 0..4; 4 means empty */
} qs_rng;

void qs_rng_init(qs_rng *r, uint64_t key, uint64_t counter);
uint32_t qs_rng_u32(qs_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
float qs_rng_uniform(qs_rng *r);
/* Uniform integer in [0, n) (n > 0), unbiased by rejection. */
uint64_t qs_rng_below(qs_rng *r, uint64_t n);
/* Standard normal (Box–Muller). */
float qs_rng_normal(qs_rng *r);
/* Fisher–Yates shuffle of perm[0..n). */
void qs_rng_shuffle_i64(qs_rng *r, int64_t *perm, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
