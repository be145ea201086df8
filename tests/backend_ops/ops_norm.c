/* tests/backend_ops/ops_norm.c — defines: the normalisation ops of the registry — batch norm
 * training forward (with and without running statistics), evaluation forward and backward
 * (dx overwritten, accumulated, or NULL), layer norm forward and backward — and their rows.
 *
 * Tolerances (check_tol, Kr as below, atol = rtol·max|ref| unless a scale is given):
 *  - batch norm over `rows` (a reduction per channel): training forward y, save_mean,
 *    save_invstd, running statistics Kr = rows; evaluation forward Kr 8 (from the reference's
 *    updated running statistics); backward from the reference's saved statistics (and, with a
 *    fused ReLU, its output): dgamma, dbeta Kr = rows, dx Kr = 2·rows judged against the largest
 *    of its terms |γ·invstd|·(|dy| + |Σdy|/rows + |x̂·invstd·Σdy·x̂|/rows), since they cancel
 *    (as test_cpu_ops.c), accumulated dx Kr 2·rows + 1 and that scale + 1;
 *  - layer norm: row statistics in double rounded once on both sides (Kr 2 for mean, rstd); y and
 *    dx are ≤ 6 FP32 roundings from those statistics, plus a one-ulp difference of the statistics
 *    amplified by |mean|/σ ≈ 3 (Kr 8; dx judged against the largest of its terms,
 *    rstd·(|g| + |mean g| + |x̂·mean(g·x̂)|), accumulated Kr 9 and that scale + 1); dgamma, dbeta
 *    are double sums rounded once (Kr 2).
 * Inputs have an offset mean (the two-pass variance matters); two batch-norm shapes sit far from
 * 0 relative to their spread (mean 1000, std 0.006; mean 10^5, std 0.06): one-pass sums of x and
 * x² would cancel — by a simulation of the kernel's double sums, the second case's y then misses
 * its tolerance 15-fold — so a backend must shift them (the GPU by each channel's first value).
 * FP64 rows: the CPU's training forward and layer-norm forward against double references at one
 * implementation's budget (check.h), the same Kr. The batch-norm y of the reference is normalised
 * by the saved FP32 mean, as the contract's y is: that one rounding, u·|mean|, amplified by invstd,
 * is a shared property of every backend (for the far-mean channels a 1% change of y), not an
 * error of the op; everything else is exact there. */
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
#include "norm.h"

static const float k_momentum = BN_MOMENTUM, k_eps = BN_EPS;

/* ----------------------------------------------------------------------- batch norm */

/* v = {input set, rows, C, relu}; input sets 5 and 6 have the far means */
enum { BX, BG, BB, BY, BSM, BSI, BRM, BRV, BDY, BYR, BDX, BDG, BDB };
enum { BN_TRAIN, BN_TRAIN_NOSTATS, BN_EVAL, BN_BWD, BN_BWD_NODX, BN_BWD_ACC };

static void bn_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "rows=%lld C=%lld%s%s", (long long)c->v[1], (long long)c->v[2],
             c->v[0] == 5 ? " mean 1e3" : c->v[0] == 6 ? " mean 1e5" : "", c->v[3] ? " +relu" : "");
}

/* The largest term of dx (file comment) from the reference's statistics and (relu) output. */
static double bn_dx_scale(int64_t rows, int64_t C, const float *x, const float *dy, const float *gamma,
                          const float *cm, const float *ci, const float *yr) {
    double dx_scale = 0;
    for (int64_t c = 0; c < C; c++) {
        double sdy = 0, sdyx = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = dy[r * C + c] * (yr && !(yr[r * C + c] > 0) ? 0.0 : 1.0);
            sdy += g;
            sdyx += g * (x[r * C + c] - cm[c]);
        }
        for (int64_t r = 0; r < rows; r++) {
            double t1 = yr && !(yr[r * C + c] > 0) ? 0.0 : fabs(dy[r * C + c]), t2 = fabs(sdy) / rows,
                   t3 = fabs((x[r * C + c] - cm[c]) * ci[c] * ci[c] * sdyx / rows);
            dx_scale = fmax(dx_scale, fabs(gamma[c] * ci[c]) * (t1 + t2 + t3));
        }
    }
    return dx_scale;
}

