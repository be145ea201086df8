/* tests/test_sensitivity.c — the direct check of the indicator (src/plan/sensitivity.h) and its
 * statistics: Spearman's rho against hand-computed values (ties averaged, constant input
 * undefined); on a small cnn, "quantizing" a layer to fp32 deviates by exactly 0, int8 deviates
 * more than bf16 over the layers, the runs hold the given model's weights and leave it
 * unchanged, two measurements agree bit for bit, precisions are checked against the backend;
 * `qsync sensitivity` writes the documented keys, measures a checkpoint's weights and refuses
 * bad input precisely. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "backends/backends.h"
#include "core/stats.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "models/models.h"
#include "plan/sensitivity.h"
#include "run_cmd.h"

/* ------------------------------------------------------------------ Spearman */

/* Average ranks: ties share the mean of the ranks they span. */
static void test_ranks_average(void **state) {
    (void)state;
    const double v[] = {10, 20, 20, 30}, w[] = {5, 5, 5}, u[] = {3, 1, 2};
    double r[4];
    assert_int_equal(qs_ranks_average(v, 4, r), QS_OK);
    assert_true(r[0] == 1 && r[1] == 2.5 && r[2] == 2.5 && r[3] == 4);
    assert_int_equal(qs_ranks_average(w, 3, r), QS_OK);
    assert_true(r[0] == 2 && r[1] == 2 && r[2] == 2);
    assert_int_equal(qs_ranks_average(u, 3, r), QS_OK);
    assert_true(r[0] == 3 && r[1] == 1 && r[2] == 2);
}

static void near(double got, double want, const char *what) {
    if (!(fabs(got - want) <= 1e-12)) fail_msg("%s: rho %.15g, want %.15g", what, got, want);
}

/* rho against values computed by hand. */
static void test_spearman_known(void **state) {
    (void)state;
    double rho;
    const double a[] = {1, 2, 3, 4, 5}, up[] = {10, 20, 30, 40, 50}, down[] = {5, 4, 3, 2, 1};
    assert_int_equal(qs_spearman(a, up, 5, &rho), QS_OK);
    near(rho, 1, "monotone");
    assert_int_equal(qs_spearman(a, down, 5, &rho), QS_OK);
    near(rho, -1, "reversed");
    /* no ties: d = (-1, 1, -1, 1, 0), 1 - 6·4/(5·24) = 0.8 */
    const double b[] = {2, 1, 4, 3, 5};
    assert_int_equal(qs_spearman(a, b, 5, &rho), QS_OK);
    near(rho, 0.8, "no ties");
    /* ties in x: ranks (1, 2.5, 2.5, 4) against (1, 3, 2, 4); Pearson of the ranks is
     * 4.5 / sqrt(4.5 · 5) = 3/sqrt(10) (the no-ties shortcut would give 0.95) */
    const double tx[] = {1, 2, 2, 3}, ty[] = {1, 3, 2, 4};
    assert_int_equal(qs_spearman(tx, ty, 4, &rho), QS_OK);
    near(rho, 3 / sqrt(10), "ties in x");
    /* ties in both: ranks (1.5, 1.5, 3.5, 3.5) against (1.5, 3.5, 1.5, 3.5): uncorrelated */
    const double bx[] = {1, 1, 2, 2}, by[] = {7, 9, 7, 9};
    assert_int_equal(qs_spearman(bx, by, 4, &rho), QS_OK);
    near(rho, 0, "ties in both");
    /* only the order counts: a monotone transform changes nothing */
    const double ex[] = {1e-9, 1e-3, 1, 1e6, 1e12};
    assert_int_equal(qs_spearman(ex, b, 5, &rho), QS_OK);
    near(rho, 0.8, "monotone transform");
}

