/* tests/backend_ops/ops_transformer.c — defines: the transformer ops of the registry — GELU and
 * tanh, embedding (and ids out of range), the broadcast add, argmax over rows, the head permutes
 * and the masked softmax — and their rows.
 *
 * Tolerances (check_tol: rtol = 4·u·sqrt(4·Kr), atol = rtol·scale, default max|ref|):
 *  - exact (value equality): embedding forward, add_broadcast, permute_heads (also accumulate:
 *    one FP32 addition on both sides), masked entries of softmax (exactly 0); argmax indices bit
 *    for bit (the first maximum; values from 8 levels, so ties abound);
 *  - GELU: the argument z is formed by the same FP32 operations on both sides; expf (≤ 2 ulp on
 *    the GPU, < 1 ulp in glibc) and ≤ 4 roundings follow: forward Kr 8, backward Kr 12 (its terms
 *    cancel near x ≈ −0.75, where atol takes over); tanh ≤ 2 ulp per side: Kr 4. Saturating
 *    arguments (|x| ≥ 5, tiny x) are judged element by element (atol 0): there nothing cancels;
 *    an accumulated gradient may cancel, so it is judged against max|ref| (Kr + 1);
 *  - embedding backward: Kr = the largest number of rows sharing an id (the reduction length;
 *    both sides sum in double in row order, so the values are usually identical);
 *  - softmax: Kr = Tk + 2 (as the probabilities of softmax_xent), backward Kr = cols + 2 (+1
 *    accumulated), from the reference's probabilities.
 * Backend-specific: an id outside [0, V) yields a zero row forward and is ignored backward on
 * CUDA (which cannot fail mid-stream), while the CPU refuses it (QS_ERR_INVALID_ARG).
 * FP64 rows: GELU and tanh forward over the random sets and the masked softmax, in double, at one
 * implementation's budget (check.h). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bo.h"
#include "gpu_harness.h"
#include "graph_helpers.h"

#define SEED_TR 20261203 /* the key of the suite these rows came from */

/* -------------------------------------------------------------------------- GELU, tanh */

/* v = {input set, n}: sets 0, 1 random x in [-6, 6) with zeros, subnormals, the GELU minimum
 * (x ≈ −0.75) and a NaN among them; set 2 saturating arguments alone */
enum { GX, GY, GDY, GDX };
enum { GELU_FWD, GELU_FWD_INPLACE, GELU_BWD, GELU_BWD_ACC, TANH_FWD, TANH_BWD, TANH_BWD_ACC };
static const float k_saturating[] = {20.0f, -20.0f, 100.0f, -100.0f, 9.0f, -9.0f, 5.0f, -5.0f, 0.5f, -0.5f, 1e-30f, -1e-30f};

static void act_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%s n=%lld", c->v[0] == 2 ? "saturating" : "random", (long long)c->v[1]);
}

static void act_inputs(bo_case *c) {
    const int64_t t = c->v[0], n = c->v[1];
    const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 9.0f, -9.0f, -0.75f, 1e-3f, NAN};
    const double scale = t == 2 ? 0.0 : -1.0; /* atol: 0, or rtol·max|ref| */
    bo_seed(c, "gelu_tanh", (uint64_t)t);
    float *x = rnd(n, -6, 6), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
    if (t == 2) memcpy(x, k_saturating, sizeof k_saturating);
    else
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[3 * i + 1] = special[i];
    const int v = c->op->variant;
    if (v == TANH_BWD || v == TANH_BWD_ACC) { /* backward from the reference's output */
        float *y = hf(n);
        ASSERT_OK(COPS->tanh_forward(g_cpu, CST, n, x, y));
        bo_in(c, GX, "y", y, (size_t)n * 4);
    } else if (v == GELU_FWD_INPLACE) {
        bo_inout(c, GX, "x = y", x, n, 4, BO_ROW, 8);
        c->t[GX].scale = scale;
        return;
    } else {
        bo_in(c, GX, "x", x, (size_t)n * 4);
    }
    if (v == GELU_FWD || v == TANH_FWD) {
        bo_out(c, GY, "y", n, 4, BO_ROW, v == GELU_FWD ? 8 : 4);
        c->t[GY].scale = scale;
        return;
    }
    bo_in(c, GDY, "dy", dy, (size_t)n * 4);
    const double K = v == GELU_BWD || v == GELU_BWD_ACC ? 12 : 4;
    if (v == GELU_BWD_ACC || v == TANH_BWD_ACC) {
        bo_inout(c, GDX, "dx accumulated", base, n, 4, BO_ROW, K + 1);
    } else {
        bo_out(c, GDX, "dx", n, 4, BO_ROW, K);
        c->t[GDX].scale = scale;
    }
}

