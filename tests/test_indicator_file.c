/* tests/test_indicator_file.c — the indicator reader (src/io/indicator_file.h): the document
 * `qsync indicate` writes reads back with every layer, statistic and ω; a hand-written one with ω
 * alone reads; every field's refusals name the file, the JSON path and the value; and `qsync plan`
 * refuses a malformed indicator before planning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/indicator_file.h"
#include "plan/indicator.h"
#include "run_cmd.h"

/* A hand-written indicator: ω only (fp32 absent for conv2, null int8 for fc1). */
static const char *const HAND =
    "{\"format\": \"qsync-indicator\", \"version\": 1, \"model\": \"cnn\", \"config\": \"width=4\","
    " \"layers\": {\"conv1\": {\"omega\": {\"fp32\": 0, \"int8\": 4}},"
    "             \"conv2\": {\"omega\": {\"bf16\": 0.5}},"
    "             \"fc1\": {\"omega\": {\"fp32\": 0, \"int8\": null}}}}";

static char *replaced(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    assert_non_null(at);
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return out;
}

static qs_status parse(const char *text, qs_indicator_file *f) {
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    qs_status st = qs_indicator_file_from_json(doc, "i.json", f);
    cJSON_Delete(doc);
    return st;
}

static void test_hand_written(void **state) {
    (void)state;
    qs_indicator_file f;
    if (parse(HAND, &f) != QS_OK) fail_msg("%s", qs_last_error());
    assert_string_equal(f.model, "cnn");
    assert_int_equal(f.n_layers, 3);
    const qs_indicator_file_layer *l = qs_indicator_file_layer_of(&f, "conv2");
    assert_non_null(l);
    assert_false(l->has_omega[QS_PREC_FP32]);
    assert_true(l->has_omega[QS_PREC_BF16] && l->omega[QS_PREC_BF16] == 0.5);
    assert_true(l->depth == -1 && !l->has_stats && !l->has_vfwd);
    l = qs_indicator_file_layer_of(&f, "fc1");
    assert_false(l->has_omega[QS_PREC_INT8]); /* null: not a value */
    assert_null(qs_indicator_file_layer_of(&f, "fc2"));
    assert_true(isnan(f.gamma) && f.batch == 0 && f.checkpoint[0] == '\0');
    qs_indicator_file_free(&f);
}

/* The document the indicator writes, read back: every layer, its statistics and ω. */
static void test_written_reads_back(void **state) {
    (void)state;
    qs_layer_stats ls;
    memset(&ls, 0, sizeof ls);
    snprintf(ls.name, sizeof ls.name, "conv1");
    ls.kind = "Conv2d";
    ls.depth = 1;
    ls.bfs_depth = 1;
    ls.n_x = 100;
    ls.ex2 = 1;
    ls.ew2 = 0.5;
    ls.ey2 = 2;
    ls.edy2 = 0.1;
    ls.edw2 = 0.2;
    ls.var_x = -1e-20; /* a variance may round below 0 */
    ls.amax_x = 3;
    ls.espread_dy = NAN; /* written as null */
    ls.has_dx = false;
    for (int p = 0; p < QS_PREC_COUNT; p++) ls.qvar_x[p] = ls.qvar_w[p] = ls.qvar_dy[p] = 1e-6 * p;
    qs_indicator ind = {.layers = &ls, .n_layers = 1, .L = 2, .L_bfs = 1, .batches = 2, .batch = 8};
    qs_indicator_meta meta = {.model = "cnn", .config = "width=4", .data = "synthetic", .batch = 8, .batches = 2,
                              .method = QS_IND_GVAR, .gamma = 4, .seed = 1};
    cJSON *doc = qs_indicator_to_json(&ind, &meta);
    assert_non_null(doc);
    qs_indicator_file f;
    if (qs_indicator_file_from_json(doc, "w.json", &f) != QS_OK) fail_msg("%s", qs_last_error());
    assert_true(f.batch == 8 && f.batches == 2 && f.gamma == 4 && f.seed == 1 && f.L == 2);
    assert_string_equal(f.method, "gvar");
    const qs_indicator_file_layer *l = &f.layers[0];
    assert_string_equal(l->kind, "Conv2d");
    assert_true(l->has_stats && l->stats.n_x == 100 && l->stats.ms_w == 0.5 && isnan(l->stats.espread_dy));
    assert_true(l->has_vfwd && l->has_vbwd);
    const cJSON *om = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "layers"), "conv1"), "omega");
    for (int p = 0; p < QS_PREC_COUNT; p++) { /* as written; a non-finite ω (null in a file) reads as absent */
        double w = cJSON_GetNumberValue(cJSON_GetObjectItem(om, qs_precision_name((qs_precision)p)));
        assert_true(isfinite(w) ? l->has_omega[p] && l->omega[p] == w : !l->has_omega[p]);
    }
    assert_true(l->has_omega[QS_PREC_FP32] && l->omega[QS_PREC_FP32] == 0);
    assert_true(l->stats.qvar_dy[QS_PREC_INT8] == ls.qvar_dy[QS_PREC_INT8]);
    qs_indicator_file_free(&f);
    cJSON_Delete(doc);
}

