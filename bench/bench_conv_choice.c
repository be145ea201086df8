/* bench/bench_conv_choice.c — measures the implementation choices of the CPU backend:
 *  1. conv2d (NHWC activations, OIHW weights): oneDNN convolution as implemented by the
 *     backend (format_tag_any weights + cached reorders) vs im2col + oneDNN matmul (written
 *     here), forward / backward-data / backward-weights, for the small-CNN layers at batch
 *     128 on 28×28 input and ResNet-style 3×3 convs;
 *  2. linear: oneDNN matmul as implemented by the backend (W (N,K) via strides) vs oneDNN
 *     inner_product with plain layouts (written here), forward and both backwards.
 * Prints the median of `reps` timed repetitions (after one warm-up) in ms, the ratio, and the
 * largest difference between the two variants' outputs (a correctness cross-check).
 * Usage: bench_conv_choice [threads (0 = OpenMP default)] [reps (default 7)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "core/timer.h"
#include "cpu/dnnl_util.h"
#include "qsync/rng.h"
#include "qsync/tensor.h"

/* The bench reaches into the CPU backend for its oneDNN context (same engine/stream). */
#include "cpu/cpu_backend.h"
#include "bench_util.h"

static int g_reps = 7;


static float *falloc(int64_t n) {
    float *p = qs_host_alloc((size_t)n * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory (%lld floats)\n", (long long)n);
        exit(1);
    }
    return p;
}

static void fill(float *p, int64_t n, uint64_t seed) {
    qs_rng r;
    qs_rng_init(&r, seed, 0);
    for (int64_t i = 0; i < n; i++) p[i] = qs_rng_uniform(&r) * 2.0f - 1.0f;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A timed closure: fn(ctx) runs one repetition. */
typedef void (*bench_fn)(void *ctx);

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Median times of nf variants, repetitions interleaved (A, B, ..., A, B, ...) so that load
 * changes on a shared machine hit all alike; one warm-up run each first. */
static void median_multi_ms(const bench_fn *fns, int nf, void *ctx, double *out) {
    double t[8][64];
    int n = g_reps < 64 ? g_reps : 64;
    for (int f = 0; f < nf; f++) fns[f](ctx);
    for (int i = 0; i < n; i++)
        for (int f = 0; f < nf; f++) {
            double t0 = qs_now_ms();
            fns[f](ctx);
            t[f][i] = qs_now_ms() - t0;
        }
    for (int f = 0; f < nf; f++) out[f] = median(t[f], n);
}

static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0, scale = 1e-30;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m / scale;
}

/* ------------------------------------------------------------------ conv: im2col variant */

/* An FP32 operand of the backend's GEMM-like ops. */
#define F32OP(p) (&(qs_operand){(p), QS_F32, NULL, false, NULL})

typedef struct im2col_conv {
    qs_conv_desc d;
    qs_dnnl_prim fwd;   /* Y (NPQ,K) = col (NPQ,RSC) · W'ᵀ (RSC,K) + b */
    qs_dnnl_prim bwd;   /* dcol (NPQ,RSC) = dY (NPQ,K) · W' (K,RSC) */
    qs_dnnl_prim wgt;   /* dW' (K,RSC) = dYᵀ (K,NPQ) · col (NPQ,RSC) */
    float *col, *wt;    /* col buffer, W' = weights as (K,R,S,C) */
    void *scratch;
} im2col_conv;

/* C (m,n) = A·B [+ bias], A/B with element strides; prefer: oneDNN implementation name
 * fragment (NULL = oneDNN's first choice). */
static void mm(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, int64_t m, int64_t k, int64_t n, const int64_t as[2],
               const int64_t bs[2], bool bias, const char *prefer) {
    qs_dnnl_tensor a = {.ndims = 2, .dims = {m, k}, .strides = {as[0], as[1]}, .layout = QS_DNNL_STRIDED};
    qs_dnnl_tensor b = {.ndims = 2, .dims = {k, n}, .strides = {bs[0], bs[1]}, .layout = QS_DNNL_STRIDED};
    qs_dnnl_tensor c = {.ndims = 2, .dims = {m, n}, .strides = {n, 1}, .layout = QS_DNNL_STRIDED};
    qs_dnnl_tensor bt = {.ndims = 2, .dims = {1, n}, .strides = {n, 1}, .layout = QS_DNNL_STRIDED};
    CHECK(qs_dnnl_matmul_create(p, ctx, &a, &b, bias ? &bt : NULL, &c, false, prefer, "matmul"));
}

