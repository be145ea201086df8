/* tests/test_cli.c — the qsync command line: error paths (each a clear message and a
 * non-zero exit), checkpoint → resume bit-exactness, and eval of a checkpoint. Runs the real
 * binary on real Fashion-MNIST subsets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "run_cmd.h"

/* Tiny, fast training settings shared by the tests (96 samples → 3 steps of 32 per epoch). */
#define QS_TINY "--model cnn --width 4 --batch 32 --train-subset 96 --eval-subset 64 --threads 1 --no-progress"

/* Run args; expect exit code rc and `needle` in the output. */
static void expect_run(const char *args, int rc, const char *needle) {
    char *out = NULL;
    int got = qs_test_run_qsync(args, &out);
    if (got != rc || (needle && !strstr(out, needle)))
        fail_msg("qsync %s\n  exit %d (want %d), output:\n%s\n  (wanted to see: %s)", args, got, rc, out,
                 needle ? needle : "-");
    free(out);
}

/* expect_run with the arguments formatted from fmt and the rest, like printf. */
__attribute__((format(printf, 3, 4))) static void expect_runf(int rc, const char *needle, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    expect_run(args, rc, needle);
}

static void test_usage_errors(void **state) {
    expect_run("", 2, "usage: qsync");
    expect_run("frobnicate", 2, "unknown command 'frobnicate'");
    expect_run("train --model nosuchnet", 1, "nosuchnet");
    expect_run("train --bogus-option 3", 2, "unknown option '--bogus-option'");
    expect_run("train --batch abc", 2, "--batch expects an integer, got 'abc'");
    expect_run("train --lr", 2, "--lr needs a value");
    expect_run("train --precision int7", 2, "--precision must be one of");
    expect_run("train --optimizer lion", 2, "--optimizer must be sgd or adamw");
    expect_run("eval", 2, "--checkpoint is required");
    expect_run("help", 0, "commands:");
    expect_run("train --help", 0, "--checkpoint-dir");
    expect_run("models", 0, "resnet50");
    expect_run("models --json", 0, "\"description\"");
    expect_run("models resnet18 --width 16 --json", 0, "\"layer4.1.conv2\"");
    expect_run("models resnet18 --in-h 0", 1, "in_h");
}

static void test_missing_dataset_names_package(void **state) {
    expect_runf(1, "dataset-fashion-mnist", "train " QS_TINY " --data-dir %s/none", qs_test_tmp);
}

/* A Fashion-MNIST directory whose training images are cut short. */
static void test_truncated_idx(void **state) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/fm && cd %s/fm && cp /usr/share/datasets/fashion-mnist/*.gz . && "
             "gunzip train-images-idx3-ubyte.gz && truncate -s 1000000 train-images-idx3-ubyte",
             qs_test_tmp, qs_test_tmp);
    assert_int_equal(qs_test_run_shell(cmd, NULL), 0);
    expect_runf(1, "train-images-idx3-ubyte", "train " QS_TINY " --data-dir %s/fm", qs_test_tmp);
}

static void test_unwritable_checkpoint_dir(void **state) {
    char args[1024];
    /* a regular file where the directory should be: fails even for root */
    snprintf(args, sizeof args, "touch %s/afile", qs_test_tmp);
    assert_int_equal(qs_test_run_shell(args, NULL), 0);
    expect_runf(1, "not writable", "train " QS_TINY " --steps 1 --checkpoint-dir %s/afile/ckpt", qs_test_tmp);
}

