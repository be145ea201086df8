/* src/cpu/cpu_norm.c — batch normalisation over (rows, C) data, C innermost (FP32 arithmetic,
 * per-channel statistics accumulated in double; PyTorch semantics).
 *
 * Training: mean = Σx/n, var = Σ(x-mean)²/n (biased, two passes) normalises;
 * running_mean/var ← (1-momentum)·running + momentum·{mean, Σ(x-mean)²/(n-1)}.
 * gamma/beta NULL mean 1/0 (affine=False); running_mean/var NULL skip the update
 * (track_running_stats=False); dgamma/dbeta NULL skip those gradients; dx NULL computes only
 * dgamma/dbeta (the input needs no gradient). `relu` applies max(·, 0) to the output (BN+ReLU
 * fused); its backward then takes the output `y_relu` and multiplies dy by [y_relu > 0] (a
 * multiply, not a select, which is 2× faster here; it differs from ReLU's backward only for
 * non-finite dy at masked positions). A BF16 output (y_dt) is the FP32 result rounded to
 * nearest even (core/numfmt.h, the rounding of the straight-through cast it replaces); its
 * backward widens the mask first. The input x is F32 or BF16 (x_dt: a convolution's BF16
 * output, qs_model_fuse_casts): every pass reads its elements through qs_cpu_load, which
 * widens BF16 exactly, so each result equals the F32 op's on the widened x bit for bit. */
#include "cpu/cpu_backend.h"
#include "core/numfmt.h"

#include <math.h>
#include <stdlib.h>

/* Batch norm writes its output in F32 or BF16. */
static qs_status bn_out_dtype_check(const char *what, qs_dtype dt) {
    if (dt == QS_F32 || dt == QS_BF16) return QS_OK;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: output dtype %s; batch norm writes f32 or bf16", what, qs_dtype_name(dt));
}

/* Batch norm reads its input in F32 or BF16. */
static qs_status bn_in_dtype_check(const char *what, qs_dtype dt) {
    if (dt == QS_F32 || dt == QS_BF16) return QS_OK;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: input dtype (x_dt) %s; batch norm reads f32 or bf16", what,
                   qs_dtype_name(dt));
}

/* y[r,c] = (x[r,c] - m[c])·k[c] + b[c] over all rows, then max(·, 0) when relu; x is F32 or
 * BF16 (x_dt), y F32 or BF16 (y_dt; rounded to nearest even). */
static void bn_apply(int64_t rows, int64_t C, const void *x, qs_dtype x_dt, const float *m, const float *k,
                     const float *b, void *y, qs_dtype y_dt, bool relu) {
    if (y_dt == QS_BF16) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t o = r * C;
            uint16_t *yr = (uint16_t *)y + o;
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                float v = (qs_cpu_load(x, x_dt, o + c) - m[c]) * k[c] + b[c];
                if (relu) v = v > 0.0f ? v : 0.0f;
                yr[c] = qs_nf_f32_to_bf16_rne(qs_nf_f32_bits(v));
            }
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t o = r * C;
        float *yr = (float *)y + o;
        if (relu) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                float v = (qs_cpu_load(x, x_dt, o + c) - m[c]) * k[c] + b[c];
                yr[c] = v > 0.0f ? v : 0.0f;
            }
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) yr[c] = (qs_cpu_load(x, x_dt, o + c) - m[c]) * k[c] + b[c];
        }
    }
}

/* Per-channel scratch: 3 float and 3 double arrays of C, one allocation. */
typedef struct bn_scratch {
    void *mem;
    float *f[3];
    double *d[3];
} bn_scratch;

