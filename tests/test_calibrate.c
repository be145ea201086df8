/* tests/test_calibrate.c — the replay calibrated against synchronized steps measured in place
 * (src/predict/calibrate.h) and the profile's mixed-precision runs that feed it
 * (src/predict/profile_mixed.h), on cnn profiles taken here on the CPU and relabelled as two
 * GPU device types sharing one GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/grad_sync.h"
#include "graph/precision.h"
#include "predict/calibrate.h"
#include "predict/profile.h"
#include "predict/profile_mixed.h"

#define BUCKET 1024

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) fail_msg("no number \"%s\"", key);
    return v->valuedouble;
}

static int64_t g_batch = 8;
static float g_x[8 * 28 * 28];
static int32_t g_y[8] = {0, 1, 2, 3, 4, 5, 6, 7};

/* Profile options for cnn width 4 at fp32 and int8 on a fixed synthetic batch (no comm). */
static qs_profile_options cnn_options(const qs_precision *precs) {
    for (int i = 0; i < 8 * 28 * 28; i++) g_x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    qs_profile_options o = {.model = "cnn", .data = "synthetic", .batch = g_batch, .threads = 1, .precs = precs,
                            .n_precs = 2, .allow_emulated = true, .warmup = 1, .reps = 3, .optimizer = QS_OPTIM_SGD,
                            .x = g_x, .y = g_y, .data_ms = 0};
    o.model_opt = qs_models_default_options(28, 28, 1, 10);
    o.model_opt.width = 4;
    return o;
}

/* cnn width 4 with every Conv2d/Linear at p, except those named in int8_layers (comma-separated)
 * at int8; casts inserted. */
static qs_model *cnn_at(qs_precision p, const char *int8_layers) {
    qs_model_options mo = qs_models_default_options(28, 28, 1, 10);
    mo.width = 4;
    qs_model *m = NULL;
    assert_int_equal(qs_models_build("cnn", &mo, &m), QS_OK);
    qs_model_fuse(m);
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        if (!qs_node_precision_selectable(n->kind)) continue;
        n->prec = p;
        if (int8_layers && strstr(int8_layers, n->name)) n->prec = QS_PREC_INT8;
    }
    assert_int_equal(qs_model_insert_casts(m, NULL), QS_OK);
    return m;
}

/* The in-place sync record of a run: 2 ranks, m's buckets of BUCKET bytes, this step. */
static cJSON *grad_sync(const qs_model *m, double step_ms) {
    qs_grad_bucket b[64];
    int eb[64];
    assert_true(m->params.count <= 64);
    char js[256];
    snprintf(js, sizeof js, "{\"ranks\": 2, \"bucket_bytes\": %d, \"buckets\": %d, \"overlap_ms\": 0.1, "
             "\"no_overlap_ms\": 0.1, \"overlap_step_ms\": %.17g, \"no_overlap_step_ms\": %.17g}", BUCKET,
             qs_grad_buckets_form(&m->params, BUCKET, b, eb), step_ms, step_ms + 1);
    return cJSON_Parse(js);
}

/* A mixed run entry: fast at pf, slow at ps, the synchronized step measured in place (this
 * rank's own figures made up). */
static cJSON *mixed_entry(const qs_model *m, const char *pf, const char *ps, double step_ms) {
    char js[256];
    snprintf(js, sizeof js, "{\"precisions\": {\"fast\": \"%s\", \"slow\": \"%s\"}, \"precision\": \"%s\", "
             "\"step_ms\": %.17g, \"optimizer_ms\": 0.1, \"grad_average_ms\": 0.01}", pf, ps, pf, step_ms);
    cJSON *e = cJSON_Parse(js);
    cJSON_AddItemToObject(e, "grad_sync", grad_sync(m, step_ms));
    return e;
}

/* Measured in-place steps (ms): fp32 and int8 uniform, fast fp32 + slow int8, and the reverse. */
static const double STEP_FP32 = 40, STEP_INT8 = 30, STEP_F32_S8 = 33, STEP_S8_F32 = 38;

/* Profiles of the types "fast" and "slow" (the slow one's times 1.5×) as a GPU pair would
 * have them: device type, an all-reduce curve, in-place steps for both runs and both mixed
 * assignments. */
