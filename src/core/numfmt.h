/* src/core/numfmt.h — defines: the low-precision floating-point number formats (BF16, FP16,
 * FP8 E4M3/E5M2) as element-wise bit-level conversions from/to FP32 (static inline, branch-free
 * so loops over them vectorise), the stochastic-rounding stream descriptor qs_sr, and the
 * host-side array conversions over contiguous buffers (OpenMP-parallel) built on them.
 * INT8 quantization is in core/quant_int8.h; the random bits of stochastic rounding (SR) are
 * produced by core/quant_sr.h.
 *
 * Conventions (all conversions):
 *  - Done on bit patterns: independent of the FPU rounding mode except where noted
 *    (qs_nf_rint, used by FP8 and INT8 RNE, is nearbyintf on the host and assumes the default
 *    round-to-nearest-even mode), and of hardware conversion instructions, so the AVX-512
 *    build, a non-AVX-512 build and the CUDA kernels (the same functions, QS_HD) all produce
 *    the same bits. Device code must be compiled without flush-to-zero (no -ftz=true or
 *    --use_fast_math): subnormal FP32 values reach these functions.
 *  - RNE = IEEE round to nearest, ties to even. Widening (BF16/FP16 → FP32) is exact.
 *  - SR = unbiased stochastic rounding: a value strictly between two neighbours lo < x < hi
 *    of the target lattice becomes hi with probability (x − lo)/(hi − lo), else lo, so
 *    E[SR(x)] = x. The random word for element i of a call is a pure function of
 *    (sr.key, sr.counter, sr.offset + i) (see quant_sr.h), so results do not depend on the
 *    thread count, the vector width or how a tensor is split into calls (pass offset).
 *    BF16 and FP16-normal SR use the exact 16 / 13 truncated bits (exactly unbiased);
 *    FP16-subnormal, FP8 and INT8 SR compare a 31-bit random integer with the fraction
 *    scaled by 2^31 (truncated), a bias below 2^-31 of one lattice step.
 *  - NaN: BF16/FP16 keep sign and leading payload bits and are made quiet; FP8 gives the
 *    format's NaN with the sign kept (E4M3 S.1111.111, E5M2 S.11111.10).
 *  - Overflow, BF16/FP16: RNE rounds to ±Inf at or beyond the IEEE halfway point above the
 *    largest finite value (FP16: |x| ≥ 65520). SR treats Inf as the next lattice point after
 *    the largest finite value max (i.e. max + ulp(max)): max < |x| < max + ulp becomes ±Inf
 *    with probability (|x| − max)/ulp, and |x| ≥ max + ulp always becomes ±Inf. ±Inf stays ±Inf.
 *  - FP8 is saturating ("satfinite", as NVIDIA's __NV_SATFINITE / Transformer Engine):
 *    y = x·scale, then |y| > max (±Inf included) becomes ±max under both RNE and SR; only
 *    NaN gives NaN. E4M3 (OCP "FN": bias 7, no Inf, max 448, min normal 2^-6, min subnormal
 *    2^-9); E5M2 (IEEE-like: bias 15, has Inf, max 57344, min normal 2^-14, min subnormal
 *    2^-16). Decoding an E5M2 Inf code gives ±Inf (it is never produced by encoding).
 *  - Signed zeros are kept (−0 → −0).
 *  - The scaled value x·scale is one FP32 multiplication (rounded), then rounded once to FP8.
 *    Decoding gives decode(q)/scale (one division, exact when scale is a power of two). */
#ifndef QSYNC_CORE_NUMFMT_H
#define QSYNC_CORE_NUMFMT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "qsync/dtype.h"
#include "qsync/status.h"
#include "core/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stochastic-rounding stream. Element i of a call uses the random word of global index
 * offset + i under (key, counter). Suggested use: key = qs_rng_key(seed, "sr", layer·K + role)
 * (role: which tensor — dY, dW, ...), counter = training step, offset = 0 for a whole tensor
 * (or the element index of the first element when a tensor is converted in pieces);
 * offset + n must not exceed 2^64. Distinct tensors quantized in one step need distinct keys
 * (or disjoint offset ranges), else their rounding decisions are correlated. */
