/* tests/test_backend_ops.c — defines: the cross-backend op test (in the manner of ggml's
 * test-backend-ops): every row of the registry (tests/backend_ops/) run on every backend under
 * test against the CPU backend on the very same inputs, plus the facts (device, refusals,
 * argument errors, plan lifetimes) as ordinary tests; and `--perf`, which times the rows.
 *
 *   build/tests/test_backend_ops [--filter SUBSTR] [--backend cuda|cpu]       the test (ctest)
 *   build/tests/test_backend_ops --perf [--filter SUBSTR] [--reps N] [--backend cuda|cpu]
 *
 * Backends under test (DUTs): the CUDA backend when it can be created (QS_CUDA_DEVICE, default
 * 0; its absence is printed, and is a failure with QS_REQUIRE_GPU=1, which scripts/gpu-suite.sh
 * sets), then a second CPU backend, so that without a GPU every row, the runner and the harness
 * still run for real (there the two sides agree exactly: every budget is met with a figure of 0).
 * The reference is a 1-thread CPU backend. QS_GPU_TESTS_JSON=FILE writes every case's figure
 * with its backend to FILE.
 *
 * A row (tests/backend_ops/bo.h: bo_row) is {op, precisions, shapes, inputs, budget}:
 *  - op: a bo_op — how the case's tensors are made from its shape (inputs), planned, run (exec:
 *    written once, for either side) and judged (by default every output by the row's budget);
 *  - precisions: a BO_P list; the row expands over it, one cmocka test per precision and backend
 *    ("test_linear_forward_fp8 (cuda)"), and over its shapes, one case each;
 *  - inputs: seeded (qs_rng_key(the op's seed_key, what, shape)), made ONCE on the host — GEMM
 *    operands quantized by the reference's quantize — and copied to both sides;
 *  - budget: a function of the case and the output, the derived error budget of that op (the
 *    derivations stand beside the functions: ops_gemm.c, ops_bmm.c, ops_gemm_bf16.c, and the
 *    tolerance rule of gpu_harness.h / tests/support/check.h for the memory-bound ops);
 *  - fp64 (optional): where the CPU op is itself approximate, its outputs against an FP64
 *    reference computed in the test, at one implementation's budget (run with the CPU backend).
 * Outputs on the DUT are guarded views filled with 0xFF (NaN) before the op; every guard is
 * checked when an output is read back and when the case's memory is released; the teardown
 * reports a memory_stats in_use that does not come back.
 *
 * A precision the DUT does not run (precision_support: INT8 on CUDA, TF32 on the CPU) must be
 * refused by the plan (QS_ERR_UNSUPPORTED naming it), which is that row's check there; other
 * backend-specific expectations are written in their op's judge (embedding ids out of range:
 * zero rows on CUDA, refused by the CPU).
 *
 * Adding a precision to an op is one entry in its row's precision list. The Linear forward row
 * (tests/backend_ops/ops_gemm.c)
 *     {&bo_linear_forward, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_lin), BO_CPU_SHAPES(k_lin_cpu),
 *      .budget = gemm_linear_nmse, .fp64 = gemm_forward_fp64},
 * runs at FP32, TF32, BF16, FP16, FP8 (BO_GEMM_PRECS) and INT8 over the shapes k_lin (k_lin_cpu
 * on the CPU backend); INT8 was added by writing `| BO_P(INT8)`, and the same for FP16 in the
 * BF16-output row {&bo_linear_forward_y_bf16, BO_P(BF16) | BO_P(FP8), ...} is all it takes (the
 * row's budget function, here gemm_budget's terms, says what the precision costs). Adding an op:
 * define its bo_op (inputs, plan, exec, flops) in the op file of its family, add a row table to
 * that file and its name to ops_registry.c.
 *
 * --perf: every matching row on every DUT, the median of --reps runs (default 20) after one
 * warm-up — on a backend with events (CUDA) between two events, else wall-clock around the op
 * and a stream_sync — printed as op, precision, shape, backend, ms, and TFLOP/s (GEMM-like ops,
 * from the op's FLOP count) or GB/s (the bytes of the case's tensors, each read or written
 * once). No thresholds: numbers for docs/BENCHMARKS.md, not pass/fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend_ops/bo.h"
#include "backend_ops/facts.h"
#include "gpu_harness.h"

static const char *g_filter;
static int g_reps = 20;

/* A cmocka test of the registry: one row at one precision on the current DUT. */
typedef struct row_test_arg {
    const bo_row *row;
    qs_precision prec;
    char name[200];
} row_test_arg;

