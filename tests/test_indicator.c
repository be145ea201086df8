/* tests/test_indicator.c — the indicator (src/plan/indicator.h): its statistics against a
 * direct computation on a tiny model, the variance derivation against a Monte-Carlo measurement,
 * ω(fp32) = 0 and the ordering of ω over precisions the derivation implies, every method, and
 * `qsync indicate` (documented keys; bad input gives clear errors and writes nothing). */
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
#include "core/quant_int8.h"
#include "graph/graph.h"
#include "graph/precision.h"
#include "models/models.h"
#include "plan/indicator.h"
#include "run_cmd.h"

#define B 4

/* Deterministic batches: values in [-1, 1) from a counter, labels cycling over 3 classes. */
typedef struct src_state {
    int64_t per;
    uint32_t k;
} src_state;

static qs_status next_batch(void *ctx, float *x, int32_t *y) {
    src_state *s = ctx;
    for (int64_t i = 0; i < B * s->per; i++) {
        s->k = s->k * 1664525u + 1013904223u;
        x[i] = (float)(s->k >> 8) * 0x1p-23f - 1.0f;
    }
    for (int i = 0; i < B; i++) y[i] = (int32_t)((s->k >> 3) + (uint32_t)i) % 3;
    return QS_OK;
}

/* The mlp on 4×4×1 inputs, 3 classes, hidden 8, set up for batch B on the CPU. */
static void tiny_model(qs_model **m, qs_backend **be) {
    qs_model_options o = qs_models_default_options(4, 4, 1, 3);
    o.width = 8;
    assert_int_equal(qs_models_build("mlp", &o, m), QS_OK);
    assert_int_equal(qs_backend_cpu_create(1, be), QS_OK);
    assert_int_equal(qs_model_setup(*m, *be, B, 7), QS_OK);
}

/* x rounded to bf16 by an independent route: 8 significant bits, ties to even. */
static double bf16_ref(double x) {
    if (x == 0) return 0;
    int e;
    double mant = frexp(x, &e); /* [0.5, 1) */
    return ldexp(nearbyint(ldexp(mant, 8)), e - 8);
}

static void near(double got, double want, double rel, const char *what) {
    if (!(fabs(got - want) <= rel * fabs(want) + 1e-30))
        fail_msg("%s: got %.9g, want %.9g (rel %.3g)", what, got, want, rel);
}

