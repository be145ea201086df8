/* tests/test_cuda_transformer_ops.c — the CUDA backend's transformer operators (batched matmul,
 * layer norm, GELU, tanh, embedding, position add, head permutes, masked softmax) against the
 * CPU backend run on the very same inputs. Runs on the GPU machine (scripts/gpu-suite.sh run);
 * elsewhere (a build without CUDA, or no usable device) it says why and exits 77, which ctest
 * reports as SKIPPED. With QS_REQUIRE_GPU=1 a missing GPU is a failure instead. QS_CUDA_DEVICE
 * picks the device (default 0); QS_GPU_TESTS_JSON=FILE writes every case's figure to FILE.
 *
 * Method (as tests/test_cuda_ops.c; both use the harness of tests/support/gpu_harness.h)
 *  - An op that either backend's table lacks (a NULL entry) is a failed case naming the op and
 *    the file that should provide it; the rest of that test is skipped, nothing crashes.
 *  - Batched matmul: random FP32 tensors are quantized ONCE, by the CPU backend's quantize op,
 *    into the plan's operand dtypes (per-tensor scales over the whole batched tensor); codes and
 *    scales are copied to the GPU, so both backends multiply identical operands. TF32 has no CPU
 *    counterpart: its reference is the CPU's FP32 plan on the same FP32 operands. INT8 must be
 *    refused by the GPU plan (QS_ERR_UNSUPPORTED naming int8), as for Linear.
 *  - Every GPU output is an offset view into a larger allocation with GUARD bytes of a pattern
 *    before and after it (checked after the op), and an overwritten output is filled with 0xFF
 *    bytes (NaN) first, so an element the op forgets to write shows up as a mismatch.
 *  - Every comparison prints one line with its figure; failures are counted and each test fails
 *    at its end, after all its cases have been printed.
 *
 * NMSE budgets of the batched matmul: those of test_cuda_ops.c's Linear (derivation there),
 *   budget = 10·(u²·(K + 2 + e) + A8(K)·[FP8] + I_tf32·[TF32]),   A8(K) = 2^-26·(min(K,128) + 2),
 *   I_tf32 = (7/6)·2^-20, K the reduction length of the output (forward K, backward-a N,
 *   backward-b M) and e the extra roundings of this op: +1 for alpha ≠ 1 (the CPU rounds the
 *   product, then multiplies by alpha; cuBLASLt scales inside its epilogue), +1 for accumulate.
 *
 * Tolerances of the memory-bound ops: element i passes when |g−c| ≤ atol + rtol·|c| with
 *   rtol = 4·u·sqrt(4·Kr), atol = rtol·scale (default max|c|), the rule of test_cuda_ops.c and
 *   tests/support/check.h, Kr the roundings on the value's path or the length of the FP32
 *   reduction it depends on (double reductions rounded once count 1):
 *   - exact (value equality): embedding forward, add_broadcast, permute_heads (also accumulate:
 *     one FP32 addition on both sides), masked entries of softmax (exactly 0);
 *   - layer norm: row statistics in double rounded once on both sides (Kr 2 for mean, rstd);
 *     y and dx are ≤ 6 FP32 roundings from those statistics, plus a one-ulp difference of the
 *     statistics amplified by |mean|/σ ≈ 3 (Kr 8; dx judged against the largest of its terms,
 *     rstd·(|g| + |mean g| + |x̂·mean(g·x̂)|), since they cancel); dgamma, dbeta are double sums
 *     rounded once (Kr 2);
 *   - GELU: the argument z is formed by the same FP32 operations on both sides; expf (≤ 2 ulp on
 *     the GPU, < 1 ulp in glibc) and ≤ 4 roundings follow: forward Kr 8, backward Kr 12 (its terms
 *     cancel near x ≈ −0.75, where atol takes over); tanh ≤ 2 ulp per side: Kr 4. Saturating
 *     arguments (|x| ≥ 5, tiny x) are judged element by element (atol 0): there nothing cancels;
 *   - embedding backward: Kr = the largest number of rows sharing an id (the reduction length;
 *     both sides sum in double in row order, so the values are usually identical);
 *   - softmax: Kr = Tk + 2 (as the probabilities of softmax_xent), backward Kr = cols + 2. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bits.h"
#include "check.h"
#include "core/backend.h"
#include "gpu_harness.h"
#include "graph_helpers.h"
#include "qsync/rng.h"
#include "qsync/status.h"

/* Whether both backends' tables have op `name` (cpu_op, gpu_op: its entries). A missing one is
 * a failed case saying which and where it belongs. */
static bool have_op(const char *name, bool cpu_has, bool gpu_has, const char *cpu_file) {
    if (cpu_has && gpu_has) return true;
    char what[128], detail[256];
    snprintf(what, sizeof what, "ops table has %s", name);
    snprintf(detail, sizeof detail, "%s%s%s: nothing to compare (%s)", cpu_has ? "" : "the CPU backend's entry is NULL",
             !cpu_has && !gpu_has ? " and " : "", gpu_has ? "" : "the CUDA backend's entry is NULL",
             cpu_has ? "src/cuda/cuda_backend.c registers it" : cpu_file);
    check_fact(what, false, detail);
    return false;
}
#define CPU_BMM_FILE "implemented in src/cpu/cpu_bmm.c, registered in src/cpu/cpu_backend.c"
#define CPU_TR_FILE "implemented in src/cpu/cpu_transformer.c, registered in src/cpu/cpu_backend.c"
#define HAVE(op, file) have_op(#op, COPS->op != NULL, GOPS->op != NULL, file)

/* ====================================================================== batched matmul */

/* NMSE budget of a bmm output (file comment): reduction length K, `extra` roundings. */
static double bmm_budget(qs_precision p, double K, double extra) {
    const double u2 = 0x1p-48, margin = 10.0;
    const double a32 = u2 * (K + 2.0 + extra);
    const double a8 = p == QS_PREC_FP8 ? 0x1p-26 * (fmin(K, 128.0) + 2.0) : 0.0;
    const double in = p == QS_PREC_TF32 ? 0x1p-20 * (2.0 / 3.0 + 0.5) : 0.0;
    return margin * (a32 + a8 + in);
}

typedef struct bmm_case {
    int64_t batch, M, N, K;
    bool trans_b;
    float alpha;
} bmm_case;

/* Forward, backward-a and backward-b (each overwriting and accumulating) of one shape at
 * precision p, GPU against CPU. */
