/* tests/test_cpu_ops.c — every op of the CPU backend (src/cpu) against naive references.
 *
 * References are written here, in double precision, straight from the definitions (PyTorch
 * semantics), over small random shapes with odd sizes, strides 2, padding and non-square
 * kernels. Tolerances come from tests/support/check.h: element i passes when it is finite and
 * |a_i − r_i| ≤ atol + rtol·|r_i| with rtol = 4·u·sqrt(K) (u = 2^-24, K the reduction length
 * the value depends on; rounding errors of a K-term FP32 sum grow like sqrt(K)·u) and
 * atol = rtol·max|r| (cancellation to ~0 is judged against the tensor's scale). Ops without
 * rounding (ReLU, copies, transposes, max pooling, casts of exact values) are compared
 * bitwise. Every buffer a test allocates is released by the per-test teardown. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "core/numfmt.h"
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "graph_helpers.h"
#include "qsync/rng.h"
#include "qsync/status.h"
#include "bits.h"

/* ------------------------------------------------------------------ fixtures and helpers */

/* An FP32 operand of the backend's GEMM-like ops. */
#define F32OP(p) (&(qs_operand){(p), QS_F32, NULL, false, NULL})

static qs_backend *g_be;
#define OPS (g_be->ops)
#define STREAM (g_be->ops->default_stream(g_be))

#define MAX_ALLOCS 1024
static void *g_allocs[MAX_ALLOCS];
static int g_nallocs;
static void *g_plans[16];
static int g_nplans;

/* Zeroed test memory aligned like backend allocations (64 B), freed by teardown. */
static void *talloc(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    assert_non_null(p);
    memset(p, 0, rounded ? rounded : 64);
    assert_true(g_nallocs < MAX_ALLOCS);
    g_allocs[g_nallocs++] = p;
    return p;
}
static float *tf(int64_t n) { return talloc((size_t)n * sizeof(float)); }
static double *td(int64_t n) { return talloc((size_t)n * sizeof(double)); }
/* Register plan for destruction by the teardown; returns a zeroed workspace of ws_bytes for it
 * (test memory, NULL when it needs none). */
static void *track_plan(void *plan, size_t ws_bytes) {
    assert_true(g_nplans < 16);
    g_plans[g_nplans++] = plan;
    return ws_bytes ? talloc(ws_bytes) : NULL;
}

static int group_setup(void **state) { return qs_test_backend_create(2, &g_be); }
static int group_teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    return 0;
}
static int test_teardown(void **state) {
    for (int i = 0; i < g_nplans; i++) OPS->plan_destroy(g_be, g_plans[i]);
    for (int i = 0; i < g_nallocs; i++) free(g_allocs[i]);
    g_nplans = g_nallocs = 0;
    return 0;
}

static qs_rng g_rng;
static void seed(uint64_t s) { qs_rng_init(&g_rng, qs_rng_key(s, "test_cpu_ops", 0), 0); }
static void fill(float *p, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * qs_rng_uniform(&g_rng);
}
static float *rnd(int64_t n, float lo, float hi) {
    float *p = tf(n);
    fill(p, n, lo, hi);
    return p;
}
static float *copy_of(const float *x, int64_t n) {
    float *p = tf(n);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}
/* double → float reference (rounded once), optionally added to a float base (accumulate). */
static float *to_ref(const double *r, int64_t n, const float *base) {
    float *p = tf(n);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(r[i] + (base ? (double)base[i] : 0.0));
    return p;
}

#define CHECK_FP32(what, got, ref, n, K) assert_true(qs_check_fp32((what), (got), (ref), (n), (K)))
#define CHECK_EQ(what, got, ref, n) assert_true(qs_check_equal_f32((what), (got), (ref), (n)))

/* ------------------------------------------------------------------------ memory, stream */

static void test_memory(void **state) {
    assert_string_equal(OPS->name, "cpu");
    assert_non_null(STREAM);
    void *p = NULL;
    ASSERT_OK(OPS->alloc(g_be, 1000, &p));
    assert_true(((uintptr_t)p % 64) == 0);
    for (int i = 0; i < 1000; i++) assert_int_equal(((unsigned char *)p)[i], 0);
    char src[1000], back[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)(i * 7);
    ASSERT_OK(OPS->copy_h2d(g_be, STREAM, p, src, sizeof src));
    void *q = NULL;
    ASSERT_OK(OPS->alloc(g_be, 1000, &q));
    ASSERT_OK(OPS->copy_d2d(g_be, STREAM, q, p, sizeof src));
    ASSERT_OK(OPS->copy_d2h(g_be, STREAM, back, q, sizeof back));
    assert_memory_equal(src, back, sizeof src);
    ASSERT_OK(OPS->memset_zero(g_be, STREAM, q, 1000));
    ASSERT_OK(OPS->stream_sync(g_be, STREAM));
    for (int i = 0; i < 1000; i++) assert_int_equal(((unsigned char *)q)[i], 0);
    OPS->free(g_be, p);
    OPS->free(g_be, q);
    assert_int_equal(OPS->copy_h2d(g_be, STREAM, NULL, src, 4), QS_ERR_INVALID_ARG);
}

/* -------------------------------------------------------------------------------- linear */

typedef struct lin_shape {
    int64_t M, N, K;
    bool bias;
} lin_shape;

static void check_linear(lin_shape sh) {
    const int64_t M = sh.M, N = sh.N, K = sh.K;
    qs_linear_desc d = {.M = M, .N = N, .K = K, .has_bias = sh.bias, .prec = QS_PREC_FP32};
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->linear_plan(g_be, &d, &plan, &wsb));
    void *ws = track_plan(plan, wsb);
    float *x = rnd(M * K, -1, 1), *w = rnd(N * K, -1, 1), *b = sh.bias ? rnd(N, -1, 1) : NULL;
    float *dy = rnd(M * N, -1, 1), *y = tf(M * N), *dx = tf(M * K), *dw = tf(N * K), *db = sh.bias ? tf(N) : NULL;
    double *ry = td(M * N), *rdx = td(M * K), *rdw = td(N * K), *rdb = td(N);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = b ? b[n] : 0.0;
            for (int64_t k = 0; k < K; k++) s += (double)x[m * K + k] * w[n * K + k];
            ry[m * N + n] = s;
        }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++) s += (double)dy[m * N + n] * w[n * K + k];
            rdx[m * K + k] = s;
        }
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t m = 0; m < M; m++) s += (double)dy[m * N + n] * x[m * K + k];
            rdw[n * K + k] = s;
        }
        double s = 0;
        for (int64_t m = 0; m < M; m++) s += dy[m * N + n];
        rdb[n] = s;
    }
    char what[96];
    ASSERT_OK(OPS->linear_forward(g_be, plan, STREAM, F32OP(x), F32OP(w), b, y, ws));
    snprintf(what, sizeof what, "linear fwd M%lld N%lld K%lld", (long long)M, (long long)N, (long long)K);
    CHECK_FP32(what, y, to_ref(ry, M * N, NULL), M * N, (double)K + 1);
    ASSERT_OK(OPS->linear_backward_data(g_be, plan, STREAM, F32OP(dy), F32OP(w), dx, false, ws));
    snprintf(what, sizeof what, "linear bwd_data M%lld N%lld K%lld", (long long)M, (long long)N, (long long)K);
    CHECK_FP32(what, dx, to_ref(rdx, M * K, NULL), M * K, (double)N);
    float *dx0 = rnd(M * K, -1, 1), *dxa = copy_of(dx0, M * K);
    ASSERT_OK(OPS->linear_backward_data(g_be, plan, STREAM, F32OP(dy), F32OP(w), dxa, true, ws));
    CHECK_FP32("linear bwd_data accumulate", dxa, to_ref(rdx, M * K, dx0), M * K, (double)N + 1);
    ASSERT_OK(OPS->linear_backward_weights(g_be, plan, STREAM, F32OP(dy), F32OP(x), dw, db, ws));
    snprintf(what, sizeof what, "linear bwd_weights M%lld N%lld K%lld", (long long)M, (long long)N, (long long)K);
    CHECK_FP32(what, dw, to_ref(rdw, N * K, NULL), N * K, (double)M);
    if (sh.bias) CHECK_FP32("linear bias grad", db, to_ref(rdb, N, NULL), N, (double)M);
}

static void test_linear(void **state) {
    seed(1);
    const lin_shape shapes[] = {
        {1, 1, 1, true}, {7, 5, 13, true}, {33, 17, 65, false}, {128, 10, 300, true}, {3, 129, 31, true},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_linear(shapes[i]);
}

/* ---------------------------------------------------------------------------------- conv */

#define X_AT(n, h, w, c) ((((n) * d->H + (h)) * d->W + (w)) * d->C + (c))
#define Y_AT(n, p, q, k) ((((n) * d->P + (p)) * d->Q + (q)) * d->K + (k))
#define W_AT(k, c, r, s) ((((k) * d->C + (c)) * d->R + (r)) * d->S + (s))

/* Naive conv references: y = conv(x, w) + b, dx = convᵀ(dy, w), dw = corr(x, dy), db = Σ dy. */
static void conv_ref(const qs_conv_desc *d, const float *x, const float *w, const float *b, const float *dy,
                     double *y, double *dx, double *dw, double *db) {
    const int64_t nx = d->N * d->H * d->W * d->C, nw = d->K * d->C * d->R * d->S;
    memset(dx, 0, (size_t)nx * sizeof(double));
    memset(dw, 0, (size_t)nw * sizeof(double));
    memset(db, 0, (size_t)d->K * sizeof(double));
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++)
                for (int64_t k = 0; k < d->K; k++) {
                    double s = b ? b[k] : 0.0, g = dy[Y_AT(n, p, q, k)];
                    db[k] += g;
                    for (int64_t r = 0; r < d->R; r++) {
                        int64_t h = p * d->stride_h - d->pad_h + r;
                        if (h < 0 || h >= d->H) continue;
                        for (int64_t sx = 0; sx < d->S; sx++) {
                            int64_t wc = q * d->stride_w - d->pad_w + sx;
                            if (wc < 0 || wc >= d->W) continue;
                            for (int64_t c = 0; c < d->C; c++) {
                                s += (double)x[X_AT(n, h, wc, c)] * w[W_AT(k, c, r, sx)];
                                dx[X_AT(n, h, wc, c)] += g * w[W_AT(k, c, r, sx)];
                                dw[W_AT(k, c, r, sx)] += g * x[X_AT(n, h, wc, c)];
                            }
                        }
                    }
                    y[Y_AT(n, p, q, k)] = s;
                }
}

