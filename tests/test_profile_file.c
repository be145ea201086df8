/* tests/test_profile_file.c — the profile reader (src/io/profile_file.h): a valid profile reads
 * into its struct field by field; every field's refusals name the file, the JSON path and the
 * value, and leave nothing behind; the documents that crashed or misbehaved before the reader
 * existed (allreduce points [0, 0] and [[], []], which dereferenced NULL in the replay; `{}`,
 * whose batch reached an undefined float-to-int cast) are refused by `qsync simulate` with a
 * message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/profile_file.h"
#include "run_cmd.h"

/* A small valid profile: two runs (fp32 with a measured sync, int8 with a cast), a cast fit, an
 * all-reduce curve, emulation and a mixed run. */
static const char *const VALID =
    "{\"format\": \"qsync-profile\", \"version\": 1, \"model\": \"cnn\", \"data\": \"synthetic\", \"batch\": 8,"
    " \"optimizer\": \"sgd\", \"fp8_amax_history\": 0, \"warmup\": 1, \"reps\": 3, \"data_ms\": 0.5,"
    " \"device\": {\"backend\": \"cpu\", \"cores\": 4, \"threads\": 1, \"memory_bytes\": 1024, \"cpu\": \"x\", \"type\": \"fast\"},"
    " \"emulation\": {\"slowdown\": 1.5, \"method\": \"duty-cycle\"},"
    " \"runs\": {\"fp32\": {\"precision\": \"fp32\", \"support\": \"native\", \"step_samples_ms\": [1, 2, 3],"
    "   \"step_ms\": 2, \"optimizer_ms\": 0.1, \"grad_average_ms\": 0.01,"
    "   \"grad_sync\": {\"ranks\": 2, \"bucket_bytes\": 1024, \"buckets\": 3, \"overlap_ms\": 0.5, \"no_overlap_ms\": 0.6,"
    "     \"overlap_step_ms\": 3, \"no_overlap_step_ms\": 4},"
    "   \"memory_bytes\": {\"params\": 1, \"grads\": 2, \"optimizer\": 3, \"buffers\": 4, \"activations\": 5,"
    "     \"activation_grads\": 6, \"saved\": 7, \"workspace\": 8, \"labels\": 9, \"backend_in_use\": 45, \"backend_peak\": 50},"
    "   \"memory_facts\": {\"fp8_wants_transposed\": true, \"pointwise_conv_as_linear\": false, \"fused_attention\": true},"
    "   \"ops\": [{\"name\": \"conv1\", \"kind\": \"Conv2d\", \"inputs\": [\"input\"], \"precision\": \"fp32\","
    "     \"out_dtype\": \"f32\", \"out_elements\": 100, \"out_bytes\": 400, \"grad_bytes\": 400, \"saved_bytes\": 0,"
    "     \"workspace_bytes\": 16, \"param_count\": 10, \"forward_ms\": 0.1, \"backward_data_ms\": 0,"
    "     \"backward_weights_ms\": 0.2, \"cast_ms\": 0},"
    "    {\"name\": \"relu1\", \"kind\": \"ReLU\", \"inputs\": [\"conv1\"], \"fused_into\": \"conv1\", \"precision\": \"fp32\","
    "     \"out_dtype\": \"f32\", \"out_elements\": 100, \"out_bytes\": 0, \"grad_bytes\": 0, \"saved_bytes\": 0,"
    "     \"workspace_bytes\": 0, \"param_count\": 0, \"forward_ms\": 0, \"backward_data_ms\": 0,"
    "     \"backward_weights_ms\": 0, \"cast_ms\": 0}]},"
    "  \"int8\": {\"precision\": \"int8\", \"support\": \"emulated\", \"step_ms\": 1, \"optimizer_ms\": 0.1,"
    "   \"memory_bytes\": {\"params\": 1, \"grads\": 2, \"optimizer\": 3, \"buffers\": 4, \"activations\": 5,"
    "     \"activation_grads\": 6, \"saved\": 7, \"workspace\": 8, \"labels\": 9, \"backend_in_use\": 45, \"backend_peak\": 50},"
    "   \"ops\": [{\"name\": \"input.to_s8\", \"kind\": \"Cast\", \"inputs\": [\"input\"], \"precision\": \"int8\","
    "     \"out_dtype\": \"s8\", \"out_elements\": 100, \"out_bytes\": 100, \"grad_bytes\": 0, \"saved_bytes\": 4,"
    "     \"workspace_bytes\": 0, \"param_count\": 0, \"forward_ms\": 0, \"backward_data_ms\": 0,"
    "     \"backward_weights_ms\": 0, \"cast_ms\": 0.05}]}},"
    " \"config\": \"in_h=28 width=4\","
    " \"casts\": [{\"from\": \"f32\", \"to\": \"s8\", \"alpha_ms\": 0.01, \"beta_ms_per_element\": -1e-6,"
    "   \"points\": [[100, 0.05], [50, 0.04]]}],"
    " \"co_running_ranks\": 2, \"co_running_slowdown\": 1.5,"
    " \"allreduce\": {\"ranks\": 2, \"reps\": 3, \"alpha_ms\": 0.01, \"beta_ms_per_byte\": 1e-6,"
    "   \"points\": [[1024, 0.02], [1048576, 1.0]]},"
    " \"mixed_runs\": [{\"precisions\": {\"fast\": \"fp32\", \"slow\": \"int8\"}, \"precision\": \"fp32\", \"step_ms\": 2,"
    "   \"optimizer_ms\": 0.1, \"grad_average_ms\": 0.01}]}";

