/* tests/backend_ops/ops_eltwise.c — defines: the element-wise ops of the registry — ReLU forward
 * and backward (F32 and BF16 dy), SiLU forward (also in place) and backward (also accumulated),
 * Add (+ReLU, BF16 inputs), accumulate, scale, dropout forward (mask, values, the base read from
 * memory) and backward, and the NHWC ⇄ NCHW layouts — and their rows.
 *
 * Tolerances (the rule of tests/support/gpu_harness.h check_tol): exact — value equality, NaN
 * matching NaN — for relu, add, add+relu, accumulate, scale and the layouts (accumulate included:
 * one FP32 addition on both sides); bit identity for dropout masks; dropout's kept values are
 * x·(1/(1−p)): one rounding (the factor may be formed in float or double), Kr = 1, accumulated
 * Kr = 2. Backward ops read the reference's forward results (ReLU output, dropout mask), so each
 * op is judged alone.
 *
 * SiLU: both sides make the same FP32 operations after e = expf(−x), whose error ε_e is < 1 ulp
 * (≤ 2u, u = 2^-24) in glibc and ≤ 2 ulp (≤ 4u) on the GPU; each later operation rounds once (≤ u).
 * The pair's rule is |Δ| ≤ rtol·|ref| + atol with rtol = 8u·sqrt(Kr) (check_tol).
 *  - forward: σ = 1/(1 + e) carries e's error times e/(1 + e) < 1 and two roundings, y = x·σ a
 *    third, so one side is off by ≤ ε_e + 3u relative and nothing cancels: 5u + 7u = 12u between
 *    the sides, rtol with Kr 3 (13.9u), element by element (atol 0);
 *  - backward, d = σ·(1 + t), t = x·e·σ: t is off by ≤ ε_e + 4u, 1 + t multiplies that by
 *    κ = |t|/|1 + t| and adds u, σ·(…) and dy·d add 2u, so one side is off by
 *    ≤ (κ + 1)·ε_e + (4κ + 5)u relative. Where κ ≤ 1 that is 13u + 17u = 30u between the sides:
 *    Kr 15 (31u). Where κ > 1 (t < −1/2: x < −0.75, with the zero of d at x ≈ −1.28) the
 *    difference is ≤ 14u·σ|t| + 16u·|d| ≤ 5.8u·|dy| (σ|t| ≤ 0.23 and |d| ≤ 0.16 there), which
 *    atol = rtol·max|ref| covers (max|ref| ≈ max|dy|·1.1);
 *  - accumulated: one more addition per side, which may cancel: Kr 16, atol = rtol·max|ref|.
 * The bounds hold wherever σ is normal (x > −87.3) or 0 (exp(−x) overflowed: x < −88.7, where
 * both sides give −0); the inputs keep out of the gap between. FP64 rows (one side, rtol =
 * 4u·sqrt(K)): forward 5u, K 2 (5.7u), with atol = rtol·1e-30 (≈ 3e-37) for results that
 * underflow — a subnormal's rounding and the −0 of x < −88.7, where |x·σ(x)| < 2.6e-37; backward
 * 13u, K 11 (13.3u), accumulated K 12, atol = rtol·max|ref| as above. */
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

#define SEED_OPS 20261202 /* the key of the suite these rows came from: their inputs are its inputs */

/* ------------------------------------------------------------------------ element-wise */

/* The inputs every element-wise op draws (v[0] the input set, v[1] = n): x with zeros, ±0,
 * NaN, ±Inf and subnormals; xa = x without its NaN (for add: the CPU's add+relu maps NaN to 0,
 * relu keeps it); b, dy, base; and the reference's ReLU of x (the backward's y). */
typedef struct elt_in {
    float *x, *xa, *b, *dy, *base, *yrelu;
} elt_in;

static elt_in elt_inputs(bo_case *c) {
    const int64_t n = c->v[1];
    bo_seed(c, "eltwise", (uint64_t)c->v[0]);
    elt_in in = {.x = rnd(n, -1, 1), .b = rnd(n, -1, 1), .dy = rnd(n, -1, 1), .base = rnd(n, -1, 1)};
    float *x = in.x;
    x[0] = 0.0f, x[1] = -0.0f, x[2] = NAN, x[3] = INFINITY, x[4] = -INFINITY, x[5] = 1e-40f, x[6] = -1e-40f;
    in.xa = hcopy(x, n);
    in.xa[2] = 0.5f;
    in.yrelu = hf(n);
    ASSERT_OK(COPS->relu_forward(g_cpu, CST, n, x, in.yrelu));
    return in;
}