static qs_status act_exec(bo_case *c, bo_side *s) {
    const int64_t n = c->v[1];
    const qs_backend_ops *o = s->be->ops;
    switch (c->op->variant) {
    case GELU_FWD: return o->gelu_forward(s->be, s->st, n, BO_F(GX), BO_F(GY));
    case GELU_FWD_INPLACE: return o->gelu_forward(s->be, s->st, n, BO_F(GX), BO_F(GX));
    case GELU_BWD:
    case GELU_BWD_ACC: return o->gelu_backward(s->be, s->st, n, BO_F(GX), BO_F(GDY), BO_F(GDX), c->op->variant == GELU_BWD_ACC);
    case TANH_FWD: return o->tanh_forward(s->be, s->st, n, BO_F(GX), BO_F(GY));
    default: return o->tanh_backward(s->be, s->st, n, BO_F(GX), BO_F(GDY), BO_F(GDX), c->op->variant == TANH_BWD_ACC);
    }
}

/* GELU (tanh approximation) and tanh forward in double, over the random sets (at saturation the
 * FP32 formula's 1 + tanh(z) rounds to 0: both backends agree there, exact arithmetic does not). */
static void act_fp64(bo_case *c) {
    if (c->v[0] == 2) return;
    const int64_t n = c->v[1];
    const float *x = c->t[GX].at[0];
    double *y = halloc((size_t)n * sizeof(double));
    const bool gelu = c->op->variant == GELU_FWD;
    for (int64_t i = 0; i < n; i++) {
        const double v = x[i];
        y[i] = gelu ? 0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v))) : tanh(v);
    }
    check_fp64(bo_what(c, "cpu y vs fp64"), c->t[GY].at[0], y, n, gelu ? 8 : 4, -1);
}

#define ACT_OP(nm, var, entry)                                                                                  \
    {.name = nm, .variant = var, .seed_key = SEED_TR, .describe = act_describe, .inputs = act_inputs,         \
     .exec = act_exec, .need = {BO_NEED(entry)}}
static const bo_op bo_gelu_forward = ACT_OP("gelu_forward", GELU_FWD, gelu_forward);
static const bo_op bo_gelu_forward_inplace = ACT_OP("gelu_forward_in_place", GELU_FWD_INPLACE, gelu_forward);
static const bo_op bo_gelu_backward = ACT_OP("gelu_backward", GELU_BWD, gelu_backward);
static const bo_op bo_gelu_backward_acc = ACT_OP("gelu_backward_acc", GELU_BWD_ACC, gelu_backward);
static const bo_op bo_tanh_forward = ACT_OP("tanh_forward", TANH_FWD, tanh_forward);
static const bo_op bo_tanh_backward = ACT_OP("tanh_backward", TANH_BWD, tanh_backward);
static const bo_op bo_tanh_backward_acc = ACT_OP("tanh_backward_acc", TANH_BWD_ACC, tanh_backward);
static const int64_t k_act[][BO_V] = {
    {0, 1003}, {1, (1 << 20) + 1}, {2, (int64_t)(sizeof k_saturating / sizeof k_saturating[0])}};