/* Undefined: constant input, fewer than 2 pairs; NaN values are refused. */
static void test_spearman_degenerate(void **state) {
    (void)state;
    double rho = 0;
    const double c[] = {3, 3, 3, 3}, a[] = {1, 2, 3, 4}, bad[] = {1, NAN, 3, 4};
    assert_int_equal(qs_spearman(c, a, 4, &rho), QS_OK);
    assert_true(isnan(rho));
    rho = 0;
    assert_int_equal(qs_spearman(a, c, 4, &rho), QS_OK);
    assert_true(isnan(rho));
    rho = 0;
    assert_int_equal(qs_spearman(a, a, 1, &rho), QS_OK);
    assert_true(isnan(rho));
    rho = 0;
    assert_int_equal(qs_spearman(a, a, 0, &rho), QS_OK);
    assert_true(isnan(rho));
    assert_int_equal(qs_spearman(a, bad, 4, &rho), QS_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------ the measurement */

#define B 8       /* batch */
#define NB 2      /* fixed batches */
#define SIDE 12   /* input 12×12×1 */
#define CLASSES 4

/* A cnn (width 4, 12×12×1 inputs, 4 classes) set up on the CPU with weights that are not those
 * of its seed's initialisation (every parameter halved, as a checkpoint's would differ), and NB
 * synthetic batches. */
typedef struct bench {
    qs_model *m;
    qs_backend *be;
    float x[NB * B * SIDE * SIDE];
    int32_t y[NB * B];
    qs_sens_batches b;
} bench;

/* The model's parameters on the host (malloc'ed). */
static float *params_of(qs_model *m) {
    float *p = malloc(m->params.bytes);
    assert_non_null(p);
    assert_int_equal(m->be->ops->copy_d2h(m->be, m->stream, p, m->param_data, m->params.bytes), QS_OK);
    assert_int_equal(m->be->ops->stream_sync(m->be, m->stream), QS_OK);
    return p;
}

static bench *bench_open(void) {
    bench *t = calloc(1, sizeof *t);
    assert_non_null(t);
    qs_model_options o = qs_models_default_options(SIDE, SIDE, 1, CLASSES);
    o.width = 4;
    assert_int_equal(qs_models_build("cnn", &o, &t->m), QS_OK);
    assert_int_equal(qs_backend_cpu_create(1, &t->be), QS_OK);
    assert_int_equal(qs_model_setup(t->m, t->be, B, 7), QS_OK);
    float *w = params_of(t->m);
    for (size_t i = 0; i < t->m->params.bytes / sizeof(float); i++) w[i] *= 0.5f;
    assert_int_equal(t->be->ops->copy_h2d(t->be, t->m->stream, t->m->param_data, w, t->m->params.bytes), QS_OK);
    assert_int_equal(t->be->ops->stream_sync(t->be, t->m->stream), QS_OK);
    free(w);
    qs_dataset ds;
    assert_int_equal(qs_dataset_synthetic(64, SIDE, SIDE, 1, CLASSES, 11, &ds), QS_OK);
    qs_loader ld;
    qs_loader_options lo = {.global_batch = B, .world = 1, .seed = 3, .shuffle = true, .drop_last = true};
    assert_int_equal(qs_loader_init(&ld, &ds, &lo), QS_OK);
    for (int k = 0; k < NB; k++)
        assert_int_equal(qs_loader_next(&ld, t->x + k * B * SIDE * SIDE, t->y + k * B, NULL, NULL), QS_OK);
    qs_loader_free(&ld);
    qs_dataset_free(&ds);
    t->b = (qs_sens_batches){.count = NB, .batch = B, .x = t->x, .y = t->y};
    return t;
}

static void bench_close(bench *t) {
    qs_model_free(t->m);
    t->be->ops->destroy(t->be);
    free(t);
}

/* Measure t's model at the given precisions, emulated ones allowed (bf16 and int8 are emulated on
 * a CPU without AVX-512 / VNNI, numerically as the native kernels compute). */
static void measure(bench *t, const qs_precision *p, int n, qs_sensitivity *s) {
    qs_sensitivity_options o;
    qs_sensitivity_options_default(&o);
    o.precisions = p;
    o.n_precisions = n;
    o.allow_emulated = true;
    qs_status st = qs_sensitivity_measure(t->m, &t->b, &o, s);
    if (st != QS_OK) fail_msg("qs_sensitivity_measure: %s", qs_last_error());
}

/* A layer "quantized" to fp32 runs exactly the reference (same weights, batches and seeds in
 * every build): every deviation and ω is 0, and rho is undefined (all values tied). */
static void test_fp32_exactly_zero(void **state) {
    (void)state;
    bench *t = bench_open();
    const qs_precision fp32 = QS_PREC_FP32;
    qs_sensitivity s;
    measure(t, &fp32, 1, &s);
    assert_int_equal(s.ind.n_layers, 4); /* conv1, conv2, fc1, fc2 */
    assert_int_equal(s.n_points, 4);
    assert_true(s.ref_loss > 0 && s.ref_grad_sq_norm > 0);
    for (int i = 0; i < s.n_points; i++) {
        const qs_sens_point *pt = &s.points[i];
        if (pt->loss_dev != 0 || pt->loss_dev_signed != 0 || pt->grad_dev != 0)
            fail_msg("%s at fp32: loss_dev %g, signed %g, grad_dev %g (want 0)", s.ind.layers[pt->layer].name,
                     pt->loss_dev, pt->loss_dev_signed, pt->grad_dev);
        for (int meth = 0; meth < QS_IND_COUNT; meth++) assert_true(pt->omega[meth] == 0);
    }
    for (int meth = 0; meth < QS_IND_COUNT; meth++) assert_true(isnan(s.all.loss[meth]) && isnan(s.all.grad[meth]));
    qs_sensitivity_free(&s);
    bench_close(t);
}

/* Σ over layers of a deviation at precision p. */
static double dev_sum(const qs_sensitivity *s, qs_precision p, bool grad) {
    double sum = 0;
    for (int i = 0; i < s->n_points; i++)
        if (s->points[i].prec == p) sum += grad ? s->points[i].grad_dev : s->points[i].loss_dev;
    return sum;
}

/* INT8 (7 bits of magnitude, one scale per tensor) moves loss and gradient more than BF16
 * (8 significant bits per value), summed over the layers; every quantized run deviates; the
 * correlations are those of the points. */
static void test_int8_above_bf16(void **state) {
    (void)state;
    bench *t = bench_open();
    const qs_precision p[] = {QS_PREC_BF16, QS_PREC_INT8};
    qs_sensitivity s;
    measure(t, p, 2, &s);
    assert_int_equal(s.n_points, 8);
    for (int i = 0; i < s.n_points; i++) {
        const qs_sens_point *pt = &s.points[i];
        assert_int_equal(pt->prec, p[i % 2]);
        assert_int_equal(pt->layer, i / 2);
        if (!(pt->grad_dev > 0)) fail_msg("%s at %s: no gradient deviation", s.ind.layers[pt->layer].name,
                                          qs_precision_name(pt->prec));
        assert_true(fabs(pt->loss_dev_signed) <= pt->loss_dev);
    }
    double gb = dev_sum(&s, QS_PREC_BF16, true), gi = dev_sum(&s, QS_PREC_INT8, true);
    double lb = dev_sum(&s, QS_PREC_BF16, false), li = dev_sum(&s, QS_PREC_INT8, false);
    if (!(gi > gb) || !(li > lb)) fail_msg("int8 grad %g loss %g, bf16 grad %g loss %g", gi, li, gb, lb);
    /* the stored rho is the rank correlation of the stored points */
    double om[8], gd[8], rho;
    for (int i = 0; i < 8; i++) om[i] = s.points[i].omega[QS_IND_GVAR], gd[i] = s.points[i].grad_dev;
    assert_int_equal(qs_spearman(om, gd, 8, &rho), QS_OK);
    assert_true(rho == s.all.grad[QS_IND_GVAR]);
    assert_int_equal(s.per_prec[1].points, 4);
    for (int i = 0; i < 4; i++) om[i] = s.points[2 * i + 1].omega[QS_IND_WVAR], gd[i] = s.points[2 * i + 1].loss_dev;
    assert_int_equal(qs_spearman(om, gd, 4, &rho), QS_OK);
    assert_true(rho == s.per_prec[1].loss[QS_IND_WVAR] || (isnan(rho) && isnan(s.per_prec[1].loss[QS_IND_WVAR])));
    qs_sensitivity_free(&s);
    bench_close(t);
}

/* Two measurements agree bit for bit; the model's parameters are left as they were. */
static void test_deterministic(void **state) {
    (void)state;
    bench *t = bench_open();
    const qs_precision p[] = {QS_PREC_INT8};
    float *before = params_of(t->m);
    qs_sensitivity s1, s2;
    measure(t, p, 1, &s1);
    measure(t, p, 1, &s2);
    float *after = params_of(t->m);
    assert_memory_equal(before, after, t->m->params.bytes);
    assert_int_equal(s1.n_points, s2.n_points);
    assert_memory_equal(s1.points, s2.points, (size_t)s1.n_points * sizeof *s1.points);
    assert_true(s1.ref_loss == s2.ref_loss && s1.ref_grad_sq_norm == s2.ref_grad_sq_norm);
    free(before);
    free(after);
    qs_sensitivity_free(&s1);
    qs_sensitivity_free(&s2);
    bench_close(t);
}

/* The runs hold the given model's weights, not a fresh initialisation from its seed: the
 * reference loss is the (halved) model's own loss on the batches. */
static void test_uses_given_weights(void **state) {
    (void)state;
    bench *t = bench_open();
    double direct = 0, loss;
    for (int k = 0; k < NB; k++) {
        assert_int_equal(qs_model_forward(t->m, t->x + k * B * SIDE * SIDE, t->y + k * B, true), QS_OK);
        assert_int_equal(qs_model_loss_accuracy(t->m, B, &loss, NULL), QS_OK);
        direct += loss / NB;
    }
    const qs_precision fp32 = QS_PREC_FP32;
    qs_sensitivity s;
    measure(t, &fp32, 1, &s);
    if (!(fabs(s.ref_loss - direct) <= 1e-6 * direct)) fail_msg("reference loss %.9g, the model's %.9g", s.ref_loss, direct);
    qs_sensitivity_free(&s);
    bench_close(t);
}

/* The default list is the backend's native precisions but fp32 (refused when there are none, as
 * on a CPU that only emulates bf16 and int8), with allow_emulated also the emulated ones; an
 * emulated precision is refused unless allowed; a batch size other than the model's is refused. */
static void test_precision_choice(void **state) {
    (void)state;
    bench *t = bench_open();
    qs_sensitivity s;
    qs_sensitivity_options o;
    qs_sensitivity_options_default(&o);
    const qs_precision fp16 = QS_PREC_FP16;
    o.precisions = &fp16;
    o.n_precisions = 1;
    if (t->be->ops->precision_support(t->be, QS_PREC_FP16) == QS_PREC_EMULATED) {
        assert_int_equal(qs_sensitivity_measure(t->m, &t->b, &o, &s), QS_ERR_UNSUPPORTED);
        assert_non_null(strstr(qs_last_error(), "only emulated"));
        assert_null(s.points);
    }
    qs_sens_batches other = t->b;
    other.batch = B / 2;
    assert_int_equal(qs_sensitivity_measure(t->m, &other, &o, &s), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "set up for 8"));
    /* the default list (on one batch, to keep the test fast) */
    o.precisions = NULL;
    o.n_precisions = 0;
    int want = 0, emulated = 0;
    for (int p = QS_PREC_FP32 + 1; p < QS_PREC_COUNT; p++) {
        const qs_prec_support sup = t->be->ops->precision_support(t->be, (qs_precision)p);
        want += sup == QS_PREC_NATIVE;
        emulated += sup == QS_PREC_EMULATED;
    }
    other = t->b;
    other.count = 1;
    if (want == 0) { /* only fp32 native here (e.g. AVX2 without VNNI): nothing to measure by default */
        assert_int_equal(qs_sensitivity_measure(t->m, &other, &o, &s), QS_ERR_UNSUPPORTED);
        assert_non_null(strstr(qs_last_error(), "runs no precision other than fp32 natively (allow emulated"));
        assert_null(s.points);
    } else {
        assert_int_equal(qs_sensitivity_measure(t->m, &other, &o, &s), QS_OK);
        assert_int_equal(s.n_precs, want);
        for (int k = 0; k < s.n_precs; k++)
            assert_int_equal(t->be->ops->precision_support(t->be, s.precs[k]), QS_PREC_NATIVE);
        qs_sensitivity_free(&s);
    }
    /* allowed, the emulated ones join them, in precision order */
    o.allow_emulated = true;
    assert_int_equal(qs_sensitivity_measure(t->m, &other, &o, &s), QS_OK);
    assert_int_equal(s.n_precs, want + emulated);
    for (int k = 0; k < s.n_precs; k++) {
        assert_int_not_equal(t->be->ops->precision_support(t->be, s.precs[k]), QS_PREC_UNSUPPORTED);
        assert_true(s.precs[k] != QS_PREC_FP32 && (k == 0 || s.precs[k] > s.precs[k - 1]));
    }
    qs_sensitivity_free(&s);
    bench_close(t);
}

/* ------------------------------------------------------------------ the command */

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    return cJSON_Parse(text);
}