static qs_status bn_scratch_alloc(bn_scratch *s, int64_t C, const char *what) {
    s->mem = malloc((size_t)C * 3 * (sizeof(float) + sizeof(double)));
    if (!s->mem) return QS_FAIL(QS_ERR_OOM, "%s: out of memory for %lld channels of statistics", what, (long long)C);
    s->d[0] = s->mem;
    s->d[1] = s->d[0] + C;
    s->d[2] = s->d[1] + C;
    s->f[0] = (float *)(s->d[2] + C);
    s->f[1] = s->f[0] + C;
    s->f[2] = s->f[1] + C;
    return QS_OK;
}

static qs_status bn_check(const char *what, int64_t rows, int64_t C, int nptrs, const void *const *ptrs) {
    if (rows < 0 || C < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld; need rows >= 0 and C >= 1", what, (long long)rows,
                       (long long)C);
    return qs_cpu_args_check(what, rows * C, nptrs, ptrs);
}

qs_status qs_cpu_batchnorm_forward_train(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x,
                                         qs_dtype x_dt, const float *gamma, const float *beta, void *y, qs_dtype y_dt,
                                         float *save_mean, float *save_invstd, float *running_mean,
                                         float *running_var, float momentum, float eps, bool relu) {
    const char *what = "batchnorm_forward_train";
    QS_TRY(bn_check(what, rows, C, 4, (const void *[]){x, y, save_mean, save_invstd}));
    QS_TRY(bn_in_dtype_check(what, x_dt));
    QS_TRY(bn_out_dtype_check(what, y_dt));
    if (rows < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s: %lld value(s) per channel; training-mode batch norm needs at least 2 (like PyTorch)", what,
                       (long long)rows);
    bn_scratch sc = {0};
    QS_TRY(bn_scratch_alloc(&sc, C, what));
    double *sum = sc.d[0], *sq = sc.d[1];
    qs_status st = qs_cpu_colsums(rows, C, x, x_dt, NULL, NULL, x_dt, NULL, NULL, sum, NULL);
    for (int64_t c = 0; st == QS_OK && c < C; c++) sum[c] /= (double)rows; /* sum now holds the mean */
    if (st == QS_OK) st = qs_cpu_colsums(rows, C, x, x_dt, NULL, NULL, x_dt, sum, NULL, NULL, sq);
    if (st != QS_OK) {
        free(sc.mem);
        return st;
    }
    float *k = sc.f[0], *b = sc.f[1];
    for (int64_t c = 0; c < C; c++) {
        double var = sq[c] / (double)rows;
        float invstd = (float)(1.0 / sqrt(var + (double)eps));
        save_mean[c] = (float)sum[c];
        save_invstd[c] = invstd;
        k[c] = invstd * (gamma ? gamma[c] : 1.0f);
        b[c] = beta ? beta[c] : 0.0f;
        if (running_mean) running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * (float)sum[c];
        if (running_var)
            running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (float)(sq[c] / (double)(rows - 1));
    }
    bn_apply(rows, C, x, x_dt, save_mean, k, b, y, y_dt, relu);
    free(sc.mem);
    return QS_OK;
}

qs_status qs_cpu_batchnorm_forward_eval(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x,
                                        qs_dtype x_dt, const float *gamma, const float *beta, const float *running_mean,
                                        const float *running_var, float eps, void *y, qs_dtype y_dt, bool relu) {
    const char *what = "batchnorm_forward_eval";
    QS_TRY(bn_check(what, rows, C, 4, (const void *[]){x, y, running_mean, running_var}));
    QS_TRY(bn_in_dtype_check(what, x_dt));
    QS_TRY(bn_out_dtype_check(what, y_dt));
    bn_scratch sc = {0};
    QS_TRY(bn_scratch_alloc(&sc, C, what));
    float *k = sc.f[0], *b = sc.f[1];
    for (int64_t c = 0; c < C; c++) {
        float invstd = (float)(1.0 / sqrt((double)running_var[c] + (double)eps));
        k[c] = invstd * (gamma ? gamma[c] : 1.0f);
        b[c] = beta ? beta[c] : 0.0f;
    }
    bn_apply(rows, C, x, x_dt, running_mean, k, b, y, y_dt, relu);
    free(sc.mem);
    return QS_OK;
}

