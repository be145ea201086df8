/* tests/backend_ops/ops_reduce.c — defines: the reductions and the optimizer steps of the registry
 * — column sums, Σx², SGD and AdamW, softmax + cross-entropy, pooling — their rows and FP64 rows.
 *
 * Tolerances (check_tol: rtol = 4·u·sqrt(4·Kr), atol = rtol·max|ref|):
 *  - column sums are accumulated in double on both sides: they differ by at most the final
 *    rounding to float, Kr = 1; rows = 0 must write zeros;
 *  - Σx² (double, on the host) within relative 1e-12: double rounding of ≤ 4M terms, random-walk
 *    growth ≈ sqrt(n)·2^-53 ≤ 2.3e-13; an FP32 accumulation would be ~1e-7 off;
 *  - optimizer steps start from the same state on both sides (the reference's after the steps
 *    before), so each step is judged alone: Kr counts the roundings of one step (SGD: d = g + wd·p
 *    2, buf 3, nesterov 2, p 2 → 8, the momentum buffer 5; AdamW: m 3, v 4, p: decay, sqrt, /bc2,
 *    +eps, ÷, ·step, − and the float/double scalars → 12);
 *  - softmax + cross-entropy: loss Kr = classes + 4, probabilities classes + 2 (the row's sum of
 *    exponentials), backward (p − onehot)·scale from the reference's probabilities, Kr = 2;
 *  - pooling: max values exact and argmax indices bit for bit (ties included: the first in scan
 *    order wins), average Kr = R·S + 1; backward from the reference's indices, each input element
 *    receiving kb = ⌈R/sh⌉·⌈S/sw⌉ contributions: max Kr = kb (exact when windows do not overlap),
 *    average 2·kb + 1, +1 accumulated.
 * FP64 rows judge the CPU alone against double references at one implementation's budget
 * (check.h): column sums Kr 1, Σx² relative 1e-12, SGD and AdamW at the Kr above, softmax +
 * cross-entropy and average pooling at the Kr above. */
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

#define SEED_OPS 20261202 /* the key of the suite these rows came from */

/* ----------------------------------------------------------------------- column sums */

/* v = {input set, rows, cols}: x with a non-zero mean */
enum { RX, RS };
static void rows_cols_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%lldx%lld", (long long)c->v[1], (long long)c->v[2]);
}
static void colsum_inputs(bo_case *c) {
    const int64_t rows = c->v[1], cols = c->v[2];
    bo_seed(c, "column_sums", (uint64_t)c->v[0]);
    float *x = rnd(rows * cols + 1, -1, 1);
    for (int64_t i = 0; i < rows * cols; i += 3) x[i] += 2.0f;
    bo_in(c, RX, "x", x, (size_t)(rows * cols + 1) * 4);
    bo_out(c, RS, "sums", cols, 4, BO_ROW, 1);
}
static qs_status colsum_exec(bo_case *c, bo_side *s) {
    return s->be->ops->column_sums(s->be, s->st, c->v[1], c->v[2], BO_F(RX), BO_F(RS));
}
static void colsum_fp64(bo_case *c) {
    const int64_t rows = c->v[1], cols = c->v[2];
    const float *x = c->t[RX].at[0];
    double *ref = halloc((size_t)cols * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) ref[k] += x[r * cols + k];
    check_fp64(bo_what(c, "cpu sums vs fp64"), c->t[RS].at[0], ref, cols, 1, -1);
}
static const bo_op bo_column_sums = {.name = "column_sums", .seed_key = SEED_OPS, .describe = rows_cols_describe,
                                     .inputs = colsum_inputs, .exec = colsum_exec, .need = {BO_NEED(column_sums)}};
static const int64_t k_colsum[][BO_V] = {{0, 1, 1},    {1, 5, 40}, {2, 6272, 8},
                                         {3, 1000, 1037}, {4, 0, 7}, {5, 100003, 3}};

/* ------------------------------------------------------------------------ sum_squares */

