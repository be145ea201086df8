/* tests/backend_ops/ops_bmm.c — defines: the batched-matmul ops of the registry (forward,
 * backward-a and backward-b, each overwriting and accumulating), their rows and bmm_budget.
 *
 * Inputs: random FP32 tensors quantized ONCE, by the reference's quantize op, into the plan's
 * operand dtypes (per-tensor scales over the whole batched tensor); codes and scales go to both
 * sides. TF32 has no CPU counterpart: its reference is the CPU's FP32 plan on the same FP32
 * operands. INT8 runs on the CPU; the CUDA plan must refuse it (QS_ERR_UNSUPPORTED naming int8).
 *
 * NMSE budgets: those of the Linear (derivation: ops_gemm.c),
 *   budget = 10·(u²·(K + 2 + e) + A8(K)·[FP8] + I_tf32·[TF32]),   A8(K) = 2^-26·(min(K,128) + 2),
 *   I_tf32 = (7/6)·2^-20, K the reduction length of the output (forward K, backward-a N,
 *   backward-b M) and e the extra roundings of this op: +1 for alpha ≠ 1 (the CPU rounds the
 *   product, then multiplies by alpha; cuBLASLt scales inside its epilogue), +1 for accumulate.
 * FP64 rows: the CPU's forward against alpha·a·op(b) in double on the dequantized operands, at
 * one FP32 implementation's budget (check.h), Kr = K + 2. */
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

/* NMSE budget of a bmm output (file comment): reduction length K, `extra` roundings. */
static double bmm_budget(qs_precision p, double K, double extra) {
    const double u2 = 0x1p-48, margin = 10.0;
    const double a32 = u2 * (K + 2.0 + extra);
    const double a8 = p == QS_PREC_FP8 ? 0x1p-26 * (fmin(K, 128.0) + 2.0) : 0.0;
    const double in = p == QS_PREC_TF32 ? 0x1p-20 * (2.0 / 3.0 + 0.5) : 0.0;
    return margin * (a32 + a8 + in);
}
static bo_rule bmm_nmse(const bo_case *c, int i) {
    return (bo_rule){BO_NMSE, bmm_budget(c->prec, c->t[i].K, c->t[i].extra), 0};
}

enum { A, AS, B, BS, DC, DCS, C, DA, DB };
enum { FWD, BWD_A, BWD_A_ACC, BWD_B, BWD_B_ACC };

/* v = {batch, M, N, K, trans_b, alpha·10^9} */
static void bmm_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "b%lld M%lld N%lld K%lld %s a=%g", (long long)c->v[0], (long long)c->v[1], (long long)c->v[2],
             (long long)c->v[3], c->v[4] ? "a·bT" : "a·b", (double)(float)((double)c->v[5] * 1e-9));
}

/* The descriptor and sizes: n[0..2] = elements of a, b, c. */
static void bmm_geometry(bo_case *c) {
    const int64_t *v = c->v;
    c->d.bmm = (qs_bmm_desc){.batch = v[0], .M = v[1], .N = v[2], .K = v[3], .trans_b = v[4] != 0,
                             .alpha = (float)((double)v[5] * 1e-9), .prec = c->prec};
    c->n[0] = v[0] * v[1] * v[3], c->n[1] = v[0] * v[2] * v[3], c->n[2] = v[0] * v[1] * v[2];
}

static void bmm_inputs(bo_case *c) {
    bmm_geometry(c);
    const qs_bmm_desc *d = &c->d.bmm;
    const qs_precision p = c->prec;
    const int64_t B_ = d->batch, M = d->M, N = d->N, K = d->K, na = c->n[0], nb = c->n[1], nc = c->n[2];
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    bo_seed(c, "bmm", (uint64_t)p * 1000003u + (uint64_t)(B_ * 1000000 + M * 10007 + N * 101 + K) + d->trans_b);
    const int64_t b_rows = d->trans_b ? B_ * N : B_ * K, b_cols = d->trans_b ? K : N;
    float *a = rnd(na, -2, 2), *b = rnd(nb, -1, 1), *dc = rnd(nc, -1, 1);
    float *da0 = rnd(na, -1, 1), *db0 = rnd(nb, -1, 1);
    const qs_sr sr = {.key = qs_rng_key(5, "bmm_dc", (uint64_t)p), .counter = 3, .offset = 0};
    bo_quantized(c, A, "a", a, B_ * M, K, fdt, NULL);
    bo_quantized(c, B, "b", b, b_rows, b_cols, fdt, NULL);
    bo_quantized(c, DC, "dc", dc, B_ * M, N, gdt, &sr);
    const double ea = d->alpha != 1.0f ? 1.0 : 0.0;
    switch (c->op->variant) {
    case FWD: bo_out(c, C, "c", nc, 4, BO_ROW, (double)K); break;
    case BWD_A: bo_out(c, DA, "da", na, 4, BO_ROW, (double)N); break;
    case BWD_A_ACC: bo_inout(c, DA, "da accumulated", da0, na, 4, BO_ROW, (double)N); break;
    case BWD_B: bo_out(c, DB, "db", nb, 4, BO_ROW, (double)M); break;
    default: bo_inout(c, DB, "db accumulated", db0, nb, 4, BO_ROW, (double)M); break;
    }
    for (int i = C; i <= DB; i++)
        if (i < c->nt && c->t[i].out) c->t[i].extra = ea + (c->op->variant == BWD_A_ACC || c->op->variant == BWD_B_ACC);
}