/* VALID with the value at `path` (keys separated by '.', array items as [i]) replaced by the
 * JSON text `value`, or removed when value is NULL. */
static char *mutated(const char *path, const char *value) {
    cJSON *doc = cJSON_Parse(VALID), *o = doc;
    assert_non_null(doc);
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", path);
    char *tok = strtok_r(buf, ".", &save), *next;
    for (; tok; tok = next) {
        next = strtok_r(NULL, ".", &save);
        char *br = strchr(tok, '[');
        int idx = br ? atoi(br + 1) : -1;
        if (br) *br = '\0';
        cJSON *parent = o;
        if (!next && idx < 0) {
            if (value) {
                if (cJSON_GetObjectItem(parent, tok)) cJSON_ReplaceItemInObject(parent, tok, cJSON_Parse(value));
                else cJSON_AddItemToObject(parent, tok, cJSON_Parse(value));
            } else {
                cJSON_DeleteItemFromObject(parent, tok);
            }
            break;
        }
        o = cJSON_GetObjectItem(parent, tok);
        assert_non_null(o);
        if (idx >= 0 && !next) {
            if (value) cJSON_ReplaceItemInArray(o, idx, cJSON_Parse(value));
            else cJSON_DeleteItemFromArray(o, idx);
            break;
        }
        if (idx >= 0) o = cJSON_GetArrayItem(o, idx);
        assert_non_null(o);
    }
    char *text = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    return text;
}