static void im2col_init(im2col_conv *ic, const qs_dnnl_ctx *ctx, const qs_conv_desc *d) {
    memset(ic, 0, sizeof *ic);
    ic->d = *d;
    int64_t rows = d->N * d->P * d->Q, kk = d->R * d->S * d->C;
    const int64_t row_kk[2] = {kk, 1}, col_kk[2] = {1, kk}, row_k[2] = {d->K, 1}, col_k[2] = {1, d->K};
    mm(&ic->fwd, ctx, rows, kk, d->K, row_kk, col_kk, true, NULL);
    mm(&ic->bwd, ctx, rows, d->K, kk, row_k, row_kk, false, NULL);
    mm(&ic->wgt, ctx, d->K, rows, kk, col_k, row_kk, false, NULL);
    ic->col = falloc(rows * kk);
    ic->wt = falloc(d->K * kk);
    size_t s = ic->fwd.scratch_bytes;
    if (ic->bwd.scratch_bytes > s) s = ic->bwd.scratch_bytes;
    if (ic->wgt.scratch_bytes > s) s = ic->wgt.scratch_bytes;
    ic->scratch = qs_host_alloc(s + 64);
}

static void im2col_free(im2col_conv *ic) {
    qs_dnnl_prim_destroy(&ic->fwd);
    qs_dnnl_prim_destroy(&ic->bwd);
    qs_dnnl_prim_destroy(&ic->wgt);
    qs_host_free(ic->col);
    qs_host_free(ic->wt);
    qs_host_free(ic->scratch);
}

/* col[(n,p,q), (r,s,c)] = x[n, p·sh-ph+r, q·sw-pw+s, c] (0 outside). */
static void im2col(const qs_conv_desc *d, const float *x, float *col) {
    const int64_t C = d->C, kk = d->R * d->S * C;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++) {
                float *row = col + ((n * d->P + p) * d->Q + q) * kk;
                for (int64_t r = 0; r < d->R; r++) {
                    int64_t h = p * d->stride_h - d->pad_h + r;
                    for (int64_t s = 0; s < d->S; s++) {
                        int64_t w = q * d->stride_w - d->pad_w + s;
                        float *dst = row + (r * d->S + s) * C;
                        if (h < 0 || h >= d->H || w < 0 || w >= d->W)
                            memset(dst, 0, (size_t)C * sizeof(float));
                        else
                            memcpy(dst, x + ((n * d->H + h) * d->W + w) * C, (size_t)C * sizeof(float));
                    }
                }
            }
}

/* dx = Σ scatter of dcol (one image per task, so no races). */
static void col2im(const qs_conv_desc *d, const float *col, float *dx) {
    const int64_t C = d->C, kk = d->R * d->S * C;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < d->N; n++) {
        float *dxn = dx + n * d->H * d->W * C;
        memset(dxn, 0, (size_t)(d->H * d->W * C) * sizeof(float));
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++) {
                const float *row = col + ((n * d->P + p) * d->Q + q) * kk;
                for (int64_t r = 0; r < d->R; r++) {
                    int64_t h = p * d->stride_h - d->pad_h + r;
                    if (h < 0 || h >= d->H) continue;
                    for (int64_t s = 0; s < d->S; s++) {
                        int64_t w = q * d->stride_w - d->pad_w + s;
                        if (w < 0 || w >= d->W) continue;
                        const float *src = row + (r * d->S + s) * C;
                        float *dst = dxn + (h * d->W + w) * C;
                        for (int64_t c = 0; c < C; c++) dst[c] += src[c];
                    }
                }
            }
    }
}

