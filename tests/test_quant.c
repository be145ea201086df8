/* tests/test_quant.c — number formats and quantizers of src/core (numfmt.h, quant_int8.h,
 * quant_sr.h) against references written here from the format definitions, in double:
 *  - exhaustive: all 65536 BF16 / FP16 patterns widen exactly and narrow back to themselves
 *    (RNE and SR); all 256 codes of FP8 E4M3 / E5M2 decode to a table computed from
 *    (sign, exponent, mantissa, bias) and every finite code re-encodes to itself;
 *  - RNE: hand-picked ties, saturation / overflow, NaN, ±Inf, subnormals, and random inputs
 *    over the whole exponent range against a reference rounding to the lattice;
 *  - SR: every result is one of the two lattice neighbours; the mean of N draws of one value
 *    is within 5σ of it (σ = step·sqrt(f(1−f)/N), f the fractional position) plus the
 *    documented 2^-31-step bias; same (key, counter, index) gives the same bits; 1 vs 2 threads,
 *    vector vs scalar random words, and one call vs two calls with offsets give identical bits;
 *  - INT8: amax (NaN propagation, Inf, zero), scales, RNE against a reference, saturation,
 *    per-row scales, dequantization, error messages for bad arguments. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <omp.h>
#include <float.h>

#include "core/numfmt.h"
#include "core/quant_int8.h"
#include "core/quant_sr.h"
#include "qsync/rng.h"
#include "qsync/status.h"
#include "bits.h"

#define ASSERT_OK(expr)                                                                          \
    do {                                                                                         \
        qs_status st_ = (expr);                                                                  \
        if (st_ != QS_OK) fail_msg("%s: %s: %s", #expr, qs_status_name(st_), qs_last_error());   \
    } while (0)


static void *xalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* ------------------------------------------------------------------ reference lattices */

/* A binary format with `mant` fraction bits and smallest normal exponent emin (no upper
 * limit here: callers handle overflow). */
typedef struct fmt {
    const char *name;
    int mant, emin;
    double max; /* largest finite value */
} fmt;
static const fmt F_BF16 = {"bf16", 7, -126, 3.3895313892515355e38};
static const fmt F_F16 = {"f16", 10, -14, 65504.0};
static const fmt F_E4M3 = {"e4m3", 3, -6, 448.0};
static const fmt F_E5M2 = {"e5m2", 2, -14, 57344.0};

/* Lattice step at magnitude a >= 0. */
static double step_at(const fmt *f, double a) {
    int e = f->emin;
    if (a > 0) {
        frexp(a, &e);
        e -= 1;
        if (e < f->emin) e = f->emin;
    }
    return ldexp(1.0, e - f->mant);
}
/* RNE of finite v to the lattice (unbounded exponent). */
static double ref_rne(const fmt *f, double v) {
    double s = step_at(f, fabs(v));
    return nearbyint(v / s) * s;
}
/* The two lattice neighbours of |v| (lo <= |v| <= hi), with the sign of v. */
static void ref_neigh(const fmt *f, double v, double *lo, double *hi) {
    double a = fabs(v), s = step_at(f, a);
    *lo = copysign(floor(a / s) * s, v);
    *hi = copysign(ceil(a / s) * s, v);
}