bn_data bn_draw(bo_case *c) {
    const int64_t t = c->v[0];
    bn_data d = {.rows = c->v[1], .C = c->v[2], .n = c->v[1] * c->v[2]};
    bo_seed(c, "batchnorm", (uint64_t)t);
    d.x = rnd(d.n, -1, 1), d.gamma = rnd(d.C, 0.5f, 1.5f), d.beta = rnd(d.C, -0.5f, 0.5f), d.dy = rnd(d.n, -1, 1);
    for (int64_t i = 0; i < d.n; i++)
        d.x[i] = t == 5 ? 1000.0f + 0.01f * d.x[i] : t == 6 ? 1e5f + 0.1f * d.x[i] : 3.0f + 2.0f * d.x[i];
    d.rm = rnd(d.C, -0.1f, 0.1f), d.rv = rnd(d.C, 0.9f, 1.1f), d.base = rnd(d.n, -1, 1);
    return d;
}

static void bn_inputs(bo_case *c) {
    const bn_data b = bn_draw(c);
    const int64_t rows = b.rows, C = b.C, n = b.n;
    const bool relu = c->v[3] != 0;
    const double K = (double)rows;
    float *x = b.x, *gamma = b.gamma, *beta = b.beta, *dy = b.dy, *rm = b.rm, *rv = b.rv, *base = b.base;
    /* the reference's training forward: the inputs of evaluation and backward */
    float *crm = hcopy(rm, C), *crv = hcopy(rv, C), *cy = hf(n), *cm = hf(C), *ci = hf(C);
    ASSERT_OK(COPS->batchnorm_forward_train(g_cpu, CST, rows, C, x, QS_F32, gamma, beta, cy, QS_F32, cm, ci, crm, crv,
                                            k_momentum, k_eps, relu, NULL, QS_F32));
    bo_in(c, BX, "x", x, (size_t)n * 4);
    bo_in(c, BG, "gamma", gamma, (size_t)C * 4);
    bo_in(c, BB, "beta", beta, (size_t)C * 4);
    const int v = c->op->variant;
    if (v == BN_TRAIN || v == BN_TRAIN_NOSTATS) {
        bo_out(c, BY, "y", n, 4, BO_ROW, K);
        bo_out(c, BSM, "save_mean", C, 4, v == BN_TRAIN ? BO_ROW : BO_NOCMP, K);
        bo_out(c, BSI, "save_invstd", C, 4, v == BN_TRAIN ? BO_ROW : BO_NOCMP, K);
        if (v == BN_TRAIN) {
            bo_inout(c, BRM, "running_mean", rm, C, 4, BO_ROW, K);
            bo_inout(c, BRV, "running_var", rv, C, 4, BO_ROW, K);
        } else {
            bo_none(c, BRM, "running_mean");
            bo_none(c, BRV, "running_var");
        }
        return;
    }
    if (v == BN_EVAL) {
        bo_in(c, BRM, "running_mean", crm, (size_t)C * 4);
        bo_in(c, BRV, "running_var", crv, (size_t)C * 4);
        bo_out(c, BY, "y", n, 4, BO_ROW, 8);
        return;
    }
    const float *yr = relu ? cy : NULL;
    const double dx_scale = bn_dx_scale(rows, C, x, dy, gamma, cm, ci, yr);
    bo_in(c, BDY, "dy", dy, (size_t)n * 4);
    bo_in(c, BSM, "save_mean", cm, (size_t)C * 4);
    bo_in(c, BSI, "save_invstd", ci, (size_t)C * 4);
    if (relu) bo_in(c, BYR, "y (relu mask)", cy, (size_t)n * 4);
    else bo_none(c, BYR, "y");
    if (v == BN_BWD) bo_out(c, BDX, "dx", n, 4, BO_ROW, 2 * K);
    else if (v == BN_BWD_ACC) bo_inout(c, BDX, "dx accumulated", base, n, 4, BO_ROW, 2 * K + 1);
    else bo_none(c, BDX, "dx");
    if (!c->t[BDX].null) c->t[BDX].scale = v == BN_BWD_ACC ? dx_scale + 1.0 : dx_scale;
    bo_out(c, BDG, "dgamma", C, 4, v == BN_BWD_ACC ? BO_NOCMP : BO_ROW, K);
    bo_out(c, BDB, "dbeta", C, 4, v == BN_BWD_ACC ? BO_NOCMP : BO_ROW, K);
}