static void pair_profiles(cJSON **fast, cJSON **slow) {
    static const qs_precision precs[2] = {QS_PREC_FP32, QS_PREC_INT8};
    qs_profile_options o = cnn_options(precs);
    assert_int_equal(qs_profile_model(&o, fast), QS_OK);
    qs_model *m = cnn_at(QS_PREC_FP32, NULL);
    *slow = cJSON_Duplicate(*fast, true);
    cJSON *p[2] = {*fast, *slow}, *run, *op;
    for (int k = 0; k < 2; k++) {
        cJSON *dev = cJSON_GetObjectItem(p[k], "device");
        cJSON_ReplaceItemInObject(dev, "backend", cJSON_CreateString("cuda"));
        cJSON_AddStringToObject(dev, "type", k ? "slow" : "fast");
        cJSON_AddItemToObject(p[k], "allreduce", cJSON_Parse("{\"ranks\": 2, \"alpha_ms\": 0.01, \"beta_ms_per_byte\":"
                                                             " 1e-6, \"points\": [[1024, 0.02], [1048576, 1.0]]}"));
        cJSON_ArrayForEach(run, cJSON_GetObjectItem(p[k], "runs")) {
            const bool fp32 = strcmp(run->string, "fp32") == 0;
            for (cJSON *v = run->child; v && k; v = v->next)
                if (cJSON_IsNumber(v) && strstr(v->string, "_ms")) cJSON_SetNumberValue(v, v->valuedouble * 1.5);
            cJSON_ArrayForEach(op, cJSON_GetObjectItem(run, "ops")) {
                for (cJSON *v = op->child; v && k; v = v->next)
                    if (cJSON_IsNumber(v) && strstr(v->string, "_ms")) cJSON_SetNumberValue(v, v->valuedouble * 1.5);
            }
            cJSON_AddItemToObject(run, "grad_sync", grad_sync(m, fp32 ? STEP_FP32 : STEP_INT8));
        }
        cJSON *mixed = cJSON_AddArrayToObject(p[k], "mixed_runs");
        cJSON_AddItemToArray(mixed, mixed_entry(m, "fp32", "int8", STEP_F32_S8));
        cJSON_AddItemToArray(mixed, mixed_entry(m, "int8", "fp32", STEP_S8_F32));
    }
    qs_model_free(m);
}

/* The profile document doc read as a profile (io/profile_file.h) named origin. */
static qs_profile typed(const cJSON *doc, const char *origin) {
    qs_profile p;
    if (qs_profile_from_json(doc, origin, &p) != QS_OK) fail_msg("profile %s: %s", origin, qs_last_error());
    return p;
}

static qs_sim_worker worker(const char *type, const qs_profile *profile, const qs_model *m) {
    return (qs_sim_worker){.type = type, .profile = profile, .m = m, .batch = g_batch};
}

static const qs_sim_options OPTS = {.bucket_bytes = BUCKET, .overlap = true};

/* Replay and calibrated replay of the pair (fast with mf, slow with ms); the calibrated
 * prediction's document into *out (caller deletes), the replay's iteration into *replayed. */
static void simulate_pair(const cJSON *fast, const cJSON *slow, const qs_model *mf, const qs_model *ms, cJSON **out,
                          double *replayed) {
    qs_profile pf = typed(fast, "fast"), ps = typed(slow, "slow");
    qs_sim_worker w[2] = {worker("fast", &pf, mf), worker("slow", &ps, ms)};
    qs_sim_result raw, cal;
    assert_int_equal(qs_sim_replay(w, 2, &OPTS, NULL, &raw), QS_OK);
    *replayed = raw.iteration_ms;
    qs_sim_result_free(&raw);
    assert_int_equal(qs_simulate(w, 2, &OPTS, NULL, &cal), QS_OK);
    assert_true(cal.calibrated);
    *out = qs_sim_result_json(&cal);
    assert_non_null(*out);
    qs_sim_result_free(&cal);
    qs_profile_free(&pf);
    qs_profile_free(&ps);
}

/* The whole pair at the base (fp32), without data loading, is predicted as exactly the step
 * measured in place: the replay of the plan and of the run it was measured in are the same. */
static void test_uniform_base_is_the_measurement(void **state) {
    (void)state;
    cJSON *fast, *slow, *out;
    pair_profiles(&fast, &slow);
    qs_model *m0 = cnn_at(QS_PREC_FP32, NULL), *m1 = cnn_at(QS_PREC_FP32, NULL);
    double replayed;
    simulate_pair(fast, slow, m0, m1, &out, &replayed);
    const cJSON *cal = cJSON_GetObjectItem(out, "calibration");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cal, "applied")));
    if (fabs(num(out, "iteration_ms") - STEP_FP32) > 1e-9 * STEP_FP32)
        fail_msg("calibrated %.9g ms, measured in place %.9g ms", num(out, "iteration_ms"), STEP_FP32);
    assert_true(num(cal, "replayed_ms") == replayed);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(cal, "assignments")), 1);
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(out, "workers")) /* each worker moved by the residual too */
        assert_true(num(w, "iteration_ms") >= num(w, "forward_ms") + num(w, "backward_ms"));
    cJSON_Delete(out);
    qs_model_free(m0);
    qs_model_free(m1);
    cJSON_Delete(fast);
    cJSON_Delete(slow);
}