static void run_bmm(qs_precision p, bmm_case bc) {
    const int64_t B = bc.batch, M = bc.M, N = bc.N, K = bc.K;
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    const char *pn = qs_precision_name(p);
    char shape[96], what[224];
    snprintf(shape, sizeof shape, "b%lld M%lld N%lld K%lld %s a=%g", (long long)B, (long long)M, (long long)N,
             (long long)K, bc.trans_b ? "a·bT" : "a·b", (double)bc.alpha);
    const qs_bmm_desc gd = {.batch = B, .M = M, .N = N, .K = K, .trans_b = bc.trans_b, .alpha = bc.alpha, .prec = p};
    qs_bmm_desc cd = gd;
    cd.prec = cpu_prec(p);
    void *cplan = NULL, *gplan = NULL;
    size_t cwsb = 0, gwsb = 0;
    snprintf(what, sizeof what, "cpu bmm_plan %s %s (the reference)", pn, shape);
    if (!gpu_ok_(COPS->bmm_plan(g_cpu, &cd, &cplan, &cwsb), what)) return;
    keep_plan(g_cpu, cplan);
    snprintf(what, sizeof what, "bmm_plan %s %s", pn, shape);
    if (!gpu_ok_(GOPS->bmm_plan(g_gpu, &gd, &gplan, &gwsb), what)) return;
    keep_plan(g_gpu, gplan);
    void *cws = cwsb ? halloc(cwsb) : NULL, *gws = gwsb ? dalloc(gwsb, POISON) : NULL;

    seed("bmm", (uint64_t)p * 1000003u + (uint64_t)(B * 1000000 + M * 10007 + N * 101 + K) + bc.trans_b);
    const int64_t na = B * M * K, nb = B * N * K, nc = B * M * N;
    const int64_t b_rows = bc.trans_b ? B * N : B * K, b_cols = bc.trans_b ? K : N;
    float *a = rnd(na, -2, 2), *b = rnd(nb, -1, 1), *dc = rnd(nc, -1, 1);
    float *da0 = rnd(na, -1, 1), *db0 = rnd(nb, -1, 1);
    const qs_sr sr = {.key = qs_rng_key(5, "bmm_dc", (uint64_t)p), .counter = 3, .offset = 0};
    qmat qa = quant_both(a, B * M, K, fdt, NULL), qb = quant_both(b, b_rows, b_cols, fdt, NULL);
    qmat qdc = quant_both(dc, B * M, N, gdt, &sr);
    const double ea = bc.alpha != 1.0f ? 1.0 : 0.0;

    /* forward */
    float *cc = hf(nc), *gc = dalloc_f(nc);
    ASSERT_OK(COPS->bmm_forward(g_cpu, cplan, CST, &qa.cpu, &qb.cpu, cc, cws));
    snprintf(what, sizeof what, "bmm %-4s fwd     %s", pn, shape);
    if (gpu_ok_(GOPS->bmm_forward(g_gpu, gplan, GST, &qa.gpu, &qb.gpu, gc, gws), what)) {
        float *h = hf(nc);
        if (dget(h, gc, (size_t)nc * 4, what)) check_nmse(what, h, cc, nc, bmm_budget(p, (double)K, ea));
    }

    /* backward-a (reduces over N) and backward-b (over M), each overwriting and accumulating */
    for (int acc = 0; acc < 2; acc++) {
        float *cda = acc ? hcopy(da0, na) : hf(na), *gda = acc ? dup_gpu_f(da0, na) : dalloc_f(na);
        ASSERT_OK(COPS->bmm_backward_a(g_cpu, cplan, CST, &qdc.cpu, &qb.cpu, cda, acc, cws));
        snprintf(what, sizeof what, "bmm %-4s bwd_a%s %s", pn, acc ? "+=" : "  ", shape);
        if (gpu_ok_(GOPS->bmm_backward_a(g_gpu, gplan, GST, &qdc.gpu, &qb.gpu, gda, acc, gws), what)) {
            float *h = hf(na);
            if (dget(h, gda, (size_t)na * 4, what)) check_nmse(what, h, cda, na, bmm_budget(p, (double)N, ea + acc));
        }
        float *cdb = acc ? hcopy(db0, nb) : hf(nb), *gdb = acc ? dup_gpu_f(db0, nb) : dalloc_f(nb);
        ASSERT_OK(COPS->bmm_backward_b(g_cpu, cplan, CST, &qdc.cpu, &qa.cpu, cdb, acc, cws));
        snprintf(what, sizeof what, "bmm %-4s bwd_b%s %s", pn, acc ? "+=" : "  ", shape);
        if (gpu_ok_(GOPS->bmm_backward_b(g_gpu, gplan, GST, &qdc.gpu, &qa.gpu, gdb, acc, gws), what)) {
            float *h = hf(nb);
            if (dget(h, gdb, (size_t)nb * 4, what)) check_nmse(what, h, cdb, nb, bmm_budget(p, (double)M, ea + acc));
        }
    }
}

static const bmm_case k_bmm[] = {
    {1, 1, 1, 1, true, 1.0f},               /* everything 1 */
    {2, 1, 3, 5, true, 0.5f},               /* one query (T = 1) */
    {3, 7, 5, 9, true, 1.0f / 3.0f},        /* odd everywhere, QKᵀ form */
    {3, 7, 5, 9, false, 1.0f},              /* odd everywhere, P·V form */
    {8, 16, 16, 20, true, 0.2236068f},      /* attention QKᵀ, head dim 20 (not a multiple of 8) */
    {8, 16, 20, 16, false, 1.0f},           /* its P·V */
    {6, 33, 33, 24, true, 0.20412415f},     /* odd T: odd batch strides, FP8 padding */
    {6, 33, 24, 33, false, 1.0f},
    {24, 128, 128, 64, true, 0.125f},       /* 2 samples × 12 heads, T 128, D 64: aligned everywhere */
    {24, 128, 64, 128, false, 1.0f},
};

static void bmm_all(qs_precision p) {
    BEGIN();
    snprintf(g_test_buf, sizeof g_test_buf, "test_bmm_%s", qs_precision_name(p));
    g_test = g_test_buf;
    if (!HAVE(bmm_plan, CPU_BMM_FILE) || !HAVE(bmm_forward, CPU_BMM_FILE) || !HAVE(bmm_backward_a, CPU_BMM_FILE) ||
        !HAVE(bmm_backward_b, CPU_BMM_FILE)) {
        END();
        return;
    }
    for (size_t i = 0; i < sizeof k_bmm / sizeof k_bmm[0]; i++) {
        mark m = mark_now();
        run_bmm(p, k_bmm[i]);
        release_to(m);
    }
    END();
}
static void test_bmm_fp32(void **state) { bmm_all(QS_PREC_FP32); }
static void test_bmm_tf32(void **state) { bmm_all(QS_PREC_TF32); }
static void test_bmm_bf16(void **state) { bmm_all(QS_PREC_BF16); }
static void test_bmm_fp16(void **state) { bmm_all(QS_PREC_FP16); }
static void test_bmm_fp8(void **state) { bmm_all(QS_PREC_FP8); }