static qs_status bn_exec(bo_case *c, bo_side *s) {
    const int64_t rows = c->v[1], C = c->v[2];
    const bool relu = c->v[3] != 0;
    const qs_backend_ops *o = s->be->ops;
    switch (c->op->variant) {
    case BN_TRAIN:
    case BN_TRAIN_NOSTATS:
        return o->batchnorm_forward_train(s->be, s->st, rows, C, BO_F(BX), QS_F32, BO_F(BG), BO_F(BB), BO_F(BY), QS_F32,
                                          BO_F(BSM), BO_F(BSI), BO_F(BRM), BO_F(BRV), k_momentum, k_eps, relu, NULL,
                                          QS_F32);
    case BN_EVAL:
        return o->batchnorm_forward_eval(s->be, s->st, rows, C, BO_F(BX), QS_F32, BO_F(BG), BO_F(BB), BO_F(BRM),
                                         BO_F(BRV), k_eps, BO_F(BY), QS_F32, relu, NULL, QS_F32);
    default:
        return o->batchnorm_backward(s->be, s->st, rows, C, BO_F(BX), QS_F32, BO_F(BDY), QS_F32, BO_F(BG), BO_F(BSM),
                                     BO_F(BSI), BO_F(BDX), QS_F32, NULL, c->op->variant == BN_BWD_ACC, BO_F(BDG),
                                     BO_F(BDB), BO_F(BYR), QS_F32, NULL, false);
    }
}

/* Mean and 1/sqrt(biased variance + eps) in double of n values x[i·stride]. */
static void fp64_stats(const float *x, int64_t n, int64_t stride, double *mean, double *inv) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) s += x[i * stride];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) ss += (x[i * stride] - *mean) * (x[i * stride] - *mean);
    *inv = 1.0 / sqrt(ss / (double)n + (double)BN_EPS);
}

/* The training forward in double: biased variance for invstd, ReLU. */
static void bn_train_fp64(bo_case *c) {
    const int64_t rows = c->v[1], C = c->v[2], n = rows * C;
    const float *x = c->t[BX].at[0], *gamma = c->t[BG].at[0], *beta = c->t[BB].at[0];
    double *y = halloc((size_t)n * sizeof(double)), *mean = halloc((size_t)C * sizeof(double));
    double *inv = halloc((size_t)C * sizeof(double));
    for (int64_t k = 0; k < C; k++) {
        fp64_stats(x + k, rows, C, &mean[k], &inv[k]);
        const double mf = (float)mean[k]; /* y is normalised by the saved (FP32) mean: see the file comment */
        for (int64_t r = 0; r < rows; r++) {
            const double v = (x[r * C + k] - mf) * inv[k] * gamma[k] + beta[k];
            y[r * C + k] = c->v[3] && !(v > 0) ? 0.0 : v;
        }
    }
    check_fp64(bo_what(c, "cpu y vs fp64"), c->t[BY].at[0], y, n, (double)rows, -1);
    check_fp64(bo_what(c, "cpu save_mean vs fp64"), c->t[BSM].at[0], mean, C, (double)rows, -1);
    check_fp64(bo_what(c, "cpu save_invstd vs fp64"), c->t[BSI].at[0], inv, C, (double)rows, -1);
}

#define BN_OP(nm, var, entry)                                                                                  \
    {.name = nm, .variant = var, .seed_key = 20261202, .describe = bn_describe, .inputs = bn_inputs,         \
     .exec = bn_exec, .need = {BO_NEED(batchnorm_forward_train), BO_NEED(entry)}}