/* v = {input set, n}; the result is a double on the host */
static void ssq_describe(const bo_case *c, char *buf, size_t n) { snprintf(buf, n, "n=%lld", (long long)c->v[1]); }
static void ssq_inputs(bo_case *c) {
    const int64_t n = c->v[1];
    bo_seed(c, "sum_squares", (uint64_t)c->v[0]);
    float *x = rnd(n + 1, -3, 3);
    if (n) bo_in(c, RX, "x", x, (size_t)n * 4);
    else bo_none(c, RX, "x");
    bo_host_out(c, RS, "sum", 1, sizeof(double), BO_NOCMP, 0);
}
static qs_status ssq_exec(bo_case *c, bo_side *s) {
    return s->be->ops->sum_squares(s->be, s->st, c->v[1], BO_F(RX), bo_at(c, s, RS));
}
/* |got − want| ≤ 1e-12·want (n = 0: got is 0). */
static void ssq_check(const bo_case *c, const char *what, double got, double want) {
    const double rel = want != 0 ? fabs(got - want) / want : fabs(got);
    const bool pass = c->v[1] == 0 ? got == 0.0 : rel <= 1e-12;
    char detail[160];
    snprintf(detail, sizeof detail, "got %.17g want %.17g rel %.2e (limit 1e-12)", got, want, rel);
    check_figure(what, "relative_error", rel, 1e-12, pass, detail);
}
static void ssq_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    const double *g = bo_fetch(c, dut, RS);
    if (g) ssq_check(c, c->name, *g, *(const double *)bo_at(c, ref, RS));
}
static void ssq_fp64(bo_case *c) {
    const float *x = c->t[RX].at[0];
    long double s = 0;
    for (int64_t i = 0; i < c->v[1]; i++) s += (long double)x[i] * x[i];
    ssq_check(c, bo_what(c, "cpu vs fp64"), *(const double *)c->t[RS].at[0], (double)s);
}
static const bo_op bo_sum_squares = {.name = "sum_squares", .seed_key = SEED_OPS, .describe = ssq_describe,
                                     .inputs = ssq_inputs, .exec = ssq_exec, .judge = ssq_judge,
                                     .need = {BO_NEED(sum_squares)}};
static const int64_t k_ssq[][BO_V] = {{0, 0}, {1, 1}, {2, 1003}, {3, 100003}, {4, (1 << 22) + 5}};

/* --------------------------------------------------------------------------- optimizers */

#define OPT_N 100003
static const struct {
    float lr, mom, damp, wd;
    bool nesterov;
} k_sgd_cfg[] = {{0.1f, 0.0f, 0.0f, 0.0f, false}, {0.05f, 0.9f, 0.0f, 5e-4f, false}, {0.05f, 0.9f, 0.0f, 1e-4f, true},
                 {0.2f, 0.5f, 0.3f, 0.0f, false}};
enum { OP, OG, OBUF, OM = OBUF, OV };
static const float k_adam_lr = 1e-2f, k_adam_eps = 1e-8f, k_adam_wd = 0.01f;
static const double k_adam_b1 = 0.9, k_adam_b2 = 0.999;

/* SGD: v = {configuration, step}; the state after the reference's earlier steps */
static void sgd_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "cfg %lld step %lld", (long long)c->v[0], (long long)c->v[1]);
}
static qs_status sgd_call(qs_backend *be, qs_stream *st, int cfg, int step, float *p, const float *g, float *buf) {
    return be->ops->sgd_step(be, st, OPT_N, p, g, buf, k_sgd_cfg[cfg].lr, k_sgd_cfg[cfg].mom, k_sgd_cfg[cfg].damp,
                             k_sgd_cfg[cfg].wd, k_sgd_cfg[cfg].nesterov, step == 0);
}
static void sgd_inputs(bo_case *c) {
    const int cfg = (int)c->v[0], step = (int)c->v[1];
    const bool mom = k_sgd_cfg[cfg].mom != 0;
    bo_seed(c, "sgd", (uint64_t)cfg);
    float *p = rnd(OPT_N, -1, 1), *buf = mom ? hf(OPT_N) : NULL, *g = NULL;
    for (int k = 0; k <= step; k++) {
        g = rnd(OPT_N, -1, 1);
        if (k < step) ASSERT_OK(sgd_call(g_cpu, CST, cfg, k, p, g, buf));
    }
    bo_inout(c, OP, "p", p, OPT_N, 4, BO_ROW, 8);
    bo_in(c, OG, "g", g, OPT_N * 4);
    if (mom) bo_inout(c, OBUF, "momentum buffer", buf, OPT_N, 4, BO_ROW, 5);
    else bo_none(c, OBUF, "momentum buffer");
}
static qs_status sgd_exec(bo_case *c, bo_side *s) {
    return sgd_call(s->be, s->st, (int)c->v[0], (int)c->v[1], BO_F(OP), BO_F(OG), BO_F(OBUF));
}
/* PyTorch's SGD in double from the step's start values (the case's inputs). */
static void sgd_fp64(bo_case *c) {
    const int cfg = (int)c->v[0];
    const double lr = k_sgd_cfg[cfg].lr, mom = k_sgd_cfg[cfg].mom, damp = k_sgd_cfg[cfg].damp, wd = k_sgd_cfg[cfg].wd;
    const float *p0 = c->t[OP].host, *g = c->t[OG].host, *b0 = c->t[OBUF].host;
    double *p = halloc(OPT_N * sizeof(double)), *b = halloc(OPT_N * sizeof(double));
    for (int64_t i = 0; i < OPT_N; i++) {
        const double d = g[i] + wd * p0[i];
        b[i] = mom == 0 ? 0 : c->v[1] == 0 ? d : mom * b0[i] + (1 - damp) * d;
        const double stepv = mom == 0 ? d : k_sgd_cfg[cfg].nesterov ? d + mom * b[i] : b[i];
        p[i] = p0[i] - lr * stepv;
    }
    check_fp64(bo_what(c, "cpu p vs fp64"), c->t[OP].at[0], p, OPT_N, 8, -1);
    if (mom != 0) check_fp64(bo_what(c, "cpu momentum buffer vs fp64"), c->t[OBUF].at[0], b, OPT_N, 5, -1);
}