static void check_conv(qs_conv_desc d0) {
    qs_conv_desc dd = d0, *d = &dd;
    ASSERT_OK(qs_conv_desc_finish(d));
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->conv_plan(g_be, d, &plan, &wsb));
    void *ws = track_plan(plan, wsb);
    const int64_t nx = d->N * d->H * d->W * d->C, ny = d->N * d->P * d->Q * d->K, nw = d->K * d->C * d->R * d->S;
    float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = d->has_bias ? rnd(d->K, -1, 1) : NULL;
    float *dy = rnd(ny, -1, 1), *y = tf(ny), *dx = tf(nx), *dw = tf(nw), *db = d->has_bias ? tf(d->K) : NULL;
    double *ry = td(ny), *rdx = td(nx), *rdw = td(nw), *rdb = td(d->K);
    conv_ref(d, x, w, b, dy, ry, rdx, rdw, rdb);
    char what[128];
    snprintf(what, sizeof what, "conv N%lld %lldx%lldx%lld->%lld k%lldx%lld s%lldx%lld p%lldx%lld", (long long)d->N,
             (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K, (long long)d->R, (long long)d->S,
             (long long)d->stride_h, (long long)d->stride_w, (long long)d->pad_h, (long long)d->pad_w);
    printf("%s (P=%lld Q=%lld, workspace %zu B)\n", what, (long long)d->P, (long long)d->Q, wsb);
    ASSERT_OK(OPS->conv_forward(g_be, plan, STREAM, F32OP(x), F32OP(w), b, y, ws));
    CHECK_FP32("conv fwd", y, to_ref(ry, ny, NULL), ny, (double)(d->C * d->R * d->S + 1));
    const double kbd = (double)(d->K * d->R * d->S);
    ASSERT_OK(OPS->conv_backward_data(g_be, plan, STREAM, F32OP(dy), F32OP(w), dx, false, ws));
    CHECK_FP32("conv bwd_data", dx, to_ref(rdx, nx, NULL), nx, kbd);
    float *dx0 = rnd(nx, -1, 1), *dxa = copy_of(dx0, nx);
    ASSERT_OK(OPS->conv_backward_data(g_be, plan, STREAM, F32OP(dy), F32OP(w), dxa, true, ws));
    CHECK_FP32("conv bwd_data accumulate", dxa, to_ref(rdx, nx, dx0), nx, kbd + 1);
    ASSERT_OK(OPS->conv_backward_weights(g_be, plan, STREAM, F32OP(dy), F32OP(x), dw, db, ws));
    const double kbw = (double)(d->N * d->P * d->Q);
    CHECK_FP32("conv bwd_weights", dw, to_ref(rdw, nw, NULL), nw, kbw);
    if (db) CHECK_FP32("conv bias grad", db, to_ref(rdb, d->K, NULL), d->K, kbw);
    /* same inputs, same thread count → bitwise same outputs */
    float *dw2 = tf(nw), *y2 = tf(ny);
    ASSERT_OK(OPS->conv_backward_weights(g_be, plan, STREAM, F32OP(dy), F32OP(x), dw2, db, ws));
    ASSERT_OK(OPS->conv_forward(g_be, plan, STREAM, F32OP(x), F32OP(w), b, y2, ws));
    assert_memory_equal(dw, dw2, (size_t)nw * sizeof(float));
    assert_memory_equal(y, y2, (size_t)ny * sizeof(float));
}

static qs_conv_desc cd(int64_t N, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R, int64_t S, int64_t sh,
                       int64_t sw, int64_t ph, int64_t pw, bool bias) {
    return (qs_conv_desc){.N = N, .H = H, .W = W, .C = C, .K = K, .R = R, .S = S, .stride_h = sh, .stride_w = sw,
                          .pad_h = ph, .pad_w = pw, .has_bias = bias, .prec = QS_PREC_FP32};
}

static void test_conv(void **state) {
    seed(2);
    check_conv(cd(2, 7, 9, 3, 5, 3, 3, 1, 1, 1, 1, true));       /* odd sizes, same padding */
    check_conv(cd(3, 11, 8, 5, 7, 3, 2, 2, 1, 1, 0, true));      /* non-square kernel, mixed stride */
    check_conv(cd(2, 10, 10, 16, 8, 5, 5, 2, 2, 2, 2, false));   /* stride 2, pad 2, no bias */
    check_conv(cd(2, 5, 6, 1, 4, 1, 1, 1, 1, 0, 0, true));       /* 1x1, single input channel */
    check_conv(cd(2, 14, 14, 32, 16, 3, 3, 2, 2, 1, 1, true));   /* ResNet-style downsampling */
    check_conv(cd(1, 12, 12, 1, 32, 5, 5, 1, 1, 2, 2, true));    /* first layer of the small CNN */
}

/* ------------------------------------------------------------- BF16 output of linear, conv */

/* x (rows, cols) quantized to dt by the backend's quantize op (per row when per_row), as an
 * operand in test memory. */
static qs_operand quantized(const float *x, int64_t rows, int64_t cols, qs_dtype dt, bool per_row) {
    void *data = talloc((size_t)(rows * cols) * qs_dtype_size(dt));
    float *scales = tf(rows);
    ASSERT_OK(OPS->quantize(g_be, STREAM, rows, cols, x, NULL, dt, data, scales, per_row, NULL, NULL, NULL));
    const bool scaled = dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2;
    return (qs_operand){.data = data, .dt = dt, .scale = scaled ? scales : NULL, .per_row = per_row};
}

/* yb (BF16 bits) must be yf rounded to nearest even, bit for bit. */
static void check_bf16_of(const char *what, const uint16_t *yb, const float *yf, int64_t n) {
    assert_true(n > 0);
    uint16_t *want = talloc((size_t)n * sizeof *want);
    ASSERT_OK(qs_f32_to_bf16(n, yf, want, NULL));
    for (int64_t i = 0; i < n; i++)
        if (yb[i] != want[i])
            fail_msg("%s: y[%lld] = bf16 0x%04x, expected 0x%04x (FP32 output %a rounded to nearest even)", what,
                     (long long)i, yb[i], want[i], (double)yf[i]);
}

/* The weight scales are per output channel for INT8 with a bias (the epilogue's per-column
 * path), per tensor otherwise. */
static bool bf16_out_per_row(qs_precision p, bool bias) { return p == QS_PREC_INT8 && bias; }

/* dx of backward-data planned with dx_dt BF16 (plan pb): bitwise the RNE rounding of dx from the
 * F32 plan pf on the same operands (w per tensor, as backward-data needs); accumulating into it
 * is refused. `run` is the backend's linear_ or conv_backward_data. */
typedef qs_status (*backward_data_fn)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                      const qs_operand *w, void *dx, bool accumulate, void *ws);
static void check_bf16_dx(const char *what, backward_data_fn run, void *pf, size_t wf, void *pb, size_t wb,
                          qs_precision p, int64_t dy_rows, int64_t dy_cols, int64_t w_rows, int64_t w_cols,
                          int64_t nx) {
    const qs_operand dy = quantized(rnd(dy_rows * dy_cols, -1, 1), dy_rows, dy_cols,
                                    qs_precision_operand_dtype(p, true), false);
    const qs_operand w = quantized(rnd(w_rows * w_cols, -0.5f, 0.5f), w_rows, w_cols,
                                   qs_precision_operand_dtype(p, false), false);
    float *dxf = tf(nx);
    uint16_t *dxb = talloc((size_t)nx * sizeof *dxb);
    void *wsb = wb ? talloc(wb) : NULL;
    ASSERT_OK(run(g_be, pf, STREAM, &dy, &w, dxf, false, wf ? talloc(wf) : NULL));
    ASSERT_OK(run(g_be, pb, STREAM, &dy, &w, dxb, false, wsb));
    char label[200];
    snprintf(label, sizeof label, "%s: backward-data dx_dt bf16", what);
    check_bf16_of(label, dxb, dxf, nx);
    qs_error_clear();
    assert_int_equal(run(g_be, pb, STREAM, &dy, &w, dxb, true, wsb), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "accumulate"));
}

/* Linear forward (backward-data) at precision p with y_dt (dx_dt) BF16: bitwise the RNE rounding
 * of the output of the same plan with F32 outputs on the same operands. */
static void check_linear_bf16_out(qs_precision p, int64_t M, int64_t N, int64_t K, bool bias) {
    qs_linear_desc df = {.M = M, .N = N, .K = K, .has_bias = bias, .prec = p}, db = df;
    db.y_dt = QS_BF16;
    db.dx_dt = QS_BF16;
    void *pf = NULL, *pb = NULL;
    size_t wf = 0, wb = 0;
    ASSERT_OK(OPS->linear_plan(g_be, &df, &pf, &wf));
    ASSERT_OK(OPS->linear_plan(g_be, &db, &pb, &wb));
    const qs_dtype fdt = qs_precision_operand_dtype(p, false);
    const qs_operand x = quantized(rnd(M * K, -2, 2), M, K, fdt, false);
    const qs_operand w = quantized(rnd(N * K, -0.5f, 0.5f), N, K, fdt, bf16_out_per_row(p, bias));
    float *b = bias ? rnd(N, -1, 1) : NULL, *yf = tf(M * N);
    uint16_t *yb = talloc((size_t)(M * N) * sizeof *yb);
    ASSERT_OK(OPS->linear_forward(g_be, pf, STREAM, &x, &w, b, yf, wf ? talloc(wf) : NULL));
    ASSERT_OK(OPS->linear_forward(g_be, pb, STREAM, &x, &w, b, yb, wb ? talloc(wb) : NULL));
    char what[96];
    snprintf(what, sizeof what, "%s linear fwd y_dt bf16 M%lld N%lld K%lld%s", qs_precision_name(p), (long long)M,
             (long long)N, (long long)K, bias ? " bias" : "");
    check_bf16_of(what, yb, yf, M * N);
    check_bf16_dx(what, OPS->linear_backward_data, pf, wf, pb, wb, p, M, N, N, K, M * K);
    OPS->plan_destroy(g_be, pf);
    OPS->plan_destroy(g_be, pb);
}

/* Conv forward and backward-data at precision p with y_dt and dx_dt BF16, as
 * check_linear_bf16_out. */
static void check_conv_bf16_out(qs_precision p, qs_conv_desc d0) {
    qs_conv_desc df = d0, *d = &df;
    df.prec = p;
    ASSERT_OK(qs_conv_desc_finish(d));
    qs_conv_desc db = df;
    db.y_dt = QS_BF16;
    db.dx_dt = QS_BF16;
    void *pf = NULL, *pb = NULL;
    size_t wf = 0, wb = 0;
    ASSERT_OK(OPS->conv_plan(g_be, &df, &pf, &wf));
    ASSERT_OK(OPS->conv_plan(g_be, &db, &pb, &wb));
    const int64_t NHW = d->N * d->H * d->W, CRS = d->C * d->R * d->S, ny = d->N * d->P * d->Q * d->K;
    const qs_dtype fdt = qs_precision_operand_dtype(p, false);
    const qs_operand x = quantized(rnd(NHW * d->C, -2, 2), NHW, d->C, fdt, false);
    const qs_operand w = quantized(rnd(d->K * CRS, -0.5f, 0.5f), d->K, CRS, fdt, bf16_out_per_row(p, d->has_bias));
    float *b = d->has_bias ? rnd(d->K, -1, 1) : NULL, *yf = tf(ny);
    uint16_t *yb = talloc((size_t)ny * sizeof *yb);
    ASSERT_OK(OPS->conv_forward(g_be, pf, STREAM, &x, &w, b, yf, wf ? talloc(wf) : NULL));
    ASSERT_OK(OPS->conv_forward(g_be, pb, STREAM, &x, &w, b, yb, wb ? talloc(wb) : NULL));
    char what[160];
    snprintf(what, sizeof what, "%s conv fwd y_dt bf16 (%s) C%lld K%lld k%lldx%lld s%lld%s", qs_precision_name(p),
             qs_cpu_conv_impl_name(pb, 0), (long long)d->C, (long long)d->K, (long long)d->R, (long long)d->S,
             (long long)d->stride_h, d->has_bias ? " bias" : "");
    printf("%s\n", what);
    check_bf16_of(what, yb, yf, ny);
    check_bf16_dx(what, OPS->conv_backward_data, pf, wf, pb, wb, p, d->N * d->P * d->Q, d->K, d->K, CRS,
                  NHW * d->C);
    OPS->plan_destroy(g_be, pf);
    OPS->plan_destroy(g_be, pb);
}

