/* tests/test_cuda_dist.c — data parallelism between ranks that share one GPU (the ipc transport
 * of the communication interface, src/parallel/coll.h) under the real launcher: 1 rank × batch B against 2 ranks
 * × B/2 and 3 ranks × B/3 at FP32, replicas compared after every step at FP32, BF16 and FP8
 * and for a transformer (tied embedding), FP8 products reading the layers' transposed copies
 * against products making their own (bitwise equal), resume on the GPU byte-identical to an
 * uninterrupted run, training on an SM partition (green context) against the whole GPU, the
 * indicator on the GPU against the CPU, a stalled rank ending the job with a message, every
 * collective of the interface on the ipc transport (2 and 3 ranks) and on the nccl transport
 * (one rank).
 * Runs on the GPU machine (scripts/gpu-suite.sh run); elsewhere it says why and exits 77
 * (QS_REQUIRE_GPU=1 makes that a failure).
 *
 * The FP32 bound is the CPU suite's (tests/test_dist.c: the runs differ by the order of the
 * reductions only; 10⁻⁵ of each tensor's largest value after 20 steps at these settings).
 * cuBLASLt may choose other kernels for the half batch, which changes the summation order
 * inside each GEMM too — a rounding difference of the same kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "backends/backends.h"
#include "coll_check.h"
#include "parallel/coll.h"
#include "parallel/comm.h"
#include "dist_run.h"
#include "run_cmd.h"

#define QS_GPU_DIST_ARGS                                                                                         \
    "train --device cuda:0 --data synthetic --width 8 --train-subset 2560 --eval-subset 256 --steps 20 "           \
    "--lr 0.01 --schedule constant --warmup 0 --no-progress --quiet --check-replicas 1"

/* 1 × n·k against k ranks × n at FP32 (model `model`): the checkpoints' largest relative
 * difference. */
static double ranks_vs_one(const char *model, int ranks, int local_batch) {
    char a[768], d1[256], dk[256];
    snprintf(d1, sizeof d1, "%s/%s-one-%d", qs_test_tmp, model, ranks);
    snprintf(dk, sizeof dk, "%s/%s-ranks-%d", qs_test_tmp, model, ranks);
    snprintf(a, sizeof a, QS_GPU_DIST_ARGS " --model %s --batch %d --checkpoint-dir %s", model, ranks * local_batch, d1);
    qs_test_run_ranks(0, a, 0, NULL);
    snprintf(a, sizeof a, QS_GPU_DIST_ARGS " --model %s --batch %d --checkpoint-dir %s", model, ranks * local_batch, dk);
    qs_test_run_ranks(ranks, a, 0, NULL);
    return qs_test_checkpoint_max_rel_diff(d1, dk);
}

/* cnn on 2 ranks; mlp on 3. cnn at 1 × 48 against 3 × 16 (measured on the H200, 2026-12-03):
 * 1.0·10⁻⁷ after 1 and 5 steps, then 2.2·10⁻³ after 20 — a rounding difference amplified by
 * training (a flipped max-pool or ReLU choice, as tests/test_dist.c describes), not a fault of
 * the reduction; two 1 × 48 runs are bit-identical. */
static void test_fp32_equivalence(void **state) {
    (void)state;
    double r2 = ranks_vs_one("cnn", 2, 32);
    printf("  cnn: 1 rank x 64 vs 2 ranks x 32 on one GPU, 20 steps: max relative weight difference %.3e (bound "
           "1e-5)\n", r2);
    assert_true(r2 <= 1e-5);
    double r3 = ranks_vs_one("mlp", 3, 16);
    printf("  mlp: 1 rank x 48 vs 3 ranks x 16 on one GPU, 20 steps: max relative weight difference %.3e (bound "
           "1e-5)\n", r3);
    assert_true(r3 <= 1e-5);
}

/* The ranks quantize their own half batches; every step's parameters must still be identical
 * on both ranks (--check-replicas 1 fails the job otherwise). */