/* (K,C,R,S) ↔ (K,R,S,C) */
static void w_kcrs_to_krsc(const qs_conv_desc *d, const float *w, float *wt, bool back) {
    for (int64_t k = 0; k < d->K; k++)
        for (int64_t c = 0; c < d->C; c++)
            for (int64_t rs = 0; rs < d->R * d->S; rs++) {
                int64_t a = (k * d->C + c) * d->R * d->S + rs, b = (k * d->R * d->S + rs) * d->C + c;
                if (back)
                    wt[a] = w[b];
                else
                    wt[b] = w[a];
            }
}

typedef struct conv_case {
    qs_backend *be;
    void *plan, *ws;
    im2col_conv ic;
    const qs_dnnl_ctx *ctx;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db;
    float *y2, *dx2, *dw2, *db2;
} conv_case;

static void dnnl_fwd(void *c_) {
    conv_case *c = c_;
    CHECK(c->be->ops->conv_forward(c->be, c->plan, NULL, F32OP(c->x), F32OP(c->w), c->b, c->y, c->ws));
}
static void dnnl_bwd(void *c_) {
    conv_case *c = c_;
    CHECK(c->be->ops->conv_backward_data(c->be, c->plan, NULL, F32OP(c->dy), F32OP(c->w), c->dx, false, c->ws));
}
static void dnnl_wgt(void *c_) {
    conv_case *c = c_;
    CHECK(c->be->ops->conv_backward_weights(c->be, c->plan, NULL, F32OP(c->dy), F32OP(c->x), c->dw, c->db, c->ws));
}
static void i2c_fwd(void *c_) {
    conv_case *c = c_;
    im2col_conv *ic = &c->ic;
    w_kcrs_to_krsc(&ic->d, c->w, ic->wt, false);
    im2col(&ic->d, c->x, ic->col);
    void *h[4] = {ic->col, ic->wt, c->b, c->y2};
    CHECK(qs_dnnl_prim_exec(&ic->fwd, c->ctx, h, ic->scratch, "im2col fwd"));
}
static void i2c_bwd(void *c_) {
    conv_case *c = c_;
    im2col_conv *ic = &c->ic;
    w_kcrs_to_krsc(&ic->d, c->w, ic->wt, false);
    void *h[3] = {c->dy, ic->wt, ic->col};
    CHECK(qs_dnnl_prim_exec(&ic->bwd, c->ctx, h, ic->scratch, "im2col bwd"));
    col2im(&ic->d, ic->col, c->dx2);
}
static void i2c_wgt(void *c_) {
    conv_case *c = c_;
    im2col_conv *ic = &c->ic;
    im2col(&ic->d, c->x, ic->col);
    void *h[3] = {c->dy, ic->col, ic->wt};
    CHECK(qs_dnnl_prim_exec(&ic->wgt, c->ctx, h, ic->scratch, "im2col wgt"));
    w_kcrs_to_krsc(&ic->d, ic->wt, c->dw2, true);
    int64_t rows = ic->d.N * ic->d.P * ic->d.Q;
    for (int64_t k = 0; k < ic->d.K; k++) c->db2[k] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < ic->d.K; k++) c->db2[k] += c->dy[r * ic->d.K + k];
}

