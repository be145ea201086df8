/* tests/backend_ops/facts_errors.c — defines: the error-behaviour facts of one backend under test
 * (facts_errors.h): a non-finite input to an INT8/FP8 quantize is QS_ERR_INVALID_ARG with
 * "non-finite" — from the call itself or, for an asynchronous backend, from the next stream_sync,
 * which also clears the condition — while BF16/F16 pass NaN/Inf through; and host-side argument
 * checks give the reference's status (parity). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "facts_errors.h"
#include "gpu_harness.h"
#include "graph_helpers.h"

/* st of a DUT call, or (when the call queued fine) of the next stream_sync; `where` says which. */
static qs_status call_or_sync(qs_status st, const char **where) {
    *where = "call";
    if (st != QS_OK) return st;
    *where = "stream_sync";
    return DOPS->stream_sync(g_dut, DST);
}

/* One dtype with a NaN/Inf at element 777: both backends report it; the DUT's stream is clean after. */
static void nonfinite_case(const float *x, int64_t rows, int64_t cols, qs_dtype dt, bool per_row, float bad,
                           const char *bad_name, void *gq, float *gs, void *cq, float *cs) {
    const int64_t n = rows * cols;
    char what[160], detail[400];
    float *xb = hcopy(x, n);
    xb[777] = bad;
    snprintf(what, sizeof what, "quantize %s%s with %s: non-finite error", qs_dtype_name(dt), per_row ? " per-row" : "",
             bad_name);
    qs_error_clear();
    const qs_status cst = COPS->quantize(g_cpu, CST, rows, cols, xb, NULL, dt, cq, cs, per_row, NULL, NULL, NULL);
    const bool cpu_ok = cst == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "non-finite");
    float *gxb = dup_dev_f(xb, n);
    qs_error_clear();
    const char *where;
    const qs_status st =
        call_or_sync(DOPS->quantize(g_dut, DST, rows, cols, gxb, NULL, dt, gq, gs, per_row, NULL, NULL, NULL), &where);
    const bool dut_ok = st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "non-finite");
    snprintf(detail, sizeof detail, "reference %s; dut %s from the %s: %s", qs_status_name(cst), qs_status_name(st),
             where, qs_last_error());
    check_fact(what, cpu_ok && dut_ok, detail);
    /* reported once: the stream is clean again */
    const qs_status again = DOPS->stream_sync(g_dut, DST);
    snprintf(what, sizeof what, "  ...then stream_sync is clean (%s)", bad_name);
    check_fact(what, again == QS_OK, qs_status_name(again));
}

void test_quantize_nonfinite(void **state) {
    (void)state;
    BEGIN();
    const int64_t rows = 3, cols = 1000, n = rows * cols;
    const struct {
        qs_dtype dt;
        bool per_row;
    } kinds[] = {{QS_S8, false}, {QS_S8, true}, {QS_F8E4M3, false}, {QS_F8E5M2, false}};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const char *bad_name[] = {"NaN", "+Inf", "-Inf"};
    seed("quantize_nonfinite", 0);
    float *x = rnd(n, -1, 1);
    float *gx = dup_dev_f(x, n), *gs = dalloc_f(rows);
    void *gq = dalloc((size_t)n, POISON), *cq = halloc((size_t)n);
    float *cs = hf(rows);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int b = 0; b < 3; b++)
            nonfinite_case(x, rows, cols, kinds[k].dt, kinds[k].per_row, bad[b], bad_name[b], gq, gs, cq, cs);
    /* a finite quantize works after the errors */
    ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, NULL, QS_F8E4M3, cq, cs, false, NULL, NULL, NULL));
    void *hq = halloc((size_t)n);
    if (DUT_OK(DOPS->quantize(g_dut, DST, rows, cols, gx, NULL, QS_F8E4M3, gq, gs, false, NULL, NULL, NULL)) &&
        dget(hq, gq, (size_t)n, "quantize after the errors"))
        check_bits("quantize f8e4m3 after the errors", hq, cq, n, 1, x);
    /* BF16 / F16: non-finite values are converted, no error */
    float *xb = hcopy(x, n);
    xb[5] = NAN, xb[6] = INFINITY, xb[7] = -INFINITY;
    float *gxb = dup_dev_f(xb, n);
    void *g16 = dalloc((size_t)n * 2, POISON), *c16 = halloc((size_t)n * 2), *h16 = halloc((size_t)n * 2);
    const qs_dtype d16[2] = {QS_BF16, QS_F16};
    char what[96];
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, xb, NULL, d16[i], c16, NULL, false, NULL, NULL, NULL));
        snprintf(what, sizeof what, "quantize %s with NaN/Inf (no error)", qs_dtype_name(d16[i]));
        if (dut_ok_(DOPS->quantize(g_dut, DST, rows, cols, gxb, NULL, d16[i], g16, NULL, false, NULL, NULL, NULL), what) &&
            dget(h16, g16, (size_t)n * 2, what))
            check_bits(what, h16, c16, n, 2, xb);
    }
    END();
}