typedef struct qs_sr {
    uint64_t key;
    uint64_t counter;
    uint64_t offset;
    /* NULL, or backend memory (host memory on the CPU) holding the counter: read when the
     * op runs, instead of `counter` (a captured graph then rounds each replay with the
     * step it runs at). */
    const uint64_t *counter_at;
} qs_sr;

/* ------------------------------------------------------------------ element conversions */

/* Bit casts (the device pass of nvcc uses its intrinsics; same bits). */
static inline QS_HD uint32_t qs_nf_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}
static inline QS_HD float qs_nf_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
/* Round to the nearest integer, ties to even (the result stays a float). The host uses
 * nearbyint, which assumes the default rounding mode; device code has no rounding-mode state
 * and rintf is round-to-nearest-even there. */
static inline QS_HD float qs_nf_rint(float w) {
#ifdef __CUDA_ARCH__
    return rintf(w);
#else
    return __builtin_nearbyintf(w);
#endif
}
/* sel(c, a, b) = c ? a : b for c in {0, 1}, without a branch. */
static inline QS_HD uint32_t qs_nf_sel(uint32_t c, uint32_t a, uint32_t b) { return b ^ ((a ^ b) & (0u - c)); }

/* f32 bits → bf16 bits, RNE. */
static inline QS_HD uint16_t qs_nf_f32_to_bf16_rne(uint32_t u) {
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t qnan = (u >> 16) | 0x0040u;
    return (uint16_t)qs_nf_sel((u & 0x7FFFFFFFu) > 0x7F800000u, qnan, rounded);
}

/* f32 bits → bf16 bits, SR with random word r (its top 16 bits are used). */
static inline QS_HD uint16_t qs_nf_f32_to_bf16_sr(uint32_t u, uint32_t r) {
    uint32_t rounded = (u + (r >> 16)) >> 16; /* adds to the magnitude: carries into the exponent */
    uint32_t qnan = (u >> 16) | 0x0040u;
    return (uint16_t)qs_nf_sel((u & 0x7FFFFFFFu) > 0x7F800000u, qnan, rounded);
}

static inline QS_HD uint32_t qs_nf_bf16_to_f32(uint16_t h) { return (uint32_t)h << 16; }

/* f32 bits → f16 bits (in the low half), RNE. */
static inline QS_HD uint32_t qs_nf_f32_to_f16_rne(uint32_t u) {
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    uint32_t qnan = 0x7E00u | ((a >> 13) & 0x3FFu);
    uint32_t v = a - 0x38000000u;                              /* rebias exponent 127 → 15 */
    uint32_t normal = (v + 0x0FFFu + ((v >> 13) & 1u)) >> 13;  /* used for a >= 2^-14 */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;                  /* subnormal: value / 2^-24 */
    uint32_t e = a >> 23;
    uint32_t shift = qs_nf_sel(e >= 125u, 1u, qs_nf_sel(e < 95u, 31u, 126u - e)); /* 14..24 where used */
    uint32_t half = 1u << (shift - 1u);
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u);
    uint32_t sub = r + qs_nf_sel(rem > half, 1u, qs_nf_sel(rem == half, r & 1u, 0u));
    uint32_t mag = qs_nf_sel(a <= 0x33000000u, 0u, sub);   /* <= 2^-25 rounds to ±0 */
    mag = qs_nf_sel(a >= 0x38800000u, normal, mag);         /* normal f16 (>= 2^-14) */
    mag = qs_nf_sel(a >= 0x477FF000u, 0x7C00u, mag);        /* >= 65520 rounds to inf */
    mag = qs_nf_sel(a > 0x7F800000u, qnan, mag);
    return sign | mag;
}