static double widen_f16(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

/* FP8 value from the format definition: E4M3 bias 7, NaN = S.1111.111, no Inf; E5M2 bias 15,
 * exponent 31 = Inf (mantissa 0) or NaN. */
static double ref_fp8(uint8_t c, qs_dtype dt) {
    int M = dt == QS_F8E4M3 ? 3 : 2, bias = dt == QS_F8E4M3 ? 7 : 15, emax = dt == QS_F8E4M3 ? 15 : 31;
    int E = (c & 0x7F) >> M, m = c & ((1 << M) - 1);
    double v;
    if (dt == QS_F8E4M3 && E == 15 && m == 7)
        v = NAN;
    else if (dt == QS_F8E5M2 && E == emax)
        v = m ? NAN : INFINITY;
    else if (E == 0)
        v = ldexp(m, 1 - bias - M);
    else
        v = ldexp((1 << M) + m, E - bias - M);
    return (c & 0x80) ? -v : v;
}

static const qs_sr SR0 = {0x1234567890ABCDEFull, 7, 0, NULL};

/* ------------------------------------------------------------ BF16 / FP16, exhaustive */

static void test_16bit_exhaustive(void **state) {
    enum { N = 65536 };
    uint16_t *all = xalloc(N * 2), *back = xalloc(N * 2), *back_sr = xalloc(N * 2);
    float *wide = xalloc(N * 4);
    for (uint32_t i = 0; i < N; i++) all[i] = (uint16_t)i;

    ASSERT_OK(qs_bf16_to_f32(N, all, wide));
    for (uint32_t i = 0; i < N; i++) assert_int_equal(fbits(wide[i]), i << 16);
    ASSERT_OK(qs_f32_to_bf16(N, wide, back, NULL));
    ASSERT_OK(qs_f32_to_bf16(N, wide, back_sr, &SR0));
    for (uint32_t i = 0; i < N; i++) {
        if (isnan(wide[i])) { /* NaN stays NaN, quiet, sign kept */
            assert_true((back[i] & 0x7FC0) == 0x7FC0 && (back[i] & 0x8000) == (i & 0x8000));
            assert_int_equal(back_sr[i], back[i]);
        } else {
            assert_int_equal(back[i], i);
            assert_int_equal(back_sr[i], i); /* representable values are fixed points of SR */
        }
    }

    ASSERT_OK(qs_f16_to_f32(N, all, wide));
    for (uint32_t i = 0; i < N; i++) {
        double v = widen_f16((uint16_t)i);
        if (isnan(v)) {
            assert_true(isnan(wide[i]));
            assert_int_equal(fbits(wide[i]) >> 31, i >> 15);
        } else if ((double)wide[i] != v || !signbit(wide[i]) != !signbit(v)) {
            fail_msg("f16 0x%04x -> %a, expected %a", i, (double)wide[i], v);
        }
    }
    ASSERT_OK(qs_f32_to_f16(N, wide, back, NULL));
    ASSERT_OK(qs_f32_to_f16(N, wide, back_sr, &SR0));
    for (uint32_t i = 0; i < N; i++) {
        if (isnan(wide[i])) {
            assert_true((back[i] & 0x7E00) == 0x7E00 && (back[i] & 0x8000) == (i & 0x8000));
            assert_int_equal(back_sr[i], back[i]);
        } else {
            assert_int_equal(back[i], i);
            assert_int_equal(back_sr[i], i);
        }
    }
    free(all);
    free(back);
    free(back_sr);
    free(wide);
}

static void test_16bit_rne(void **state) {
    /* bf16 ties (to even), carries, overflow, specials */
    const uint32_t bf_in[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F80FFFFu, 0x7F7FFFFFu, 0x7F7F7FFFu,
                              0x7F7F8000u, 0x7F800000u, 0xFF800000u, 0x80000000u, 0x00000001u, 0x00018000u,
                              0xBF7F8000u, 0x7F800001u, 0xFFC00000u};
    const uint16_t bf_out[] = {0x3F80, 0x3F82, 0x3F81, 0x3F81, 0x7F80, 0x7F7F, 0x7F80, 0x7F80,
                               0xFF80, 0x8000, 0x0000, 0x0002, 0xBF80, 0x7FC0, 0xFFC0};
    for (size_t i = 0; i < sizeof bf_in / sizeof bf_in[0]; i++) {
        float f = bitsf(bf_in[i]);
        uint16_t h;
        ASSERT_OK(qs_f32_to_bf16(1, &f, &h, NULL));
        if (h != bf_out[i]) fail_msg("f32 0x%08x -> bf16 0x%04x, expected 0x%04x", bf_in[i], h, bf_out[i]);
    }
    /* f16 ties, overflow boundary 65520, subnormal ties, underflow to ±0, specials */
    const float f16_in[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.99f, 65520.0f, 1e30f,
                            0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.8p-24f, 0x1.4p-23f, -INFINITY, -0.0f,
                            0x1p-14f, 0x1.ffcp-15f, -0x1p-26f, NAN};
    const uint16_t f16_out[] = {0x3C00, 0x3C02, 0x7BFF, 0x7BFF, 0x7C00, 0x7C00, 0x0001, 0x0000, 0x0001,
                                0x0002, 0x0002, 0xFC00, 0x8000, 0x0400, 0x0400, 0x8000, 0x7E00};
    for (size_t i = 0; i < sizeof f16_in / sizeof f16_in[0]; i++) {
        uint16_t h;
        ASSERT_OK(qs_f32_to_f16(1, &f16_in[i], &h, NULL));
        if (h != f16_out[i]) fail_msg("f32 %a -> f16 0x%04x, expected 0x%04x", (double)f16_in[i], h, f16_out[i]);
    }
    /* random f32 over the whole range (half of them with exponents 2^-27..2^18) */
    qs_rng g;
    qs_rng_init(&g, qs_rng_key(3, "test_quant", 0), 0);
    enum { N = 20000 };
    float *x = xalloc(N * 4);
    uint16_t *hb = xalloc(N * 2), *hh = xalloc(N * 2);
    for (int i = 0; i < N; i++) {
        uint32_t u = qs_rng_u32(&g);
        if (i % 2) u = (u & 0x807FFFFFu) | ((100u + qs_rng_u32(&g) % 46u) << 23);
        x[i] = bitsf(u);
        if (!isfinite(x[i])) x[i] = 1.5f;
    }
    ASSERT_OK(qs_f32_to_bf16(N, x, hb, NULL));
    ASSERT_OK(qs_f32_to_f16(N, x, hh, NULL));
    for (int i = 0; i < N; i++) {
        double rb = ref_rne(&F_BF16, x[i]), rh = ref_rne(&F_F16, x[i]);
        if (fabs(x[i]) >= 65520.0) rh = copysign(INFINITY, x[i]);
        if (fabs(rb) > F_BF16.max) rb = copysign(INFINITY, x[i]);
        double gb = bitsf((uint32_t)hb[i] << 16), gh = widen_f16(hh[i]);
        if (gb != rb) fail_msg("bf16(%a) = %a, expected %a", (double)x[i], gb, rb);
        if (gh != rh) fail_msg("f16(%a) = %a, expected %a", (double)x[i], gh, rh);
    }
    free(x);
    free(hb);
    free(hh);
}

/* ------------------------------------------------------------------------------- FP8 */

static void test_fp8_tables(void **state) {
    const qs_dtype dts[2] = {QS_F8E4M3, QS_F8E5M2};
    for (int d = 0; d < 2; d++) {
        qs_dtype dt = dts[d];
        uint8_t codes[256], back[256], back_sr[256];
        float dec[256];
        for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
        ASSERT_OK(qs_fp8_to_f32(dt, 256, codes, 1.0f, dec));
        int nnan = 0;
        for (int c = 0; c < 256; c++) {
            double r = ref_fp8((uint8_t)c, dt);
            if (isnan(r)) {
                assert_true(isnan(dec[c]));
                nnan++;
            } else if ((double)dec[c] != r || !signbit(dec[c]) != !signbit(r)) {
                fail_msg("%s code 0x%02x -> %a, expected %a", qs_dtype_name(dt), c, (double)dec[c], r);
            }
        }
        assert_int_equal(nnan, dt == QS_F8E4M3 ? 2 : 6);
        ASSERT_OK(qs_f32_to_fp8(dt, 256, dec, 1.0f, back, NULL));
        ASSERT_OK(qs_f32_to_fp8(dt, 256, dec, 1.0f, back_sr, &SR0));
        for (int c = 0; c < 256; c++) {
            double r = ref_fp8((uint8_t)c, dt);
            uint8_t want = (uint8_t)c;
            if (isnan(r)) want = (uint8_t)((c & 0x80) | (dt == QS_F8E4M3 ? 0x7F : 0x7E));
            if (isinf(r)) want = (uint8_t)((c & 0x80) | 0x7B); /* satfinite: Inf → ±max */
            if (back[c] != want) fail_msg("%s: encode(decode(0x%02x)) = 0x%02x", qs_dtype_name(dt), c, back[c]);
            if (back_sr[c] != want) fail_msg("%s SR: encode(decode(0x%02x)) = 0x%02x", qs_dtype_name(dt), c, back_sr[c]);
        }
        /* dequantization divides by the scale */
        ASSERT_OK(qs_fp8_to_f32(dt, 256, codes, 4.0f, dec));
        for (int c = 0; c < 256; c++)
            if (!isnan(dec[c])) assert_true((double)dec[c] == ref_fp8((uint8_t)c, dt) / 4.0);
    }
    /* spot values of the definitions */
    assert_true(ref_fp8(0x7E, QS_F8E4M3) == 448.0 && ref_fp8(0x08, QS_F8E4M3) == 0x1p-6 &&
                ref_fp8(0x01, QS_F8E4M3) == 0x1p-9 && ref_fp8(0x38, QS_F8E4M3) == 1.0);
    assert_true(ref_fp8(0x7B, QS_F8E5M2) == 57344.0 && isinf(ref_fp8(0x7C, QS_F8E5M2)) &&
                ref_fp8(0x01, QS_F8E5M2) == 0x1p-16 && ref_fp8(0x3C, QS_F8E5M2) == 1.0);
}

static void test_fp8_rne(void **state) {
    /* E4M3: ties to even (1.0625 between 1 and 1.125 → 1; 1.1875 → 1.25), carry into the next
     * binade, subnormal ties (2^-10 → 0, 3·2^-10 → 2·2^-9), saturation of finite values and
     * Inf, NaN, signed zero */
    const float e4_in[] = {1.0625f, 1.1875f, 1.9375f, 0x1p-10f, 0x1.8p-9f, 0x1.8p-10f, 464.0f, 500.0f,
                           1e30f, INFINITY, -INFINITY, NAN, -NAN, -0.0f, -3.0f, 0x1.ep-7f};
    const uint8_t e4_out[] = {0x38, 0x3A, 0x40, 0x00, 0x02, 0x01, 0x7E, 0x7E,
                              0x7E, 0x7E, 0xFE, 0x7F, 0xFF, 0x80, 0xC4, 0x08};
    for (size_t i = 0; i < sizeof e4_in / sizeof e4_in[0]; i++) {
        uint8_t c;
        ASSERT_OK(qs_f32_to_fp8(QS_F8E4M3, 1, &e4_in[i], 1.0f, &c, NULL));
        if (c != e4_out[i]) fail_msg("e4m3(%a) = 0x%02x, expected 0x%02x", (double)e4_in[i], c, e4_out[i]);
    }
    /* E5M2: 1.125 tie → 1 (0x3C), 1.375 → 1.5, subnormal 2^-17 → 0, 57344 kept, 61440 (the
     * IEEE overflow point) and Inf saturate, NaN → S.11111.10 */
    const float e5_in[] = {1.125f, 1.375f, 0x1p-17f, 0x1.8p-16f, 57344.0f, 61440.0f, INFINITY, -1e9f, NAN};
    const uint8_t e5_out[] = {0x3C, 0x3E, 0x00, 0x02, 0x7B, 0x7B, 0x7B, 0xFB, 0x7E};
    for (size_t i = 0; i < sizeof e5_in / sizeof e5_in[0]; i++) {
        uint8_t c;
        ASSERT_OK(qs_f32_to_fp8(QS_F8E5M2, 1, &e5_in[i], 1.0f, &c, NULL));
        if (c != e5_out[i]) fail_msg("e5m2(%a) = 0x%02x, expected 0x%02x", (double)e5_in[i], c, e5_out[i]);
    }
    /* scale: q = sat(x·scale) */
    float x = 3.0f;
    uint8_t c;
    ASSERT_OK(qs_f32_to_fp8(QS_F8E4M3, 1, &x, 0.25f, &c, NULL));
    assert_int_equal(c, 0x34); /* 0.75 = 1.5·2^-1 */
    /* random values over the whole exponent range against the reference */
    qs_rng g;
    qs_rng_init(&g, qs_rng_key(4, "test_quant", 0), 0);
    enum { N = 20000 };
    float *xs = xalloc(N * 4);
    uint8_t *q4 = xalloc(N), *q5 = xalloc(N);
    for (int i = 0; i < N; i++) {
        uint32_t u = (qs_rng_u32(&g) & 0x807FFFFFu) | ((100u + qs_rng_u32(&g) % 48u) << 23); /* 2^-27..2^20 */
        xs[i] = bitsf(u);
    }
    const float scale = 0.75f;
    ASSERT_OK(qs_f32_to_fp8(QS_F8E4M3, N, xs, scale, q4, NULL));
    ASSERT_OK(qs_f32_to_fp8(QS_F8E5M2, N, xs, scale, q5, NULL));
    for (int i = 0; i < N; i++) {
        double y = (double)(xs[i] * scale); /* the FP32 product is the value rounded */
        double r4 = ref_rne(&F_E4M3, fmin(fmax(y, -448.0), 448.0));
        double r5 = ref_rne(&F_E5M2, fmin(fmax(y, -57344.0), 57344.0));
        if (ref_fp8(q4[i], QS_F8E4M3) != r4) fail_msg("e4m3(%a) = %a, expected %a", y, ref_fp8(q4[i], QS_F8E4M3), r4);
        if (ref_fp8(q5[i], QS_F8E5M2) != r5) fail_msg("e5m2(%a) = %a, expected %a", y, ref_fp8(q5[i], QS_F8E5M2), r5);
    }
    float s;
    ASSERT_OK(qs_fp8_scale_from_amax(QS_F8E4M3, 2.0f, &s));
    assert_true(s == 224.0f);
    ASSERT_OK(qs_fp8_scale_from_amax(QS_F8E5M2, 0.0f, &s));
    assert_true(s == 1.0f);
    assert_int_equal(qs_fp8_scale_from_amax(QS_F8E4M3, NAN, &s), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_fp8_scale_from_amax(QS_BF16, 1.0f, &s), QS_ERR_INVALID_ARG);
    free(xs);
    free(q4);
    free(q5);
}

/* --------------------------------------------------------------- stochastic rounding */

/* One SR conversion of x (n copies) to format k, decoded back to double per element. */
enum { K_BF16, K_F16, K_E4M3, K_E5M2, K_INT8, K_COUNT };
static void sr_convert(int k, int64_t n, const float *x, double *out, const qs_sr *sr, float scale) {
    void *buf = xalloc((size_t)n * 2);
    uint16_t *h = buf;
    uint8_t *c = buf;
    int8_t *q = buf;
    switch (k) {
    case K_BF16:
        ASSERT_OK(qs_f32_to_bf16(n, x, h, sr));
        for (int64_t i = 0; i < n; i++) out[i] = bitsf((uint32_t)h[i] << 16);
        break;
    case K_F16:
        ASSERT_OK(qs_f32_to_f16(n, x, h, sr));
        for (int64_t i = 0; i < n; i++) out[i] = widen_f16(h[i]);
        break;
    case K_E4M3:
    case K_E5M2: {
        qs_dtype dt = k == K_E4M3 ? QS_F8E4M3 : QS_F8E5M2;
        ASSERT_OK(qs_f32_to_fp8(dt, n, x, scale, c, sr));
        for (int64_t i = 0; i < n; i++) out[i] = ref_fp8(c[i], dt);
        break;
    }
    default:
        ASSERT_OK(qs_int8_quantize(n, x, scale, q, sr));
        for (int64_t i = 0; i < n; i++) out[i] = q[i];
    }
    free(buf);
}

/* Every SR result is one of the two neighbours of the (scaled) value. */
static void test_sr_neighbours(void **state) {
    qs_rng g;
    qs_rng_init(&g, qs_rng_key(5, "test_quant", 0), 0);
    enum { N = 20000 };
    float *x = xalloc(N * 4);
    double *out = xalloc(N * 8);
    const fmt *fm[4] = {&F_BF16, &F_F16, &F_E4M3, &F_E5M2};
    for (int k = 0; k < K_COUNT; k++) {
        float scale = k == K_INT8 ? 0.03125f : 1.0f;
        for (int i = 0; i < N; i++) {
            uint32_t u = (qs_rng_u32(&g) & 0x807FFFFFu) | ((96u + qs_rng_u32(&g) % 44u) << 23); /* 2^-31..2^12 */
            x[i] = bitsf(u);
        }
        qs_sr sr = {qs_rng_key(5, "sr", (uint64_t)k), 3, 0, NULL};
        sr_convert(k, N, x, out, &sr, scale);
        int nup = 0;
        for (int i = 0; i < N; i++) {
            double lo, hi;
            if (k == K_INT8) {
                double v = fmin(fmax((double)(x[i] * (1.0f / scale)), -127.0), 127.0);
                lo = v < 0 ? ceil(v) : floor(v);
                hi = v < 0 ? floor(v) : ceil(v);
            } else {
                double v = (double)(x[i] * scale);
                const fmt *f = fm[k];
                ref_neigh(f, v, &lo, &hi);
                if (fabs(hi) > f->max) { /* beyond max: FP8 saturates, BF16/F16 go to Inf */
                    if (k == K_E4M3 || k == K_E5M2)
                        lo = hi = copysign(f->max, v);
                    else
                        hi = copysign(INFINITY, v);
                }
            }
            if (out[i] != lo && out[i] != hi)
                fail_msg("k=%d SR(%a) = %a, neighbours %a %a", k, (double)x[i], out[i], lo, hi);
            nup += out[i] != lo;
        }
        assert_true(nup > N / 50); /* it does round up sometimes */
    }
    free(x);
    free(out);
}

/* Mean of N SR draws of one value is within 5σ of it (plus the 2^-31-step bias bound). */
static void check_mean(int k, float x, float scale, const fmt *f) {
    enum { N = 1 << 16 };
    float *xs = xalloc(N * 4);
    double *out = xalloc(N * 8);
    for (int i = 0; i < N; i++) xs[i] = x;
    qs_sr sr = {qs_rng_key(6, "sr", (uint64_t)k), fbits(x), 0, NULL};
    sr_convert(k, N, xs, out, &sr, scale);
    double v, lo, hi;
    if (k == K_INT8) {
        v = (double)(x * (1.0f / scale));
        lo = floor(v);
        hi = ceil(v);
    } else {
        v = (double)(x * scale);
        ref_neigh(f, v, &lo, &hi);
    }
    double sum = 0;
    for (int i = 0; i < N; i++) sum += out[i];
    double mean = sum / N, step = fabs(hi - lo), fr = step > 0 ? fabs(v - lo) / step : 0;
    double sigma = step * sqrt(fr * (1 - fr) / N);
    double bound = 5 * sigma + step * 0x1p-30;
    if (fabs(mean - v) > bound)
        fail_msg("k=%d SR mean of %a = %a, |err| %.3g > bound %.3g", k, v, mean, fabs(mean - v), bound);
    free(xs);
    free(out);
}

static void test_sr_unbiased(void **state) {
    /* interior points, near-ties, one-ulp-from-neighbour, subnormals, negatives */
    const float bf[] = {1.0f + 0x1p-9f, 1.0f + 0x1.8p-8f, -3.14159265f, 0x1.000002p-130f, 1e-3f, 0x1.7ffffep5f};
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) check_mean(K_BF16, bf[i], 1, &F_BF16);
    const float h[] = {1.0f + 0x1p-12f, -0.1f, 0x1.3p-20f, 0x1p-26f, 60000.5f, 0x1.234p-15f};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) check_mean(K_F16, h[i], 1, &F_F16);
    const float e4[] = {1.1f, -0.3f, 0x1.4p-10f, 440.0f, 0.01f};
    for (size_t i = 0; i < sizeof e4 / sizeof e4[0]; i++) check_mean(K_E4M3, e4[i], 1, &F_E4M3);
    for (size_t i = 0; i < sizeof e4 / sizeof e4[0]; i++) check_mean(K_E5M2, e4[i], 3.0f, &F_E5M2);
    const float q[] = {0.3f, -0.7f, 1.2f, -1.97f, 0.001f, 1.25f}; /* ·64 */
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) check_mean(K_INT8, q[i], 1.0f / 64, NULL);

    /* overflow under SR: FP16 65504 < x < 65536 becomes Inf with probability (x − 65504)/32;
     * x >= 65536 always; FP8 saturates */
    enum { N = 1 << 14 };
    float *xs = xalloc(N * 4);
    double *out = xalloc(N * 8);
    for (int i = 0; i < N; i++) xs[i] = 65520.0f;
    sr_convert(K_F16, N, xs, out, &SR0, 1);
    int ninf = 0;
    for (int i = 0; i < N; i++) {
        assert_true(out[i] == 65504.0 || isinf(out[i]));
        ninf += isinf(out[i]);
    }
    assert_true(fabs(ninf - N / 2.0) < 5 * sqrt(N / 4.0));
    for (int i = 0; i < N; i++) xs[i] = i % 2 ? 65536.0f : -1e20f;
    sr_convert(K_F16, N, xs, out, &SR0, 1);
    for (int i = 0; i < N; i++) assert_true(isinf(out[i]) && (out[i] < 0) == (i % 2 == 0));
    for (int i = 0; i < N; i++) xs[i] = i % 2 ? 460.0f : -INFINITY;
    sr_convert(K_E4M3, N, xs, out, &SR0, 1);
    for (int i = 0; i < N; i++) assert_true(out[i] == (i % 2 ? 448.0 : -448.0));
    float big[2] = {FLT_MAX, -INFINITY};
    uint16_t hb[2];
    ASSERT_OK(qs_f32_to_bf16(2, big, hb, &SR0));
    assert_true((hb[0] == 0x7F7F || hb[0] == 0x7F80) && hb[1] == 0xFF80);
    free(xs);
    free(out);
}

