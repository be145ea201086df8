/* src/cpu/cpu_quant.c — defines: quantize / dequantize of the CPU backend, and operand widening
 * for emulated precisions (qs_cpu_widen, a dequantize into FP32). */
#include "cpu/cpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant_int8.h"

/* Largest finite magnitude of an FP8 format. */
static float fp8_encode_scale(qs_dtype dt, float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    /* largest power of two s with amax·s <= max (so nothing saturates) */
    int e = (int)floorf(log2f(qs_fp8_max(dt) / amax));
    if (e > 126) e = 126;
    if (e < -126) e = -126;
    return ldexpf(1.0f, e);
}

static qs_status cpu_quantize_direct(qs_backend *be, int64_t rows, int64_t cols, const float *src,
                                     const float *col_scale, qs_dtype dt, void *dst, float *scales, bool per_row,
                                     const qs_sr *sr, const qs_quant_delayed *delayed);

/* Contract: core/backend_ops.def quantize; dst_t is written after dst, from its bytes. */
qs_status qs_cpu_quantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *src,
                          const float *col_scale, qs_dtype dt, void *dst, float *scales, bool per_row,
                          const qs_sr *sr, void *dst_t, const qs_quant_delayed *delayed) {
    if (rows < 0 || cols < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: negative shape (%lld, %lld)", (long long)rows, (long long)cols);
    const int64_t n = rows * cols;
    if (n == 0) return QS_OK;
    if (!src || !dst) return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: NULL src or dst");
    bool scaled = qs_cpu_dtype_scaled(dt);
    if (scaled && !scales) return QS_FAIL(QS_ERR_INVALID_ARG, "quantize to %s: NULL scales", qs_dtype_name(dt));
    if (per_row && dt != QS_S8)
        return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: per-row scales exist only for s8 (got %s)", qs_dtype_name(dt));
    QS_TRY(qs_quantize_dst_t_check(dt, per_row, dst_t));
    QS_TRY(qs_quantize_delayed_check(dt, delayed));
    QS_TRY(cpu_quantize_direct(be, rows, cols, src, col_scale, dt, dst, scales, per_row, sr, delayed));
    if (!dst_t) return QS_OK;
    const uint8_t *q = dst;
    uint8_t *qt = dst_t;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++) qt[c * rows + r] = q[r * cols + c];
    return QS_OK;
}

/* quantize without the transposed copy; arguments checked by the caller. */
static qs_status cpu_quantize_direct(qs_backend *be, int64_t rows, int64_t cols, const float *src,
                                     const float *col_scale, qs_dtype dt, void *dst, float *scales, bool per_row,
                                     const qs_sr *sr, const qs_quant_delayed *delayed) {
    const int64_t n = rows * cols;
    if (col_scale) { /* fold: quantize src·col_scale from a scratch copy */
        float *tmp;
        QS_TRY(qs_cpu_scratch(qs_cpu_be(be), (size_t)n * sizeof(float), (void **)&tmp));
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) tmp[r * cols + c] = src[r * cols + c] * col_scale[c];
        src = tmp;
    }
    switch (dt) {
    case QS_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return QS_OK;
    case QS_BF16: return qs_f32_to_bf16(n, src, dst, sr);
    case QS_F16: return qs_f32_to_f16(n, src, dst, sr);
    case QS_S8:
        if (per_row) return qs_int8_quantize_rows_auto(rows, cols, src, dst, scales, sr);
        return qs_int8_quantize_tensor(n, src, dst, scales, sr);
    case QS_F8E4M3:
    case QS_F8E5M2: {
        float amax;
        QS_TRY(qs_amax_f32(n, src, &amax));
        if (!isfinite(amax))
            return QS_FAIL(QS_ERR_INVALID_ARG, "quantize to %s: non-finite amax (the tensor holds NaN or Inf)",
                           qs_dtype_name(dt));
        float use = amax; /* delayed: the history's largest amax, when there is one */
        if (delayed) {
            float h = 0.0f;
            for (int k = 0; k < delayed->len; k++) h = fmaxf(h, delayed->amax[k]);
            if (h > 0.0f) use = h;
            if (delayed->record)
                delayed->amax[delayed->step_at ? (int)(*delayed->step_at % delayed->len) : delayed->slot] = amax;
        }
        float enc = fp8_encode_scale(dt, use);
        QS_TRY(qs_f32_to_fp8(dt, n, src, enc, dst, sr));
        scales[0] = 1.0f / enc; /* exact: enc is a power of two */
        return QS_OK;
    }
    default:
        return QS_FAIL(QS_ERR_UNSUPPORTED, "quantize: no conversion to %s", qs_dtype_name(dt));
    }
}

qs_status qs_cpu_dequantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const qs_operand *src,
                            float *dst) {
    if (rows < 0 || cols < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "dequantize: negative shape");
    const int64_t n = rows * cols;
    if (n == 0) return QS_OK;
    if (!src || !src->data || !dst) return QS_FAIL(QS_ERR_INVALID_ARG, "dequantize: NULL operand or dst");
    QS_TRY(qs_cpu_operand_check(src, src->dt, true, "dequantize"));
    switch (src->dt) {
    case QS_F32: memcpy(dst, src->data, (size_t)n * sizeof(float)); return QS_OK;
    case QS_BF16: return qs_bf16_to_f32(n, src->data, dst);
    case QS_F16: return qs_f16_to_f32(n, src->data, dst);
    case QS_S8:
        if (src->per_row) return qs_int8_dequantize_rows(rows, cols, src->data, src->scale, dst);
        return qs_int8_dequantize(n, src->data, src->scale[0], dst);
    case QS_F8E4M3:
    case QS_F8E5M2:
        /* decode(q) / (1/scale): exact, the scale being a power of two */
        return qs_fp8_to_f32(src->dt, n, src->data, 1.0f / src->scale[0], dst);
    default:
        return QS_FAIL(QS_ERR_UNSUPPORTED, "dequantize: no conversion from %s", qs_dtype_name(src->dt));
    }
}

qs_status qs_cpu_widen(qs_backend *be, int64_t rows, int64_t cols, const qs_operand *op, float **out, float *dst) {
    if (op->dt == QS_F32) {
        *out = (float *)op->data;
        return QS_OK;
    }
    *out = dst;
    return qs_cpu_dequantize(be, NULL, rows, cols, op, dst);
}
