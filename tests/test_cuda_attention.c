/* tests/test_cuda_attention.c — the CUDA backend's fused attention (attention_forward /
 * attention_backward, src/cuda/cuda_attention.cu) against a double-precision reference computed
 * here from the very same rounded operands. Runs on the GPU machine (scripts/gpu-suite.sh run);
 * elsewhere it says why and exits 77 (SKIPPED), or fails with QS_REQUIRE_GPU=1 (the harness of
 * tests/support/gpu_harness.h, as test_backend_ops.c).
 *
 * Method
 *  - q, k, v (FP32, inside token rows as a model's projections hold them: one (N,T,3·H·D)
 *    buffer, or three of (N,T,H·D)) are rounded to the operand dtype by the CPU backend's cast
 *    before the GPU sees them, so both sides multiply identical operands and the reference is
 *    exact (double) from there: softmax(alpha·q·kᵀ + mask)·v and its gradients.
 *  - Outputs and gradients are guarded views filled with NaN first (an element left unwritten
 *    fails); the accumulate cases add onto random values.
 *  - The backward runs twice: both results must be bitwise equal (no atomics).
 *
 * NMSE budgets (u: the unit roundoff of the dtype, 2^-8 BF16, 2^-11 FP16). Beyond the operands,
 * the kernels round e more values into the dtype on a value's path, each a relative error of at
 * most u, independent between terms; their NMSE is about e·u²/3. Budget: 10·u²·(2 + e) with
 *   forward e = 1 (the probabilities before the product with v);
 *   backward e = 4: dO and the probabilities (dV), dO then dS = P∘(dP − D) (dQ, dK), with the
 *   cancellation in dP − D absorbed by the factor 10.
 * FP32 accumulation (u = 2^-24) is far below these. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "core/backend.h"
#include "graph/precision.h"
#include "models/models.h"
#include "gpu_harness.h"
#include "graph_helpers.h"
#include "qsync/rng.h"
#include "qsync/status.h"

typedef struct attn_case {
    int64_t N, T, H, D;
    bool causal;
    int pad;    /* 0: no mask ids; 1: a few padded keys in every sample; 2: sample 1 all padding */
    bool packed; /* q, k, v in one (N, T, 3·H·D) buffer (a GPT projection) or three (BERT) */
} attn_case;

static const float kPad = 0.0f;

/* Element (n, t, h, d) of an operand stored in token rows of ld floats from column off. */
static inline int64_t at(const attn_case *c, int64_t ld, int64_t off, int64_t n, int64_t t, int64_t h, int64_t d) {
    return (n * c->T + t) * ld + off + h * c->D + d;
}

static bool key_kept(const attn_case *c, const float *ids, int64_t n, int64_t i, int64_t j) {
    return (!c->causal || j <= i) && (!ids || ids[n * c->T + j] != kPad);
}

/* The double reference: out (N,T,H·D) and, with dout, dq/dk/dv added into gq, gk, gv (which
 * use the operands' layouts). */
static void reference(const attn_case *c, float alpha, const float *buf[3], const int64_t ld[3],
                      const int64_t off[3], const float *ids, double *out, const float *dout, double *g[3]) {
    const int64_t T = c->T, D = c->D, HD = c->H * c->D;
    double *s = malloc((size_t)T * sizeof *s), *dp = malloc((size_t)T * sizeof *dp);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    s[j] = -INFINITY;
                    if (!key_kept(c, ids, n, i, j)) continue;
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++)
                        acc += (double)buf[0][at(c, ld[0], off[0], n, i, h, d)] * buf[1][at(c, ld[1], off[1], n, j, h, d)];
                    s[j] = alpha * acc;
                    if (s[j] > mx) mx = s[j];
                }
                for (int64_t j = 0; j < T; j++) {
                    s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
                    sum += s[j];
                }
                for (int64_t j = 0; j < T; j++) s[j] = sum > 0 ? s[j] / sum : 0.0; /* probabilities */
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < T; j++) o += s[j] * buf[2][at(c, ld[2], off[2], n, j, h, d)];
                    out[(n * T + i) * HD + h * D + d] = o;
                }
                if (!dout) continue;
                const float *go = dout + (n * T + i) * HD + h * D;
                double dsum = 0;
                for (int64_t j = 0; j < T; j++) {
                    dp[j] = 0;
                    for (int64_t d = 0; d < D; d++) dp[j] += (double)go[d] * buf[2][at(c, ld[2], off[2], n, j, h, d)];
                    dsum += s[j] * dp[j];
                }
                for (int64_t j = 0; j < T; j++) {
                    const double ds = s[j] * (dp[j] - dsum);
                    for (int64_t d = 0; d < D; d++) {
                        g[0][at(c, ld[0], off[0], n, i, h, d)] += alpha * ds * buf[1][at(c, ld[1], off[1], n, j, h, d)];
                        g[1][at(c, ld[1], off[1], n, j, h, d)] += alpha * ds * buf[0][at(c, ld[0], off[0], n, i, h, d)];
                        g[2][at(c, ld[2], off[2], n, j, h, d)] += s[j] * go[d];
                    }
                }
            }
    free(s);
    free(dp);
}

