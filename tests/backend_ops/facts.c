/* tests/backend_ops/facts.c — defines: bo_facts (facts.h) and the facts about one backend under
 * test that are not comparisons with the reference: the device basics (name, precisions, memory
 * accounting, zeroed and aligned allocations, copies between views), output dtypes refused at
 * plan time, refusals of the batch-norm dtypes, empty ops with NULL pointers, and plan lifetimes.
 * Backend-specific expectations say so where they differ (the name, the precisions a backend
 * does not run, its alignment). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "facts.h"
#include "facts_errors.h"
#include "gpu_harness.h"
#include "graph_helpers.h"

/* The precision the DUT does not run: INT8 on CUDA (not yet), TF32 on the CPU (GPUs only). */
static bool expect_unsupported(qs_precision p) { return gh_dut_is_cuda() ? p == QS_PREC_INT8 : p == QS_PREC_TF32; }

/* memory_stats: sizes as requested, peak monotone; both arguments optional. */
static void device_memory_stats(void) {
    char line[256];
    size_t in0 = 0, pk0 = 0, in1 = 0, pk1 = 0, in2 = 0, pk2 = 0, in3 = 0;
    DOPS->memory_stats(g_dut, &in0, &pk0);
    void *a = NULL, *b = NULL;
    ASSERT_OK(DOPS->alloc(g_dut, 1000, &a));
    ASSERT_OK(DOPS->alloc(g_dut, 3333, &b));
    DOPS->memory_stats(g_dut, &in1, &pk1);
    snprintf(line, sizeof line, "in_use %zu -> %zu, peak %zu -> %zu", in0, in1, pk0, pk1);
    check_fact("memory_stats after alloc 1000 + 3333", in1 == in0 + 4333 && pk1 >= in1 && pk1 >= pk0, line);
    DOPS->free(g_dut, a);
    DOPS->memory_stats(g_dut, &in2, &pk2);
    snprintf(line, sizeof line, "in_use %zu, peak %zu", in2, pk2);
    check_fact("memory_stats after free 1000", in2 == in0 + 3333 && pk2 == pk1, line);
    DOPS->free(g_dut, b);
    DOPS->memory_stats(g_dut, &in3, NULL);
    DOPS->memory_stats(g_dut, NULL, NULL);
    snprintf(line, sizeof line, "in_use %zu", in3);
    check_fact("memory_stats after free 3333", in3 == in0, line);
}

/* alloc zeroes, also memory that held data before (dirty a block, free it, allocate again), at
 * the backend's alignment. */
static void device_alloc_zeroed(void) {
    char line[256];
    const size_t zb = (1u << 20) + 7, align = gh_alignment(g_dut);
    void *z = NULL;
    ASSERT_OK(DOPS->alloc(g_dut, zb, &z));
    unsigned char *ones = halloc(zb), *back = halloc(zb);
    memset(ones, 0x5A, zb);
    ASSERT_OK(DOPS->copy_h2d(g_dut, DST, z, ones, zb));
    ASSERT_OK(DOPS->stream_sync(g_dut, DST));
    DOPS->free(g_dut, z);
    z = NULL;
    ASSERT_OK(DOPS->alloc(g_dut, zb, &z));
    ASSERT_OK(DOPS->copy_d2h(g_dut, DST, back, z, zb));
    ASSERT_OK(DOPS->stream_sync(g_dut, DST));
    size_t nonzero = 0;
    for (size_t i = 0; i < zb; i++) nonzero += back[i] != 0;
    snprintf(line, sizeof line, "%zu of %zu bytes non-zero, address %% %zu = %zu", nonzero, zb, align,
             (size_t)((uintptr_t)z % align));
    char what[96];
    snprintf(what, sizeof what, "alloc returns zeroed, %zu-byte aligned memory", align);
    check_fact(what, nonzero == 0 && (uintptr_t)z % align == 0, line);
    DOPS->free(g_dut, z);
}