/* The CPU precisions a y_dt BF16 forward is checked at. */
static const qs_precision g_bf16_out_precs[] = {QS_PREC_FP32, QS_PREC_BF16, QS_PREC_INT8, QS_PREC_FP16, QS_PREC_FP8};
#define N_BF16_OUT_PRECS (sizeof g_bf16_out_precs / sizeof g_bf16_out_precs[0])

/* The output dtypes (y_dt, dx_dt) a plan must refuse (i < 3): F16, S8 and an out-of-range value. */
static qs_dtype y_dt_bad(int i) { return i == 0 ? QS_F16 : i == 1 ? QS_S8 : QS_DTYPE_COUNT; }

/* A planning call st refused such a dtype: QS_ERR_UNSUPPORTED, no plan (*plan, read after the
 * call), the message naming it. */
static void expect_dtype_refused(qs_status st, void *const *plan, const char *name) {
    assert_int_equal(st, QS_ERR_UNSUPPORTED);
    assert_null(*plan);
    assert_non_null(strstr(qs_last_error(), name));
    qs_error_clear();
}

/* Linear y_dt (dx_dt) BF16: the FP32 result (bias included) rounded to nearest even at every CPU
 * precision (paths f32, bf16, s8 + epilogue with per-tensor and per-channel weight scales,
 * emulated fp16/fp8), with and without bias; any other y_dt is refused when planning. */
static void test_linear_bf16_output(void **state) {
    seed(15);
    for (size_t i = 0; i < N_BF16_OUT_PRECS; i++)
        for (int bias = 0; bias < 2; bias++) {
            check_linear_bf16_out(g_bf16_out_precs[i], 37, 29, 53, bias);
            check_linear_bf16_out(g_bf16_out_precs[i], 128, 64, 200, bias);
        }
    for (int i = 0; i < 3; i++) {
        qs_linear_desc ld = {.M = 4, .N = 3, .K = 2, .has_bias = true, .prec = QS_PREC_FP32, .y_dt = y_dt_bad(i)};
        void *plan = NULL;
        size_t wsb = 0;
        qs_error_clear();
        expect_dtype_refused(OPS->linear_plan(g_be, &ld, &plan, &wsb), &plan, "y_dt");
        ld.y_dt = QS_F32;
        ld.dx_dt = y_dt_bad(i);
        expect_dtype_refused(OPS->linear_plan(g_be, &ld, &plan, &wsb), &plan, "dx_dt");
    }
}

/* Conv y_dt BF16, as test_linear_bf16_output, over the forward recipes (f32, bf16, s8 with the
 * fused scale, int8 codes as f32 + epilogue for C == 1, emulated fp16/fp8). */
static void test_conv_bf16_output(void **state) {
    seed(16);
    for (size_t i = 0; i < N_BF16_OUT_PRECS; i++)
        for (int bias = 0; bias < 2; bias++) {
            const qs_precision p = g_bf16_out_precs[i];
            check_conv_bf16_out(p, cd(2, 7, 9, 3, 5, 3, 3, 1, 1, 1, 1, bias));    /* 3x3, same padding */
            check_conv_bf16_out(p, cd(1, 12, 12, 1, 32, 5, 5, 1, 1, 2, 2, bias)); /* C == 1, 5x5 */
            check_conv_bf16_out(p, cd(2, 8, 8, 16, 24, 1, 1, 2, 2, 0, 0, bias));  /* 1x1 stride 2 */
        }
    for (int i = 0; i < 3; i++) {
        qs_conv_desc d = cd(1, 8, 8, 3, 4, 3, 3, 1, 1, 1, 1, true);
        ASSERT_OK(qs_conv_desc_finish(&d));
        d.y_dt = y_dt_bad(i);
        void *plan = NULL;
        size_t wsb = 0;
        qs_error_clear();
        expect_dtype_refused(OPS->conv_plan(g_be, &d, &plan, &wsb), &plan, "y_dt");
        d.y_dt = QS_F32;
        d.dx_dt = y_dt_bad(i);
        expect_dtype_refused(OPS->conv_plan(g_be, &d, &plan, &wsb), &plan, "dx_dt");
    }
}

static void test_errors(void **state) {
    /* an empty output is rejected by qs_conv_desc_finish */
    qs_conv_desc d = cd(1, 2, 2, 3, 4, 5, 5, 1, 1, 0, 0, false);
    qs_error_clear();
    assert_int_equal(qs_conv_desc_finish(&d), QS_ERR_INVALID_ARG);
    assert_true(strlen(qs_last_error()) > 0);
    d = cd(1, 8, 8, 3, 0, 3, 3, 1, 1, 1, 1, false);
    assert_int_equal(qs_conv_desc_finish(&d), QS_ERR_INVALID_ARG);
    /* unsupported precisions */
    void *plan = NULL;
    size_t wsb = 0;
    d = cd(1, 8, 8, 3, 4, 3, 3, 1, 1, 1, 1, false);
    ASSERT_OK(qs_conv_desc_finish(&d));
    d.prec = QS_PREC_TF32; /* GPU only */
    assert_int_equal(OPS->conv_plan(g_be, &d, &plan, &wsb), QS_ERR_UNSUPPORTED);
    assert_null(plan);
    assert_non_null(strstr(qs_last_error(), "tf32"));
    qs_linear_desc ld = {.M = 4, .N = 3, .K = 2, .has_bias = false, .prec = QS_PREC_TF32};
    assert_int_equal(OPS->linear_plan(g_be, &ld, &plan, &wsb), QS_ERR_UNSUPPORTED);
    assert_null(plan);
    /* a conv desc whose P,Q were not filled in */
    d.prec = QS_PREC_FP32;
    d.P = 0;
    assert_int_equal(OPS->conv_plan(g_be, &d, &plan, &wsb), QS_ERR_INVALID_ARG);
    /* pooling: padding over half the kernel, empty output */
    qs_pool_desc pd = {.kind = QS_POOL_MAX, .N = 1, .H = 4, .W = 4, .C = 2, .R = 2, .S = 2, .stride_h = 1,
                       .stride_w = 1, .pad_h = 2, .pad_w = 0};
    assert_int_equal(qs_pool_desc_finish(&pd), QS_ERR_INVALID_ARG);
    pd.pad_h = 0;
    pd.R = 5;
    assert_int_equal(qs_pool_desc_finish(&pd), QS_ERR_INVALID_ARG);
    /* a plan of the wrong kind */
    ld.prec = QS_PREC_FP32;
    ASSERT_OK(OPS->linear_plan(g_be, &ld, &plan, &wsb));
    track_plan(plan, 0);
    float buf[64] = {0};
    assert_int_equal(OPS->conv_forward(g_be, plan, STREAM, F32OP(buf), F32OP(buf), NULL, buf, NULL), QS_ERR_INVALID_ARG);
    /* bad arguments of memory-bound ops */
    assert_int_equal(OPS->relu_forward(g_be, STREAM, -1, buf, buf), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->relu_forward(g_be, STREAM, 4, NULL, buf), QS_ERR_INVALID_ARG);
    int32_t bad_label[1] = {7};
    assert_int_equal(OPS->softmax_xent_forward(g_be, STREAM, 1, 5, buf, bad_label, buf, buf), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->cast(g_be, STREAM, 4, buf, QS_F32, buf, QS_S8), QS_ERR_UNSUPPORTED);
    assert_int_equal(OPS->dropout_forward(g_be, STREAM, 4, buf, buf, (uint8_t *)buf, 1.5f, &(qs_dropout_rng){.key = 1}),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->adamw_step(g_be, STREAM, 4, buf, buf, buf, buf, 0.1f, 0.9f, 0.99f, 1e-8f, 0, 0),
                     QS_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------------------- pooling */

static void check_pool(qs_pool_desc p0) {
    qs_pool_desc dd = p0, *d = &dd;
    ASSERT_OK(qs_pool_desc_finish(d));
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->pool_plan(g_be, d, &plan, &wsb));
    void *ws = track_plan(plan, wsb);
    const int64_t nx = d->N * d->H * d->W * d->C, ny = d->N * d->P * d->Q * d->C;
    float *x = rnd(nx, -2, 2), *y = tf(ny), *dy = rnd(ny, -1, 1), *dx = tf(nx);
    int32_t *idx = talloc((size_t)ny * sizeof(int32_t)), *ridx = talloc((size_t)ny * sizeof(int32_t));
    double *ry = td(ny), *rdx = td(nx);
    const bool is_max = d->kind == QS_POOL_MAX;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++)
                for (int64_t c = 0; c < d->C; c++) {
                    int64_t o = ((n * d->P + p) * d->Q + q) * d->C + c;
                    double best = -INFINITY, sum = 0;
                    int64_t bi = -1;
                    for (int64_t r = 0; r < d->R; r++)
                        for (int64_t s = 0; s < d->S; s++) {
                            int64_t h = p * d->stride_h - d->pad_h + r, w = q * d->stride_w - d->pad_w + s;
                            if (h < 0 || h >= d->H || w < 0 || w >= d->W) continue;
                            double v = x[((n * d->H + h) * d->W + w) * d->C + c];
                            sum += v;
                            if (v > best) best = v, bi = h * d->W + w;
                        }
                    ry[o] = is_max ? best : sum / (double)(d->R * d->S);
                    ridx[o] = (int32_t)bi;
                }
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++)
                for (int64_t c = 0; c < d->C; c++) {
                    int64_t o = ((n * d->P + p) * d->Q + q) * d->C + c;
                    if (is_max) {
                        rdx[(n * d->H * d->W + ridx[o]) * d->C + c] += dy[o];
                        continue;
                    }
                    for (int64_t r = 0; r < d->R; r++)
                        for (int64_t s = 0; s < d->S; s++) {
                            int64_t h = p * d->stride_h - d->pad_h + r, w = q * d->stride_w - d->pad_w + s;
                            if (h < 0 || h >= d->H || w < 0 || w >= d->W) continue;
                            rdx[((n * d->H + h) * d->W + w) * d->C + c] += dy[o] / (double)(d->R * d->S);
                        }
                }
    printf("%s pool N%lld %lldx%lldx%lld k%lldx%lld s%lldx%lld p%lldx%lld -> %lldx%lld\n", is_max ? "max" : "avg",
           (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->R, (long long)d->S,
           (long long)d->stride_h, (long long)d->stride_w, (long long)d->pad_h, (long long)d->pad_w, (long long)d->P,
           (long long)d->Q);
    ASSERT_OK(OPS->pool_forward(g_be, plan, STREAM, x, y, idx, ws));
    const double kwin = (double)(d->R * d->S);
    if (is_max) {
        CHECK_EQ("max pool fwd", y, to_ref(ry, ny, NULL), ny);
        assert_memory_equal(idx, ridx, (size_t)ny * sizeof(int32_t));
    } else {
        CHECK_FP32("avg pool fwd", y, to_ref(ry, ny, NULL), ny, kwin);
    }
    /* dx: each element receives at most ceil(R/sh)·ceil(S/sw) contributions */
    const double kb = (double)(((d->R + d->stride_h - 1) / d->stride_h) * ((d->S + d->stride_w - 1) / d->stride_w));
    ASSERT_OK(OPS->pool_backward(g_be, plan, STREAM, dy, idx, dx, false, ws));
    CHECK_FP32("pool bwd", dx, to_ref(rdx, nx, NULL), nx, kb);
    float *dx0 = rnd(nx, -1, 1), *dxa = copy_of(dx0, nx);
    ASSERT_OK(OPS->pool_backward(g_be, plan, STREAM, dy, idx, dxa, true, ws));
    CHECK_FP32("pool bwd accumulate", dxa, to_ref(rdx, nx, dx0), nx, kb + 1);
}