/* Non-finite input to a delayed-scaling quantize (with a history) is reported the same way. */
void test_quantize_delayed_nonfinite(void **state) {
    (void)state;
    BEGIN();
    const int64_t rows = 70, cols = 130, n = rows * cols;
    seed("quantize_delayed", 0);
    float *xb = rnd(n, -2, 2);
    xb[100] = NAN;
    float h[4] = {1.0f, 0, 0, 0}, *gh = dup_dev_f(h, 4);
    const qs_quant_delayed gdl = {.amax = gh, .len = 3, .slot = 1, .record = true};
    qs_error_clear();
    const char *where;
    const qs_status st = call_or_sync(DOPS->quantize(g_dut, DST, rows, cols, dup_dev_f(xb, n), NULL, QS_F8E4M3,
                                                     dalloc((size_t)n, POISON), dalloc_f(1), false, NULL, NULL, &gdl),
                                      &where);
    char detail[300];
    snprintf(detail, sizeof detail, "%s from the %s", qs_status_name(st), where);
    check_fact("quantize f8e4m3 delayed with NaN: non-finite error",
               st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "non-finite"), detail);
    check_fact("  ...then stream_sync is clean", DOPS->stream_sync(g_dut, DST) == QS_OK, "");
    END();
}

/* The reference's and the DUT's status of one faulty call: equal and not QS_OK. */
static void parity(const char *label, qs_status cs, qs_status ds) {
    char what[160], detail[320];
    snprintf(what, sizeof what, "error parity: %s", label);
    snprintf(detail, sizeof detail, "reference %s, dut %s: %s", qs_status_name(cs), qs_status_name(ds), qs_last_error());
    check_fact(what, cs != QS_OK && cs == ds, detail);
    (void)DOPS->stream_sync(g_dut, DST);
    qs_error_clear();
}

/* parity of two calls, the reference's made first (the message shown is the DUT's) */
#define PARITY(label, cpu_call, dut_call)                \
    do {                                                 \
        const qs_status cs_ = (cpu_call);                \
        qs_error_clear();                                \
        const qs_status ds_ = (dut_call);                \
        parity(label, cs_, ds_);                         \
    } while (0)

/* Both tables have entry `name` (else a failed case naming it). */
static bool have(const char *name, bool cpu, bool dut) {
    if (cpu && dut) return true;
    char what[96];
    snprintf(what, sizeof what, "ops table has %s", name);
    check_fact(what, false, cpu ? "the DUT's entry is NULL" : "the CPU backend's entry is NULL");
    return false;
}
#define HAVE(op) have(#op, COPS->op != NULL, DOPS->op != NULL)

