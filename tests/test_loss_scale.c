/* tests/test_loss_scale.c — loss scaling (src/optim/loss_scale.h): parsing, the dynamic
 * schedule (back off on overflow, grow after a run of good steps), the overflow check and
 * unscaling of a gradient buffer, and on a real FP16 model: a scale so large that the FP16
 * gradients overflow skips the update (parameters bitwise unchanged) and backs off until the
 * gradients are finite; an overflow that reaches an INT8 layer (whose quantizer refuses
 * non-finite values) counts as an overflow too; and with finite gradients the scaled step
 * equals the unscaled one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/precision.h"
#include "graph_helpers.h"
#include "models/models.h"
#include "optim/loss_scale.h"
#include "io/plan_file.h"
#include "qsync/rng.h"

static qs_backend *g_be;
static int group_setup(void **state) { return qs_test_backend_create(1, &g_be); }
static int group_teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    return 0;
}

static void test_parse(void **state) {
    qs_loss_scaler ls;
    ASSERT_OK(qs_loss_scaler_parse("none", 0, &ls));
    assert_int_equal(ls.mode, QS_LOSS_SCALE_NONE);
    assert_true(qs_loss_scaler_factor(&ls) == 1.0f);
    ASSERT_OK(qs_loss_scaler_parse("dynamic", 0, &ls));
    assert_int_equal(ls.mode, QS_LOSS_SCALE_DYNAMIC);
    assert_true(ls.scale == 65536.0f);
    assert_int_equal(ls.growth_interval, 2000);
    ASSERT_OK(qs_loss_scaler_parse("dynamic:1024", 10, &ls));
    assert_true(ls.scale == 1024.0f);
    assert_int_equal(ls.growth_interval, 10);
    ASSERT_OK(qs_loss_scaler_parse("128", 0, &ls));
    assert_int_equal(ls.mode, QS_LOSS_SCALE_STATIC);
    assert_true(qs_loss_scaler_factor(&ls) == 128.0f);
    const char *bad[] = {"", "0", "-4", "dyn", "dynamic:", "dynamic:0", "1e39", "nan", "inf", "12x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(qs_loss_scaler_parse(bad[i], 0, &ls), QS_ERR_INVALID_ARG);
        assert_non_null(strstr(qs_last_error(), "dynamic:INIT"));
    }
    qs_loss_scale_mode mode;
    assert_true(qs_loss_scale_mode_parse("static", &mode) && mode == QS_LOSS_SCALE_STATIC);
    assert_false(qs_loss_scale_mode_parse("auto", &mode));
}

static void test_dynamic_schedule(void **state) {
    qs_loss_scaler ls;
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_DYNAMIC, 1024.0f, 3);
    ASSERT_OK(qs_loss_scaler_update(&ls, true));
    ASSERT_OK(qs_loss_scaler_update(&ls, true));
    assert_true(ls.scale == 1024.0f);
    ASSERT_OK(qs_loss_scaler_update(&ls, false)); /* overflow: halve, restart the count */
    assert_true(ls.scale == 512.0f);
    assert_true(ls.last_skipped);
    assert_int_equal(ls.skipped, 1);
    assert_int_equal(ls.good_steps, 0);
    for (int i = 0; i < 3; i++) ASSERT_OK(qs_loss_scaler_update(&ls, true));
    assert_true(ls.scale == 1024.0f); /* grew after 3 good steps */
    assert_false(ls.last_skipped);
    assert_int_equal(ls.good_steps, 0);
    /* static: never changes, but counts skips */
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_STATIC, 8.0f, 1);
    ASSERT_OK(qs_loss_scaler_update(&ls, false));
    ASSERT_OK(qs_loss_scaler_update(&ls, true));
    ASSERT_OK(qs_loss_scaler_update(&ls, true));
    assert_true(ls.scale == 8.0f);
    assert_int_equal(ls.skipped, 1);
    /* growth stops short of infinity */
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_DYNAMIC, 3e38f, 1);
    ASSERT_OK(qs_loss_scaler_update(&ls, true));
    assert_true(ls.scale == 3e38f);
    /* never-ending non-finite gradients are divergence, not overflow */
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_DYNAMIC, 1.0f, 0);
    qs_status st = QS_OK;
    int n = 0;
    while (st == QS_OK && n < 100) {
        st = qs_loss_scaler_update(&ls, false);
        n++;
    }
    assert_int_equal(st, QS_ERR_INVALID_ARG);
    assert_int_equal(n, 25);
    assert_non_null(strstr(qs_last_error(), "diverged"));
}