static void test_low_precision_replicas(void **state) {
    (void)state;
    static const char *const precs[] = {"bf16", "fp8"};
    for (size_t k = 0; k < sizeof precs / sizeof *precs; k++) {
        char a[768];
        snprintf(a, sizeof a, QS_GPU_DIST_ARGS " --batch 64 --precision %s", precs[k]);
        qs_test_run_ranks(2, a, 0, NULL);
        printf("  cnn %s, 2 ranks on one GPU: replicas identical after each of 20 steps\n", precs[k]);
    }
    qs_test_run_ranks(2,
                      "train --device cuda:0 --model gpt-mini --data synthetic-text:256:64 --batch 16 --steps 10 "
                      "--optimizer adamw --lr 1e-3 --precision bf16 --eval-subset 64 --no-progress --quiet "
                      "--check-replicas 1",
                      0, NULL);
    printf("  gpt-mini bf16 (tied embedding), 2 ranks on one GPU: replicas identical after each of 10 steps\n");
}

/* FP8 training reading the layers' transposed copies (the default) against the same run with
 * QS_CUDA_FP8_TRANSPOSED=0 (every product transposes its operands itself): the checkpoints must
 * be bitwise equal — the products read the same bytes either way; also under delayed scaling
 * (the amax recorded by the tiled quantizer). One process each. */
static void test_fp8_transposed_copies(void **state) {
    (void)state;
    static const char *const runs[][2] = {
        {"mlp", "train --device cuda:0 --model mlp --data synthetic --batch 64 --steps 10 --train-subset 1280 "
                "--eval-subset 256 --precision fp8 --no-progress --quiet"},
        {"gpt-mini", "train --device cuda:0 --model gpt-mini --data synthetic-text:256:64 --batch 16 --steps 10 "
                     "--optimizer adamw --lr 1e-3 --precision fp8 --eval-subset 64 --no-progress --quiet"},
        {"gpt-mini-delayed", "train --device cuda:0 --model gpt-mini --data synthetic-text:256:64 --batch 16 --steps 10 "
                             "--optimizer adamw --lr 1e-3 --precision fp8 --fp8-scaling delayed:4 --eval-subset 64 "
                             "--no-progress --quiet"},
    };
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        char a[768], d_on[256], d_off[256];
        snprintf(d_on, sizeof d_on, "%s/%s-fp8-transposed", qs_test_tmp, runs[k][0]);
        snprintf(d_off, sizeof d_off, "%s/%s-fp8-own-copies", qs_test_tmp, runs[k][0]);
        snprintf(a, sizeof a, "%s --checkpoint-dir %s", runs[k][1], d_on);
        qs_test_run_ranks(0, a, 0, NULL);
        setenv("QS_CUDA_FP8_TRANSPOSED", "0", 1);
        snprintf(a, sizeof a, "%s --checkpoint-dir %s", runs[k][1], d_off);
        qs_test_run_ranks(0, a, 0, NULL);
        unsetenv("QS_CUDA_FP8_TRANSPOSED");
        double diff = qs_test_checkpoint_max_rel_diff(d_on, d_off);
        printf("  %s fp8, 10 steps: transposed copies vs products' own: max relative weight difference %.3e "
               "(must be 0)\n", runs[k][0], diff);
        assert_true(diff == 0.0);
    }
}

/* Resume on the GPU: a run stopped at step 4 of 8 and resumed from its checkpoint ends with
 * byte-identical model and optimizer state to the uninterrupted run — cnn with dropout at BF16
 * (SGD), gpt-mini at FP8 (AdamW), also with delayed scaling (the amax histories restored; a
 * 16-step history keeps the slots of steps 0-3 to the end), and gpt-mini at BF16, whose
 * attention runs fused (its deterministic backward). One process each. */