static void test_sr_reproducible(void **state) {
    /* the random words: vector and scalar generators and the per-index reference agree for
     * odd offsets and lengths */
    uint32_t a[700], b[700];
    const uint64_t offs[] = {0, 1, 63, 64, 100, (1ull << 32) - 5, 0xFFFFFFFFFFFF0000ull};
    for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {
        qs_sr sr = {0xDEADBEEFCAFEull, 0x100000002ull, offs[o], NULL};
        const int64_t i0s[] = {0, 3, 64, 129};
        for (int t = 0; t < 4; t++) {
            int64_t len = 700 - i0s[t] - (int64_t)o;
            qs_sr_bits(&sr, i0s[t], len, a);
            qs_sr_bits_scalar(&sr, i0s[t], len, b);
            assert_memory_equal(a, b, (size_t)len * 4);
            for (int64_t i = 0; i < len; i++)
                assert_int_equal(a[i], qs_sr_word(sr.key, sr.counter, sr.offset + (uint64_t)(i0s[t] + i)));
            /* the counter read through counter_at replaces the one passed by value */
            const uint64_t at = sr.counter;
            qs_sr by_pointer = {sr.key, 7, sr.offset, &at};
            qs_sr_bits(&by_pointer, i0s[t], len, b);
            assert_memory_equal(a, b, (size_t)len * 4);
            qs_sr_bits_scalar(&by_pointer, i0s[t], len, b);
            assert_memory_equal(a, b, (size_t)len * 4);
            by_pointer.counter_at = NULL;
            qs_sr_bits(&by_pointer, i0s[t], len, b);
            assert_memory_not_equal(a, b, (size_t)len * 4);
        }
    }
    /* words are the Philox outputs of the documented mapping */
    uint32_t ph[4];
    qs_philox4x32(5, 9, (3ull << 4) | 7u, ph);
    assert_int_equal(qs_sr_word(5, 9, 3 * 64 + 2 * 16 + 7), ph[2]);

    /* whole conversions: threads 1 vs 2, vector vs scalar, split with offsets, same key →
     * same bits, another counter → different bits */
    enum { N = 300001 };
    float *x = xalloc(N * 4);
    qs_rng g;
    qs_rng_init(&g, qs_rng_key(7, "test_quant", 0), 0);
    for (int i = 0; i < N; i++) x[i] = qs_rng_normal(&g) * 3.0f;
    for (int k = 0; k < K_COUNT; k++) {
        size_t esz = (k == K_BF16 || k == K_F16) ? 2 : 1;
        uint8_t *r1 = xalloc(N * esz), *r2 = xalloc(N * esz), *r3 = xalloc(N * esz), *r4 = xalloc(N * esz);
        qs_sr sr = {qs_rng_key(7, "sr", (uint64_t)k), 11, 5, NULL};
#define CONV(out, srp, nn, xx)                                                                   \
    do {                                                                                         \
        if (k == K_BF16) ASSERT_OK(qs_f32_to_bf16((nn), (xx), (uint16_t *)(void *)(out), (srp))); \
        if (k == K_F16) ASSERT_OK(qs_f32_to_f16((nn), (xx), (uint16_t *)(void *)(out), (srp)));   \
        if (k == K_E4M3) ASSERT_OK(qs_f32_to_fp8(QS_F8E4M3, (nn), (xx), 20.0f, (out), (srp)));    \
        if (k == K_E5M2) ASSERT_OK(qs_f32_to_fp8(QS_F8E5M2, (nn), (xx), 20.0f, (out), (srp)));    \
        if (k == K_INT8) ASSERT_OK(qs_int8_quantize((nn), (xx), 0.1f, (int8_t *)(void *)(out), (srp))); \
    } while (0)
        int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        CONV(r1, &sr, N, x);
        omp_set_num_threads(2);
        CONV(r2, &sr, N, x);
        omp_set_num_threads(nt);
        assert_memory_equal(r1, r2, N * esz);
        qs_sr_set_vector(false);
        CONV(r3, &sr, N, x);
        qs_sr_set_vector(true);
        assert_memory_equal(r1, r3, N * esz);
        /* two pieces: [0, 1000) and [1000, N) with offset advanced */
        const int64_t cut = 1000 + 37;
        CONV(r4, &sr, cut, x);
        qs_sr sr2 = sr;
        sr2.offset += (uint64_t)cut;
        CONV(r4 + cut * esz, &sr2, N - cut, x + cut);
        assert_memory_equal(r1, r4, N * esz);
        CONV(r2, &sr, N, x); /* same stream again */
        assert_memory_equal(r1, r2, N * esz);
        sr2 = sr;
        sr2.counter++;
        CONV(r2, &sr2, N, x);
        assert_true(memcmp(r1, r2, N * esz) != 0);
#undef CONV
        free(r1);
        free(r2);
        free(r3);
        free(r4);
    }
    free(x);
}


