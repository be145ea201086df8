/* tests/test_plan_cmd.c — `qsync plan` (src/plan/plan_build.h): a 2-type cluster whose slow
 * type is a profile with slow fp32 and fast int8 GEMMs (made-up, fixed times: see make_profile) gets a plan that
 * quantizes on the slow type only and replays within T; a generous T quantizes nothing; an
 * impossible T, one device type, a mismatched indicator or batch, and a memory cap no plan fits
 * are refused with precise messages and no file; the written plan loads and trains 2 steps
 * under mpirun -np 2. Profiles taken with --precisions bf16,int8 plan with bf16 as the base
 * (the plan's default, the fastest type's precision); profiles starting at different precisions
 * are refused (QS_ERR_MISMATCH). The profiles and the training pass --allow-emulated: bf16 and
 * int8 are only emulated on a CPU without AVX-512 / VNNI, and the profiles' times are replaced by
 * made-up ones anyway. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "plan/plan_build.h"
#include "io/plan_file.h"
#include "run_cmd.h"

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *text = calloc(8 << 20, 1);
    size_t n = text ? fread(text, 1, (8 << 20) - 1, f) : 0;
    fclose(f);
    cJSON *doc = n > 0 ? cJSON_Parse(text) : NULL;
    free(text);
    return doc;
}

static void write_json(const char *path, const cJSON *doc) {
    char *text = cJSON_Print(doc);
    FILE *f = fopen(path, "w");
    assert_non_null(text);
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    fclose(f);
    free(text);
}


static double num(const cJSON *o, const char *key) { return cJSON_GetNumberValue(cJSON_GetObjectItem(o, key)); }

/* Make a measured profile deterministic (the plan must not depend on this machine's timings or
 * load): every Conv2d/Linear direction costs `gemm_ms` times its run's factor (fp32, bf16, int8),
 * every other op 0.05 ms a direction, casts 0.02 ms, the optimizer 0.1 ms; the step is their sum
 * (no time outside the ops, no jitter); casts, the all-reduce and the in-place gradient sync get
 * fixed costs. Written to `to`. */
static void make_profile(const char *from, const char *to, double gemm_ms, const double factor[3]) {
    cJSON *p = read_json(from), *run, *op;
    assert_non_null(p);
    const char *keys[4] = {"forward_ms", "backward_data_ms", "backward_weights_ms", "cast_ms"};
    cJSON_ArrayForEach(run, cJSON_GetObjectItem(p, "runs")) {
        double f = strcmp(run->string, "int8") == 0 ? factor[2] : strcmp(run->string, "bf16") == 0 ? factor[1] : factor[0];
        double step = 0.1;
        cJSON_ArrayForEach(op, cJSON_GetObjectItem(run, "ops")) {
            const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(op, "kind"));
            bool gemm = kind && (strcmp(kind, "Conv2d") == 0 || strcmp(kind, "Linear") == 0);
            for (int k = 0; k < 4; k++) {
                cJSON *v = cJSON_GetObjectItem(op, keys[k]);
                if (!v) continue;
                double ms = v->valuedouble == 0 ? 0 : k == 3 ? 0.02 : gemm ? gemm_ms * f : 0.05;
                cJSON_SetNumberValue(v, ms);
                step += ms;
            }
        }
        cJSON_SetNumberValue(cJSON_GetObjectItem(run, "optimizer_ms"), 0.1);
        cJSON_SetNumberValue(cJSON_GetObjectItem(run, "step_ms"), step);
        cJSON_ReplaceItemInObject(run, "step_samples_ms", cJSON_CreateDoubleArray((double[]){step, step, step}, 3));
        cJSON *gs = cJSON_GetObjectItem(run, "grad_sync");
        if (gs) {
            cJSON_SetNumberValue(cJSON_GetObjectItem(gs, "overlap_ms"), 0.5);
            cJSON_SetNumberValue(cJSON_GetObjectItem(gs, "no_overlap_ms"), 0.5);
        }
    }
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(p, "casts")) {
        cJSON_SetNumberValue(cJSON_GetObjectItem(c, "alpha_ms"), 0.02);
        cJSON_SetNumberValue(cJSON_GetObjectItem(c, "beta_ms_per_element"), 0);
        cJSON *pt;
        cJSON_ArrayForEach(pt, cJSON_GetObjectItem(c, "points")) cJSON_SetNumberValue(cJSON_GetArrayItem(pt, 1), 0.02);
    }
    cJSON *ar = cJSON_GetObjectItem(p, "allreduce"), *pt;
    cJSON_SetNumberValue(cJSON_GetObjectItem(ar, "alpha_ms"), 0.5);
    cJSON_SetNumberValue(cJSON_GetObjectItem(ar, "beta_ms_per_byte"), 0);
    cJSON_ArrayForEach(pt, cJSON_GetObjectItem(ar, "points")) cJSON_SetNumberValue(cJSON_GetArrayItem(pt, 1), 0.5);
    cJSON_SetNumberValue(cJSON_GetObjectItem(p, "data_ms"), 0.01);
    write_json(to, p);
    cJSON_Delete(p);
}