/* INT8 batched matmul is not available on the GPU (as Linear): the plan must say so. */
static void test_bmm_int8_unsupported(void **state) {
    BEGIN();
    if (!HAVE(bmm_plan, CPU_BMM_FILE)) {
        END();
        return;
    }
    const qs_bmm_desc d = {.batch = 4, .M = 8, .N = 16, .K = 32, .trans_b = true, .alpha = 1.0f, .prec = QS_PREC_INT8};
    void *plan = NULL;
    size_t ws = 0;
    qs_error_clear();
    const qs_status st = GOPS->bmm_plan(g_gpu, &d, &plan, &ws);
    char line[320];
    snprintf(line, sizeof line, "%s: %s", qs_status_name(st), qs_last_error());
    check_fact("bmm_plan(int8) is QS_ERR_UNSUPPORTED naming int8",
               st == QS_ERR_UNSUPPORTED && plan == NULL && strstr(qs_last_error(), "int8") != NULL, line);
    if (st == QS_OK) keep_plan(g_gpu, plan);
    END();
}

/* FP32 bmm with a NaN in one row of a and an Inf in one row of b: the same non-finite pattern as
 * the CPU, the same values elsewhere. */
static void test_bmm_nonfinite(void **state) {
    BEGIN();
    if (!HAVE(bmm_plan, CPU_BMM_FILE) || !HAVE(bmm_forward, CPU_BMM_FILE)) {
        END();
        return;
    }
    const int64_t B = 2, M = 4, N = 6, K = 9;
    const qs_bmm_desc d = {.batch = B, .M = M, .N = N, .K = K, .trans_b = true, .alpha = 0.5f, .prec = QS_PREC_FP32};
    void *cplan = NULL, *gplan = NULL;
    size_t cwsb = 0, gwsb = 0;
    ASSERT_OK(COPS->bmm_plan(g_cpu, &d, &cplan, &cwsb));
    keep_plan(g_cpu, cplan);
    if (!GPU_OK(GOPS->bmm_plan(g_gpu, &d, &gplan, &gwsb))) {
        END();
        return;
    }
    keep_plan(g_gpu, gplan);
    seed("bmm_nonfinite", 0);
    float *a = rnd(B * M * K, 0.5f, 1.5f), *b = rnd(B * N * K, -1, 1);
    a[(1 * M + 2) * K + 3] = NAN;      /* batch 1, row 2 */
    b[(0 * N + 4) * K + 5] = INFINITY; /* batch 0, column 4 of c */
    float *cc = hf(B * M * N), *gc = dalloc_f(B * M * N), *hc = hf(B * M * N);
    const qs_operand ca = qs_operand_f32(a), cb = qs_operand_f32(b);
    const qs_operand ga = qs_operand_f32(dup_gpu_f(a, B * M * K)), gb = qs_operand_f32(dup_gpu_f(b, B * N * K));
    ASSERT_OK(COPS->bmm_forward(g_cpu, cplan, CST, &ca, &cb, cc, cwsb ? halloc(cwsb) : NULL));
    if (GPU_OK(GOPS->bmm_forward(g_gpu, gplan, GST, &ga, &gb, gc, gwsb ? dalloc(gwsb, POISON) : NULL)) &&
        dget(hc, gc, (size_t)(B * M * N) * 4, "bmm fp32 fwd with NaN/Inf"))
        check_nmse("bmm fp32 fwd, NaN in a[1] row 2, +Inf in b[0] row 4", hc, cc, B * M * N,
                   bmm_budget(QS_PREC_FP32, (double)K, 1));
    END();
}

/* Plans give back what they take: FP8 and BF16 bmm plans created, run and destroyed three
 * times, workspaces through the backend; after the first cycle in_use must come back. */
static void test_bmm_plan_lifetime(void **state) {
    BEGIN();
    if (!HAVE(bmm_plan, CPU_BMM_FILE)) {
        END();
        return;
    }
    const qs_precision precs[2] = {QS_PREC_FP8, QS_PREC_BF16};
    const int64_t B = 6, M = 33, N = 24, K = 33; /* !trans_b: every FP8 operand copied and padded */
    seed("bmm_lifetime", 0);
    float *a = rnd(B * M * K, -1, 1), *b = rnd(B * K * N, -1, 1);
    char what[96], line[160];
    for (int pi = 0; pi < 2; pi++) {
        const qs_dtype fdt = qs_precision_operand_dtype(precs[pi], false);
        qmat qa = quant_both(a, B * M, K, fdt, NULL), qb = quant_both(b, B * K, N, fdt, NULL);
        float *c = dalloc_f(B * M * N);
        const qs_bmm_desc d = {.batch = B, .M = M, .N = N, .K = K, .trans_b = false, .alpha = 1.0f, .prec = precs[pi]};
        for (int cycle = 0; cycle < 3; cycle++) {
            size_t before = 0, after = 0, wsb = 0;
            void *plan = NULL, *ws = NULL;
            GOPS->memory_stats(g_gpu, &before, NULL);
            bool ok = GPU_OK(GOPS->bmm_plan(g_gpu, &d, &plan, &wsb)) && (!wsb || GPU_OK(GOPS->alloc(g_gpu, wsb, &ws))) &&
                      GPU_OK(GOPS->bmm_forward(g_gpu, plan, GST, &qa.gpu, &qb.gpu, c, ws)) &&
                      GPU_OK(GOPS->stream_sync(g_gpu, GST));
            if (plan) GOPS->plan_destroy(g_gpu, plan);
            if (ws) GOPS->free(g_gpu, ws);
            if (!ok) break;
            GOPS->memory_stats(g_gpu, &after, NULL);
            snprintf(line, sizeof line, "in_use %zu -> %zu (workspace %zu B)", before, after, wsb);
            snprintf(what, sizeof what, "bmm %s plan create/run/destroy, cycle %d", qs_precision_name(precs[pi]), cycle);
            if (cycle == 0)
                printf("  info %-64s %s (lazy resources allowed)\n", what, line);
            else
                check_fact(what, after == before, line);
        }
    }
    END();
}