/* The check and unscaling over a gradient buffer. */
static void test_unscale(void **state) {
    const int64_t n = 1000;
    float host[1000];
    void *mem = NULL;
    ASSERT_OK(g_be->ops->alloc(g_be, n * sizeof(float), &mem));
    float *dev = mem;
    qs_stream *s = g_be->ops->default_stream(g_be);
    for (int64_t i = 0; i < n; i++) host[i] = (float)(i % 7) - 3.0f;
    ASSERT_OK(g_be->ops->copy_h2d(g_be, s, dev, host, sizeof host));
    qs_loss_scaler ls;
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_DYNAMIC, 1024.0f, 0);
    bool finite = false;
    double norm = 0;
    ASSERT_OK(qs_loss_scaler_unscale(&ls, g_be, s, dev, n, &finite, &norm));
    assert_true(finite);
    float back[1000];
    ASSERT_OK(g_be->ops->copy_d2h(g_be, s, back, dev, sizeof back));
    ASSERT_OK(g_be->ops->stream_sync(g_be, s));
    double ss = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(back[i] == host[i] / 1024.0f); /* a power of two: exact */
        ss += (double)host[i] * host[i];
    }
    assert_true(fabs(norm - sqrt(ss) / 1024.0) <= 1e-12 * norm);
    /* one Inf or NaN anywhere: not finite, the buffer is left alone */
    const float bad[2] = {INFINITY, NAN};
    for (int k = 0; k < 2; k++) {
        host[n / 2 + k] = bad[k];
        ASSERT_OK(g_be->ops->copy_h2d(g_be, s, dev, host, sizeof host));
        ASSERT_OK(qs_loss_scaler_unscale(&ls, g_be, s, dev, n, &finite, NULL));
        assert_false(finite);
        ASSERT_OK(g_be->ops->copy_d2h(g_be, s, back, dev, sizeof back));
        ASSERT_OK(g_be->ops->stream_sync(g_be, s));
        assert_true(back[0] == host[0]);
        host[n / 2 + k] = 1.0f;
    }
    g_be->ops->free(g_be, dev);
}

#define BATCH 16

/* mlp (width 32) on 28×28×1 with the plan `plan_text` (emulation allowed), set up for BATCH,
 * with an SGD optimizer (lr 0.05, momentum 0.9). */
static qs_model *build(const char *plan_text, qs_optimizer *opt) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    o.width = 32;
    qs_model *m = NULL;
    ASSERT_OK(qs_models_build("mlp", &o, &m));
    qs_model_fuse(m);
    qs_plan p;
    ASSERT_OK(qs_plan_parse(plan_text, "test", &p));
    qs_precision_options po;
    qs_precision_options_default(&po);
    po.allow_emulated = true;
    ASSERT_OK(qs_plan_precision_setup(&p, m, g_be, &po));
    qs_plan_free(&p);
    ASSERT_OK(qs_model_setup(m, g_be, BATCH, 3));
    qs_optim_config oc = qs_optim_config_default(QS_OPTIM_SGD, 0.05f);
    oc.momentum = 0.9f;
    ASSERT_OK(qs_optimizer_init(opt, g_be, &m->params, &oc));
    return m;
}

static void forward(qs_model *m) {
    float x[BATCH * 28 * 28];
    int32_t y[BATCH];
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(4, "loss_scale", 0), 0);
    for (int64_t i = 0; i < BATCH * 28 * 28; i++) x[i] = 2.0f * qs_rng_uniform(&r) - 1.0f;
    for (int i = 0; i < BATCH; i++) y[i] = i % 10;
    ASSERT_OK(qs_model_forward(m, x, y, true));
}

static int64_t n_params(const qs_model *m) { return (int64_t)(m->params.bytes / sizeof(float)); }

static bool all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

#define FP16_PLAN "{\"format\": \"qsync-plan\", \"version\": 1, \"model\": \"mlp\", \"default\": \"fp16\"}"

/* Start at 2^60: every gradient overflows FP16 (max 65504) until the scale has backed off far
 * enough; each such step leaves the parameters (and the optimizer) untouched. */