/* A hand-written indicator for cnn with the profile's config (or `config`). */
static void make_indicator(const char *path, const char *config) {
    cJSON *d = cJSON_CreateObject(), *layers;
    cJSON_AddStringToObject(d, "format", "qsync-indicator");
    cJSON_AddNumberToObject(d, "version", 1);
    cJSON_AddStringToObject(d, "model", "cnn");
    cJSON_AddStringToObject(d, "config", config);
    layers = cJSON_AddObjectToObject(d, "layers");
    const char *names[4] = {"conv1", "conv2", "fc1", "fc2"};
    const double bf16[4] = {0.5, 0.2, 0.1, 1}, int8[4] = {4, 1, 0.6, 8};
    for (int i = 0; i < 4; i++) {
        cJSON *o = cJSON_AddObjectToObject(cJSON_AddObjectToObject(layers, names[i]), "omega");
        cJSON_AddNumberToObject(o, "fp32", 0);
        cJSON_AddNumberToObject(o, "bf16", bf16[i]);
        cJSON_AddNumberToObject(o, "int8", int8[i]);
    }
    write_json(path, d);
    cJSON_Delete(d);
}

static void test_plan_cli(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096], base[2048];
    qs_test_mpi_env();
    /* one profile with an all-reduce between 2 ranks */
    snprintf(a, sizeof a, "mpirun -np 2 --oversubscribe %s profile --model cnn --width 4 --batch 8 --data synthetic "
             "--precisions fp32,bf16,int8 --allow-emulated --reps 3 --warmup 1 --threads 1 --quiet --out %s/fast.json",
             getenv("QS_BIN"), t);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "%s/fast.json", t);
    char slow[300];
    snprintf(slow, sizeof slow, "%s/slow.json", t);
    /* a CPU-like fast type (bf16 slower than fp32, int8 faster) and a slow type whose fp32
     * GEMMs are 3x slower and whose int8 ones are the fastest */
    make_profile(a, slow, 1.0, (const double[3]){3, 2, 0.3});
    make_profile(a, a, 1.0, (const double[3]){1, 1.2, 0.5});
    cJSON *prof = read_json(a);
    assert_non_null(prof);
    char config[256];
    snprintf(config, sizeof config, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(prof, "config")));
    cJSON_Delete(prof);
    snprintf(a, sizeof a, "%s/ind.json", t);
    make_indicator(a, config);
    qs_test_write_tmp("c.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                "{\"device\": \"cpu\", \"type\": \"fast\", \"threads\": 1},"
                                "{\"device\": \"cpu\", \"type\": \"slow\", \"threads\": 1}]}");
    snprintf(base, sizeof base, "plan --cluster %s/c.json --model cnn --width 4 --batch 8 --profile fast=%s/fast.json,"
             "slow=%s --indicator %s/ind.json", t, t, slow, t);

    /* the default T: some layers quantized on the slow type only, replayed within T */
    snprintf(a, sizeof a, "%s --out %s/plan.json", base, t);
    qs_test_expect_qsync(0, "plan written to", a);
    snprintf(a, sizeof a, "%s/plan.json", t);
    cJSON *doc = read_json(a);
    assert_non_null(doc);
    const cJSON *pred = cJSON_GetObjectItem(doc, "predictions");
    double T = num(pred, "target_ms"), sync = num(pred, "synchronized_ms");
    assert_true(T > 0 && sync <= T * 1.005);
    const cJSON *ps = cJSON_GetObjectItem(cJSON_GetObjectItem(pred, "types"), "slow");
    assert_true(num(ps, "quantized_layers") >= 1);
    assert_true(num(cJSON_GetObjectItem(cJSON_GetObjectItem(pred, "types"), "fast"), "quantized_layers") == 0);
    assert_non_null(cJSON_GetObjectItem(ps, "greedy_gap"));
    assert_true(num(ps, "greedy_gap") >= 0);
    assert_true(num(ps, "base_synchronized_ms") > T); /* the slow type at fp32 would not keep pace */
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(pred, "base_precision")), "fp32");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "default")), "fp32");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(pred, "workers")), 2);
    cJSON_Delete(doc);
    /* the plan reader takes it: the slow section quantizes, the fast one does not */
    qs_plan plan;
    assert_int_equal(qs_plan_read(a, &plan), QS_OK);
    assert_true(qs_plan_has_device_types(&plan));
    assert_int_equal(qs_plan_device_type_count(&plan), 2);
    assert_int_equal(qs_plan_select_device_type(&plan, "slow"), QS_OK);
    int low = 0;
    for (int i = 0; i < plan.n_layers; i++) low += plan.layers[i].prec != QS_PREC_FP32;
    assert_true(low >= 1);
    qs_plan_free(&plan);
    assert_int_equal(qs_plan_read(a, &plan), QS_OK);
    assert_int_equal(qs_plan_select_device_type(&plan, "fast"), QS_OK);
    for (int i = 0; i < plan.n_layers; i++) assert_int_equal(plan.layers[i].prec, QS_PREC_FP32);
    assert_int_equal(plan.default_prec, QS_PREC_FP32);
    qs_plan_free(&plan);
    /* it trains 2 steps under mpirun (global batch 16: a local batch of 8 per rank) */
    snprintf(a, sizeof a, "mpirun -np 2 --oversubscribe %s train --cluster %s/c.json --plan %s/plan.json --model cnn "
             "--width 4 --data synthetic --batch 16 --steps 2 --threads 1 --allow-emulated", getenv("QS_BIN"), t, t);
    char *out = NULL;
    int rc = qs_test_run_shell(a, &out);
    if (rc != 0 || !strstr(out, "int8")) fail_msg("%s\n  exit %d, output:\n%s", a, rc, out);
    free(out);

    /* greedy only: the same kind of document, without a gap */
    snprintf(a, sizeof a, "%s --greedy-only --out %s/greedy.json --json", base, t);
    qs_test_expect_qsync(0, "\"solver\":\t\"greedy\"", a);

    /* a generous T: nothing quantized */
    snprintf(a, sizeof a, "%s --target-ms 1000 --out %s/loose.json", base, t);
    qs_test_expect_qsync(0, "slow: 0 layer(s) below fp32", a);

    /* an impossible T: the best achievable time, no file */
    snprintf(a, sizeof a, "%s --target-ms 0.01 --out %s/none.json", base, t);
    qs_test_expect_qsync(1, "no plan meets T = 0.010 ms: the fastest device type (\"fast\"), which stays fp32", a);
    qs_test_expect_qsync(1, "the best achievable time is about", a);
    snprintf(a, sizeof a, "%s/none.json", t);
    assert_int_not_equal(access(a, F_OK), 0);

    /* bad input */
    qs_test_write_tmp("one.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                  "{\"device\": \"cpu\", \"type\": \"slow\"}, {\"device\": \"cpu\", \"type\": \"slow\"}]}");
    snprintf(a, sizeof a, "plan --cluster %s/one.json --model cnn --batch 8 --profile %s --indicator %s/ind.json "
             "--out %s/x.json", t, slow, t, t);
    qs_test_expect_qsync(1, "every worker of the cluster is of device type \"slow\": there is nothing to plan", a);
    qs_test_write_tmp("single.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                     "{\"device\": \"cpu\", \"type\": \"slow\"}]}");
    snprintf(a, sizeof a, "plan --cluster %s/single.json --model cnn --batch 8 --profile %s --indicator %s/ind.json "
             "--out %s/x.json", t, slow, t, t);
    qs_test_expect_qsync(1, "the cluster has 1 worker: there is nothing to plan", a);
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model cnn --batch 16 --profile fast=%s/fast.json,slow=%s "
             "--indicator %s/ind.json --out %s/x.json", t, t, slow, t, t);
    qs_test_expect_qsync(1, "was taken at batch 8, but the plan is for a local batch of 16", a);
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model cnn --width 8 --batch 8 --profile fast=%s/fast.json,slow=%s "
             "--indicator %s/ind.json --out %s/x.json", t, t, slow, t, t);
    qs_test_expect_qsync(1, "not --width 8", a);
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model mlp --batch 8 --profile fast=%s/fast.json,slow=%s "
             "--indicator %s/ind.json --out %s/x.json", t, t, slow, t, t);
    qs_test_expect_qsync(1, "is of model cnn, not --model mlp", a);
    snprintf(a, sizeof a, "%s/ind8.json", t);
    make_indicator(a, "in_h=28 in_w=28 in_c=1 classes=10 width=8 dropout=0");
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model cnn --batch 8 --profile fast=%s/fast.json,slow=%s "
             "--indicator %s/ind8.json --out %s/x.json", t, t, slow, t, t);
    qs_test_expect_qsync(1, "indicator", a);
    qs_test_expect_qsync(1, "width=8", a);
    qs_test_write_tmp("cap.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                  "{\"device\": \"cpu\", \"type\": \"fast\"},"
                                  "{\"device\": \"cpu\", \"type\": \"slow\", \"memory_mb\": 1}]}");
    snprintf(a, sizeof a, "plan --cluster %s/cap.json --model cnn --batch 8 --profile fast=%s/fast.json,slow=%s "
             "--indicator %s/ind.json --out %s/x.json", t, t, slow, t, t);
    qs_test_expect_qsync(1, "no plan fits device type \"slow\" in its memory cap of 1.0 MiB", a);
    snprintf(a, sizeof a, "%s/x.json", t);
    assert_int_not_equal(access(a, F_OK), 0);
    qs_test_expect_qsync(2, "are required", "plan --model cnn");
    snprintf(a, sizeof a, "%s --exact --greedy-only --out %s/x.json", base, t);
    qs_test_expect_qsync(2, "exclude each other", a);
}

