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

#include "backends/backends.h"
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

/* qsync bench: every part runs and reports per precision (tiny settings: numbers are not
 * checked, only that each precision is measured and marked), and bad input is refused. */
static void test_bench(void **state) {
    expect_run("bench quantize --reps 1 --warmup 0 --threads 1", 0, "s8      stochastic 1 thread(s)");
    expect_run("bench gemm --reps 1 --warmup 0 --threads 1 --precisions fp32,int8,fp8 --json", 0, "\"support\":\t\"emulated\"");
    expect_run("bench step --model mlp --width 16 --batch 8 --reps 1 --warmup 0 --threads 1 --precisions fp32,int8", 0,
               "g = x");
    expect_run("bench", 2, "name a part");
    expect_run("bench frobnicate", 2, "unknown part 'frobnicate'");
    expect_run("bench gemm --precisions fp32,int4", 2, "unknown precision 'int4'");
    expect_run("bench layer --size 32 --precisions fp8 --fp8-scaling delayed --reps 1 --warmup 0 --threads 1 --json", 0,
               "\"fp8_scaling\":\t\"delayed\"");
    expect_run("bench layer --fp8-scaling late", 2, "--fp8-scaling must be current or delayed");
    expect_run("bench gemm --fp8-scaling delayed", 2, "applies to layer only");
    expect_run("bench quantize --device cpu --size 64", 2, "--size and --shape apply to");
    expect_run("bench step --model nosuchnet --reps 1", 1, "nosuchnet");
}

