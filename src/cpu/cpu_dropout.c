/* src/cpu/cpu_dropout.c — inverted dropout with a counter-based mask (FP32).
 *
 * Element i draws word i%4 of the Philox-4x32-10 block (key, counter = counter_base + i/4)
 * — the same numbers a qs_rng stream started at counter_base yields in order — and is kept
 * when u32 >= p·2^32 (uniform >= p). Kept values are scaled by 1/(1-p); p = 1 drops all.
 * The mask is a pure function of (key, counter_base, i): any backend, any thread count. */
#include "cpu/cpu_backend.h"

#include <math.h>
#include "qsync/rng.h"

static qs_status dropout_p_check(const char *what, float p) {
    if (!(p >= 0.0f && p <= 1.0f))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: drop probability %g is outside [0, 1]", what, (double)p);
    return QS_OK;
}

static float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

qs_status qs_cpu_dropout_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y,
                                 uint8_t *mask, float p, const qs_dropout_rng *rng) {
    QS_TRY(qs_cpu_args_check("dropout_forward", n, 4, (const void *[]){x, y, mask, rng}));
    QS_TRY(dropout_p_check("dropout_forward", p));
    if (n == 0) return QS_OK;
    const uint64_t key = rng->key,
                   counter_base = rng->step_at ? (uint64_t)*rng->step_at * rng->step_stride : rng->counter_base;
    const uint64_t thresh = (uint64_t)ceil((double)p * 4294967296.0); /* keep iff u32 >= thresh */
    const float scale = dropout_scale(p);
    const int64_t nblk = (n + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < nblk; j++) {
        uint32_t u[4];
        qs_philox4x32(key, 0, counter_base + (uint64_t)j, u);
        int64_t i0 = 4 * j, cnt = n - i0 < 4 ? n - i0 : 4;
        for (int64_t k = 0; k < cnt; k++) {
            uint8_t keep = (uint64_t)u[k] >= thresh;
            mask[i0 + k] = keep;
            y[i0 + k] = keep ? x[i0 + k] * scale : 0.0f;
        }
    }
    return QS_OK;
}

/* dx = dy·mask/(1-p) (or dx += ...). */
qs_status qs_cpu_dropout_backward(qs_backend *be, qs_stream *s, int64_t n, const float *dy, const uint8_t *mask,
                                  float p, float *dx, bool accumulate) {
    QS_TRY(qs_cpu_args_check("dropout_backward", n, 3, (const void *[]){dy, mask, dx}));
    QS_TRY(dropout_p_check("dropout_backward", p));
    const float scale = dropout_scale(p);
    if (accumulate) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] += mask[i] ? dy[i] * scale : 0.0f;
    } else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = mask[i] ? dy[i] * scale : 0.0f;
    }
    return QS_OK;
}