/* AdamW: v = {step} (from 1) */
static void adamw_describe(const bo_case *c, char *buf, size_t n) { snprintf(buf, n, "step %lld", (long long)c->v[0]); }
static void adamw_inputs(bo_case *c) {
    const int64_t step = c->v[0];
    bo_seed(c, "adamw", 0);
    float *p = rnd(OPT_N, -1, 1), *m = hf(OPT_N), *v = hf(OPT_N), *g = NULL;
    for (int64_t k = 1; k <= step; k++) {
        g = rnd(OPT_N, -1, 1);
        if (k < step)
            ASSERT_OK(COPS->adamw_step(g_cpu, CST, OPT_N, p, g, m, v, k_adam_lr, k_adam_b1, k_adam_b2, k_adam_eps,
                                       k_adam_wd, k));
    }
    bo_inout(c, OP, "p", p, OPT_N, 4, BO_ROW, 12);
    bo_in(c, OG, "g", g, OPT_N * 4);
    bo_inout(c, OM, "m", m, OPT_N, 4, BO_ROW, 3);
    bo_inout(c, OV, "v", v, OPT_N, 4, BO_ROW, 4);
}
static qs_status adamw_exec(bo_case *c, bo_side *s) {
    return s->be->ops->adamw_step(s->be, s->st, OPT_N, BO_F(OP), BO_F(OG), BO_F(OM), BO_F(OV), k_adam_lr, k_adam_b1,
                                  k_adam_b2, k_adam_eps, k_adam_wd, c->v[0]);
}
/* PyTorch's AdamW in double from the step's start values. */
static void adamw_fp64(bo_case *c) {
    const float *p0 = c->t[OP].host, *g = c->t[OG].host, *m0 = c->t[OM].host, *v0 = c->t[OV].host;
    double *p = halloc(OPT_N * sizeof(double)), *m = halloc(OPT_N * sizeof(double)), *v = halloc(OPT_N * sizeof(double));
    const double bc1 = 1 - pow(k_adam_b1, (double)c->v[0]), bc2 = 1 - pow(k_adam_b2, (double)c->v[0]);
    for (int64_t i = 0; i < OPT_N; i++) {
        m[i] = k_adam_b1 * m0[i] + (1 - k_adam_b1) * g[i];
        v[i] = k_adam_b2 * v0[i] + (1 - k_adam_b2) * (double)g[i] * g[i];
        p[i] = p0[i] * (1 - (double)k_adam_lr * k_adam_wd) -
               (double)k_adam_lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + (double)k_adam_eps);
    }
    check_fp64(bo_what(c, "cpu p vs fp64"), c->t[OP].at[0], p, OPT_N, 12, -1);
    check_fp64(bo_what(c, "cpu m vs fp64"), c->t[OM].at[0], m, OPT_N, 3, -1);
    check_fp64(bo_what(c, "cpu v vs fp64"), c->t[OV].at[0], v, OPT_N, 4, -1);
}

static const bo_op bo_sgd_step = {.name = "sgd_step", .seed_key = SEED_OPS, .describe = sgd_describe,
                                  .inputs = sgd_inputs, .exec = sgd_exec, .need = {BO_NEED(sgd_step)}};