/* The profile path and its config string of a made-up copy of `from` (make_profile) at `to`. */
static void make_profile_config(const char *from, const char *to, const double factor[3], char *config, size_t cap) {
    make_profile(from, to, 1.0, factor);
    cJSON *prof = read_json(to);
    assert_non_null(prof);
    snprintf(config, cap, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(prof, "config")));
    cJSON_Delete(prof);
}

/* Profiles whose highest precision is bf16 (as a GPU's: base bf16, low fp8): the plan's default,
 * the fastest type's section and the prediction's base are bf16, the slow type's layers are at
 * bf16 or int8 only. A pair of profiles starting at fp32 and at bf16 is refused. */
static void test_plan_bf16_base(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096], config[256], slow[300], fp32[300];
    qs_test_mpi_env();
    snprintf(a, sizeof a, "mpirun -np 2 --oversubscribe %s profile --model cnn --width 4 --batch 8 --data synthetic "
             "--precisions bf16,int8 --allow-emulated --reps 3 --warmup 1 --threads 1 --quiet --out %s/fast.json",
             getenv("QS_BIN"), t);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "%s profile --model cnn --width 4 --batch 8 --data synthetic --precisions fp32,int8 "
             "--allow-emulated --reps 3 --warmup 1 --threads 1 --quiet --out %s/fp32.json", getenv("QS_BIN"), t);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "%s/fast.json", t);
    snprintf(slow, sizeof slow, "%s/slow.json", t);
    snprintf(fp32, sizeof fp32, "%s/fp32.json", t);
    /* the slow type's bf16 GEMMs 2x slower than the fast type's, its int8 ones the fastest */
    make_profile_config(a, slow, (const double[3]){0, 2.4, 0.3}, config, sizeof config);
    make_profile_config(a, a, (const double[3]){0, 1.2, 0.5}, config, sizeof config);
    make_profile_config(fp32, fp32, (const double[3]){1, 0, 0.5}, config, sizeof config);
    snprintf(a, sizeof a, "%s/ind.json", t);
    make_indicator(a, config);
    qs_test_write_tmp("c.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                "{\"device\": \"cpu\", \"type\": \"fast\", \"threads\": 1},"
                                "{\"device\": \"cpu\", \"type\": \"slow\", \"threads\": 1}]}");
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model cnn --width 4 --batch 8 --profile fast=%s/fast.json,"
             "slow=%s --indicator %s/ind.json --out %s/plan.json", t, t, slow, t, t);
    qs_test_expect_qsync(0, "layer(s) below bf16", a);
    snprintf(a, sizeof a, "%s/plan.json", t);
    cJSON *doc = read_json(a);
    assert_non_null(doc);
    const cJSON *pred = cJSON_GetObjectItem(doc, "predictions"), *l;
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "default")), "bf16");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(pred, "base_precision")), "bf16");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(pred, "target_source")),
                        "fastest device type, all bf16");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(pred, "fastest_type")), "fast");
    const cJSON *sections = cJSON_GetObjectItem(doc, "device_types");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(sections, "fast"), "default")),
                        "bf16");
    int n = 0, low = 0;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(cJSON_GetObjectItem(sections, "slow"), "precisions")) {
        if (strcmp(l->valuestring, "bf16") != 0 && strcmp(l->valuestring, "int8") != 0)
            fail_msg("layer %s at %s: the slow type's options are bf16 and int8", l->string, l->valuestring);
        low += strcmp(l->valuestring, "int8") == 0;
        n++;
    }
    assert_int_equal(n, 4);
    const cJSON *ps = cJSON_GetObjectItem(cJSON_GetObjectItem(pred, "types"), "slow");
    assert_true(low >= 1 && num(ps, "quantized_layers") == low);
    assert_true(num(ps, "base_synchronized_ms") > num(pred, "target_ms")); /* all bf16 would not keep pace */
    cJSON_Delete(doc);
    /* the plan reader takes a bf16 default: the fast type trains every layer at bf16 */
    qs_plan plan;
    assert_int_equal(qs_plan_read(a, &plan), QS_OK);
    assert_int_equal(qs_plan_select_device_type(&plan, "fast"), QS_OK);
    assert_int_equal(plan.default_prec, QS_PREC_BF16);
    for (int i = 0; i < plan.n_layers; i++) assert_int_equal(plan.layers[i].prec, QS_PREC_BF16);
    qs_plan_free(&plan);

    /* profiles starting at fp32 and at bf16: refused, naming both */
    qs_profile pf, pb;
    qs_indicator_file ind;
    snprintf(a, sizeof a, "%s/ind.json", t);
    assert_int_equal(qs_profile_read(fp32, &pf), QS_OK);
    assert_int_equal(qs_profile_read(slow, &pb), QS_OK);
    assert_int_equal(qs_indicator_file_read(a, &ind), QS_OK);
    const qs_planb_worker w[2] = {{.type = "fast", .profile = &pf, .slowdown = 1},
                                  {.type = "slow", .profile = &pb, .slowdown = 1}};
    qs_planb_request rq = {.workers = w, .n_workers = 2, .arch = "cnn", .config = config, .batch = 8, .indicator = &ind,
                           .tolerance = 0.005, .max_rounds = 4, .bucket_bytes = (size_t)25 << 20, .overlap = true};
    cJSON *out = NULL;
    assert_int_equal(qs_plan_build(&rq, &out), QS_ERR_MISMATCH);
    assert_null(out);
    if (!strstr(qs_last_error(), "(device type \"slow\") starts at bf16, but profile") ||
        !strstr(qs_last_error(), "(device type \"fast\") starts at fp32"))
        fail_msg("unexpected message: %s", qs_last_error());
    qs_profile_free(&pf);
    qs_profile_free(&pb);
    qs_indicator_file_free(&ind);
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model cnn --width 4 --batch 8 --profile fast=%s,slow=%s "
             "--indicator %s/ind.json --out %s/mixed.json", t, fp32, slow, t, t);
    qs_test_expect_qsync(1, "the profiles of one plan must share their highest precision", a);
    snprintf(a, sizeof a, "%s/mixed.json", t);
    assert_int_not_equal(access(a, F_OK), 0);
}