/* Each type at one precision: the assignment's own measurement (uniform int8 from the runs,
 * mixed ones from "mixed_runs") with weight 1; the prediction is it plus what the plan's replay
 * has beyond the replay of those runs. */
static void test_each_assignment_from_its_measurement(void **state) {
    (void)state;
    cJSON *fast, *slow;
    pair_profiles(&fast, &slow);
    const qs_precision pf[3] = {QS_PREC_INT8, QS_PREC_FP32, QS_PREC_INT8}, ps[3] = {QS_PREC_INT8, QS_PREC_INT8, QS_PREC_FP32};
    const double want[3] = {STEP_INT8, STEP_F32_S8, STEP_S8_F32};
    for (int k = 0; k < 3; k++) {
        qs_model *m0 = cnn_at(pf[k], NULL), *m1 = cnn_at(ps[k], NULL);
        cJSON *out;
        double replayed;
        simulate_pair(fast, slow, m0, m1, &out, &replayed);
        const cJSON *cal = cJSON_GetObjectItem(out, "calibration");
        const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItem(cal, "assignments"), 0);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(cal, "assignments")), 1);
        assert_true(num(a, "weight") == 1 && num(a, "measured_ms") == want[k]);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "precisions"), "slow")->valuestring,
                            qs_precision_name(ps[k]));
        double expect = want[k] + replayed - num(a, "replayed_ms");
        if (fabs(num(out, "iteration_ms") - expect) > 1e-9 * expect)
            fail_msg("case %d: %.9g ms, want %.9g", k, num(out, "iteration_ms"), expect);
        cJSON_Delete(out);
        qs_model_free(m0);
        qs_model_free(m1);
    }
    cJSON_Delete(fast);
    cJSON_Delete(slow);
}

/* The slow type with conv2 and fc1 at int8: two assignments weighted by the share s of its
 * layers' replayed time at int8 (1 − s at fp32), computed here from the replay's own charges. */
static void test_partial_plan_interpolates(void **state) {
    (void)state;
    cJSON *fast, *slow, *out;
    pair_profiles(&fast, &slow);
    qs_model *m0 = cnn_at(QS_PREC_FP32, NULL), *m1 = cnn_at(QS_PREC_FP32, "conv2,fc1");
    double replayed;
    simulate_pair(fast, slow, m0, m1, &out, &replayed);
    qs_profile p1 = typed(slow, "slow");
    qs_sim_worker w1 = worker("slow", &p1, m1);
    qs_sim_charge *ch = calloc((size_t)m1->n_nodes, sizeof *ch);
    assert_int_equal(qs_sim_node_charges(&w1, ch), QS_OK);
    qs_profile_free(&p1);
    double at8 = 0, all = 0;
    for (int i = 1; i < m1->n_nodes; i++) {
        if (!qs_node_precision_selectable(m1->nodes[i].kind)) continue;
        all += ch[i].ms;
        if (m1->nodes[i].prec == QS_PREC_INT8) at8 += ch[i].ms;
    }
    free(ch);
    const double s = at8 / all;
    assert_true(s > 0 && s < 1);
    const cJSON *cal = cJSON_GetObjectItem(out, "calibration"), *as = cJSON_GetObjectItem(cal, "assignments");
    assert_int_equal(cJSON_GetArraySize(as), 2);
    double residual = 0;
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetArrayItem(as, k);
        const bool int8 = strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "precisions"), "slow")->valuestring, "int8") == 0;
        assert_true(fabs(num(a, "weight") - (int8 ? s : 1 - s)) < 1e-12);
        assert_true(num(a, "measured_ms") == (int8 ? STEP_F32_S8 : STEP_FP32));
        residual += num(a, "weight") * (num(a, "measured_ms") - num(a, "replayed_ms"));
    }
    assert_true(fabs(num(cal, "residual_ms") - residual) < 1e-9);
    assert_true(fabs(num(out, "iteration_ms") - (replayed + residual)) < 1e-9 * replayed);
    cJSON_Delete(out);
    qs_model_free(m0);
    qs_model_free(m1);
    cJSON_Delete(fast);
    cJSON_Delete(slow);
}

/* Where it cannot apply, the replay stands and the reason is given: an assignment not measured,
 * a worker replayed from another type's profile (the planner's cluster of fastest-type workers),
 * a CPU pair (serial communication). */
