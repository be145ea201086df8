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

#include "core/backend.h"
#include "core/timer.h"
#include "cpu/dnnl_util.h"
#include "qsync/rng.h"
#include "qsync/tensor.h"

/* The bench reaches into the CPU backend for its oneDNN context (same engine/stream). */
#include "cpu/cpu_backend.h"

static int g_reps = 7;

#define CHECK(expr)                                                                                 \
    do {                                                                                            \
        qs_status st_ = (expr);                                                                     \
        if (st_ != QS_OK) {                                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr, qs_status_name(st_), \
                    qs_last_error());                                                               \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

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

static double median_ms(bench_fn fn, void *ctx) {
    double t[64];
    int n = g_reps < 64 ? g_reps : 64;
    fn(ctx); /* warm-up */
    for (int i = 0; i < n; i++) {
        double t0 = qs_now_ms();
        fn(ctx);
        t[i] = qs_now_ms() - t0;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0, scale = 1e-30;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m / scale;
}

/* ------------------------------------------------------------------ conv: im2col variant */

typedef struct im2col_conv {
    qs_conv_desc d;
    qs_dnnl_prim fwd;   /* Y (NPQ,K) = col (NPQ,RSC) · W'ᵀ (RSC,K) + b */
    qs_dnnl_prim bwd;   /* dcol (NPQ,RSC) = dY (NPQ,K) · W' (K,RSC) */
    qs_dnnl_prim wgt;   /* dW' (K,RSC) = dYᵀ (K,NPQ) · col (NPQ,RSC) */
    float *col, *wt;    /* col buffer, W' = weights as (K,R,S,C) */
    void *scratch;
} im2col_conv;

static void mm(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, int64_t m, int64_t k, int64_t n, const int64_t as[2],
               const int64_t bs[2], bool bias) {
    dnnl_memory_desc_t a, b, c, bm;
    const int64_t ad[2] = {m, k}, bd[2] = {k, n}, cd[2] = {m, n}, cs[2] = {n, 1}, bbd[2] = {1, n};
    CHECK(qs_dnnl_md_strided(&a, 2, ad, as));
    CHECK(qs_dnnl_md_strided(&b, 2, bd, bs));
    CHECK(qs_dnnl_md_strided(&c, 2, cd, cs));
    CHECK(qs_dnnl_md_strided(&bm, 2, bbd, cs));
    dnnl_matmul_desc_t md;
    CHECK(qs_dnnl_check(dnnl_matmul_desc_init(&md, &a, &b, bias ? &bm : NULL, &c), "matmul desc"));
    const int ids_b[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
    const int ids[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    CHECK(qs_dnnl_prim_create(p, ctx, &md, NULL, NULL, bias ? ids_b : ids, bias ? 4 : 3, "matmul"));
}

static void im2col_init(im2col_conv *ic, const qs_dnnl_ctx *ctx, const qs_conv_desc *d) {
    memset(ic, 0, sizeof *ic);
    ic->d = *d;
    int64_t rows = d->N * d->P * d->Q, kk = d->R * d->S * d->C;
    const int64_t row_kk[2] = {kk, 1}, col_kk[2] = {1, kk}, row_k[2] = {d->K, 1}, col_k[2] = {1, d->K};
    mm(&ic->fwd, ctx, rows, kk, d->K, row_kk, col_kk, true);
    mm(&ic->bwd, ctx, rows, d->K, kk, row_k, row_kk, false);
    mm(&ic->wgt, ctx, d->K, rows, kk, col_k, row_kk, false);
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
    CHECK(c->be->ops->conv_forward(c->be, c->plan, NULL, c->x, c->w, c->b, c->y, c->ws));
}
static void dnnl_bwd(void *c_) {
    conv_case *c = c_;
    CHECK(c->be->ops->conv_backward_data(c->be, c->plan, NULL, c->dy, c->w, c->dx, false, c->ws));
}
static void dnnl_wgt(void *c_) {
    conv_case *c = c_;
    CHECK(c->be->ops->conv_backward_weights(c->be, c->plan, NULL, c->dy, c->x, c->dw, c->db, c->ws));
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
        double t0 = median_ms(fns[k][0], &c), t1 = median_ms(fns[k][1], &c);
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

/* ------------------------------------------------------------ linear: inner product variant */

typedef struct linear_case {
    qs_backend *be;
    const qs_dnnl_ctx *ctx;
    qs_linear_desc d;
    void *plan, *ws, *ip_scratch;
    qs_dnnl_prim ip_fwd, ip_bwd, ip_wgt;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db, *y2, *dx2, *dw2, *db2;
} linear_case;

static void ip_init(linear_case *c) {
    const qs_linear_desc *d = &c->d;
    dnnl_memory_desc_t src, wei, bias, dst;
    const int64_t sd[2] = {d->M, d->K}, wd[2] = {d->N, d->K}, bd[1] = {d->N}, dd[2] = {d->M, d->N};
    CHECK(qs_dnnl_md_tag(&src, 2, sd, dnnl_nc));
    CHECK(qs_dnnl_md_tag(&wei, 2, wd, dnnl_oi));
    CHECK(qs_dnnl_md_tag(&bias, 1, bd, dnnl_a));
    CHECK(qs_dnnl_md_tag(&dst, 2, dd, dnnl_nc));
    dnnl_inner_product_desc_t f, b, w;
    CHECK(qs_dnnl_check(dnnl_inner_product_forward_desc_init(&f, dnnl_forward_training, &src, &wei, &bias, &dst),
                        "ip fwd"));
    const int fids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
    CHECK(qs_dnnl_prim_create(&c->ip_fwd, c->ctx, &f, NULL, NULL, fids, 4, "ip fwd"));
    CHECK(qs_dnnl_check(dnnl_inner_product_backward_data_desc_init(&b, &src, &wei, &dst), "ip bwd"));
    const int bids[3] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    CHECK(qs_dnnl_prim_create(&c->ip_bwd, c->ctx, &b, NULL, c->ip_fwd.pd, bids, 3, "ip bwd"));
    CHECK(qs_dnnl_check(dnnl_inner_product_backward_weights_desc_init(&w, &src, &wei, &bias, &dst), "ip wgt"));
    const int wids[4] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
    CHECK(qs_dnnl_prim_create(&c->ip_wgt, c->ctx, &w, NULL, c->ip_fwd.pd, wids, 4, "ip wgt"));
    size_t s = c->ip_fwd.scratch_bytes;
    if (c->ip_bwd.scratch_bytes > s) s = c->ip_bwd.scratch_bytes;
    if (c->ip_wgt.scratch_bytes > s) s = c->ip_wgt.scratch_bytes;
    c->ip_scratch = qs_host_alloc(s + 64);
    printf("linear M=%lld K=%lld N=%lld: inner_product impls fwd=%s bwd=%s wgt=%s; matmul impl via backend\n",
           (long long)d->M, (long long)d->K, (long long)d->N, qs_dnnl_prim_impl(&c->ip_fwd),
           qs_dnnl_prim_impl(&c->ip_bwd), qs_dnnl_prim_impl(&c->ip_wgt));
}

static void mm_fwd(void *c_) {
    linear_case *c = c_;
    CHECK(c->be->ops->linear_forward(c->be, c->plan, NULL, c->x, c->w, c->b, c->y, c->ws));
}
static void mm_bwd(void *c_) {
    linear_case *c = c_;
    CHECK(c->be->ops->linear_backward_data(c->be, c->plan, NULL, c->dy, c->w, c->dx, false, c->ws));
}
static void mm_wgt(void *c_) {
    linear_case *c = c_;
    CHECK(c->be->ops->linear_backward_weights(c->be, c->plan, NULL, c->dy, c->x, c->dw, c->db, c->ws));
}
static void ip_fwd(void *c_) {
    linear_case *c = c_;
    void *h[4] = {c->x, c->w, c->b, c->y2};
    CHECK(qs_dnnl_prim_exec(&c->ip_fwd, c->ctx, h, c->ip_scratch, "ip fwd"));
}
static void ip_bwd(void *c_) {
    linear_case *c = c_;
    void *h[3] = {c->dy, c->w, c->dx2};
    CHECK(qs_dnnl_prim_exec(&c->ip_bwd, c->ctx, h, c->ip_scratch, "ip bwd"));
}
static void ip_wgt(void *c_) {
    linear_case *c = c_;
    void *h[4] = {c->x, c->dy, c->dw2, c->db2};
    CHECK(qs_dnnl_prim_exec(&c->ip_wgt, c->ctx, h, c->ip_scratch, "ip wgt"));
}

static void bench_linear(qs_backend *be, int64_t M, int64_t K, int64_t N) {
    linear_case c;
    memset(&c, 0, sizeof c);
    c.be = be;
    c.ctx = &qs_cpu_be(be)->dnnl;
    c.d = (qs_linear_desc){.M = M, .N = N, .K = K, .has_bias = true, .prec = QS_PREC_FP32};
    size_t wsb;
    CHECK(be->ops->linear_plan(be, &c.d, &c.plan, &wsb));
    c.ws = qs_host_alloc(wsb);
    ip_init(&c);
    c.x = falloc(M * K), c.dx = falloc(M * K), c.dx2 = falloc(M * K);
    c.w = falloc(N * K), c.dw = falloc(N * K), c.dw2 = falloc(N * K);
    c.y = falloc(M * N), c.y2 = falloc(M * N), c.dy = falloc(M * N);
    c.b = falloc(N), c.db = falloc(N), c.db2 = falloc(N);
    fill(c.x, M * K, 5), fill(c.w, N * K, 6), fill(c.dy, M * N, 7), fill(c.b, N, 8);
    bench_fn fns[3][2] = {{mm_fwd, ip_fwd}, {mm_bwd, ip_bwd}, {mm_wgt, ip_wgt}};
    const char *dir[3] = {"fwd", "bwd_data", "bwd_weights"};
    char name[64];
    snprintf(name, sizeof name, "M%lld_K%lld_N%lld", (long long)M, (long long)K, (long long)N);
    for (int k = 0; k < 3; k++) {
        double t0 = median_ms(fns[k][0], &c), t1 = median_ms(fns[k][1], &c);
        double diff = k == 0 ? max_rel_diff(c.y2, c.y, M * N) : k == 1 ? max_rel_diff(c.dx2, c.dx, M * K)
                                                                       : max_rel_diff(c.dw2, c.dw, N * K);
        printf("linear %-20s %-12s matmul %8.3f ms  inner_product %8.3f ms  ip/matmul %5.2f  maxdiff %.1e  [%s]\n",
               name, dir[k], t0, t1, t1 / t0, diff, qs_cpu_linear_impl_name(c.plan, k));
    }
    be->ops->plan_destroy(be, c.plan);
    qs_dnnl_prim_destroy(&c.ip_fwd);
    qs_dnnl_prim_destroy(&c.ip_bwd);
    qs_dnnl_prim_destroy(&c.ip_wgt);
    float *bufs[] = {c.x, c.dx, c.dx2, c.w, c.dw, c.dw2, c.y, c.y2, c.dy, c.b, c.db, c.db2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) qs_host_free(bufs[i]);
    qs_host_free(c.ws);
    qs_host_free(c.ip_scratch);
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
