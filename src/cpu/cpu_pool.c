/* src/cpu/cpu_pool.c — max / average pooling over NHWC (own OpenMP kernels, FP32).
 *
 * X (N,H,W,C) → Y (N,P,Q,C). Loops run over output pixels with C innermost (vectorised).
 * Max pooling follows PyTorch: the first maximum in window scan order wins and NaN
 * propagates; idx stores h*W+w of the winner. Average pooling divides by R·S
 * (count_include_pad=True; floor-mode windows never leave the padded input). Backward passes
 * scatter-add into dX one image per task, so they are race-free and deterministic. */
#include "cpu/cpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct qs_cpu_pool_plan {
    qs_cpu_plan hdr;
    qs_pool_desc d;
} qs_cpu_pool_plan_t;

void qs_cpu_pool_plan_destroy(void *plan) { free(plan); }

qs_status qs_cpu_pool_plan(qs_backend *be, const qs_pool_desc *d, void **plan, size_t *workspace) {
    QS_TRY(qs_pool_plan_args(d, plan, workspace));
    qs_pool_desc dd = *d; /* finished: the same P,Q */
    qs_cpu_pool_plan_t *pp = calloc(1, sizeof *pp);
    if (!pp) return QS_FAIL(QS_ERR_OOM, "pool_plan: out of memory for the plan");
    pp->hdr.kind = QS_CPU_PLAN_POOL;
    pp->hdr.prec = QS_PREC_FP32;
    pp->d = dd;
    *plan = pp;
    return QS_OK;
}

/* Clipped window [h0,h1) × [w0,w1) of output pixel (p,q) inside the unpadded input. */
typedef struct qs_window {
    int64_t h0, h1, w0, w1;
} qs_window;

static qs_window pool_window(const qs_pool_desc *d, int64_t p, int64_t q) {
    qs_window w;
    int64_t hs = p * d->stride_h - d->pad_h, ws = q * d->stride_w - d->pad_w;
    w.h0 = hs < 0 ? 0 : hs;
    w.h1 = hs + d->R < d->H ? hs + d->R : d->H;
    w.w0 = ws < 0 ? 0 : ws;
    w.w1 = ws + d->S < d->W ? ws + d->S : d->W;
    return w;
}

/* Max over one window for all C channels: y[c], idx[c]. */
static void max_window(const qs_pool_desc *d, const float *xn, qs_window win, float *y, int32_t *idx) {
    const int64_t C = d->C;
    for (int64_t c = 0; c < C; c++) {
        y[c] = -INFINITY;
        idx[c] = (int32_t)(win.h0 * d->W + win.w0);
    }
    for (int64_t h = win.h0; h < win.h1; h++)
        for (int64_t w = win.w0; w < win.w1; w++) {
            const float *xs = xn + (h * d->W + w) * C;
            const int32_t pos = (int32_t)(h * d->W + w);
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                float v = xs[c];
                bool take = (v > y[c]) | (v != v); /* NaN wins, like PyTorch */
                y[c] = take ? v : y[c];
                idx[c] = take ? pos : idx[c];
            }
        }
}

/* Sum over one window for all C channels, times inv = 1/(R·S). */
static void avg_window(const qs_pool_desc *d, const float *xn, qs_window win, float inv, float *y) {
    const int64_t C = d->C;
    for (int64_t c = 0; c < C; c++) y[c] = 0.0f;
    for (int64_t h = win.h0; h < win.h1; h++)
        for (int64_t w = win.w0; w < win.w1; w++) {
            const float *xs = xn + (h * d->W + w) * C;
#pragma omp simd
            for (int64_t c = 0; c < C; c++) y[c] += xs[c];
        }
    for (int64_t c = 0; c < C; c++) y[c] *= inv;
}

qs_status qs_cpu_pool_forward(qs_backend *be, void *plan, qs_stream *s, const void *x, void *y, int32_t *idx,
                              void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_POOL, "pool_forward"));
    const qs_pool_desc *d = &((qs_cpu_pool_plan_t *)plan)->d;
    const bool is_max = d->kind == QS_POOL_MAX;
    if (!x || !y || (is_max && !idx))
        return QS_FAIL(QS_ERR_INVALID_ARG, "pool_forward: NULL x, y or (max pooling) idx");
    const float *xf = x;
    float *yf = y;
    const float inv = 1.0f / (float)(d->R * d->S);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t p = 0; p < d->P; p++) {
            const float *xn = xf + n * d->H * d->W * d->C;
            for (int64_t q = 0; q < d->Q; q++) {
                int64_t o = ((n * d->P + p) * d->Q + q) * d->C;
                qs_window win = pool_window(d, p, q);
                if (is_max)
                    max_window(d, xn, win, yf + o, idx + o);
                else
                    avg_window(d, xn, win, inv, yf + o);
            }
        }
    return QS_OK;
}

qs_status qs_cpu_pool_backward(qs_backend *be, void *plan, qs_stream *s, const void *dy, const int32_t *idx,
                               void *dx, bool accumulate, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_POOL, "pool_backward"));
    const qs_pool_desc *d = &((qs_cpu_pool_plan_t *)plan)->d;
    const bool is_max = d->kind == QS_POOL_MAX;
    if (!dy || !dx || (is_max && !idx))
        return QS_FAIL(QS_ERR_INVALID_ARG, "pool_backward: NULL dy, dx or (max pooling) idx");
    const float *dyf = dy;
    float *dxf = dx;
    const int64_t C = d->C, HW = d->H * d->W;
    const float inv = 1.0f / (float)(d->R * d->S);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < d->N; n++) {
        float *dxn = dxf + n * HW * C;
        if (!accumulate) memset(dxn, 0, (size_t)(HW * C) * sizeof(float));
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++) {
                int64_t o = ((n * d->P + p) * d->Q + q) * C;
                const float *g = dyf + o;
                if (is_max) {
                    const int32_t *ix = idx + o;
                    for (int64_t c = 0; c < C; c++) dxn[(int64_t)ix[c] * C + c] += g[c];
                    continue;
                }
                qs_window win = pool_window(d, p, q);
                for (int64_t h = win.h0; h < win.h1; h++)
                    for (int64_t w = win.w0; w < win.w1; w++) {
                        float *dxs = dxn + (h * d->W + w) * C;
#pragma omp simd
                        for (int64_t c = 0; c < C; c++) dxs[c] += g[c] * inv;
                    }
            }
    }
    return QS_OK;
}
