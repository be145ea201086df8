/* tests/test_run.c — `qsync run`, the whole pipeline, through the binary: started without a
 * launcher it starts itself under mpirun; a tiny cnn on synthetic data is profiled, indicated,
 * planned and trained in every arm; the report, plan and plot are checked against each other.
 * With --base-precision bf16 (a GPU's base) the profiles, the plan and the base arm are bf16 and
 * the report compares against "bf16". And the refusals: a one-worker or homogeneous cluster, a
 * wrong rank count, a cluster that sets precisions, an unknown arm, a low precision not below
 * the base. Where the CPU only emulates int8 or bf16 (AVX2 without VNNI / AVX-512) the default
 * pipeline still runs (its int8 low arm measured as emulated), the runs that choose them pass
 * --allow-emulated, and the given plan is first refused without it. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "core/json_doc.h"
#include "run/run_report.h"
#include "run_cmd.h"

static cJSON *read_json(const char *path) {
    cJSON *d = NULL;
    return qs_json_read(path, (size_t)64 << 20, "test", &d) == QS_OK ? d : NULL;
}

static double num(const cJSON *o, const char *key) { return cJSON_GetNumberValue(cJSON_GetObjectItem(o, key)); }

/* A count under key, 0 when absent (reports list only the precisions in use). */
static int count(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(x) ? (int)x->valuedouble : 0;
}

#define TINY "--model cnn --width 4 --data synthetic --batch 32 --steps 30 --log-every 5 --eval-subset 64 " \
             "--profile-reps 3 --indicator-batches 2 --quiet"

/* " --allow-emulated" where this CPU only emulates int8 or bf16 (no VNNI / AVX-512, e.g. AVX2
 * alone: a given plan and a bf16 base need it there), else "". */
static const char *allow_emulated(void) {
    return qs_test_cpu_emulates(QS_PREC_INT8) || qs_test_cpu_emulates(QS_PREC_BF16) ? " --allow-emulated" : "";
}

/* A 2-worker cluster whose slow worker is 2x slower by a duty cycle (no cgroup needed). */
static void write_cluster(void) {
    qs_test_write_tmp("c.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                "{\"device\": \"cpu\", \"type\": \"fast\", \"threads\": 1},"
                                "{\"device\": \"cpu\", \"type\": \"slow\", \"threads\": 1,"
                                " \"emulation\": {\"slowdown\": 2, \"method\": \"duty-cycle\"}}]}");
}

/* How many layers the plan's section for `type` puts at precision `prec`. */
static int plan_count(const cJSON *plan, const char *type, const char *prec) {
    const cJSON *l;
    int n = 0;
    cJSON_ArrayForEach(l, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(plan, "device_types"), type),
                                              "precisions")) n += strcmp(l->valuestring, prec) == 0;
    return n;
}