/* x rounded to dt and back by the CPU backend's cast (the GEMM operands' rounding). */
static float *round_to(const float *x, int64_t n, qs_dtype dt) {
    uint16_t *tmp = halloc((size_t)n * 2);
    float *y = hf(n);
    ASSERT_OK(COPS->cast(g_cpu, CST, n, x, QS_F32, tmp, dt));
    ASSERT_OK(COPS->cast(g_cpu, CST, n, tmp, dt, y, QS_F32));
    return y;
}

static float *to_float(const double *x, int64_t n) {
    float *y = hf(n);
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

static double l2(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static bool same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * 4) == 0; }

static void run_case(const attn_case *c, qs_dtype dt) {
    mark mk = mark_now();
    const double u = dt == QS_BF16 ? 0x1p-8 : 0x1p-11;
    const int64_t N = c->N, T = c->T, HD = c->H * c->D, tokens = N * T;
    const float alpha = 1.0f / sqrtf((float)c->D);
    char sh[128], what[192];
    snprintf(sh, sizeof sh, "%s N%lld T%lld H%lld D%lld%s%s%s", qs_dtype_name(dt), (long long)N, (long long)T,
             (long long)c->H, (long long)c->D, c->causal ? " causal" : "", c->pad == 1 ? " pads" : c->pad == 2 ? " padded-sample" : "",
             c->packed ? " packed" : "");
    seed(sh, 0);
    /* operands: one buffer of three parts, or three buffers */
    int64_t ld[3], off[3], buf_len[3];
    float *host[3];
    for (int i = 0; i < 3; i++) {
        ld[i] = c->packed ? 3 * HD : HD;
        off[i] = c->packed ? i * HD : 0;
        buf_len[i] = tokens * ld[i];
    }
    if (c->packed) {
        host[0] = host[1] = host[2] = round_to(rnd(buf_len[0], -2, 2), buf_len[0], dt);
    } else {
        for (int i = 0; i < 3; i++) host[i] = round_to(rnd(buf_len[i], -2, 2), buf_len[i], dt);
    }
    float *ids = NULL;
    if (c->pad) {
        ids = hf(tokens);
        for (int64_t i = 0; i < tokens; i++) ids[i] = (float)(1 + qs_rng_below(&g_rng, 50));
        if (c->pad == 1)
            for (int64_t i = 0; i < tokens; i += 5) ids[i] = kPad;
        if (c->pad == 2 && N > 1)
            for (int64_t t = 0; t < T; t++) ids[T + t] = kPad;
    }
    float *dout = rnd(tokens * HD, -1, 1);
    double *ref = calloc((size_t)(tokens * HD), sizeof *ref), *gref[3];
    for (int i = 0; i < 3; i++) gref[i] = calloc((size_t)buf_len[i], sizeof(double));
    if (c->packed) gref[1] = gref[2] = gref[0];
    reference(c, alpha, (const float *[]){host[0], host[1], host[2]}, ld, off, ids, ref, dout, gref);

    /* the GPU */
    float *gbuf[3];
    gbuf[0] = dup_dev_f(host[0], buf_len[0]);
    for (int i = 1; i < 3; i++) gbuf[i] = c->packed ? gbuf[0] : dup_dev_f(host[i], buf_len[i]);
    const float *gids = ids ? dup_dev_f(ids, tokens) : NULL;
    const qs_attention_desc d = {.N = N, .T = T, .H = c->H, .D = c->D, .alpha = alpha, .causal = c->causal,
                                 .key_ids = gids, .pad_id = kPad, .dtype = dt};
    qs_heads_ref r[3];
    for (int i = 0; i < 3; i++) r[i] = (qs_heads_ref){.ptr = gbuf[i], .ld = ld[i], .off = off[i]};
    void *saved = dalloc(qs_attention_saved_bytes(&d), 0);
    void *ws = dalloc(qs_attention_workspace_bytes(&d), 0);
    float *gout = dalloc_f(tokens * HD), *hout = hf(tokens * HD);
    snprintf(what, sizeof what, "attention fwd %s", sh);
    if (!dut_ok_(DOPS->attention_forward(g_dut, DST, &d, &r[0], &r[1], &r[2], gout, saved), what) ||
        !dget(hout, gout, (size_t)(tokens * HD) * 4, what)) {
        release_to(mk);
        free(ref);
        for (int i = 0; i < (c->packed ? 1 : 3); i++) free(gref[i]);
        return;
    }
    check_nmse(what, hout, to_float(ref, tokens * HD), tokens * HD, 10 * u * u * 3);
    if (c->pad == 2 && N > 1) { /* the padded sample's rows: exactly 0 */
        int64_t bad = 0;
        for (int64_t i = T * HD; i < 2 * T * HD; i++) bad += hout[i] != 0.0f;
        snprintf(what, sizeof what, "attention fwd %s: rows without keys are 0", sh);
        char detail[64];
        snprintf(detail, sizeof detail, "%lld nonzero", (long long)bad);
        check_fact(what, bad == 0, detail);
    }

    /* backward from the GPU's own output, twice, then with accumulation */
    const float *gdout = dup_dev_f(dout, tokens * HD);
    for (int acc = 0; acc < 2; acc++) {
        float *base[3], *gg[3], *res[2][3];
        const int nbuf = c->packed ? 1 : 3;
        for (int i = 0; i < nbuf; i++) {
            base[i] = rnd(buf_len[i], -1, 1);
            res[0][i] = hf(buf_len[i]);
            res[1][i] = hf(buf_len[i]);
        }
        for (int rep = 0; rep < 2; rep++) {
            for (int i = 0; i < nbuf; i++) gg[i] = acc ? dup_dev_f(base[i], buf_len[i]) : dalloc_f(buf_len[i]);
            if (c->packed) gg[1] = gg[2] = gg[0];
            qs_heads_ref g[3];
            for (int i = 0; i < 3; i++)
                g[i] = (qs_heads_ref){.ptr = gg[i], .ld = ld[i], .off = off[i], .accumulate = acc != 0};
            snprintf(what, sizeof what, "attention bwd%s %s", acc ? " accumulate" : "", sh);
            if (!dut_ok_(DOPS->attention_backward(g_dut, DST, &d, saved, gout, gdout, &g[0], &g[1], &g[2], ws), what))
                break;
            for (int i = 0; i < nbuf; i++)
                if (!dget(res[rep][i], gg[i], (size_t)buf_len[i] * 4, what)) break;
        }
        static const char *const names[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < nbuf; i++) {
            float *want = hf(buf_len[i]);
            for (int64_t e = 0; e < buf_len[i]; e++) want[e] = (float)((acc ? base[i][e] : 0.0) + gref[i][e]);
            snprintf(what, sizeof what, "attention bwd%s %s %s", acc ? " accumulate" : "", sh,
                     c->packed ? "dqkv" : names[i]);
            check_nmse(what, res[0][i], want, buf_len[i], 10 * u * u * 6);
            snprintf(what, sizeof what, "attention bwd%s %s %s: two runs bitwise equal", acc ? " accumulate" : "", sh,
                     c->packed ? "dqkv" : names[i]);
            check_fact(what, same_bits(res[0][i], res[1][i], buf_len[i]), "");
        }
    }
    release_to(mk);
    free(ref);
    for (int i = 0; i < (c->packed ? 1 : 3); i++) free(gref[i]);
}