/* FP32 bmm with a NaN in row 2 of a[1] and an Inf in row 4 of b[0]: the same non-finite
 * pattern as the reference, the same values elsewhere. */
static void bmm_nonfinite_inputs(bo_case *c) {
    bmm_geometry(c);
    const qs_bmm_desc *d = &c->d.bmm;
    bo_seed(c, "bmm_nonfinite", 0);
    float *a = rnd(c->n[0], 0.5f, 1.5f), *b = rnd(c->n[1], -1, 1);
    a[(1 * d->M + 2) * d->K + 3] = NAN;      /* batch 1, row 2 */
    b[(0 * d->N + 4) * d->K + 5] = INFINITY; /* batch 0, column 4 of c */
    bo_in(c, A, "a", a, (size_t)c->n[0] * 4);
    bo_none(c, AS, "scale");
    bo_in(c, B, "b", b, (size_t)c->n[1] * 4);
    bo_none(c, BS, "scale");
    bo_out(c, C, "c (NaN in a[1] row 2, +Inf in b[0] row 4)", c->n[2], 4, BO_ROW, (double)d->K);
    c->t[C].extra = 1;
}

static qs_status bmm_plan(bo_case *c, bo_side *s) {
    qs_bmm_desc d = c->d.bmm;
    d.prec = bo_prec(c, s);
    return s->be->ops->bmm_plan(s->be, &d, &s->plan[0], &s->wsb[0]);
}

static qs_status bmm_exec(bo_case *c, bo_side *s) {
    const qs_dtype fdt = qs_precision_operand_dtype(c->prec, false), gdt = qs_precision_operand_dtype(c->prec, true);
    const qs_operand a = {bo_at(c, s, A), fdt, bo_at(c, s, AS), false, NULL};
    const qs_operand b = {bo_at(c, s, B), fdt, bo_at(c, s, BS), false, NULL};
    const qs_backend_ops *o = s->be->ops;
    const int v = c->op->variant;
    if (v == FWD) return o->bmm_forward(s->be, s->plan[0], s->st, &a, &b, BO_F(C), s->ws[0]);
    const qs_operand dc = {bo_at(c, s, DC), gdt, bo_at(c, s, DCS), false, NULL};
    if (v == BWD_A || v == BWD_A_ACC)
        return o->bmm_backward_a(s->be, s->plan[0], s->st, &dc, &b, BO_F(DA), v == BWD_A_ACC, s->ws[0]);
    return o->bmm_backward_b(s->be, s->plan[0], s->st, &dc, &a, BO_F(DB), v == BWD_B_ACC, s->ws[0]);
}

static double bmm_flops(const bo_case *c) {
    return 2.0 * (double)c->v[0] * (double)c->v[1] * (double)c->v[2] * (double)c->v[3];
}

/* The CPU's c against alpha·a·op(b) in double over the dequantized operands (cheap shapes). */
static void bmm_forward_fp64(bo_case *c) {
    const qs_bmm_desc *d = &c->d.bmm;
    if ((double)c->n[2] * (double)d->K > 3e7) return;
    const qs_dtype dt = qs_precision_operand_dtype(cpu_prec(c->prec), false);
    const float *a = bo_dequantized(c, A, c->n[0], dt), *b = bo_dequantized(c, B, c->n[1], dt);
    double *ref = halloc((size_t)c->n[2] * sizeof(double));
    for (int64_t z = 0; z < d->batch; z++)
        for (int64_t m = 0; m < d->M; m++)
            for (int64_t j = 0; j < d->N; j++) {
                double s = 0;
                for (int64_t k = 0; k < d->K; k++)
                    s += (double)a[(z * d->M + m) * d->K + k] *
                         (d->trans_b ? b[(z * d->N + j) * d->K + k] : b[(z * d->K + k) * d->N + j]);
                ref[(z * d->M + m) * d->N + j] = d->alpha * s;
            }
    check_fp64(bo_what(c, "cpu c vs fp64"), c->t[C].at[0], ref, c->n[2], (double)d->K + 2, -1);
}