/* An indicator for every Linear/MatMul op of a profile's base run: ω 0 at bf16, 1 at int8. */
static void make_indicator_for(const char *path, const cJSON *prof) {
    cJSON *d = cJSON_CreateObject(), *op;
    cJSON_AddStringToObject(d, "format", "qsync-indicator");
    cJSON_AddNumberToObject(d, "version", 1);
    cJSON_AddStringToObject(d, "model", cJSON_GetStringValue(cJSON_GetObjectItem(prof, "model")));
    cJSON_AddStringToObject(d, "config", cJSON_GetStringValue(cJSON_GetObjectItem(prof, "config")));
    cJSON *layers = cJSON_AddObjectToObject(d, "layers");
    cJSON_ArrayForEach(op, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(prof, "runs"), "bf16"), "ops")) {
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(op, "kind"));
        if (strcmp(kind, "Linear") != 0 && strcmp(kind, "MatMul") != 0) continue;
        cJSON *o = cJSON_AddObjectToObject(cJSON_AddObjectToObject(layers, cJSON_GetStringValue(cJSON_GetObjectItem(op, "name"))), "omega");
        cJSON_AddNumberToObject(o, "bf16", 0);
        cJSON_AddNumberToObject(o, "int8", 1);
    }
    write_json(path, d);
    cJSON_Delete(d);
}