static void test_usage_errors(void **state) {
    expect_run("", 2, "usage: qsync");
    expect_run("frobnicate", 2, "unknown command 'frobnicate'");
    expect_run("train --model nosuchnet", 1, "nosuchnet");
    expect_run("train --bogus-option 3", 2, "unknown option '--bogus-option'");
    expect_run("train --batch abc", 2, "--batch expects an integer, got 'abc'");
    expect_run("train --lr", 2, "--lr needs a value");
    expect_run("train --precision int7", 2, "--precision must be one of");
    expect_run("train --device gpu", 2, "--device must be cpu, cuda or cuda:N (got 'gpu')");
    expect_run("train --device cuda:x", 2, "--device must be cpu, cuda or cuda:N");
    /* no GPU where the suite runs (or a build without CUDA): a clear refusal naming the device */
    expect_run("train " QS_TINY " --data synthetic --steps 1 --device cuda:3", 1, "cuda:3");
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

#define PLAN_HDR "{\"format\": \"qsync-plan\", \"version\": 1, "
/* A small MLP run (Linear layers only). */
#define QS_TINY_MLP "--model mlp --width 32 --batch 32 --train-subset 96 --eval-subset 64 --threads 1 --no-progress"

/* Usage errors of the precision options (exit 2) and precisions the cpu cannot run or only
 * emulates (exit 1, saying what to do). */
static void test_precision_options(void **state) {
    const char *tmp = qs_test_tmp;
    qs_test_write_tmp("ok.json", PLAN_HDR "\"model\": \"cnn\"}");
    expect_runf(2, "--plan and --precision int8 are mutually exclusive",
                "train " QS_TINY " --steps 1 --precision int8 --plan %s/ok.json", tmp);
    expect_runf(2, "mutually exclusive", "eval --checkpoint %s/none --precision bf16 --plan %s/ok.json", tmp, tmp);
    expect_run("train " QS_TINY " --steps 1 --grad-rounding up", 2, "--grad-rounding must be stochastic or nearest");
    expect_run("train " QS_TINY " --steps 1 --weight-scales row", 2, "--weight-scales must be tensor or channel");
    expect_run("train " QS_TINY " --steps 1 --loss-scale lots", 2, "--loss-scale must be auto, none, dynamic");
    expect_run("train " QS_TINY " --steps 1 --fp8-scaling delayed:0", 2, "--fp8-scaling must be current, delayed");
    expect_run("train " QS_TINY " --steps 1 --fp8-scaling late", 2, "--fp8-scaling must be current, delayed");
    expect_run("train " QS_TINY " --steps 3 --gpu-busy-steps 2", 2, "--gpu-busy-steps needs --device cuda");
    expect_run("train " QS_TINY " --steps 3 --gpu-busy-steps -1", 2, "--gpu-busy-steps needs --device cuda");
    expect_run("profile --model mlp --out p.json --fp8-scaling delayed:2000", 2, "qsync profile: --fp8-scaling must be");
    expect_run("train " QS_TINY_MLP " --steps 2 --precision fp8 --allow-emulated --fp8-scaling delayed:3 --json", 0,
               "\"fp8_amax_history\":\t3");
    expect_run("train " QS_TINY " --steps 1 --precision fp16", 1, "fp16 is only emulated on the cpu backend");
    expect_run("train " QS_TINY " --steps 1 --precision fp8", 1, "pass --allow-emulated");
    expect_run("train " QS_TINY " --steps 1 --precision tf32", 1, "the cpu backend cannot run tf32");
    expect_run("train --help", 0, "--allow-emulated");
    expect_run("models cnn", 0, "conv1, conv2, fc1, fc2");
    expect_run("models cnn", 0, "fp16 emulated");
    expect_run("models", 0, "precision-selectable layers");
    expect_run("models --json", 0, "\"gemm_layers\"");
    expect_run("models resnet18 --width 4 --json", 0, "\"layer2.0.downsample.0\"");
    expect_run("models --write-plan x.json", 2, "--write-plan needs a model name");
}

/* Bad plan files: each a non-zero exit naming the file, the key and what to do. */
static void test_bad_plans(void **state) {
    const char *tmp = qs_test_tmp;
    qs_test_write_tmp("malformed.json", PLAN_HDR "\n\"model\": \"cnn\",\n\"precisions\": {\"conv1\": int8}}");
    qs_test_write_tmp("format.json", "{\"format\": \"qsync.model\", \"version\": 1, \"model\": \"cnn\"}");
    qs_test_write_tmp("version.json", "{\"format\": \"qsync-plan\", \"version\": 3, \"model\": \"cnn\"}");
    qs_test_write_tmp("layer.json", PLAN_HDR "\"model\": \"cnn\", \"precisions\": {\"conv9\": \"int8\"}}");
    qs_test_write_tmp("pool.json", PLAN_HDR "\"model\": \"cnn\", \"precisions\": {\"pool1\": \"int8\"}}");
    qs_test_write_tmp("prec.json", PLAN_HDR "\"model\": \"cnn\", \"precisions\": {\"conv1\": \"int3\"}}");
    qs_test_write_tmp("other.json", PLAN_HDR "\"model\": \"resnet18\", \"precisions\": {\"conv1\": \"int8\"}}");
    qs_test_write_tmp("emu.json", PLAN_HDR "\"model\": \"cnn\", \"precisions\": {\"fc1\": \"fp16\"}}");
    qs_test_write_tmp("tf32.json", PLAN_HDR "\"model\": \"cnn\", \"default\": \"tf32\"}");
    const char *t = "train " QS_TINY " --steps 1 --plan";
    expect_runf(1, "malformed.json: malformed JSON at line 3", "%s %s/malformed.json", t, tmp);
    expect_runf(1, "\"format\" must be \"qsync-plan\"", "%s %s/format.json", t, tmp);
    expect_runf(1, "this qsync reads plan version 1", "%s %s/version.json", t, tmp);
    expect_runf(1, "has no layer \"conv9\"; its layers with a selectable precision are conv1, conv2, fc1, fc2",
                "%s %s/layer.json", t, tmp);
    expect_runf(1, "layer \"pool1\" is a MaxPool2d, whose precision cannot be chosen", "%s %s/pool.json", t, tmp);
    expect_runf(1, "precisions[\"conv1\"]: unknown precision \"int3\"", "%s %s/prec.json", t, tmp);
    expect_runf(1, "is for model resnet18, but this run's model is cnn", "%s %s/other.json", t, tmp);
    expect_runf(1, "precisions[\"fc1\"] = fp16: fp16 is only emulated", "%s %s/emu.json", t, tmp);
    expect_runf(1, "--allow-emulated", "%s %s/emu.json", t, tmp);
    expect_runf(1, "cannot run tf32", "%s %s/tf32.json --allow-emulated", t, tmp);
    expect_runf(1, "nonexistent.json", "%s %s/nonexistent.json", t, tmp);
}

/* A run at uniform INT8: trains, evaluates, and reports its precisions. */
/* " --allow-emulated" when this CPU only emulates p (INT8 without VNNI/AMX, BF16 on CPUs whose
 * oneDNN has no optimized bf16 kernels), else "". */
static const char *emulation_flag(qs_precision p) {
    qs_backend *be = NULL;
    assert_int_equal(qs_backend_cpu_create(1, &be), QS_OK);
    qs_prec_support s = be->ops->precision_support(be, p);
    be->ops->destroy(be);
    return s == QS_PREC_NATIVE ? "" : " --allow-emulated";
}

static void test_train_int8(void **state) {
    const char *i8 = emulation_flag(QS_PREC_INT8), *b16 = emulation_flag(QS_PREC_BF16);
    if (i8[0]) /* emulated here: refused without the flag */
        expect_run("train " QS_TINY " --steps 3 --precision int8", 1, "--allow-emulated");
    expect_runf(0, "test accuracy", "train " QS_TINY " --steps 3 --precision int8%s", i8);
    expect_runf(0, "precisions: 4 x int8", "train " QS_TINY " --steps 3 --precision int8%s", i8);
    expect_runf(0, "\"int8\":\t4", "train " QS_TINY " --steps 3 --precision int8 --json%s", i8);
    expect_runf(0, "\"grad_rounding\":\t\"nearest\"",
                "train " QS_TINY_MLP " --steps 3 --precision bf16 --grad-rounding nearest --json%s", b16);
}

/* A plan written by `qsync models --write-plan` and edited, in training and evaluation; the
 * checkpoint records it: resuming needs the same precisions (or --plan CHECKPOINT), and the
 * resumed run is bitwise the uninterrupted one (stochastic rounding keyed by step). */
static void test_plan_train_resume_eval(void **state) {
    const char *tmp = qs_test_tmp;
    expect_runf(0, "wrote a plan template for mlp", "models mlp --write-plan %s/t.json --precision int8", tmp);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "sed -i 's/\"fc3\":[[:space:]]*\"int8\"/\"fc3\": \"fp32\"/' %s/t.json && grep -q '\"fc3\": \"fp32\"' "
             "%s/t.json", tmp, tmp);
    assert_int_equal(qs_test_run_shell(cmd, NULL), 0);
    /* --allow-emulated: INT8 is native only where oneDNN has VNNI/AMX kernels */
    const char *a = "train " QS_TINY_MLP " --epochs 2 --dropout 0.25 --allow-emulated";
    expect_runf(0, "precisions: 1 x fp32 (native), 2 x int8", "%s --plan %s/t.json --checkpoint-dir %s/full", a, tmp,
                tmp);
    expect_runf(0, "stopping at step 4", "%s --plan %s/t.json --checkpoint-dir %s/part --stop-at 4", a, tmp, tmp);
    expect_runf(1, "was trained with other precisions: fc1 at int8 (this run: fp32)",
                "%s --checkpoint-dir %s/part --resume %s/part", a, tmp, tmp);
    expect_runf(1, "--plan", "%s --precision int8 --checkpoint-dir %s/part --resume %s/part", a, tmp, tmp);
    expect_runf(1, "gradients rounded stochastically (this run: to nearest)",
                "%s --plan %s/t.json --grad-rounding nearest --resume %s/part", a, tmp, tmp);
    /* the checkpoint's own plan */
    expect_runf(0, "resumed from", "%s --plan %s/part --checkpoint-dir %s/part --resume %s/part", a, tmp, tmp, tmp);
    snprintf(cmd, sizeof cmd, "cmp %s/full/model.safetensors %s/part/model.safetensors && "
                              "cmp %s/full/state.safetensors %s/part/state.safetensors", tmp, tmp, tmp, tmp);
    char *out = NULL;
    if (qs_test_run_shell(cmd, &out) != 0) fail_msg("resumed INT8 run differs from the uninterrupted one: %s", out);
    free(out);
    /* evaluation: fp32 by default, or the training plan */
    expect_runf(0, "precisions: 3 x fp32", "eval --checkpoint %s/full --eval-subset 64", tmp);
    expect_runf(0, "\"int8\":\t2", "eval --checkpoint %s/full --eval-subset 64 --plan %s/full --json --allow-emulated",
                tmp, tmp);
    expect_runf(0, "3 x int8", "eval --checkpoint %s/full --eval-subset 64 --precision int8 --allow-emulated", tmp);
    expect_runf(1, "--allow-emulated", "eval --checkpoint %s/full --eval-subset 64 --precision fp16", tmp);
    expect_runf(1, "is for model mlp, but this run's model is cnn", "train " QS_TINY " --steps 1 --plan %s/t.json", tmp);
}