static void test_valid_profile(void **state) {
    (void)state;
    qs_profile p;
    if (qs_profile_parse(VALID, "v.json", &p) != QS_OK) fail_msg("%s", qs_last_error());
    assert_string_equal(p.model, "cnn");
    assert_string_equal(p.config, "in_h=28 width=4");
    assert_int_equal(p.batch, 8);
    assert_true(p.data_ms == 0.5 && p.co_running_ranks == 2 && p.co_running_slowdown == 1.5);
    assert_string_equal(p.device.backend, "cpu");
    assert_string_equal(p.device.type, "fast");
    assert_true(p.has_emulation && p.emulated_slowdown == 1.5 && p.emulation_method == QS_PROFILE_EMU_DUTY_CYCLE);
    assert_int_equal(p.n_runs, 2);
    qs_precision top;
    assert_true(qs_profile_top_precision(&p, &top) && top == QS_PREC_FP32);
    const qs_profile_prec_run *r = qs_profile_base_run(&p), *r8 = qs_profile_run_at(&p, QS_PREC_INT8);
    assert_non_null(r8);
    assert_null(qs_profile_run_at(&p, QS_PREC_BF16));
    assert_int_equal(r->support, QS_PREC_NATIVE);
    assert_int_equal(r8->support, QS_PREC_EMULATED);
    assert_int_equal(r->n_step_samples, 3);
    assert_true(r->has_sync && r->sync.buckets == 3 && r->sync.no_overlap_step_ms == 4);
    assert_false(r8->has_sync);
    assert_true(r8->grad_average_ms == 0 && r8->n_step_samples == 0); /* optional, absent */
    assert_true(r->memory.backend_in_use == 45 && r->memory.labels == 9);
    assert_true(r->memory_facts.fp8_wants_transposed && !r->memory_facts.pointwise_conv_as_linear &&
                r->memory_facts.fused_attention);
    /* int8 has no memory_facts: the cpu backend's defaults */
    assert_false(r8->memory_facts.fp8_wants_transposed || r8->memory_facts.pointwise_conv_as_linear ||
                 r8->memory_facts.fused_attention);
    assert_int_equal(p.optimizer_kind, QS_OPTIM_SGD);
    assert_int_equal(r->n_ops, 2);
    assert_string_equal(r->ops[0].inputs[0], "input");
    assert_true(r->ops[0].workspace_bytes == 16 && r->ops[0].backward_weights_ms == 0.2 && !r->ops[0].fused);
    assert_true(qs_profile_op_fused(&p, "relu1") && !qs_profile_op_fused(&p, "conv1"));
    assert_int_equal(r8->ops[0].out_dtype, QS_S8);
    assert_int_equal(p.n_casts, 1);
    assert_true(p.casts[0].from == QS_F32 && p.casts[0].to == QS_S8 && p.casts[0].beta_ms_per_element < 0);
    assert_int_equal(p.casts[0].n_points, 2); /* cast points need no order */
    assert_true(p.has_allreduce && p.allreduce.n_points == 2 && p.allreduce.points[3] == 1.0);
    assert_int_equal(p.n_mixed, 1);
    assert_string_equal(p.mixed[0].types[1], "slow");
    assert_int_equal(p.mixed[0].precs[1], QS_PREC_INT8);
    assert_false(p.mixed[0].has_sync);
    qs_profile_free(&p);
    /* the optional fields absent: defaults */
    char *t = mutated("emulation", NULL);
    assert_int_equal(qs_profile_parse(t, "v.json", &p), QS_OK);
    assert_false(p.has_emulation);
    qs_profile_free(&p);
    free(t);
    t = mutated("device.backend", "\"cuda\""); /* a profile without memory_facts on cuda: all true */
    assert_int_equal(qs_profile_parse(t, "v.json", &p), QS_OK);
    r8 = qs_profile_run_at(&p, QS_PREC_INT8);
    assert_true(r8->memory_facts.fp8_wants_transposed && r8->memory_facts.pointwise_conv_as_linear &&
                r8->memory_facts.fused_attention);
    assert_false(qs_profile_base_run(&p)->memory_facts.pointwise_conv_as_linear); /* as given */
    qs_profile_free(&p);
    free(t);
    t = mutated("runs.fp32.grad_sync.overlap_step_ms", NULL);
    assert_int_equal(qs_profile_parse(t, "v.json", &p), QS_OK);
    assert_true(isnan(qs_profile_base_run(&p)->sync.overlap_step_ms));
    qs_profile_free(&p);
    free(t);
}

typedef struct bad_case {
    const char *path, *value; /* value NULL: the key removed */
    const char *message;      /* expected in the error */
} bad_case;