#define BMM_OP(nm, var)                                                                                          \
    {.name = nm, .variant = var, .seed_key = 20261203, .describe = bmm_describe, .inputs = bmm_inputs,         \
     .plan = bmm_plan, .exec = bmm_exec, .flops = bmm_flops,                                                    \
     .need = {BO_NEED(bmm_plan), BO_NEED(bmm_forward), BO_NEED(bmm_backward_a), BO_NEED(bmm_backward_b)}}
static const bo_op bo_bmm_forward = BMM_OP("bmm_forward", FWD);
static const bo_op bo_bmm_backward_a = BMM_OP("bmm_backward_a", BWD_A);
static const bo_op bo_bmm_backward_a_acc = BMM_OP("bmm_backward_a_acc", BWD_A_ACC);
static const bo_op bo_bmm_backward_b = BMM_OP("bmm_backward_b", BWD_B);
static const bo_op bo_bmm_backward_b_acc = BMM_OP("bmm_backward_b_acc", BWD_B_ACC);

/* v = {batch, M, N, K, trans_b, alpha·10^9}: alpha in nanos, which rounds back to the float of
 * the decimal (the very alphas the transformer suite used) */
#define ALPHA(a) ((int64_t)((a) * 1e9 + 0.5))
static const int64_t k_bmm[][BO_V] = {
    {1, 1, 1, 1, 1, ALPHA(1.0)},             /* everything 1 */
    {2, 1, 3, 5, 1, ALPHA(0.5)},             /* one query (T = 1) */
    {3, 7, 5, 9, 1, ALPHA(1.0 / 3.0)},       /* odd everywhere, QKᵀ form */
    {3, 7, 5, 9, 0, ALPHA(1.0)},             /* odd everywhere, P·V form */
    {8, 16, 16, 20, 1, ALPHA(0.2236068)},    /* attention QKᵀ, head dim 20 (not a multiple of 8) */
    {8, 16, 20, 16, 0, ALPHA(1.0)},          /* its P·V */
    {6, 33, 33, 24, 1, ALPHA(0.20412415)},   /* odd T: odd batch strides, FP8 padding */
    {6, 33, 24, 33, 0, ALPHA(1.0)},
    {24, 128, 128, 64, 1, ALPHA(0.125)},     /* 2 samples × 12 heads, T 128, D 64: aligned everywhere */
    {24, 128, 64, 128, 0, ALPHA(1.0)},
};
/* the CPU backend's: the two large shapes smaller (still aligned everywhere) */
static const int64_t k_bmm_cpu[][BO_V] = {
    {1, 1, 1, 1, 1, ALPHA(1.0)},          {2, 1, 3, 5, 1, ALPHA(0.5)},   {3, 7, 5, 9, 1, ALPHA(1.0 / 3.0)},
    {3, 7, 5, 9, 0, ALPHA(1.0)},          {8, 16, 16, 20, 1, ALPHA(0.2236068)}, {8, 16, 20, 16, 0, ALPHA(1.0)},
    {6, 33, 33, 24, 1, ALPHA(0.20412415)}, {6, 33, 24, 33, 0, ALPHA(1.0)},
    {4, 32, 32, 64, 1, ALPHA(0.125)},      {4, 32, 64, 32, 0, ALPHA(1.0)},
};
static const int64_t k_bmm_nonfinite[][BO_V] = {{2, 4, 6, 9, 1, ALPHA(0.5)}};

const bo_row bo_rows_bmm[] = {
    {&bo_bmm_forward, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_bmm), BO_CPU_SHAPES(k_bmm_cpu), .budget = bmm_nmse, .fp64 = bmm_forward_fp64},
    {&bo_bmm_backward_a, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_bmm), BO_CPU_SHAPES(k_bmm_cpu), .budget = bmm_nmse},
    {&bo_bmm_backward_a_acc, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_bmm), BO_CPU_SHAPES(k_bmm_cpu), .budget = bmm_nmse},
    {&bo_bmm_backward_b, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_bmm), BO_CPU_SHAPES(k_bmm_cpu), .budget = bmm_nmse},
    {&bo_bmm_backward_b_acc, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_bmm), BO_CPU_SHAPES(k_bmm_cpu), .budget = bmm_nmse},
    {&bo_bmm_forward, BO_P(FP32), BO_SHAPES(k_bmm_nonfinite), .inputs = bmm_nonfinite_inputs, .budget = bmm_nmse,
     .variant = "nonfinite"},
    {0},
};
