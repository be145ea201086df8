/* src/cpu/cpu_eltwise.c — elementwise FP32 ops: relu, silu, add, accumulate/copy, scale.
 * Flat OpenMP loops over n elements (vectorised by the compiler). */
#include "cpu/cpu_backend.h"
#include "core/numfmt.h"

/* y = max(x, 0); NaN stays NaN (like torch.relu); y may alias x. */
qs_status qs_cpu_relu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(qs_cpu_args_check("relu_forward", n, 2, (const void *[]){x, y}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
    return QS_OK;
}

/* dx = dy·[y > 0] (or dx += ...); a BF16 dy (dy_dt) is widened exactly into the scratch first. */
qs_status qs_cpu_relu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const void *dy_any,
                               qs_dtype dy_dt, float *dx, bool accumulate) {
    QS_TRY(qs_cpu_args_check("relu_backward", n, 3, (const void *[]){y, dy_any, dx}));
    QS_TRY(qs_dy_dtype_check("relu_backward", dy_dt));
    const float *dy = dy_any;
    if (dy_dt == QS_BF16 && n > 0) {
        float *wide;
        QS_TRY(qs_cpu_scratch(qs_cpu_be(be), (size_t)n * sizeof(float), (void **)&wide));
        qs_bf16_to_f32(n, dy_any, wide); /* cannot fail: n > 0, both pointers set */
        dy = wide;
    }
    if (accumulate) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] += y[i] > 0.0f ? dy[i] : 0.0f;
    } else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
    return QS_OK;
}

/* y = x·σ(x), −0 where σ = 0 (e overflowed: x < −88.7, −∞ whose x·σ would be ∞·0); y may alias x. */
qs_status qs_cpu_silu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(qs_cpu_args_check("silu_forward", n, 2, (const void *[]){x, y}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float om;
        const float v = x[i], sg = qs_cpu_logistic(v, &om);
        y[i] = sg == 0.0f ? -0.0f : v * sg;
    }
    return QS_OK;
}

/* dx (+)= dy·σ·(1 + t), t = x·(1 − σ): t is 0 where 1 − σ is (x > 103.9, +∞ whose product
 * would be ∞·0), and the factor −0 where σ is (x < −88.7, −∞ likewise). */
qs_status qs_cpu_silu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *x, const float *dy, float *dx,
                               bool accumulate) {
    QS_TRY(qs_cpu_args_check("silu_backward", n, 3, (const void *[]){x, dy, dx}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float om;
        const float v = x[i], sg = qs_cpu_logistic(v, &om), t = om == 0.0f ? 0.0f : v * om;
        const float g = dy[i] * (sg == 0.0f ? -0.0f : sg * (1.0f + t));
        dx[i] = accumulate ? dx[i] + g : g;
    }
    return QS_OK;
}

/* y = a + b, or max(a + b, 0) with relu (y may alias an F32 a or b); a BF16 a or b (a_dt,
 * b_dt) is widened exactly into the scratch first. */
qs_status qs_cpu_add_forward(qs_backend *be, qs_stream *s, int64_t n, const void *a_any, qs_dtype a_dt,
                             const void *b_any, qs_dtype b_dt, float *y, bool relu) {
    QS_TRY(qs_cpu_args_check("add_forward", n, 3, (const void *[]){a_any, b_any, y}));
    QS_TRY(qs_f32_or_bf16_check("add_forward", "first input dtype (a_dt)", a_dt));
    QS_TRY(qs_f32_or_bf16_check("add_forward", "second input dtype (b_dt)", b_dt));
    const float *a = a_any, *b = b_any;
    const int wide = (a_dt == QS_BF16) + (b_dt == QS_BF16);
    if (wide && n > 0) {
        float *scratch;
        QS_TRY(qs_cpu_scratch(qs_cpu_be(be), (size_t)wide * (size_t)n * sizeof(float), (void **)&scratch));
        if (a_dt == QS_BF16) qs_bf16_to_f32(n, a_any, scratch), a = scratch;
        if (b_dt == QS_BF16) qs_bf16_to_f32(n, b_any, scratch + (wide - 1) * n), b = scratch + (wide - 1) * n;
    }
    if (relu) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float v = a[i] + b[i];
            y[i] = v > 0.0f ? v : 0.0f;
        }
        return QS_OK;
    }
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    return QS_OK;
}

/* dst = src or dst += src. */
qs_status qs_cpu_accumulate(qs_backend *be, qs_stream *s, int64_t n, const float *src, float *dst,
                            bool accumulate) {
    QS_TRY(qs_cpu_args_check("accumulate", n, 2, (const void *[]){src, dst}));
    qs_cpu_copy_or_add(n, src, dst, accumulate);
    return QS_OK;
}

/* x *= alpha. */
qs_status qs_cpu_scale(qs_backend *be, qs_stream *s, int64_t n, float *x, float alpha) {
    QS_TRY(qs_cpu_args_check("scale", n, 1, (const void *[]){x}));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] *= alpha;
    return QS_OK;
}
