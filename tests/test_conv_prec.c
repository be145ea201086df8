/* tests/test_conv_prec.c — the CPU backend's 2-D convolution at every precision.
 *
 * Method (as test_linear_prec.c): random FP32 x, w, dy are quantized with the backend's own
 * quantize op into the plan's storage dtypes; the reference is an FP64 convolution of the
 * *dequantized* operands, so the comparison isolates the convolution path. Shapes cover
 * padding, stride 2, asymmetric geometry, 1×1 kernels (the INT8 matmul backward-weights),
 * a 1-channel input (INT8 forward through exact f32 sums) and a bias.
 * Tolerances (tests/support/check.h), by how each path computes:
 *  - INT8 (native): products of int8 codes summed exactly in int32, so only a few roundings
 *    remain — the f32 conversion of the int32 sums, the f32 sum of the reduction chunks,
 *    the scale product and bias, and those of the dequantized reference operands: the
 *    budget of a 16-term FP32 sum, 4·2^-24·4 ≈ 1e-6 of the output's magnitude;
 *  - FP32, BF16 (exact bf16 products, f32 accumulation) and emulated FP16/FP8 (operands
 *    widened exactly): the FP32 budget of the reduction length — C·R·S forward, K·R·S
 *    backward-data, N·P·Q backward-weights;
 *  - INT8 on a CPU without exact int8 kernels runs emulated: the FP32 budget.
 * The reduction of backward-weights is split into chunks of ≤ 133,144 int8 products (the
 * int32-exact bound); two tests exceed it, with operands at the int8 extremes so that an
 * unsplit int32 sum would overflow. */
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
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "graph_helpers.h"
#include "op_harness.h"
#include "qsync/rng.h"
#include "qsync/status.h"

static float *constant(int64_t n, float v) {
    float *p = qs_th_floats(n);
    for (int64_t i = 0; i < n; i++) p[i] = v;
    return p;
}


/* FP64 reference of all three directions: y (N,P,Q,K) = conv(x, w) [+ b];
 * dx (N,H,W,C) = conv backward-data(dy, w); dw (K,C,R,S) = Σ dy ⊗ x. Any output may be NULL. */
static void ref_conv(const qs_conv_desc *d, const float *x, const float *w, const float *b, const float *dy,
                     double *y, double *dx, double *dw) {
    const int64_t C = d->C, K = d->K, R = d->R, S = d->S;
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++) {
                const int64_t o = ((n * d->P + p) * d->Q + q) * K;
                for (int64_t k = 0; y && b && k < K; k++) y[o + k] += b[k];
                for (int64_t r = 0; r < R; r++) {
                    const int64_t h = p * d->stride_h - d->pad_h + r;
                    if (h < 0 || h >= d->H) continue;
                    for (int64_t s = 0; s < S; s++) {
                        const int64_t ww = q * d->stride_w - d->pad_w + s;
                        if (ww < 0 || ww >= d->W) continue;
                        const int64_t i = ((n * d->H + h) * d->W + ww) * C;
                        for (int64_t k = 0; k < K; k++)
                            for (int64_t c = 0; c < C; c++) {
                                const int64_t wi = ((k * C + c) * R + r) * S + s;
                                if (y) y[o + k] += (double)x[i + c] * w[wi];
                                if (dx) dx[i + c] += (double)dy[o + k] * w[wi];
                                if (dw) dw[wi] += (double)dy[o + k] * x[i + c];
                            }
                    }
                }
            }
}

static float *to_f32(const double *r, int64_t n, const float *base) {
    float *o = qs_th_floats(n);
    for (int64_t i = 0; i < n; i++) o[i] = (float)(r[i] + (base ? base[i] : 0.0));
    return o;
}

/* Reduction length for the tolerance of direction `dir` (see the top comment). */
static double tol_terms(void *plan, qs_precision p, int dir, double fp32_terms) {
    const char *impl = qs_cpu_conv_impl_name(plan, dir);
    if (p == QS_PREC_INT8 && !strstr(impl, "emulated")) return 16;
    return fp32_terms + 4;
}