static void test_fp16_overflow_backs_off(void **state) {
    qs_optimizer opt;
    qs_model *m = build(FP16_PLAN, &opt);
    qs_loss_scaler ls;
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_DYNAMIC, 0x1p60f, 0);
    float *p0 = qs_test_download(m, m->param_data, n_params(m));
    bool applied = false;
    int steps = 0;
    while (!applied && steps < 64) {
        forward(m);
        float before = ls.scale;
        ASSERT_OK(qs_loss_scaler_step(&ls, m, &opt, 0.05f, &applied));
        steps++;
        if (!applied) {
            assert_true(ls.scale == before * 0.5f);
            float *p = qs_test_download(m, m->param_data, n_params(m));
            assert_memory_equal(p, p0, m->params.bytes); /* bitwise untouched */
            free(p);
            assert_int_equal(opt.step, 0);
        }
    }
    assert_true(applied);
    assert_true(steps > 1);
    assert_int_equal(ls.skipped, steps - 1);
    assert_true(ls.scale == ldexpf(1.0f, 60 - (steps - 1)));
    assert_int_equal(opt.step, 1);
    printf("  FP16 gradients overflowed %d times; first finite step at loss scale 2^%d\n", steps - 1, 60 - (steps - 1));
    /* the update happened, with finite unscaled gradients */
    float *p = qs_test_download(m, m->param_data, n_params(m));
    float *g = qs_test_download(m, m->grad_data, n_params(m));
    assert_true(all_finite(p, n_params(m)));
    assert_true(all_finite(g, n_params(m)));
    assert_true(memcmp(p, p0, m->params.bytes) != 0);
    free(p);
    free(g);
    free(p0);
    qs_optimizer_free(&opt, g_be);
    qs_model_free(m);
}

/* A static scale that overflows skips every step and never changes. */
static void test_static_overflow_skips(void **state) {
    qs_optimizer opt;
    qs_model *m = build(FP16_PLAN, &opt);
    qs_loss_scaler ls;
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_STATIC, 0x1p60f, 0);
    for (int i = 0; i < 3; i++) {
        bool applied = true;
        forward(m);
        ASSERT_OK(qs_loss_scaler_step(&ls, m, &opt, 0.05f, &applied));
        assert_false(applied);
    }
    assert_int_equal(ls.skipped, 3);
    assert_true(ls.scale == 0x1p60f);
    assert_int_equal(opt.step, 0);
    qs_optimizer_free(&opt, g_be);
    qs_model_free(m);
}

/* fc3 in FP16 overflows; its infinite input gradient reaches fc2 (INT8), whose gradient
 * quantizer fails with "non-finite": an overflow as well, not an error. */
static void test_overflow_through_int8(void **state) {
    qs_optimizer opt;
    qs_model *m = build("{\"format\": \"qsync-plan\", \"version\": 1, \"model\": \"mlp\", \"default\": \"int8\", "
                        "\"precisions\": {\"fc3\": \"fp16\"}}", &opt);
    qs_loss_scaler ls;
    qs_loss_scaler_init(&ls, QS_LOSS_SCALE_DYNAMIC, 0x1p60f, 0);
    forward(m);
    /* what the backward alone reports at this scale */
    qs_status st = qs_model_backward(m, 0x1p60f);
    printf("  backward at 2^60: %s %s\n", qs_status_name(st), st == QS_OK ? "" : qs_last_error());
    assert_true(st == QS_OK || (st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "non-finite")));
    bool applied = true;
    ASSERT_OK(qs_loss_scaler_step(&ls, m, &opt, 0.05f, &applied));
    assert_false(applied);
    assert_int_equal(ls.skipped, 1);
    assert_true(ls.scale == 0x1p59f);
    qs_optimizer_free(&opt, g_be);
    qs_model_free(m);
}

/* With finite gradients, a power-of-two scale changes nothing: the parameters after a scaled
 * step equal those after an unscaled one bit for bit (FP32 layers: scaling by 2^k is exact). */
static void test_scaled_step_equals_unscaled(void **state) {
    const char *plan = "{\"format\": \"qsync-plan\", \"version\": 1, \"model\": \"mlp\"}";
    qs_optimizer o1, o2;
    qs_model *a = build(plan, &o1), *b = build(plan, &o2);
    qs_loss_scaler none, dyn;
    qs_loss_scaler_init(&none, QS_LOSS_SCALE_NONE, 1.0f, 0);
    qs_loss_scaler_init(&dyn, QS_LOSS_SCALE_DYNAMIC, 1024.0f, 0);
    for (int i = 0; i < 2; i++) {
        forward(a);
        forward(b);
        ASSERT_OK(qs_loss_scaler_step(&none, a, &o1, 0.05f, NULL));
        ASSERT_OK(qs_loss_scaler_step(&dyn, b, &o2, 0.05f, NULL));
    }
    float *pa = qs_test_download(a, a->param_data, n_params(a));
    float *pb = qs_test_download(b, b->param_data, n_params(b));
    assert_memory_equal(pa, pb, a->params.bytes);
    assert_int_equal(dyn.skipped, 0);
    free(pa);
    free(pb);
    qs_optimizer_free(&o1, g_be);
    qs_optimizer_free(&o2, g_be);
    qs_model_free(a);
    qs_model_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_dynamic_schedule),
        cmocka_unit_test(test_unscale),
        cmocka_unit_test(test_fp16_overflow_backs_off),
        cmocka_unit_test(test_static_overflow_skips),
        cmocka_unit_test(test_overflow_through_int8),
        cmocka_unit_test(test_scaled_step_equals_unscaled),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
