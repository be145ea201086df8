/* src/core/rng.c — Philox-4x32-10 (Salmon et al., SC'11, "Parallel random numbers: as easy
 * as 1, 2, 3"; constants from that paper) and the sequential stream built on it. */
#include "qsync/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void qs_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* splitmix64 finaliser: a bijective mixer for building keys. */
static uint64_t qs_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t qs_rng_key(uint64_t seed, const char *purpose, uint64_t index) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a over the purpose string */
    for (const char *p = purpose; p && *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001B3ull;
    return qs_mix64(qs_mix64(seed) ^ h ^ qs_mix64(index + 0x632BE59BD9B4E019ull));
}

void qs_rng_init(qs_rng *r, uint64_t key, uint64_t counter) {
    r->key = key;
    r->counter = counter;
    r->buf_used = 4;
}

uint32_t qs_rng_u32(qs_rng *r) {
    if (r->buf_used >= 4) {
        qs_philox4x32(r->key, 0, r->counter++, r->buf);
        r->buf_used = 0;
    }
    return r->buf[r->buf_used++];
}

float qs_rng_uniform(qs_rng *r) { return (float)(qs_rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

uint64_t qs_rng_below(qs_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    if (n <= UINT32_MAX) {
        uint32_t limit = (uint32_t)(UINT32_MAX - (UINT32_MAX % n + 1) % n);
        for (;;) {
            uint32_t v = qs_rng_u32(r);
            if (v <= limit) return v % n;
        }
    }
    for (;;) {
        uint64_t v = ((uint64_t)qs_rng_u32(r) << 32) | qs_rng_u32(r);
        uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
        if (v <= limit) return v % n;
    }
}

float qs_rng_normal(qs_rng *r) {
    float u1 = ((float)(qs_rng_u32(r) >> 8) + 0.5f) * (1.0f / 16777216.0f); /* (0,1) */
    float u2 = qs_rng_uniform(r);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

void qs_rng_shuffle_i64(qs_rng *r, int64_t *perm, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)qs_rng_below(r, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