static const bo_op bo_bn_train = BN_OP("batchnorm_forward_train", BN_TRAIN, batchnorm_forward_train);
static const bo_op bo_bn_train_nostats = BN_OP("batchnorm_forward_train_no_running_stats", BN_TRAIN_NOSTATS,
                                               batchnorm_forward_train);
static const bo_op bo_bn_eval = BN_OP("batchnorm_forward_eval", BN_EVAL, batchnorm_forward_eval);
static const bo_op bo_bn_bwd = BN_OP("batchnorm_backward", BN_BWD, batchnorm_backward);
static const bo_op bo_bn_bwd_nodx = BN_OP("batchnorm_backward_dx_null", BN_BWD_NODX, batchnorm_backward);
static const bo_op bo_bn_bwd_acc = BN_OP("batchnorm_backward_acc", BN_BWD_ACC, batchnorm_backward);
#define BN2(t, rows, C) {t, rows, C, 0}, {t, rows, C, 1}
static const int64_t k_bn[][BO_V] = {BN2(0, 70, 13), BN2(1, 6272, 8), BN2(2, 2, 1),  BN2(3, 1000, 3),
                                     BN2(4, 392, 64), BN2(5, 512, 16), BN2(6, 512, 16)};

/* ------------------------------------------------------------------------ layer norm */

/* v = {input set, rows, C} */
enum { LX, LG, LB, LY, LM, LR, LDY, LDX, LDG, LDB };
enum { LN_FWD, LN_BWD, LN_BWD_ACC, LN_BWD_NODX };

static void ln_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "rows=%lld C=%lld", (long long)c->v[1], (long long)c->v[2]);
}

static void ln_inputs(bo_case *c) {
    const int64_t rows = c->v[1], C = c->v[2], n = rows * C;
    bo_seed(c, "layernorm", (uint64_t)c->v[0]);
    float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
    for (int64_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i]; /* offset mean: the two passes matter */
    float *base = rnd(n, -1, 1);
    bo_in(c, LX, "x", x, (size_t)n * 4);
    bo_in(c, LG, "gamma", gamma, (size_t)C * 4);
    if (c->op->variant == LN_FWD) {
        bo_in(c, LB, "beta", beta, (size_t)C * 4);
        bo_out(c, LY, "y", n, 4, BO_ROW, 8);
        bo_out(c, LM, "save_mean", rows, 4, BO_ROW, 2);
        bo_out(c, LR, "save_rstd", rows, 4, BO_ROW, 2);
        return;
    }
    /* backward from the reference's statistics; dx's terms cancel: judged against the largest */
    float *cm = hf(rows), *cr = hf(rows);
    ASSERT_OK(COPS->layernorm_forward(g_cpu, CST, rows, C, x, gamma, beta, k_eps, hf(n), cm, cr));
    double dx_scale = 0;
    for (int64_t r = 0; r < rows; r++) {
        double sg = 0, sgx = 0;
        for (int64_t k = 0; k < C; k++) {
            const double g = (double)dy[r * C + k] * gamma[k], xh = ((double)x[r * C + k] - cm[r]) * cr[r];
            sg += g;
            sgx += g * xh;
        }
        for (int64_t k = 0; k < C; k++) {
            const double g = (double)dy[r * C + k] * gamma[k], xh = ((double)x[r * C + k] - cm[r]) * cr[r];
            dx_scale = fmax(dx_scale, cr[r] * (fabs(g) + fabs(sg) / C + fabs(xh * sgx / C)));
        }
    }
    bo_in(c, LDY, "dy", dy, (size_t)n * 4);
    bo_in(c, LM, "save_mean", cm, (size_t)rows * 4);
    bo_in(c, LR, "save_rstd", cr, (size_t)rows * 4);
    const int v = c->op->variant;
    if (v == LN_BWD) bo_out(c, LDX, "dx", n, 4, BO_ROW, 8);
    else if (v == LN_BWD_ACC) bo_inout(c, LDX, "dx accumulated", base, n, 4, BO_ROW, 9);
    else bo_none(c, LDX, "dx");
    if (!c->t[LDX].null) c->t[LDX].scale = v == LN_BWD_ACC ? dx_scale + 1.0 : dx_scale;
    bo_out(c, LDG, "dgamma", C, 4, BO_ROW, 2);
    bo_out(c, LDB, "dbeta", C, 4, BO_ROW, 2);
}

