/* tests/test_linear_prec.c — the CPU backend's Linear at every precision, and its quantize /
 * dequantize / column_sums ops.
 *
 * Method: random FP32 x, w, dy are quantized with the backend's own quantize op into the
 * plan's storage dtypes; the reference is an FP64 GEMM of the *dequantized* operands, so the
 * comparison isolates the GEMM path (the quantization error itself is tested in test_quant.c
 * and below). Tolerances (tests/support/check.h): every path multiplies exactly representable
 * operands and accumulates either exactly (INT8: int32) or in FP32 (BF16 products are exact in
 * FP32; emulated FP16/FP8 widen exactly), so the FP32 budget of a K-term dot product applies;
 * INT8 adds a few roundings (the f32 conversion of the int32 sum, the scale product, the
 * dequantized reference operands), covered by K + 4. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cmocka.h>

#include "check.h"
#include "core/backend.h"
#include "cpu/dnnl_util.h" /* qs_dnnl_int8_exact */
#include "graph_helpers.h"
#include "op_harness.h"
#include "qsync/rng.h"
#include "qsync/status.h"


/* c (m,n) = a (m,k) · b where b(k,n) is read at b[kk*bs_k + nn*bs_n]; FP64. */
static void ref_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t as_m, int64_t as_k, const float *b,
                     int64_t bs_k, int64_t bs_n, double *c) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++) s += (double)a[i * as_m + l * as_k] * b[l * bs_k + j * bs_n];
            c[i * n + j] = s;
        }
}

static float *to_f32(const double *r, int64_t n, const float *base) {
    float *o = qs_th_floats(n);
    for (int64_t i = 0; i < n; i++) o[i] = (float)(r[i] + (base ? base[i] : 0.0));
    return o;
}

#define CHECK_FP32(what, got, ref, n, K) assert_true(qs_check_fp32((what), (got), (ref), (n), (K)))

/* Forward, backward-data (overwrite and accumulate) and backward-weights of one shape at
 * precision p against the FP64 reference on the dequantized operands. */
static void check_linear_prec(qs_precision p, int64_t M, int64_t N, int64_t K, bool bias, bool per_row) {
    qs_th_seed(qs_rng_key(11, "linear_prec", (uint64_t)(p * 1000 + M)));
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    qs_linear_desc d = {.M = M, .N = N, .K = K, .has_bias = bias, .prec = p};
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->linear_plan(qs_th_be, &d, &plan, &wsb));
    void *ws = qs_th_alloc(wsb);
    float *x = qs_th_uniform(M * K, -2, 2), *w = qs_th_uniform(N * K, -0.5f, 0.5f), *dy = qs_th_uniform(M * N, -1, 1);
    float *b = bias ? qs_th_uniform(N, -1, 1) : NULL;
    qs_th_qmat qx = qs_th_quantize(x, M, K, fdt, false, false, 7), qw = qs_th_quantize(w, N, K, fdt, per_row, false, 7);
    qs_th_qmat qdy = qs_th_quantize(dy, M, N, gdt, false, true, 7);
    char what[128];
    const char *pn = qs_precision_name(p);

    double *ry = qs_th_doubles(M * N);
    ref_gemm(M, N, K, qx.deq, K, 1, qw.deq, 1, K, ry);
    for (int64_t i = 0; bias && i < M; i++)
        for (int64_t j = 0; j < N; j++) ry[i * N + j] += b[j];
    float *y = qs_th_floats(M * N);
    ASSERT_OK(OPS->linear_forward(qs_th_be, plan, STREAM, &qx.op, &qw.op, b, y, ws));
    snprintf(what, sizeof what, "%s linear fwd M%lld N%lld K%lld%s", pn, (long long)M, (long long)N, (long long)K,
             per_row ? " per-row w" : "");
    CHECK_FP32(what, y, to_f32(ry, M * N, NULL), M * N, (double)K + 4);

    if (!per_row) {
        double *rdx = qs_th_doubles(M * K);
        ref_gemm(M, K, N, qdy.deq, N, 1, qw.deq, K, 1, rdx);
        float *dx = qs_th_floats(M * K);
        ASSERT_OK(OPS->linear_backward_data(qs_th_be, plan, STREAM, &qdy.op, &qw.op, dx, false, ws));
        snprintf(what, sizeof what, "%s linear bwd_data", pn);
        CHECK_FP32(what, dx, to_f32(rdx, M * K, NULL), M * K, (double)N + 4);
        float *dx0 = qs_th_uniform(M * K, -1, 1), *dxa = qs_th_floats(M * K);
        memcpy(dxa, dx0, (size_t)(M * K) * sizeof(float));
        ASSERT_OK(OPS->linear_backward_data(qs_th_be, plan, STREAM, &qdy.op, &qw.op, dxa, true, ws));
        snprintf(what, sizeof what, "%s linear bwd_data accumulate", pn);
        CHECK_FP32(what, dxa, to_f32(rdx, M * K, dx0), M * K, (double)N + 5);
    } else { /* per-channel weights must be folded into dY for backward-data */
        float *dx = qs_th_floats(M * K);
        assert_int_equal(OPS->linear_backward_data(qs_th_be, plan, STREAM, &qdy.op, &qw.op, dx, false, ws),
                         QS_ERR_INVALID_ARG);
        assert_non_null(strstr(qs_last_error(), "per-row"));
    }

    double *rdw = qs_th_doubles(N * K);
    ref_gemm(N, K, M, qdy.deq, 1, N, qx.deq, K, 1, rdw);
    float *dw = qs_th_floats(N * K);
    float *db = bias && gdt == QS_F32 ? qs_th_floats(N) : NULL;
    ASSERT_OK(OPS->linear_backward_weights(qs_th_be, plan, STREAM, &qdy.op, &qx.op, dw, db, ws));
    snprintf(what, sizeof what, "%s linear bwd_weights", pn);
    CHECK_FP32(what, dw, to_f32(rdw, N * K, NULL), N * K, (double)M + 4);
    OPS->plan_destroy(qs_th_be, plan);
}

