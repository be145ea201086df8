/* src/core/quant_int8.c — symmetric INT8 quantization, amax reductions, dequantization
 * (contracts in core/quant_int8.h). SR loops work in tiles of QS_Q8_TILE elements whose
 * random words come from qs_sr_bits (AVX-512 Philox); all loops are OpenMP-parallel. */
/* With AVX-512, let the compiler use 512-bit vectors in the loops below (GCC's default on this
 * CPU is 256-bit, slower here: docs/BENCHMARKS.md, "Quantizers"). Results do not depend on it. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif
#include "core/quant_int8.h"

#include <math.h>

#include "core/quant_sr.h"

#define QS_Q8_TILE 1024
#define QS_PAR_MIN 65536

static qs_status args_check(const char *what, int64_t n, int nptr, const void *const *ptrs) {
    if (n < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative element count %lld", what, (long long)n);
    if (n == 0) return QS_OK;
    for (int i = 0; i < nptr; i++)
        if (!ptrs[i])
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s: pointer argument %d is NULL for %lld elements", what, i + 1,
                           (long long)n);
    return QS_OK;
}

static qs_status shape_check(const char *what, int64_t rows, int64_t cols, int64_t *n) {
    if (rows < 0 || cols < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative shape (%lld, %lld)", what, (long long)rows, (long long)cols);
    if (cols > 0 && rows > INT64_MAX / cols)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: shape (%lld, %lld) overflows int64", what, (long long)rows,
                       (long long)cols);
    *n = rows * cols;
    return QS_OK;
}

static qs_status scale_ok(const char *what, float s, int64_t idx) {
    if (!(s > 0.0f) || !isfinite(s))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: scale[%lld] = %g must be finite and > 0", what, (long long)idx,
                       (double)s);
    return QS_OK;
}

/* max |x| as bits: |x| bit patterns order like the values, and NaN patterns exceed +Inf. */
static uint32_t amax_bits(int64_t n, const float *x) {
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = qs_nf_f32_bits(x[i]) & 0x7FFFFFFFu;
        m = b > m ? b : m;
    }
    return m;
}
static float bits_to_amax(uint32_t m) { return m > 0x7F800000u ? NAN : qs_nf_bits_f32(m); }

qs_status qs_amax_f32(int64_t n, const float *x, float *amax) {
    QS_TRY(args_check("amax", n, 1, (const void *[]){x}));
    if (!amax) return QS_FAIL(QS_ERR_INVALID_ARG, "amax: result pointer is NULL");
    uint32_t m = 0;
#pragma omp parallel for simd schedule(static) reduction(max : m) if (n >= QS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = qs_nf_f32_bits(x[i]) & 0x7FFFFFFFu;
        m = b > m ? b : m;
    }
    *amax = bits_to_amax(m);
    return QS_OK;
}

qs_status qs_amax_rows_f32(int64_t rows, int64_t cols, const float *x, float *amax) {
    int64_t n = 0;
    QS_TRY(shape_check("amax_rows", rows, cols, &n));
    QS_TRY(args_check("amax_rows", n, 1, (const void *[]){x}));
    if (rows > 0 && !amax) return QS_FAIL(QS_ERR_INVALID_ARG, "amax_rows: result pointer is NULL");
#pragma omp parallel for schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) amax[r] = bits_to_amax(amax_bits(cols, x + r * cols));
    return QS_OK;
}

qs_status qs_int8_scale_from_amax(float amax, float *scale) {
    if (!scale) return QS_FAIL(QS_ERR_INVALID_ARG, "int8_scale_from_amax: scale is NULL");
    if (!isfinite(amax) || amax < 0.0f)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "int8_scale_from_amax: non-finite amax %g (NaN/Inf in the tensor); it cannot be quantized",
                       (double)amax);
    float s = amax / (float)QS_INT8_QMAX;
    *scale = s < QS_INT8_MIN_SCALE ? QS_INT8_MIN_SCALE : s;
    return QS_OK;
}

