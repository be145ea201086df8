/* src/plan/rounding_mse.c — measured rounding errors of the precisions' quantizers
 * (rounding_mse.h). */
#include "plan/rounding_mse.h"

#include <math.h>
#include <stdlib.h>

#include "core/numfmt.h"
#include "core/quant_int8.h"

void qs_rounding_scratch_free(qs_rounding_scratch *s) {
    if (!s) return;
    free(s->y);
    free(s->q);
    *s = (qs_rounding_scratch){0};
}

/* Grow the scratch to n elements. */
static qs_status qs_rounding_reserve(qs_rounding_scratch *s, int64_t n) {
    if (n <= s->cap) return QS_OK;
    qs_rounding_scratch_free(s);
    s->y = malloc((size_t)n * sizeof(float));
    s->q = malloc((size_t)n * 2);
    s->cap = s->y && s->q ? n : 0;
    return s->cap ? QS_OK
                  : QS_FAIL(QS_ERR_OOM, "out of memory for the rounding-error scratch (%lld elements)", (long long)n);
}

/* x rounded to TF32 (10 stored mantissa bits), RNE; non-finite values unchanged. */
static float qs_rounding_tf32(float x) {
    uint32_t u = qs_nf_f32_bits(x);
    if ((u & 0x7F800000u) == 0x7F800000u) return x;
    return qs_nf_bits_f32((u + 0xFFFu + ((u >> 13) & 1u)) & 0xFFFFE000u);
}

/* y[0..n) = dequantize(quantize(x[0..n))) for precision p (not FP32), scales from amax. */
static qs_status qs_rounding_round_trip(qs_precision p, const qs_sr *sr, const float *x, int64_t n, double amax,
                                        float *y, void *q) {
    float scale = 1;
    switch (p) {
    case QS_PREC_TF32:
        for (int64_t i = 0; i < n; i++) y[i] = qs_rounding_tf32(x[i]);
        return QS_OK;
    case QS_PREC_BF16:
        QS_TRY(qs_f32_to_bf16(n, x, (uint16_t *)q, sr));
        return qs_bf16_to_f32(n, (uint16_t *)q, y);
    case QS_PREC_FP16: {
        double g = 1;
        if (sr && amax > 0) g = ldexp(1.0, 14 - (int)floor(log2(amax)));
        for (int64_t i = 0; i < n; i++) y[i] = (float)(x[i] * g);
        QS_TRY(qs_f32_to_f16(n, y, (uint16_t *)q, sr));
        QS_TRY(qs_f16_to_f32(n, (uint16_t *)q, y));
        for (int64_t i = 0; i < n; i++) y[i] = (float)(y[i] / g);
        return QS_OK;
    }
    case QS_PREC_FP8: {
        qs_dtype fmt = sr ? QS_F8E5M2 : QS_F8E4M3;
        QS_TRY(qs_fp8_scale_from_amax(fmt, (float)amax, &scale));
        QS_TRY(qs_f32_to_fp8(fmt, n, x, scale, (uint8_t *)q, sr));
        return qs_fp8_to_f32(fmt, n, (uint8_t *)q, scale, y);
    }
    case QS_PREC_INT8:
        QS_TRY(qs_int8_scale_from_amax((float)amax, &scale));
        QS_TRY(qs_int8_quantize(n, x, scale, (int8_t *)q, sr));
        return qs_int8_dequantize(n, (int8_t *)q, scale, y);
    default:
        return QS_FAIL(QS_ERR_INTERNAL, "rounding error: no quantizer for precision %d", (int)p);
    }
}

qs_status qs_rounding_mse(qs_precision p, const qs_sr *sr, const float *x, int64_t n, double amax,
                          qs_rounding_scratch *s, double *mse) {
    *mse = 0;
    if (p == QS_PREC_FP32 || n <= 0) return QS_OK;
    QS_TRY(qs_rounding_reserve(s, n));
    QS_TRY(qs_rounding_round_trip(p, sr, x, n, amax, s->y, s->q));
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)s->y[i] - (double)x[i];
        e += d * d;
    }
    *mse = e / (double)n;
    return QS_OK;
}