/* x rounded to BF16 (nearest even) by the host, as tensor i. */
static void bf16_input(bo_case *c, int i, const char *name, const float *x, int64_t n) {
    uint16_t *h = halloc((size_t)n * 2);
    ASSERT_OK(qs_f32_to_bf16(n, x, h, NULL));
    bo_in(c, i, name, h, (size_t)n * 2);
}

enum { EX, EY, EDY, EDX };

/* relu_forward: v = {input set, n, in place} */
static void relu_fwd_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "n=%lld%s", (long long)c->v[1], c->v[2] ? " in place" : "");
}
static void relu_fwd_inputs(bo_case *c) {
    const elt_in in = elt_inputs(c);
    const int64_t n = c->v[1];
    if (c->v[2]) {
        bo_inout(c, EX, "x = y", in.x, n, 4, BO_ROW, 0);
    } else {
        bo_in(c, EX, "x", in.x, (size_t)n * 4);
        bo_out(c, EY, "y", n, 4, BO_ROW, 0);
    }
}
static qs_status relu_fwd_exec(bo_case *c, bo_side *s) {
    return s->be->ops->relu_forward(s->be, s->st, c->v[1], BO_F(EX), BO_F(c->v[2] ? EX : EY));
}

/* relu_backward: v = {input set, n, accumulate, dy bf16}: from the reference's ReLU output */
static void relu_bwd_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "n=%lld%s%s", (long long)c->v[1], c->v[3] ? " dy bf16" : "", c->v[2] ? " accumulate" : "");
}
static void relu_bwd_inputs(bo_case *c) {
    const elt_in in = elt_inputs(c);
    const int64_t n = c->v[1];
    bo_in(c, EY, "y", in.yrelu, (size_t)n * 4);
    if (c->v[3]) bf16_input(c, EDY, "dy", in.dy, n); /* a BF16 GEMM's dx_dt: widened exactly */
    else bo_in(c, EDY, "dy", in.dy, (size_t)n * 4);
    if (c->v[2]) bo_inout(c, EDX, "dx accumulated", in.base, n, 4, BO_ROW, 0);
    else bo_out(c, EDX, "dx", n, 4, BO_ROW, 0);
}
static qs_status relu_bwd_exec(bo_case *c, bo_side *s) {
    return s->be->ops->relu_backward(s->be, s->st, c->v[1], BO_F(EY), bo_at(c, s, EDY), c->v[3] ? QS_BF16 : QS_F32,
                                     BO_F(EDX), c->v[2] != 0);
}

/* add_forward: v = {input set, n, relu, a bf16, b bf16} (a BF16 input: a block output kept in
 * BF16, widened exactly) */
enum { AA, AB, AY };
static void add_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "n=%lld%s%s%s", (long long)c->v[1], c->v[2] ? " +relu" : "", c->v[3] ? " a bf16" : "",
             c->v[4] ? " b bf16" : "");
}
static void add_inputs(bo_case *c) {
    const elt_in in = elt_inputs(c);
    const int64_t n = c->v[1];
    if (c->v[3]) bf16_input(c, AA, "a", in.xa, n);
    else bo_in(c, AA, "a", in.xa, (size_t)n * 4);
    if (c->v[4]) bf16_input(c, AB, "b", in.b, n);
    else bo_in(c, AB, "b", in.b, (size_t)n * 4);
    bo_out(c, AY, "y", n, 4, BO_ROW, 0);
}
static qs_status add_exec(bo_case *c, bo_side *s) {
    return s->be->ops->add_forward(s->be, s->st, c->v[1], bo_at(c, s, AA), c->v[3] ? QS_BF16 : QS_F32,
                                   bo_at(c, s, AB), c->v[4] ? QS_BF16 : QS_F32, BO_F(AY), c->v[2] != 0);
}

/* accumulate: v = {input set, n, accumulate}: dst += x, or dst = x (a copy) */
static void acc_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%s n=%lld", c->v[2] ? "+=" : "= (copy)", (long long)c->v[1]);
}
static void acc_inputs(bo_case *c) {
    const elt_in in = elt_inputs(c);
    const int64_t n = c->v[1];
    bo_in(c, EX, "src", in.x, (size_t)n * 4);
    if (c->v[2]) bo_inout(c, EY, "dst", in.base, n, 4, BO_ROW, 0);
    else bo_out(c, EY, "dst", n, 4, BO_ROW, 0);
}
static qs_status acc_exec(bo_case *c, bo_side *s) {
    return s->be->ops->accumulate(s->be, s->st, c->v[1], BO_F(EX), BO_F(EY), c->v[2] != 0);
}

