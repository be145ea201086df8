/* src/cpu/cpu_norm.c — batch normalisation over (rows, C) data, C innermost (FP32 arithmetic,
 * per-channel statistics accumulated in double; PyTorch semantics).
 *
 * Training: mean = Σx/n, var = Σ(x-mean)²/n (biased, two passes) normalises;
 * running_mean/var ← (1-momentum)·running + momentum·{mean, Σ(x-mean)²/(n-1)}.
 * gamma/beta NULL mean 1/0 (affine=False); running_mean/var NULL skip the update
 * (track_running_stats=False); dgamma/dbeta NULL skip those gradients; dx NULL computes only
 * dgamma/dbeta (the input needs no gradient). `relu` applies max(·, 0) to the output (BN+ReLU
 * fused); its backward then takes the output `y_relu` and multiplies dy by [y_relu > 0] (a
 * multiply, faster than a select: docs/BENCHMARKS.md; it differs from ReLU's backward only for
 * non-finite dy at masked positions). A BF16 output (y_dt) is the FP32 result rounded to
 * nearest even (core/numfmt.h, the rounding of the straight-through cast it replaces); its
 * backward widens the mask first. The input x is F32 or BF16 (x_dt: a convolution's BF16
 * output, qs_model_bf16_conv_outputs), a BF16 x widened exactly into an FP32 copy first (one
 * vectorised pass; the FP32 loops then run unchanged), so each result equals the F32 op's on
 * the widened x bit for bit.
 * The backward's dy is F32 or BF16 (dy_dt: a BF16 convolution's gradient of its input, widened
 * exactly into the scratch like x). The backward's dx is F32 or BF16 (dx_dt): a BF16 dx is the FP32 dx rounded by the
 * conversion quantize uses (qs_f32_to_bf16: stochastic with dx_sr, element r·C + c taking the
 * word of global index dx_sr->offset + r·C + c, counter_at read when the op runs; nearest
 * even without dx_sr), on the whole FP32 dx in the backend scratch, so its bits equal the F32 op followed by
 * quantize(dx, QS_BF16, dx_sr); a BF16 dx cannot accumulate.
 * A residual (a block's Add fused in, qs_model_fuse) is added before the ReLU in forward; its
 * gradient (dresidual) is written by relu_backward (or copied from dy without a ReLU), so its
 * bits are those of the Add's backward. */
#include "cpu/cpu_backend.h"
#include "core/numfmt.h"

#include <math.h>
#include <stdlib.h>

/* n elements of dtype dt as FP32: src itself (F32), or its BF16 values widened exactly into dst
 * (n floats of the backend's scratch) — a BF16 x, or a BF16 ReLU mask (same comparisons against
 * 0) — so the FP32 loops below run unchanged on them. */
static const float *bn_f32_view(int64_t n, const void *src, qs_dtype dt, float *dst) {
    if (dt != QS_BF16 || !src) return src;
    qs_bf16_to_f32(n, src, dst); /* cannot fail: n > 0, both pointers set */
    return dst;
}

/* Floats of scratch a BF16 tensor of n elements needs for its FP32 view (0 for F32 or absent). */
static size_t bn_view_floats(int64_t n, const void *src, qs_dtype dt) { return dt == QS_BF16 && src ? (size_t)n : 0; }

/* FP32 views of a forward's x and residual (n elements each; residual may be NULL): a BF16 one
 * widened exactly into the backend's scratch (both share it), an F32 one as is. */
static qs_status bn_f32_views(qs_backend *be, int64_t n, const void *x, qs_dtype x_dt, const void *res,
                              qs_dtype res_dt, const float **xf, const float **rf) {
    const size_t nx = bn_view_floats(n, x, x_dt), nr = bn_view_floats(n, res, res_dt);
    float *scratch = NULL;
    if (nx + nr) QS_TRY(qs_cpu_scratch(qs_cpu_be(be), (nx + nr) * sizeof(float), (void **)&scratch));
    *xf = bn_f32_view(n, x, x_dt, scratch);
    *rf = bn_f32_view(n, res, res_dt, scratch + nx);
    return QS_OK;
}

/* y[r,c] = (x[r,c] - m[c])·k[c] + b[c] (+ res[r,c] when res is set) over all rows, then
 * max(·, 0) when relu; y F32 or BF16 (y_dt; rounded to nearest even). */