static const qs_precision g_precs[] = {QS_PREC_FP32, QS_PREC_BF16, QS_PREC_INT8, QS_PREC_FP16, QS_PREC_FP8};

static void test_linear_all_precisions(void **state) {
    for (size_t i = 0; i < sizeof g_precs / sizeof *g_precs; i++) {
        check_linear_prec(g_precs[i], 37, 29, 53, true, false);
        check_linear_prec(g_precs[i], 128, 64, 200, false, false);
    }
}

static void test_linear_int8_per_channel(void **state) {
    check_linear_prec(QS_PREC_INT8, 33, 17, 45, true, true);
}

/* M above the int32-exact bound of 133,144 int8 products: backward-weights is chunked. */
static void test_linear_int8_chunked_reduction(void **state) {
    check_linear_prec(QS_PREC_INT8, 140001, 3, 5, false, false);
}

/* Plan/operand mismatches are errors that say what was wrong. */
static void test_operand_errors(void **state) {
    qs_linear_desc d = {.M = 4, .N = 3, .K = 2, .prec = QS_PREC_INT8};
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->linear_plan(qs_th_be, &d, &plan, &wsb));
    void *ws = qs_th_alloc(wsb);
    float *x = qs_th_floats(8), *w = qs_th_floats(6), *y = qs_th_floats(12);
    qs_operand fx = qs_operand_f32(x), fw = qs_operand_f32(w);
    assert_int_equal(OPS->linear_forward(qs_th_be, plan, STREAM, &fx, &fw, NULL, y, ws), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "s8"));
    qs_operand sx = {.data = x, .dt = QS_S8, .scale = NULL};
    assert_int_equal(OPS->linear_forward(qs_th_be, plan, STREAM, &sx, &fw, NULL, y, ws), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "scale"));
    OPS->plan_destroy(qs_th_be, plan);
}

/* quantize: per-row S8 scales, the FP8 power-of-two scale (no saturation of amax), the
 * col_scale fold, and non-finite input. */