static qs_pool_desc pdsc(qs_pool_kind kind, int64_t N, int64_t H, int64_t W, int64_t C, int64_t R, int64_t S,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
    return (qs_pool_desc){.kind = kind, .N = N, .H = H, .W = W, .C = C, .R = R, .S = S, .stride_h = sh,
                          .stride_w = sw, .pad_h = ph, .pad_w = pw};
}

static void test_pool(void **state) {
    seed(3);
    check_pool(pdsc(QS_POOL_MAX, 2, 8, 8, 5, 2, 2, 2, 2, 0, 0));     /* the CNN's 2x2/2 */
    check_pool(pdsc(QS_POOL_MAX, 3, 9, 7, 3, 3, 3, 2, 2, 1, 1));     /* overlapping, padded, odd */
    check_pool(pdsc(QS_POOL_MAX, 2, 7, 10, 17, 3, 2, 1, 2, 1, 0));   /* non-square, mixed stride */
    check_pool(pdsc(QS_POOL_AVG, 2, 9, 7, 3, 3, 3, 2, 2, 1, 1));     /* count_include_pad */
    check_pool(pdsc(QS_POOL_AVG, 3, 6, 6, 18, 2, 2, 2, 2, 0, 0));
    check_pool(pdsc(QS_POOL_AVG, 4, 7, 7, 64, 7, 7, 1, 1, 0, 0));    /* global average pooling */
    check_pool(pdsc(QS_POOL_AVG, 2, 5, 3, 9, 5, 3, 1, 1, 0, 0));     /* global, non-square */
}

/* ---------------------------------------------------------------------------- batchnorm */

static void test_batchnorm(void **state) {
    seed(4);
    const int64_t shapes[][2] = {{2 * 5 * 7, 13}, {1000, 3}, {2, 1}, {4 * 28 * 28, 16}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        const float momentum = 0.1f, eps = 1e-5f;
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f);
        for (int64_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i]; /* offset mean: checks the two-pass variance */
        float *rm = rnd(C, -0.1f, 0.1f), *rv = rnd(C, 0.9f, 1.1f), *rm0 = copy_of(rm, C), *rv0 = copy_of(rv, C);
        float *y = tf(n), *smean = tf(C), *sinv = tf(C), *dy = rnd(n, -1, 1), *dx = tf(n), *dg = tf(C), *dbt = tf(C);
        double *ry = td(n), *rmean = td(C), *rinv = td(C), *rrm = td(C), *rrv = td(C), *rdx = td(n), *rdg = td(C),
               *rdb = td(C);
        double dx_scale = 0; /* largest term of dx: its values may cancel to ~0 (e.g. rows = 2) */
        for (int64_t c = 0; c < C; c++) {
            double s = 0, q = 0;
            for (int64_t r = 0; r < rows; r++) s += x[r * C + c];
            double m = s / (double)rows;
            for (int64_t r = 0; r < rows; r++) q += (x[r * C + c] - m) * (x[r * C + c] - m);
            rmean[c] = m;
            rinv[c] = 1.0 / sqrt(q / (double)rows + eps);
            rrm[c] = (1.0 - momentum) * rm0[c] + momentum * m;
            rrv[c] = (1.0 - momentum) * rv0[c] + momentum * q / (double)(rows - 1);
            double sdy = 0, sdyx = 0;
            for (int64_t r = 0; r < rows; r++) {
                ry[r * C + c] = (x[r * C + c] - m) * rinv[c] * gamma[c] + beta[c];
                sdy += dy[r * C + c];
                sdyx += dy[r * C + c] * (x[r * C + c] - m);
            }
            rdb[c] = sdy;
            rdg[c] = sdyx * rinv[c];
            for (int64_t r = 0; r < rows; r++) {
                double t1 = dy[r * C + c], t2 = sdy / rows, t3 = (x[r * C + c] - m) * rinv[c] * rinv[c] * sdyx / rows;
                rdx[r * C + c] = gamma[c] * rinv[c] * (t1 - t2 - t3);
                dx_scale = fmax(dx_scale, fabs(gamma[c] * rinv[c]) * (fabs(t1) + fabs(t2) + fabs(t3)));
            }
        }
        printf("batchnorm rows=%lld C=%lld\n", (long long)rows, (long long)C);
        const double K = (double)rows;
        ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, y, QS_F32, smean, sinv,
                                               rm, rv, momentum, eps, false, NULL, QS_F32));
        CHECK_FP32("bn train y", y, to_ref(ry, n, NULL), n, K);
        CHECK_FP32("bn save_mean", smean, to_ref(rmean, C, NULL), C, K);
        CHECK_FP32("bn save_invstd", sinv, to_ref(rinv, C, NULL), C, K);
        CHECK_FP32("bn running_mean", rm, to_ref(rrm, C, NULL), C, K);
        CHECK_FP32("bn running_var", rv, to_ref(rrv, C, NULL), C, K);
        /* determinism */
        float *y2 = tf(n), *sm2 = tf(C), *si2 = tf(C);
        ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, y2, QS_F32, sm2, si2,
                                               NULL, NULL, momentum, eps, false, NULL, QS_F32));
        assert_memory_equal(y, y2, (size_t)n * sizeof(float));
        assert_memory_equal(sinv, si2, (size_t)C * sizeof(float));
        ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, x, QS_F32, dy, QS_F32, gamma, smean, sinv, dx, QS_F32, NULL, false, dg, dbt,
                                          NULL, QS_F32, NULL, false));
        assert_true(qs_check_close("bn bwd dx", dx, to_ref(rdx, n, NULL), n, qs_tol_fp32(2 * K, dx_scale), NULL));
        CHECK_FP32("bn bwd dgamma", dg, to_ref(rdg, C, NULL), C, K);
        CHECK_FP32("bn bwd dbeta", dbt, to_ref(rdb, C, NULL), C, K);
        /* dx = NULL: only dgamma/dbeta, bitwise the same as with dx */
        float *dg2 = tf(C), *dbt2 = tf(C);
        ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, x, QS_F32, dy, QS_F32, gamma, smean, sinv, NULL, QS_F32, NULL, false, dg2,
                                          dbt2, NULL, QS_F32, NULL, false));
        assert_memory_equal(dg, dg2, (size_t)C * sizeof(float));
        assert_memory_equal(dbt, dbt2, (size_t)C * sizeof(float));
        float *dx0 = rnd(n, -1, 1), *dxa = copy_of(dx0, n);
        ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, x, QS_F32, dy, QS_F32, gamma, smean, sinv, dxa, QS_F32, NULL, true, dg, dbt,
                                          NULL, QS_F32, NULL, false));
        assert_true(qs_check_close("bn bwd dx accumulate", dxa, to_ref(rdx, n, dx0), n,
                                   qs_tol_fp32(2 * K + 1, dx_scale + 1), NULL));
        /* eval mode with the updated running statistics */
        for (int64_t i = 0; i < n; i++) {
            int64_t c = i % C;
            ry[i] = (x[i] - (double)rm[c]) / sqrt((double)rv[c] + eps) * gamma[c] + beta[c];
        }
        ASSERT_OK(
            OPS->batchnorm_forward_eval(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, rm, rv, eps, y, QS_F32, false, NULL, QS_F32));
        CHECK_FP32("bn eval y", y, to_ref(ry, n, NULL), n, 4);
        /* BN+ReLU fused: bitwise the unfused BN followed by ReLU, forward and backward */
        float *yr = tf(n), *dym = tf(n), *dxu = tf(n), *dxf = tf(n), *dgu = tf(C), *dbu = tf(C);
        float *dgf = tf(C), *dbf = tf(C);
        ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, yr, QS_F32, sm2, si2,
                                               NULL, NULL, momentum, eps, true, NULL, QS_F32));
        for (int64_t i = 0; i < n; i++) assert_true(yr[i] == (y2[i] > 0.0f ? y2[i] : 0.0f));
        ASSERT_OK(OPS->relu_backward(g_be, STREAM, n, yr, dy, QS_F32, dym, false));
        ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, x, QS_F32, dym, QS_F32, gamma, sm2, si2, dxu, QS_F32, NULL, false, dgu, dbu,
                                          NULL, QS_F32, NULL, false));
        ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, x, QS_F32, dy, QS_F32, gamma, sm2, si2, dxf, QS_F32, NULL, false, dgf, dbf,
                                          yr, QS_F32, NULL, false));
        assert_memory_equal(dxu, dxf, (size_t)n * sizeof(float));
        assert_memory_equal(dgu, dgf, (size_t)C * sizeof(float));
        assert_memory_equal(dbu, dbf, (size_t)C * sizeof(float));
        ASSERT_OK(
            OPS->batchnorm_forward_eval(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, rm, rv, eps, yr, QS_F32, true, NULL, QS_F32));
        for (int64_t i = 0; i < n; i++) assert_true(yr[i] == (y[i] > 0.0f ? y[i] : 0.0f));
        /* BF16 output (a fused straight-through cast): the FP32 output rounded to nearest even,
         * and a backward masked by it bitwise the FP32-masked one (no output is so small that
         * BF16 rounds it to 0) */
        uint16_t *yb = malloc((size_t)n * sizeof *yb), *want = malloc((size_t)n * sizeof *want);
        float *dxb = tf(n), *dgb = tf(C), *dbb = tf(C);
        ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, yb, QS_BF16, sm2, si2,
                                               NULL, NULL, momentum, eps, true, NULL, QS_F32));
        ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, yr, QS_F32, sm2, si2,
                                               NULL, NULL, momentum, eps, true, NULL, QS_F32));
        ASSERT_OK(qs_f32_to_bf16(n, yr, want, NULL));
        assert_memory_equal(yb, want, (size_t)n * sizeof *yb);
        ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, x, QS_F32, dy, QS_F32, gamma, sm2, si2, dxb, QS_F32, NULL, false, dgb, dbb,
                                          yb, QS_BF16, NULL, false));
        assert_memory_equal(dxb, dxf, (size_t)n * sizeof(float));
        assert_memory_equal(dgb, dgf, (size_t)C * sizeof(float));
        assert_memory_equal(dbb, dbf, (size_t)C * sizeof(float));
        ASSERT_OK(OPS->batchnorm_forward_eval(g_be, STREAM, rows, C, x, QS_F32, gamma, beta, rm, rv, eps, yb, QS_BF16,
                                              false, NULL, QS_F32));
        ASSERT_OK(qs_f32_to_bf16(n, y, want, NULL));
        assert_memory_equal(yb, want, (size_t)n * sizeof *yb);
        free(yb), free(want);
    }
    float one = 1.0f, out = 0.0f;
    assert_int_equal(OPS->batchnorm_forward_eval(g_be, STREAM, 1, 1, &one, QS_F32, NULL, NULL, &one, &one, 1e-5f, &out,
                                                 QS_F16, false, NULL, QS_F32),
                     QS_ERR_UNSUPPORTED);
    assert_int_equal(OPS->batchnorm_forward_train(g_be, STREAM, 1, 1, &one, QS_F32, NULL, NULL, &out, QS_F32, &out,
                                                  &out, NULL, NULL, 0.1f, 1e-5f, false, NULL, QS_F32),
                     QS_ERR_INVALID_ARG);
}