/* `qsync sensitivity` writes the documented keys; bad input: exit 2 (usage) or 1 (runtime)
 * with a precise message, and nothing written. */
static void test_sensitivity_cli(void **state) {
    (void)state;
    char args[1024], path[512], bad[512];
    snprintf(path, sizeof path, "%s/sens.json", qs_test_tmp);
    snprintf(bad, sizeof bad, "%s/bad.json", qs_test_tmp);
    snprintf(args, sizeof args,
             "sensitivity --model cnn --width 4 --data synthetic --batch 8 --batches 1 --precisions bf16,int8 "
             "--threads 1 --quiet --out %s",
             path);
    if (qs_test_cpu_emulates(QS_PREC_BF16) || qs_test_cpu_emulates(QS_PREC_INT8)) { /* refused without the flag */
        qs_test_expect_qsync(1, "pass --allow-emulated", args);
        assert_int_equal(qs_test_count_entries(qs_test_tmp), 0);
    }
    strcat(args, " --allow-emulated");
    qs_test_expect_qsync(0, NULL, args);
    cJSON *doc = read_json(path);
    assert_non_null(doc);
    assert_string_equal(cJSON_GetObjectItem(doc, "format")->valuestring, "qsync-sensitivity");
    assert_int_equal((int)cJSON_GetObjectItem(doc, "version")->valuedouble, 1);
    assert_string_equal(cJSON_GetObjectItem(doc, "model")->valuestring, "cnn");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "precisions")), 2);
    const cJSON *pt = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "layers"), "conv2"), "precisions"), "int8");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(pt, "loss_dev")));
    assert_true(cJSON_GetObjectItem(pt, "grad_dev")->valuedouble > 0);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(pt, "omega"), "hess")));
    const cJSON *corr = cJSON_GetObjectItem(doc, "correlations");
    assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(corr, "all"), "points")->valuedouble, 8);
    const cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(corr, "per_precision"), "bf16"),
                                         "grad_dev");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(g, "gvar")) || cJSON_IsNull(cJSON_GetObjectItem(g, "gvar")));
    cJSON_Delete(doc);

    snprintf(args, sizeof args, "sensitivity --model nosuch --data synthetic --out %s", bad);
    qs_test_expect_qsync(1, "qsync sensitivity: error: ", args);
    qs_test_expect_qsync(1, "nosuch", args);
    snprintf(args, sizeof args, "sensitivity --model cnn --data synthetic --batches 0 --out %s", bad);
    qs_test_expect_qsync(2, "--batch and --batches must be >= 1", args);
    snprintf(args, sizeof args, "sensitivity --model cnn --data synthetic --precisions bf16,int4 --out %s", bad);
    qs_test_expect_qsync(2, "--precisions: unknown precision 'int4'", args);
    snprintf(args, sizeof args, "sensitivity --model cnn --data synthetic --precisions int8,int8 --out %s", bad);
    qs_test_expect_qsync(2, "--precisions: precision 'int8' is listed twice", args);
    qs_test_expect_qsync(2, "qsync sensitivity: --out is required", "sensitivity --model cnn --data synthetic");
    snprintf(args, sizeof args, "sensitivity --data synthetic --out %s", bad);
    qs_test_expect_qsync(2, "--model (or --checkpoint) is required", args);
    snprintf(args, sizeof args, "sensitivity --model cnn --width 4 --data synthetic --batch 8 --batches 1 "
                                "--precisions tf32 --out %s", bad);
    qs_test_expect_qsync(1, "tf32", args);
    FILE *f = fopen(bad, "rb");
    assert_null(f);
    assert_int_equal(qs_test_count_entries(qs_test_tmp), 1); /* sens.json only: no temporary left */
}