typedef struct shape {
    int64_t N, H, W, C, K, R, S, sh, sw, ph, pw;
    bool bias;
} shape;

/* Forward, backward-data (overwrite and accumulate) and backward-weights of one shape at
 * precision p against the FP64 reference on the dequantized operands. `extreme`: all
 * operands at their quantized maximum (int8 code 127), the worst case of the int32 sums. */
static void check_conv_prec(qs_precision p, shape sp, bool per_row, bool extreme) {
    qs_th_seed(qs_rng_key(13, "conv_prec", (uint64_t)(p * 1000 + sp.N * 31 + sp.C)));
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    qs_conv_desc d = {.N = sp.N, .H = sp.H, .W = sp.W, .C = sp.C, .K = sp.K, .R = sp.R, .S = sp.S,
                      .stride_h = sp.sh, .stride_w = sp.sw, .pad_h = sp.ph, .pad_w = sp.pw,
                      .has_bias = sp.bias, .prec = p};
    ASSERT_OK(qs_conv_desc_finish(&d));
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->conv_plan(qs_th_be, &d, &plan, &wsb));
    void *ws = qs_th_alloc(wsb);
    const int64_t nx = d.N * d.H * d.W * d.C, nw = d.K * d.C * d.R * d.S, ny = d.N * d.P * d.Q * d.K;
    const int64_t CRS = d.C * d.R * d.S;
    float *x = extreme ? constant(nx, 1.0f) : qs_th_uniform(nx, -2, 2);
    float *w = extreme ? constant(nw, 0.5f) : qs_th_uniform(nw, -0.5f, 0.5f);
    float *dy = extreme ? constant(ny, 0.25f) : qs_th_uniform(ny, -1, 1);
    float *b = d.has_bias ? qs_th_uniform(d.K, -1, 1) : NULL;
    qs_th_qmat qx = qs_th_quantize(x, d.N * d.H * d.W, d.C, fdt, false, false, 9), qw = qs_th_quantize(w, d.K, CRS, fdt, per_row, false, 9);
    qs_th_qmat qdy = qs_th_quantize(dy, d.N * d.P * d.Q, d.K, gdt, false, !extreme, 9);
    char what[256], geom[128];
    snprintf(geom, sizeof geom, "N%lld %lldx%lld C%lld K%lld %lldx%lld s%lld,%lld p%lld,%lld%s%s", (long long)d.N,
             (long long)d.H, (long long)d.W, (long long)d.C, (long long)d.K, (long long)d.R, (long long)d.S,
             (long long)d.stride_h, (long long)d.stride_w, (long long)d.pad_h, (long long)d.pad_w,
             d.has_bias ? " bias" : "", per_row ? " per-row w" : "");
    const char *pn = qs_precision_name(p);

    double *ry = qs_th_doubles(ny);
    ref_conv(&d, qx.deq, qw.deq, b, NULL, ry, NULL, NULL);
    float *y = qs_th_floats(ny);
    ASSERT_OK(OPS->conv_forward(qs_th_be, plan, STREAM, &qx.op, &qw.op, b, y, ws));
    snprintf(what, sizeof what, "%s conv fwd %s [%s]", pn, geom, qs_cpu_conv_impl_name(plan, 0));
    assert_true(qs_check_fp32(what, y, to_f32(ry, ny, NULL), ny, tol_terms(plan, p, 0, (double)CRS)));

    if (!per_row) {
        double *rdx = qs_th_doubles(nx);
        ref_conv(&d, NULL, qw.deq, NULL, qdy.deq, NULL, rdx, NULL);
        const double terms = tol_terms(plan, p, 1, (double)(d.K * d.R * d.S));
        float *dx = qs_th_floats(nx);
        ASSERT_OK(OPS->conv_backward_data(qs_th_be, plan, STREAM, &qdy.op, &qw.op, dx, false, ws));
        snprintf(what, sizeof what, "%s conv bwd_data %s [%s]", pn, geom, qs_cpu_conv_impl_name(plan, 1));
        assert_true(qs_check_fp32(what, dx, to_f32(rdx, nx, NULL), nx, terms));
        float *dx0 = qs_th_uniform(nx, -1, 1), *dxa = qs_th_floats(nx);
        memcpy(dxa, dx0, (size_t)nx * sizeof(float));
        ASSERT_OK(OPS->conv_backward_data(qs_th_be, plan, STREAM, &qdy.op, &qw.op, dxa, true, ws));
        snprintf(what, sizeof what, "%s conv bwd_data accumulate %s", pn, geom);
        assert_true(qs_check_fp32(what, dxa, to_f32(rdx, nx, dx0), nx, terms + 1));
    } else { /* per-channel weights must be folded into dY for backward-data */
        float *dx = qs_th_floats(nx);
        assert_int_equal(OPS->conv_backward_data(qs_th_be, plan, STREAM, &qdy.op, &qw.op, dx, false, ws),
                         QS_ERR_INVALID_ARG);
        assert_non_null(strstr(qs_last_error(), "per-row"));
    }

    double *rdw = qs_th_doubles(nw);
    ref_conv(&d, qx.deq, NULL, NULL, qdy.deq, NULL, NULL, rdw);
    float *dw = qs_th_floats(nw);
    const bool want_db = d.has_bias && gdt == QS_F32;
    float *db = want_db ? qs_th_floats(d.K) : NULL;
    ASSERT_OK(OPS->conv_backward_weights(qs_th_be, plan, STREAM, &qdy.op, &qx.op, dw, db, ws));
    snprintf(what, sizeof what, "%s conv bwd_weights %s [%s]", pn, geom, qs_cpu_conv_impl_name(plan, 2));
    assert_true(qs_check_fp32(what, dw, to_f32(rdw, nw, NULL), nw, tol_terms(plan, p, 2, (double)(d.N * d.P * d.Q))));
    if (want_db) {
        double *rdb = qs_th_doubles(d.K);
        for (int64_t i = 0; i < ny; i++) rdb[i % d.K] += qdy.deq[i];
        snprintf(what, sizeof what, "%s conv bias gradient %s", pn, geom);
        assert_true(qs_check_fp32(what, db, to_f32(rdb, d.K, NULL), d.K, (double)(d.N * d.P * d.Q)));
    } else if (d.has_bias) { /* a low-precision dY: the layer computes db from the FP32 gradient */
        assert_int_equal(OPS->conv_backward_weights(qs_th_be, plan, STREAM, &qdy.op, &qx.op, dw, qs_th_floats(d.K), ws),
                         QS_ERR_INVALID_ARG);
        assert_non_null(strstr(qs_last_error(), "column_sums"));
    }
    OPS->plan_destroy(qs_th_be, plan);
}