/* Batch norm on a BF16 x (and, in backward, a BF16 dy): the values are widened exactly, so train
 * forward, eval forward and backward (with and without the fused ReLU, output F32 or BF16, dx
 * overwritten or accumulated) are bitwise those of the F32 op on the widened x and dy; any
 * other x_dt is refused. */
static void test_batchnorm_bf16_input(void **state) {
    seed(16);
    const int64_t shapes[][2] = {{2 * 5 * 7, 13}, {1000, 3}, {2, 1}, {4 * 28 * 28, 16}};
    const float momentum = 0.1f, eps = 1e-5f;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
        for (int64_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i];
        uint16_t *xb = talloc((size_t)n * sizeof *xb), *dyb = talloc((size_t)n * sizeof *dyb);
        float *xw = tf(n), *rm0 = rnd(C, -0.1f, 0.1f), *rv0 = rnd(C, 0.9f, 1.1f), *dx0 = rnd(n, -1, 1), *dyw = tf(n);
        ASSERT_OK(qs_f32_to_bf16(n, x, xb, NULL));
        ASSERT_OK(qs_bf16_to_f32(n, xb, xw));
        ASSERT_OK(qs_f32_to_bf16(n, dy, dyb, NULL));
        ASSERT_OK(qs_bf16_to_f32(n, dyb, dyw));
        printf("batchnorm bf16 x rows=%lld C=%lld\n", (long long)rows, (long long)C);
        for (int relu = 0; relu < 2; relu++)
            for (int o = 0; o < 2; o++) {
                const qs_dtype ydt = o ? QS_BF16 : QS_F32;
                const size_t ybytes = (size_t)n * qs_dtype_size(ydt), cb = (size_t)C * sizeof(float);
                /* [0]: x_dt and dy_dt BF16, [1]: F32 on the widened values */
                const void *xs[2] = {xb, xw}, *dys[2] = {dyb, dyw};
                const qs_dtype xdt[2] = {QS_BF16, QS_F32};
                void *y[2], *ye[2];
                float *sm[2], *si[2], *rm[2], *rv[2], *dx[2], *dxa[2], *dg[2], *dbt[2];
                for (int k = 0; k < 2; k++) {
                    y[k] = talloc(ybytes), ye[k] = talloc(ybytes);
                    sm[k] = tf(C), si[k] = tf(C), rm[k] = copy_of(rm0, C), rv[k] = copy_of(rv0, C);
                    dx[k] = tf(n), dxa[k] = copy_of(dx0, n), dg[k] = tf(C), dbt[k] = tf(C);
                    ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, xs[k], xdt[k], gamma, beta, y[k],
                                                           ydt, sm[k], si[k], rm[k], rv[k], momentum, eps, relu, NULL, QS_F32));
                    ASSERT_OK(OPS->batchnorm_forward_eval(g_be, STREAM, rows, C, xs[k], xdt[k], gamma, beta, rm0, rv0,
                                                          eps, ye[k], ydt, relu, NULL, QS_F32));
                    const void *mask = relu ? y[k] : NULL;
                    ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs[k], xdt[k], dys[k], xdt[k], gamma,
                                                      sm[k], si[k], dx[k], QS_F32, NULL, false, dg[k], dbt[k], mask,
                                                      ydt, NULL, false));
                    ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs[k], xdt[k], dys[k], xdt[k], gamma,
                                                      sm[k], si[k], dxa[k], QS_F32, NULL, true, dg[k], dbt[k], mask,
                                                      ydt, NULL, false));
                }
                assert_memory_equal(y[0], y[1], ybytes);
                assert_memory_equal(sm[0], sm[1], cb);
                assert_memory_equal(si[0], si[1], cb);
                assert_memory_equal(rm[0], rm[1], cb);
                assert_memory_equal(rv[0], rv[1], cb);
                assert_memory_equal(ye[0], ye[1], ybytes);
                assert_memory_equal(dx[0], dx[1], (size_t)n * sizeof(float));
                assert_memory_equal(dxa[0], dxa[1], (size_t)n * sizeof(float));
                assert_memory_equal(dg[0], dg[1], cb);
                assert_memory_equal(dbt[0], dbt[1], cb);
            }
    }
    float one = 1.0f, out[2] = {0};
    qs_error_clear();
    assert_int_equal(OPS->batchnorm_forward_train(g_be, STREAM, 2, 1, out, QS_F16, NULL, NULL, out, QS_F32, &one,
                                                  &one, NULL, NULL, 0.1f, 1e-5f, false, NULL, QS_F32),
                     QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(qs_last_error(), "x_dt"));
    assert_int_equal(OPS->batchnorm_forward_eval(g_be, STREAM, 1, 1, &one, QS_F16, NULL, NULL, &one, &one, 1e-5f,
                                                 out, QS_F32, false, NULL, QS_F32),
                     QS_ERR_UNSUPPORTED);
    for (int train = 0; train < 2; train++) { /* a residual of another dtype than f32/bf16 */
        qs_error_clear();
        const qs_status st =
            train ? OPS->batchnorm_forward_train(g_be, STREAM, 2, 1, out, QS_F32, NULL, NULL, out, QS_F32, &one, &one,
                                                 NULL, NULL, 0.1f, 1e-5f, false, out, QS_F16)
                  : OPS->batchnorm_forward_eval(g_be, STREAM, 1, 1, &one, QS_F32, NULL, NULL, &one, &one, 1e-5f, out,
                                                QS_F32, false, out, QS_F16);
        assert_int_equal(st, QS_ERR_UNSUPPORTED);
        assert_non_null(strstr(qs_last_error(), "residual_dt"));
    }
    assert_int_equal(OPS->batchnorm_backward(g_be, STREAM, 2, 1, out, QS_S8, out, QS_F32, NULL, &one, &one, out, QS_F32, NULL, false, NULL,
                                             NULL, NULL, QS_F32, NULL, false),
                     QS_ERR_UNSUPPORTED);
}

/* Batch norm backward writing a BF16 dx: bitwise the F32 op's dx followed by the backend's
 * quantize to BF16 with the same stochastic-rounding stream (offsets 0 and non-zero; a
 * counter_at in host memory beating the sr's counter), or by the RNE cast without an sr;
 * dgamma/dbeta as with the F32 dx; x F32 or BF16, with and without the fused ReLU. The last
 * shapes are larger than the op's FP32 block of rows (2^18 elements), the last one in blocks
 * that are not multiples of 64 elements. A BF16 dx cannot accumulate; an F16 dx is refused. */
static void test_batchnorm_bf16_dx(void **state) {
    seed(17);
    const int64_t shapes[][2] = {{2 * 5 * 7, 13}, {1000, 3}, {2, 1}, {4 * 28 * 28, 16}, {20000, 16}, {7000, 50}};
    const float momentum = 0.1f, eps = 1e-5f;
    const uint64_t key = qs_rng_key(5, "sr", 2), offsets[2] = {0, 1000003};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        const size_t cb = (size_t)C * sizeof(float), hb = (size_t)n * sizeof(uint16_t);
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
        for (int64_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i];
        uint16_t *xb = talloc(hb), *got = talloc(hb), *want = talloc(hb), *other = talloc(hb);
        ASSERT_OK(qs_f32_to_bf16(n, x, xb, NULL));
        float *y = tf(n), *sm = tf(C), *si = tf(C), *dxf = tf(n), *dgf = tf(C), *dbf = tf(C), *dg = tf(C), *dbt = tf(C);
        printf("batchnorm bf16 dx rows=%lld C=%lld\n", (long long)rows, (long long)C);
        for (int relu = 0; relu < 2; relu++)
            for (int xk = 0; xk < 2; xk++) {
                const void *xs = xk ? (const void *)xb : x;
                const qs_dtype xdt = xk ? QS_BF16 : QS_F32;
                ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, xs, xdt, gamma, beta, y, QS_F32, sm, si,
                                                       NULL, NULL, momentum, eps, relu, NULL, QS_F32));
                const float *mask = relu ? y : NULL;
                ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, dxf, QS_F32, NULL,
                                                  false, dgf, dbf, mask, QS_F32, NULL, false));
                for (int k = 0; k < 2; k++) {
                    qs_sr sr = {.key = key, .counter = 7, .offset = offsets[k], .counter_at = NULL};
                    ASSERT_OK(OPS->quantize(g_be, STREAM, rows, C, dxf, NULL, QS_BF16, want, NULL, false, &sr, NULL,
                                            NULL));
                    memset(got, 0xff, hb), memset(dg, 0xff, cb), memset(dbt, 0xff, cb);
                    ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, got, QS_BF16,
                                                      &sr, false, dg, dbt, mask, QS_F32, NULL, false));
                    assert_memory_equal(got, want, hb);
                    assert_memory_equal(dg, dgf, cb);
                    assert_memory_equal(dbt, dbf, cb);
                    /* counter_at holds the counter (7): it replaces sr.counter (99) */
                    uint64_t step = 7;
                    qs_sr at = {.key = key, .counter = 99, .offset = offsets[k], .counter_at = &step};
                    memset(got, 0xff, hb);
                    ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, got, QS_BF16,
                                                      &at, false, dg, dbt, mask, QS_F32, NULL, false));
                    assert_memory_equal(got, want, hb);
                    if (n >= 1000) { /* counter 99 rounds differently somewhere (not a vacuous check) */
                        at.counter_at = NULL;
                        ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, other,
                                                          QS_BF16, &at, false, dg, dbt, mask, QS_F32, NULL, false));
                        assert_true(memcmp(other, want, hb) != 0);
                    }
                }
                /* no sr: round to nearest even, the cast's bits */
                ASSERT_OK(OPS->cast(g_be, STREAM, n, dxf, QS_F32, want, QS_BF16));
                memset(got, 0xff, hb);
                ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, got, QS_BF16, NULL,
                                                  false, dg, dbt, mask, QS_F32, NULL, false));
                assert_memory_equal(got, want, hb);
                assert_memory_equal(dg, dgf, cb);
                assert_memory_equal(dbt, dbf, cb);
                /* dx NULL with dx_dt BF16: the parameter gradients only */
                memset(dg, 0xff, cb), memset(dbt, 0xff, cb);
                ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, NULL, QS_BF16,
                                                  NULL, false, dg, dbt, mask, QS_F32, NULL, false));
                assert_memory_equal(dg, dgf, cb);
                assert_memory_equal(dbt, dbf, cb);
            }
    }
    float one = 1.0f, in[2] = {1.0f, 2.0f}, g[1];
    uint16_t h[2];
    const qs_sr sr = {.key = key, .counter = 7};
    qs_error_clear();
    assert_int_equal(OPS->batchnorm_backward(g_be, STREAM, 2, 1, in, QS_F32, in, QS_F32, NULL, &one, &one, h, QS_BF16, &sr,
                                             true, g, NULL, NULL, QS_F32, NULL, false),
                     QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "accumulate"));
    qs_error_clear();
    assert_int_equal(OPS->batchnorm_backward(g_be, STREAM, 2, 1, in, QS_F32, in, QS_F32, NULL, &one, &one, h, QS_F16, NULL,
                                             false, g, NULL, NULL, QS_F32, NULL, false),
                     QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(qs_last_error(), "dx_dt"));
    qs_error_clear();
    float dx32[2];
    assert_int_equal(OPS->batchnorm_backward(g_be, STREAM, 2, 1, in, QS_F32, h, QS_F16, NULL, &one, &one, dx32, QS_F32,
                                             NULL, false, g, NULL, NULL, QS_F32, NULL, false),
                     QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(qs_last_error(), "dy_dt"));
}