/* --------------------------------------------------------------------------- embedding */

/* v = {input set, rows, C, V, heavy %}: that percentage of the rows share id 0 (a frequent token) */
enum { EIDS, ETAB, EY, EDY, EDT };
enum { EMB_FWD, EMB_BWD, EMB_BWD_ACC };

static void emb_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "rows=%lld C=%lld V=%lld%s", (long long)c->v[1], (long long)c->v[2], (long long)c->v[3],
             c->v[4] ? " (frequent id)" : "");
}

static void emb_inputs(bo_case *c) {
    const int64_t rows = c->v[1], C = c->v[2], V = c->v[3];
    bo_seed(c, "embedding", (uint64_t)c->v[0]);
    float *ids = hf(rows);
    int64_t *count = halloc((size_t)V * sizeof(int64_t));
    int64_t max_count = 1;
    for (int64_t r = 0; r < rows; r++) {
        const bool heavy = (int)qs_rng_below(&g_rng, 100) < c->v[4];
        ids[r] = heavy ? 0.0f : (float)qs_rng_below(&g_rng, (uint64_t)V);
        if (++count[(int64_t)ids[r]] > max_count) max_count = count[(int64_t)ids[r]];
    }
    float *table = rnd(V * C, -1, 1), *dy = rnd(rows * C, -1, 1), *base = rnd(V * C, -1, 1);
    bo_in(c, EIDS, "ids", ids, (size_t)rows * 4);
    if (c->op->variant == EMB_FWD) {
        bo_in(c, ETAB, "table", table, (size_t)(V * C) * 4);
        bo_out(c, EY, "y", rows * C, 4, BO_ROW, 0);
        return;
    }
    char *name = halloc(64);
    snprintf(name, 64, "dtable (max %lld rows per id)", (long long)max_count);
    bo_in(c, EDY, "dy", dy, (size_t)(rows * C) * 4);
    if (c->op->variant == EMB_BWD_ACC) bo_inout(c, EDT, name, base, V * C, 4, BO_ROW, (double)max_count + 1);
    else bo_out(c, EDT, name, V * C, 4, BO_ROW, (double)max_count);
}

static qs_status emb_exec(bo_case *c, bo_side *s) {
    const int64_t rows = c->v[1], C = c->v[2], V = c->v[3];
    if (c->op->variant == EMB_FWD) return s->be->ops->embedding_forward(s->be, s->st, rows, C, V, BO_F(EIDS), BO_F(ETAB), BO_F(EY));
    return s->be->ops->embedding_backward(s->be, s->st, rows, C, V, BO_F(EIDS), BO_F(EDY), BO_F(EDT),
                                          c->op->variant == EMB_BWD_ACC);
}

#define EMB_OP(nm, var, entry)                                                                                  \
    {.name = nm, .variant = var, .seed_key = SEED_TR, .describe = emb_describe, .inputs = emb_inputs,         \
     .exec = emb_exec, .need = {BO_NEED(entry)}}
static const bo_op bo_embedding_forward = EMB_OP("embedding_forward", EMB_FWD, embedding_forward);
static const bo_op bo_embedding_backward = EMB_OP("embedding_backward", EMB_BWD, embedding_backward);
static const bo_op bo_embedding_backward_acc = EMB_OP("embedding_backward_acc", EMB_BWD_ACC, embedding_backward);
static const int64_t k_emb[][BO_V] = {{0, 1, 1, 3, 0}, {1, 64, 7, 50, 0}, {2, 512, 768, 1000, 0},
                                      {3, 5000, 33, 10, 60}, {4, 300, 20, 7, 0}};

/* Ids -1, 4 (= V), NaN and 1e9 among valid ones (v = {}): on CUDA a zero row forward and ignored
 * backward (the reference: the CPU on the valid rows alone, in their order); the CPU refuses them.
 * exec (what --perf times) is the lookup of the valid rows. */