static const qs_precision g_precs[] = {QS_PREC_FP32, QS_PREC_BF16, QS_PREC_INT8, QS_PREC_FP16, QS_PREC_FP8};

static const shape g_shapes[] = {
    /*  N   H   W   C   K  R  S sh sw ph pw bias */
    {2, 9, 9, 3, 5, 3, 3, 1, 1, 1, 1, true},       /* padding, bias */
    {3, 10, 10, 8, 6, 3, 3, 2, 2, 1, 1, false},    /* stride 2 (even input) */
    {2, 11, 11, 8, 16, 3, 3, 2, 2, 1, 1, false},   /* stride 2 (odd input) */
    {2, 8, 8, 16, 8, 1, 1, 2, 2, 0, 0, true},      /* 1×1 stride 2: INT8 matmuls (gather / scatter) */
    {2, 9, 7, 6, 10, 1, 1, 2, 1, 0, 0, false},     /* 1×1 strides 2,1 on an odd input */
    {2, 10, 10, 4, 6, 3, 3, 2, 2, 0, 0, false},    /* stride 2 without padding: last row unread */
    {2, 7, 7, 4, 12, 1, 1, 1, 1, 0, 0, false},     /* 1×1 stride 1: INT8 matmul on X itself */
    {2, 6, 6, 5, 4, 1, 1, 1, 1, 1, 1, false},      /* 1×1 with padding: INT8 swapped conv */
    {2, 12, 12, 1, 8, 5, 5, 1, 1, 2, 2, true},     /* 1 input channel: INT8 forward as exact f32 */
    {2, 9, 7, 6, 5, 3, 1, 2, 1, 1, 0, true},       /* asymmetric kernel, stride and padding */
    {1, 13, 13, 32, 40, 5, 5, 1, 1, 2, 2, false},  /* longer reductions (C·R·S = 800) */
};