/* One batch: every statistic equals the direct computation on the model's buffers after it. */
static void test_stats_direct(void **state) {
    (void)state;
    qs_model *m = NULL;
    qs_backend *be = NULL;
    tiny_model(&m, &be);
    src_state s = {.per = 16, .k = 1};
    qs_indicator ind;
    assert_int_equal(qs_indicator_collect(m, 1, next_batch, &s, 3, &ind), QS_OK);
    int n_sel = 0;
    for (int i = 0; i < m->n_nodes; i++) n_sel += qs_node_precision_selectable(m->nodes[i].kind);
    assert_int_equal(ind.n_layers, n_sel);
    assert_true(n_sel >= 2);
    assert_int_equal(ind.L, n_sel + 1); /* a chain: depths 1..n */
    for (int li = 0; li < ind.n_layers; li++) {
        const qs_layer_stats *l = &ind.layers[li];
        qs_node *n = &m->nodes[l->node];
        assert_int_equal(l->depth, li + 1);
        assert_int_equal(n->kind, QS_NODE_LINEAR);
        const float *X = m->nodes[n->inputs[0]].y, *W = qs_model_param_ptr(m, n->param[0]);
        const float *dY = n->dy, *dW = qs_model_grad_ptr(m, n->param[0]);
        const int64_t K = m->nodes[n->inputs[0]].out_shape[1], J = n->cfg.linear.out_features;
        assert_int_equal(l->n_x, B * K);
        assert_int_equal(l->n_w, J * K);
        assert_int_equal(l->n_y, B * J);
        assert_int_equal(l->k_fwd, K);
        assert_int_equal(l->k_bwd_data, J);
        assert_int_equal(l->k_bwd_weights, B);
        assert_true(l->has_dx == (li > 0));
        double sx = 0, ax = 0, sw = 0, sdy = 0, sdw = 0, q8 = 0, qb = 0;
        for (int64_t i = 0; i < l->n_x; i++) {
            sx += (double)X[i] * X[i];
            ax = fmax(ax, fabs(X[i]));
        }
        for (int64_t i = 0; i < l->n_w; i++) {
            sw += (double)W[i] * W[i];
            sdw += (double)dW[i] * dW[i];
        }
        for (int64_t i = 0; i < l->n_y; i++) sdy += (double)dY[i] * dY[i];
        const double s8 = ax / 127;
        for (int64_t i = 0; i < l->n_x; i++) {
            double e8 = nearbyint(X[i] / s8) * s8 - X[i], eb = bf16_ref(X[i]) - X[i];
            q8 += e8 * e8;
            qb += eb * eb;
        }
        near(l->ex2, sx / (double)l->n_x, 1e-9, "E[X^2]");
        near(l->norm_x, sqrt(sx), 1e-9, "|X|");
        near(l->amax_x, ax, 0, "amax X");
        near(l->ew2, sw / (double)l->n_w, 1e-9, "E[W^2]");
        near(l->edy2, sdy / (double)l->n_y, 1e-9, "E[dY^2]");
        near(l->edw2, sdw / (double)l->n_w, 1e-9, "E[dW^2]");
        near(l->grad_sq_norm, sdw, 1e-9, "|dW|^2");
        near(l->grad_norm_mean, sqrt(sdw), 1e-9, "|mean dW|");
        near(l->qvar_x[QS_PREC_INT8], q8 / (double)l->n_x, 1e-3, "int8 rounding variance of X");
        near(l->qvar_x[QS_PREC_BF16], qb / (double)l->n_x, 1e-6, "bf16 rounding variance of X");
        assert_true(l->qvar_x[QS_PREC_FP32] == 0 && l->qvar_w[QS_PREC_FP32] == 0 && l->qvar_dy[QS_PREC_FP32] == 0);
        near(l->espread_x, log2(ax / sqrt(sx / (double)l->n_x)), 1e-9, "exponent spread of X");
        /* SR of dY: its error variance lies between the RNE one and twice it (uniform fractions: 2×) */
        assert_true(l->qvar_dy[QS_PREC_INT8] > 0);
    }
    /* weights unchanged: two collections on the same batches give the same forward statistics */
    src_state s2 = {.per = 16, .k = 1};
    qs_indicator ind2;
    assert_int_equal(qs_indicator_collect(m, 1, next_batch, &s2, 3, &ind2), QS_OK);
    for (int li = 0; li < ind.n_layers; li++) {
        near(ind2.layers[li].ew2, ind.layers[li].ew2, 0, "W unchanged");
        near(ind2.layers[li].ex2, ind.layers[li].ex2, 1e-12, "X reproduced");
    }
    qs_indicator_free(&ind2);
    qs_indicator_free(&ind);
    /* bad input */
    assert_int_equal(qs_indicator_collect(m, 0, next_batch, &s, 3, &ind), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "batches >= 1"));
    qs_model_free(m);
    be->ops->destroy(be);
}

/* The derivation: for Y = X·Wᵀ with both operands INT8-rounded (RNE), the measured mean square
 * of ΔY matches K·(σ²_X·E[W²] + σ²_W·E[X²]) within 10%. */
