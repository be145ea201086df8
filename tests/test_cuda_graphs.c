/* tests/test_cuda_graphs.c — training passes replayed as captured CUDA graphs (graph/capture.c)
 * against the same training run op by op (--no-graphs): the final model and optimizer state
 * must be byte-identical, and the run must say that it replayed every pass after the first of
 * each kind (so a capture that silently fell back fails here). Covers stochastic rounding of
 * BF16 gradients (its step counter read from device memory), batch norm writing BF16 casts
 * (resnet18), FP8 GEMMs with transposed copies (mlp), the transformer with fused attention and
 * stream-ordered scratch (gpt-mini), FP16 with a dynamic loss scale that changes every few
 * steps (the backward pass captured again at each scale), dropout and delayed FP8 scaling
 * (their step read from device memory too), steps taken op by op inside a run (the GPU-busy
 * window), and two ranks sharing the GPU, which must stay op by op and say why.
 * Runs on the GPU machine (scripts/gpu-suite.sh run); elsewhere it says why and exits 77
 * (QS_REQUIRE_GPU=1 makes that a failure). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "core/backend.h"
#include "dist_run.h"
#include "run_cmd.h"

#define STEPS 10
#define COMMON "train --device cuda:0 --no-progress --quiet --json --steps 10 --eval-subset 128"

/* One training configuration and the replayed passes it must report (-1: none, with an
 * eager_reason containing `reason`); ranks > 0: under mpirun with that many ranks. */
typedef struct graph_case {
    const char *name, *args;
    int replayed;
    const char *reason;
    int ranks;
} graph_case;

/* Run `COMMON args --checkpoint-dir tmp/name-tag` (plus `extra`); returns its parsed JSON. */
static cJSON *train(const graph_case *k, const char *tag, const char *extra) {
    char a[1536], cmd[2048], *out = NULL;
    snprintf(a, sizeof a, COMMON " %s %s --checkpoint-dir %s/%s-%s", k->args, extra, qs_test_tmp, k->name, tag);
    qs_test_ranks_command(k->ranks, a, cmd, sizeof cmd);
    int rc = qs_test_run_shell(cmd, &out);
    cJSON *doc = out ? cJSON_Parse(out) : NULL;
    if (rc != 0 || !doc) fail_msg("%s (%s): qsync exited %d:\n%s", k->name, tag, rc, out ? out : "(no output)");
    free(out);
    return doc;
}

static double graphs_field(const cJSON *doc, const char *key) {
    const cJSON *g = cJSON_GetObjectItem(doc, "graphs");
    const cJSON *v = g ? cJSON_GetObjectItem(g, key) : NULL;
    if (!cJSON_IsNumber(v)) fail_msg("no graphs.%s in the output", key);
    return cJSON_GetNumberValue(v);
}

static const char *graphs_reason(const cJSON *doc) {
    const cJSON *g = cJSON_GetObjectItem(doc, "graphs");
    return cJSON_GetStringValue(g ? cJSON_GetObjectItem(g, "eager_reason") : NULL);
}