/* scale: v = {input set, n, step}: b scaled by -0.375, then (step 1, from the reference's result)
 * by 1/3 */
static const float k_alpha[2] = {-0.375f, 1.0f / 3.0f};
static void scale_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "by %s n=%lld", c->v[2] ? "1/3" : "-0.375", (long long)c->v[1]);
}
static void scale_inputs(bo_case *c) {
    const elt_in in = elt_inputs(c);
    const int64_t n = c->v[1];
    float *x = hcopy(in.b, n);
    for (int64_t k = 0; k < c->v[2]; k++) ASSERT_OK(COPS->scale(g_cpu, CST, n, x, k_alpha[k]));
    bo_inout(c, EX, "x", x, n, 4, BO_ROW, 0);
}
static qs_status scale_exec(bo_case *c, bo_side *s) {
    return s->be->ops->scale(s->be, s->st, c->v[1], BO_F(EX), k_alpha[c->v[2]]);
}

#define ELT_OP(nm, d, in, ex, entry)                                                                          \
    {.name = nm, .seed_key = SEED_OPS, .describe = d, .inputs = in, .exec = ex, .need = {BO_NEED(entry)}}
static const bo_op bo_relu_forward = ELT_OP("relu_forward", relu_fwd_describe, relu_fwd_inputs, relu_fwd_exec, relu_forward);
static const bo_op bo_relu_backward = ELT_OP("relu_backward", relu_bwd_describe, relu_bwd_inputs, relu_bwd_exec, relu_backward);
static const bo_op bo_add_forward = ELT_OP("add_forward", add_describe, add_inputs, add_exec, add_forward);
static const bo_op bo_accumulate = ELT_OP("accumulate", acc_describe, acc_inputs, acc_exec, accumulate);
static const bo_op bo_scale = ELT_OP("scale", scale_describe, scale_inputs, scale_exec, scale);

#define N0 1003
#define N1 ((1 << 20) + 1)
static const int64_t k_relu_fwd[][BO_V] = {{0, N0, 0}, {0, N0, 1}, {1, N1, 0}, {1, N1, 1}};
static const int64_t k_relu_bwd[][BO_V] = {{0, N0, 0, 0}, {0, N0, 1, 0}, {0, N0, 0, 1}, {0, N0, 1, 1},
                                           {1, N1, 0, 0}, {1, N1, 1, 0}, {1, N1, 0, 1}, {1, N1, 1, 1}};
#define ADDS(t, n) {t, n, 0, 0, 0}, {t, n, 1, 0, 0}, {t, n, 0, 0, 1}, {t, n, 1, 1, 0}, {t, n, 1, 1, 1}
static const int64_t k_add[][BO_V] = {ADDS(0, N0), ADDS(1, N1)};
static const int64_t k_accumulate[][BO_V] = {{0, N0, 1}, {0, N0, 0}, {1, N1, 1}, {1, N1, 0}};
static const int64_t k_scale[][BO_V] = {{0, N0, 0}, {0, N0, 1}, {1, N1, 0}, {1, N1, 1}};

/* ------------------------------------------------------------------------------ SiLU */

/* v = {input set, n}: x random in [-6, 6) with, every 5th element from the 3rd, the special
 * values: zeros, subnormals, tiny, saturating (exp(−x) overflows below −88.7 and underflows
 * above 103.9; ±Inf), the zero of the derivative and NaN; dy and the accumulated base random in
 * [-1, 1). Set 1 is large (the float4 path, a tail element and many threads). */
enum { SILU_FWD, SILU_FWD_INPLACE, SILU_BWD, SILU_BWD_ACC };
static const float k_silu_special[] = {0.0f,   -0.0f,   1e-40f,   -1e-40f,  1e-30f,    -1e-30f, 20.0f,
                                       -20.0f, 100.0f,  -100.0f,  1e4f,     -1e4f,     INFINITY, -INFINITY,
                                       -1.2785f, 5.0f, -5.0f,    NAN};

static void silu_describe(const bo_case *c, char *buf, size_t n) { snprintf(buf, n, "n=%lld", (long long)c->v[1]); }