static const attn_case k_cases[] = {
    {2, 64, 2, 64, true, 0, true},   {2, 100, 3, 32, false, 1, false}, {1, 1, 1, 64, true, 0, true},
    {2, 130, 2, 64, true, 2, false}, {1, 257, 1, 32, true, 0, true},   {2, 77, 2, 64, false, 0, true},
};

static void test_attention(qs_dtype dt, const char *name) {
    g_test = name;
    g_fail = 0;
    if (!COPS->cast || !DOPS->attention_forward || !DOPS->attention_backward || !DOPS->attention_supported) {
        check_fact("CUDA ops table has attention_forward/backward/supported", false,
                   "src/cuda/cuda_backend.c registers them (src/cuda/cuda_attention.cu)");
        END();
        return;
    }
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++) run_case(&k_cases[i], dt);
    END();
}

static void test_attention_bf16(void **state) {
    (void)state;
    test_attention(QS_BF16, __func__);
}
static void test_attention_fp16(void **state) {
    (void)state;
    test_attention(QS_F16, __func__);
}

/* What the fused kernels refuse: other dtypes and head widths (the graph then runs attention
 * unfused), and bad operand layouts. */
static void test_attention_refusals(void **state) {
    (void)state;
    BEGIN();
    qs_attention_desc d = {.N = 1, .T = 8, .H = 1, .D = 64, .alpha = 0.125f, .dtype = QS_BF16};
    check_fact("supported: bf16 D64", DOPS->attention_supported(g_dut, &d), "");
    d.dtype = QS_F32;
    check_fact("not supported: f32", !DOPS->attention_supported(g_dut, &d), "");
    d.dtype = QS_BF16;
    d.D = 128;
    check_fact("not supported: D128", !DOPS->attention_supported(g_dut, &d), "");
    float *buf = dalloc_f(8 * 64), *out = dalloc_f(8 * 64);
    void *saved = dalloc(1 << 16, 0);
    d.D = 64;
    const qs_heads_ref ok = {.ptr = buf, .ld = 64, .off = 0}, narrow = {.ptr = buf, .ld = 32, .off = 0};
    qs_status st = DOPS->attention_forward(g_dut, DST, &d, &ok, &narrow, &ok, out, saved);
    check_fact("forward refuses token rows narrower than H·D", st == QS_ERR_INVALID_ARG, qs_last_error());
    d.D = 128;
    st = DOPS->attention_forward(g_dut, DST, &d, &ok, &ok, &ok, out, saved);
    check_fact("forward refuses an unsupported shape", st == QS_ERR_UNSUPPORTED, qs_last_error());
    END();
}