static void test_resume_bit_exact(void **state) {
    (void)state;
    static const char *const runs[][2] = {
        {"cnn-bf16", "train --device cuda:0 --model cnn --width 8 --data synthetic --batch 64 --steps 8 --dropout 0.25 "
                     "--train-subset 1280 --eval-subset 256 --precision bf16 --no-progress --quiet"},
        {"gpt-mini-fp8", "train --device cuda:0 --model gpt-mini --data synthetic-text:256:64 --batch 16 --steps 8 "
                         "--optimizer adamw --lr 1e-3 --precision fp8 --eval-subset 64 --no-progress --quiet"},
        {"gpt-mini-fp8-delayed", "train --device cuda:0 --model gpt-mini --data synthetic-text:256:64 --batch 16 "
                                 "--steps 8 --optimizer adamw --lr 1e-3 --precision fp8 --fp8-scaling delayed:16 "
                                 "--eval-subset 64 --no-progress --quiet"},
        {"gpt-mini-bf16-fused-attention", "train --device cuda:0 --model gpt-mini --data synthetic-text:256:64 "
                                          "--batch 16 --steps 8 --optimizer adamw --lr 1e-3 --precision bf16 "
                                          "--eval-subset 64 --no-progress --quiet"},
    };
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        char a[1024], full[256], part[256];
        snprintf(full, sizeof full, "%s/%s-full", qs_test_tmp, runs[k][0]);
        snprintf(part, sizeof part, "%s/%s-part", qs_test_tmp, runs[k][0]);
        snprintf(a, sizeof a, "%s --checkpoint-dir %s", runs[k][1], full);
        qs_test_run_ranks(0, a, 0, NULL);
        snprintf(a, sizeof a, "%s --checkpoint-dir %s --stop-at 4", runs[k][1], part);
        qs_test_run_ranks(0, a, 0, NULL);
        snprintf(a, sizeof a, "%s --checkpoint-dir %s --resume %s", runs[k][1], part, part);
        qs_test_run_ranks(0, a, 0, NULL);
        char cmd[1280], *out = NULL;
        snprintf(cmd, sizeof cmd, "cmp %s/model.safetensors %s/model.safetensors && cmp %s/state.safetensors "
                                  "%s/state.safetensors", full, part, full, part);
        int rc = qs_test_run_shell(cmd, &out);
        printf("  %s: stopped at 4 of 8 and resumed on the GPU: %s\n", runs[k][0],
               rc == 0 ? "model and state byte-identical to the uninterrupted run" : "DIFFERENT");
        if (rc != 0) fail_msg("%s: resumed run differs from the uninterrupted one: %s", runs[k][0], out);
        free(out);
    }
}

/* 2 s into training rank 1 is stopped (SIGSTOP): rank 0 must end the job through the
 * collective timeout, naming rank 1. `timeout 180` only turns a hang into a failure. */
/* --gpu-busy-steps: the GPU time inside the ops over 5 steps, as a share of their wall time —
 * a fraction in (0, 1], over exactly those steps, and with every op bracketed the busy time of
 * a cnn step is most of it but not more than all of it. */
static void test_gpu_busy(void **state) {
    (void)state;
    char *out = NULL;
    qs_test_run_ranks_output(0, "train --device cuda:0 --model cnn --data synthetic --batch 256 --steps 12 "
                                "--train-subset 4096 --eval-subset 256 --precision bf16 --gpu-busy-steps 5 --json "
                                "--no-progress --quiet", &out);
    cJSON *doc = out ? cJSON_Parse(out) : NULL, *b = cJSON_GetObjectItem(doc, "gpu_busy");
    if (!b) fail_msg("no \"gpu_busy\" object in the output: %s", out ? out : "(none)");
    const double f = cJSON_GetNumberValue(cJSON_GetObjectItem(b, "fraction")),
                 busy = cJSON_GetNumberValue(cJSON_GetObjectItem(b, "busy_ms_per_step")),
                 step = cJSON_GetNumberValue(cJSON_GetObjectItem(b, "step_ms")),
                 n = cJSON_GetNumberValue(cJSON_GetObjectItem(b, "steps"));
    printf("  cnn bf16 batch 256: GPU busy %.1f%% (%.3f of %.3f ms per step, %g steps)\n", 100 * f, busy, step, n);
    assert_true(n == 5);
    assert_true(busy > 0 && busy <= step && f > 0 && f <= 1);
    assert_true(fabs(f - busy / step) < 1e-9);
    cJSON_Delete(doc);
    free(out);
}