static void silu_inputs(bo_case *c) {
    const int64_t n = c->v[1];
    bo_seed(c, "silu", (uint64_t)c->v[0]);
    float *x = rnd(n, -6, 6), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
    for (size_t i = 0; i < sizeof k_silu_special / sizeof k_silu_special[0]; i++) x[5 * i + 2] = k_silu_special[i];
    const int v = c->op->variant;
    if (v == SILU_FWD_INPLACE) {
        bo_inout(c, EX, "x = y", x, n, 4, BO_ROW, 3);
        c->t[EX].scale = 0.0;
        return;
    }
    bo_in(c, EX, "x", x, (size_t)n * 4);
    if (v == SILU_FWD) {
        bo_out(c, EY, "y", n, 4, BO_ROW, 3);
        c->t[EY].scale = 0.0;
        return;
    }
    bo_in(c, EDY, "dy", dy, (size_t)n * 4);
    if (v == SILU_BWD_ACC) bo_inout(c, EDX, "dx accumulated", base, n, 4, BO_ROW, 16);
    else bo_out(c, EDX, "dx", n, 4, BO_ROW, 15);
}

static qs_status silu_exec(bo_case *c, bo_side *s) {
    const int64_t n = c->v[1];
    const qs_backend_ops *o = s->be->ops;
    switch (c->op->variant) {
    case SILU_FWD: return o->silu_forward(s->be, s->st, n, BO_F(EX), BO_F(EY));
    case SILU_FWD_INPLACE: return o->silu_forward(s->be, s->st, n, BO_F(EX), BO_F(EX));
    default: return o->silu_backward(s->be, s->st, n, BO_F(EX), BO_F(EDY), BO_F(EDX), c->op->variant == SILU_BWD_ACC);
    }
}

/* The CPU's results against x·σ(x) and dy·σ·(1 + x·(1 − σ)) (+ base) in double, 1 − σ as
 * 1/(1 + e^x); ±Inf at their limits (y(−∞) = −0, d(−∞) = −0, d(+∞) = 1). */
static void silu_fp64(bo_case *c) {
    const int64_t n = c->v[1];
    const int v = c->op->variant;
    const bool fwd = v == SILU_FWD || v == SILU_FWD_INPLACE;
    const float *x = c->t[EX].host, *dy = c->t[EDY].host, *base = c->t[EDX].host;
    double *r = halloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        const double xi = x[i], sg = 1.0 / (1.0 + exp(-xi));
        if (fwd) {
            r[i] = xi == -INFINITY ? -0.0 : xi * sg;
            continue;
        }
        const double d = isinf(xi) ? (xi > 0 ? 1.0 : -0.0) : sg * (1.0 + xi / (1.0 + exp(xi)));
        r[i] = (v == SILU_BWD_ACC ? (double)base[i] : 0.0) + (double)dy[i] * d;
    }
    const int out = v == SILU_FWD ? EY : fwd ? EX : EDX;
    check_fp64(bo_what(c, "cpu vs fp64"), c->t[out].at[0], r, n, fwd ? 2 : v == SILU_BWD ? 11 : 12, fwd ? 1e-30 : -1);
}

#define SILU_OP(nm, var, entry)                                                                                 \
    {.name = nm, .variant = var, .seed_key = SEED_OPS, .describe = silu_describe, .inputs = silu_inputs,      \
     .exec = silu_exec, .need = {BO_NEED(entry)}}
static const bo_op bo_silu_forward = SILU_OP("silu_forward", SILU_FWD, silu_forward);
static const bo_op bo_silu_forward_inplace = SILU_OP("silu_forward_in_place", SILU_FWD_INPLACE, silu_forward);
static const bo_op bo_silu_backward = SILU_OP("silu_backward", SILU_BWD, silu_backward);
static const bo_op bo_silu_backward_acc = SILU_OP("silu_backward_acc", SILU_BWD_ACC, silu_backward);
static const int64_t k_silu[][BO_V] = {{0, N0}, {1, N1}};

/* --------------------------------------------------------------------------- dropout */

/* v = {case}: n, p and the counter base of each case */
static const struct {
    int64_t n;
    float p;
    uint64_t cb;
} k_drop[] = {{1003, 0.3f, 1000}, {(1 << 20) + 3, 0.1f, 7}, {100003, 0.5f, 0x100000005ull}, {1003, 0.0f, 1},
              {1003, 1.0f, 2}};
enum { DX, DY, DM, DSTEP, DDY, DDX };
enum { DROP_FWD, DROP_FWD_AT, DROP_BWD, DROP_BWD_ACC };