static void test_run_pipeline(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096], p[512];
    qs_test_mpi_env();
    write_cluster();
    /* the defaults (fp32 base, int8 low arm) run whether the CPU runs int8 natively or emulates it */
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --out %s/out --plot %s/out/loss.png --json", t, t, t);
    char *out = NULL;
    int rc = qs_test_run_qsync(a, &out);
    if (rc != 0 || !strstr(out, "launching 2 ranks")) fail_msg("%s\n  exit %d, output:\n%s", a, rc, out);
    free(out);

    /* every stage left its file */
    const char *files[] = {"profile-fast.json", "profile-slow.json", "indicator.json", "plan.json", "report.json",
                           "loss.png", "qsync-seed1.jsonl", "fp32-seed1.jsonl", "int8-seed1.jsonl",
                           "dynamic-seed1.jsonl", "ideal-seed1.jsonl"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/out/%s", t, files[i]);
        if (access(p, R_OK) != 0) fail_msg("missing %s", p);
    }
    snprintf(p, sizeof p, "%s/out/loss.png", t);
    FILE *f = fopen(p, "rb");
    unsigned char magic[4] = {0};
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 4, f), 4);
    fclose(f);
    assert_memory_equal(magic, "\x89PNG", 4);

    snprintf(p, sizeof p, "%s/out/plan.json", t);
    cJSON *plan = read_json(p);
    snprintf(p, sizeof p, "%s/out/report.json", t);
    cJSON *rep = read_json(p);
    assert_non_null(plan);
    assert_non_null(rep);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "format")), "qsync-run-report");
    /* which type the measured times make the fastest is not asserted (a 2x duty cycle on a
     * tiny model on a busy machine may not tell); the other one is planned for */
    const cJSON *pred = cJSON_GetObjectItem(plan, "predictions");
    const char *fastest = cJSON_GetStringValue(cJSON_GetObjectItem(pred, "fastest_type"));
    assert_non_null(fastest);
    const int planned = strcmp(fastest, "fast") == 0 ? 1 : 0; /* worker index of the planned type */
    const char *ptype = planned == 1 ? "slow" : "fast";
    const char *precs[] = {"fp32", "bf16", "int8"};
    assert_int_equal(plan_count(plan, ptype, "fp32") + plan_count(plan, ptype, "bf16") +
                     plan_count(plan, ptype, "int8"), 4); /* cnn: conv1, conv2, fc1, fc2 */
    /* (which layers it quantizes depends on measured times: not asserted) */

    /* every arm ran once, the qsync arm with the plan's precisions on each worker */
    const cJSON *arms = cJSON_GetObjectItem(rep, "arms");
    const char *names[] = {"qsync", "fp32", "int8", "dynamic", "ideal"};
    for (int i = 0; i < 5; i++) {
        const cJSON *arm = cJSON_GetObjectItem(arms, names[i]);
        if (!arm) fail_msg("arm %s missing from the report", names[i]);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(arm, "runs")), 1);
        assert_true(num(arm, "synchronized_ms") > 0);
    }
    const cJSON *qrun = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(arms, "qsync"), "runs"), 0);
    const cJSON *wp = cJSON_GetArrayItem(cJSON_GetObjectItem(qrun, "workers"), planned);
    const cJSON *wf = cJSON_GetArrayItem(cJSON_GetObjectItem(qrun, "workers"), 1 - planned);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(wp, "type")), ptype);
    for (int k = 0; k < 3; k++) /* the planned worker trained the broadcast plan's section, the other fp32 */
        assert_int_equal(count(cJSON_GetObjectItem(wp, "precisions"), precs[k]), plan_count(plan, ptype, precs[k]));
    assert_int_equal(count(cJSON_GetObjectItem(wf, "precisions"), "fp32"), 4);
    /* the int8 arm: uniform int8 on the planned (slower) worker only */
    const cJSON *irun = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(arms, "int8"), "runs"), 0);
    const cJSON *iw = cJSON_GetObjectItem(irun, "workers");
    assert_int_equal(count(cJSON_GetObjectItem(cJSON_GetArrayItem(iw, planned), "precisions"), "int8"), 4);
    assert_int_equal(count(cJSON_GetObjectItem(cJSON_GetArrayItem(iw, 1 - planned), "precisions"), "fp32"), 4);
    /* the ideal arm ran without the emulation; the others with it */
    const cJSON *drun = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(arms, "ideal"), "runs"), 0);
    assert_true(num(cJSON_GetArrayItem(cJSON_GetObjectItem(drun, "workers"), 1), "emulated_slowdown") == 1);
    assert_true(num(cJSON_GetArrayItem(iw, 1), "emulated_slowdown") == 2);
    /* predictions sit beside measurements; the comparisons are computed */
    assert_true(num(cJSON_GetObjectItem(arms, "qsync"), "predicted_synchronized_ms") > 0);
    const cJSON *cmp = cJSON_GetObjectItem(rep, "comparison");
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(cmp, "gap_closure"), "qsync")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(cmp, "loss_curve_distance_to_fp32"), "int8")));
    /* the fp32 and ideal arms run the same arithmetic (the slowdown changes only time): same loss curve */
    assert_true(num(cJSON_GetObjectItem(cmp, "loss_curve_distance_to_fp32"), "ideal") == 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "qsync_workers")), 2);
    cJSON_Delete(plan);
    cJSON_Delete(rep);
}

/* A T no plan meets: the fastest plan of every slower type is taken and the report says so. */
static void test_run_best_effort(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096], p[512];
    qs_test_mpi_env();
    write_cluster();
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --arms qsync --target-ms 0.001 --out %s/out", t, t);
    char *out = NULL;
    int rc = qs_test_run_qsync(a, &out);
    if (rc != 0 || !strstr(out, "no plan meets T = 0.001 ms: each slower type takes its fastest plan"))
        fail_msg("%s\n  exit %d, output:\n%s", a, rc, out);
    free(out);
    snprintf(p, sizeof p, "%s/out/plan.json", t);
    cJSON *plan = read_json(p);
    assert_non_null(plan);
    const cJSON *pred = cJSON_GetObjectItem(plan, "predictions");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(pred, "target_met")));
    assert_true(num(pred, "target_asked_ms") == 0.001); /* below the fastest type's own time: raised to it */
    assert_true(num(pred, "target_ms") > 0.001);
    cJSON_Delete(plan);
}