static const bo_op bo_adamw_step = {.name = "adamw_step", .seed_key = SEED_OPS, .describe = adamw_describe,
                                    .inputs = adamw_inputs, .exec = adamw_exec, .need = {BO_NEED(adamw_step)}};
static const int64_t k_sgd[][BO_V] = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2},
                                      {2, 0}, {2, 1}, {2, 2}, {3, 0}, {3, 1}, {3, 2}};
static const int64_t k_adamw[][BO_V] = {{1}, {2}, {3}, {4}};

/* ------------------------------------------------------------------- softmax + xent */

/* v = {input set, B, classes}: logits in [-8, 8), one of them +1000 (must not overflow) */
enum { XL, XLAB, XLOSS, XP, XD };
static void xent_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "B=%lld classes=%lld", (long long)c->v[1], (long long)c->v[2]);
}
static void xent_inputs(bo_case *c) {
    const int64_t B = c->v[1], Cl = c->v[2], n = B * Cl;
    bo_seed(c, "softmax_xent", (uint64_t)c->v[0]);
    float *lg = rnd(n, -8, 8);
    int32_t *lab = halloc((size_t)B * 4);
    for (int64_t b = 0; b < B; b++) lab[b] = (int32_t)qs_rng_below(&g_rng, (uint64_t)Cl);
    if (B > 1) lg[Cl] += 1000.0f;
    bo_in(c, XLAB, "labels", lab, (size_t)B * 4);
    if (c->op->variant == 0) {
        bo_in(c, XL, "logits", lg, (size_t)n * 4);
        bo_out(c, XLOSS, "loss", B, 4, BO_ROW, (double)Cl + 4);
        bo_out(c, XP, "probs", n, 4, BO_ROW, (double)Cl + 2);
        return;
    }
    float *p = hf(n); /* backward from the reference's probabilities */
    ASSERT_OK(COPS->softmax_xent_forward(g_cpu, CST, B, Cl, lg, lab, hf(B), p));
    bo_in(c, XP, "probs", p, (size_t)n * 4);
    bo_out(c, XD, "dlogits", n, 4, BO_ROW, 2);
}
static qs_status xent_exec(bo_case *c, bo_side *s) {
    const int64_t B = c->v[1], Cl = c->v[2];
    if (c->op->variant == 0)
        return s->be->ops->softmax_xent_forward(s->be, s->st, B, Cl, BO_F(XL), bo_at(c, s, XLAB), BO_F(XLOSS), BO_F(XP));
    return s->be->ops->softmax_xent_backward(s->be, s->st, B, Cl, BO_F(XP), bo_at(c, s, XLAB), 1.0f / (float)B, BO_F(XD));
}
static void xent_fp64(bo_case *c) {
    const int64_t B = c->v[1], Cl = c->v[2];
    const float *x = c->t[XL].at[0];
    const int32_t *lab = c->t[XLAB].at[0];
    double *loss = halloc((size_t)B * sizeof(double)), *p = halloc((size_t)(B * Cl) * sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < Cl; k++) mx = fmax(mx, x[b * Cl + k]);
        for (int64_t k = 0; k < Cl; k++) s += exp((double)x[b * Cl + k] - mx);
        for (int64_t k = 0; k < Cl; k++) p[b * Cl + k] = exp((double)x[b * Cl + k] - mx) / s;
        loss[b] = mx + log(s) - x[b * Cl + lab[b]];
    }
    check_fp64(bo_what(c, "cpu loss vs fp64"), c->t[XLOSS].at[0], loss, B, (double)Cl + 4, -1);
    check_fp64(bo_what(c, "cpu probs vs fp64"), c->t[XP].at[0], p, B * Cl, (double)Cl + 2, -1);
}
static const bo_op bo_softmax_xent_forward = {.name = "softmax_xent_forward", .seed_key = SEED_OPS,
                                              .describe = xent_describe, .inputs = xent_inputs, .exec = xent_exec,
                                              .need = {BO_NEED(softmax_xent_forward)}};
static const bo_op bo_softmax_xent_backward = {.name = "softmax_xent_backward", .variant = 1, .seed_key = SEED_OPS,
                                               .describe = xent_describe, .inputs = xent_inputs, .exec = xent_exec,
                                               .need = {BO_NEED(softmax_xent_backward)}};