static void test_device(void **state) {
    (void)state;
    BEGIN();
    char line[256];
    const char *want = gh_dut_is_cuda() ? "cuda" : "cpu";
    snprintf(line, sizeof line, "backend name is \"%s\"", want);
    check_fact(line, DOPS->name && strcmp(DOPS->name, want) == 0, DOPS->name ? DOPS->name : "(null)");
    check_fact("default stream exists", DST != NULL, "");
    for (int p = 0; p < QS_PREC_COUNT; p++) {
        const qs_prec_support s = DOPS->precision_support(g_dut, (qs_precision)p);
        const bool unsupported = expect_unsupported((qs_precision)p);
        snprintf(line, sizeof line, "precision_support(%s)%s", qs_precision_name((qs_precision)p),
                 unsupported ? " is unsupported" : "");
        check_fact(line, unsupported ? s == QS_PREC_UNSUPPORTED : s != QS_PREC_UNSUPPORTED, qs_prec_support_name(s));
    }
    device_memory_stats();
    device_alloc_zeroed();
    /* copies between offset views, memset_zero of a view: guards untouched */
    const size_t cb = 4099;
    unsigned char *src = halloc(cb), *got = halloc(cb), *zero = halloc(cb);
    for (size_t i = 0; i < cb; i++) src[i] = (unsigned char)(i * 7 + 3);
    void *d1 = dup_dev(src, cb), *d2 = dalloc(cb, POISON);
    if (DUT_OK(DOPS->copy_d2d(g_dut, DST, d2, d1, cb)) && dget(got, d2, cb, "copy_d2d"))
        check_bits("copy h2d -> d2d -> d2h (4099 bytes, offset views)", got, src, (int64_t)cb, 1, NULL);
    if (DUT_OK(DOPS->memset_zero(g_dut, DST, d2, cb)) && dget(got, d2, cb, "memset_zero"))
        check_bits("memset_zero of a view", got, zero, (int64_t)cb, 1, NULL);
    const qs_status st = DOPS->copy_h2d(g_dut, DST, NULL, src, 4);
    check_fact("copy_h2d to NULL is QS_ERR_INVALID_ARG", st == QS_ERR_INVALID_ARG, qs_status_name(st));
    qs_error_clear();
    END();
}

/* y_dt other than F32 and BF16: refused at plan time (QS_ERR_UNSUPPORTED naming y_dt), no plan. */
static void test_y_dt_refused(void **state) {
    (void)state;
    BEGIN();
    char detail[320];
    const qs_linear_desc ld = {.M = 4, .N = 3, .K = 2, .has_bias = false, .prec = QS_PREC_BF16, .y_dt = QS_F16};
    void *plan = NULL;
    size_t ws = 0;
    qs_error_clear();
    qs_status st = DOPS->linear_plan(g_dut, &ld, &plan, &ws);
    keep_plan(g_dut, plan);
    snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "plan created" : qs_last_error());
    check_fact("linear_plan y_dt f16 refused", st == QS_ERR_UNSUPPORTED && !plan && strstr(qs_last_error(), "y_dt"),
               detail);
    qs_conv_desc cd = {.N = 1, .H = 8, .W = 8, .C = 3, .K = 4, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                       .pad_h = 1, .pad_w = 1, .prec = QS_PREC_BF16, .y_dt = QS_F16};
    ASSERT_OK(qs_conv_desc_finish(&cd));
    plan = NULL;
    qs_error_clear();
    st = DOPS->conv_plan(g_dut, &cd, &plan, &ws);
    keep_plan(g_dut, plan);
    snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "plan created" : qs_last_error());
    check_fact("conv_plan y_dt f16 refused", st == QS_ERR_UNSUPPORTED && !plan && strstr(qs_last_error(), "y_dt"),
               detail);
    qs_error_clear();
    END();
}

/* Batch norm refuses an input dtype other than F32/BF16 like an output one (QS_ERR_UNSUPPORTED),
 * an accumulating BF16 dx (QS_ERR_INVALID_ARG naming accumulate) and an F16 dx (unsupported). */
static void test_batchnorm_refusals(void **state) {
    (void)state;
    BEGIN();
    const int64_t rows = 70, C = 13, n = rows * C;
    float *x = dalloc_f(n), *g = dalloc_f(C), *b = dalloc_f(C), *y = dalloc_f(n), *m = dalloc_f(C), *is = dalloc_f(C);
    float *dy = dalloc_f(n), *dg = dalloc_f(C), *db = dalloc_f(C);
    void *dxb = dalloc((size_t)n * 2, POISON);
    const qs_sr sr = {.key = qs_rng_key(11, "batchnorm_bf16_dx", 0), .counter = 5};
    char detail[256];
    qs_error_clear();
    qs_status st = DOPS->batchnorm_forward_train(g_dut, DST, rows, C, x, QS_F16, g, b, y, QS_F32, m, is, NULL, NULL,
                                                 0.1f, 1e-5f, false, NULL, QS_F32);
    snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "accepted" : qs_last_error());
    check_fact("bn train, f16 x refused", st == QS_ERR_UNSUPPORTED, detail);
    qs_error_clear();
    st = DOPS->batchnorm_backward(g_dut, DST, rows, C, x, QS_F32, dy, QS_F32, g, m, is, dxb, QS_BF16, &sr, true, dg, db,
                                  NULL, QS_F32, NULL, false);
    snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "accepted" : qs_last_error());
    check_fact("bn bwd, bf16 dx with accumulate refused (invalid arg)",
               st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "accumulate") != NULL, detail);
    qs_error_clear();
    st = DOPS->batchnorm_backward(g_dut, DST, rows, C, x, QS_F32, dy, QS_F32, g, m, is, dxb, QS_F16, NULL, false, dg, db,
                                  NULL, QS_F32, NULL, false);
    snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "accepted" : qs_last_error());
    check_fact("bn bwd, f16 dx refused (unsupported)", st == QS_ERR_UNSUPPORTED, detail);
    qs_error_clear();
    (void)DOPS->stream_sync(g_dut, DST);
    END();
}