static void bench_conv(qs_backend *be, const char *name, qs_conv_desc d) {
    CHECK(qs_conv_desc_finish(&d));
    conv_case c;
    memset(&c, 0, sizeof c);
    c.be = be;
    c.ctx = &qs_cpu_be(be)->dnnl;
    size_t wsb;
    CHECK(be->ops->conv_plan(be, &d, &c.plan, &wsb));
    c.ws = qs_host_alloc(wsb);
    im2col_init(&c.ic, c.ctx, &d);
    int64_t nx = d.N * d.H * d.W * d.C, ny = d.N * d.P * d.Q * d.K, nw = d.K * d.C * d.R * d.S;
    c.x = falloc(nx), c.dx = falloc(nx), c.dx2 = falloc(nx);
    c.y = falloc(ny), c.y2 = falloc(ny), c.dy = falloc(ny);
    c.w = falloc(nw), c.dw = falloc(nw), c.dw2 = falloc(nw);
    c.b = falloc(d.K), c.db = falloc(d.K), c.db2 = falloc(d.K);
    fill(c.x, nx, 1), fill(c.dy, ny, 2), fill(c.w, nw, 3), fill(c.b, d.K, 4);
    bench_fn fns[3][2] = {{dnnl_fwd, i2c_fwd}, {dnnl_bwd, i2c_bwd}, {dnnl_wgt, i2c_wgt}};
    const char *dir[3] = {"fwd", "bwd_data", "bwd_weights"};
    for (int k = 0; k < 3; k++) {
        double t[2];
        median_multi_ms(fns[k], 2, &c, t);
        double t0 = t[0], t1 = t[1];
        double diff = k == 0 ? max_rel_diff(c.y2, c.y, ny) : k == 1 ? max_rel_diff(c.dx2, c.dx, nx)
                                                                   : max_rel_diff(c.dw2, c.dw, nw);
        printf("conv %-22s %-12s dnnl_conv %8.3f ms  im2col_matmul %8.3f ms  im2col/dnnl %5.2f  maxdiff %.1e  [%s]\n",
               name, dir[k], t0, t1, t1 / t0, diff, qs_cpu_conv_impl_name(c.plan, k));
    }
    be->ops->plan_destroy(be, c.plan);
    im2col_free(&c.ic);
    float *bufs[] = {c.x, c.dx, c.dx2, c.y, c.y2, c.dy, c.w, c.dw, c.dw2, c.b, c.db, c.db2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) qs_host_free(bufs[i]);
    qs_host_free(c.ws);
}

/* ----------------------------------------------------------------------------- linear */

/* Variants: the backend's plan, matmul with oneDNN's first-choice implementation in all three
 * directions, matmul forced to the "gemm" implementation, inner_product (plain layouts). */
enum { LV_BACKEND, LV_MM_DEFAULT, LV_MM_GEMM, LV_IP, LV_COUNT };
static const char *lv_name[LV_COUNT] = {"backend", "matmul_default", "matmul_gemm", "inner_product"};

typedef struct linear_case {
    qs_backend *be;
    const qs_dnnl_ctx *ctx;
    qs_linear_desc d;
    void *plan, *ws, *scratch;
    qs_dnnl_prim prim[LV_COUNT][3]; /* [variant][fwd, bwd_data, bwd_weights], not LV_BACKEND */
    float *x, *w, *b, *dy, *out[LV_COUNT][3], *db;
} linear_case;

/* inner_product primitives with plain layouts (low-level dnnl_util entry: the library has
 * no inner_product constructor since it does not use one). */
static void ip_init(linear_case *c) {
    const qs_linear_desc *d = &c->d;
    dnnl_memory_desc_t src, wei, bias, dst;
    const qs_dnnl_tensor ts = {.ndims = 2, .dims = {d->M, d->K}, .strides = {d->K, 1}};
    const qs_dnnl_tensor tw = {.ndims = 2, .dims = {d->N, d->K}, .strides = {d->K, 1}};
    const qs_dnnl_tensor tb = {.ndims = 1, .dims = {d->N}, .layout = QS_DNNL_VECTOR};
    const qs_dnnl_tensor td = {.ndims = 2, .dims = {d->M, d->N}, .strides = {d->N, 1}};
    CHECK(qs_dnnl_md(&src, &ts));
    CHECK(qs_dnnl_md(&wei, &tw));
    CHECK(qs_dnnl_md(&bias, &tb));
    CHECK(qs_dnnl_md(&dst, &td));
    dnnl_inner_product_desc_t f, b, w;
    qs_dnnl_prim *p = c->prim[LV_IP];
    CHECK(qs_dnnl_check(dnnl_inner_product_forward_desc_init(&f, dnnl_forward_training, &src, &wei, &bias, &dst),
                        "ip fwd"));
    const int fids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
    CHECK(qs_dnnl_prim_create(&p[0], c->ctx, &f, NULL, NULL, NULL, fids, 4, "ip fwd"));
    CHECK(qs_dnnl_check(dnnl_inner_product_backward_data_desc_init(&b, &src, &wei, &dst), "ip bwd"));
    const int bids[3] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    CHECK(qs_dnnl_prim_create(&p[1], c->ctx, &b, NULL, p[0].pd, NULL, bids, 3, "ip bwd"));
    CHECK(qs_dnnl_check(dnnl_inner_product_backward_weights_desc_init(&w, &src, &wei, &bias, &dst), "ip wgt"));
    const int wids[4] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
    CHECK(qs_dnnl_prim_create(&p[2], c->ctx, &w, NULL, p[0].pd, NULL, wids, 4, "ip wgt"));
}