static void bn_apply(int64_t rows, int64_t C, const float *x, const float *m, const float *k, const float *b,
                     const float *res, void *y, qs_dtype y_dt, bool relu) {
    if (y_dt == QS_BF16) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t o = r * C;
            uint16_t *yr = (uint16_t *)y + o;
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                float v = (x[o + c] - m[c]) * k[c] + b[c];
                if (res) v = v + res[o + c];
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
        if (res) {
            const float *rr = res + o;
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                const float v = (x[o + c] - m[c]) * k[c] + b[c] + rr[c];
                yr[c] = relu ? (v > 0.0f ? v : 0.0f) : v;
            }
        } else if (relu) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                float v = (x[o + c] - m[c]) * k[c] + b[c];
                yr[c] = v > 0.0f ? v : 0.0f;
            }
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) yr[c] = (x[o + c] - m[c]) * k[c] + b[c];
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

/* Training forward on an FP32 x (arguments checked). */
static qs_status bn_train(const char *what, int64_t rows, int64_t C, const float *x, const float *gamma,
                          const float *beta, const float *residual, void *y, qs_dtype y_dt, float *save_mean, float *save_invstd,
                          float *running_mean, float *running_var, float momentum, float eps, bool relu) {
    bn_scratch sc = {0};
    QS_TRY(bn_scratch_alloc(&sc, C, what));
    double *sum = sc.d[0], *sq = sc.d[1];
    qs_status st = qs_cpu_colsums(rows, C, x, NULL, NULL, NULL, NULL, sum, NULL);
    for (int64_t c = 0; st == QS_OK && c < C; c++) sum[c] /= (double)rows; /* sum now holds the mean */
    if (st == QS_OK) st = qs_cpu_colsums(rows, C, x, NULL, NULL, sum, NULL, NULL, sq);
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
    bn_apply(rows, C, x, save_mean, k, b, residual, y, y_dt, relu);
    free(sc.mem);
    return QS_OK;
}

qs_status qs_cpu_batchnorm_forward_train(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x,
                                         qs_dtype x_dt, const float *gamma, const float *beta, void *y, qs_dtype y_dt,
                                         float *save_mean, float *save_invstd, float *running_mean,
                                         float *running_var, float momentum, float eps, bool relu, const void *residual,
                                         qs_dtype residual_dt) {
    const char *what = "batchnorm_forward_train";
    QS_TRY(bn_check(what, rows, C, 4, (const void *[]){x, y, save_mean, save_invstd}));
    QS_TRY(qs_batchnorm_forward_check(what, true, rows, x_dt, y_dt, residual_dt));
    const float *xf, *rf;
    QS_TRY(bn_f32_views(be, rows * C, x, x_dt, residual, residual_dt, &xf, &rf));
    return bn_train(what, rows, C, xf, gamma, beta, rf, y, y_dt, save_mean, save_invstd, running_mean, running_var,
                    momentum, eps, relu);
}

qs_status qs_cpu_batchnorm_forward_eval(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x,
                                        qs_dtype x_dt, const float *gamma, const float *beta, const float *running_mean,
                                        const float *running_var, float eps, void *y, qs_dtype y_dt, bool relu,
                                        const void *residual, qs_dtype residual_dt) {
    const char *what = "batchnorm_forward_eval";
    QS_TRY(bn_check(what, rows, C, 4, (const void *[]){x, y, running_mean, running_var}));
    QS_TRY(qs_batchnorm_forward_check(what, false, rows, x_dt, y_dt, residual_dt));
    bn_scratch sc = {0};
    QS_TRY(bn_scratch_alloc(&sc, C, what));
    float *k = sc.f[0], *b = sc.f[1];
    for (int64_t c = 0; c < C; c++) {
        float invstd = (float)(1.0 / sqrt((double)running_var[c] + (double)eps));
        k[c] = invstd * (gamma ? gamma[c] : 1.0f);
        b[c] = beta ? beta[c] : 0.0f;
    }
    const float *xf, *rf;
    qs_status st = bn_f32_views(be, rows * C, x, x_dt, residual, residual_dt, &xf, &rf);
    if (st == QS_OK) bn_apply(rows, C, xf, running_mean, k, b, rf, y, y_dt, relu);
    free(sc.mem);
    return st;
}


/* dx rows [r0, r1) into out (row r0 at out[0]; overwritten, or accumulated into with
 * `accumulate`): dx = (dy·[y_relu > 0] - a[c] - (x-mean)·p[c]) · k[c]. */