enum { IIDS, IVIDS, ITAB, IDY, IVDY, IY };
#define INV_ROWS 9
#define INV_C 5
#define INV_V 4
static const float k_inv_ids[INV_ROWS] = {1.0f, -1.0f, 3.0f, 4.0f, NAN, 1.0f, 1e9f, 0.0f, 3.0f};

static void inv_inputs(bo_case *c) {
    bo_seed(c, "embedding_invalid", 0);
    float *table = rnd(INV_V * INV_C, -1, 1), *dy = rnd(INV_ROWS * INV_C, -1, 1);
    float *expect = hf(INV_ROWS * INV_C), *vdy = hf(INV_ROWS * INV_C), *vids = hf(INV_ROWS);
    int64_t nv = 0;
    for (int64_t r = 0; r < INV_ROWS; r++) {
        if (!(k_inv_ids[r] >= 0.0f && k_inv_ids[r] < (float)INV_V)) continue;
        memcpy(expect + r * INV_C, table + (int64_t)k_inv_ids[r] * INV_C, INV_C * sizeof(float));
        memcpy(vdy + nv * INV_C, dy + r * INV_C, INV_C * sizeof(float));
        vids[nv++] = k_inv_ids[r];
    }
    c->n[0] = nv;
    c->aux = expect;
    bo_in(c, IIDS, "ids", k_inv_ids, sizeof k_inv_ids);
    bo_in(c, IVIDS, "valid ids", vids, (size_t)nv * 4);
    bo_in(c, ITAB, "table", table, INV_V * INV_C * 4);
    bo_in(c, IDY, "dy", dy, INV_ROWS * INV_C * 4);
    bo_in(c, IVDY, "dy of the valid rows", vdy, (size_t)nv * INV_C * 4);
    bo_out(c, IY, "y", INV_ROWS * INV_C, 4, BO_NOCMP, 0);
}
static qs_status inv_exec(bo_case *c, bo_side *s) {
    return s->be->ops->embedding_forward(s->be, s->st, c->n[0], INV_C, INV_V, BO_F(IVIDS), BO_F(ITAB), BO_F(IY));
}
static void inv_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    (void)ref;
    float *gy = dalloc_f(INV_ROWS * INV_C), *gdt = dalloc_f(INV_V * INV_C), *cdt = hf(INV_V * INV_C);
    const float *ids = bo_at(c, dut, IIDS);
    qs_error_clear();
    const qs_status fs = DOPS->embedding_forward(g_dut, DST, INV_ROWS, INV_C, INV_V, ids, bo_at(c, dut, ITAB), gy);
    if (!gh_dut_is_cuda()) { /* the CPU refuses ids outside [0, V), naming the token id */
        check_fact(bo_what(c, "forward refused"), fs == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "token id"),
                   qs_last_error());
        qs_error_clear();
        const qs_status bs = DOPS->embedding_backward(g_dut, DST, INV_ROWS, INV_C, INV_V, ids, bo_at(c, dut, IDY), gdt,
                                                      false);
        check_fact(bo_what(c, "backward refused"), bs == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "token id"),
                   qs_last_error());
        qs_error_clear();
        return;
    }
    if (dut_ok_(fs, bo_what(c, "forward: zero rows")))
        cmp_tol(bo_what(c, "forward: zero rows"), gy, c->aux, INV_ROWS * INV_C, 0, 0);
    ASSERT_OK(COPS->embedding_backward(g_cpu, CST, c->n[0], INV_C, INV_V, c->t[IVIDS].host, c->t[IVDY].host, cdt, false));
    if (dut_ok_(DOPS->embedding_backward(g_dut, DST, INV_ROWS, INV_C, INV_V, ids, bo_at(c, dut, IDY), gdt, false),
                bo_what(c, "backward: invalid ids ignored")))
        cmp_tol(bo_what(c, "backward: invalid ids ignored"), gdt, cdt, INV_V * INV_C, 2, -1);
}
static const bo_op bo_embedding_invalid_ids = {.name = "embedding_invalid_ids", .seed_key = SEED_TR,
                                               .inputs = inv_inputs, .exec = inv_exec, .judge = inv_judge,
                                               .dut_only = true,
                                               .need = {BO_NEED(embedding_forward), BO_NEED(embedding_backward)}};