/* --checkpoint: its model and weights are measured (the reference loss differs from a fresh
 * model's); a different --model is refused. */
static void test_sensitivity_checkpoint(void **state) {
    (void)state;
    char args[1024], ck[256], a[512], b[512];
    qs_test_tiny_checkpoint(ck, sizeof ck);
    snprintf(a, sizeof a, "%s/a.json", qs_test_tmp);
    snprintf(b, sizeof b, "%s/b.json", qs_test_tmp);
    const char *common = "--data synthetic --batch 8 --batches 1 --precisions int8 --threads 1 --quiet --allow-emulated";
    snprintf(args, sizeof args, "sensitivity --checkpoint %s %s --out %s", ck, common, a);
    qs_test_expect_qsync(0, NULL, args);
    snprintf(args, sizeof args, "sensitivity --model cnn --width 4 %s --out %s", common, b);
    qs_test_expect_qsync(0, NULL, args);
    cJSON *da = read_json(a), *db = read_json(b);
    assert_non_null(da);
    assert_non_null(db);
    assert_string_equal(cJSON_GetObjectItem(da, "checkpoint")->valuestring, ck);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(db, "checkpoint")));
    double la = cJSON_GetObjectItem(cJSON_GetObjectItem(da, "reference"), "loss")->valuedouble;
    double lb = cJSON_GetObjectItem(cJSON_GetObjectItem(db, "reference"), "loss")->valuedouble;
    assert_true(la != lb);
    cJSON_Delete(da);
    cJSON_Delete(db);
    snprintf(args, sizeof args, "sensitivity --checkpoint %s --model mlp %s --out %s/c.json", ck, common, qs_test_tmp);
    qs_test_expect_qsync(1, "holds a cnn", args);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_average),      cmocka_unit_test(test_spearman_known),
        cmocka_unit_test(test_spearman_degenerate), cmocka_unit_test(test_fp32_exactly_zero),
        cmocka_unit_test(test_int8_above_bf16),    cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_uses_given_weights), cmocka_unit_test(test_precision_choice),
        QS_TMPDIR_TEST(test_sensitivity_cli),      QS_TMPDIR_TEST(test_sensitivity_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