/* A given plan: no indicator, no planning; it is broadcast and every worker trains its section. */
static void test_run_given_plan(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096], p[512];
    qs_test_mpi_env();
    write_cluster();
    qs_test_write_tmp("given.json", "{\"format\": \"qsync-plan\", \"version\": 2, \"model\": \"cnn\", "
                                    "\"device_types\": {\"fast\": {\"default\": \"fp32\"}, \"slow\": {\"precisions\": "
                                    "{\"conv1\": \"fp32\", \"conv2\": \"int8\", \"fc1\": \"bf16\", \"fc2\": \"fp32\"}}}}");
    const char *emu = allow_emulated();
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --arms qsync,int8 --plan %s/given.json --out %s/refused", t,
             t, t);
    if (emu[0]) /* int8 or bf16 only emulated here: refused without the flag, which the message names */
        qs_test_expect_qsync(1, "pass --allow-emulated", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --arms qsync,int8 --plan %s/given.json --out %s/out%s", t, t,
             t, emu);
    qs_test_expect_qsync(0, "plan: given", a);
    snprintf(p, sizeof p, "%s/out/indicator.json", t);
    assert_int_not_equal(access(p, F_OK), 0); /* not measured */
    snprintf(p, sizeof p, "%s/out/report.json", t);
    cJSON *rep = read_json(p);
    assert_non_null(rep);
    const cJSON *arms = cJSON_GetObjectItem(rep, "arms");
    const cJSON *w = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(arms, "qsync"), "runs"), 0),
                                         "workers");
    const cJSON *ws = cJSON_GetObjectItem(cJSON_GetArrayItem(w, 1), "precisions");
    assert_int_equal(count(ws, "fp32"), 2);
    assert_int_equal(count(ws, "int8"), 1);
    assert_int_equal(count(ws, "bf16"), 1);
    assert_int_equal(count(cJSON_GetObjectItem(cJSON_GetArrayItem(w, 0), "precisions"), "fp32"), 4);
    const cJSON *slow = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "plan"), "types"), "slow");
    assert_true(num(slow, "share_above_low_precision") == 0.75);
    cJSON_Delete(rep);
    /* a section for a type the cluster lacks */
    qs_test_write_tmp("bad.json", "{\"format\": \"qsync-plan\", \"version\": 2, \"model\": \"cnn\", "
                                  "\"device_types\": {\"fast\": {\"default\": \"fp32\"}, \"gpu\": {\"default\": \"int8\"}}}");
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --arms qsync --plan %s/bad.json --out %s/out2", t, t, t);
    qs_test_expect_qsync(1, "has a section for device type \"gpu\", which no worker of", a);
}

/* --base-precision bf16: profiles start at bf16, the plan's base is bf16, the base arm ("bf16")
 * trains every layer at bf16 and the report's comparisons are against it. */