static const int64_t k_one[][BO_V] = {{0}};

/* ------------------------------------------------------- broadcast add, argmax, heads */

/* add_broadcast: v = {input set, outer, inner, in place} */
enum { BX, BV, BY };
static void outer_inner_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "outer=%lld inner=%lld%s", (long long)c->v[1], (long long)c->v[2], c->v[3] ? " in place" : "");
}
static void addb_inputs(bo_case *c) {
    const int64_t outer = c->v[1], inner = c->v[2], n = outer * inner;
    bo_seed(c, "add_broadcast", (uint64_t)c->v[0]);
    float *x = rnd(n + 1, -1, 1), *v = rnd(inner, -1, 1);
    bo_in(c, BV, "v", v, (size_t)inner * 4);
    if (c->v[3]) {
        bo_inout(c, BX, "x = y", x, n, 4, BO_ROW, 0);
    } else {
        bo_in(c, BX, "x", x, (size_t)n * 4);
        bo_out(c, BY, "y", n, 4, BO_ROW, 0);
    }
}
static qs_status addb_exec(bo_case *c, bo_side *s) {
    return s->be->ops->add_broadcast(s->be, s->st, c->v[1], c->v[2], BO_F(BX), BO_F(BV), BO_F(c->v[3] ? BX : BY));
}
static const bo_op bo_add_broadcast = {.name = "add_broadcast", .seed_key = SEED_TR, .describe = outer_inner_describe,
                                       .inputs = addb_inputs, .exec = addb_exec, .need = {BO_NEED(add_broadcast)}};
#define AB2(t, o, i) {t, o, i, 0}, {t, o, i, 1}
static const int64_t k_addb[][BO_V] = {AB2(0, 1, 1), AB2(1, 3, 7), AB2(2, 8, 16 * 24), AB2(3, 5, 1001), AB2(4, 0, 5)};

/* argmax_rows: v = {input set, rows, cols}: values from 8 levels (many ties) */
static void rows_cols_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "rows=%lld cols=%lld", (long long)c->v[1], (long long)c->v[2]);
}
static void argmax_inputs(bo_case *c) {
    const int64_t rows = c->v[1], cols = c->v[2], n = rows * cols;
    bo_seed(c, "argmax_rows", (uint64_t)c->v[0]);
    float *x = rnd(n + 1, 0, 8);
    for (int64_t i = 0; i < n; i++) x[i] = floorf(x[i]);
    bo_in(c, BX, "x", x, (size_t)(n + 1) * 4);
    bo_out(c, BY, "indices", rows, 4, BO_BITS, 0);
}
static qs_status argmax_exec(bo_case *c, bo_side *s) {
    return s->be->ops->argmax_rows(s->be, s->st, c->v[1], c->v[2], BO_F(BX), bo_at(c, s, BY));
}
static const bo_op bo_argmax_rows = {.name = "argmax_rows", .seed_key = SEED_TR, .describe = rows_cols_describe,
                                     .inputs = argmax_inputs, .exec = argmax_exec, .need = {BO_NEED(argmax_rows)}};
static const int64_t k_argmax[][BO_V] = {{0, 1, 1}, {1, 3, 7}, {2, 37, 33}, {3, 8, 50257}, {4, 0, 5}};

/* permute_heads: v = {input set, N, T, H, D, ld, off, accumulate}; to tokens touches only the
 * slice (the rest keeps its start value) */