void test_arg_errors(void **state) {
    (void)state;
    BEGIN();
    float *cb = hf(64), *gb = dalloc_f(64);
    PARITY("relu n=-1", COPS->relu_forward(g_cpu, CST, -1, cb, cb), DOPS->relu_forward(g_dut, DST, -1, gb, gb));
    PARITY("relu NULL x", COPS->relu_forward(g_cpu, CST, 4, NULL, cb), DOPS->relu_forward(g_dut, DST, 4, NULL, gb));
    PARITY("silu n=-1", COPS->silu_forward(g_cpu, CST, -1, cb, cb), DOPS->silu_forward(g_dut, DST, -1, gb, gb));
    PARITY("silu_backward NULL dy", COPS->silu_backward(g_cpu, CST, 4, cb, NULL, cb, false),
           DOPS->silu_backward(g_dut, DST, 4, gb, NULL, gb, false));
    PARITY("cast f32 -> s8", COPS->cast(g_cpu, CST, 4, cb, QS_F32, cb, QS_S8), DOPS->cast(g_dut, DST, 4, gb, QS_F32, gb, QS_S8));
    const qs_dropout_rng rng1 = {.key = 1};
    PARITY("dropout p=1.5", COPS->dropout_forward(g_cpu, CST, 4, cb, cb, (uint8_t *)cb, 1.5f, &rng1),
           DOPS->dropout_forward(g_dut, DST, 4, gb, gb, (uint8_t *)gb, 1.5f, &rng1));
    PARITY("adamw step 0", COPS->adamw_step(g_cpu, CST, 4, cb, cb, cb, cb, 0.1f, 0.9, 0.99, 1e-8f, 0, 0),
           DOPS->adamw_step(g_dut, DST, 4, gb, gb, gb, gb, 0.1f, 0.9, 0.99, 1e-8f, 0, 0));
    PARITY("batchnorm train rows=1",
           COPS->batchnorm_forward_train(g_cpu, CST, 1, 1, cb, QS_F32, NULL, NULL, cb, QS_F32, cb, cb, NULL, NULL, 0.1f,
                                         1e-5f, false, NULL, QS_F32),
           DOPS->batchnorm_forward_train(g_dut, DST, 1, 1, gb, QS_F32, NULL, NULL, gb, QS_F32, gb, gb, NULL, NULL, 0.1f,
                                         1e-5f, false, NULL, QS_F32));
    PARITY("quantize f8e4m3 per-row", COPS->quantize(g_cpu, CST, 2, 2, cb, NULL, QS_F8E4M3, cb, cb, true, NULL, NULL, NULL),
           DOPS->quantize(g_dut, DST, 2, 2, gb, NULL, QS_F8E4M3, gb, gb, true, NULL, NULL, NULL));
    /* a plan's operand of the wrong dtype */
    const qs_linear_desc ld = {.M = 4, .N = 3, .K = 2, .has_bias = false, .prec = QS_PREC_FP16};
    void *cplan = NULL, *gplan = NULL;
    size_t cw = 0, gw = 0;
    ASSERT_OK(COPS->linear_plan(g_cpu, &ld, &cplan, &cw));
    keep_plan(g_cpu, cplan);
    if (DUT_OK(DOPS->linear_plan(g_dut, &ld, &gplan, &gw))) {
        keep_plan(g_dut, gplan);
        const qs_operand cf = qs_operand_f32(cb), gf = qs_operand_f32(gb);
        PARITY("fp16 linear given f32 operands",
               COPS->linear_forward(g_cpu, cplan, CST, &cf, &cf, NULL, cb, cw ? halloc(cw) : NULL),
               DOPS->linear_forward(g_dut, gplan, DST, &gf, &gf, NULL, gb, gw ? dalloc(gw, POISON) : NULL));
    }
    /* a conv descriptor whose P, Q were never filled in */
    const qs_conv_desc cd = {.N = 1, .H = 8, .W = 8, .C = 3, .K = 4, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                             .pad_h = 1, .pad_w = 1, .prec = QS_PREC_FP32};
    cplan = gplan = NULL;
    PARITY("conv_plan without qs_conv_desc_finish", COPS->conv_plan(g_cpu, &cd, &cplan, &cw),
           DOPS->conv_plan(g_dut, &cd, &gplan, &gw));
    keep_plan(g_cpu, cplan);
    keep_plan(g_dut, gplan);
    END();
}