static void test_forward_variance_derivation(void **state) {
    (void)state;
    enum { N = 64, J = 32, K = 256 };
    float *X = malloc(N * K * sizeof(float)), *W = malloc(J * K * sizeof(float));
    float *qX = malloc(N * K * sizeof(float)), *qW = malloc(J * K * sizeof(float));
    int8_t *q = malloc(N * K);
    assert_true(X && W && qX && qW && q);
    uint32_t k = 12345;
    for (int i = 0; i < N * K; i++) {
        k = k * 1664525u + 1013904223u;
        X[i] = ((float)(k >> 8) * 0x1p-23f - 1.0f) * (i % 7 == 0 ? 3.0f : 1.0f);
    }
    for (int i = 0; i < J * K; i++) {
        k = k * 1664525u + 1013904223u;
        W[i] = ((float)(k >> 8) * 0x1p-23f - 1.0f) * 0.05f;
    }
    float sc;
    assert_int_equal(qs_int8_quantize_tensor(N * K, X, q, &sc, NULL), QS_OK);
    assert_int_equal(qs_int8_dequantize(N * K, q, sc, qX), QS_OK);
    assert_int_equal(qs_int8_quantize_tensor(J * K, W, q, &sc, NULL), QS_OK);
    assert_int_equal(qs_int8_dequantize(J * K, q, sc, qW), QS_OK);
    double vx = 0, vw = 0, ex2 = 0, ew2 = 0, dy2 = 0;
    for (int i = 0; i < N * K; i++) vx += (double)(qX[i] - X[i]) * (qX[i] - X[i]), ex2 += (double)X[i] * X[i];
    for (int i = 0; i < J * K; i++) vw += (double)(qW[i] - W[i]) * (qW[i] - W[i]), ew2 += (double)W[i] * W[i];
    vx /= N * K, ex2 /= N * K, vw /= J * K, ew2 /= J * K;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < J; j++) {
            double y = 0, yq = 0;
            for (int c = 0; c < K; c++)
                y += (double)X[n * K + c] * W[j * K + c], yq += (double)qX[n * K + c] * qW[j * K + c];
            dy2 += (yq - y) * (yq - y);
        }
    dy2 /= N * J;
    near(dy2, K * (vx * ew2 + vw * ex2), 0.10, "Var(dY) vs K(s2x E[W2] + s2w E[X2])");
    free(X), free(W), free(qX), free(qW), free(q);
}

/* ω(fp32) = 0 for every method; GVAR orders fp32 < fp16 < bf16 < int8 (the mantissa widths:
 * 10 > 7 stored bits; INT8's absolute step amax/127 is coarser than BF16's relative 2^-8 for
 * tensors with a modest exponent spread) and tf32 ≤ fp16 (same mantissa, no FP16 range loss);
 * the random method is seeded and monotone. */
static void test_omega_methods(void **state) {
    (void)state;
    qs_model *m = NULL;
    qs_backend *be = NULL;
    tiny_model(&m, &be);
    src_state s = {.per = 16, .k = 5};
    qs_indicator ind;
    assert_int_equal(qs_indicator_collect(m, 3, next_batch, &s, 1, &ind), QS_OK);
    for (int li = 0; li < ind.n_layers; li++) {
        double om[QS_PREC_COUNT], vf[QS_PREC_COUNT], vb[QS_PREC_COUNT];
        for (int meth = 0; meth < QS_IND_COUNT; meth++) {
            qs_indicator_omega(&ind, li, (qs_indicator_method)meth, 4, 9, om, vf, vb);
            assert_true(om[QS_PREC_FP32] == 0);
            for (int p = 1; p < QS_PREC_COUNT; p++)
                if (!(om[p] > 0 && isfinite(om[p])))
                    fail_msg("method %s layer %d: omega[%s] = %g", qs_indicator_method_name((qs_indicator_method)meth),
                             li, qs_precision_name((qs_precision)p), om[p]);
            assert_true(om[QS_PREC_BF16] < om[QS_PREC_INT8] || meth == QS_IND_QSYNC);
        }
        qs_indicator_omega(&ind, li, QS_IND_GVAR, 4, 9, om, vf, vb);
        assert_true(om[QS_PREC_FP16] < om[QS_PREC_BF16]);
        assert_true(om[QS_PREC_BF16] < om[QS_PREC_INT8]);
        assert_true(om[QS_PREC_TF32] <= om[QS_PREC_FP16] * 1.0001);
        /* ω = γ(L−d)Vfwd + d·Vbwd */
        const qs_layer_stats *l = &ind.layers[li];
        near(om[QS_PREC_INT8], 4.0 * (ind.L - l->depth) * vf[QS_PREC_INT8] + l->depth * vb[QS_PREC_INT8], 1e-12,
             "omega composition");
        /* gamma 0 leaves only the backward term */
        double om0[QS_PREC_COUNT];
        qs_indicator_omega(&ind, li, QS_IND_GVAR, 0, 9, om0, NULL, NULL);
        near(om0[QS_PREC_INT8], l->depth * vb[QS_PREC_INT8], 1e-12, "gamma 0");
        /* random: reproducible for a seed, different for another */
        double r1[QS_PREC_COUNT], r2[QS_PREC_COUNT], r3[QS_PREC_COUNT];
        qs_indicator_omega(&ind, li, QS_IND_RANDOM, 4, 9, r1, NULL, NULL);
        qs_indicator_omega(&ind, li, QS_IND_RANDOM, 4, 9, r2, NULL, NULL);
        qs_indicator_omega(&ind, li, QS_IND_RANDOM, 4, 10, r3, NULL, NULL);
        assert_true(memcmp(r1, r2, sizeof r1) == 0 && r1[QS_PREC_INT8] != r3[QS_PREC_INT8]);
        assert_true(r1[QS_PREC_FP32] < r1[QS_PREC_BF16] && r1[QS_PREC_BF16] < r1[QS_PREC_INT8]);
    }
    qs_indicator_method mth;
    assert_true(qs_indicator_method_parse("hess", &mth) && mth == QS_IND_HESS);
    assert_false(qs_indicator_method_parse("fisher", &mth));
    qs_indicator_free(&ind);
    qs_model_free(m);
    be->ops->destroy(be);
}