/* ================================================================================ layer norm */

static void test_layernorm(void **state) {
    BEGIN();
    if (!HAVE(layernorm_forward, CPU_TR_FILE) || !HAVE(layernorm_backward, CPU_TR_FILE)) {
        END();
        return;
    }
    const int64_t shapes[][2] = {{1, 3}, {5, 7}, {64, 768}, {300, 20}, {7, 1025}, {2048, 64}};
    const float eps = 1e-5f;
    char what[160], sh[48];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        mark mk = mark_now();
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        snprintf(sh, sizeof sh, "rows=%lld C=%lld", (long long)rows, (long long)C);
        seed("layernorm", t);
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
        for (int64_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i]; /* offset mean: the two passes matter */
        float *base = rnd(n, -1, 1);
        float *gx = dup_gpu_f(x, n), *gg = dup_gpu_f(gamma, C), *gbt = dup_gpu_f(beta, C), *gdy = dup_gpu_f(dy, n);

        float *cy = hf(n), *cm = hf(rows), *cr = hf(rows), *gy = dalloc_f(n), *gm = dalloc_f(rows), *gr = dalloc_f(rows);
        ASSERT_OK(COPS->layernorm_forward(g_cpu, CST, rows, C, x, gamma, beta, eps, cy, cm, cr));
        snprintf(what, sizeof what, "layernorm fwd %s: y", sh);
        if (gpu_ok_(GOPS->layernorm_forward(g_gpu, GST, rows, C, gx, gg, gbt, eps, gy, gm, gr), what)) {
            cmp_tol(what, gy, cy, n, 8, -1);
            snprintf(what, sizeof what, "layernorm fwd %s: save_mean", sh);
            cmp_tol(what, gm, cm, rows, 2, -1);
            snprintf(what, sizeof what, "layernorm fwd %s: save_rstd", sh);
            cmp_tol(what, gr, cr, rows, 2, -1);
        }
        /* in place (y aliasing x) is not in the contract: not tested */

        /* backward from the CPU's statistics; dx's terms cancel: judged against the largest */
        const float *gsm = dup_gpu_f(cm, rows), *gsr = dup_gpu_f(cr, rows);
        double dx_scale = 0;
        for (int64_t r = 0; r < rows; r++) {
            double sg = 0, sgx = 0;
            for (int64_t c = 0; c < C; c++) {
                const double g = (double)dy[r * C + c] * gamma[c], xh = ((double)x[r * C + c] - cm[r]) * cr[r];
                sg += g;
                sgx += g * xh;
            }
            for (int64_t c = 0; c < C; c++) {
                const double g = (double)dy[r * C + c] * gamma[c], xh = ((double)x[r * C + c] - cm[r]) * cr[r];
                dx_scale = fmax(dx_scale, cr[r] * (fabs(g) + fabs(sg) / C + fabs(xh * sgx / C)));
            }
        }
        for (int acc = 0; acc < 2; acc++) {
            float *cdx = acc ? hcopy(base, n) : hf(n), *cdg = hf(C), *cdb = hf(C);
            float *gdx = acc ? dup_gpu_f(base, n) : dalloc_f(n), *gdg = dalloc_f(C), *gdb = dalloc_f(C);
            ASSERT_OK(COPS->layernorm_backward(g_cpu, CST, rows, C, x, dy, gamma, cm, cr, cdx, acc, cdg, cdb));
            snprintf(what, sizeof what, "layernorm bwd%s %s: dx", acc ? " accumulate" : "", sh);
            if (gpu_ok_(GOPS->layernorm_backward(g_gpu, GST, rows, C, gx, gdy, gg, gsm, gsr, gdx, acc, gdg, gdb), what)) {
                cmp_tol(what, gdx, cdx, n, 8 + acc, acc ? dx_scale + 1.0 : dx_scale);
                snprintf(what, sizeof what, "layernorm bwd%s %s: dgamma", acc ? " accumulate" : "", sh);
                cmp_tol(what, gdg, cdg, C, 2, -1);
                snprintf(what, sizeof what, "layernorm bwd%s %s: dbeta", acc ? " accumulate" : "", sh);
                cmp_tol(what, gdb, cdb, C, 2, -1);
            }
            if (acc) continue;
            /* dx NULL: parameter gradients only, the same values */
            float *gdg2 = dalloc_f(C), *gdb2 = dalloc_f(C);
            snprintf(what, sizeof what, "layernorm bwd dx=NULL %s: dgamma", sh);
            if (gpu_ok_(GOPS->layernorm_backward(g_gpu, GST, rows, C, gx, gdy, gg, gsm, gsr, NULL, false, gdg2, gdb2),
                        what)) {
                cmp_tol(what, gdg2, cdg, C, 2, -1);
                snprintf(what, sizeof what, "layernorm bwd dx=NULL %s: dbeta", sh);
                cmp_tol(what, gdb2, cdb, C, 2, -1);
            }
        }
        release_to(mk);
    }
    END();
}

/* ============================================================================ GELU and tanh */

/* GELU and tanh over random x in [-6, 6] with zeros, subnormals, the GELU minimum (x ≈ -0.75)
 * and a NaN among them (judged against the tensor's largest value), then over saturating
 * arguments alone, judged element by element (atol 0): ±9, ±20, ±100 and tiny values. */