/* FP16 (emulated) turns on dynamic loss scaling; a scale far too large overflows, the steps
 * are skipped and the scale backs off, and the run still finishes. */
static void test_fp16_loss_scaling(void **state) {
    expect_run("train " QS_TINY_MLP " --steps 3 --precision fp16 --allow-emulated", 0,
               "loss scaling dynamic: final scale 65536, 0 steps skipped");
    expect_run("train " QS_TINY_MLP " --steps 3 --precision fp16 --allow-emulated --loss-scale dynamic:1e30 --json", 0,
               "\"skipped_steps\":\t3");
    expect_run("train " QS_TINY_MLP " --steps 3 --precision fp16 --allow-emulated --loss-scale none", 0,
               "test accuracy");
    /* resume must keep the loss scaling */
    const char *tmp = qs_test_tmp;
    expect_runf(0, "stopping at step 1", "train " QS_TINY_MLP " --steps 3 --precision fp16 --allow-emulated "
                "--checkpoint-dir %s/ls --stop-at 1", tmp);
    expect_runf(1, "resume with the same --loss-scale", "train " QS_TINY_MLP " --steps 3 --precision fp16 "
                "--allow-emulated --loss-scale none --resume %s/ls", tmp);
    expect_runf(0, "now at step 3", "train " QS_TINY_MLP " --steps 3 --precision fp16 --allow-emulated --resume %s/ls",
                tmp);
}