enum { PSRC, PDST };
static void heads_describe(const bo_case *c, char *buf, size_t n) {
    const int64_t *v = c->v;
    snprintf(buf, n, "N%lld T%lld H%lld D%lld ld%lld off%lld%s", (long long)v[1], (long long)v[2], (long long)v[3],
             (long long)v[4], (long long)v[5], (long long)v[6], v[7] ? " accumulate" : "");
}
static void heads_inputs(bo_case *c) {
    const int64_t *v = c->v, nh = v[1] * v[3] * v[2] * v[4], ntok = v[1] * v[2] * v[5];
    bo_seed(c, "permute_heads", (uint64_t)v[0]);
    float *tok = rnd(ntok, -1, 1), *heads = rnd(nh, -1, 1), *hbase = rnd(nh, -1, 1), *tbase = rnd(ntok, -1, 1);
    if (c->op->variant == 0) {
        bo_in(c, PSRC, "tokens", tok, (size_t)ntok * 4);
        if (v[7]) bo_inout(c, PDST, "heads", hbase, nh, 4, BO_ROW, 0);
        else bo_out(c, PDST, "heads", nh, 4, BO_ROW, 0);
    } else {
        bo_in(c, PSRC, "heads", heads, (size_t)nh * 4);
        bo_inout(c, PDST, "tokens (whole rows)", tbase, ntok, 4, BO_ROW, 0);
    }
}
static qs_status heads_exec(bo_case *c, bo_side *s) {
    const int64_t *v = c->v;
    return s->be->ops->permute_heads(s->be, s->st, v[1], v[2], v[3], v[4], v[5], v[6], BO_F(PSRC), BO_F(PDST),
                                     c->op->variant == 0, v[7] != 0);
}
#define HEADS_OP(nm, var)                                                                                       \
    {.name = nm, .variant = var, .seed_key = SEED_TR, .describe = heads_describe, .inputs = heads_inputs,     \
     .exec = heads_exec, .need = {BO_NEED(permute_heads)}}
static const bo_op bo_permute_to_heads = HEADS_OP("permute_heads_to_heads", 0);
static const bo_op bo_permute_to_tokens = HEADS_OP("permute_heads_to_tokens", 1);
#define PH2(t, N, T, H, D, ld, off) {t, N, T, H, D, ld, off, 0}, {t, N, T, H, D, ld, off, 1}
static const int64_t k_heads[][BO_V] = {
    PH2(0, 1, 1, 1, 1, 1, 0),       PH2(1, 2, 5, 3, 4, 36, 12), /* q, k, v packed: k */
    PH2(2, 2, 7, 4, 20, 85, 5),     /* odd row length and offset */
    PH2(3, 3, 16, 12, 64, 2304, 1536), /* GPT-2 small's v slice */
    PH2(4, 1, 9, 1, 3, 3, 0)};

/* ------------------------------------------------------------------------------ softmax */

/* v = {input set, N, H, Tq, Tk, causal, pad, accumulate}; pad 0: no key_ids; 1: trailing pads in
 * sample 1; 2: key 0 of sample 0 padded; 3: sample 1 all pads */
enum { SX, SKID, SY, SDY, SDX };
static const float k_pad_id = 0.0f;

static void sm_describe(const bo_case *c, char *buf, size_t n) {
    const int64_t *v = c->v;
    snprintf(buf, n, "N%lld H%lld Tq%lld Tk%lld%s%s%s", (long long)v[1], (long long)v[2], (long long)v[3],
             (long long)v[4], v[5] ? " causal" : "", v[6] ? " pads" : "", v[7] ? " accumulate" : "");
}