/* ================================================================ inside a model */

typedef struct step_result {
    double loss;
    int fused;
    size_t activations;
    float *grads[128];
    int64_t numel[128];
    char names[128][QS_NAME_MAX];
    int n;
} step_result;

/* One training step of `arch` (T 64 tokens, `classes` classes) at BF16 on the GPU, fused or
 * not, on a fixed batch: its loss, every parameter gradient, and how many attentions were fused. */
static void model_step(const char *arch, int64_t classes, bool fused, const float *x, const int32_t *labels,
                       int64_t batch, step_result *r) {
    qs_model_options o = qs_models_default_options(1, 1, 64, classes);
    qs_model *m = NULL;
    ASSERT_OK(qs_models_build(arch, &o, &m));
    qs_model_set_uniform_precision(m, QS_PREC_BF16);
    ASSERT_OK(qs_model_insert_casts(m, NULL));
    const bool was = g_dut->fused_attention;
    g_dut->fused_attention = fused;
    const qs_status st = qs_model_setup(m, g_dut, batch, 7);
    g_dut->fused_attention = was;
    ASSERT_OK(st);
    ASSERT_OK(qs_model_forward(m, x, labels, true));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    ASSERT_OK(qs_model_loss_accuracy(m, batch, &r->loss, NULL));
    r->fused = 0;
    for (int i = 0; i < m->n_nodes; i++) r->fused += m->nodes[i].kind == QS_NODE_MERGE_HEADS && m->nodes[i].cfg.merge.fused;
    qs_memory_report mr;
    qs_model_memory(m, &mr);
    r->activations = mr.activations + mr.activation_grads + mr.saved;
    r->n = m->params.count < 128 ? m->params.count : 128;
    for (int i = 0; i < r->n; i++) {
        r->numel[i] = m->params.entries[i].numel;
        snprintf(r->names[i], QS_NAME_MAX, "%s", m->params.entries[i].name);
        r->grads[i] = hf(r->numel[i]);
        float *g = qs_test_download(m, qs_model_grad_ptr(m, i), r->numel[i]);
        memcpy(r->grads[i], g, (size_t)r->numel[i] * 4);
        free(g);
    }
    qs_model_free(m);
}

