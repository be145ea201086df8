/* src/core/quant_sr.c — the random words of stochastic rounding (mapping in quant_sr.h):
 * Philox-4x32-10 over 16 counters per AVX-512 register, and the scalar equivalent. */
#include "core/quant_sr.h"

#include <string.h>

#include "qsync/rng.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

static int g_use_vector = 1;

bool qs_sr_vector_available(void) {
#ifdef __AVX512F__
    return true;
#else
    return false;
#endif
}

void qs_sr_set_vector(bool on) { g_use_vector = on ? 1 : 0; }

uint32_t qs_sr_word(uint64_t key, uint64_t counter, uint64_t j) { return qs_sr_word_inline(key, counter, j); }

/* The 64 words of group g into r[0..64), scalar. */
static void group_scalar(uint64_t key, uint64_t counter, uint64_t g, uint32_t *r) {
    for (uint32_t l = 0; l < 16; l++) {
        uint32_t out[4];
        qs_sr_block(key, counter, g, l, out);
        for (int w = 0; w < 4; w++) r[16 * w + l] = out[w];
    }
}

#ifdef __AVX512F__
/* 16 lanes of 32×32 → 64-bit products: returns the high halves, *lo the low halves. */
static inline __m512i mulhilo16(__m512i a, __m512i mul, __m512i *lo) {
    __m512i pe = _mm512_mul_epu32(a, mul);                        /* even lanes, 64-bit products */
    __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), mul); /* odd lanes */
    *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
    return _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}

/* The 64 words of groups g0, g0+1 (two independent chains for instruction-level
 * parallelism) into r[0..128), AVX-512. Same rounds as qs_philox4x32. */
static void groups2_avx512(uint64_t key, uint64_t counter, uint64_t g0, uint32_t *r) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    uint64_t lo0 = g0 << 4, lo1 = (g0 + 1) << 4;
    __m512i a0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)lo0), iota);
    __m512i a1 = _mm512_set1_epi32((int)(uint32_t)(lo0 >> 32));
    __m512i b0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)lo1), iota);
    __m512i b1 = _mm512_set1_epi32((int)(uint32_t)(lo1 >> 32));
    __m512i a2 = _mm512_set1_epi32((int)(uint32_t)counter), a3 = _mm512_set1_epi32((int)(uint32_t)(counter >> 32));
    __m512i b2 = a2, b3 = a3;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        __m512i vk0 = _mm512_set1_epi32((int)k0), vk1 = _mm512_set1_epi32((int)k1);
        __m512i alo0, alo1, blo0, blo1;
        __m512i ahi0 = mulhilo16(a0, m0, &alo0), ahi1 = mulhilo16(a2, m1, &alo1);
        __m512i bhi0 = mulhilo16(b0, m0, &blo0), bhi1 = mulhilo16(b2, m1, &blo1);
        /* 0x96: three-way xor */
        a0 = _mm512_ternarylogic_epi32(ahi1, a1, vk0, 0x96);
        a2 = _mm512_ternarylogic_epi32(ahi0, a3, vk1, 0x96);
        a1 = alo1;
        a3 = alo0;
        b0 = _mm512_ternarylogic_epi32(bhi1, b1, vk0, 0x96);
        b2 = _mm512_ternarylogic_epi32(bhi0, b3, vk1, 0x96);
        b1 = blo1;
        b3 = blo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    _mm512_storeu_si512((void *)(r + 0), a0);
    _mm512_storeu_si512((void *)(r + 16), a1);
    _mm512_storeu_si512((void *)(r + 32), a2);
    _mm512_storeu_si512((void *)(r + 48), a3);
    _mm512_storeu_si512((void *)(r + 64), b0);
    _mm512_storeu_si512((void *)(r + 80), b1);
    _mm512_storeu_si512((void *)(r + 96), b2);
    _mm512_storeu_si512((void *)(r + 112), b3);
}
#endif

/* Shared driver: whole groups straight into r (two at a time when vector), partial groups at
 * either end through a 128-word scratch buffer. */
static void sr_bits(const qs_sr *sr, int64_t i0, int64_t len, uint32_t *r, int vec) {
    uint32_t tmp[128];
    const uint64_t counter = sr->counter_at ? *sr->counter_at : sr->counter;
    uint64_t j = sr->offset + (uint64_t)i0, end = j + (uint64_t)len;
    uint32_t *dst = r;
    while (j < end) {
        uint64_t g = j >> 6, gs = g << 6;
        uint64_t take_end = end - gs < 128 ? end : gs + 128; /* at most two groups per pass */
        int full2 = (j == gs) && (end - gs >= 128);
        int ngroups = take_end - gs > 64 ? 2 : 1;
        uint32_t *out = full2 ? dst : tmp;
#ifdef __AVX512F__
        if (vec) {
            groups2_avx512(sr->key, counter, g, out);
        } else
#endif
        {
            (void)vec;
            for (int q = 0; q < ngroups; q++) group_scalar(sr->key, counter, g + (uint64_t)q, out + 64 * q);
        }
        uint64_t cnt = take_end - j;
        if (!full2) memcpy(dst, tmp + (j - gs), (size_t)cnt * sizeof(uint32_t));
        dst += cnt;
        j = take_end;
    }
}

void qs_sr_bits(const qs_sr *sr, int64_t i0, int64_t len, uint32_t *r) { sr_bits(sr, i0, len, r, g_use_vector); }

void qs_sr_bits_scalar(const qs_sr *sr, int64_t i0, int64_t len, uint32_t *r) { sr_bits(sr, i0, len, r, 0); }