static void sm_inputs(bo_case *c) {
    const int64_t *v = c->v, N = v[1], Tk = v[4], rows = v[1] * v[2] * v[3], n = rows * Tk;
    bo_seed(c, "softmax", (uint64_t)v[0]);
    float *x = rnd(n, -8, 8), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
    if (n > 3) x[n / 2] += 1000.0f; /* a large logit must not overflow */
    float *kid = NULL;
    if (v[6]) {
        kid = hf(N * Tk);
        for (int64_t i = 0; i < N * Tk; i++) kid[i] = (float)(1 + qs_rng_below(&g_rng, 50));
        if (v[6] == 1 && N > 1)
            for (int64_t j = Tk - 3 > 0 ? Tk - 3 : 0; j < Tk; j++) kid[Tk + j] = k_pad_id;
        if (v[6] == 2) kid[0] = k_pad_id;
        if (v[6] == 3 && N > 1)
            for (int64_t j = 0; j < Tk; j++) kid[Tk + j] = k_pad_id;
    }
    if (c->op->variant == 0) {
        bo_in(c, SX, "x", x, (size_t)n * 4);
        if (kid) bo_in(c, SKID, "key_ids", kid, (size_t)(N * Tk) * 4);
        else bo_none(c, SKID, "key_ids");
        bo_out(c, SY, "y", n, 4, BO_ROW, (double)Tk + 2);
        c->aux = kid;
        return;
    }
    float *y = hf(n); /* backward from the reference's probabilities */
    ASSERT_OK(COPS->softmax_forward(g_cpu, CST, N, v[2], v[3], Tk, x, y, v[5] != 0, kid, k_pad_id));
    bo_in(c, SY, "y", y, (size_t)n * 4);
    bo_in(c, SDY, "dy", dy, (size_t)n * 4);
    if (v[7]) bo_inout(c, SDX, "dx accumulated", base, n, 4, BO_ROW, (double)Tk + 3);
    else bo_out(c, SDX, "dx", n, 4, BO_ROW, (double)Tk + 2);
}

static qs_status sm_exec(bo_case *c, bo_side *s) {
    const int64_t *v = c->v;
    if (c->op->variant == 0)
        return s->be->ops->softmax_forward(s->be, s->st, v[1], v[2], v[3], v[4], BO_F(SX), BO_F(SY), v[5] != 0,
                                           BO_F(SKID), k_pad_id);
    return s->be->ops->softmax_backward(s->be, s->st, v[1] * v[2] * v[3], v[4], BO_F(SY), BO_F(SDY), BO_F(SDX), v[7] != 0);
}

static bool sm_masked(const bo_case *c, const float *kid, int64_t r, int64_t j) {
    const int64_t i = r % c->v[3], s = r / (c->v[2] * c->v[3]);
    return (c->v[5] && j > i) || (kid && kid[s * c->v[4] + j] == k_pad_id);
}

/* The values by the row's budget, then the contract's zeros: masked entries and fully masked
 * rows exactly 0. */
static void sm_fwd_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    bo_judge_outputs(c, ref, dut);
    const float *y = bo_fetch(c, dut, SY);
    if (!y) return;
    const int64_t rows = c->v[1] * c->v[2] * c->v[3], Tk = c->v[4];
    int64_t nmasked = 0, bad = 0, first = -1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < Tk; j++) {
            if (!sm_masked(c, c->aux, r, j)) continue;
            nmasked++;
            if (y[r * Tk + j] != 0.0f && bad++ == 0) first = r * Tk + j;
        }
    char detail[128];
    snprintf(detail, sizeof detail, "%lld masked entries, %lld not 0 (first [%lld])", (long long)nmasked,
             (long long)bad, (long long)first);
    check_fact(bo_what(c, "masked entries are 0"), bad == 0, detail);
}

/* The masked softmax in double. */
static void sm_fp64(bo_case *c) {
    const int64_t rows = c->v[1] * c->v[2] * c->v[3], Tk = c->v[4];
    const float *x = c->t[SX].at[0];
    double *y = halloc((size_t)(rows * Tk) * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < Tk; j++)
            if (!sm_masked(c, c->aux, r, j)) mx = fmax(mx, x[r * Tk + j]);
        for (int64_t j = 0; j < Tk; j++)
            if (!sm_masked(c, c->aux, r, j)) s += exp((double)x[r * Tk + j] - mx);
        for (int64_t j = 0; j < Tk; j++)
            y[r * Tk + j] = sm_masked(c, c->aux, r, j) ? 0.0 : exp((double)x[r * Tk + j] - mx) / s;
    }
    check_fp64(bo_what(c, "cpu y vs fp64"), c->t[SY].at[0], y, rows * Tk, (double)Tk + 2, -1);
}