/* n = 0 with NULL pointers is a no-op, not an error. */
static void test_empty_ops(void **state) {
    (void)state;
    BEGIN();
    check_fact("relu_forward n=0 with NULL pointers", DOPS->relu_forward(g_dut, DST, 0, NULL, NULL) == QS_OK, "");
    check_fact("silu_forward n=0 with NULL pointers", DOPS->silu_forward(g_dut, DST, 0, NULL, NULL) == QS_OK, "");
    check_fact("silu_backward n=0 with NULL pointers",
               DOPS->silu_backward(g_dut, DST, 0, NULL, NULL, NULL, true) == QS_OK, "");
    check_fact("gelu_forward n=0 with NULL pointers",
               !DOPS->gelu_forward || DOPS->gelu_forward(g_dut, DST, 0, NULL, NULL) == QS_OK, "");
    qs_error_clear();
    END();
}

/* in_use before and after one plan cycle: the first may keep lazily created resources (library
 * handles); after it, in_use must return to its value before each cycle. */
static void lifetime_line(const char *what, int cycle, size_t before, size_t after, const char *ws) {
    char line[200];
    snprintf(line, sizeof line, "in_use %zu -> %zu (%s)", before, after, ws);
    if (cycle == 0) printf("  info %-72s %s (lazy resources allowed)\n", what, line);
    else check_fact(what, after == before, line);
}

/* A workspace of `bytes` through the backend (NULL when 0); false after a failure. */
static bool ws_alloc(size_t bytes, void **ws) {
    *ws = NULL;
    return !bytes || DUT_OK(DOPS->alloc(g_dut, bytes, ws));
}

/* Plans give back what they take: the same linear (FP8), conv (BF16) and pool plans are created,
 * run once and destroyed three times, their workspaces allocated through the backend. */
static void test_plan_lifetime(void **state) {
    (void)state;
    BEGIN();
    const int64_t M = 64, N = 48, K = 96;
    seed("plan_lifetime", 0);
    float *x = rnd(M * K, -1, 1), *w = rnd(N * K, -1, 1);
    qmat lx = quant_both(x, M, K, QS_F8E4M3, NULL), lw = quant_both(w, N, K, QS_F8E4M3, NULL);
    float *ly = dalloc_f(M * N);
    qs_conv_desc cd = {.N = 2, .H = 9, .W = 9, .C = 16, .K = 16, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                       .pad_h = 1, .pad_w = 1, .has_bias = true, .prec = QS_PREC_BF16};
    ASSERT_OK(qs_conv_desc_finish(&cd));
    float *xc = rnd(2 * 9 * 9 * 16, -1, 1), *wc = rnd(16 * 16 * 9, -1, 1), *bc = rnd(16, -1, 1);
    qmat cx = quant_both(xc, 2 * 9 * 9, 16, QS_BF16, NULL), cw = quant_both(wc, 16, 16 * 9, QS_BF16, NULL);
    float *gbc = dup_dev_f(bc, 16), *cy = dalloc_f(2 * 9 * 9 * 16);
    qs_pool_desc pd = {.kind = QS_POOL_MAX, .N = 2, .H = 9, .W = 9, .C = 16, .R = 3, .S = 3, .stride_h = 2,
                       .stride_w = 2, .pad_h = 1, .pad_w = 1};
    ASSERT_OK(qs_pool_desc_finish(&pd));
    const int64_t npy = pd.N * pd.P * pd.Q * pd.C;
    float *py = dalloc_f(npy), *px = dup_dev_f(xc, 2 * 9 * 9 * 16);
    int32_t *pidx = dalloc((size_t)npy * 4, POISON);
    const qs_linear_desc ld = {.M = M, .N = N, .K = K, .has_bias = false, .prec = QS_PREC_FP8};
    char what[96], ws[96];
    for (int cycle = 0; cycle < 3; cycle++) {
        size_t before = 0, after = 0, lb = 0, cb = 0, pb = 0;
        void *lp = NULL, *cp = NULL, *pp = NULL, *lws = NULL, *cws = NULL, *pws = NULL;
        DOPS->memory_stats(g_dut, &before, NULL);
        bool ok = DUT_OK(DOPS->linear_plan(g_dut, &ld, &lp, &lb)) && DUT_OK(DOPS->conv_plan(g_dut, &cd, &cp, &cb)) &&
                  DUT_OK(DOPS->pool_plan(g_dut, &pd, &pp, &pb));
        ok = ok && ws_alloc(lb, &lws) && ws_alloc(cb, &cws) && ws_alloc(pb, &pws);
        ok = ok && DUT_OK(DOPS->linear_forward(g_dut, lp, DST, &lx.dut, &lw.dut, NULL, ly, lws)) &&
             DUT_OK(DOPS->conv_forward(g_dut, cp, DST, &cx.dut, &cw.dut, gbc, cy, cws)) &&
             DUT_OK(DOPS->pool_forward(g_dut, pp, DST, px, py, pidx, pws)) && DUT_OK(DOPS->stream_sync(g_dut, DST));
        void *plans[3] = {lp, cp, pp}, *wss[3] = {lws, cws, pws};
        for (int i = 0; i < 3; i++) {
            if (plans[i]) DOPS->plan_destroy(g_dut, plans[i]);
            if (wss[i]) DOPS->free(g_dut, wss[i]);
        }
        if (!ok) break;
        DOPS->memory_stats(g_dut, &after, NULL);
        snprintf(what, sizeof what, "plans create/run/destroy, cycle %d", cycle);
        snprintf(ws, sizeof ws, "workspaces %zu + %zu + %zu B", lb, cb, pb);
        lifetime_line(what, cycle, before, after, ws);
    }
    END();
}