/* A batch norm with a residual block's Add fused in (backend.h: residual, dresidual) equals the
 * unfused ops bit for bit: forward (train and eval; ReLU off and on; y F32 and BF16; residual
 * F32 and BF16, the latter as its widened values) = batch norm, then add_forward (then the RNE
 * cast for a BF16 y); backward (mask from the fused output)
 * dx, dgamma, dbeta = the plain batch norm's on the Add's gradient, dresidual = relu_backward (a
 * copy of dy without ReLU), overwritten and accumulated, also with dx NULL; x F32 and BF16. */
static void test_batchnorm_residual(void **state) {
    seed(23);
    const int64_t shapes[][2] = {{70, 13}, {20000, 16}};
    const float momentum = 0.1f, eps = 1e-5f;
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        const size_t cb = (size_t)C * sizeof(float), nb = (size_t)n * sizeof(float);
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *r = rnd(n, -2, 2);
        float *dy = rnd(n, -1, 1), *acc0 = rnd(n, -1, 1), *rm = rnd(C, -1, 1), *rv = rnd(C, 0.5f, 2.0f);
        uint16_t *xb = talloc((size_t)n * 2), *rb = talloc((size_t)n * 2);
        ASSERT_OK(qs_f32_to_bf16(n, x, xb, NULL));
        ASSERT_OK(qs_f32_to_bf16(n, r, rb, NULL));
        float *rw = tf(n); /* rb widened */
        ASSERT_OK(qs_bf16_to_f32(n, rb, rw));
        float *y0 = tf(n), *ya = tf(n), *sm = tf(C), *si = tf(C), *sm2 = tf(C), *si2 = tf(C);
        float *dr = tf(n), *dra = tf(n), *dxw = tf(n), *dgw = tf(C), *dbw = tf(C), *dxg = tf(n), *dgg = tf(C),
              *dbg = tf(C), *dres = tf(n), *dresa = tf(n);
        void *want = talloc(nb), *got = talloc(nb);
        printf("batchnorm residual rows=%lld C=%lld\n", (long long)rows, (long long)C);
        for (int xk = 0; xk < 2; xk++)
            for (int relu = 0; relu < 2; relu++)
                for (int yk = 0; yk < 2; yk++) {
                    const void *xs = xk ? (const void *)xb : x;
                    const qs_dtype xdt = xk ? QS_BF16 : QS_F32, ydt = yk ? QS_BF16 : QS_F32;
                    const size_t yb = (size_t)n * (yk ? 2 : 4);
                    for (int rk = 0; rk < 2; rk++) /* an F32 residual, and a BF16 one (r rounded: rb) */
                        for (int train = 0; train < 2; train++) {
                            const void *res = rk ? (const void *)rb : r;
                            const qs_dtype rdt = rk ? QS_BF16 : QS_F32;
                            if (train) {
                                ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, xs, xdt, gamma, beta, y0,
                                                                       QS_F32, sm, si, NULL, NULL, momentum, eps, false,
                                                                       NULL, QS_F32));
                                memset(got, 0xff, nb);
                                ASSERT_OK(OPS->batchnorm_forward_train(g_be, STREAM, rows, C, xs, xdt, gamma, beta, got,
                                                                       ydt, sm2, si2, NULL, NULL, momentum, eps, relu,
                                                                       res, rdt));
                            } else {
                                ASSERT_OK(OPS->batchnorm_forward_eval(g_be, STREAM, rows, C, xs, xdt, gamma, beta, rm,
                                                                      rv, eps, y0, QS_F32, false, NULL, QS_F32));
                                memset(got, 0xff, nb);
                                ASSERT_OK(OPS->batchnorm_forward_eval(g_be, STREAM, rows, C, xs, xdt, gamma, beta, rm,
                                                                      rv, eps, got, ydt, relu, res, rdt));
                            }
                            /* a BF16 residual counts as its exactly widened values */
                            ASSERT_OK(OPS->add_forward(g_be, STREAM, n, y0, QS_F32, rk ? rw : r, QS_F32, ya, relu));
                            ASSERT_OK(OPS->cast(g_be, STREAM, n, ya, QS_F32, want, ydt));
                            assert_memory_equal(got, want, yb);
                        }
                    /* the training forward's output stays in got (ya: its FP32 twin) */
                    const void *mask = relu ? got : NULL;
                    memcpy(dra, acc0, nb), memcpy(dresa, acc0, nb), memset(dres, 0xff, nb);
                    if (relu) {
                        ASSERT_OK(OPS->relu_backward(g_be, STREAM, n, ya, dy, QS_F32, dr, false));
                        ASSERT_OK(OPS->relu_backward(g_be, STREAM, n, ya, dy, QS_F32, dra, true));
                    } else {
                        ASSERT_OK(OPS->accumulate(g_be, STREAM, n, dy, dr, false));
                        ASSERT_OK(OPS->accumulate(g_be, STREAM, n, dy, dra, true));
                    }
                    ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dr, QS_F32, gamma, sm, si, dxw, QS_F32,
                                                      NULL, false, dgw, dbw, NULL, QS_F32, NULL, false));
                    ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, dxg, QS_F32,
                                                      NULL, false, dgg, dbg, mask, ydt, dres, false));
                    assert_memory_equal(dxg, dxw, nb);
                    assert_memory_equal(dgg, dgw, cb);
                    assert_memory_equal(dbg, dbw, cb);
                    assert_memory_equal(dres, dr, nb);
                    ASSERT_OK(OPS->batchnorm_backward(g_be, STREAM, rows, C, xs, xdt, dy, QS_F32, gamma, sm, si, NULL, QS_F32,
                                                      NULL, false, NULL, NULL, mask, ydt, dresa, true));
                    assert_memory_equal(dresa, dra, nb);
                }
    }
}

/* ------------------------------------------------------------------------- elementwise */

static void test_eltwise(void **state) {
    seed(5);
    const int64_t n = 1003;
    float *x = rnd(n, -1, 1), *b = rnd(n, -1, 1), *y = tf(n), *ref = tf(n), *dy = rnd(n, -1, 1);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = NAN;
    ASSERT_OK(OPS->relu_forward(g_be, STREAM, n, x, y));
    for (int64_t i = 0; i < n; i++) ref[i] = x[i] < 0 ? 0.0f : x[i];
    assert_true(isnan(y[2]));
    y[2] = ref[2] = 0.0f;
    CHECK_EQ("relu fwd", y, ref, n);
    float *xa = copy_of(x, n); /* in place */
    ASSERT_OK(OPS->relu_forward(g_be, STREAM, n, xa, xa));
    xa[2] = 0.0f;
    CHECK_EQ("relu fwd in place", xa, ref, n);
    float *dx = tf(n);
    ASSERT_OK(OPS->relu_backward(g_be, STREAM, n, y, dy, QS_F32, dx, false));
    for (int64_t i = 0; i < n; i++) ref[i] = y[i] > 0 ? dy[i] : 0.0f;
    CHECK_EQ("relu bwd", dx, ref, n);
    float *dx0 = rnd(n, -1, 1), *dxa = copy_of(dx0, n);
    ASSERT_OK(OPS->relu_backward(g_be, STREAM, n, y, dy, QS_F32, dxa, true));
    for (int64_t i = 0; i < n; i++) ref[i] = dx0[i] + (y[i] > 0 ? dy[i] : 0.0f);
    CHECK_EQ("relu bwd accumulate", dxa, ref, n);
    /* a BF16 dy: the F32 op on its widened values, bit for bit (= and +=); F16 refused */
    uint16_t *dyb = talloc((size_t)n * sizeof *dyb);
    float *dyw = tf(n), *dxw = tf(n), *dxbw = tf(n);
    ASSERT_OK(qs_f32_to_bf16(n, dy, dyb, NULL));
    ASSERT_OK(qs_bf16_to_f32(n, dyb, dyw));
    for (int acc16 = 0; acc16 < 2; acc16++) {
        memcpy(dxw, dx0, (size_t)n * sizeof *dxw), memcpy(dxbw, dx0, (size_t)n * sizeof *dxbw);
        ASSERT_OK(OPS->relu_backward(g_be, STREAM, n, y, dyw, QS_F32, dxw, acc16));
        ASSERT_OK(OPS->relu_backward(g_be, STREAM, n, y, dyb, QS_BF16, dxbw, acc16));
        assert_memory_equal(dxbw, dxw, (size_t)n * sizeof *dxw);
    }
    assert_int_equal(OPS->relu_backward(g_be, STREAM, n, y, dyb, QS_F16, dxbw, false), QS_ERR_UNSUPPORTED);

    x[2] = 0.5f;
    ASSERT_OK(OPS->add_forward(g_be, STREAM, n, x, QS_F32, b, QS_F32, y, false));
    for (int64_t i = 0; i < n; i++) ref[i] = x[i] + b[i];
    CHECK_EQ("add", y, ref, n);
    ASSERT_OK(OPS->add_forward(g_be, STREAM, n, x, QS_F32, b, QS_F32, y, true));
    for (int64_t i = 0; i < n; i++) ref[i] = x[i] + b[i] > 0.0f ? x[i] + b[i] : 0.0f;
    CHECK_EQ("add+relu", y, ref, n);
    /* BF16 inputs (either or both): the F32 op on their widened values, bit for bit; F16 refused */
    uint16_t *xb16 = talloc((size_t)n * 2), *bb16 = talloc((size_t)n * 2);
    float *xw = tf(n), *bw = tf(n), *yw = tf(n);
    ASSERT_OK(qs_f32_to_bf16(n, x, xb16, NULL));
    ASSERT_OK(qs_f32_to_bf16(n, b, bb16, NULL));
    ASSERT_OK(qs_bf16_to_f32(n, xb16, xw));
    ASSERT_OK(qs_bf16_to_f32(n, bb16, bw));
    for (int k = 1; k < 4; k++)
        for (int relu = 0; relu < 2; relu++) {
            const bool ab = k & 1, bbf = k & 2;
            ASSERT_OK(OPS->add_forward(g_be, STREAM, n, ab ? xw : x, QS_F32, bbf ? bw : b, QS_F32, yw, relu));
            memset(y, 0xff, (size_t)n * sizeof *y);
            ASSERT_OK(OPS->add_forward(g_be, STREAM, n, ab ? (const void *)xb16 : x, ab ? QS_BF16 : QS_F32,
                                       bbf ? (const void *)bb16 : b, bbf ? QS_BF16 : QS_F32, y, relu));
            assert_memory_equal(y, yw, (size_t)n * sizeof *y);
        }
    assert_int_equal(OPS->add_forward(g_be, STREAM, n, x, QS_F32, bb16, QS_F16, y, false), QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(qs_last_error(), "b_dt"));
    float *acc = copy_of(dx0, n);
    ASSERT_OK(OPS->accumulate(g_be, STREAM, n, x, acc, true));
    for (int64_t i = 0; i < n; i++) ref[i] = dx0[i] + x[i];
    CHECK_EQ("accumulate +=", acc, ref, n);
    ASSERT_OK(OPS->accumulate(g_be, STREAM, n, x, acc, false));
    CHECK_EQ("accumulate =", acc, x, n);
    ASSERT_OK(OPS->scale(g_be, STREAM, n, acc, -0.375f));
    for (int64_t i = 0; i < n; i++) ref[i] = x[i] * -0.375f;
    CHECK_EQ("scale", acc, ref, n);
    ASSERT_OK(OPS->relu_forward(g_be, STREAM, 0, NULL, NULL)); /* empty is fine */
}