static const int64_t k_xent[][BO_V] = {{0, 5, 10},  {1, 33, 7},    {2, 1, 1},   {3, 8, 1000},
                                       {4, 256, 10}, {5, 4, 50304}, {6, 3, 50257}};

/* ---------------------------------------------------------------------------- pooling */

/* v = {kind, N, H, W, C, R, S, sh, sw, ph, pw, ties}; ties: inputs from {-1, 0, 1}, so windows
 * hold equal maxima and the first one in scan order must win */
enum { PX, PY, PIDX, PDY, PDX };
enum { POOL_FWD, POOL_BWD, POOL_BWD_ACC };
static void pool_describe(const bo_case *c, char *buf, size_t n) {
    const int64_t *v = c->v;
    snprintf(buf, n, "%s N%lld %lldx%lldx%lld k%lldx%lld s%lldx%lld p%lldx%lld%s", v[0] == QS_POOL_MAX ? "max" : "avg",
             (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5], (long long)v[6],
             (long long)v[7], (long long)v[8], (long long)v[9], (long long)v[10], v[11] ? " ties" : "");
}
static void pool_inputs(bo_case *c) {
    const int64_t *v = c->v;
    qs_pool_desc *d = &c->d.pool;
    *d = (qs_pool_desc){.kind = (qs_pool_kind)v[0], .N = v[1], .H = v[2], .W = v[3], .C = v[4], .R = v[5], .S = v[6],
                        .stride_h = v[7], .stride_w = v[8], .pad_h = v[9], .pad_w = v[10]};
    ASSERT_OK(qs_pool_desc_finish(d));
    const bool is_max = d->kind == QS_POOL_MAX;
    const int64_t nx = d->N * d->H * d->W * d->C, ny = d->N * d->P * d->Q * d->C;
    bo_seed(c, "pool", (uint64_t)(nx * 7 + ny + v[11]));
    float *x = rnd(nx, -2, 2), *dy = rnd(ny, -1, 1), *base = rnd(nx, -1, 1);
    if (v[11])
        for (int64_t i = 0; i < nx; i++) x[i] = (float)((int)floorf(x[i] * 0.75f + 1.5f) - 1); /* -1, 0, 1 */
    if (c->op->variant == POOL_FWD) {
        bo_in(c, PX, "x", x, (size_t)nx * 4);
        bo_out(c, PY, "y", ny, 4, BO_ROW, is_max ? 0 : (double)(d->R * d->S + 1));
        if (is_max) bo_out(c, PIDX, "argmax indices", ny, 4, BO_BITS, 0);
        else bo_none(c, PIDX, "idx");
        return;
    }
    const double kb = (double)(((d->R + d->stride_h - 1) / d->stride_h) * ((d->S + d->stride_w - 1) / d->stride_w));
    const double kr = is_max ? (kb > 1 ? kb : 0) : 2 * kb + 1; /* max, non-overlapping: exact */
    if (is_max) { /* backward from the reference's indices */
        void *plan = NULL;
        size_t wsb = 0;
        int32_t *idx = halloc((size_t)ny * 4);
        ASSERT_OK(COPS->pool_plan(g_cpu, d, &plan, &wsb));
        const qs_status st = COPS->pool_forward(g_cpu, plan, CST, x, hf(ny), idx, wsb ? halloc(wsb) : NULL);
        COPS->plan_destroy(g_cpu, plan);
        ASSERT_OK(st);
        bo_in(c, PIDX, "idx", idx, (size_t)ny * 4);
    } else {
        bo_none(c, PIDX, "idx");
    }
    bo_in(c, PDY, "dy", dy, (size_t)ny * 4);
    if (c->op->variant == POOL_BWD_ACC) bo_inout(c, PDX, "dx accumulated", base, nx, 4, BO_ROW, kr + 1);
    else bo_out(c, PDX, "dx", nx, 4, BO_ROW, kr);
}
static qs_status pool_plan(bo_case *c, bo_side *s) {
    return s->be->ops->pool_plan(s->be, &c->d.pool, &s->plan[0], &s->wsb[0]);
}
static qs_status pool_exec(bo_case *c, bo_side *s) {
    if (c->op->variant == POOL_FWD)
        return s->be->ops->pool_forward(s->be, s->plan[0], s->st, BO_F(PX), BO_F(PY), bo_at(c, s, PIDX), s->ws[0]);
    return s->be->ops->pool_backward(s->be, s->plan[0], s->st, BO_F(PDY), bo_at(c, s, PIDX), BO_F(PDX),
                                     c->op->variant == POOL_BWD_ACC, s->ws[0]);
}
/* Average pooling (count_include_pad) in double. */
static void pool_fp64(bo_case *c) {
    const qs_pool_desc *d = &c->d.pool;
    if (d->kind != QS_POOL_AVG) return;
    const int64_t ny = d->N * d->P * d->Q * d->C;
    const float *x = c->t[PX].at[0];
    double *ref = halloc((size_t)ny * sizeof(double));
    for (int64_t i = 0; i < ny; i++) {
        const int64_t ch = i % d->C, q = (i / d->C) % d->Q, p = (i / (d->C * d->Q)) % d->P, nn = i / (d->C * d->Q * d->P);
        double s = 0;
        for (int64_t r = 0; r < d->R; r++)
            for (int64_t t = 0; t < d->S; t++) {
                const int64_t h = p * d->stride_h - d->pad_h + r, w = q * d->stride_w - d->pad_w + t;
                if (h >= 0 && h < d->H && w >= 0 && w < d->W) s += x[((nn * d->H + h) * d->W + w) * d->C + ch];
            }
        ref[i] = s / (double)(d->R * d->S);
    }
    check_fp64(bo_what(c, "cpu y vs fp64"), c->t[PY].at[0], ref, ny, (double)(d->R * d->S + 1), -1);
}
#define POOL_OP(nm, var, entry)                                                                                 \
    {.name = nm, .variant = var, .seed_key = SEED_OPS, .describe = pool_describe, .inputs = pool_inputs,      \
     .plan = pool_plan, .exec = pool_exec, .need = {BO_NEED(pool_plan), BO_NEED(entry)}}