static void expect_run(const char *args, int want, const char *needle) {
    char *out = NULL;
    int rc = qs_test_run_qsync(args, &out);
    if (rc != want || (needle && !strstr(out, needle)))
        fail_msg("qsync %s\n  exit %d (want %d), output:\n%s\n  (wanted: %s)", args, rc, want, out,
                 needle ? needle : "-");
    free(out);
}

/* The command writes the documented keys; bad input: clear errors, nothing written. */
static void test_indicate_cli(void **state) {
    (void)state;
    char args[1024], path[512];
    snprintf(path, sizeof path, "%s/ind.json", qs_test_tmp);
    snprintf(args, sizeof args,
             "indicate --model cnn --width 4 --data synthetic --batch 8 --batches 2 --quiet --out %s", path);
    expect_run(args, 0, NULL);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    assert_string_equal(cJSON_GetObjectItem(doc, "format")->valuestring, "qsync-indicator");
    assert_int_equal((int)cJSON_GetObjectItem(doc, "version")->valuedouble, 1);
    assert_string_equal(cJSON_GetObjectItem(doc, "model")->valuestring, "cnn");
    assert_non_null(strstr(cJSON_GetObjectItem(doc, "config")->valuestring, "width=4"));
    assert_string_equal(cJSON_GetObjectItem(doc, "data")->valuestring, "synthetic");
    assert_int_equal((int)cJSON_GetObjectItem(doc, "batch")->valuedouble, 8);
    assert_int_equal((int)cJSON_GetObjectItem(doc, "batches")->valuedouble, 2);
    assert_string_equal(cJSON_GetObjectItem(doc, "method")->valuestring, "gvar");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(doc, "gamma")));
    const cJSON *layers = cJSON_GetObjectItem(doc, "layers"), *l;
    assert_int_equal(cJSON_GetArraySize(layers), 4); /* conv1, conv2, fc1, fc2 */
    assert_non_null(cJSON_GetObjectItem(layers, "conv1"));
    cJSON_ArrayForEach(l, layers) {
        assert_true(cJSON_IsNumber(cJSON_GetObjectItem(l, "depth")));
        assert_true(cJSON_IsObject(cJSON_GetObjectItem(l, "stats")));
        const cJSON *om = cJSON_GetObjectItem(l, "omega");
        const char *keys[] = {"fp32", "bf16", "int8", "fp16", "fp8"};
        for (int i = 0; i < 5; i++) assert_true(cJSON_IsNumber(cJSON_GetObjectItem(om, keys[i])));
        assert_true(cJSON_GetObjectItem(om, "fp32")->valuedouble == 0);
    }
    cJSON_Delete(doc);
    /* bad input: exit 2, a message naming the problem, no file */
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad.json", qs_test_tmp);
    snprintf(args, sizeof args, "indicate --model cnn --data synthetic --method fisher --out %s", bad);
    expect_run(args, 2, "unknown method 'fisher'");
    snprintf(args, sizeof args, "indicate --model cnn --data synthetic --batches 0 --out %s", bad);
    expect_run(args, 2, "--batches must be >= 1");
    expect_run("indicate --model cnn --data synthetic", 2, "--out is required");
    snprintf(args, sizeof args, "indicate --data synthetic --out %s", bad);
    expect_run(args, 2, "--model (or --checkpoint) is required");
    snprintf(args, sizeof args, "indicate --model nosuch --data synthetic --out %s", bad);
    expect_run(args, 1, "nosuch");
    snprintf(args, sizeof args, "indicate --model cnn --data synthetic --device gpu --out %s", bad);
    expect_run(args, 2, "--device must be cpu, cuda or cuda:N (got 'gpu')");
    snprintf(args, sizeof args, "indicate --model cnn --data synthetic --checkpoint %s/none --out %s", qs_test_tmp,
             bad);
    expect_run(args, 1, "qsync indicate: error:");
    FILE *g = fopen(bad, "rb");
    assert_null(g);
    assert_int_equal(qs_test_count_entries(qs_test_tmp), 1); /* only ind.json: no temporary left */
}