static void test_gelu_tanh(void **state) {
    BEGIN();
    const bool gelu = HAVE(gelu_forward, CPU_TR_FILE) && HAVE(gelu_backward, CPU_TR_FILE);
    const bool th = HAVE(tanh_forward, CPU_TR_FILE) && HAVE(tanh_backward, CPU_TR_FILE);
    const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 9.0f, -9.0f, -0.75f, 1e-3f, NAN};
    const float saturating[] = {20.0f, -20.0f, 100.0f, -100.0f, 9.0f, -9.0f, 5.0f, -5.0f, 0.5f, -0.5f, 1e-30f, -1e-30f};
    const int64_t sizes[3] = {1003, (1 << 20) + 1, (int64_t)(sizeof saturating / sizeof saturating[0])};
    char what[128];
    for (int t = 0; t < 3; t++) {
        mark mk = mark_now();
        const int64_t n = sizes[t];
        const double scale = t == 2 ? 0.0 : -1.0; /* atol: 0, or rtol·max|c| */
        const char *kind = t == 2 ? "saturating" : "random";
        seed("gelu_tanh", (uint64_t)t);
        float *x = rnd(n, -6, 6), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
        if (t == 2)
            memcpy(x, saturating, sizeof saturating);
        else
            for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[3 * i + 1] = special[i];
        float *gx = dup_gpu_f(x, n), *gdy = dup_gpu_f(dy, n);
        float *cy = hf(n), *gy = dalloc_f(n);
        if (gelu) {
            ASSERT_OK(COPS->gelu_forward(g_cpu, CST, n, x, cy));
            snprintf(what, sizeof what, "gelu fwd %s n=%lld", kind, (long long)n);
            if (gpu_ok_(GOPS->gelu_forward(g_gpu, GST, n, gx, gy), what)) cmp_tol(what, gy, cy, n, 8, scale);
            float *gin = dup_gpu_f(x, n);
            snprintf(what, sizeof what, "gelu fwd in place %s n=%lld", kind, (long long)n);
            if (gpu_ok_(GOPS->gelu_forward(g_gpu, GST, n, gin, gin), what)) cmp_tol(what, gin, cy, n, 8, scale);
            for (int acc = 0; acc < 2; acc++) {
                float *cdx = acc ? hcopy(base, n) : hf(n), *gdx = acc ? dup_gpu_f(base, n) : dalloc_f(n);
                ASSERT_OK(COPS->gelu_backward(g_cpu, CST, n, x, dy, cdx, acc));
                snprintf(what, sizeof what, "gelu bwd%s %s n=%lld", acc ? " accumulate" : "", kind, (long long)n);
                if (gpu_ok_(GOPS->gelu_backward(g_gpu, GST, n, gx, gdy, gdx, acc), what))
                    cmp_tol(what, gdx, cdx, n, 12 + acc, acc ? -1.0 : scale); /* an accumulated sum may cancel */
            }
        }
        if (th) {
            ASSERT_OK(COPS->tanh_forward(g_cpu, CST, n, x, cy));
            snprintf(what, sizeof what, "tanh fwd %s n=%lld", kind, (long long)n);
            if (gpu_ok_(GOPS->tanh_forward(g_gpu, GST, n, gx, gy), what)) cmp_tol(what, gy, cy, n, 4, scale);
            const float *gyc = dup_gpu_f(cy, n); /* backward from the CPU's output */
            for (int acc = 0; acc < 2; acc++) {
                float *cdx = acc ? hcopy(base, n) : hf(n), *gdx = acc ? dup_gpu_f(base, n) : dalloc_f(n);
                ASSERT_OK(COPS->tanh_backward(g_cpu, CST, n, cy, dy, cdx, acc));
                snprintf(what, sizeof what, "tanh bwd%s %s n=%lld", acc ? " accumulate" : "", kind, (long long)n);
                if (gpu_ok_(GOPS->tanh_backward(g_gpu, GST, n, gyc, gdy, gdx, acc), what))
                    cmp_tol(what, gdx, cdx, n, 4 + acc, acc ? -1.0 : scale);
            }
        }
        release_to(mk);
    }
    check_fact("gelu_forward n=0 with NULL pointers",
               !GOPS->gelu_forward || GOPS->gelu_forward(g_gpu, GST, 0, NULL, NULL) == QS_OK, "");
    END();
}

/* ================================================================================= embedding */

typedef struct emb_case {
    int64_t rows, C, V;
    int heavy_pct; /* this percentage of the rows share id 0 (a frequent token) */
} emb_case;

static void test_embedding(void **state) {
    BEGIN();
    if (!HAVE(embedding_forward, CPU_TR_FILE) || !HAVE(embedding_backward, CPU_TR_FILE)) {
        END();
        return;
    }
    const emb_case cases[] = {{1, 1, 3, 0}, {64, 7, 50, 0}, {512, 768, 1000, 0}, {5000, 33, 10, 60}, {300, 20, 7, 0}};
    char what[160], sh[64];
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        mark mk = mark_now();
        const int64_t rows = cases[t].rows, C = cases[t].C, V = cases[t].V;
        snprintf(sh, sizeof sh, "rows=%lld C=%lld V=%lld%s", (long long)rows, (long long)C, (long long)V,
                 cases[t].heavy_pct ? " (frequent id)" : "");
        seed("embedding", t);
        float *ids = hf(rows);
        int64_t *count = halloc((size_t)V * sizeof(int64_t));
        int64_t max_count = 1;
        for (int64_t r = 0; r < rows; r++) {
            const bool heavy = (int)qs_rng_below(&g_rng, 100) < cases[t].heavy_pct;
            ids[r] = heavy ? 0.0f : (float)qs_rng_below(&g_rng, (uint64_t)V);
            if (++count[(int64_t)ids[r]] > max_count) max_count = count[(int64_t)ids[r]];
        }
        float *table = rnd(V * C, -1, 1), *dy = rnd(rows * C, -1, 1), *base = rnd(V * C, -1, 1);
        const float *gids = dup_gpu_f(ids, rows), *gtab = dup_gpu_f(table, V * C), *gdy = dup_gpu_f(dy, rows * C);
        float *cy = hf(rows * C), *gy = dalloc_f(rows * C);
        ASSERT_OK(COPS->embedding_forward(g_cpu, CST, rows, C, V, ids, table, cy));
        snprintf(what, sizeof what, "embedding fwd %s", sh);
        if (gpu_ok_(GOPS->embedding_forward(g_gpu, GST, rows, C, V, gids, gtab, gy), what)) cmp_tol(what, gy, cy, rows * C, 0, 0);
        for (int acc = 0; acc < 2; acc++) {
            float *cdt = acc ? hcopy(base, V * C) : hf(V * C), *gdt = acc ? dup_gpu_f(base, V * C) : dalloc_f(V * C);
            ASSERT_OK(COPS->embedding_backward(g_cpu, CST, rows, C, V, ids, dy, cdt, acc));
            snprintf(what, sizeof what, "embedding bwd%s %s (max %lld rows per id)", acc ? " accumulate" : "", sh,
                     (long long)max_count);
            if (gpu_ok_(GOPS->embedding_backward(g_gpu, GST, rows, C, V, gids, gdy, gdt, acc), what))
                cmp_tol(what, gdt, cdt, V * C, (double)(max_count + acc), -1);
        }
        release_to(mk);
    }

    /* ids outside [0, V) on the GPU: a zero row forward, ignored backward (the CPU refuses them,
     * so the reference is the CPU on the valid rows alone, in their order) */
    {
        const int64_t rows = 9, C = 5, V = 4;
        const float ids[9] = {1.0f, -1.0f, 3.0f, 4.0f, NAN, 1.0f, 1e9f, 0.0f, 3.0f};
        seed("embedding_invalid", 0);
        float *table = rnd(V * C, -1, 1), *dy = rnd(rows * C, -1, 1);
        float *expect = hf(rows * C), *vdy = hf(rows * C), *vids = hf(rows);
        int64_t nv = 0;
        for (int64_t r = 0; r < rows; r++) {
            const bool ok = ids[r] >= 0.0f && ids[r] < (float)V;
            if (ok) memcpy(expect + r * C, table + (int64_t)ids[r] * C, (size_t)C * sizeof(float));
            if (ok) {
                memcpy(vdy + nv * C, dy + r * C, (size_t)C * sizeof(float));
                vids[nv++] = ids[r];
            }
        }
        const float *gids = dup_gpu_f(ids, rows), *gtab = dup_gpu_f(table, V * C), *gdy = dup_gpu_f(dy, rows * C);
        float *gy = dalloc_f(rows * C), *gdt = dalloc_f(V * C), *cdt = hf(V * C);
        snprintf(what, sizeof what, "embedding fwd, ids -1, 4 (= V), NaN, 1e9: zero rows");
        if (gpu_ok_(GOPS->embedding_forward(g_gpu, GST, rows, C, V, gids, gtab, gy), what)) cmp_tol(what, gy, expect, rows * C, 0, 0);
        ASSERT_OK(COPS->embedding_backward(g_cpu, CST, nv, C, V, vids, vdy, cdt, false));
        snprintf(what, sizeof what, "embedding bwd, invalid ids ignored");
        if (gpu_ok_(GOPS->embedding_backward(g_gpu, GST, rows, C, V, gids, gdy, gdt, false), what))
            cmp_tol(what, gdt, cdt, V * C, 2, -1);
    }
    END();
}