static void drop_describe(const bo_case *c, char *buf, size_t n) {
    const int t = (int)c->v[0];
    snprintf(buf, n, "n=%lld p=%g counter_base=%llu", (long long)k_drop[t].n, (double)k_drop[t].p,
             (unsigned long long)k_drop[t].cb);
}

static void drop_inputs(bo_case *c) {
    const int t = (int)c->v[0];
    const int64_t n = k_drop[t].n;
    bo_seed(c, "dropout", (uint64_t)t);
    float *x = rnd(n, -1, 1), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
    const int v = c->op->variant;
    if (v == DROP_FWD || v == DROP_FWD_AT) {
        bo_in(c, DX, "x", x, (size_t)n * 4);
        bo_out(c, DY, "y", n, 4, v == DROP_FWD ? BO_ROW : BO_NOCMP, 1);
        bo_out(c, DM, "mask", n, 1, BO_BITS, 0);
        int64_t *step = halloc(sizeof *step);
        *step = (int64_t)k_drop[t].cb; /* step_at · step_stride = counter_base */
        bo_in(c, DSTEP, "step", step, sizeof *step);
        return;
    }
    uint8_t *mask = halloc((size_t)n); /* backward from the reference's mask */
    const qs_dropout_rng rng = {.key = qs_rng_key(42, "dropout", (uint64_t)t), .counter_base = k_drop[t].cb};
    ASSERT_OK(COPS->dropout_forward(g_cpu, CST, n, x, hf(n), mask, k_drop[t].p, &rng));
    bo_in(c, DM, "mask", mask, (size_t)n);
    bo_in(c, DDY, "dy", dy, (size_t)n * 4);
    if (v == DROP_BWD_ACC) bo_inout(c, DDX, "dx accumulated", base, n, 4, BO_ROW, 2);
    else bo_out(c, DDX, "dx", n, 4, BO_ROW, 1);
}

/* The reference always takes its base by value; DROP_FWD_AT: the DUT reads it from memory
 * (step_at; its counter_base, off by one, must be ignored). */
static qs_status drop_exec(bo_case *c, bo_side *s) {
    const int t = (int)c->v[0], v = c->op->variant;
    const int64_t n = k_drop[t].n;
    const float p = k_drop[t].p;
    const uint64_t key = qs_rng_key(42, "dropout", (uint64_t)t);
    const qs_dropout_rng rng = {.key = key, .counter_base = k_drop[t].cb};
    const qs_dropout_rng rng_at = {.key = key, .counter_base = k_drop[t].cb + 1, .step_at = bo_at(c, s, DSTEP),
                                   .step_stride = 1};
    const qs_backend_ops *o = s->be->ops;
    if (v == DROP_FWD || v == DROP_FWD_AT)
        return o->dropout_forward(s->be, s->st, n, BO_F(DX), BO_F(DY), bo_at(c, s, DM), p,
                                  v == DROP_FWD_AT && s->idx ? &rng_at : &rng);
    return o->dropout_backward(s->be, s->st, n, BO_F(DDY), bo_at(c, s, DM), p, BO_F(DDX), v == DROP_BWD_ACC);
}

#define DROP_OP(nm, var, entry)                                                                                \
    {.name = nm, .variant = var, .seed_key = SEED_OPS, .describe = drop_describe, .inputs = drop_inputs,     \
     .exec = drop_exec, .need = {BO_NEED(entry)}}
static const bo_op bo_dropout_forward = DROP_OP("dropout_forward", DROP_FWD, dropout_forward);
static const bo_op bo_dropout_forward_step_at = DROP_OP("dropout_forward_step_at", DROP_FWD_AT, dropout_forward);
static const bo_op bo_dropout_backward = DROP_OP("dropout_backward", DROP_BWD, dropout_backward);
static const bo_op bo_dropout_backward_acc = DROP_OP("dropout_backward_acc", DROP_BWD_ACC, dropout_backward);
static const int64_t k_dropout[][BO_V] = {{0}, {1}, {2}, {3}, {4}};

/* ---------------------------------------------------------------------------- layouts */

/* v = {input set, N, H, W, C}; nchw_to_nhwc reads the reference's NCHW tensor */
enum { LX, LY };
enum { TO_NCHW, TO_NHWC, TO_NHWC_ACC };

static void layout_describe(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%lldx%lldx%lldx%lld", (long long)c->v[1], (long long)c->v[2], (long long)c->v[3],
             (long long)c->v[4]);
}

