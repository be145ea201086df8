/* src/core/rng.c — key derivation and the sequential stream built on Philox-4x32-10
 * (qs_philox4x32, inline in qsync/rng.h). */
#include "qsync/rng.h"

#include <math.h>

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