static void test_quantize_op(void **state) {
    qs_th_seed(qs_rng_key(3, "quantize_op", 0));
    const int64_t R = 5, C = 40;
    float *x = qs_th_uniform(R * C, -3, 3), *cs = qs_th_uniform(C, 0.5f, 2);
    x[7] = 100.0f; /* row 0's amax */
    qs_th_qmat q = qs_th_quantize(x, R, C, QS_S8, true, false, 7);
    assert_float_equal(q.op.scale[0], 100.0f / 127.0f, 1e-6);
    for (int64_t i = 0; i < R * C; i++) assert_true(fabsf(q.deq[i] - x[i]) <= 0.5f * q.op.scale[i / C] * 1.0001f);
    for (int f = 0; f < 2; f++) {
        qs_dtype dt = f ? QS_F8E5M2 : QS_F8E4M3;
        qs_th_qmat q8 = qs_th_quantize(x, R, C, dt, false, false, 7);
        float s = q8.op.scale[0];
        int e;
        assert_float_equal(frexpf(s, &e), 0.5f, 0); /* a power of two */
        float fmax = dt == QS_F8E4M3 ? 448.0f : 57344.0f;
        assert_true(100.0f / s <= fmax && 100.0f / s > fmax / 2); /* amax lands in the top binade */
        assert_float_equal(q8.deq[7], 100.0f, 100.0f * (dt == QS_F8E4M3 ? 0.0625f : 0.125f));
    }
    /* fold: quantize(x · cs) == quantize of the explicitly scaled copy */
    float *xs = qs_th_floats(R * C);
    for (int64_t i = 0; i < R * C; i++) xs[i] = x[i] * cs[i % C];
    int8_t *a = qs_th_alloc((size_t)(R * C)), *bq = qs_th_alloc((size_t)(R * C));
    float sa, sb;
    ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, x, cs, QS_S8, a, &sa, false, NULL, NULL, NULL));
    ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, xs, NULL, QS_S8, bq, &sb, false, NULL, NULL, NULL));
    assert_memory_equal(a, bq, (size_t)(R * C));
    assert_float_equal(sa, sb, 0);
    x[3] = INFINITY;
    assert_int_equal(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_F8E5M2, a, &sa, false, NULL, NULL, NULL), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "non-finite"));
    /* column sums */
    float *sums = qs_th_floats(C);
    ASSERT_OK(OPS->column_sums(qs_th_be, STREAM, R, C, xs, sums));
    for (int64_t c = 0; c < C; c++) {
        double s = 0;
        for (int64_t r = 0; r < R; r++) s += xs[r * C + c];
        assert_float_equal(sums[c], (float)s, 0);
    }
}

/* quantize's transposed copy: the codes of dst (unchanged by asking for it) transposed, for
 * every 1-byte dtype, with stochastic rounding and a col_scale; refused for 2- and 4-byte
 * dtypes and per-row scales. */
static void test_quantize_transposed_copy(void **state) {
    qs_th_seed(qs_rng_key(3, "quantize_t", 0));
    const int64_t R = 7, C = 33;
    float *x = qs_th_uniform(R * C, -3, 3), *cs = qs_th_uniform(C, 0.5f, 2);
    uint8_t *q = qs_th_alloc((size_t)(R * C)), *q2 = qs_th_alloc((size_t)(R * C)), *t = qs_th_alloc((size_t)(R * C));
    float s1, s2;
    const qs_dtype dts[] = {QS_S8, QS_F8E4M3, QS_F8E5M2};
    const qs_sr sr = {.key = 11, .counter = 4, .offset = 5};
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, x, cs, dts[k], q, &s1, false, &sr, NULL, NULL));
        memset(t, 0xA5, (size_t)(R * C));
        ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, x, cs, dts[k], q2, &s2, false, &sr, t, NULL));
        assert_memory_equal(q2, q, (size_t)(R * C));
        assert_float_equal(s2, s1, 0);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) assert_int_equal(t[c * R + r], q[r * C + c]);
    }
    assert_int_equal(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_BF16, q, NULL, false, NULL, t, NULL), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "transposed copy"));
    float rs[7];
    assert_int_equal(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_S8, q, rs, true, NULL, t, NULL), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "per-row"));
}

/* FP8 delayed scaling: the first call (empty history) scales like current scaling and records
 * its amax; the next scales from the history — a tensor 4× larger saturates there, coded
 * exactly as qs_f32_to_fp8 with the old scale — and records its own; record = false leaves
 * the history; non-FP8 dtypes and bad slots are refused. */