static void test_run_bf16_base(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096], p[512];
    qs_test_mpi_env();
    write_cluster();
    snprintf(a, sizeof a,
             "run " TINY " --cluster %s/c.json --base-precision bf16 --precisions bf16,int8 --arms qsync,bf16 --ideal-ms 0.5 "
             "--seeds 2 --out %s/out%s", t, t, allow_emulated());
    char *out = NULL;
    int rc = qs_test_run_qsync(a, &out);
    if (rc != 0 || !strstr(out, "test accuracy minus bf16's, paired by seed:  qsync") ||
        !strstr(out, "bf16 against itself, consecutive seeds (the scale of the differences above): mean |loss difference|"))
        fail_msg("%s\n  exit %d, output:\n%s", a, rc, out);
    free(out);
    const char *files[] = {"qsync-seed1.jsonl", "bf16-seed1.jsonl", "qsync-seed2.jsonl", "bf16-seed2.jsonl"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/out/%s", t, files[i]);
        if (access(p, R_OK) != 0) fail_msg("missing %s", p);
    }
    snprintf(p, sizeof p, "%s/out/fp32-seed1.jsonl", t);
    assert_int_not_equal(access(p, F_OK), 0);
    /* the profiles start at the base, without fp32 */
    snprintf(p, sizeof p, "%s/out/profile-slow.json", t);
    cJSON *prof = read_json(p);
    assert_non_null(prof);
    const cJSON *runs = cJSON_GetObjectItem(prof, "runs");
    assert_string_equal(runs->child->string, "bf16");
    assert_null(cJSON_GetObjectItem(runs, "fp32"));
    assert_int_equal(cJSON_GetArraySize(runs), 2); /* --precisions bf16,int8 */
    cJSON_Delete(prof);
    snprintf(p, sizeof p, "%s/out/plan.json", t);
    cJSON *plan = read_json(p);
    assert_non_null(plan);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(plan, "default")), "bf16");
    const cJSON *pred = cJSON_GetObjectItem(plan, "predictions");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(pred, "base_precision")), "bf16");
    const char *fastest = cJSON_GetStringValue(cJSON_GetObjectItem(pred, "fastest_type"));
    assert_non_null(fastest);
    const int planned = strcmp(fastest, "fast") == 0 ? 1 : 0;
    const char *ptype = planned == 1 ? "slow" : "fast";
    assert_int_equal(plan_count(plan, ptype, "bf16") + plan_count(plan, ptype, "int8"), 4);
    snprintf(p, sizeof p, "%s/out/report.json", t);
    cJSON *rep = read_json(p);
    assert_non_null(rep);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(rep, "base_precision")), "bf16");
    const cJSON *arms = cJSON_GetObjectItem(rep, "arms");
    assert_null(cJSON_GetObjectItem(arms, "fp32"));
    const cJSON *brun = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(arms, "bf16"), "runs"), 0);
    const cJSON *qrun = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(arms, "qsync"), "runs"), 0);
    assert_non_null(brun);
    assert_non_null(qrun);
    for (int r = 0; r < 2; r++) /* the base arm: every layer of every worker at bf16 */
        assert_int_equal(count(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(brun, "workers"), r),
                                                   "precisions"), "bf16"), 4);
    /* the qsync arm: the fastest type at the base, the planned one its section */
    const cJSON *qw = cJSON_GetObjectItem(qrun, "workers");
    assert_int_equal(count(cJSON_GetObjectItem(cJSON_GetArrayItem(qw, 1 - planned), "precisions"), "bf16"), 4);
    assert_int_equal(count(cJSON_GetObjectItem(cJSON_GetArrayItem(qw, planned), "precisions"), "int8"),
                     plan_count(plan, ptype, "int8"));
    assert_true(num(cJSON_GetObjectItem(arms, "bf16"), "predicted_synchronized_ms") > 0); /* the all-bf16 replay */
    const cJSON *cmp = cJSON_GetObjectItem(rep, "comparison");
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(cmp, "test_accuracy_minus_bf16"), "qsync"));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(cmp, "loss_curve_distance_to_bf16"), "qsync")));
    assert_null(cJSON_GetObjectItem(cmp, "test_accuracy_minus_fp32"));
    /* --ideal-ms stands in for the ideal arm: (T_bf16 - T_qsync) / (T_bf16 - 0.5) */
    assert_true(num(rep, "ideal_ms_given") == 0.5);
    const double tb = num(cJSON_GetObjectItem(arms, "bf16"), "synchronized_ms"),
                 tq = num(cJSON_GetObjectItem(arms, "qsync"), "synchronized_ms");
    const double gap = num(cJSON_GetObjectItem(cmp, "gap_closure"), "qsync");
    assert_true(fabs(gap - (tb - tq) / (tb - 0.5)) <= 1e-9 * fabs(gap) + 1e-12);
    /* the base arm's seed-to-seed spread: seed 1 against seed 2, recomputed from their curves */
    const cJSON *spread = cJSON_GetObjectItem(cmp, "seed_spread_bf16");
    assert_non_null(spread);
    assert_true(num(spread, "seed_pairs") == 1);
    qs_run_curve c1, c2;
    snprintf(p, sizeof p, "%s/out/bf16-seed1.jsonl", t);
    assert_int_equal(qs_run_curve_read(p, &c1), QS_OK);
    snprintf(p, sizeof p, "%s/out/bf16-seed2.jsonl", t);
    assert_int_equal(qs_run_curve_read(p, &c2), QS_OK);
    assert_int_equal(c1.n, c2.n); /* same steps logged */
    double dist = 0;
    for (int i = 0; i < c1.n; i++) {
        assert_true(c1.step[i] == c2.step[i]);
        dist += fabs(c1.loss[i] - c2.loss[i]);
    }
    dist /= c1.n;
    qs_run_curve_free(&c1);
    qs_run_curve_free(&c2);
    assert_true(dist > 0); /* another seed: another initialisation and batch order */
    assert_true(fabs(num(spread, "loss_curve_distance") - dist) <= 1e-12 * dist);
    const cJSON *bruns = cJSON_GetObjectItem(cJSON_GetObjectItem(arms, "bf16"), "runs");
    assert_true(num(spread, "test_accuracy_abs_diff") ==
                fabs(num(cJSON_GetArrayItem(bruns, 0), "test_accuracy") - num(cJSON_GetArrayItem(bruns, 1), "test_accuracy")));
    assert_null(cJSON_GetObjectItem(cmp, "seed_spread_fp32"));
    cJSON_Delete(plan);
    cJSON_Delete(rep);
}