/* An SM partition (QS_CUDA_SM_PARTITION, a green context: src/cuda/cuda_green.h): mlp at FP32
 * trained on 16 SMs ends within the rank-equivalence bound of the run on the whole GPU (the
 * same kernels on fewer SMs), a profile taken under it records the partition and its 16 SMs
 * (the backend's facts), and malformed or impossible partitions are refused with the
 * device's granularity. The step times are printed, not asserted. One process each. */
static void test_sm_partition(void **state) {
    (void)state;
    static const char *const args = "train --device cuda:0 --model mlp --data synthetic --batch 256 --steps 10 "
                                    "--train-subset 2560 --eval-subset 256 --no-progress --quiet --json";
    char a[768], d_all[256], d_part[256], *out = NULL;
    snprintf(d_all, sizeof d_all, "%s/mlp-all-sms", qs_test_tmp);
    snprintf(d_part, sizeof d_part, "%s/mlp-16-sms", qs_test_tmp);
    snprintf(a, sizeof a, "%s --checkpoint-dir %s", args, d_all);
    qs_test_run_ranks(0, a, 0, NULL);
    setenv("QS_CUDA_SM_PARTITION", "8:16", 1);
    snprintf(a, sizeof a, "%s --checkpoint-dir %s", args, d_part);
    qs_test_run_ranks_output(0, a, &out);
    double diff = qs_test_checkpoint_max_rel_diff(d_all, d_part);
    cJSON *doc = out ? cJSON_Parse(out) : NULL;
    const double ms =
        cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "workers"), 0),
                                                 "median_step_ms"));
    printf("  mlp fp32 on SMs 8-23: max relative weight difference to the whole GPU %.3e (bound 1e-5); median step "
           "%.3f ms\n", diff, ms);
    assert_true(diff <= 1e-5);
    cJSON_Delete(doc);
    free(out);
    out = NULL;
    snprintf(a, sizeof a, "profile --device cuda:0 --model mlp --data synthetic --batch 64 --precisions fp32 "
             "--warmup 1 --reps 3 --out %s/profile-16-sms.json --quiet", qs_test_tmp);
    qs_test_run_ranks(0, a, 0, NULL);
    snprintf(a, sizeof a, "%s/profile-16-sms.json", qs_test_tmp);
    FILE *f = fopen(a, "rb");
    assert_non_null(f);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    doc = cJSON_Parse(text);
    const cJSON *dev = cJSON_GetObjectItem(doc, "device");
    printf("  profile under the partition: device sms %g, sm_partition %s\n",
           cJSON_GetNumberValue(cJSON_GetObjectItem(dev, "sms")),
           cJSON_GetStringValue(cJSON_GetObjectItem(dev, "sm_partition")));
    assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(dev, "sms")) == 16);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(dev, "sm_partition")), "8:16");
    cJSON_Delete(doc);
    static const char *const bad[][2] = {
        {"0:12", "offset and count must be multiples of 8"},
        {"4:16", "offset and count must be multiples of 8"},
        {"0:4096", "offset + count at most"},
        {"16", "expected \"<offset>:<count>\""},
        {"0:0", "expected \"<offset>:<count>\""},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        setenv("QS_CUDA_SM_PARTITION", bad[k][0], 1);
        qs_test_run_ranks(0, args, -2, bad[k][1]);
        printf("  QS_CUDA_SM_PARTITION=%s refused\n", bad[k][0]);
    }
    unsetenv("QS_CUDA_SM_PARTITION");
}

/* Largest relative difference between the numbers at the same places of two JSON trees (1 when
 * their shapes differ). */
static double json_max_rel_diff(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) {
        double x = a->valuedouble, y = b->valuedouble, m = fmax(fabs(x), fabs(y));
        return m > 0 ? fabs(x - y) / m : 0;
    }
    if (cJSON_IsObject(a) != cJSON_IsObject(b) || cJSON_IsArray(a) != cJSON_IsArray(b)) return 1;
    if (!cJSON_IsObject(a) && !cJSON_IsArray(a)) return cJSON_Compare(a, b, true) ? 0 : 1;
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return 1;
    double worst = 0;
    const cJSON *x, *y = b->child;
    for (x = a->child; x && y; x = x->next, y = y->next) {
        if (x->string && (!y->string || strcmp(x->string, y->string) != 0)) return 1;
        worst = fmax(worst, json_max_rel_diff(x, y));
    }
    return worst;
}