/* Stochastic step of a non-negative float w < 2^24 to an integer: floor(w) + 1 with probability
 * ≈ frac(w) (31-bit comparison, bias < 2^-31). Exact float arithmetic only; the truncating
 * conversion is floor for w >= 0 (and vectorises, unlike floorf without -fno-trapping-math). */
static inline QS_HD int32_t qs_nf_sr_int(float w, uint32_t r) {
    int32_t fl = (int32_t)w;
    float frac = w - (float)fl; /* exact */
    int32_t thr = (int32_t)(frac * 0x1p31f);
    return fl + ((int32_t)(r >> 1) < thr);
}

/* f32 bits → f16 bits (in the low half), SR with random word r. */
static inline QS_HD uint32_t qs_nf_f32_to_f16_sr(uint32_t u, uint32_t r) {
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    uint32_t qnan = 0x7E00u | ((a >> 13) & 0x3FFu);
    uint32_t v = a - 0x38000000u;
    uint32_t normal = (v + (r >> 19)) >> 13;                   /* 13 truncated bits, exact SR */
    /* subnormal range (a < 2^-14): value / 2^-24 in [0, 1024), rounded stochastically;
     * 1024 is the smallest normal's code, so carrying out of the subnormals is correct. */
    float w = qs_nf_bits_f32(qs_nf_sel(a < 0x38800000u, a, 0u)) * 0x1p24f;
    uint32_t sub = (uint32_t)qs_nf_sr_int(w, r);
    uint32_t mag = qs_nf_sel(a >= 0x38800000u, normal, sub);
    mag = qs_nf_sel(a >= 0x47800000u, 0x7C00u, mag);        /* >= 65536 (= max + ulp): inf */
    mag = qs_nf_sel(a > 0x7F800000u, qnan, mag);
    return sign | mag;
}

/* f16 bits → f32 bits (exact). */
static inline QS_HD uint32_t qs_nf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t special = 0x7F800000u | (m << 13);
    uint32_t normal = ((e + 112u) << 23) | (m << 13);
    uint32_t sub = qs_nf_f32_bits((float)m * 0x1p-24f); /* zero or subnormal, exact */
    return sign | qs_nf_sel(e == 0x1Fu, special, qs_nf_sel(e != 0, normal, sub));
}

/* FP8 format parameters: M mantissa bits, emin = exponent of the smallest normal, maxbits =
 * f32 bits of the largest finite value, nanmag = the NaN code without sign. */
#define QS_E4M3_M 3
#define QS_E4M3_EMIN (-6)
#define QS_E4M3_MAXBITS 0x43E00000u /* 448 */
#define QS_E4M3_NAN 0x7Fu
#define QS_E5M2_M 2
#define QS_E5M2_EMIN (-14)
#define QS_E5M2_MAXBITS 0x47600000u /* 57344 */
#define QS_E5M2_NAN 0x7Eu
#define QS_E4M3_MAX 448.0f
#define QS_E5M2_MAX 57344.0f

/* f32 bits (of the already scaled value) → FP8 code, saturating; RNE when sr == 0, else SR
 * with random word r. The magnitude is clamped to max, scaled exactly to units of its
 * lattice step 2^k (k = max(e, emin) − M), rounded to an integer n (≤ 2^(M+1)), and the code
 * is ((max(e, emin) − emin) << M) + n — which also covers the subnormals and the carry into
 * the next binade. Inline with constant format arguments it vectorises. */
static inline QS_HD uint8_t qs_nf_f32_to_fp8(uint32_t u, uint32_t r, int sr, int M, int emin, uint32_t maxbits,
                                       uint32_t nanmag) {
    uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
    uint32_t nan_in = a > 0x7F800000u; /* not "isnan": C++ math headers declare that name */
    a = qs_nf_sel(a > maxbits, maxbits, a); /* saturate (NaN selected below) */
    int32_t e = (int32_t)(a >> 23) - 127;
    int32_t ex = e < emin ? emin : e;
    int32_t k = ex - M;
    float w = qs_nf_bits_f32(a) * qs_nf_bits_f32((uint32_t)(127 - k) << 23); /* a / 2^k, exact */
    int32_t n = sr ? qs_nf_sr_int(w, r) : (int32_t)qs_nf_rint(w);
    uint32_t code = ((uint32_t)(ex - emin) << M) + (uint32_t)n;
    return (uint8_t)(sign | qs_nf_sel(nan_in, nanmag, code));
}