static const bad_case BAD[] = {
    {"format", "\"qsync-plan\"", "v.json: format must be \"qsync-profile\""},
    {"version", "2", "version must be 1"},
    {"batch", "1e30", "batch must be a whole number in [1, 9007199254740992] (got 1e+30)"},
    {"batch", "0", "batch must be a whole number in [1"},
    {"batch", "8.5", "batch must be a whole number"},
    {"batch", "\"8\"", "batch must be a whole number in [1, 9007199254740992] (got \"8\")"},
    {"batch", NULL, "the document lacks \"batch\""},
    {"model", "3", "model must be a string (got 3)"},
    {"model", "\"\"", "model must be a non-empty string"},
    {"config", NULL, "lacks \"config\""},
    {"data_ms", "-1", "data_ms must be a finite number >= 0 (got -1)"},
    {"data_ms", "1e999", "data_ms must be a finite number >= 0"},
    {"co_running_slowdown", "0.5", "co_running_slowdown must be a finite number >= 1 (got 0.5)"},
    {"surprise", "1", "unknown key \"surprise\" (known: format, version, model"},
    {"device.backend", "\"tpu\"", "device.backend must be \"cpu\" or \"cuda\" (got \"tpu\")"},
    {"device.cores", "-2", "device.cores must be a whole number"},
    {"device.color", "1", "device: unknown key \"color\""},
    {"emulation.method", "\"magic\"", "emulation.method must be \"cgroup-quota\", \"duty-cycle\" or \"none\""},
    {"emulation.slowdown", "0.9", "emulation.slowdown must be a finite number >= 1"},
    {"runs", "{}", "runs must hold at least one run"},
    {"runs", "[]", "runs must be an object"},
    {"runs.int4", "{}", "runs.int4 is not a precision name"},
    {"runs.int8.precision", "\"fp32\"", "runs.int8.precision must be \"int8\", the run's key"},
    {"runs.fp32.support", "\"maybe\"", "runs.fp32.support must be \"native\" or \"emulated\""},
    {"runs.fp32.step_ms", NULL, "runs.fp32 lacks \"step_ms\""},
    {"runs.fp32.step_ms", "null", "runs.fp32.step_ms must be a finite number >= 0 (got null)"},
    {"runs.fp32.step_samples_ms", "[1, -2]", "runs.fp32.step_samples_ms[1] must be a finite number >= 0 (got -2)"},
    {"runs.fp32.step_samples_ms", "3", "runs.fp32.step_samples_ms must be an array"},
    {"runs.fp32.grad_sync.ranks", "0", "runs.fp32.grad_sync.ranks must be a whole number in [1"},
    {"runs.fp32.grad_sync.buckets", NULL, "runs.fp32.grad_sync lacks \"buckets\""},
    {"runs.fp32.memory_bytes.grads", "-1", "runs.fp32.memory_bytes.grads must be a whole number"},
    {"runs.fp32.memory_bytes.arena", "1", "runs.fp32.memory_bytes: unknown key \"arena\""},
    {"runs.fp32.memory_facts.fused_attention", "1", "runs.fp32.memory_facts.fused_attention must be true or false (got 1)"},
    {"runs.fp32.memory_facts.fp8_wants_transposed", NULL, "runs.fp32.memory_facts lacks \"fp8_wants_transposed\""},
    {"runs.fp32.memory_facts.arena", "true", "runs.fp32.memory_facts: unknown key \"arena\""},
    {"runs.fp32.memory_facts", "[]", "runs.fp32.memory_facts must be an object"},
    {"optimizer", "\"lamb\"", "optimizer must be \"sgd\" or \"adamw\" (got \"lamb\")"},
    {"runs.fp32.ops", "{}", "runs.fp32.ops must be an array"},
    {"runs.fp32.ops[1].forward_ms", "-1", "runs.fp32.ops[1].forward_ms must be a finite number >= 0 (got -1)"},
    {"runs.fp32.ops[0].cast_ms", "\"fast\"", "runs.fp32.ops[0].cast_ms must be a finite number >= 0 (got \"fast\")"},
    {"runs.fp32.ops[0].out_bytes", "1.5", "runs.fp32.ops[0].out_bytes must be a whole number"},
    {"runs.fp32.ops[0].precision", "\"int4\"", "runs.fp32.ops[0].precision must be a precision name"},
    {"runs.fp32.ops[0].out_dtype", "\"f64\"", "runs.fp32.ops[0].out_dtype must be a dtype name (f32, bf16"},
    {"runs.fp32.ops[0].inputs", "[3]", "runs.fp32.ops[0].inputs[0] must be a string (got 3)"},
    {"runs.fp32.ops[0].name", NULL, "runs.fp32.ops[0] lacks \"name\""},
    {"runs.fp32.ops[0].colour", "1", "runs.fp32.ops[0]: unknown key \"colour\""},
    {"runs.fp32.ops[0]", "7", "runs.fp32.ops[0] must be an object (got 7)"},
    {"casts[0].from", "\"f99\"", "casts[0].from must be a dtype name"},
    {"casts[0].beta_ms_per_element", "1e999", "casts[0].beta_ms_per_element must be a finite number"},
    {"casts[0].points", "[[1]]", "casts[0].points[0] must be a pair [x, y] of numbers"},
    {"casts", NULL, "the document lacks \"casts\""},
    {"allreduce.points", "[0, 0]", "allreduce.points[0] must be a pair [x, y] of numbers (got 0)"},
    {"allreduce.points", "[[], []]", "allreduce.points[0] must be a pair [x, y] of numbers (got [])"},
    {"allreduce.points", "[[1024, 0.1], [1024, 0.2]]", "allreduce.points[1] must come after a smaller size (1024)"},
    {"allreduce.points", "[[1024, -0.1]]", "allreduce.points[0][1] must be a finite number >= 0 (got -0.1)"},
    {"allreduce.points", "[[2048, 0.1], [1024, 0.2]]", "the sizes must increase"},
    {"allreduce.ranks", "1.5", "allreduce.ranks must be a whole number"},
    {"allreduce.alpha_ms", NULL, "allreduce lacks \"alpha_ms\""},
    {"mixed_runs[0].precisions", "{\"fast\": \"fp33\"}", "mixed_runs[0].precisions[\"fast\"] must be a precision name"},
    {"mixed_runs[0].precisions", "{\"\": \"fp32\"}", "must be a device-type label of 1 to 47 characters"},
    {"mixed_runs[0].step_ms", NULL, "mixed_runs[0] lacks \"step_ms\""},
    {"mixed_runs[0]", "[]", "mixed_runs[0] must be an object"},
};