static void test_run_refusals(void **state) {
    (void)state;
    const char *t = qs_test_tmp;
    char a[4096];
    qs_test_mpi_env();
    qs_test_write_tmp("one.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                  "{\"device\": \"cpu\", \"type\": \"fast\"}]}");
    snprintf(a, sizeof a, "run " TINY " --cluster %s/one.json --out %s/o1", t, t);
    qs_test_expect_qsync(1, "describes 1 worker: qsync run needs a cluster of at least 2 workers", a);
    qs_test_write_tmp("same.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                   "{\"device\": \"cpu\", \"type\": \"a\"}, {\"device\": \"cpu\", \"type\": \"a\"}]}");
    snprintf(a, sizeof a, "run " TINY " --cluster %s/same.json --out %s/o2", t, t);
    qs_test_expect_qsync(1, "every worker of", a);
    qs_test_expect_qsync(1, "is of type \"a\": there is no slower device type", a);
    qs_test_write_tmp("set.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                  "{\"device\": \"cpu\", \"type\": \"a\"},"
                                  "{\"device\": \"cpu\", \"type\": \"b\", \"precision\": \"int8\"}]}");
    snprintf(a, sizeof a, "run " TINY " --cluster %s/set.json --out %s/o3", t, t);
    qs_test_expect_qsync(1, "sets the precisions of worker 1: qsync run chooses them", a);
    write_cluster();
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --arms qsync,fp64 --out %s/o4", t, t);
    qs_test_expect_qsync(2, "--arms: unknown arm 'fp64'", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --base-precision bf16 --arms qsync,fp32 --out %s/o4", t, t);
    qs_test_expect_qsync(2, "--arms: unknown arm 'fp32' (arms: qsync, bf16 or base, int8 or low, dynamic, ideal)", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --base-precision bf16 --low-precision bf16 --out %s/o4", t,
             t);
    qs_test_expect_qsync(2, "--low-precision must be a precision below the base precision bf16", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --precisions bf16,int8 --out %s/o4", t, t);
    qs_test_expect_qsync(1, "--precisions must start with the base precision fp32 (got bf16 first)", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --precisions fp32,bf16 --out %s/o4", t, t);
    qs_test_expect_qsync(1, "--precisions lacks the low arm's precision int8", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --base-precision bf16 --precisions bf16,fp32 --out %s/o4", t, t);
    qs_test_expect_qsync(1, "--precisions: fp32 is not below the base precision bf16", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --arms qsync,ideal --ideal-ms 5 --out %s/o4", t, t);
    qs_test_expect_qsync(1, "--ideal-ms gives the ideal iteration measured elsewhere: leave the ideal arm out", a);
    /* MPS shares stay with a process: the ideal arm cannot run (refused before any GPU is touched) */
    qs_test_write_tmp("mps.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                  "{\"device\": \"cuda:0\", \"type\": \"h200\"},"
                                  "{\"device\": \"cuda:0\", \"type\": \"h200-sm30\", \"emulation\": {\"sm_percent\": 30}}]}");
    snprintf(a, sizeof a, "run " TINY " --cluster %s/mps.json --out %s/o4", t, t);
    qs_test_expect_qsync(1, "limits worker 1 to 30% of the GPU's SMs through MPS, which a process keeps", a);
    snprintf(a, sizeof a, "run " TINY " --cluster %s/c.json --batch 33 --out %s/o5", t, t);
    qs_test_expect_qsync(1, "--batch 33 is not divisible by the 2 workers", a);
    /* three ranks for a cluster of two: refused by every rank alike, before any work */
    snprintf(a, sizeof a, "mpirun -np 3 --oversubscribe %s run " TINY " --cluster %s/c.json --out %s/o6",
             getenv("QS_BIN"), t, t);
    char *out = NULL;
    int rc = qs_test_run_shell(a, &out);
    if (rc == 0 || !strstr(out, "c.json describes 2 worker(s) but the job has 3 rank(s)"))
        fail_msg("%s\n  exit %d, output:\n%s", a, rc, out);
    free(out);
    char o6[512];
    snprintf(o6, sizeof o6, "%s/o6", t);
    assert_int_not_equal(access(o6, F_OK), 0); /* nothing written */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        QS_TMPDIR_TEST(test_run_pipeline),
        QS_TMPDIR_TEST(test_run_best_effort),
        QS_TMPDIR_TEST(test_run_given_plan),
        QS_TMPDIR_TEST(test_run_bf16_base),
        QS_TMPDIR_TEST(test_run_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