/* FP8 code → f32 value (exact); fmt is QS_F8E4M3 or QS_F8E5M2 (anything else: E5M2). */
static inline QS_HD float qs_nf_fp8_to_f32(uint8_t c, qs_dtype fmt) {
    int M = fmt == QS_F8E4M3 ? 3 : 2, bias = fmt == QS_F8E4M3 ? 7 : 15;
    uint32_t E = (uint32_t)(c & 0x7Fu) >> M, m = c & ((1u << M) - 1u), emax = (1u << (7 - M)) - 1u;
    uint32_t mag;
    if (fmt == QS_F8E4M3 && E == emax && m == (1u << M) - 1u)
        mag = 0x7FC00000u;                                    /* NaN */
    else if (fmt != QS_F8E4M3 && E == emax)
        mag = m ? 0x7FC00000u : 0x7F800000u;                  /* NaN / Inf */
    else if (E == 0)
        mag = qs_nf_f32_bits((float)m * qs_nf_bits_f32((uint32_t)(127 + 1 - bias - M) << 23));
    else
        mag = ((E - (uint32_t)bias + 127u) << 23) | (m << (23 - M));
    return qs_nf_bits_f32(((uint32_t)(c & 0x80u) << 24) | mag);
}

/* --------------------------------------------------------------------- array conversions
 * All take n ≥ 0 elements of contiguous, non-overlapping buffers (NULL allowed when n == 0)
 * and an optional sr: NULL means RNE, non-NULL stochastic rounding with that stream. They
 * fail (QS_ERR_INVALID_ARG) only on n < 0, NULL buffers with n > 0, a non-FP8 dtype where FP8
 * is required, or a scale that is not finite and > 0. Parallel over OpenMP threads for large n;
 * results are identical for any thread count. */

/* y[i] = bf16(x[i]) (bit patterns in y). */
qs_status qs_f32_to_bf16(int64_t n, const float *x, uint16_t *y, const qs_sr *sr);
/* y[i] = f16(x[i]) (bit patterns in y); FP16 subnormals produced. */
qs_status qs_f32_to_f16(int64_t n, const float *x, uint16_t *y, const qs_sr *sr);
/* y[i] = x[i] widened exactly. */
qs_status qs_bf16_to_f32(int64_t n, const uint16_t *x, float *y);
qs_status qs_f16_to_f32(int64_t n, const uint16_t *x, float *y);

/* q[i] = fp8_fmt(sat(x[i]·scale)), fmt QS_F8E4M3 or QS_F8E5M2, scale finite > 0. */
qs_status qs_f32_to_fp8(qs_dtype fmt, int64_t n, const float *x, float scale, uint8_t *q, const qs_sr *sr);
/* y[i] = decode(q[i]) / scale (exact decode; one rounding by the division). */
qs_status qs_fp8_to_f32(qs_dtype fmt, int64_t n, const uint8_t *q, float scale, float *y);
/* Per-tensor FP8 scale from amax = max|x|: scale = max_fmt / amax so that amax maps to the
 * largest finite value; amax == 0 gives 1; a quotient beyond 2^126 is clamped to 2^126.
 * Fails (QS_ERR_INVALID_ARG) on a NaN, infinite or negative amax (see qs_amax_f32). */
qs_status qs_fp8_scale_from_amax(qs_dtype fmt, float amax, float *scale);
/* Largest finite value of an FP8 format (448 or 57344); 0 for other dtypes. */
float qs_fp8_max(qs_dtype fmt);

#ifdef __cplusplus
}
#endif
#endif