/* Graph run vs --no-graphs run of one case: checkpoints byte-identical, passes as expected. */
static void check_case(const graph_case *k) {
    cJSON *eager = train(k, "eager", "--no-graphs"), *graphs = train(k, "graphs", "");
    const double replayed = graphs_field(graphs, "replayed_passes"), op_by_op = graphs_field(graphs, "eager_passes");
    const char *why = graphs_reason(graphs);
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cmp %s/%s-eager/model.safetensors %s/%s-graphs/model.safetensors && cmp "
             "%s/%s-eager/state.safetensors %s/%s-graphs/state.safetensors", qs_test_tmp, k->name, qs_test_tmp,
             k->name, qs_test_tmp, k->name, qs_test_tmp, k->name);
    const int same = qs_test_run_shell(cmd, &out) == 0;
    printf("  %-24s %2.0f passes replayed, %2.0f op by op%s%s; model and state %s the op-by-op run's\n", k->name,
           replayed, op_by_op, why ? ": " : "", why ? why : "", same ? "byte-identical to" : "DIFFER from");
    if (k->replayed >= 0) {
        if (replayed != k->replayed)
            fail_msg("%s: %g passes replayed, expected %d (%s)", k->name, replayed, k->replayed, why ? why : "");
    } else if (replayed != 0 || !why || !strstr(why, k->reason)) {
        fail_msg("%s: expected no replay because of \"%s\", got %g replays (%s)", k->name, k->reason, replayed,
                 why ? why : "no reason");
    }
    if (graphs_field(eager, "replayed_passes") != 0) fail_msg("%s: --no-graphs replayed passes", k->name);
    if (!same) fail_msg("%s: the graph run differs from the op-by-op run: %s", k->name, out ? out : "");
    free(out);
    cJSON_Delete(eager);
    cJSON_Delete(graphs);
}

/* Every pass after the first of each kind is replayed: 2 · (STEPS − 1). */
static void test_replay_bit_exact(void **state) {
    (void)state;
    const int all = 2 * (STEPS - 1);
    static const char *const gpt = "--model gpt-mini --data synthetic-text:256:64 --batch 16 --optimizer adamw "
                                   "--lr 1e-3";
    char gpt_bf16[256], gpt_fp8[256];
    snprintf(gpt_bf16, sizeof gpt_bf16, "%s --precision bf16", gpt);
    snprintf(gpt_fp8, sizeof gpt_fp8, "%s --precision fp8", gpt);
    const graph_case cases[] = {
        {"cnn-bf16", "--model cnn --width 8 --data synthetic --batch 64 --train-subset 1280 --precision bf16", all, NULL, 0},
        {"resnet18-bf16", "--model resnet18 --width 8 --data synthetic:32x32x3 --batch 32 --train-subset 640 "
                          "--precision bf16", all, NULL, 0},
        {"mlp-fp8", "--model mlp --width 256 --data synthetic --batch 64 --train-subset 1280 --precision fp8", all,
         NULL, 0},
        {"cnn-fp16-dynamic-scale", "--model cnn --width 8 --data synthetic --batch 64 --train-subset 1280 "
                                   "--precision fp16 --loss-scale dynamic --loss-scale-window 3", all, NULL, 0},
        {"gpt-mini-bf16", gpt_bf16, all, NULL, 0},
        {"gpt-mini-fp8", gpt_fp8, all, NULL, 0},
        /* GPU-busy steps 3-5 run op by op (events around every op); the graphs replay after them */
        {"cnn-bf16-busy-window", "--model cnn --width 8 --data synthetic --batch 64 --train-subset 1280 "
                                 "--precision bf16 --gpu-busy-steps 3", 2 * (STEPS - 4), NULL, 0},
        {"cnn-dropout", "--model cnn --width 8 --data synthetic --batch 64 --train-subset 1280 --precision bf16 "
                        "--dropout 0.25", all, NULL, 0},
        {"gpt-mini-dropout", "--model gpt-mini --data synthetic-text:256:64 --batch 16 --optimizer adamw --lr 1e-3 "
                             "--precision bf16 --dropout 0.1", all, NULL, 0},
        {"mlp-fp8-delayed", "--model mlp --width 256 --data synthetic --batch 64 --train-subset 1280 --precision fp8 "
                            "--fp8-scaling delayed:4", all, NULL, 0},
        {"cnn-bf16-2-ranks", "--model cnn --width 8 --data synthetic --batch 64 --train-subset 1280 --precision bf16",
         -1, "data parallelism", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

int main(void) {
    const int rc = qs_test_gpu_suite_start("test_cuda_graphs");
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_bit_exact),
    };
    return cmocka_run_group_tests(tests, qs_test_mpi_tmpdir_setup, qs_test_tmpdir_teardown);
}