static void row_test(void **state) {
    const row_test_arg *a = *state;
    g_test = a->name;
    g_fail = 0;
    bo_run_row(a->row, a->prec, g_filter);
    END();
}

/* --perf as one cmocka test (the harness asserts through cmocka). */
static void perf_test(void **state) {
    (void)state;
    g_test = "perf";
    g_fail = 0;
    printf("%-64s %-5s %13s %17s\n", "op precision shape", "backend", "median", "rate");
    for (const bo_row *const *list = bo_registry; *list; list++)
        for (const bo_row *r = *list; r->op; r++)
            for (int p = 0; p < (r->precs ? QS_PREC_COUNT : 1); p++)
                if (!r->precs || (r->precs & (1u << p))) bo_perf_row(r, (qs_precision)p, g_filter, g_reps);
    END();
}

/* The tests of the current DUT: the facts, then every row at every precision that matches the
 * filter; names carry the backend. Returns their number (tests[] and args[] of n_max). */
static int build_tests(struct CMUnitTest *tests, row_test_arg *args, int n_max) {
    int n = 0;
    char buf[150];
    for (size_t i = 0; i < bo_nfacts; i++) {
        if (g_filter && !strstr(bo_facts[i].name, g_filter)) continue;
        if (n == n_max) return n;
        snprintf(args[n].name, sizeof args[n].name, "%s (%s)", bo_facts[i].name, DOPS->name);
        tests[n] = bo_facts[i];
        tests[n].name = args[n].name;
        n++;
    }
    for (const bo_row *const *list = bo_registry; *list; list++)
        for (const bo_row *r = *list; r->op; r++)
            for (int p = 0; p < (r->precs ? QS_PREC_COUNT : 1); p++) {
                if (r->precs && !(r->precs & (1u << p))) continue;
                if (!bo_row_matches(r, (qs_precision)p, g_filter)) continue;
                if (n == n_max) {
                    fprintf(stderr, "test_backend_ops: more than %d tests; raise MAX_TESTS\n", n_max);
                    return n;
                }
                bo_row_name(r, (qs_precision)p, r->precs != 0, buf, sizeof buf);
                args[n].row = r;
                args[n].prec = (qs_precision)p;
                snprintf(args[n].name, sizeof args[n].name, "test_%s (%s)", buf, DOPS->name);
                tests[n] = (struct CMUnitTest){args[n].name, row_test, NULL, teardown, &args[n]};
                n++;
            }
    return n;
}

/* Options into the globals; returns 0, or 2 after printing the usage. */
static int parse_args(int argc, char **argv, bool *perf, const char **backend) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--perf") == 0) *perf = true;
        else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) g_filter = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) g_reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) *backend = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--perf] [--filter SUBSTR] [--reps N] [--backend cuda|cpu]\n", argv[0]);
            return 2;
        }
    }
    return 0;
}

enum { MAX_TESTS = 1024 };
static struct CMUnitTest g_tests[MAX_TESTS];
static row_test_arg g_args[MAX_TESTS];

int main(int argc, char **argv) {
    bool perf = false;
    const char *backend = NULL;
    if (parse_args(argc, argv, &perf, &backend)) return 2;
    const gh_suite suite = {.name = "test_backend_ops", .seed_key = 20261202, .name_width = 72};
    qs_backend *duts[2];
    int ndut = 0;
    const int rc = gh_open(&suite, backend, duts, &ndut);
    if (rc) return rc;
    int failed = 0;
    for (int d = 0; d < ndut; d++) {
        gh_use(duts[d]);
        for (int p = 0; p < QS_PREC_COUNT; p++)
            printf("  %s precision %-5s %s\n", DOPS->name, qs_precision_name((qs_precision)p),
                   qs_prec_support_name(DOPS->precision_support(g_dut, (qs_precision)p)));
        if (perf) {
            const struct CMUnitTest one[] = {{"perf", perf_test, NULL, teardown, NULL}};
            failed += _cmocka_run_group_tests(DOPS->name, one, 1, NULL, NULL);
            continue;
        }
        const int n = build_tests(g_tests, g_args, MAX_TESTS);
        failed += _cmocka_run_group_tests(DOPS->name, g_tests, (size_t)n, NULL, NULL);
    }
    return gh_finish(failed);
}