/* Golden checksums: the bits of every conversion of a fixed input (built from integer random
 * words only) are pinned, so a build without AVX-512 (the scalar fallback), another compiler
 * or the GPU machine's -march=native must reproduce them exactly. */
static uint64_t fnv(const void *p, size_t bytes, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static void test_golden(void **state) {
    enum { N = 10007 };
    float *x = xalloc(N * 4);
    uint8_t *buf = xalloc(N * 2);
    qs_rng g;
    qs_rng_init(&g, 42, 0);
    for (int i = 0; i < N; i++) {
        uint32_t u = qs_rng_u32(&g);
        x[i] = bitsf((u & 0x807FFFFFu) | ((100u + (u >> 8) % 50u) << 23)); /* 2^-27 .. 2^22 */
    }
    x[0] = NAN;
    x[1] = -INFINITY;
    qs_sr sr = {0xFEEDFACE12345678ull, 99, 3, NULL};
    uint64_t h = 0xCBF29CE484222325ull;
    for (int mode = 0; mode < 2; mode++) {
        const qs_sr *s = mode ? &sr : NULL;
        ASSERT_OK(qs_f32_to_bf16(N, x, (uint16_t *)(void *)buf, s));
        h = fnv(buf, N * 2, h);
        ASSERT_OK(qs_f32_to_f16(N, x, (uint16_t *)(void *)buf, s));
        h = fnv(buf, N * 2, h);
        ASSERT_OK(qs_f32_to_fp8(QS_F8E4M3, N, x, 0.001f, buf, s));
        h = fnv(buf, N, h);
        ASSERT_OK(qs_f32_to_fp8(QS_F8E5M2, N, x, 0.25f, buf, s));
        h = fnv(buf, N, h);
        ASSERT_OK(qs_int8_quantize(N, x, 3.0f, (int8_t *)(void *)buf, s));
        h = fnv(buf, N, h);
    }
    const uint64_t want = 0x50eb9ad2121bce1aull;
    if (h != want) fail_msg("golden checksum 0x%016llx, expected 0x%016llx", (unsigned long long)h, (unsigned long long)want);
    free(x);
    free(buf);
}

/* ------------------------------------------------------------------------------ INT8 */

/* Round half to even in double. */
static double rne_d(double v) {
    double f = floor(v), d = v - f;
    if (d > 0.5) return f + 1;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0 ? f : f + 1;
}

static void test_int8(void **state) {
    float amax;
    ASSERT_OK(qs_amax_f32(0, NULL, &amax));
    assert_true(amax == 0.0f);
    const float v1[] = {1.0f, -7.5f, 3.0f, -0.0f};
    ASSERT_OK(qs_amax_f32(4, v1, &amax));
    assert_true(amax == 7.5f);
    const float v2[] = {1.0f, NAN, -INFINITY};
    ASSERT_OK(qs_amax_f32(3, v2, &amax));
    assert_true(isnan(amax));
    ASSERT_OK(qs_amax_f32(3, (const float[]){1.0f, -INFINITY, 2.0f}, &amax));
    assert_true(isinf(amax) && amax > 0);
    float s;
    ASSERT_OK(qs_int8_scale_from_amax(127.0f, &s));
    assert_true(s == 1.0f);
    ASSERT_OK(qs_int8_scale_from_amax(0.0f, &s));
    assert_true(s == QS_INT8_MIN_SCALE);
    assert_int_equal(qs_int8_scale_from_amax(NAN, &s), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "non-finite"));
    assert_int_equal(qs_int8_scale_from_amax(INFINITY, &s), QS_ERR_INVALID_ARG);
    int8_t qq[3];
    assert_int_equal(qs_int8_quantize_tensor(3, v2, qq, &s, NULL), QS_ERR_INVALID_ARG);

    /* hand-picked RNE ties, saturation, specials with scale 1 */
    const float hx[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, 127.4f, 200.0f, -1e9f, INFINITY, -INFINITY, NAN, 0.49999997f};
    const int8_t hq[] = {0, 2, 2, 0, -2, -2, 126, 127, 127, -127, 127, -127, 0, 0};
    int8_t hout[14];
    ASSERT_OK(qs_int8_quantize(14, hx, 1.0f, hout, NULL));
    for (int i = 0; i < 14; i++)
        if (hout[i] != hq[i]) fail_msg("int8(%a) = %d, expected %d", (double)hx[i], hout[i], hq[i]);
    ASSERT_OK(qs_int8_quantize(14, hx, 1.0f, hout, &SR0)); /* SR: specials and saturation the same */
    for (int i = 7; i < 13; i++) assert_int_equal(hout[i], hq[i]);

    /* random tensors: per-tensor RNE against the reference q = rne(clamp(fl(x·fl(1/s)))) */
    qs_rng g;
    qs_rng_init(&g, qs_rng_key(8, "test_quant", 0), 0);
    enum { R = 37, C = 301, N = R * C };
    float *x = xalloc(N * 4), *y = xalloc(N * 4), sc[R], am[R];
    int8_t *q = xalloc(N), *q2 = xalloc(N);
    for (int i = 0; i < N; i++) x[i] = qs_rng_normal(&g) * (1.0f + (float)(i / C)); /* row-dependent range */
    for (int c = 0; c < C; c++) x[5 * C + c] = 0.0f;                                 /* an all-zero row */
    ASSERT_OK(qs_int8_quantize_tensor(N, x, q, &s, NULL));
    ASSERT_OK(qs_amax_f32(N, x, &amax));
    assert_true(s == amax / 127.0f);
    float inv = 1.0f / s;
    int nmax = 0;
    for (int i = 0; i < N; i++) {
        double v = fmin(fmax((double)(x[i] * inv), -127.0), 127.0);
        if (q[i] != (int8_t)rne_d(v)) fail_msg("int8 rne(%a) = %d, expected %g", v, q[i], rne_d(v));
        nmax += abs(q[i]) == 127;
    }
    assert_true(nmax >= 1);
    ASSERT_OK(qs_int8_dequantize(N, q, s, y));
    for (int i = 0; i < N; i++) {
        assert_true(y[i] == (float)q[i] * s);
        assert_true(fabsf(y[i] - x[i]) <= 0.5f * s + 1e-4f * s); /* |error| <= s/2 + roundings */
    }

    /* per-row (per-output-channel) scales */
    ASSERT_OK(qs_amax_rows_f32(R, C, x, am));
    ASSERT_OK(qs_int8_quantize_rows_auto(R, C, x, q, sc, NULL));
    for (int r = 0; r < R; r++) {
        float a;
        ASSERT_OK(qs_amax_f32(C, x + r * C, &a));
        assert_true(am[r] == a);
        float want;
        ASSERT_OK(qs_int8_scale_from_amax(a, &want));
        assert_true(sc[r] == want);
        ASSERT_OK(qs_int8_quantize(C, x + r * C, sc[r], q2 + r * C, NULL)); /* same as per-tensor on the row */
    }
    assert_memory_equal(q, q2, N);
    for (int c = 0; c < C; c++) assert_int_equal(q[5 * C + c], 0);
    ASSERT_OK(qs_int8_dequantize_rows(R, C, q, sc, y));
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) assert_true(y[r * C + c] == (float)q[r * C + c] * sc[r]);

    /* per-row SR: element (r, c) uses index r·C + c, so it equals a per-row call with offset */
    qs_sr sr = {qs_rng_key(8, "sr", 0), 2, 0, NULL};
    ASSERT_OK(qs_int8_quantize_rows(R, C, x, sc, q, &sr));
    for (int r = 0; r < R; r++) {
        qs_sr srr = sr;
        srr.offset = (uint64_t)(r * C);
        ASSERT_OK(qs_int8_quantize(C, x + r * C, sc[r], q2 + r * C, &srr));
    }
    assert_memory_equal(q, q2, N);

    /* bad arguments are clear errors */
    assert_int_equal(qs_int8_quantize(-1, x, 1.0f, q, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_int8_quantize(4, NULL, 1.0f, q, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_int8_quantize(4, x, 0.0f, q, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_int8_quantize_rows(-2, 3, x, sc, q, NULL), QS_ERR_INVALID_ARG);
    sc[3] = NAN;
    assert_int_equal(qs_int8_quantize_rows(R, C, x, sc, q, NULL), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "scale[3]"));
    assert_int_equal(qs_f32_to_fp8(QS_S8, 4, x, 1.0f, (uint8_t *)q, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_f32_to_fp8(QS_F8E4M3, 4, x, INFINITY, (uint8_t *)q, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_f32_to_bf16(3, x, NULL, NULL), QS_ERR_INVALID_ARG);
    ASSERT_OK(qs_f32_to_bf16(0, NULL, NULL, &sr));
    free(x);
    free(y);
    free(q);
    free(q2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_16bit_exhaustive), cmocka_unit_test(test_16bit_rne),
        cmocka_unit_test(test_fp8_tables),       cmocka_unit_test(test_fp8_rne),
        cmocka_unit_test(test_sr_neighbours),    cmocka_unit_test(test_sr_unbiased),
        cmocka_unit_test(test_sr_reproducible),  cmocka_unit_test(test_int8),
        cmocka_unit_test(test_golden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
