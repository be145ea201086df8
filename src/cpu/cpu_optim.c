/* src/cpu/cpu_optim.c — optimizer steps on FP32 master weights (PyTorch 1.13 formulas,
 * scalars derived in double like PyTorch's Python side) and the deterministic sum of
 * squares used for gradient clipping. */
#include "cpu/cpu_backend.h"

#include <math.h>

/* g' = g + wd·p; buf = first ? g' : momentum·buf + (1-dampening)·g';
 * step = nesterov ? g' + momentum·buf : buf (g' when momentum == 0); p -= lr·step. */
qs_status qs_cpu_sgd_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *buf,
                          float lr, float momentum, float dampening, float wd, bool nesterov, bool first_step) {
    QS_TRY(qs_cpu_args_check("sgd_step", n, 2, (const void *[]){p, g}));
    QS_TRY(qs_sgd_step_check(n, buf, momentum, dampening, nesterov));
    const bool use_buf = momentum != 0.0f;
    const float keep = (float)(1.0 - (double)dampening);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
        if (use_buf) {
            float b = first_step ? d : momentum * buf[i] + keep * d;
            buf[i] = b;
            d = nesterov ? d + momentum * b : b;
        }
        p[i] -= lr * d;
    }
    return QS_OK;
}

/* p *= 1 - lr·wd; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
 * p -= (lr / (1-β1^t)) · m / (sqrt(v)/sqrt(1-β2^t) + eps). p, g, m, v must not overlap.
 * Note: GCC vectorises this loop only with -fno-math-errno (sqrtf may set errno); per-function
 * attributes/pragmas do not lift that in GCC 12. */
qs_status qs_cpu_adamw_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *m, float *v,
                            float lr, double beta1, double beta2, float eps, float wd, int64_t step) {
    QS_TRY(qs_cpu_args_check("adamw_step", n, 4, (const void *[]){p, g, m, v}));
    QS_TRY(qs_adamw_step_check(step));
    const float decay = (float)(1.0 - (double)lr * (double)wd);
    /* PyTorch: 1 - β in double, then every scalar rounded once to the tensor's float */
    const float b1 = (float)beta1, b2 = (float)beta2;
    const float c1 = (float)(1.0 - beta1), c2 = (float)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float pi = p[i] * decay;
        float mi = m[i] * b1 + c1 * g[i];
        float vi = v[i] * b2 + c2 * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
    return QS_OK;
}

#define QS_SSQ_CHUNKS 64

/* *out = Σ x_i² in double; fixed chunking (independent of threads) makes it reproducible. */
qs_status qs_cpu_sum_squares(qs_backend *be, qs_stream *s, int64_t n, const float *x, double *out) {
    QS_TRY(qs_cpu_args_check("sum_squares", n, 1, (const void *[]){x}));
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "sum_squares: out is NULL");
    double part[QS_SSQ_CHUNKS] = {0};
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < QS_SSQ_CHUNKS; ch++) {
        int64_t i0 = n * ch / QS_SSQ_CHUNKS, i1 = n * (ch + 1) / QS_SSQ_CHUNKS;
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = i0; i < i1; i++) acc += (double)x[i] * (double)x[i];
        part[ch] = acc;
    }
    double total = 0.0;
    for (int ch = 0; ch < QS_SSQ_CHUNKS; ch++) total += part[ch];
    *out = total;
    return QS_OK;
}
