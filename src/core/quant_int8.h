/* src/core/quant_int8.h — defines: symmetric INT8 quantization of FP32 tensors with
 * per-tensor or per-output-channel (per-row) scales, absolute-maximum reductions that choose
 * the scales, and dequantization.
 *
 * Semantics (all functions):
 *  - scale s = max(amax / 127, 2^-126) (FP32 division; amax = max|x|, so amax == 0 — an
 *    all-zero tensor or row — gives the smallest normal float and quantizes to all zeros;
 *    the floor keeps 1/s finite). Dequantized value: q·s.
 *  - quantize: v = x · fl(1/s) (one FP32 multiplication by the rounded reciprocal), clamped to
 *    [−127, 127] (±Inf → ±127; NaN → 0), then rounded to an integer: RNE (ties to even,
 *    needs the default FPU rounding mode) or unbiased stochastic rounding of |v| with the
 *    sign restored (E[q] = v up to < 2^-31; see core/numfmt.h and core/quant_sr.h for the
 *    random words: element (r, c) of a (rows, cols) call has index r·cols + c). −128 is never
 *    produced, so q is symmetric and −q never overflows.
 *  - amax is deterministic (max is exact and order-independent) and propagates NaN, like
 *    PyTorch's amax: one NaN gives NaN. ±Inf gives +Inf. Scale functions reject NaN/Inf amax
 *    (QS_ERR_INVALID_ARG, "non-finite amax"): a non-finite tensor cannot be quantized
 *    meaningfully, and the caller (e.g. dynamic loss scaling) should see it rather than get
 *    silently clamped values.
 *  - Per-output-channel: a weight W of shape (N, K), row-major, gets N scales, one per row
 *    (output channel); Y = X·Wᵀ then needs s_x·s_w[n] per output column n.
 *  - Shapes are int64_t element counts; buffers contiguous, non-overlapping; NULL allowed only
 *    when the element count is 0. OpenMP-parallel; results identical for any thread count.
 *  - sr == NULL: RNE; otherwise stochastic rounding with that stream. */
#ifndef QSYNC_CORE_QUANT_INT8_H
#define QSYNC_CORE_QUANT_INT8_H

#include <stdint.h>

#include "core/numfmt.h"
#include "qsync/status.h"
#include "core/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QS_INT8_QMAX 127
#define QS_INT8_MIN_SCALE 0x1p-126f

/* Element conversions (inline, vectorisable): inv = fl(1/s). The clamp works on the bit
 * pattern of |x·inv| (selects, no float comparisons that GCC would turn into branches and
 * then refuse to vectorise): magnitudes above 127 (±Inf too) become 127, NaN becomes 0; the
 * sign is applied after rounding the magnitude. */
static inline QS_HD float qs_q8_clamped_mag(float v, int32_t *neg) {
    uint32_t u = qs_nf_f32_bits(v), a = u & 0x7FFFFFFFu;
    *neg = -(int32_t)(u >> 31);                         /* 0 or -1 */
    a = qs_nf_sel(a > 0x42FE0000u, 0x42FE0000u, a);     /* 127.0f */
    a = qs_nf_sel((u & 0x7FFFFFFFu) > 0x7F800000u, 0u, a); /* NaN → 0 */
    return qs_nf_bits_f32(a);
}
static inline QS_HD int8_t qs_q8_rne(float x, float inv) {
    int32_t neg;
    int32_t n = (int32_t)qs_nf_rint(qs_q8_clamped_mag(x * inv, &neg));
    return (int8_t)((n ^ neg) - neg);
}
static inline QS_HD int8_t qs_q8_sr(float x, float inv, uint32_t r) {
    int32_t neg;
    int32_t n = qs_nf_sr_int(qs_q8_clamped_mag(x * inv, &neg), r);
    return (int8_t)((n ^ neg) - neg);
}

/* *amax = max_i |x[i]| over n >= 0 elements (0 when n == 0; NaN if any NaN). */
qs_status qs_amax_f32(int64_t n, const float *x, float *amax);
/* amax[r] = max_c |x[r·cols + c]| for each of rows rows (x is (rows, cols) row-major). */
qs_status qs_amax_rows_f32(int64_t rows, int64_t cols, const float *x, float *amax);

/* *scale = max(amax/127, 2^-126); fails on NaN/Inf/negative amax. */
qs_status qs_int8_scale_from_amax(float amax, float *scale);

/* q[i] = quantize(x[i]) with the per-tensor scale (finite, > 0). */
qs_status qs_int8_quantize(int64_t n, const float *x, float scale, int8_t *q, const qs_sr *sr);
/* q[r·cols + c] = quantize(x[r·cols + c]) with scales[r] (each finite, > 0). */
qs_status qs_int8_quantize_rows(int64_t rows, int64_t cols, const float *x, const float *scales, int8_t *q,
                                const qs_sr *sr);
/* amax, scale and quantize in one call: *scale out. */
qs_status qs_int8_quantize_tensor(int64_t n, const float *x, int8_t *q, float *scale, const qs_sr *sr);
/* Per-row amax, scales and quantize in one call: scales[rows] out. */
qs_status qs_int8_quantize_rows_auto(int64_t rows, int64_t cols, const float *x, int8_t *q, float *scales,
                                     const qs_sr *sr);

/* y[i] = q[i]·scale. */
qs_status qs_int8_dequantize(int64_t n, const int8_t *q, float scale, float *y);
/* y[r·cols + c] = q[r·cols + c]·scales[r]. */
qs_status qs_int8_dequantize_rows(int64_t rows, int64_t cols, const int8_t *q, const float *scales, float *y);

#ifdef __cplusplus
}
#endif
#endif