/* The BF16 ReLU mask widened to FP32 (same comparisons against 0); caller frees. */
static qs_status bn_widen_mask(const char *what, int64_t n, const void *mask, float **out) {
    *out = malloc((size_t)n * sizeof(float));
    if (!*out) return QS_FAIL(QS_ERR_OOM, "%s: out of memory for a %lld-element mask", what, (long long)n);
    return qs_bf16_to_f32(n, mask, *out);
}

qs_status qs_cpu_batchnorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x,
                                    qs_dtype x_dt, const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, float *dx, bool accumulate, float *dgamma,
                                    float *dbeta, const void *y_relu_any, qs_dtype y_dt) {
    const char *what = "batchnorm_backward";
    QS_TRY(bn_check(what, rows, C, 4, (const void *[]){x, dy, save_mean, save_invstd}));
    QS_TRY(bn_in_dtype_check(what, x_dt));
    QS_TRY(bn_out_dtype_check(what, y_dt));
    if (rows < 1) return QS_OK;
    float *widened = NULL;
    if (y_relu_any && y_dt == QS_BF16) QS_TRY(bn_widen_mask(what, rows * C, y_relu_any, &widened));
    const float *y_relu = widened ? widened : y_relu_any;
    bn_scratch sc = {0};
    qs_status sst = bn_scratch_alloc(&sc, C, what);
    if (sst != QS_OK) {
        free(widened);
        return sst;
    }
    double *sum_dy = sc.d[0], *sum_dy_xmu = sc.d[1], *mean_d = sc.d[2];
    /* the saved mean is what forward normalised with; use it (as double) as the shift */
    for (int64_t c = 0; c < C; c++) mean_d[c] = save_mean[c];
    qs_status st = qs_cpu_colsums(rows, C, dy, QS_F32, y_relu, x, x_dt, NULL, mean_d, sum_dy, sum_dy_xmu);
    if (st != QS_OK) {
        free(sc.mem);
        free(widened);
        return st;
    }
    /* dx = (dy - Σdy/n - (x-mean)·invstd²·Σdy(x-mean)/n) · invstd·gamma
     *    = (dy - a[c] - (x-mean)·p[c]) · k[c]                                   */
    float *k = sc.f[0], *a = sc.f[1], *p = sc.f[2];
    for (int64_t c = 0; c < C; c++) {
        double is = save_invstd[c];
        k[c] = (float)(is * (gamma ? gamma[c] : 1.0f));
        a[c] = (float)(sum_dy[c] / (double)rows);
        p[c] = (float)(sum_dy_xmu[c] / (double)rows * is * is);
        if (dgamma) dgamma[c] = (float)(sum_dy_xmu[c] * is);
        if (dbeta) dbeta[c] = (float)sum_dy[c];
    }
    if (!dx) { /* only the parameter gradients were asked for */
        free(sc.mem);
        free(widened);
        return QS_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t o = r * C;
        const float *gr = dy + o, *mr = y_relu ? y_relu + o : NULL;
        float *dr = dx + o;
        if (mr && accumulate) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] += (gr[c] * (float)(mr[c] > 0.0f) - a[c] - (qs_cpu_load(x, x_dt, o + c) - save_mean[c]) * p[c]) *
                         k[c];
        } else if (mr) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] = (gr[c] * (float)(mr[c] > 0.0f) - a[c] - (qs_cpu_load(x, x_dt, o + c) - save_mean[c]) * p[c]) *
                        k[c];
        } else if (accumulate) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] += (gr[c] - a[c] - (qs_cpu_load(x, x_dt, o + c) - save_mean[c]) * p[c]) * k[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] = (gr[c] - a[c] - (qs_cpu_load(x, x_dt, o + c) - save_mean[c]) * p[c]) * k[c];
        }
    }
    free(sc.mem);
    free(widened);
    return QS_OK;
}