/* Reads `path` (a JSON document) and returns layers.<layer>.stats.<key>. */
static double stat_of(const char *path, const char *layer, const char *key) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    const cJSON *v = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "layers"), layer), "stats"), key);
    assert_true(cJSON_IsNumber(v));
    double r = v->valuedouble;
    cJSON_Delete(doc);
    return r;
}

/* --checkpoint: the model and weights come from the checkpoint (statistics differ from a fresh
 * model's), the document names it; a different --model is refused. */
static void test_indicate_checkpoint(void **state) {
    (void)state;
    char args[1024], ck[256], a[512], b[512];
    qs_test_tiny_checkpoint(ck, sizeof ck);
    snprintf(a, sizeof a, "%s/a.json", qs_test_tmp);
    snprintf(b, sizeof b, "%s/b.json", qs_test_tmp);
    snprintf(args, sizeof args, "indicate --checkpoint %s --data synthetic --batch 8 --batches 1 --quiet --out %s", ck,
             a);
    expect_run(args, 0, NULL);
    snprintf(args, sizeof args,
             "indicate --model cnn --width 4 --data synthetic --batch 8 --batches 1 --quiet --out %s", b);
    expect_run(args, 0, NULL);
    assert_true(stat_of(a, "conv1", "ms_w") != stat_of(b, "conv1", "ms_w"));
    assert_true(stat_of(a, "fc2", "n_x") == stat_of(b, "fc2", "n_x"));
    snprintf(args, sizeof args, "indicate --checkpoint %s --model mlp --data synthetic --out %s/c.json", ck,
             qs_test_tmp);
    expect_run(args, 1, "holds a cnn");
    snprintf(args, sizeof args, "indicate --checkpoint %s --width 8 --data synthetic --out %s/c.json", ck, qs_test_tmp);
    expect_run(args, 1, "has width 4");
    snprintf(args, sizeof args, "%s/c.json", qs_test_tmp);
    FILE *g = fopen(args, "rb");
    assert_null(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_direct),      cmocka_unit_test(test_forward_variance_derivation),
        cmocka_unit_test(test_omega_methods),     QS_TMPDIR_TEST(test_indicate_cli),
        QS_TMPDIR_TEST(test_indicate_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