typedef struct bad_case {
    const char *from, *to, *message;
} bad_case;

static const bad_case BAD[] = {
    {"\"qsync-indicator\"", "\"qsync-profile\"", "i.json: format must be \"qsync-indicator\""},
    {"\"version\": 1", "\"version\": 7", "version must be 1"},
    {"\"model\": \"cnn\",", "", "the document lacks \"model\""},
    {"\"config\": \"width=4\"", "\"config\": 4", "config must be a string (got 4)"},
    {"\"version\": 1,", "\"version\": 1, \"batch\": 0,", "batch must be a whole number in [1"},
    {"\"version\": 1,", "\"version\": 1, \"gamma\": -1,", "gamma must be a finite number >= 0 (got -1)"},
    {"\"version\": 1,", "\"version\": 1, \"checkpoint\": 3,", "checkpoint must be the checkpoint's path (a string) or null"},
    {"\"version\": 1,", "\"version\": 1, \"omega\": 3,", "unknown key \"omega\""},
    {"\"int8\": 4", "\"int8\": -4", "layers[\"conv1\"].omega.int8 must be a finite number >= 0, or null (got -4)"},
    {"\"int8\": 4", "\"int8\": \"high\"", "layers[\"conv1\"].omega.int8 must be a finite number >= 0, or null"},
    {"\"int8\": 4", "\"int4\": 4", "layers[\"conv1\"].omega: unknown key \"int4\""},
    {"{\"omega\": {\"bf16\": 0.5}}", "{\"omega\": {\"bf16\": 0.5}, \"depth\": 1.5}", "layers[\"conv2\"].depth must be a whole number"},
    {"{\"omega\": {\"bf16\": 0.5}}", "{\"depth\": 2}", "layers[\"conv2\"] lacks \"omega\""},
    {"{\"omega\": {\"bf16\": 0.5}}", "{\"omega\": {}, \"stats\": {\"n_x\": -1}}", "layers[\"conv2\"].stats.n_x must be a whole number"},
    {"{\"omega\": {\"bf16\": 0.5}}", "{\"omega\": {}, \"stats\": {\"qvar_x\": {\"fp32\": -1}}}", "layers[\"conv2\"].stats.qvar_x.fp32"},
    {"{\"omega\": {\"bf16\": 0.5}}", "{\"omega\": {}, \"stats\": {\"has_dx\": 1}}", "stats.has_dx must be true or false"},
    {"{\"omega\": {\"bf16\": 0.5}}", "{\"omega\": {}, \"vfwd\": []}", "layers[\"conv2\"].vfwd must be an object"},
    {"{\"omega\": {\"bf16\": 0.5}}", "7", "layers[\"conv2\"] must be an object (got 7)"},
    {"\"conv2\":", "\"\":", "must be a layer name of 1 to 95 characters"},
    {"\"fc1\":", "\"conv1\":", "layers[\"conv1\"] appears twice"},
};

static void test_bad_indicators(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char *t = replaced(HAND, BAD[i].from, BAD[i].to);
        qs_indicator_file f;
        qs_status st = parse(t, &f);
        if (st != QS_ERR_FORMAT || !strstr(qs_last_error(), BAD[i].message) || !strstr(qs_last_error(), "indicator i.json"))
            fail_msg("case %zu (%s): status %d, message \"%s\"; want \"%s\"", i, BAD[i].to, (int)st, qs_last_error(),
                     BAD[i].message);
        assert_int_equal(f.n_layers, 0);
        assert_null(f.layers);
        qs_indicator_file_free(&f);
        free(t);
    }
}

/* `qsync plan` reads the indicator before it plans: a malformed one is refused by name. */
static void test_plan_refuses(void **state) {
    (void)state;
    char a[2048];
    char *t = replaced(HAND, "\"int8\": 4", "\"int8\": -4");
    qs_test_write_tmp("ind.json", t);
    free(t);
    qs_test_write_tmp("c.json", "{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": ["
                                "{\"device\": \"cpu\", \"type\": \"a\"}, {\"device\": \"cpu\", \"type\": \"b\"}]}");
    snprintf(a, sizeof a, "profile --model cnn --width 4 --batch 8 --data synthetic --precisions fp32 --reps 3 "
             "--warmup 1 --threads 1 --quiet --out %s/p.json", qs_test_tmp);
    qs_test_expect_qsync(0, NULL, a);
    snprintf(a, sizeof a, "plan --cluster %s/c.json --model cnn --batch 8 --profile %s/p.json --indicator %s/ind.json "
             "--out %s/plan.json", qs_test_tmp, qs_test_tmp, qs_test_tmp, qs_test_tmp);
    qs_test_expect_qsync(1, "ind.json: layers[\"conv1\"].omega.int8 must be a finite number >= 0, or null (got -4)", a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_written),
        cmocka_unit_test(test_written_reads_back),
        cmocka_unit_test(test_bad_indicators),
        QS_TMPDIR_TEST(test_plan_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