static void layout_inputs(bo_case *c) {
    const int64_t *v = c->v, n = v[1] * v[2] * v[3] * v[4];
    bo_seed(c, "layout", (uint64_t)v[0]);
    float *x = rnd(n, -1, 1), *base = rnd(n, -1, 1);
    if (c->op->variant == TO_NCHW) {
        bo_in(c, LX, "x", x, (size_t)n * 4);
        bo_out(c, LY, "y", n, 4, BO_ROW, 0);
        return;
    }
    float *nchw = hf(n);
    ASSERT_OK(COPS->nhwc_to_nchw(g_cpu, CST, v[1], v[2], v[3], v[4], x, nchw));
    bo_in(c, LX, "x (nchw)", nchw, (size_t)n * 4);
    if (c->op->variant == TO_NHWC_ACC) bo_inout(c, LY, "y accumulated", base, n, 4, BO_ROW, 0);
    else bo_out(c, LY, "y", n, 4, BO_ROW, 0);
}

static qs_status layout_exec(bo_case *c, bo_side *s) {
    const int64_t *v = c->v;
    if (c->op->variant == TO_NCHW) return s->be->ops->nhwc_to_nchw(s->be, s->st, v[1], v[2], v[3], v[4], BO_F(LX), BO_F(LY));
    return s->be->ops->nchw_to_nhwc(s->be, s->st, v[1], v[2], v[3], v[4], BO_F(LX), BO_F(LY), c->op->variant == TO_NHWC_ACC);
}

#define LAYOUT_OP(nm, var, entry)                                                                              \
    {.name = nm, .variant = var, .seed_key = SEED_OPS, .describe = layout_describe, .inputs = layout_inputs, \
     .exec = layout_exec, .need = {BO_NEED(entry)}}
static const bo_op bo_nhwc_to_nchw = LAYOUT_OP("nhwc_to_nchw", TO_NCHW, nhwc_to_nchw);
static const bo_op bo_nchw_to_nhwc = LAYOUT_OP("nchw_to_nhwc", TO_NHWC, nchw_to_nhwc);
static const bo_op bo_nchw_to_nhwc_acc = LAYOUT_OP("nchw_to_nhwc_acc", TO_NHWC_ACC, nchw_to_nhwc);
static const int64_t k_layout[][BO_V] = {{0, 3, 5, 7, 37}, {1, 8, 28, 28, 16}, {2, 1, 1, 1, 1}, {3, 2, 9, 4, 3}};

const bo_row bo_rows_eltwise[] = {
    {&bo_relu_forward, 0, BO_SHAPES(k_relu_fwd), .budget = bo_exact},
    {&bo_relu_backward, 0, BO_SHAPES(k_relu_bwd), .budget = bo_exact},
    {&bo_add_forward, 0, BO_SHAPES(k_add), .budget = bo_exact},
    {&bo_accumulate, 0, BO_SHAPES(k_accumulate), .budget = bo_exact},
    {&bo_scale, 0, BO_SHAPES(k_scale), .budget = bo_exact},
    {&bo_silu_forward, 0, BO_SHAPES(k_silu), .budget = bo_tol, .fp64 = silu_fp64},
    {&bo_silu_forward_inplace, 0, BO_SHAPES(k_silu), .budget = bo_tol, .fp64 = silu_fp64},
    {&bo_silu_backward, 0, BO_SHAPES(k_silu), .budget = bo_tol, .fp64 = silu_fp64},
    {&bo_silu_backward_acc, 0, BO_SHAPES(k_silu), .budget = bo_tol, .fp64 = silu_fp64},
    {&bo_dropout_forward, 0, BO_SHAPES(k_dropout), .budget = bo_tol},
    {&bo_dropout_forward_step_at, 0, BO_SHAPES(k_dropout), .budget = bo_tol},
    {&bo_dropout_backward, 0, BO_SHAPES(k_dropout), .budget = bo_tol},
    {&bo_dropout_backward_acc, 0, BO_SHAPES(k_dropout), .budget = bo_tol},
    {&bo_nhwc_to_nchw, 0, BO_SHAPES(k_layout), .budget = bo_exact},
    {&bo_nchw_to_nhwc, 0, BO_SHAPES(k_layout), .budget = bo_exact},
    {&bo_nchw_to_nhwc_acc, 0, BO_SHAPES(k_layout), .budget = bo_exact},
    {0},
};