/* ===================================================================== broadcast add, heads */

static void test_add_broadcast(void **state) {
    BEGIN();
    if (!HAVE(add_broadcast, CPU_TR_FILE)) {
        END();
        return;
    }
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {8, 16 * 24}, {5, 1001}, {0, 5}};
    char what[128];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        mark mk = mark_now();
        const int64_t outer = shapes[t][0], inner = shapes[t][1], n = outer * inner;
        seed("add_broadcast", t);
        float *x = rnd(n + 1, -1, 1), *v = rnd(inner, -1, 1), *cy = hf(n + 1);
        float *gx = dup_gpu_f(x, n + 1), *gv = dup_gpu_f(v, inner), *gy = dalloc_f(n + 1);
        ASSERT_OK(COPS->add_broadcast(g_cpu, CST, outer, inner, x, v, cy));
        snprintf(what, sizeof what, "add_broadcast outer=%lld inner=%lld", (long long)outer, (long long)inner);
        if (gpu_ok_(GOPS->add_broadcast(g_gpu, GST, outer, inner, gx, gv, gy), what)) cmp_tol(what, gy, cy, n, 0, 0);
        snprintf(what, sizeof what, "add_broadcast in place outer=%lld inner=%lld", (long long)outer, (long long)inner);
        if (gpu_ok_(GOPS->add_broadcast(g_gpu, GST, outer, inner, gx, gv, gx), what)) cmp_tol(what, gx, cy, n, 0, 0);
        release_to(mk);
    }
    END();
}

/* argmax_rows: bitwise the CPU's first maximum, ties included (values drawn from 8 levels). */
static void test_argmax_rows(void **state) {
    BEGIN();
    if (!HAVE(argmax_rows, "implemented in src/cpu/cpu_softmax.c, registered in src/cpu/cpu_backend.c")) {
        END();
        return;
    }
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 33}, {8, 50257}, {0, 5}};
    char what[128];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        mark mk = mark_now();
        const int64_t rows = shapes[t][0], cols = shapes[t][1], n = rows * cols;
        seed("argmax_rows", t);
        float *x = rnd(n + 1, 0, 8);
        for (int64_t i = 0; i < n; i++) x[i] = floorf(x[i]); /* many ties */
        int32_t *ci = halloc((size_t)(rows + 1) * sizeof(int32_t)), *gi_host = halloc((size_t)(rows + 1) * sizeof(int32_t));
        float *gx = dup_gpu_f(x, n + 1);
        int32_t *gi = dalloc((size_t)(rows + 1) * sizeof(int32_t), POISON);
        ASSERT_OK(COPS->argmax_rows(g_cpu, CST, rows, cols, x, ci));
        snprintf(what, sizeof what, "argmax_rows rows=%lld cols=%lld", (long long)rows, (long long)cols);
        if (gpu_ok_(GOPS->argmax_rows(g_gpu, GST, rows, cols, gx, gi), what) &&
            dget(gi_host, gi, (size_t)rows * sizeof(int32_t), what)) {
            int64_t differ = 0;
            for (int64_t r = 0; r < rows; r++) differ += gi_host[r] != ci[r];
            check_fact(what, differ == 0, "GPU and CPU name different columns");
        }
        release_to(mk);
    }
    END();
}

static void test_permute_heads(void **state) {
    BEGIN();
    if (!HAVE(permute_heads, CPU_TR_FILE)) {
        END();
        return;
    }
    /* N, T, H, D, ld, off */
    const int64_t shapes[][6] = {{1, 1, 1, 1, 1, 0},        {2, 5, 3, 4, 36, 12},          /* q, k, v packed: k */
                                 {2, 7, 4, 20, 85, 5},      /* odd row length and offset */
                                 {3, 16, 12, 64, 2304, 1536}, /* GPT-2 small's v slice */
                                 {1, 9, 1, 3, 3, 0}};
    char what[160], sh[96];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        mark mk = mark_now();
        const int64_t N = shapes[t][0], T = shapes[t][1], H = shapes[t][2], D = shapes[t][3], ld = shapes[t][4],
                      off = shapes[t][5];
        const int64_t nh = N * H * T * D, ntok = N * T * ld;
        snprintf(sh, sizeof sh, "N%lld T%lld H%lld D%lld ld%lld off%lld", (long long)N, (long long)T, (long long)H,
                 (long long)D, (long long)ld, (long long)off);
        seed("permute_heads", t);
        float *tok = rnd(ntok, -1, 1), *heads = rnd(nh, -1, 1), *hbase = rnd(nh, -1, 1), *tbase = rnd(ntok, -1, 1);
        const float *gtok = dup_gpu_f(tok, ntok), *gheads = dup_gpu_f(heads, nh);
        for (int acc = 0; acc < 2; acc++) {
            /* tokens → heads (every element of dst written) */
            float *ch = acc ? hcopy(hbase, nh) : hf(nh), *gh = acc ? dup_gpu_f(hbase, nh) : dalloc_f(nh);
            ASSERT_OK(COPS->permute_heads(g_cpu, CST, N, T, H, D, ld, off, tok, ch, true, acc));
            snprintf(what, sizeof what, "permute_heads to_heads%s %s", acc ? " accumulate" : "", sh);
            if (gpu_ok_(GOPS->permute_heads(g_gpu, GST, N, T, H, D, ld, off, gtok, gh, true, acc), what))
                cmp_tol(what, gh, ch, nh, 0, 0);
            /* heads → tokens: only the slice is touched, the rest keeps tbase */
            float *ct = hcopy(tbase, ntok), *gt = dup_gpu_f(tbase, ntok);
            ASSERT_OK(COPS->permute_heads(g_cpu, CST, N, T, H, D, ld, off, heads, ct, false, acc));
            snprintf(what, sizeof what, "permute_heads to tokens%s %s (whole rows)", acc ? " accumulate" : "", sh);
            if (gpu_ok_(GOPS->permute_heads(g_gpu, GST, N, T, H, D, ld, off, gheads, gt, false, acc), what))
                cmp_tol(what, gt, ct, ntok, 0, 0);
        }
        release_to(mk);
    }
    END();
}