/* Plan gpt-mini from profiles that saw a slow type; count the slow section's MatMul layers. */
static int planned_matmuls(const char *t, const char *slow, const char *config) {
    char a[2048];
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model gpt-mini --batch 2 --profile fast=%s/fast.json,slow=%s "
             "--indicator %s/ind.json --out %s/plan.json", t, t, slow, t, t);
    qs_test_expect_qsync(0, "plan written to", a);
    snprintf(a, sizeof a, "%s/plan.json", t);
    cJSON *doc = read_json(a), *l;
    assert_non_null(doc);
    int matmuls = 0, layers = 0;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "device_types"), "slow"),
                                              "precisions")) {
        matmuls += strstr(l->string, ".scores") || strstr(l->string, ".context");
        layers++;
    }
    assert_int_equal(layers - matmuls, 4 * 4 + 1); /* the Linear layers are always planned */
    (void)config;
    cJSON_Delete(doc);
    return matmuls;
}

/* A profile whose base run fused the attentions (as a GPU profile at bf16 records: the MatMuls'
 * entries carry "fused_into") keeps those MatMuls out of the plan: they stay at the base. The
 * same profile without the marks plans them like every other layer. */
static void test_plan_fused_attention(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096], slow[300], fused[300];
    qs_test_mpi_env();
    snprintf(a, sizeof a, "mpirun -np 2 --oversubscribe %s profile --model gpt-mini --batch 2 "
             "--data synthetic-text:256:16 --precisions bf16,int8 --allow-emulated --reps 3 --warmup 1 --threads 1 --quiet "
             "--out %s/fast.json", getenv("QS_BIN"), t);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "%s/fast.json", t);
    snprintf(slow, sizeof slow, "%s/slow.json", t);
    snprintf(fused, sizeof fused, "%s/slow-fused.json", t);
    make_profile(a, slow, 1.0, (const double[3]){0, 3, 0.3});
    make_profile(a, a, 1.0, (const double[3]){0, 1, 0.5});
    cJSON *prof = read_json(slow), *op;
    assert_non_null(prof);
    char config[256];
    snprintf(config, sizeof config, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(prof, "config")));
    snprintf(a, sizeof a, "%s/ind.json", t);
    make_indicator_for(a, prof);
    int marked = 0;
    cJSON_ArrayForEach(op, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(prof, "runs"), "bf16"), "ops")) {
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(op, "kind")), "MatMul") != 0) continue;
        cJSON_AddStringToObject(op, "fused_into", "merge"); /* the key is what counts */
        marked++;
    }
    assert_int_equal(marked, 8);
    write_json(fused, prof);
    cJSON_Delete(prof);
    qs_test_write_tmp("c.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                "{\"device\": \"cpu\", \"type\": \"fast\", \"threads\": 1},"
                                "{\"device\": \"cpu\", \"type\": \"slow\", \"threads\": 1}]}");
    assert_int_equal(planned_matmuls(t, slow, config), 8);
    assert_int_equal(planned_matmuls(t, fused, config), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        QS_TMPDIR_TEST(test_plan_cli),
        QS_TMPDIR_TEST(test_plan_bf16_base),
        QS_TMPDIR_TEST(test_plan_fused_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