static void test_not_applied(void **state) {
    (void)state;
    cJSON *fast, *slow;
    pair_profiles(&fast, &slow);
    qs_model *m0 = cnn_at(QS_PREC_FP32, NULL), *m1 = cnn_at(QS_PREC_INT8, NULL);
    const char *reason[3] = {"no synchronized step measured in place", "another device type", "serially"};
    for (int k = 0; k < 3; k++) {
        cJSON *f = cJSON_Duplicate(fast, true), *s = cJSON_Duplicate(slow, true);
        if (k == 0) {
            cJSON_DeleteItemFromObject(f, "mixed_runs");
            cJSON_DeleteItemFromObject(s, "mixed_runs");
        }
        if (k == 1) cJSON_ReplaceItemInObject(cJSON_GetObjectItem(s, "device"), "type", cJSON_CreateString("fast"));
        if (k == 2) {
            cJSON_ReplaceItemInObject(cJSON_GetObjectItem(f, "device"), "backend", cJSON_CreateString("cpu"));
            cJSON_ReplaceItemInObject(cJSON_GetObjectItem(s, "device"), "backend", cJSON_CreateString("cpu"));
        }
        cJSON *out;
        double replayed;
        simulate_pair(f, s, m0, m1, &out, &replayed);
        const cJSON *cal = cJSON_GetObjectItem(out, "calibration");
        assert_true(cJSON_IsFalse(cJSON_GetObjectItem(cal, "applied")));
        if (!strstr(cJSON_GetObjectItem(cal, "reason")->valuestring, reason[k]))
            fail_msg("case %d: reason \"%s\"", k, cJSON_GetObjectItem(cal, "reason")->valuestring);
        assert_true(num(out, "iteration_ms") == replayed);
        cJSON_Delete(out);
        cJSON_Delete(f);
        cJSON_Delete(s);
    }
    qs_model_free(m0);
    qs_model_free(m1);
    cJSON_Delete(fast);
    cJSON_Delete(slow);
}

/* The mixed runs of a profile for rank 0 of a cluster of types a, a, b at fp32 and int8: the
 * two assignments that are not uniform, in index order, this rank at a's precision, each with
 * its run's step; nothing for one type. */
static void test_profile_mixed_runs(void **state) {
    (void)state;
    static const qs_precision precs[2] = {QS_PREC_FP32, QS_PREC_INT8};
    qs_profile_options o = cnn_options(precs);
    qs_cluster_worker ws[3];
    memset(ws, 0, sizeof ws);
    snprintf(ws[0].type, sizeof ws[0].type, "a");
    snprintf(ws[1].type, sizeof ws[1].type, "a");
    snprintf(ws[2].type, sizeof ws[2].type, "b");
    qs_cluster cl = {.workers = ws, .n_workers = 3};
    cJSON *doc = cJSON_CreateObject();
    assert_int_equal(qs_profile_mixed_runs(&o, &cl, 0, 3, doc), QS_OK);
    const cJSON *list = cJSON_GetObjectItem(doc, "mixed_runs");
    assert_int_equal(cJSON_GetArraySize(list), 2);
    const char *want_a[2] = {"fp32", "int8"}, *want_b[2] = {"int8", "fp32"};
    for (int k = 0; k < 2; k++) {
        const cJSON *e = cJSON_GetArrayItem(list, k), *as = cJSON_GetObjectItem(e, "precisions");
        assert_int_equal(cJSON_GetArraySize(as), 2);
        assert_string_equal(cJSON_GetObjectItem(as, "a")->valuestring, want_a[k]);
        assert_string_equal(cJSON_GetObjectItem(as, "b")->valuestring, want_b[k]);
        assert_string_equal(cJSON_GetObjectItem(e, "precision")->valuestring, want_a[k]);
        assert_true(num(e, "step_ms") > 0 && num(e, "optimizer_ms") > 0);
    }
    cJSON_Delete(doc);
    doc = cJSON_CreateObject();
    snprintf(ws[2].type, sizeof ws[2].type, "a");
    assert_int_equal(qs_profile_mixed_runs(&o, &cl, 0, 3, doc), QS_OK);
    assert_null(cJSON_GetObjectItem(doc, "mixed_runs"));
    assert_int_equal(qs_profile_mixed_runs(&o, &cl, 0, 4, doc), QS_ERR_INVALID_ARG);
    cJSON_Delete(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_base_is_the_measurement),
        cmocka_unit_test(test_each_assignment_from_its_measurement),
        cmocka_unit_test(test_partial_plan_interpolates),
        cmocka_unit_test(test_not_applied),
        cmocka_unit_test(test_profile_mixed_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