void test_arg_errors_transformer(void **state) {
    (void)state;
    BEGIN();
    float *cb = hf(64), *gb = dalloc_f(64);
    void *cplan = NULL, *gplan = NULL;
    size_t cw = 0, gw = 0;
    const qs_bmm_desc bad = {.batch = 0, .M = 2, .N = 2, .K = 2, .trans_b = true, .alpha = 1.0f, .prec = QS_PREC_FP32};
    if (HAVE(bmm_plan)) {
        PARITY("bmm_plan batch=0", COPS->bmm_plan(g_cpu, &bad, &cplan, &cw), DOPS->bmm_plan(g_dut, &bad, &gplan, &gw));
        keep_plan(g_cpu, cplan);
        keep_plan(g_dut, gplan);
    }
    if (HAVE(layernorm_forward)) {
        PARITY("layernorm C=0", COPS->layernorm_forward(g_cpu, CST, 2, 0, cb, cb, cb, 1e-5f, cb, cb, cb),
               DOPS->layernorm_forward(g_dut, DST, 2, 0, gb, gb, gb, 1e-5f, gb, gb, gb));
        PARITY("layernorm NULL x", COPS->layernorm_forward(g_cpu, CST, 2, 4, NULL, cb, cb, 1e-5f, cb, cb, cb),
               DOPS->layernorm_forward(g_dut, DST, 2, 4, NULL, gb, gb, 1e-5f, gb, gb, gb));
    }
    if (HAVE(gelu_forward))
        PARITY("gelu n=-1", COPS->gelu_forward(g_cpu, CST, -1, cb, cb), DOPS->gelu_forward(g_dut, DST, -1, gb, gb));
    if (HAVE(embedding_forward))
        PARITY("embedding V=0", COPS->embedding_forward(g_cpu, CST, 2, 4, 0, cb, cb, cb),
               DOPS->embedding_forward(g_dut, DST, 2, 4, 0, gb, gb, gb));
    if (HAVE(add_broadcast))
        PARITY("add_broadcast outer=-1", COPS->add_broadcast(g_cpu, CST, -1, 4, cb, cb, cb),
               DOPS->add_broadcast(g_dut, DST, -1, 4, gb, gb, gb));
    if (HAVE(permute_heads))
        PARITY("permute_heads ld < off + H·D", COPS->permute_heads(g_cpu, CST, 1, 2, 2, 4, 8, 1, cb, cb + 32, true, false),
               DOPS->permute_heads(g_dut, DST, 1, 2, 2, 4, 8, 1, gb, gb + 32, true, false));
    if (HAVE(softmax_forward))
        PARITY("softmax Tk=-1", COPS->softmax_forward(g_cpu, CST, 1, 1, 2, -1, cb, cb, false, NULL, 0.0f),
               DOPS->softmax_forward(g_dut, DST, 1, 1, 2, -1, gb, gb, false, NULL, 0.0f));
    if (HAVE(softmax_backward))
        PARITY("softmax_backward NULL dy", COPS->softmax_backward(g_cpu, CST, 2, 3, cb, NULL, cb, false),
               DOPS->softmax_backward(g_dut, DST, 2, 3, gb, NULL, gb, false));
    /* an fp16 bmm plan given f32 operands */
    const qs_bmm_desc d16 = {.batch = 2, .M = 2, .N = 3, .K = 4, .trans_b = false, .alpha = 1.0f, .prec = QS_PREC_FP16};
    cplan = gplan = NULL;
    if (HAVE(bmm_plan) && HAVE(bmm_forward) && COPS->bmm_plan(g_cpu, &d16, &cplan, &cw) == QS_OK) {
        keep_plan(g_cpu, cplan);
        if (DUT_OK(DOPS->bmm_plan(g_dut, &d16, &gplan, &gw))) {
            keep_plan(g_dut, gplan);
            const qs_operand cf = qs_operand_f32(cb), gf = qs_operand_f32(gb);
            PARITY("fp16 bmm given f32 operands", COPS->bmm_forward(g_cpu, cplan, CST, &cf, &cf, cb, cw ? halloc(cw) : NULL),
                   DOPS->bmm_forward(g_dut, gplan, DST, &gf, &gf, gb, gw ? dalloc(gw, POISON) : NULL));
        }
    }
    END();
}