/* The fused and the unfused graph of one model compute the same step: losses and every
 * parameter gradient agree within BF16 rounding. The two round at different points (the fused
 * kernel rounds unnormalised probabilities, the unfused MatMuls the normalised ones and their
 * gradients after the softmax backward), so they differ by about the sum of both paths'
 * rounding errors, each a few u per value on the way: budget 100·u² (u = 2^-8) for NMSE, and a
 * relative 10·u for the loss. Every attention is fused (4 in either model) and the fused graph
 * keeps less activation memory (no (T, T) scores). gpt-mini: causal, D 32, one projection for
 * q, k, v; bert-mini: padding mask (id 0: the last 9 tokens of every other sequence), D 64,
 * three projections, one label per sequence. A key bias's gradient is exactly zero (the softmax
 * ignores a constant added to a row of scores): both runs must hold only noise there, under 1%
 * of the query bias gradient's norm. */
static void compare_fused(const char *arch, int64_t classes, int64_t label_len) {
    const int64_t batch = 4, T = 64;
    seed(arch, 0);
    float *x = hf(batch * T);
    int32_t *labels = halloc((size_t)(batch * label_len) * sizeof(int32_t));
    for (int64_t i = 0; i < batch * T; i++) x[i] = (float)(1 + qs_rng_below(&g_rng, 255));
    for (int64_t n = 1; n < batch; n += 2)
        for (int64_t t = T - 9; t < T; t++) x[n * T + t] = 0.0f;
    for (int64_t i = 0; i < batch * label_len; i++) labels[i] = (int32_t)qs_rng_below(&g_rng, (uint64_t)classes);
    step_result a, b;
    model_step(arch, classes, true, x, labels, batch, &a);
    model_step(arch, classes, false, x, labels, batch, &b);
    char what[128], detail[128];
    snprintf(detail, sizeof detail, "%d fused, %d in the unfused run", a.fused, b.fused);
    snprintf(what, sizeof what, "%s bf16: all 4 attentions fused", arch);
    check_fact(what, a.fused == 4 && b.fused == 0, detail);
    snprintf(detail, sizeof detail, "%.2f MiB fused, %.2f MiB unfused", a.activations / 1048576.0,
             b.activations / 1048576.0);
    snprintf(what, sizeof what, "%s bf16: fused attention keeps less activation memory", arch);
    check_fact(what, a.activations < b.activations, detail);
    const double u = 0x1p-8;
    snprintf(detail, sizeof detail, "loss %.7f fused, %.7f unfused", a.loss, b.loss);
    snprintf(what, sizeof what, "%s bf16: losses agree within 10·u", arch);
    check_fact(what, fabs(a.loss - b.loss) <= 10 * u * fabs(b.loss), detail);
    for (int i = 0; i < a.n && i < b.n; i++) {
        snprintf(what, sizeof what, "%s bf16 grad %s", arch, a.names[i]);
        const size_t len = strlen(a.names[i]);
        if (len > 8 && strcmp(a.names[i] + len - 8, "key.bias") == 0) {
            /* exactly 0: a key bias adds q·b to a whole score row, which the softmax ignores;
             * both runs hold rounding noise, far below the query bias gradient next to it */
            const double na = l2(a.grads[i], a.numel[i]), nb = l2(b.grads[i], b.numel[i]);
            const double nq = l2(a.grads[i - 2], a.numel[i - 2]); /* query.bias (query.w, query.b, key.w, key.b) */
            snprintf(detail, sizeof detail, "|g| %.3e fused, %.3e unfused, query bias %.3e", na, nb, nq);
            check_fact(what, na <= 0.01 * nq && nb <= 0.01 * nq, detail);
            continue;
        }
        check_nmse(what, a.grads[i], b.grads[i], a.numel[i], 100 * u * u);
    }
}

static void test_attention_in_model(void **state) {
    (void)state;
    BEGIN();
    compare_fused("gpt-mini", 256, 64);
    compare_fused("bert-mini", 4, 1);
    END();
}

int main(void) {
    const gh_suite suite = {.name = "test_cuda_attention", .seed_key = 20261204, .name_width = 72};
    const int rc = gh_start(&suite);
    if (rc) return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_attention_bf16, teardown),
        cmocka_unit_test_teardown(test_attention_fp16, teardown),
        cmocka_unit_test_teardown(test_attention_refusals, teardown),
        cmocka_unit_test_teardown(test_attention_in_model, teardown),
    };
    return gh_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