static const bo_op bo_pool_forward = POOL_OP("pool_forward", POOL_FWD, pool_forward);
static const bo_op bo_pool_backward = POOL_OP("pool_backward", POOL_BWD, pool_backward);
static const bo_op bo_pool_backward_acc = POOL_OP("pool_backward_acc", POOL_BWD_ACC, pool_backward);
static const int64_t k_pool[][BO_V] = {
    {QS_POOL_MAX, 8, 28, 28, 8, 2, 2, 2, 2, 0, 0, 0},  /* the CNN's 2x2/2 */
    {QS_POOL_MAX, 3, 9, 7, 3, 3, 3, 2, 2, 1, 1, 0},    /* overlapping, padded, odd */
    {QS_POOL_MAX, 2, 7, 10, 17, 3, 2, 1, 2, 1, 0, 0},  /* non-square, mixed stride */
    {QS_POOL_MAX, 2, 8, 8, 5, 3, 3, 1, 1, 1, 1, 1},    /* ties: first maximum wins */
    {QS_POOL_AVG, 2, 9, 7, 3, 3, 3, 2, 2, 1, 1, 0},    /* count_include_pad */
    {QS_POOL_AVG, 3, 6, 6, 18, 2, 2, 2, 2, 0, 0, 0},
    {QS_POOL_AVG, 8, 7, 7, 64, 7, 7, 1, 1, 0, 0, 0},   /* global average pooling */
    {QS_POOL_AVG, 2, 5, 3, 9, 5, 3, 1, 1, 0, 0, 0},    /* global, non-square */
};

const bo_row bo_rows_reduce[] = {
    {&bo_column_sums, 0, BO_SHAPES(k_colsum), .budget = bo_tol, .fp64 = colsum_fp64},
    {&bo_sum_squares, 0, BO_SHAPES(k_ssq), .budget = bo_tol, .fp64 = ssq_fp64},
    {&bo_sgd_step, 0, BO_SHAPES(k_sgd), .budget = bo_tol, .fp64 = sgd_fp64},
    {&bo_adamw_step, 0, BO_SHAPES(k_adamw), .budget = bo_tol, .fp64 = adamw_fp64},
    {&bo_softmax_xent_forward, 0, BO_SHAPES(k_xent), .budget = bo_tol, .fp64 = xent_fp64},
    {&bo_softmax_xent_backward, 0, BO_SHAPES(k_xent), .budget = bo_tol},
    {&bo_pool_forward, 0, BO_SHAPES(k_pool), .budget = bo_tol, .fp64 = pool_fp64},
    {&bo_pool_backward, 0, BO_SHAPES(k_pool), .budget = bo_tol},
    {&bo_pool_backward_acc, 0, BO_SHAPES(k_pool), .budget = bo_tol},
    {0},
};