/* `qsync indicate --device cuda:0` against the CPU: every statistic, rounding error and ω of
 * every layer of an mlp (2 batches of 256) within 10⁻³ relative. The FP32 GEMMs differ in
 * summation order (≈10⁻⁶ relative); a rounding error moves only where a value crosses a
 * rounding boundary (a fraction ≈ 10⁻⁶/2⁻⁸ of the elements for BF16, fewer for the narrower
 * formats), and the stochastic draws are the same: 10⁻³ covers both with room. */
static void test_indicator_on_gpu(void **state) {
    (void)state;
    char a[768], *out = NULL;
    cJSON *doc[2] = {NULL, NULL};
    const char *const dev[2] = {"cpu", "cuda:0"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "indicate --model mlp --width 64 --data synthetic --batch 256 --batches 2 --device %s "
                 "--out %s/ind-%d.json --json --quiet", dev[k], qs_test_tmp, k);
        int rc = qs_test_run_qsync(a, &out);
        if (rc != 0) fail_msg("qsync %s: exit %d\n%s", a, rc, out ? out : "");
        doc[k] = cJSON_Parse(out);
        free(out);
        out = NULL;
        assert_non_null(doc[k]);
    }
    double diff = json_max_rel_diff(cJSON_GetObjectItem(doc[0], "layers"), cJSON_GetObjectItem(doc[1], "layers"));
    printf("  indicator on the GPU against the CPU: largest relative difference %.3e (bound 1e-3)\n", diff);
    assert_true(diff <= 1e-3);
    cJSON_Delete(doc[0]);
    cJSON_Delete(doc[1]);
}

static void test_stalled_rank(void **state) {
    (void)state;
    const char *bin = getenv("QS_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 180 mpirun -np 2 --oversubscribe -x LD_LIBRARY_PATH sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; "
             "then (sleep 4; kill -STOP $$) & fi; exec %s train --device cuda:0 --data synthetic --model cnn --width 8 "
             "--batch 64 --steps 1000000 --train-subset 2560 --no-progress --quiet --collective-timeout 5'",
             bin);
    char *out = NULL;
    int rc = qs_test_run_shell(cmd, &out);
    printf("  rank 1 stopped: exit %d\n", rc);
    if (rc == 124 || rc == 0 || !strstr(out, "rank 1 (silent for"))
        fail_msg("%s\n  exit %d, output:\n%s\n  (wanted a non-zero exit naming rank 1)", cmd, rc, out);
    free(out);
}

/* Every collective of the communication interface on device buffers (tests/support/
 * coll_check.h): the ipc transport on 2 and 3 ranks sharing GPU 0 (this program launched
 * again under mpirun, main's first branch), with its rank-order sums compared bit for bit. */
static void test_ipc_collectives(void **state) {
    (void)state;
    qs_test_expect_self_ranks(2, "ipc");
    qs_test_expect_self_ranks(3, "ipc");
}

/* One rank's part of test_ipc_collectives. */
static int ipc_rank(int argc, char **argv) {
    qs_comm *comm = NULL;
    qs_backend *be = NULL;
    qs_coll *c = NULL;
    if (qs_comm_init(&argc, &argv, &comm) != QS_OK || qs_backend_cuda_create(0, &be) != QS_OK) {
        printf("FAIL set-up: %s\n", qs_last_error());
        return 1;
    }
    const qs_coll_options o = {.transport = QS_COLL_AUTO, .be = be, .max_inflight = 8, .timeout_s = 60};
    if (qs_coll_open(comm, &o, &c) != QS_OK) {
        printf("FAIL open: %s\n", qs_last_error());
        return 1;
    }
    int checks = 0;
    const int fails = qs_test_coll_checks(c, be, &checks);
    printf("rank %d of %d: %d checks on the %s transport, %d failed\n", qs_comm_rank(comm), qs_comm_world(comm),
           checks, qs_coll_transport_name(qs_coll_transport_of(c)), fails);
    qs_coll_close(c);
    be->ops->destroy(be);
    qs_comm_finalize(comm);
    return fails ? 1 : 0;
}