static qs_status ln_exec(bo_case *c, bo_side *s) {
    const int64_t rows = c->v[1], C = c->v[2];
    if (c->op->variant == LN_FWD)
        return s->be->ops->layernorm_forward(s->be, s->st, rows, C, BO_F(LX), BO_F(LG), BO_F(LB), k_eps, BO_F(LY),
                                             BO_F(LM), BO_F(LR));
    return s->be->ops->layernorm_backward(s->be, s->st, rows, C, BO_F(LX), BO_F(LDY), BO_F(LG), BO_F(LM), BO_F(LR),
                                          BO_F(LDX), c->op->variant == LN_BWD_ACC, BO_F(LDG), BO_F(LDB));
}

/* Layer norm forward in double (biased variance). */
static void ln_fp64(bo_case *c) {
    const int64_t rows = c->v[1], C = c->v[2];
    const float *x = c->t[LX].at[0], *gamma = c->t[LG].at[0], *beta = c->t[LB].at[0];
    double *y = halloc((size_t)(rows * C) * sizeof(double)), *m = halloc((size_t)rows * sizeof(double));
    double *rs = halloc((size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        fp64_stats(x + r * C, C, 1, &m[r], &rs[r]);
        for (int64_t k = 0; k < C; k++) y[r * C + k] = (x[r * C + k] - m[r]) * rs[r] * gamma[k] + beta[k];
    }
    check_fp64(bo_what(c, "cpu y vs fp64"), c->t[LY].at[0], y, rows * C, 8, -1);
    check_fp64(bo_what(c, "cpu save_mean vs fp64"), c->t[LM].at[0], m, rows, 2, -1);
    check_fp64(bo_what(c, "cpu save_rstd vs fp64"), c->t[LR].at[0], rs, rows, 2, -1);
}

#define LN_OP(nm, var, entry)                                                                                \
    {.name = nm, .variant = var, .seed_key = 20261203, .describe = ln_describe, .inputs = ln_inputs,       \
     .exec = ln_exec, .need = {BO_NEED(layernorm_forward), BO_NEED(entry)}}
static const bo_op bo_ln_fwd = LN_OP("layernorm_forward", LN_FWD, layernorm_forward);
static const bo_op bo_ln_bwd = LN_OP("layernorm_backward", LN_BWD, layernorm_backward);
static const bo_op bo_ln_bwd_acc = LN_OP("layernorm_backward_acc", LN_BWD_ACC, layernorm_backward);
static const bo_op bo_ln_bwd_nodx = LN_OP("layernorm_backward_dx_null", LN_BWD_NODX, layernorm_backward);
static const int64_t k_ln[][BO_V] = {{0, 1, 3}, {1, 5, 7}, {2, 64, 768}, {3, 300, 20}, {4, 7, 1025}, {5, 2048, 64}};

const bo_row bo_rows_norm[] = {
    {&bo_bn_train, 0, BO_SHAPES(k_bn), .budget = bo_tol, .fp64 = bn_train_fp64},
    {&bo_bn_train_nostats, 0, BO_SHAPES(k_bn), .budget = bo_tol},
    {&bo_bn_eval, 0, BO_SHAPES(k_bn), .budget = bo_tol},
    {&bo_bn_bwd, 0, BO_SHAPES(k_bn), .budget = bo_tol},
    {&bo_bn_bwd_nodx, 0, BO_SHAPES(k_bn), .budget = bo_tol},
    {&bo_bn_bwd_acc, 0, BO_SHAPES(k_bn), .budget = bo_tol},
    {&bo_ln_fwd, 0, BO_SHAPES(k_ln), .budget = bo_tol, .fp64 = ln_fp64},
    {&bo_ln_bwd, 0, BO_SHAPES(k_ln), .budget = bo_tol},
    {&bo_ln_bwd_acc, 0, BO_SHAPES(k_ln), .budget = bo_tol},
    {&bo_ln_bwd_nodx, 0, BO_SHAPES(k_ln), .budget = bo_tol},
    {0},
};
