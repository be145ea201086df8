/* src/core/numfmt.c — array conversions between FP32 and BF16 / FP16 / FP8 (contracts in
 * core/numfmt.h): the element conversions of numfmt.h applied over contiguous buffers, RNE
 * loops vectorised by the compiler, SR loops in tiles of QS_SR_TILE elements whose random
 * words come from qs_sr_bits (AVX-512 Philox), OpenMP-parallel over tiles. */
/* With AVX-512, let the compiler use 512-bit vectors in the loops below (GCC's default on this
 * CPU is 256-bit, slower here: docs/BENCHMARKS.md, "Quantizers"). Results do not depend on it. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include "core/numfmt.h"

#include <math.h>

#include "core/quant_sr.h"

/* Elements per SR tile (random words buffered on the stack: 4 KiB) and the smallest n that
 * is spread over threads (below it, thread start-up costs more than the work). */
#define QS_SR_TILE 1024
#define QS_PAR_MIN 65536

static qs_status args_check(const char *what, int64_t n, const void *a, const void *b) {
    if (n < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative element count %lld", what, (long long)n);
    if (n > 0 && (!a || !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL buffer for %lld elements; pass both buffers", what, (long long)n);
    return QS_OK;
}

static qs_status fp8_check(const char *what, qs_dtype fmt) {
    if (fmt != QS_F8E4M3 && fmt != QS_F8E5M2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: dtype %s is not an FP8 format (use f8e4m3 or f8e5m2)", what,
                       qs_dtype_name(fmt));
    return QS_OK;
}

static qs_status scale_check(const char *what, float scale) {
    if (!(scale > 0.0f) || !isfinite(scale))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: scale %g must be finite and > 0", what, (double)scale);
    return QS_OK;
}

/* Tiled SR loop: y[i] = EXPR(xv = x[i], rv = random word of i) for i < n, parallel over tiles. */
#define SR_LOOP(n, sr, x, y, EXPR)                                                        \
    do {                                                                                  \
        const int64_t n_ = (n);                                                           \
        int64_t ntiles_ = (n_ + QS_SR_TILE - 1) / QS_SR_TILE;                             \
        _Pragma("omp parallel for schedule(static) if (n_ >= QS_PAR_MIN)")                \
        for (int64_t t_ = 0; t_ < ntiles_; t_++) {                                        \
            uint32_t rb_[QS_SR_TILE];                                                     \
            int64_t b_ = t_ * QS_SR_TILE;                                                 \
            int64_t len_ = n_ - b_ < QS_SR_TILE ? n_ - b_ : QS_SR_TILE;                   \
            qs_sr_bits((sr), b_, len_, rb_);                                              \
            _Pragma("omp simd")                                                           \
            for (int64_t j_ = 0; j_ < len_; j_++) {                                       \
                float xv = (x)[b_ + j_];                                                  \
                uint32_t rv = rb_[j_];                                                    \
                (y)[b_ + j_] = (EXPR);                                                    \
            }                                                                             \
        }                                                                                 \
    } while (0)

qs_status qs_f32_to_bf16(int64_t n, const float *x, uint16_t *y, const qs_sr *sr) {
    QS_TRY(args_check("f32_to_bf16", n, x, y));
    if (sr) {
        SR_LOOP(n, sr, x, y, qs_nf_f32_to_bf16_sr(qs_nf_f32_bits(xv), rv));
    } else {
#pragma omp parallel for simd schedule(static) if (n >= QS_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = qs_nf_f32_to_bf16_rne(qs_nf_f32_bits(x[i]));
    }
    return QS_OK;
}

qs_status qs_f32_to_f16(int64_t n, const float *x, uint16_t *y, const qs_sr *sr) {
    QS_TRY(args_check("f32_to_f16", n, x, y));
    if (sr) {
        SR_LOOP(n, sr, x, y, (uint16_t)qs_nf_f32_to_f16_sr(qs_nf_f32_bits(xv), rv));
    } else {
#pragma omp parallel for simd schedule(static) if (n >= QS_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = (uint16_t)qs_nf_f32_to_f16_rne(qs_nf_f32_bits(x[i]));
    }
    return QS_OK;
}

qs_status qs_bf16_to_f32(int64_t n, const uint16_t *x, float *y) {
    QS_TRY(args_check("bf16_to_f32", n, x, y));
#pragma omp parallel for simd schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = qs_nf_bits_f32(qs_nf_bf16_to_f32(x[i]));
    return QS_OK;
}

qs_status qs_f16_to_f32(int64_t n, const uint16_t *x, float *y) {
    QS_TRY(args_check("f16_to_f32", n, x, y));
#pragma omp parallel for simd schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = qs_nf_bits_f32(qs_nf_f16_to_f32(x[i]));
    return QS_OK;
}

float qs_fp8_max(qs_dtype fmt) {
    return fmt == QS_F8E4M3 ? QS_E4M3_MAX : fmt == QS_F8E5M2 ? QS_E5M2_MAX : 0.0f;
}

/* The FP8 element conversion of one format with its constants, for the loops below. */
#define E4M3(xv, rv, sr_on) \
    qs_nf_f32_to_fp8(qs_nf_f32_bits(xv), (rv), (sr_on), QS_E4M3_M, QS_E4M3_EMIN, QS_E4M3_MAXBITS, QS_E4M3_NAN)
#define E5M2(xv, rv, sr_on) \
    qs_nf_f32_to_fp8(qs_nf_f32_bits(xv), (rv), (sr_on), QS_E5M2_M, QS_E5M2_EMIN, QS_E5M2_MAXBITS, QS_E5M2_NAN)

qs_status qs_f32_to_fp8(qs_dtype fmt, int64_t n, const float *x, float scale, uint8_t *q, const qs_sr *sr) {
    QS_TRY(fp8_check("f32_to_fp8", fmt));
    QS_TRY(args_check("f32_to_fp8", n, x, q));
    QS_TRY(scale_check("f32_to_fp8", scale));
    if (fmt == QS_F8E4M3) {
        if (sr) {
            SR_LOOP(n, sr, x, q, E4M3(xv * scale, rv, 1));
        } else {
#pragma omp parallel for simd schedule(static) if (n >= QS_PAR_MIN)
            for (int64_t i = 0; i < n; i++) q[i] = E4M3(x[i] * scale, 0u, 0);
        }
    } else {
        if (sr) {
            SR_LOOP(n, sr, x, q, E5M2(xv * scale, rv, 1));
        } else {
#pragma omp parallel for simd schedule(static) if (n >= QS_PAR_MIN)
            for (int64_t i = 0; i < n; i++) q[i] = E5M2(x[i] * scale, 0u, 0);
        }
    }
    return QS_OK;
}

qs_status qs_fp8_to_f32(qs_dtype fmt, int64_t n, const uint8_t *q, float scale, float *y) {
    QS_TRY(fp8_check("fp8_to_f32", fmt));
    QS_TRY(args_check("fp8_to_f32", n, q, y));
    QS_TRY(scale_check("fp8_to_f32", scale));
    float table[256];
    for (int c = 0; c < 256; c++) table[c] = qs_nf_fp8_to_f32((uint8_t)c, fmt) / scale;
#pragma omp parallel for schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = table[q[i]];
    return QS_OK;
}

qs_status qs_fp8_scale_from_amax(qs_dtype fmt, float amax, float *scale) {
    QS_TRY(fp8_check("fp8_scale_from_amax", fmt));
    if (!scale) return QS_FAIL(QS_ERR_INVALID_ARG, "fp8_scale_from_amax: scale is NULL");
    if (!isfinite(amax) || amax < 0.0f)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "fp8_scale_from_amax: amax %g is not a finite non-negative number (NaN/Inf in the tensor?)",
                       (double)amax);
    float s = amax == 0.0f ? 1.0f : qs_fp8_max(fmt) / amax;
    *scale = s > 0x1p126f ? 0x1p126f : s;
    return QS_OK;
}