/* The three products of a linear layer as matmuls (same formulation as src/cpu/cpu_linear.c). */
static void mm_init(linear_case *c, int v, const char *prefer) {
    const int64_t M = c->d.M, N = c->d.N, K = c->d.K;
    const int64_t row_k[2] = {K, 1}, col_k[2] = {1, K}, row_n[2] = {N, 1}, col_n[2] = {1, N};
    mm(&c->prim[v][0], c->ctx, M, K, N, row_k, col_k, true, prefer);
    mm(&c->prim[v][1], c->ctx, M, N, K, row_n, row_k, false, prefer);
    mm(&c->prim[v][2], c->ctx, N, M, K, col_n, row_k, false, prefer);
}

/* One run of variant v in direction dir (bias gradient: by the primitive for inner_product,
 * by the backend's column sum otherwise; the plain-matmul variants leave it out). */
static void linear_run(linear_case *c, int v, int dir) {
    float *out = c->out[v][dir];
    if (v == LV_BACKEND) {
        const qs_backend_ops *o = c->be->ops;
        if (dir == 0) CHECK(o->linear_forward(c->be, c->plan, NULL, F32OP(c->x), F32OP(c->w), c->b, out, c->ws));
        if (dir == 1) CHECK(o->linear_backward_data(c->be, c->plan, NULL, F32OP(c->dy), F32OP(c->w), out, false, c->ws));
        if (dir == 2) CHECK(o->linear_backward_weights(c->be, c->plan, NULL, F32OP(c->dy), F32OP(c->x), out, c->db, c->ws));
        return;
    }
    void *h[4];
    if (dir == 0) {
        h[0] = c->x, h[1] = c->w, h[2] = c->b, h[3] = out;
    } else if (dir == 1) {
        h[0] = c->dy, h[1] = c->w, h[2] = out;
    } else if (v == LV_IP) {
        h[0] = c->x, h[1] = c->dy, h[2] = out, h[3] = c->db;
    } else {
        h[0] = c->dy, h[1] = c->x, h[2] = out;
    }
    CHECK(qs_dnnl_prim_exec(&c->prim[v][dir], c->ctx, h, c->scratch, "linear variant"));
}

#define LINEAR_FN(v, dir) \
    static void lin_##v##_##dir(void *c) { linear_run(c, v, dir); }
#define LINEAR_FNS(v) LINEAR_FN(v, 0) LINEAR_FN(v, 1) LINEAR_FN(v, 2)
LINEAR_FNS(0)
LINEAR_FNS(1)
LINEAR_FNS(2)
LINEAR_FNS(3)
static const bench_fn lin_fns[3][LV_COUNT] = {{lin_0_0, lin_1_0, lin_2_0, lin_3_0},
                                              {lin_0_1, lin_1_1, lin_2_1, lin_3_1},
                                              {lin_0_2, lin_1_2, lin_2_2, lin_3_2}};