static void test_quantize_delayed_scaling(void **state) {
    qs_th_seed(qs_rng_key(3, "quantize_delayed", 0));
    const int64_t R = 6, C = 50, n = R * C;
    float *x = qs_th_uniform(n, -1, 1), *x4 = qs_th_floats(n);
    x[0] = 1.0f; /* amax 1 */
    for (int64_t i = 0; i < n; i++) x4[i] = 4.0f * x[i];
    uint8_t *q = qs_th_alloc((size_t)n), *ref = qs_th_alloc((size_t)n);
    float s_cur, s_del, hist[3] = {0, 0, 0};
    qs_quant_delayed dl = {.amax = hist, .len = 2, .slot = 0, .record = true};
    ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_F8E4M3, ref, &s_cur, false, NULL, NULL, NULL));
    ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_F8E4M3, q, &s_del, false, NULL, NULL, &dl));
    assert_memory_equal(q, ref, (size_t)n);
    assert_float_equal(s_del, s_cur, 0);
    assert_float_equal(hist[0], 1.0f, 0);
    dl.slot = 1;
    ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, x4, NULL, QS_F8E4M3, q, &s_del, false, NULL, NULL, &dl));
    assert_float_equal(s_del, s_cur, 0); /* the history's scale, not x4's */
    ASSERT_OK(qs_f32_to_fp8(QS_F8E4M3, n, x4, 1.0f / s_cur, ref, NULL));
    assert_memory_equal(q, ref, (size_t)n);
    int saturated = 0;
    for (int64_t i = 0; i < n; i++) saturated += (q[i] & 0x7F) == 0x7E; /* 448 */
    assert_true(saturated > 0);
    assert_float_equal(hist[1], 4.0f, 0);
    dl.slot = 0;
    dl.record = false;
    ASSERT_OK(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_F8E4M3, q, &s_del, false, NULL, NULL, &dl));
    assert_float_equal(hist[0], 1.0f, 0);
    assert_true(s_del > s_cur); /* scaled for amax 4 */
    assert_int_equal(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_BF16, q, NULL, false, NULL, NULL, &dl),
                     QS_ERR_INVALID_ARG);
    dl.slot = 2;
    assert_int_equal(OPS->quantize(qs_th_be, STREAM, R, C, x, NULL, QS_F8E4M3, q, &s_del, false, NULL, NULL, &dl),
                     QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "slot"));
}

/* The support table: FP32 native, FP16/FP8 emulated, TF32 unsupported; BF16/INT8 native or
 * emulated depending on the CPU (both run either way), INT8 native only where oneDNN's s8
 * kernels sum exactly (VNNI, AMX). With oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, as
 * scripts/test.sh reruns the ISA-dependent suites) both are emulated: the cap reached the
 * backend, and the rerun tests the emulated case. */
static void test_precision_support(void **state) {
    assert_int_equal(OPS->precision_support(qs_th_be, QS_PREC_FP32), QS_PREC_NATIVE);
    assert_int_equal(OPS->precision_support(qs_th_be, QS_PREC_TF32), QS_PREC_UNSUPPORTED);
    assert_int_equal(OPS->precision_support(qs_th_be, QS_PREC_FP16), QS_PREC_EMULATED);
    assert_int_equal(OPS->precision_support(qs_th_be, QS_PREC_FP8), QS_PREC_EMULATED);
    assert_int_not_equal(OPS->precision_support(qs_th_be, QS_PREC_BF16), QS_PREC_UNSUPPORTED);
    assert_int_not_equal(OPS->precision_support(qs_th_be, QS_PREC_INT8), QS_PREC_UNSUPPORTED);
    if (!qs_dnnl_int8_exact()) assert_int_equal(OPS->precision_support(qs_th_be, QS_PREC_INT8), QS_PREC_EMULATED);
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    if (cap && strcasecmp(cap, "AVX2") == 0) {
        assert_false(qs_dnnl_int8_exact());
        assert_int_equal(OPS->precision_support(qs_th_be, QS_PREC_BF16), QS_PREC_EMULATED);
        assert_int_equal(OPS->precision_support(qs_th_be, QS_PREC_INT8), QS_PREC_EMULATED);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_linear_all_precisions, qs_th_teardown),
        cmocka_unit_test_teardown(test_linear_int8_per_channel, qs_th_teardown),
        cmocka_unit_test_teardown(test_linear_int8_chunked_reduction, qs_th_teardown),
        cmocka_unit_test_teardown(test_operand_errors, qs_th_teardown),
        cmocka_unit_test_teardown(test_quantize_op, qs_th_teardown),
        cmocka_unit_test_teardown(test_quantize_transposed_copy, qs_th_teardown),
        cmocka_unit_test_teardown(test_quantize_delayed_scaling, qs_th_teardown),
        cmocka_unit_test_teardown(test_precision_support, qs_th_teardown),
    };
    return cmocka_run_group_tests(tests, qs_th_group_setup, qs_th_group_teardown);
}