/* Interrupt at step 4 of 6, resume, and compare with an uninterrupted run byte for byte. */
static void test_resume_bit_exact(void **state) {
    const char *tmp = qs_test_tmp;
    expect_runf(0, "test accuracy", "train " QS_TINY " --epochs 2 --dropout 0.25 --checkpoint-dir %s/full", tmp);
    expect_runf(0, "stopping at step 4",
                "train " QS_TINY " --epochs 2 --dropout 0.25 --checkpoint-dir %s/part --stop-at 4", tmp);
    expect_runf(0, "resumed from",
                "train " QS_TINY " --epochs 2 --dropout 0.25 --checkpoint-dir %s/part --resume %s/part", tmp, tmp);
    char args[4096];
    snprintf(args, sizeof args, "cmp %s/full/model.safetensors %s/part/model.safetensors && "
                                "cmp %s/full/state.safetensors %s/part/state.safetensors", tmp, tmp, tmp, tmp);
    char *out = NULL;
    int rc = qs_test_run_shell(args, &out);
    if (rc != 0) fail_msg("resumed run differs from the uninterrupted one: %s", out);
    free(out);
    /* resume with other settings is refused */
    expect_runf(1, "resume with the same settings",
                "train " QS_TINY " --epochs 2 --dropout 0.25 --seed 7 --resume %s/part", tmp);
}

/* Resuming with the model's default options (no --width given) finds the same model. */
static void test_resume_default_options(void **state) {
    const char *tmp = qs_test_tmp;
    const char *args = "--model mlp --batch 32 --train-subset 96 --eval-subset 64 --threads 1 --no-progress";
    expect_runf(0, "not evaluated", "train %s --steps 3 --stop-at 1 --checkpoint-dir %s/d", args, tmp);
    expect_runf(0, "now at step 3", "train %s --steps 3 --checkpoint-dir %s/d --resume %s/d", args, tmp, tmp);
}

/* SIGTERM (as from a batch scheduler) stops training after the current step with a checkpoint
 * and exit status 128 + 15; the run then resumes from it. */
static void test_sigterm_checkpoints(void **state) {
    const char *tmp = qs_test_tmp, *bin = getenv("QS_BIN");
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "timeout --preserve-status -s TERM 3 %s train " QS_TINY " --steps 1000000 --checkpoint-dir %s/sig",
             bin ? bin : "qsync", tmp);
    int rc = qs_test_run_shell(cmd, &out);
    const char *at = strstr(out, "interrupted after step ");
    if (rc != 128 + 15 || !at) {
        fprintf(stderr, "%s\n  exit %d (want 143), output:\n%s\n", cmd, rc, out);
        free(out);
        fail_msg("SIGTERM did not end the run gracefully");
    }
    long long step = atoll(at + strlen("interrupted after step "));
    free(out);
    assert_true(step >= 1);
    expect_runf(0, "now at step", "train " QS_TINY " --steps 1000000 --checkpoint-dir %s/sig --resume %s/sig --stop-at %lld",
                tmp, tmp, step + 1);
}

static void test_eval_and_wrong_model(void **state) {
    const char *tmp = qs_test_tmp;
    expect_runf(0, "test accuracy", "train " QS_TINY " --steps 3 --checkpoint-dir %s/e", tmp);
    expect_runf(0, "\"accuracy\"", "eval --checkpoint %s/e --eval-subset 64 --json", tmp);
    /* a checkpoint of another model */
    expect_runf(1, "holds a cnn model",
                "train --model mlp --width 8 --batch 32 --train-subset 96 --steps 1 --resume %s/e", tmp);
    /* the same model with other options */
    expect_runf(1, "resume with the same model options",
                "train --model cnn --width 8 --batch 32 --train-subset 96 --steps 1 --resume %s/e", tmp);
    expect_runf(1, "nonexistent", "eval --checkpoint %s/nonexistent", tmp);
    char args[4096];
    snprintf(args, sizeof args, "head -c 100 %s/e/model.safetensors > %s/cut.safetensors", tmp, tmp);
    assert_int_equal(qs_test_run_shell(args, NULL), 0);
    expect_runf(1, "cut.safetensors", "eval --checkpoint %s/cut.safetensors", tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_missing_dataset_names_package),
        cmocka_unit_test(test_truncated_idx),
        cmocka_unit_test(test_unwritable_checkpoint_dir),
        cmocka_unit_test(test_resume_bit_exact),
        cmocka_unit_test(test_eval_and_wrong_model),
        cmocka_unit_test(test_resume_default_options),
        cmocka_unit_test(test_sigterm_checkpoints),
    };
    return cmocka_run_group_tests(tests, qs_test_tmpdir_setup, qs_test_tmpdir_teardown);
}