/* FP8 and BF16 bmm plans created, run and destroyed three times, workspaces through the backend. */
static void test_bmm_plan_lifetime(void **state) {
    (void)state;
    BEGIN();
    const qs_precision precs[2] = {QS_PREC_FP8, QS_PREC_BF16};
    const int64_t B = 6, M = 33, N = 24, K = 33; /* !trans_b: every FP8 operand copied and padded */
    seed_with(20261203, "bmm_lifetime", 0);
    float *a = rnd(B * M * K, -1, 1), *b = rnd(B * K * N, -1, 1);
    char what[96], ws[64];
    for (int pi = 0; pi < 2; pi++) {
        const qs_dtype fdt = qs_precision_operand_dtype(precs[pi], false);
        qmat qa = quant_both(a, B * M, K, fdt, NULL), qb = quant_both(b, B * K, N, fdt, NULL);
        float *c = dalloc_f(B * M * N);
        const qs_bmm_desc d = {.batch = B, .M = M, .N = N, .K = K, .trans_b = false, .alpha = 1.0f, .prec = precs[pi]};
        for (int cycle = 0; cycle < 3; cycle++) {
            size_t before = 0, after = 0, wsb = 0;
            void *plan = NULL, *w = NULL;
            DOPS->memory_stats(g_dut, &before, NULL);
            bool ok = DUT_OK(DOPS->bmm_plan(g_dut, &d, &plan, &wsb)) && ws_alloc(wsb, &w) &&
                      DUT_OK(DOPS->bmm_forward(g_dut, plan, DST, &qa.dut, &qb.dut, c, w)) &&
                      DUT_OK(DOPS->stream_sync(g_dut, DST));
            if (plan) DOPS->plan_destroy(g_dut, plan);
            if (w) DOPS->free(g_dut, w);
            if (!ok) break;
            DOPS->memory_stats(g_dut, &after, NULL);
            snprintf(what, sizeof what, "bmm %s plan create/run/destroy, cycle %d", qs_precision_name(precs[pi]), cycle);
            snprintf(ws, sizeof ws, "workspace %zu B", wsb);
            lifetime_line(what, cycle, before, after, ws);
        }
    }
    END();
}

const struct CMUnitTest bo_facts[] = {
    cmocka_unit_test_teardown(test_device, teardown),
    cmocka_unit_test_teardown(test_y_dt_refused, teardown),
    cmocka_unit_test_teardown(test_batchnorm_refusals, teardown),
    cmocka_unit_test_teardown(test_empty_ops, teardown),
    cmocka_unit_test_teardown(test_quantize_nonfinite, teardown),
    cmocka_unit_test_teardown(test_quantize_delayed_nonfinite, teardown),
    cmocka_unit_test_teardown(test_plan_lifetime, teardown),
    cmocka_unit_test_teardown(test_bmm_plan_lifetime, teardown),
    cmocka_unit_test_teardown(test_arg_errors, teardown),
    cmocka_unit_test_teardown(test_arg_errors_transformer, teardown),
};
const size_t bo_nfacts = sizeof bo_facts / sizeof bo_facts[0];