/* ------------------------------------------------------------------------------ dropout */

static void test_dropout(void **state) {
    seed(6);
    const int64_t n = 100003;
    const float p = 0.3f;
    const uint64_t key = qs_rng_key(42, "dropout", 3), cb = 1000;
    const qs_dropout_rng rng = {.key = key, .counter_base = cb};
    float *x = rnd(n, -1, 1), *y = tf(n), *y2 = tf(n), *ref = tf(n);
    uint8_t *mask = talloc((size_t)n), *mask2 = talloc((size_t)n);
    ASSERT_OK(OPS->dropout_forward(g_be, STREAM, n, x, y, mask, p, &rng));
    /* the mask is exactly the header's recipe */
    const float scale = 1.0f / (1.0f - p);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u[4];
        qs_philox4x32(key, 0, cb + (uint64_t)i / 4, u);
        uint8_t keep = (double)u[i % 4] >= (double)p * 4294967296.0;
        assert_int_equal(mask[i], keep);
        kept += keep;
        ref[i] = keep ? x[i] * scale : 0.0f;
    }
    CHECK_EQ("dropout fwd", y, ref, n);
    /* statistics: keep fraction 1-p within 5 standard deviations */
    double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    printf("dropout keep fraction %.5f (expected %.5f ± %.5f)\n", frac, 1 - p, 5 * sd);
    assert_true(fabs(frac - (1 - p)) < 5 * sd);
    /* same counter runs are identical, also with the base read through step_at (step 10 ·
     * stride 100 = cb; counter_base then ignored); another counter gives another mask */
    ASSERT_OK(OPS->dropout_forward(g_be, STREAM, n, x, y2, mask2, p, &rng));
    assert_memory_equal(mask, mask2, (size_t)n);
    assert_memory_equal(y, y2, (size_t)n * sizeof(float));
    const int64_t step = 10;
    memset(mask2, 0, (size_t)n);
    ASSERT_OK(OPS->dropout_forward(g_be, STREAM, n, x, y2, mask2, p,
                                   &(qs_dropout_rng){.key = key, .counter_base = 7, .step_at = &step, .step_stride = 100}));
    assert_memory_equal(mask, mask2, (size_t)n);
    ASSERT_OK(OPS->dropout_forward(g_be, STREAM, n, x, y2, mask2, p,
                                   &(qs_dropout_rng){.key = key, .counter_base = cb + (uint64_t)n}));
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) same += mask[i] == mask2[i];
    assert_true(same < n - n / 10);
    /* backward */
    float *dy = rnd(n, -1, 1), *dx = tf(n);
    ASSERT_OK(OPS->dropout_backward(g_be, STREAM, n, dy, mask, p, dx, false));
    for (int64_t i = 0; i < n; i++) ref[i] = mask[i] ? dy[i] * scale : 0.0f;
    CHECK_EQ("dropout bwd", dx, ref, n);
    float *dx0 = rnd(n, -1, 1), *dxa = copy_of(dx0, n);
    ASSERT_OK(OPS->dropout_backward(g_be, STREAM, n, dy, mask, p, dxa, true));
    for (int64_t i = 0; i < n; i++) ref[i] = dx0[i] + (mask[i] ? dy[i] * scale : 0.0f);
    CHECK_EQ("dropout bwd accumulate", dxa, ref, n);
    /* p = 0 keeps everything unchanged, p = 1 drops everything */
    ASSERT_OK(OPS->dropout_forward(g_be, STREAM, n, x, y, mask, 0.0f, &rng));
    CHECK_EQ("dropout p=0", y, x, n);
    ASSERT_OK(OPS->dropout_forward(g_be, STREAM, n, x, y, mask, 1.0f, &rng));
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == 0.0f && mask[i] == 0);
}

/* ------------------------------------------------------------------ softmax cross-entropy */

static void test_softmax_xent(void **state) {
    seed(7);
    const int64_t shapes[][2] = {{5, 10}, {33, 7}, {1, 1}, {4, 1000}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t B = shapes[t][0], Cl = shapes[t][1], n = B * Cl;
        float *lg = rnd(n, -8, 8), *loss = tf(B), *probs = tf(n), *dl = tf(n);
        int32_t *lab = talloc((size_t)B * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++) lab[b] = (int32_t)qs_rng_below(&g_rng, (uint64_t)Cl);
        if (B > 1) lg[Cl] += 1000.0f; /* large logits must not overflow */
        double *rl = td(B), *rp = td(n), *rd = td(n);
        const float scale = 1.0f / (float)B;
        for (int64_t b = 0; b < B; b++) {
            double m = -INFINITY, s = 0;
            for (int64_t c = 0; c < Cl; c++) m = fmax(m, lg[b * Cl + c]);
            for (int64_t c = 0; c < Cl; c++) s += exp(lg[b * Cl + c] - m);
            rl[b] = m + log(s) - lg[b * Cl + lab[b]];
            for (int64_t c = 0; c < Cl; c++) {
                rp[b * Cl + c] = exp(lg[b * Cl + c] - m) / s;
                rd[b * Cl + c] = (rp[b * Cl + c] - (c == lab[b])) * scale;
            }
        }
        printf("softmax_xent B=%lld classes=%lld\n", (long long)B, (long long)Cl);
        ASSERT_OK(OPS->softmax_xent_forward(g_be, STREAM, B, Cl, lg, lab, loss, probs));
        CHECK_FP32("xent loss", loss, to_ref(rl, B, NULL), B, (double)Cl);
        CHECK_FP32("xent probs", probs, to_ref(rp, n, NULL), n, (double)Cl);
        ASSERT_OK(OPS->softmax_xent_backward(g_be, STREAM, B, Cl, probs, lab, scale, dl));
        CHECK_FP32("xent dlogits", dl, to_ref(rd, n, NULL), n, (double)Cl);
    }
}

/* ------------------------------------------------------------------------------- layout */

static void test_layout(void **state) {
    seed(8);
    const int64_t N = 3, H = 5, W = 7, C = 37, n = N * H * W * C;
    float *x = rnd(n, -1, 1), *y = tf(n), *ref = tf(n), *back = tf(n);
    ASSERT_OK(OPS->nhwc_to_nchw(g_be, STREAM, N, H, W, C, x, y));
    for (int64_t a = 0; a < N; a++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++)
                for (int64_t c = 0; c < C; c++) ref[((a * C + c) * H + h) * W + w] = x[((a * H + h) * W + w) * C + c];
    CHECK_EQ("nhwc_to_nchw", y, ref, n);
    ASSERT_OK(OPS->nchw_to_nhwc(g_be, STREAM, N, H, W, C, y, back, false));
    CHECK_EQ("nchw_to_nhwc", back, x, n);
    float *base = rnd(n, -1, 1), *acc = copy_of(base, n);
    ASSERT_OK(OPS->nchw_to_nhwc(g_be, STREAM, N, H, W, C, y, acc, true));
    for (int64_t i = 0; i < n; i++) ref[i] = base[i] + x[i];
    CHECK_EQ("nchw_to_nhwc accumulate", acc, ref, n);
}

/* -------------------------------------------------------------------------------- casts */


/* Reference RNE rounding of a finite double to a binary format with `mant` fraction bits,
 * minimum normal exponent emin and largest finite value maxv (nearbyint rounds half to even
 * in the default rounding mode). */
static double round_format(double v, int mant, int emin, double maxv) {
    if (v == 0 || !isfinite(v)) return v;
    int e;
    frexp(v, &e); /* v = f·2^e, 0.5 <= |f| < 1 → exponent e-1 */
    int ex = e - 1 < emin ? emin : e - 1;
    double ulp = ldexp(1.0, ex - mant);
    double r = nearbyint(v / ulp) * ulp;
    double limit = maxv + ldexp(1.0, (int)floor(log2(maxv)) - mant - 1); /* halfway to the next power */
    if (fabs(r) > maxv || fabs(v) >= limit) return copysign(INFINITY, v);
    return r;
}
static double ref_bf16(double v) { return round_format(v, 7, -126, 3.3895313892515355e38); }
static double ref_f16(double v) { return round_format(v, 10, -14, 65504.0); }

/* Exact value of a bf16 / f16 bit pattern (the backend's widening is checked against this
 * for all 65536 patterns below). */