/* ================================================================================== softmax */

typedef struct sm_case {
    int64_t N, H, Tq, Tk;
    bool causal;
    int pad; /* 0: no key_ids; 1: trailing pads in sample 1; 2: key 0 of sample 0 padded; 3: sample 1 all pads */
} sm_case;

static void test_softmax(void **state) {
    BEGIN();
    if (!HAVE(softmax_forward, CPU_TR_FILE) || !HAVE(softmax_backward, CPU_TR_FILE)) {
        END();
        return;
    }
    const sm_case cases[] = {
        {1, 1, 1, 1, false, 0}, {2, 3, 5, 5, true, 0},     {2, 2, 7, 9, false, 1},  {2, 2, 6, 6, true, 2},
        {2, 1, 4, 4, false, 3}, {4, 4, 33, 33, true, 1},   {2, 12, 128, 128, true, 1}, {1, 2, 3, 70, false, 0},
        {2, 2, 5, 8, true, 1}, /* Tq < Tk: causal compares indices as given */
    };
    const float pad_id = 0.0f;
    char what[192], sh[96];
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        mark mk = mark_now();
        const sm_case *c = &cases[t];
        const int64_t rows = c->N * c->H * c->Tq, n = rows * c->Tk;
        snprintf(sh, sizeof sh, "N%lld H%lld Tq%lld Tk%lld%s%s", (long long)c->N, (long long)c->H, (long long)c->Tq,
                 (long long)c->Tk, c->causal ? " causal" : "", c->pad ? " pads" : "");
        seed("softmax", t);
        float *x = rnd(n, -8, 8), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
        if (n > 3) x[n / 2] += 1000.0f; /* a large logit must not overflow */
        float *kid = NULL;
        if (c->pad) {
            kid = hf(c->N * c->Tk);
            for (int64_t i = 0; i < c->N * c->Tk; i++) kid[i] = (float)(1 + qs_rng_below(&g_rng, 50));
            if (c->pad == 1 && c->N > 1)
                for (int64_t j = c->Tk - 3 > 0 ? c->Tk - 3 : 0; j < c->Tk; j++) kid[c->Tk + j] = pad_id;
            if (c->pad == 2) kid[0] = pad_id;
            if (c->pad == 3 && c->N > 1)
                for (int64_t j = 0; j < c->Tk; j++) kid[c->Tk + j] = pad_id;
        }
        const float *gx = dup_gpu_f(x, n), *gk = kid ? dup_gpu_f(kid, c->N * c->Tk) : NULL;
        float *cy = hf(n), *gy = dalloc_f(n), *hy = hf(n);
        ASSERT_OK(COPS->softmax_forward(g_cpu, CST, c->N, c->H, c->Tq, c->Tk, x, cy, c->causal, kid, pad_id));
        snprintf(what, sizeof what, "softmax fwd %s", sh);
        if (gpu_ok_(GOPS->softmax_forward(g_gpu, GST, c->N, c->H, c->Tq, c->Tk, gx, gy, c->causal, gk, pad_id), what) &&
            dget(hy, gy, (size_t)n * 4, what)) {
            check_tol(what, hy, cy, n, (double)c->Tk + 2, -1);
            /* the contract's zeros: masked entries and fully masked rows exactly 0 */
            int64_t nmasked = 0, bad = 0, first = -1;
            for (int64_t r = 0; r < rows; r++) {
                const int64_t i = r % c->Tq, s = r / (c->H * c->Tq);
                for (int64_t j = 0; j < c->Tk; j++) {
                    const bool masked = (c->causal && j > i) || (kid && kid[s * c->Tk + j] == pad_id);
                    if (!masked) continue;
                    nmasked++;
                    if (hy[r * c->Tk + j] != 0.0f && bad++ == 0) first = r * c->Tk + j;
                }
            }
            char detail[128];
            snprintf(detail, sizeof detail, "%lld masked entries, %lld not 0 (first [%lld])", (long long)nmasked,
                     (long long)bad, (long long)first);
            snprintf(what, sizeof what, "softmax fwd %s: masked entries are 0", sh);
            check_fact(what, bad == 0, detail);
        }
        /* backward from the CPU's probabilities */
        const float *gyc = dup_gpu_f(cy, n), *gdy = dup_gpu_f(dy, n);
        for (int acc = 0; acc < 2; acc++) {
            float *cdx = acc ? hcopy(base, n) : hf(n), *gdx = acc ? dup_gpu_f(base, n) : dalloc_f(n);
            ASSERT_OK(COPS->softmax_backward(g_cpu, CST, rows, c->Tk, cy, dy, cdx, acc));
            snprintf(what, sizeof what, "softmax bwd%s %s", acc ? " accumulate" : "", sh);
            if (gpu_ok_(GOPS->softmax_backward(g_gpu, GST, rows, c->Tk, gyc, gdy, gdx, acc), what))
                cmp_tol(what, gdx, cdx, n, (double)c->Tk + 2 + acc, -1);
        }
        release_to(mk);
    }
    END();
}

/* ========================================================================= argument errors */