/* FP8 delayed scaling resumes bit-exactly (the amax histories travel in state.safetensors), and
 * a checkpoint resumes only under the FP8 scaling it was trained with. */
static void test_resume_fp8_delayed(void **state) {
    const char *tmp = qs_test_tmp;
#define FP8D QS_TINY_MLP " --epochs 2 --precision fp8 --allow-emulated --fp8-scaling delayed:3"
    expect_runf(0, "test accuracy", "train " FP8D " --checkpoint-dir %s/f8full", tmp);
    expect_runf(0, "stopping at step 4", "train " FP8D " --checkpoint-dir %s/f8part --stop-at 4", tmp);
    expect_runf(0, "resumed from", "train " FP8D " --checkpoint-dir %s/f8part --resume %s/f8part", tmp, tmp);
    char args[4096];
    snprintf(args, sizeof args, "cmp %s/f8full/model.safetensors %s/f8part/model.safetensors && "
                                "cmp %s/f8full/state.safetensors %s/f8part/state.safetensors", tmp, tmp, tmp, tmp);
    char *out = NULL;
    int rc = qs_test_run_shell(args, &out);
    if (rc != 0) fail_msg("resumed FP8 delayed-scaling run differs from the uninterrupted one: %s", out);
    free(out);
    expect_runf(1, "it was saved without --fp8-scaling delayed:5",
                "train " QS_TINY_MLP " --epochs 2 --precision fp8 --allow-emulated --fp8-scaling delayed:5 "
                "--checkpoint-dir %s/f8x --resume %s/f8part", tmp, tmp);
    expect_runf(1, "which this run does not keep",
                "train " QS_TINY_MLP " --epochs 2 --precision fp8 --allow-emulated --checkpoint-dir %s/f8y --resume "
                "%s/f8part", tmp, tmp);
#undef FP8D
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
        cmocka_unit_test(test_precision_options),
        cmocka_unit_test(test_bad_plans),
        cmocka_unit_test(test_train_int8),
        cmocka_unit_test(test_bench),
        cmocka_unit_test(test_plan_train_resume_eval),
        cmocka_unit_test(test_fp16_loss_scaling),
        cmocka_unit_test(test_resume_fp8_delayed),
    };
    return cmocka_run_group_tests(tests, qs_test_tmpdir_setup, qs_test_tmpdir_teardown);
}