/* The NCCL transport on one rank (the only NCCL job one GPU can hold: NCCL refuses two ranks on
 * one GPU; between GPUs it runs on a multi-GPU machine): one rank's layout is "shared" on one
 * GPU; libnccl.so.2 is loaded and the communicator made; two halves of a buffer written on the
 * caller's stream are reduced in place on the transport's stream after those writes (a sum over
 * one rank: bit-identical), and the caller's stream reads the results after the waits; then
 * every collective of tests/support/coll_check.h over one rank. */
static void test_nccl_one_rank(void **state) {
    (void)state;
    int argc = 1;
    char arg0[] = "test_cuda_dist", *args[] = {arg0, NULL}, **argv = args;
    qs_comm *comm = NULL;
    qs_backend *be = NULL;
    assert_int_equal(qs_comm_init(&argc, &argv, &comm), QS_OK);
    assert_int_equal(qs_backend_cuda_create(0, &be), QS_OK);
    qs_gpu_layout layout;
    int gpus = 0;
    assert_int_equal(qs_coll_gpu_layout(be, comm, 30, &layout, &gpus), QS_OK);
    assert_int_equal(layout, QS_GPUS_SHARED);
    assert_int_equal(gpus, 1);
    const size_t n = (size_t)1 << 22;
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back), *d = NULL;
    assert_non_null(h);
    assert_non_null(back);
    for (size_t i = 0; i < n; i++) h[i] = (float)i * 0.5f - 7.25f;
    qs_stream *s = be->ops->default_stream(be);
    assert_int_equal(be->ops->alloc(be, n * sizeof *h, (void **)&d), QS_OK);
    assert_int_equal(be->ops->copy_h2d(be, s, d, h, n * sizeof *h), QS_OK);
    const qs_coll_options o = {.transport = QS_COLL_NCCL, .be = be, .timeout_s = 30};
    qs_coll *x = NULL;
    if (qs_coll_open(comm, &o, &x) != QS_OK) fail_msg("%s", qs_last_error());
    int r0 = -1, r1 = -1;
    assert_int_equal(qs_coll_allreduce(x, d, (int64_t)n / 2, QS_F32, s, &r0), QS_OK);
    assert_int_equal(qs_coll_allreduce(x, d + n / 2, (int64_t)n / 2, QS_F32, s, &r1), QS_OK);
    assert_int_equal(qs_coll_progress(x), QS_OK);
    assert_int_equal(qs_coll_wait(x, r0, 30), QS_OK);
    assert_int_equal(qs_coll_wait(x, r1, 30), QS_OK);
    assert_int_equal(be->ops->copy_d2h(be, s, back, d, n * sizeof *h), QS_OK);
    assert_int_equal(be->ops->stream_sync(be, s), QS_OK);
    assert_memory_equal(back, h, n * sizeof *h);
    printf("  NCCL on one rank: %zu floats in two ranges, bit-identical after the waits\n", n);
    int checks = 0;
    const int fails = qs_test_coll_checks(x, be, &checks);
    printf("  NCCL on one rank: %d checks, %d failed\n", checks, fails);
    assert_int_equal(fails, 0);
    qs_coll_close(x);
    be->ops->free(be, d);
    be->ops->destroy(be);
    qs_comm_finalize(comm);
    free(h);
    free(back);
}

int main(int argc, char **argv) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) return ipc_rank(argc, argv);
    const int rc = qs_test_gpu_suite_start("test_cuda_dist");
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_equivalence),
        cmocka_unit_test(test_low_precision_replicas),
        cmocka_unit_test(test_fp8_transposed_copies),
        cmocka_unit_test(test_resume_bit_exact),
        cmocka_unit_test(test_gpu_busy),
        cmocka_unit_test(test_sm_partition),
        cmocka_unit_test(test_indicator_on_gpu),
        cmocka_unit_test(test_stalled_rank),
        cmocka_unit_test(test_ipc_collectives),
        cmocka_unit_test(test_nccl_one_rank),
    };
    return cmocka_run_group_tests(tests, qs_test_mpi_tmpdir_setup, qs_test_tmpdir_teardown);
}