static void test_bad_profiles(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char *t = mutated(BAD[i].path, BAD[i].value);
        qs_profile p;
        qs_status st = qs_profile_parse(t, "v.json", &p);
        if (st != QS_ERR_FORMAT || !strstr(qs_last_error(), BAD[i].message) || !strstr(qs_last_error(), "profile v.json"))
            fail_msg("%s = %s: status %d, message \"%s\"; want \"%s\"", BAD[i].path, BAD[i].value ? BAD[i].value : "(removed)",
                     (int)st, qs_last_error(), BAD[i].message);
        assert_int_equal(p.n_runs, 0); /* nothing half-written */
        assert_null(p.runs);
        assert_null(p.casts);
        assert_false(p.has_allreduce);
        qs_profile_free(&p);
        free(t);
    }
    /* repeated keys (cJSON keeps both) */
    const char *dup = strstr(VALID, "\"batch\": 8");
    char *t = malloc(strlen(VALID) + 32);
    snprintf(t, strlen(VALID) + 32, "%.*s\"batch\": 8, %s", (int)(dup - VALID), VALID, dup);
    qs_profile p;
    assert_int_equal(qs_profile_parse(t, "v.json", &p), QS_ERR_FORMAT);
    assert_non_null(strstr(qs_last_error(), "batch appears twice"));
    free(t);
    /* not an object, not JSON, not a file */
    assert_int_equal(qs_profile_parse("[1]", "v.json", &p), QS_ERR_FORMAT);
    assert_non_null(strstr(qs_last_error(), "must be a JSON object"));
    assert_int_equal(qs_profile_parse("{\"format\": ", "v.json", &p), QS_ERR_FORMAT);
    assert_int_not_equal(qs_profile_read("/nonexistent/p.json", &p), QS_OK);
    assert_non_null(strstr(qs_last_error(), "/nonexistent/p.json"));
}

/* `qsync simulate` on the documents that crashed or hit undefined behaviour before: refused
 * with the reader's message, exit 1. */
static void test_simulate_refuses(void **state) {
    (void)state;
    char a[1024];
    qs_test_write_tmp("empty.json", "{}");
    snprintf(a, sizeof a, "simulate --profile %s/empty.json", qs_test_tmp);
    qs_test_expect_qsync(1, "empty.json: format must be \"qsync-profile\"", a);
    const char *points[2] = {"[0, 0]", "[[], []]"};
    for (int k = 0; k < 2; k++) {
        char *t = mutated("allreduce.points", points[k]);
        qs_test_write_tmp("pts.json", t);
        free(t);
        snprintf(a, sizeof a, "simulate --profile %s/pts.json", qs_test_tmp);
        qs_test_expect_qsync(1, "allreduce.points[0] must be a pair [x, y] of numbers", a);
    }
    char *t = mutated("batch", "1e30");
    qs_test_write_tmp("huge.json", t);
    free(t);
    snprintf(a, sizeof a, "simulate --profile %s/huge.json", qs_test_tmp);
    qs_test_expect_qsync(1, "batch must be a whole number in [1, 9007199254740992] (got 1e+30)", a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_profile),
        cmocka_unit_test(test_bad_profiles),
        QS_TMPDIR_TEST(test_simulate_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