/* q[i0 .. i0+len) from x with one reciprocal scale; SR words at indices i0.. of sr. */
static void q8_range(const float *x, int8_t *q, int64_t i0, int64_t len, float inv, const qs_sr *sr) {
    if (!sr) {
#pragma omp simd
        for (int64_t i = i0; i < i0 + len; i++) q[i] = qs_q8_rne(x[i], inv);
        return;
    }
    uint32_t rb[QS_Q8_TILE];
    for (int64_t b = i0; b < i0 + len; b += QS_Q8_TILE) {
        int64_t m = i0 + len - b < QS_Q8_TILE ? i0 + len - b : QS_Q8_TILE;
        qs_sr_bits(sr, b, m, rb);
#pragma omp simd
        for (int64_t j = 0; j < m; j++) q[b + j] = qs_q8_sr(x[b + j], inv, rb[j]);
    }
}

qs_status qs_int8_quantize(int64_t n, const float *x, float scale, int8_t *q, const qs_sr *sr) {
    QS_TRY(args_check("int8_quantize", n, 2, (const void *[]){x, q}));
    QS_TRY(scale_ok("int8_quantize", scale, 0));
    float inv = 1.0f / scale;
    int64_t ntiles = (n + QS_Q8_TILE - 1) / QS_Q8_TILE;
#pragma omp parallel for schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t t = 0; t < ntiles; t++) {
        int64_t b = t * QS_Q8_TILE;
        q8_range(x, q, b, n - b < QS_Q8_TILE ? n - b : QS_Q8_TILE, inv, sr);
    }
    return QS_OK;
}

qs_status qs_int8_quantize_rows(int64_t rows, int64_t cols, const float *x, const float *scales, int8_t *q,
                                const qs_sr *sr) {
    int64_t n = 0;
    QS_TRY(shape_check("int8_quantize_rows", rows, cols, &n));
    QS_TRY(args_check("int8_quantize_rows", n, 3, (const void *[]){x, scales, q}));
    if (n == 0) return QS_OK;
    for (int64_t r = 0; r < rows; r++) QS_TRY(scale_ok("int8_quantize_rows", scales[r], r));
#pragma omp parallel for schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) q8_range(x, q, r * cols, cols, 1.0f / scales[r], sr);
    return QS_OK;
}

qs_status qs_int8_quantize_tensor(int64_t n, const float *x, int8_t *q, float *scale, const qs_sr *sr) {
    if (!scale) return QS_FAIL(QS_ERR_INVALID_ARG, "int8_quantize_tensor: scale is NULL");
    float amax;
    QS_TRY(qs_amax_f32(n, x, &amax));
    qs_status st = qs_int8_scale_from_amax(amax, scale);
    if (st != QS_OK) return qs_error_wrap(st, "int8_quantize_tensor: ");
    return qs_int8_quantize(n, x, *scale, q, sr);
}

qs_status qs_int8_quantize_rows_auto(int64_t rows, int64_t cols, const float *x, int8_t *q, float *scales,
                                     const qs_sr *sr) {
    QS_TRY(qs_amax_rows_f32(rows, cols, x, scales));
    for (int64_t r = 0; r < rows; r++) {
        float a = scales[r];
        qs_status st = qs_int8_scale_from_amax(a, &scales[r]);
        if (st != QS_OK) return qs_error_wrap(st, "int8_quantize_rows_auto: row %lld: ", (long long)r);
    }
    return qs_int8_quantize_rows(rows, cols, x, scales, q, sr);
}

qs_status qs_int8_dequantize(int64_t n, const int8_t *q, float scale, float *y) {
    QS_TRY(args_check("int8_dequantize", n, 2, (const void *[]){q, y}));
#pragma omp parallel for simd schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = (float)q[i] * scale;
    return QS_OK;
}

qs_status qs_int8_dequantize_rows(int64_t rows, int64_t cols, const int8_t *q, const float *scales, float *y) {
    int64_t n = 0;
    QS_TRY(shape_check("int8_dequantize_rows", rows, cols, &n));
    QS_TRY(args_check("int8_dequantize_rows", n, 3, (const void *[]){q, scales, y}));
#pragma omp parallel for schedule(static) if (n >= QS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        float s = scales[r];
#pragma omp simd
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = (float)q[r * cols + c] * s;
    }
    return QS_OK;
}