/* Host-side argument checks give the same status on both backends. */
static void test_arg_errors(void **state) {
    BEGIN();
    float *cb = hf(64), *gb = dalloc_f(64);
    char what[160], detail[320];
#define PARITY(op, file, label, call_cpu, call_gpu)                                                                  \
    do {                                                                                                             \
        if (!HAVE(op, file)) break;                                                                                  \
        qs_error_clear();                                                                                            \
        const qs_status cs_ = (call_cpu);                                                                            \
        qs_error_clear();                                                                                            \
        const qs_status gs_ = (call_gpu);                                                                            \
        snprintf(what, sizeof what, "error parity: %s", label);                                                      \
        snprintf(detail, sizeof detail, "cpu %s, gpu %s: %s", qs_status_name(cs_), qs_status_name(gs_), qs_last_error()); \
        check_fact(what, cs_ != QS_OK && cs_ == gs_, detail);                                                        \
        (void)GOPS->stream_sync(g_gpu, GST);                                                                         \
    } while (0)
    void *cplan = NULL, *gplan = NULL;
    size_t cw = 0, gw = 0;
    const qs_bmm_desc bad = {.batch = 0, .M = 2, .N = 2, .K = 2, .trans_b = true, .alpha = 1.0f, .prec = QS_PREC_FP32};
    PARITY(bmm_plan, CPU_BMM_FILE, "bmm_plan batch=0", COPS->bmm_plan(g_cpu, &bad, &cplan, &cw),
           GOPS->bmm_plan(g_gpu, &bad, &gplan, &gw));
    keep_plan(g_cpu, cplan);
    keep_plan(g_gpu, gplan);
    PARITY(layernorm_forward, CPU_TR_FILE, "layernorm C=0",
           COPS->layernorm_forward(g_cpu, CST, 2, 0, cb, cb, cb, 1e-5f, cb, cb, cb),
           GOPS->layernorm_forward(g_gpu, GST, 2, 0, gb, gb, gb, 1e-5f, gb, gb, gb));
    PARITY(layernorm_forward, CPU_TR_FILE, "layernorm NULL x",
           COPS->layernorm_forward(g_cpu, CST, 2, 4, NULL, cb, cb, 1e-5f, cb, cb, cb),
           GOPS->layernorm_forward(g_gpu, GST, 2, 4, NULL, gb, gb, 1e-5f, gb, gb, gb));
    PARITY(gelu_forward, CPU_TR_FILE, "gelu n=-1", COPS->gelu_forward(g_cpu, CST, -1, cb, cb),
           GOPS->gelu_forward(g_gpu, GST, -1, gb, gb));
    PARITY(embedding_forward, CPU_TR_FILE, "embedding V=0",
           COPS->embedding_forward(g_cpu, CST, 2, 4, 0, cb, cb, cb), GOPS->embedding_forward(g_gpu, GST, 2, 4, 0, gb, gb, gb));
    PARITY(add_broadcast, CPU_TR_FILE, "add_broadcast outer=-1", COPS->add_broadcast(g_cpu, CST, -1, 4, cb, cb, cb),
           GOPS->add_broadcast(g_gpu, GST, -1, 4, gb, gb, gb));
    PARITY(permute_heads, CPU_TR_FILE, "permute_heads ld < off + H·D",
           COPS->permute_heads(g_cpu, CST, 1, 2, 2, 4, 8, 1, cb, cb + 32, true, false),
           GOPS->permute_heads(g_gpu, GST, 1, 2, 2, 4, 8, 1, gb, gb + 32, true, false));
    PARITY(softmax_forward, CPU_TR_FILE, "softmax Tk=-1",
           COPS->softmax_forward(g_cpu, CST, 1, 1, 2, -1, cb, cb, false, NULL, 0.0f),
           GOPS->softmax_forward(g_gpu, GST, 1, 1, 2, -1, gb, gb, false, NULL, 0.0f));
    PARITY(softmax_backward, CPU_TR_FILE, "softmax_backward NULL dy",
           COPS->softmax_backward(g_cpu, CST, 2, 3, cb, NULL, cb, false),
           GOPS->softmax_backward(g_gpu, GST, 2, 3, gb, NULL, gb, false));
    /* an fp16 bmm plan given f32 operands */
    const qs_bmm_desc d16 = {.batch = 2, .M = 2, .N = 3, .K = 4, .trans_b = false, .alpha = 1.0f, .prec = QS_PREC_FP16};
    cplan = gplan = NULL;
    if (HAVE(bmm_plan, CPU_BMM_FILE) && HAVE(bmm_forward, CPU_BMM_FILE) &&
        COPS->bmm_plan(g_cpu, &d16, &cplan, &cw) == QS_OK) {
        keep_plan(g_cpu, cplan);
        if (GPU_OK(GOPS->bmm_plan(g_gpu, &d16, &gplan, &gw))) {
            keep_plan(g_gpu, gplan);
            const qs_operand cf = qs_operand_f32(cb), gf = qs_operand_f32(gb);
            PARITY(bmm_forward, CPU_BMM_FILE, "fp16 bmm given f32 operands",
                   COPS->bmm_forward(g_cpu, cplan, CST, &cf, &cf, cb, cw ? halloc(cw) : NULL),
                   GOPS->bmm_forward(g_gpu, gplan, GST, &gf, &gf, gb, gw ? dalloc(gw, POISON) : NULL));
        }
    }
#undef PARITY
    END();
}

/* ====================================================================================== main */

int main(void) {
    const gh_suite suite = {
        .name = "test_cuda_transformer_ops", .seed_key = 20261203, .name_width = 64, .check_alignment = false};
    const int rc = gh_start(&suite);
    if (rc) return rc;

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bmm_int8_unsupported, teardown),
        cmocka_unit_test_teardown(test_bmm_fp32, teardown),
        cmocka_unit_test_teardown(test_bmm_tf32, teardown),
        cmocka_unit_test_teardown(test_bmm_bf16, teardown),
        cmocka_unit_test_teardown(test_bmm_fp16, teardown),
        cmocka_unit_test_teardown(test_bmm_fp8, teardown),
        cmocka_unit_test_teardown(test_bmm_nonfinite, teardown),
        cmocka_unit_test_teardown(test_bmm_plan_lifetime, teardown),
        cmocka_unit_test_teardown(test_layernorm, teardown),
        cmocka_unit_test_teardown(test_gelu_tanh, teardown),
        cmocka_unit_test_teardown(test_embedding, teardown),
        cmocka_unit_test_teardown(test_add_broadcast, teardown),
        cmocka_unit_test_teardown(test_argmax_rows, teardown),
        cmocka_unit_test_teardown(test_permute_heads, teardown),
        cmocka_unit_test_teardown(test_softmax, teardown),
        cmocka_unit_test_teardown(test_arg_errors, teardown),
    };
    return gh_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