static void bn_dx_rows(int64_t r0, int64_t r1, int64_t C, const float *x, const float *dy,
                       const float *y_relu, const float *save_mean, const float *a, const float *p, const float *k,
                       float *out, bool accumulate) {
#pragma omp parallel for schedule(static)
    for (int64_t r = r0; r < r1; r++) {
        const int64_t o = r * C;
        const float *gr = dy + o, *mr = y_relu ? y_relu + o : NULL;
        float *dr = out + (r - r0) * C;
        if (mr && accumulate) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] += (gr[c] * (float)(mr[c] > 0.0f) - a[c] - (x[o + c] - save_mean[c]) * p[c]) *
                         k[c];
        } else if (mr) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] = (gr[c] * (float)(mr[c] > 0.0f) - a[c] - (x[o + c] - save_mean[c]) * p[c]) *
                        k[c];
        } else if (accumulate) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] += (gr[c] - a[c] - (x[o + c] - save_mean[c]) * p[c]) * k[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] = (gr[c] - a[c] - (x[o + c] - save_mean[c]) * p[c]) * k[c];
        }
    }
}

/* Contract: core/backend_ops.def batchnorm_backward (dx F32; or BF16: the FP32 dx in the scratch,
 * rounded by qs_f32_to_bf16 — the conversion quantize(…, QS_BF16, …, sr, …) runs, on the whole
 * tensor, so the bits equal quantize's; the dx_dt and accumulate checks come before any work). */
qs_status qs_cpu_batchnorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x,
                                    qs_dtype x_dt, const void *dy_any, qs_dtype dy_dt, const float *gamma,
                                    const float *save_mean,
                                    const float *save_invstd, void *dx, qs_dtype dx_dt, const qs_sr *dx_sr,
                                    bool accumulate, float *dgamma, float *dbeta, const void *y_relu_any,
                                    qs_dtype y_dt, float *dresidual, bool dresidual_accumulate) {
    const char *what = "batchnorm_backward";
    QS_TRY(bn_check(what, rows, C, 4, (const void *[]){x, dy_any, save_mean, save_invstd}));
    QS_TRY(qs_batchnorm_dtype_check(what, x_dt, y_dt, dx_dt, accumulate));
    QS_TRY(qs_dy_dtype_check(what, dy_dt));
    if (rows < 1) return QS_OK;
    /* scratch: [x widened | mask widened | dy widened | FP32 dx before its rounding], as needed */
    const int64_t n = rows * C;
    const size_t nx = bn_view_floats(n, x, x_dt), nm = bn_view_floats(n, y_relu_any, y_dt);
    const size_t ng = bn_view_floats(n, dy_any, dy_dt), nd = dx && dx_dt == QS_BF16 ? (size_t)n : 0;
    float *scratch = NULL;
    if (nx + nm + ng + nd)
        QS_TRY(qs_cpu_scratch(qs_cpu_be(be), (nx + nm + ng + nd) * sizeof(float), (void **)&scratch));
    const float *xf = bn_f32_view(n, x, x_dt, scratch), *y_relu = bn_f32_view(n, y_relu_any, y_dt, scratch + nx);
    const float *dy = bn_f32_view(n, dy_any, dy_dt, scratch + nx + nm);
    float *dx32 = nd ? scratch + nx + nm + ng : NULL;
    bn_scratch sc = {0};
    QS_TRY(bn_scratch_alloc(&sc, C, what));
    double *sum_dy = sc.d[0], *sum_dy_xmu = sc.d[1], *mean_d = sc.d[2];
    /* the saved mean is what forward normalised with; use it (as double) as the shift */
    for (int64_t c = 0; c < C; c++) mean_d[c] = save_mean[c];
    qs_status st = qs_cpu_colsums(rows, C, dy, y_relu, xf, NULL, mean_d, sum_dy, sum_dy_xmu);
    if (st != QS_OK) {
        free(sc.mem);
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
    if (dx) /* else only the parameter gradients were asked for */
        bn_dx_rows(0, rows, C, xf, dy, y_relu, save_mean, a, p, k, dx32 ? dx32 : dx, accumulate);
    if (dx32) st = qs_f32_to_bf16(n, dx32, dx, dx_sr);
    free(sc.mem);
    if (st != QS_OK || !dresidual) return st;
    if (y_relu) return qs_cpu_relu_backward(be, s, n, y_relu, dy, QS_F32, dresidual, dresidual_accumulate);
    qs_cpu_copy_or_add(n, dy, dresidual, dresidual_accumulate);
    return QS_OK;
}
