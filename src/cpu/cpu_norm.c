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
 * widens BF16 exactly, so each result equals the F32 op's on the widened x bit for bit.
 * The backward's dx is F32 or BF16 (dx_dt): a BF16 dx is the FP32 dx rounded by the
 * conversion quantize uses (qs_f32_to_bf16: stochastic with dx_sr, element r·C + c taking the
 * word of global index dx_sr->offset + r·C + c, counter_at read when the op runs; nearest
 * even without dx_sr), computed in blocks of rows, so its bits equal the F32 op followed by
 * quantize(dx, QS_BF16, dx_sr); a BF16 dx cannot accumulate. */
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

/* dx rows [r0, r1) into out (row r0 at out[0]; overwritten, or accumulated into with
 * `accumulate`): dx = (dy·[y_relu > 0] - a[c] - (x-mean)·p[c]) · k[c]. */
static void bn_dx_rows(int64_t r0, int64_t r1, int64_t C, const void *x, qs_dtype x_dt, const float *dy,
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
}

/* FP32 elements per block of rows a BF16 dx is computed in before rounding (1 MiB). */
#define BN_DX_BLOCK ((int64_t)1 << 18)

/* The BF16 dx: blocks of whole rows computed in FP32 into a temporary, then rounded by
 * qs_f32_to_bf16 — the conversion quantize(…, QS_BF16, …, sr, …) runs — with the stream's
 * offset advanced to the block's first element (offset + r0·C), so every element takes the
 * word of global index dx_sr->offset + r·C + c and the bits equal quantize's on the whole
 * FP32 dx; counter_at is read by qs_f32_to_bf16 (qs_sr_bits) as in quantize. */
static qs_status bn_dx_bf16(const char *what, int64_t rows, int64_t C, const void *x, qs_dtype x_dt, const float *dy,
                            const float *y_relu, const float *save_mean, const float *a, const float *p,
                            const float *k, uint16_t *dx, const qs_sr *dx_sr) {
    int64_t block = BN_DX_BLOCK / C > 0 ? BN_DX_BLOCK / C : 1;
    if (block > rows) block = rows;
    float *tmp = malloc((size_t)(block * C) * sizeof(float));
    if (!tmp)
        return QS_FAIL(QS_ERR_OOM, "%s: out of memory for a %lld-element FP32 block of dx", what,
                       (long long)(block * C));
    qs_status st = QS_OK;
    for (int64_t r0 = 0; st == QS_OK && r0 < rows; r0 += block) {
        const int64_t r1 = rows - r0 < block ? rows : r0 + block;
        bn_dx_rows(r0, r1, C, x, x_dt, dy, y_relu, save_mean, a, p, k, tmp, false);
        qs_sr sr = {0};
        if (dx_sr) {
            sr = *dx_sr;
            sr.offset = dx_sr->offset + (uint64_t)(r0 * C);
        }
        st = qs_f32_to_bf16((r1 - r0) * C, tmp, dx + r0 * C, dx_sr ? &sr : NULL);
    }
    free(tmp);
    return st;
}

/* Contract: core/backend.h batchnorm_backward (dx F32, or BF16 through bn_dx_bf16; the
 * dx_dt and accumulate checks come before any work). */
qs_status qs_cpu_batchnorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x,
                                    qs_dtype x_dt, const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_invstd, void *dx, qs_dtype dx_dt, const qs_sr *dx_sr,
                                    bool accumulate, float *dgamma, float *dbeta, const void *y_relu_any,
                                    qs_dtype y_dt) {
    const char *what = "batchnorm_backward";
    QS_TRY(bn_check(what, rows, C, 4, (const void *[]){x, dy, save_mean, save_invstd}));
    QS_TRY(bn_in_dtype_check(what, x_dt));
    QS_TRY(bn_out_dtype_check(what, y_dt));
    if (dx_dt != QS_F32 && dx_dt != QS_BF16)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: input-gradient dtype (dx_dt) %s; batch norm writes dx in f32 or bf16",
                       what, qs_dtype_name(dx_dt));
    if (dx_dt == QS_BF16 && accumulate)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s: accumulate with a bf16 dx; only an f32 dx can be accumulated into (pass accumulate=false, "
                       "or an f32 dx)",
                       what);
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
    if (dx && dx_dt == QS_BF16)
        st = bn_dx_bf16(what, rows, C, x, x_dt, dy, y_relu, save_mean, a, p, k, dx, dx_sr);
    else if (dx) /* else only the parameter gradients were asked for */
        bn_dx_rows(0, rows, C, x, x_dt, dy, y_relu, save_mean, a, p, k, dx, accumulate);
    free(sc.mem);
    free(widened);
    return st;
}