static const bo_op bo_softmax_forward = {.name = "softmax_forward", .seed_key = SEED_TR, .describe = sm_describe,
                                         .inputs = sm_inputs, .exec = sm_exec, .judge = sm_fwd_judge,
                                         .need = {BO_NEED(softmax_forward)}};
static const bo_op bo_softmax_backward = {.name = "softmax_backward", .variant = 1, .seed_key = SEED_TR,
                                          .describe = sm_describe, .inputs = sm_inputs, .exec = sm_exec,
                                          .need = {BO_NEED(softmax_forward), BO_NEED(softmax_backward)}};
#define SM_CASES(X)                                                                                           \
    X(0, 1, 1, 1, 1, 0, 0), X(1, 2, 3, 5, 5, 1, 0), X(2, 2, 2, 7, 9, 0, 1), X(3, 2, 2, 6, 6, 1, 2),           \
        X(4, 2, 1, 4, 4, 0, 3), X(5, 4, 4, 33, 33, 1, 1), X(6, 2, 12, 128, 128, 1, 1), X(7, 1, 2, 3, 70, 0, 0), \
        X(8, 2, 2, 5, 8, 1, 1) /* Tq < Tk: causal compares indices as given */
#define SM1(t, N, H, Tq, Tk, causal, pad) {t, N, H, Tq, Tk, causal, pad, 0}
#define SM2(t, N, H, Tq, Tk, causal, pad) {t, N, H, Tq, Tk, causal, pad, 0}, {t, N, H, Tq, Tk, causal, pad, 1}
static const int64_t k_softmax[][BO_V] = {SM_CASES(SM1)};
static const int64_t k_softmax_bwd[][BO_V] = {SM_CASES(SM2)};

const bo_row bo_rows_transformer[] = {
    {&bo_gelu_forward, 0, BO_SHAPES(k_act), .budget = bo_tol, .fp64 = act_fp64},
    {&bo_gelu_forward_inplace, 0, BO_SHAPES(k_act), .budget = bo_tol},
    {&bo_gelu_backward, 0, BO_SHAPES(k_act), .budget = bo_tol},
    {&bo_gelu_backward_acc, 0, BO_SHAPES(k_act), .budget = bo_tol},
    {&bo_tanh_forward, 0, BO_SHAPES(k_act), .budget = bo_tol, .fp64 = act_fp64},
    {&bo_tanh_backward, 0, BO_SHAPES(k_act), .budget = bo_tol},
    {&bo_tanh_backward_acc, 0, BO_SHAPES(k_act), .budget = bo_tol},
    {&bo_embedding_forward, 0, BO_SHAPES(k_emb), .budget = bo_exact},
    {&bo_embedding_backward, 0, BO_SHAPES(k_emb), .budget = bo_tol},
    {&bo_embedding_backward_acc, 0, BO_SHAPES(k_emb), .budget = bo_tol},
    {&bo_embedding_invalid_ids, 0, BO_SHAPES(k_one), .budget = bo_exact},
    {&bo_add_broadcast, 0, BO_SHAPES(k_addb), .budget = bo_exact},
    {&bo_argmax_rows, 0, BO_SHAPES(k_argmax), .budget = bo_bits},
    {&bo_permute_to_heads, 0, BO_SHAPES(k_heads), .budget = bo_exact},
    {&bo_permute_to_tokens, 0, BO_SHAPES(k_heads), .budget = bo_exact},
    {&bo_softmax_forward, 0, BO_SHAPES(k_softmax), .budget = bo_tol, .fp64 = sm_fp64},
    {&bo_softmax_backward, 0, BO_SHAPES(k_softmax_bwd), .budget = bo_tol},
    {0},
};
