/* tests/test_torch_interop.c — checkpoints load into the PyTorch twins of the models
 * (tools/torch_models.py via tools/safetensors_torch.py) and give the same logits as
 * `qsync eval`: for cnn, resnet18 (BatchNorm buffers) and vgg11, after a few training steps.
 * Needs Debian's python3-torch (scripts/install-deps.sh installs it). */
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

#include "run_cmd.h"

/* The last line of out parsed as JSON. */
static cJSON *last_json_line(const char *out) {
    const char *start = out, *p;
    while ((p = strstr(start, "\n{")) != NULL) start = p + 1;
    return cJSON_Parse(start);
}

/* Train `model_args` for a few steps, then compare qsync's and PyTorch's logits on 200 test
 * images. Both run FP32 with different summation orders, so logits agree to a few ulps of
 * the accumulated magnitude: |Δ| ≤ 1e-4·max(1, max|logit|) is ≈ 100× the expected error of
 * K ≈ 10^4-term FP32 dot products (√K·2^-24 ≈ 6e-6 relative). */
static void check_model(const char *model_args, const char *tag) {
    const char *tmp = qs_test_tmp;
    char cmd[4096];
    char *out = NULL;
    snprintf(cmd, sizeof cmd,
             "train %s --batch 32 --train-subset 256 --steps 6 --eval-subset 64 --threads 1 --no-progress "
             "--checkpoint-dir %s/%s",
             model_args, tmp, tag);
    int rc = qs_test_run_qsync(cmd, &out);
    if (rc != 0) fail_msg("qsync %s failed:\n%s", cmd, out);
    free(out);
    snprintf(cmd, sizeof cmd, "eval --checkpoint %s/%s --eval-subset 200 --batch 50 --logits-out %s/%s.logits --json",
             tmp, tag, tmp, tag);
    rc = qs_test_run_qsync(cmd, &out);
    if (rc != 0) fail_msg("qsync %s failed:\n%s", cmd, out);
    cJSON *ours = last_json_line(out);
    assert_non_null(ours);
    free(out);
    const char *src = getenv("QS_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/torch_eval_checkpoint.py %s/%s --subset 200 "
                              "--compare-logits %s/%s.logits",
             src ? src : ".", tmp, tag, tmp, tag);
    rc = qs_test_run_shell(cmd, &out);
    if (rc != 0) fail_msg("%s failed:\n%s", cmd, out);
    cJSON *torch = last_json_line(out);
    if (!torch) fail_msg("no JSON from %s:\n%s", cmd, out);
    double diff = cJSON_GetObjectItem(torch, "max_abs_logit_diff")->valuedouble;
    double mag = cJSON_GetObjectItem(torch, "max_abs_logit")->valuedouble;
    int mismatches = cJSON_GetObjectItem(torch, "prediction_mismatches")->valueint;
    double acc_t = cJSON_GetObjectItem(torch, "accuracy")->valuedouble;
    double acc_q = cJSON_GetObjectItem(ours, "accuracy")->valuedouble;
    printf("%s: max |Δlogit| %.3g (budget %.3g), prediction mismatches %d, accuracy qsync %.4f torch %.4f\n", tag,
           diff, 1e-4 * fmax(1.0, mag), mismatches, acc_q, acc_t);
    assert_true(diff <= 1e-4 * fmax(1.0, mag));
    assert_int_equal(mismatches, 0);
    assert_true(fabs(acc_t - acc_q) < 1e-5); /* qsync prints 6 decimals */
    cJSON_Delete(ours);
    cJSON_Delete(torch);
    free(out);
}

static void test_cnn(void **state) { check_model("--model cnn --width 8", "cnn"); }
static void test_resnet18(void **state) { check_model("--model resnet18 --width 4", "resnet18"); }
static void test_vgg11(void **state) { check_model("--model vgg11 --width 4", "vgg11"); }
static void test_mlp(void **state) { check_model("--model mlp --width 64 --dropout 0.2", "mlp"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cnn),
        cmocka_unit_test(test_resnet18),
        cmocka_unit_test(test_vgg11),
        cmocka_unit_test(test_mlp),
    };
    return cmocka_run_group_tests(tests, qs_test_tmpdir_setup, qs_test_tmpdir_teardown);
}