static void bench_linear(qs_backend *be, int64_t M, int64_t K, int64_t N) {
    linear_case c;
    memset(&c, 0, sizeof c);
    c.be = be;
    c.ctx = &qs_cpu_be(be)->dnnl;
    c.d = (qs_linear_desc){.M = M, .N = N, .K = K, .has_bias = true, .prec = QS_PREC_FP32};
    size_t wsb;
    CHECK(be->ops->linear_plan(be, &c.d, &c.plan, &wsb));
    c.ws = qs_host_alloc(wsb);
    mm_init(&c, LV_MM_DEFAULT, NULL);
    mm_init(&c, LV_MM_GEMM, "gemm");
    ip_init(&c);
    size_t scratch = 0;
    for (int v = 1; v < LV_COUNT; v++)
        for (int k = 0; k < 3; k++)
            if (c.prim[v][k].scratch_bytes > scratch) scratch = c.prim[v][k].scratch_bytes;
    c.scratch = qs_host_alloc(scratch + 64);
    const int64_t nout[3] = {M * N, M * K, N * K};
    c.x = falloc(M * K), c.w = falloc(N * K), c.dy = falloc(M * N), c.b = falloc(N), c.db = falloc(N);
    for (int v = 0; v < LV_COUNT; v++)
        for (int k = 0; k < 3; k++) c.out[v][k] = falloc(nout[k]);
    fill(c.x, M * K, 5), fill(c.w, N * K, 6), fill(c.dy, M * N, 7), fill(c.b, N, 8);
    const char *dir[3] = {"fwd", "bwd_data", "bwd_weights"};
    for (int k = 0; k < 3; k++) {
        double t[LV_COUNT];
        median_multi_ms(lin_fns[k], LV_COUNT, &c, t);
        printf("linear M%lld_K%lld_N%lld %-12s", (long long)M, (long long)K, (long long)N, dir[k]);
        for (int v = 0; v < LV_COUNT; v++) printf("  %s %7.3f ms", lv_name[v], t[v]);
        double diff = 0.0;
        for (int v = 1; v < LV_COUNT; v++) diff = fmax(diff, max_rel_diff(c.out[v][k], c.out[0][k], nout[k]));
        printf("  maxdiff %.1e  [backend: %s; default: %s]\n", diff, qs_cpu_linear_impl_name(c.plan, k),
               qs_dnnl_prim_impl(&c.prim[LV_MM_DEFAULT][k]));
    }
    be->ops->plan_destroy(be, c.plan);
    for (int v = 0; v < LV_COUNT; v++)
        for (int k = 0; k < 3; k++) {
            qs_dnnl_prim_destroy(&c.prim[v][k]);
            qs_host_free(c.out[v][k]);
        }
    float *bufs[] = {c.x, c.w, c.dy, c.b, c.db};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) qs_host_free(bufs[i]);
    qs_host_free(c.ws);
    qs_host_free(c.scratch);
}

static qs_conv_desc conv(int64_t H, int64_t C, int64_t K, int64_t R, int64_t stride, int64_t pad) {
    return (qs_conv_desc){.N = 128, .H = H, .W = H, .C = C, .K = K, .R = R, .S = R, .stride_h = stride,
                          .stride_w = stride, .pad_h = pad, .pad_w = pad, .has_bias = true, .prec = QS_PREC_FP32};
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2) g_reps = atoi(argv[2]);
    if (g_reps < 1) g_reps = 1;
    qs_backend *be = NULL;
    CHECK(qs_backend_cpu_create(threads, &be));
    printf("# bench_conv_choice: threads=%d (0 = OpenMP default), median of %d reps after 1 warm-up, FP32\n",
           threads, g_reps);
    bench_linear(be, 128, 3136, 1024);
    bench_linear(be, 128, 1024, 10);
    bench_conv(be, "cnn1_28px_1to32_5x5", conv(28, 1, 32, 5, 1, 2));
    bench_conv(be, "cnn2_14px_32to64_5x5", conv(14, 32, 64, 5, 1, 2));
    bench_conv(be, "res_28px_16to16_s1", conv(28, 16, 16, 3, 1, 1));
    bench_conv(be, "res_28px_16to32_s2", conv(28, 16, 32, 3, 2, 1));
    bench_conv(be, "res_14px_32to32_s1", conv(14, 32, 32, 3, 1, 1));
    bench_conv(be, "res_14px_32to64_s2", conv(14, 32, 64, 3, 2, 1));
    bench_conv(be, "res_7px_64to64_s1", conv(7, 64, 64, 3, 1, 1));
    be->ops->destroy(be);
    return 0;
}