static double widen(uint16_t h, qs_dtype dt) {
    if (dt == QS_BF16) return bitsf((uint32_t)h << 16);
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_cast(void **state) {
    /* hand-picked f32 → bf16 ties and specials */
    const uint32_t bf_in[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F80FFFFu, 0x7F7FFFFFu, 0x7F800000u,
                              0xFF800000u, 0x80000000u, 0x00000001u, 0x7FC00001u, 0x7F800001u, 0xBF7F8000u};
    const uint16_t bf_out[] = {0x3F80, 0x3F82, 0x3F81, 0x3F81, 0x7F80, 0x7F80, 0xFF80, 0x8000, 0x0000, 0, 0, 0xBF80};
    for (size_t i = 0; i < sizeof bf_in / sizeof bf_in[0]; i++) {
        float f = bitsf(bf_in[i]);
        uint16_t h = 0;
        ASSERT_OK(OPS->cast(g_be, STREAM, 1, &f, QS_F32, &h, QS_BF16));
        if (isnan(f))
            assert_true((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0); /* still NaN */
        else if (h != bf_out[i])
            fail_msg("f32 0x%08x -> bf16 0x%04x, expected 0x%04x", bf_in[i], h, bf_out[i]);
    }
    /* hand-picked f32 → f16 ties, overflow, subnormals and specials */
    const float f16_in[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.99f, 65520.0f, 0x1p-24f,
                            0x1p-25f, 0x1.8p-25f, 0x1.8p-24f, 0x1.4p-23f, -INFINITY, -0.0f, 0x1p-14f, 0x1.ffcp-15f};
    const uint16_t f16_out[] = {0x3C00, 0x3C02, 0x7BFF, 0x7BFF, 0x7C00, 0x0001, 0x0000,
                                0x0001, 0x0002, 0x0002, 0xFC00, 0x8000, 0x0400, 0x0400};
    for (size_t i = 0; i < sizeof f16_in / sizeof f16_in[0]; i++) {
        uint16_t h = 0;
        ASSERT_OK(OPS->cast(g_be, STREAM, 1, &f16_in[i], QS_F32, &h, QS_F16));
        if (h != f16_out[i]) fail_msg("f32 %a -> f16 0x%04x, expected 0x%04x", (double)f16_in[i], h, f16_out[i]);
    }
    float qnan = NAN;
    uint16_t hn = 0;
    ASSERT_OK(OPS->cast(g_be, STREAM, 1, &qnan, QS_F32, &hn, QS_F16));
    assert_true((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);

    /* every bf16 and f16 pattern widens exactly (f16: value = m·2^(e-25) or m·2^-24) */
    enum { NALL = 65536 };
    uint16_t *all = talloc(NALL * sizeof(uint16_t)), *back = talloc(NALL * sizeof(uint16_t));
    float *wide = tf(NALL);
    for (uint32_t i = 0; i < NALL; i++) all[i] = (uint16_t)i;
    ASSERT_OK(OPS->cast(g_be, STREAM, NALL, all, QS_BF16, wide, QS_F32));
    for (uint32_t i = 0; i < NALL; i++) assert_int_equal(fbits(wide[i]), i << 16);
    ASSERT_OK(OPS->cast(g_be, STREAM, NALL, all, QS_F16, wide, QS_F32));
    for (uint32_t i = 0; i < NALL; i++) {
        double v = widen((uint16_t)i, QS_F16);
        if (isnan(v))
            assert_true(isnan(wide[i]));
        else if ((double)wide[i] != v)
            fail_msg("f16 0x%04x -> %a, expected %a", i, (double)wide[i], v);
    }
    /* and narrowing back is the identity (NaNs stay NaN) */
    ASSERT_OK(OPS->cast(g_be, STREAM, NALL, wide, QS_F32, back, QS_F16));
    for (uint32_t i = 0; i < NALL; i++)
        if (isnan(wide[i]))
            assert_true((back[i] & 0x7C00) == 0x7C00 && (back[i] & 0x3FF));
        else
            assert_int_equal(back[i], i);

    /* random f32 over the whole range → bf16 / f16 against the reference rounding */
    seed(9);
    const int64_t n = 20000;
    float *src = tf(n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = qs_rng_u32(&g_rng);
        if (i % 2) /* half with exponents 2^-27..2^18: f16 subnormals, normals and overflow */
            u = (u & 0x807FFFFFu) | ((100u + qs_rng_u32(&g_rng) % 46u) << 23);
        src[i] = bitsf(u);
        if (isnan(src[i])) src[i] = 1.0f;
    }
    uint16_t *h16 = talloc((size_t)n * 2), *hb = talloc((size_t)n * 2), *h2 = talloc((size_t)n * 2);
    ASSERT_OK(OPS->cast(g_be, STREAM, n, src, QS_F32, h16, QS_F16));
    ASSERT_OK(OPS->cast(g_be, STREAM, n, src, QS_F32, hb, QS_BF16));
    for (int64_t i = 0; i < n; i++) {
        double got16 = widen(h16[i], QS_F16), gotb = widen(hb[i], QS_BF16);
        if (got16 != ref_f16(src[i])) fail_msg("f32 %a -> f16 %a, expected %a", (double)src[i], got16, ref_f16(src[i]));
        if (gotb != ref_bf16(src[i])) fail_msg("f32 %a -> bf16 %a, expected %a", (double)src[i], gotb, ref_bf16(src[i]));
    }
    /* bf16 ↔ f16 round once from the exact value */
    ASSERT_OK(OPS->cast(g_be, STREAM, n, hb, QS_BF16, h2, QS_F16));
    for (int64_t i = 0; i < n; i++) {
        double v = widen(hb[i], QS_BF16), got = widen(h2[i], QS_F16);
        if (got != ref_f16(v) && !(isnan(got) && isnan(v))) fail_msg("bf16 %a -> f16 %a, expected %a", v, got, ref_f16(v));
    }
    ASSERT_OK(OPS->cast(g_be, STREAM, n, h16, QS_F16, h2, QS_BF16));
    for (int64_t i = 0; i < n; i++) {
        double v = widen(h16[i], QS_F16), got = widen(h2[i], QS_BF16);
        if (got != ref_bf16(v) && !(isnan(got) && isnan(v))) fail_msg("f16 %a -> bf16 %a, expected %a", v, got, ref_bf16(v));
    }
    /* same dtype is a copy */
    ASSERT_OK(OPS->cast(g_be, STREAM, n, src, QS_F32, wide, QS_F32));
    assert_memory_equal(src, wide, (size_t)n * sizeof(float));
}

/* ---------------------------------------------------------------------------- optimizer */

static void test_sgd(void **state) {
    seed(10);
    const int64_t n = 517;
    struct {
        float lr, mom, damp, wd;
        bool nesterov;
    } cfg[] = {{0.1f, 0.0f, 0.0f, 0.0f, false}, {0.05f, 0.9f, 0.0f, 5e-4f, false}, {0.05f, 0.9f, 0.0f, 1e-4f, true},
               {0.2f, 0.5f, 0.3f, 0.0f, false}};
    for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
        float *p = rnd(n, -1, 1), *buf = cfg[t].mom != 0 ? tf(n) : NULL;
        double *rp = td(n), *rb = td(n);
        for (int64_t i = 0; i < n; i++) rp[i] = p[i];
        for (int step = 0; step < 3; step++) {
            float *g = rnd(n, -1, 1);
            ASSERT_OK(OPS->sgd_step(g_be, STREAM, n, p, g, buf, cfg[t].lr, cfg[t].mom, cfg[t].damp, cfg[t].wd,
                                    cfg[t].nesterov, step == 0));
            for (int64_t i = 0; i < n; i++) {
                double d = g[i] + (double)cfg[t].wd * rp[i];
                if (cfg[t].mom != 0) {
                    rb[i] = step == 0 ? d : cfg[t].mom * rb[i] + (1.0 - cfg[t].damp) * d;
                    d = cfg[t].nesterov ? d + cfg[t].mom * rb[i] : rb[i];
                }
                rp[i] -= cfg[t].lr * d;
            }
        }
        char what[64];
        snprintf(what, sizeof what, "sgd cfg %zu (3 steps)", t);
        CHECK_FP32(what, p, to_ref(rp, n, NULL), n, 12); /* ~4 roundings per step */
        if (buf) CHECK_FP32("sgd momentum buffer", buf, to_ref(rb, n, NULL), n, 9);
    }
}

static void test_adamw(void **state) {
    seed(11);
    const int64_t n = 333;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float *p = rnd(n, -1, 1), *m = tf(n), *v = tf(n);
    double *rp = td(n), *rm = td(n), *rv = td(n);
    for (int64_t i = 0; i < n; i++) rp[i] = p[i];
    for (int64_t step = 1; step <= 4; step++) {
        float *g = rnd(n, -1, 1);
        ASSERT_OK(OPS->adamw_step(g_be, STREAM, n, p, g, m, v, lr, b1, b2, eps, wd, step));
        double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
        for (int64_t i = 0; i < n; i++) {
            rp[i] *= 1 - (double)lr * wd; /* decoupled decay first (PyTorch 1.13) */
            rm[i] = b1 * rm[i] + (1 - (double)b1) * g[i];
            rv[i] = b2 * rv[i] + (1 - (double)b2) * g[i] * g[i];
            rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
    }
    CHECK_FP32("adamw p (4 steps)", p, to_ref(rp, n, NULL), n, 40);
    CHECK_FP32("adamw m", m, to_ref(rm, n, NULL), n, 8);
    CHECK_FP32("adamw v", v, to_ref(rv, n, NULL), n, 8);
}

static void test_sum_squares(void **state) {
    seed(12);
    const int64_t n = 100003;
    float *x = rnd(n, -3, 3);
    double ref = 0, got = 0, again = 0;
    for (int64_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    ASSERT_OK(OPS->sum_squares(g_be, STREAM, n, x, &got));
    ASSERT_OK(OPS->sum_squares(g_be, STREAM, n, x, &again));
    printf("sum_squares %.17g ref %.17g\n", got, ref);
    assert_true(fabs(got - ref) <= 1e-12 * ref);
    assert_true(memcmp(&got, &again, sizeof got) == 0);
    ASSERT_OK(OPS->sum_squares(g_be, STREAM, 0, NULL, &got));
    assert_true(got == 0.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_memory, test_teardown),
        cmocka_unit_test_teardown(test_linear, test_teardown),
        cmocka_unit_test_teardown(test_conv, test_teardown),
        cmocka_unit_test_teardown(test_linear_bf16_output, test_teardown),
        cmocka_unit_test_teardown(test_conv_bf16_output, test_teardown),
        cmocka_unit_test_teardown(test_errors, test_teardown),
        cmocka_unit_test_teardown(test_pool, test_teardown),
        cmocka_unit_test_teardown(test_batchnorm, test_teardown),
        cmocka_unit_test_teardown(test_batchnorm_bf16_input, test_teardown),
        cmocka_unit_test_teardown(test_batchnorm_bf16_dx, test_teardown),
        cmocka_unit_test_teardown(test_batchnorm_residual, test_teardown),
        cmocka_unit_test_teardown(test_eltwise, test_teardown),
        cmocka_unit_test_teardown(test_dropout, test_teardown),
        cmocka_unit_test_teardown(test_softmax_xent, test_teardown),
        cmocka_unit_test_teardown(test_layout, test_teardown),
        cmocka_unit_test_teardown(test_cast, test_teardown),
        cmocka_unit_test_teardown(test_sgd, test_teardown),
        cmocka_unit_test_teardown(test_adamw, test_teardown),
        cmocka_unit_test_teardown(test_sum_squares, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