static void test_conv_all_precisions(void **state) {
    for (size_t i = 0; i < sizeof g_precs / sizeof *g_precs; i++)
        for (size_t j = 0; j < sizeof g_shapes / sizeof *g_shapes; j++)
            check_conv_prec(g_precs[i], g_shapes[j], false, false);
}

/* Per-output-channel INT8 weight scales in forward; backward-data refuses them. */
static void test_conv_int8_per_channel(void **state) {
    check_conv_prec(QS_PREC_INT8, g_shapes[0], true, false);
    check_conv_prec(QS_PREC_INT8, g_shapes[3], true, false);
    check_conv_prec(QS_PREC_INT8, g_shapes[6], true, false);
}

/* Backward-weights reductions longer than 133,144 int8 products, with every operand at code
 * 127 (an unsplit int32 sum would reach 2.2e9 and overflow): the 1×1 matmul over N·P·Q =
 * 141,120 rows, and the swapped convolution over 175 images of 28×28 outputs (137,200 terms,
 * chunks of 88 and 87 images). Random operands as well. */
static void test_conv_int8_chunked_reduction(void **state) {
    const shape s1 = {180, 28, 28, 4, 4, 1, 1, 1, 1, 0, 0, false};
    const shape s3 = {175, 28, 28, 2, 3, 3, 3, 1, 1, 1, 1, false};
    check_conv_prec(QS_PREC_INT8, s1, false, true);
    check_conv_prec(QS_PREC_INT8, s3, false, true);
    check_conv_prec(QS_PREC_INT8, s3, false, false);
    /* the plans say how they split */
    qs_conv_desc d = {.N = 175, .H = 28, .W = 28, .C = 2, .K = 3, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                      .pad_h = 1, .pad_w = 1, .prec = QS_PREC_INT8};
    ASSERT_OK(qs_conv_desc_finish(&d));
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->conv_plan(qs_th_be, &d, &plan, &wsb));
    const char *impl = qs_cpu_conv_impl_name(plan, 2);
    if (!strstr(impl, "emulated")) assert_non_null(strstr(impl, "x2 chunks"));
    OPS->plan_destroy(qs_th_be, plan);
}

/* Plan/operand mismatches are errors that say what was wrong. */
static void test_conv_operand_errors(void **state) {
    qs_conv_desc d = {.N = 1, .H = 4, .W = 4, .C = 2, .K = 3, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                      .pad_h = 1, .pad_w = 1, .prec = QS_PREC_INT8};
    ASSERT_OK(qs_conv_desc_finish(&d));
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->conv_plan(qs_th_be, &d, &plan, &wsb));
    void *ws = qs_th_alloc(wsb);
    float *x = qs_th_floats(32), *w = qs_th_floats(54), *y = qs_th_floats(48);
    qs_operand fx = qs_operand_f32(x), fw = qs_operand_f32(w);
    assert_int_equal(OPS->conv_forward(qs_th_be, plan, STREAM, &fx, &fw, NULL, y, ws), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "s8"));
    qs_operand sx = {.data = x, .dt = QS_S8, .scale = NULL};
    assert_int_equal(OPS->conv_forward(qs_th_be, plan, STREAM, &sx, &fw, NULL, y, ws), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "scale"));
    OPS->plan_destroy(qs_th_be, plan);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_conv_all_precisions, qs_th_teardown),
        cmocka_unit_test_teardown(test_conv_int8_per_channel, qs_th_teardown),
        cmocka_unit_test_teardown(test_conv_int8_chunked_reduction, qs_th_teardown),
        cmocka_unit_test_teardown(test_conv_operand_errors, qs_th_teardown),
    };
    return cmocka_run_group_tests(tests, qs_th_group_setup, qs_th_group_teardown);
}
