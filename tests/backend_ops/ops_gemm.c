/* tests/backend_ops/ops_gemm.c — defines: the GEMM-like ops of the registry — Linear and Conv2d
 * forward, backward-data (overwriting, accumulating) and backward-weights (+ bias gradient), FP8
 * backward reading transposed copies — their rows, and gemm_budget with its derivation.
 *
 * Inputs: random FP32 tensors quantized ONCE, by the reference's quantize op, into the plan's
 * operand dtypes; the codes and their scales go to both sides, so both multiply identical
 * operands and the comparison isolates the GEMM (quantization is judged on its own, bit for bit:
 * ops_quant.c). TF32 has no CPU counterpart: the reference is the CPU's FP32 plan on the same
 * FP32 operands.
 *
 * NMSE budgets of the GEMM-like ops (derived; not tuned to pass)
 *   NMSE = Σ(g−c)² / Σc² over the elements where the CPU result c is finite; non-finite CPU
 *   elements must be non-finite of the same kind on the DUT, finite ones finite. u = 2^-24.
 *   Operands are zero-mean (uniform), K is the reduction length of the output (C·R·S for a
 *   conv forward, K·⌈R/sh⌉·⌈S/sw⌉ for its backward-data, N·P·Q for backward-weights).
 *  (a) FP32 accumulation. Addition k of a K-term dot product errs by at most ulp(s_k)/2 under
 *      round-to-nearest or < ulp(s_k) under truncation (tensor cores align and truncate their
 *      addends: Fasi, Higham, Mikaitis, Pranesh, PeerJ CS 2021), with ulp(s) ≤ 2u|s|: mean
 *      square ≤ u²s²/3 (RNE) or ≤ 4u²s²/3 (RZ). For zero-mean terms E s_k² = k·σ², so
 *      Σ_k E s_k² ≈ K²σ²/2 against a result variance K·σ²; the errors have random signs and
 *      are uncorrelated, so one implementation's relative MSE is ≤ u²K/6 (RNE) or (2/3)u²K
 *      (RZ), and the two sides differ by ≤ (1/6 + 2/3)u²K < u²K. Rounded products (no FMA), the
 *      bias and the accumulate add give a few more roundings:   A32(K) = u²·(K + 2).
 *  (b) FP8 on Hopper tensor cores is NOT accumulated in IEEE FP32: the addends of an MMA are
 *      aligned and truncated to about 13 fraction bits (DeepSeek-V3 technical report §3.3.2:
 *      "around 14 bits" retained on H800). cuBLASLt's default (CUBLASLT_MATMUL_DESC_FAST_ACCUM
 *      = 0) promotes partial sums to FP32 periodically; with a promotion interval of ≤ 128
 *      products (CUTLASS's default: every 4 MMAs of k = 32), argument (a) with 2^-13 in place
 *      of u gives, per chunk and hence relative to the whole sum:
 *                                                         A8(K) = 2^-26·(min(K, 128) + 2).
 *      A backend that enables fast accumulation (no promotion) errs ∝ K and fails at large K
 *      on purpose: that is a precision decision to be taken explicitly, not by accident.
 *  (c) TF32: the GPU rounds each FP32 operand to 10 fraction bits before multiplying (the CPU
 *      reference does not). Relative operand error: |δ| ≤ 2^-11 (RNE, mean 0) or
 *      δ ∈ (−2^-10, 0] (truncation: mean μ with |μ| ≤ 2^-11, mean square ≤ (2^-10)²/3, both
 *      worst for significands near 1). Product k carries t_k = δx + δw, so the output's error
 *      is Σ t_k·p_k: its zero-mean part is uncorrelated across sign-random products and the
 *      common mean shrinks y as a whole, giving NMSE = E[t²] = E δx² + E δw² + 2·μ² ≤
 *      2·2^-20/3 + 2·2^-22:                           I_tf32 = (7/6)·2^-20 ≈ 1.1e-6.
 *      (Checked by emulating TF32 on the CPU: RNE 6.5e-8, truncation 4e-7..7e-7.)
 *  (d) BF16, FP16 and FP8 operands are identical on both sides and exactly representable, and
 *      their products are exact in FP32 (8×8-, 11×11-, 4×4-bit significands ≤ 24 bits), so
 *      only the accumulation differs: (a), plus (b) for FP8. INT8 (the CPU runs it; CUDA plans
 *      refuse it) multiplies integers exactly and sums them exactly in int32: the dequantizing
 *      multiply and the bias add are roundings (a) already counts.
 *  (e) Output rounding. cuBLASLt writes an FP32 D for every input type: a Linear has none.
 *      cuDNN's legacy convolution configurations need x, w, y of one type (the BF16/FP16
 *      "PSEUDO_*_CONFIG"s), so a conv may produce BF16/FP16 and widen it; an FP8 conv may run as
 *      BF16 or FP16 on widened operands (both hold every E4M3/E5M2 value exactly). One RNE
 *      rounding to p fraction bits: error² ≤ ulp²/12 ≤ 2^-2p·y²/12, hence for convs
 *      O = 2^-14/12 ≈ 5.1e-6 (BF16, and FP8 taking the coarser format), 2^-20/12 ≈ 7.9e-8
 *      (FP16), 0 otherwise.
 *  (f) cuDNN may pick Winograd or FFT algorithms for a conv, whose transforms round beyond
 *      direct summation: convs get ×100 (×10 in RMS) on A32. The largest FP32 conv budget
 *      here (K = 6272: 2.2e-8) is still ~3× below the NMSE of even round-to-nearest TF32
 *      operands (2·2^-20/24 ≈ 7.9e-8 for uniformly spread significands; 6.5e-8 measured), so
 *      an FP32 conv silently run with TF32 tensor-core math (cuDNN's CUDNN_DEFAULT_MATH allows
 *      it on Ampere and later) fails.
 *   budget = MARGIN·(A32·[×100 for conv] + A8·[FP8] + I_tf32·[TF32] + O·[conv]), MARGIN = 10:
 *   the terms are upper estimates of expected values; the NMSE of ≥ 15 outputs is an average of
 *   independent errors, and 10× covers its spread. Not wider: real bugs (a transposed operand,
 *   a lost scale, wrong padding or stride, a dropped bias or accumulate, FP16 accumulation,
 *   TF32 in an FP32 plan, a BF16-rounded Linear output) are orders of magnitude above.
 *   Examples (Linear, K = 1024): FP32, BF16, FP16 3.6e-11; TF32 1.1e-5; FP8 1.9e-5.
 *
 * FP64 rows: the CPU's Linear and Conv2d forward against a double-precision product of the same
 * dequantized operands, at check.h's budget of one FP32 implementation, Kr = K + 2. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gemm.h"
#include "gpu_harness.h"
#include "graph_helpers.h"

#define KIND(c) ((gemm_kind)(c)->n[6])

double gemm_budget(gemm_kind kind, qs_precision p, double K) {
    const double u2 = 0x1p-48, margin = 10.0;
    double a32 = u2 * (K + 2.0);
    if (kind == GEMM_CONV) a32 *= 100.0;
    const double a8 = p == QS_PREC_FP8 ? 0x1p-26 * (fmin(K, 128.0) + 2.0) : 0.0;
    const double in = p == QS_PREC_TF32 ? 0x1p-20 * (2.0 / 3.0 + 0.5) : 0.0;
    double out = 0.0;
    if (kind == GEMM_CONV)
        out = (p == QS_PREC_BF16 || p == QS_PREC_FP8) ? 0x1p-14 / 12.0 : p == QS_PREC_FP16 ? 0x1p-20 / 12.0 : 0.0;
    return margin * (a32 + a8 + in + out);
}

bo_rule gemm_linear_nmse(const bo_case *c, int i) {
    return (bo_rule){BO_NMSE, gemm_budget(GEMM_LINEAR, c->prec, c->t[i].K), 0};
}
bo_rule gemm_conv_nmse(const bo_case *c, int i) {
    return (bo_rule){BO_NMSE, gemm_budget(GEMM_CONV, c->prec, c->t[i].K), 0};
}

/* ----------------------------------------------------------------------- geometry */

void gemm_geometry(bo_case *c, gemm_kind kind) {
    const int64_t *v = c->v;
    c->n[6] = kind;
    if (kind == GEMM_LINEAR) {
        const int64_t M = v[0], N = v[1], K = v[2];
        c->d.lin = (qs_linear_desc){.M = M, .N = N, .K = K, .has_bias = v[3] != 0, .prec = c->prec};
        const int64_t g[6] = {M, K, N, K, M, N};
        memcpy(c->n, g, sizeof g);
        c->f[0] = (double)K, c->f[1] = (double)N, c->f[2] = (double)M;
        c->f[3] = 2.0 * (double)M * (double)N * (double)K;
        return;
    }
    qs_conv_desc *d = &c->d.conv;
    *d = (qs_conv_desc){.N = v[0], .H = v[1], .W = v[2], .C = v[3], .K = v[4], .R = v[5], .S = v[6],
                        .stride_h = v[7], .stride_w = v[8], .pad_h = v[9], .pad_w = v[10], .has_bias = v[11] != 0,
                        .prec = c->prec};
    ASSERT_OK(qs_conv_desc_finish(d));
    const int64_t g[6] = {d->N * d->H * d->W, d->C, d->K, d->C * d->R * d->S, d->N * d->P * d->Q, d->K};
    memcpy(c->n, g, sizeof g);
    c->f[0] = (double)(d->C * d->R * d->S);
    c->f[1] = (double)(d->K * ((d->R + d->stride_h - 1) / d->stride_h) * ((d->S + d->stride_w - 1) / d->stride_w));
    c->f[2] = (double)(d->N * d->P * d->Q);
    c->f[3] = 2.0 * (double)(d->N * d->P * d->Q * d->K) * c->f[0];
}

gemm_dims gemm_setup(bo_case *c, gemm_kind kind, const char *lin_what, const char *conv_what, uint64_t extra) {
    gemm_geometry(c, kind);
    const qs_precision p = c->prec;
    const int64_t *n = c->n;
    const gemm_dims d = {.nx = n[0] * n[1], .nw = n[2] * n[3], .ny = n[4] * n[5], .nb = n[2], .lin = kind == GEMM_LINEAR,
                         .bias = kind == GEMM_LINEAR ? c->d.lin.has_bias : c->d.conv.has_bias,
                         .fdt = qs_precision_operand_dtype(p, false), .gdt = qs_precision_operand_dtype(p, true)};
    if (d.lin) bo_seed(c, lin_what, (uint64_t)p * 1000003u + (uint64_t)(n[0] * 10007 + n[2] * 101 + n[1]) + extra);
    else bo_seed(c, conv_what, (uint64_t)p * 1000003u + (uint64_t)(d.nx * 31 + d.nw * 7 + d.ny) + extra);
    return d;
}

void gemm_describe_linear(const bo_case *c, char *buf, size_t n) {
    snprintf(buf, n, "M%lld N%lld K%lld%s", (long long)c->v[0], (long long)c->v[1], (long long)c->v[2],
             c->v[3] ? " +b" : "");
}

void gemm_describe_conv(const bo_case *c, char *buf, size_t n) {
    const int64_t *v = c->v;
    if (v[7] != v[8] || v[9] != v[10])
        snprintf(buf, n, "N%lld %lldx%lldx%lld->%lld k%lldx%lld s%lldx%lld p%lldx%lld%s", (long long)v[0],
                 (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5], (long long)v[6],
                 (long long)v[7], (long long)v[8], (long long)v[9], (long long)v[10], v[11] ? " +b" : "");
    else
        snprintf(buf, n, "N%lld %lldx%lldx%lld->%lld k%lldx%lld s%lld p%lld%s", (long long)v[0], (long long)v[1],
                 (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5], (long long)v[6], (long long)v[7],
                 (long long)v[9], v[11] ? " +b" : "");
}

qs_operand gemm_op(const bo_case *c, const bo_side *s, int i, qs_dtype dt, int t) {
    return (qs_operand){bo_at(c, s, i), dt, bo_at(c, s, i + 1), false, t >= 0 ? bo_at(c, s, t) : NULL};
}

/* ------------------------------------------------------------------------ op calls */

qs_status gemm_plan_dt(bo_case *c, bo_side *s, qs_dtype y_dt, int slot) {
    if (KIND(c) == GEMM_LINEAR) {
        qs_linear_desc d = c->d.lin;
        d.prec = bo_prec(c, s);
        d.y_dt = d.dx_dt = y_dt;
        return s->be->ops->linear_plan(s->be, &d, &s->plan[slot], &s->wsb[slot]);
    }
    qs_conv_desc d = c->d.conv;
    d.prec = bo_prec(c, s);
    d.y_dt = d.dx_dt = y_dt;
    return s->be->ops->conv_plan(s->be, &d, &s->plan[slot], &s->wsb[slot]);
}

qs_status gemm_fwd(bo_case *c, bo_side *s, int slot, void *y) {
    const qs_dtype fdt = qs_precision_operand_dtype(c->prec, false);
    const qs_operand x = gemm_op(c, s, G_X, fdt, -1), w = gemm_op(c, s, G_W, fdt, -1);
    const qs_backend_ops *o = s->be->ops;
    return (KIND(c) == GEMM_LINEAR ? o->linear_forward : o->conv_forward)(s->be, s->plan[slot], s->st, &x, &w,
                                                                          BO_F(G_B), y, s->ws[slot]);
}

qs_status gemm_bwd_data(bo_case *c, bo_side *s, int slot, const qs_operand *dy, const qs_operand *w, void *dx,
                        bool acc) {
    const qs_backend_ops *o = s->be->ops;
    return (KIND(c) == GEMM_LINEAR ? o->linear_backward_data : o->conv_backward_data)(s->be, s->plan[slot], s->st, dy,
                                                                                      w, dx, acc, s->ws[slot]);
}

qs_status gemm_bwd_weights(bo_case *c, bo_side *s, const qs_operand *dy, const qs_operand *x, float *dw, float *db) {
    const qs_backend_ops *o = s->be->ops;
    return (KIND(c) == GEMM_LINEAR ? o->linear_backward_weights : o->conv_backward_weights)(s->be, s->plan[0], s->st,
                                                                                            dy, x, dw, db, s->ws[0]);
}

/* ------------------------------------------------------------------------- the ops */

/* What a GEMM op computes (bo_op.variant). */
enum { FWD, BWD_DATA, BWD_DATA_ACC, BWD_WEIGHTS, DATA_T };

/* A host (rows, cols) byte matrix transposed, as input tensor i. */
static void transposed_input(bo_case *c, int i, const char *name, const void *host, int64_t rows, int64_t cols) {
    const uint8_t *h = host;
    uint8_t *t = halloc((size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) t[k * rows + r] = h[r * cols + k];
    bo_in(c, i, name, t, (size_t)(rows * cols));
}

/* The operands (seeded as the shape and precision say), the bias and the op's outputs. */
static void gemm_inputs(bo_case *c, gemm_kind kind) {
    const gemm_dims g = gemm_setup(c, kind, "linear", "conv", 0);
    const int64_t *n = c->n, nx = g.nx, nw = g.nw, ny = g.ny, nb = g.nb;
    const float *x = rnd(nx, g.lin ? -2 : -1, g.lin ? 2 : 1), *w = rnd(nw, -0.5f, 0.5f), *dy = rnd(ny, -1, 1);
    const float *dx0 = rnd(nx, -1, 1), *b = g.bias ? rnd(nb, -1, 1) : NULL;
    const qs_sr sr = {.key = qs_rng_key(5, g.lin ? "linear_dy" : "conv_dy", (uint64_t)c->prec), .counter = 3, .offset = 0};
    void *qx = bo_quantized(c, G_X, "x", x, n[0], n[1], g.fdt, NULL), *qw = bo_quantized(c, G_W, "w", w, n[2], n[3], g.fdt, NULL);
    void *qdy = bo_quantized(c, G_DY, "dy", dy, n[4], n[5], g.gdt, &sr);
    if (b) bo_in(c, G_B, "b", b, (size_t)nb * 4);
    else bo_none(c, G_B, "b");
    const double *f = c->f;
    switch (c->op->variant) {
    case FWD: bo_out(c, G_Y, "y", ny, 4, BO_ROW, f[0]); break;
    case BWD_DATA: bo_out(c, G_DX, "dx", nx, 4, BO_ROW, f[1]); break;
    case BWD_DATA_ACC: bo_inout(c, G_DX, "dx accumulated", dx0, nx, 4, BO_ROW, f[1] + 1); break;
    case BWD_WEIGHTS: /* db only with an FP32 dY (else NULL, per the contract) */
        bo_out(c, G_DW, "dw", nw, 4, BO_ROW, f[2]);
        if (g.bias && g.gdt == QS_F32) bo_out(c, G_DB, "db", nb, 4, BO_ROW, f[2]);
        else bo_none(c, G_DB, "db");
        break;
    case DATA_T: /* FP8: the products reading transposed copies give the bits of the same without */
        transposed_input(c, G_XT, "x_t", qx, n[0], n[1]);
        transposed_input(c, G_WT, "w_t", qw, n[2], n[3]);
        transposed_input(c, G_DYT, "dy_t", qdy, n[4], n[5]);
        bo_out(c, G_DX, "bwd_data", nx, 4, BO_NOCMP, f[1]);
        bo_out(c, G_DX2, "bwd_data from data_t", nx, 4, BO_NOCMP, 0);
        bo_out(c, G_DW, "bwd_weights", nw, 4, BO_NOCMP, f[2]);
        bo_out(c, G_DW2, "bwd_weights from data_t", nw, 4, BO_NOCMP, 0);
        break;
    }
}

static void linear_inputs(bo_case *c) { gemm_inputs(c, GEMM_LINEAR); }
static void conv_inputs(bo_case *c) { gemm_inputs(c, GEMM_CONV); }

static qs_status gemm_plan(bo_case *c, bo_side *s) { return gemm_plan_dt(c, s, QS_F32, 0); }

static qs_status gemm_exec(bo_case *c, bo_side *s) {
    const qs_precision p = c->prec;
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    const qs_operand x = gemm_op(c, s, G_X, fdt, -1), w = gemm_op(c, s, G_W, fdt, -1), dy = gemm_op(c, s, G_DY, gdt, -1);
    switch (c->op->variant) {
    case FWD: return gemm_fwd(c, s, 0, BO_F(G_Y));
    case BWD_DATA: return gemm_bwd_data(c, s, 0, &dy, &w, BO_F(G_DX), false);
    case BWD_DATA_ACC: return gemm_bwd_data(c, s, 0, &dy, &w, BO_F(G_DX), true);
    case BWD_WEIGHTS: return gemm_bwd_weights(c, s, &dy, &x, BO_F(G_DW), BO_F(G_DB));
    default: {
        const qs_operand tx = gemm_op(c, s, G_X, fdt, G_XT), tw = gemm_op(c, s, G_W, fdt, G_WT);
        const qs_operand tdy = gemm_op(c, s, G_DY, gdt, G_DYT);
        QS_TRY(gemm_bwd_data(c, s, 0, &dy, &w, BO_F(G_DX), false));
        QS_TRY(gemm_bwd_data(c, s, 0, &tdy, &tw, BO_F(G_DX2), false));
        QS_TRY(gemm_bwd_weights(c, s, &dy, &x, BO_F(G_DW), NULL));
        return gemm_bwd_weights(c, s, &tdy, &tx, BO_F(G_DW2), NULL);
    }
    }
}

/* DATA_T: the DUT's results from transposed copies against its own from the plain operands, and
 * those against the reference (so that two unwritten outputs cannot agree). */
static void data_t_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    const int out[2] = {G_DX, G_DW};
    for (int k = 0; k < 2; k++) {
        const float *got = bo_fetch(c, dut, out[k]);
        if (got)
            check_nmse(bo_what(c, c->t[out[k]].name), got, bo_at(c, ref, out[k]), (int64_t)(c->t[out[k]].bytes / 4),
                       gemm_linear_nmse(c, out[k]).value);
    }
    same_elems(bo_what(c, "bwd_data from data_t = without"), bo_at(c, dut, G_DX2), bo_at(c, dut, G_DX),
               (int64_t)(c->t[G_DX].bytes / 4), 4);
    same_elems(bo_what(c, "bwd_weights from data_t = without"), bo_at(c, dut, G_DW2), bo_at(c, dut, G_DW),
               (int64_t)(c->t[G_DW].bytes / 4), 4);
}

static double gemm_flops(const bo_case *c) { return c->f[3] * (c->op->variant == DATA_T ? 4 : 1); }

#define NEED_LINEAR BO_NEED(linear_plan), BO_NEED(linear_forward), BO_NEED(linear_backward_data), BO_NEED(linear_backward_weights)
#define NEED_CONV BO_NEED(conv_plan), BO_NEED(conv_forward), BO_NEED(conv_backward_data), BO_NEED(conv_backward_weights)
#define LINEAR_OP(nm, var, ...)                                                                                 \
    {.name = nm, .variant = var, .seed_key = 20261202, .describe = gemm_describe_linear, .inputs = linear_inputs, \
     .plan = gemm_plan, .exec = gemm_exec, .flops = gemm_flops, .need = {NEED_LINEAR}, __VA_ARGS__}
#define CONV_OP(nm, var, ...)                                                                                 \
    {.name = nm, .variant = var, .seed_key = 20261202, .describe = gemm_describe_conv, .inputs = conv_inputs, \
     .plan = gemm_plan, .exec = gemm_exec, .flops = gemm_flops, .need = {NEED_CONV}, __VA_ARGS__}

static const bo_op bo_linear_forward = LINEAR_OP("linear_forward", FWD);
static const bo_op bo_linear_backward_data = LINEAR_OP("linear_backward_data", BWD_DATA);
static const bo_op bo_linear_backward_data_acc = LINEAR_OP("linear_backward_data_acc", BWD_DATA_ACC);
static const bo_op bo_linear_backward_weights = LINEAR_OP("linear_backward_weights", BWD_WEIGHTS);
static const bo_op bo_linear_data_t = LINEAR_OP("linear_data_t", DATA_T, .judge = data_t_judge);
static const bo_op bo_conv_forward = CONV_OP("conv_forward", FWD);
static const bo_op bo_conv_backward_data = CONV_OP("conv_backward_data", BWD_DATA);
static const bo_op bo_conv_backward_data_acc = CONV_OP("conv_backward_data_acc", BWD_DATA_ACC);
static const bo_op bo_conv_backward_weights = CONV_OP("conv_backward_weights", BWD_WEIGHTS);

/* FP32 Linear with a NaN in input row 1 and an Inf in weight row 4: the DUT must give the same
 * non-finite pattern (NaN row, ±Inf column) and match elsewhere. */
static void linear_nonfinite_inputs(bo_case *c) {
    gemm_geometry(c, GEMM_LINEAR);
    const int64_t M = c->n[0], K = c->n[1], N = c->n[2];
    bo_seed(c, "linear_nonfinite", 0);
    float *x = rnd(M * K, 0.5f, 1.5f), *w = rnd(N * K, -1, 1), *b = rnd(N, -1, 1);
    x[1 * K + 3] = NAN;
    w[4 * K + 5] = INFINITY;
    bo_in(c, G_X, "x", x, (size_t)(M * K) * 4);
    bo_none(c, G_XS, "scale");
    bo_in(c, G_W, "w", w, (size_t)(N * K) * 4);
    bo_none(c, G_WS, "scale");
    bo_in(c, G_B, "b", b, (size_t)N * 4);
    bo_out(c, G_Y, "y (NaN in x row 1, +Inf in w row 4)", M * N, 4, BO_ROW, (double)K);
}

/* ---------------------------------------------------------------------- FP64 rows */

/* The CPU's forward y against Σ x·w + b in double over the dequantized operands. */
static void gemm_forward_fp64(bo_case *c) {
    const int64_t *n = c->n;
    const int64_t ny = n[4] * n[5];
    if ((double)ny * c->f[0] > 3e7) return; /* cheap rows only */
    const qs_dtype fdt = qs_precision_operand_dtype(cpu_prec(c->prec), false);
    const float *x = bo_dequantized(c, G_X, n[0] * n[1], fdt), *w = bo_dequantized(c, G_W, n[2] * n[3], fdt);
    const float *b = c->t[G_B].null ? NULL : c->t[G_B].at[0];
    double *ref = halloc((size_t)ny * sizeof(double));
    if (KIND(c) == GEMM_LINEAR) {
        const int64_t M = n[0], K = n[1], N = n[2];
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                double s = b ? b[j] : 0.0;
                for (int64_t k = 0; k < K; k++) s += (double)x[m * K + k] * w[j * K + k];
                ref[m * N + j] = s;
            }
    } else {
        const qs_conv_desc *d = &c->d.conv;
        for (int64_t i = 0; i < ny; i++) {
            const int64_t k = i % d->K, q = (i / d->K) % d->Q, pp = (i / (d->K * d->Q)) % d->P, nn = i / (d->K * d->Q * d->P);
            double s = b ? b[k] : 0.0;
            for (int64_t r = 0; r < d->R; r++)
                for (int64_t t = 0; t < d->S; t++) {
                    const int64_t h = pp * d->stride_h - d->pad_h + r, ww = q * d->stride_w - d->pad_w + t;
                    if (h < 0 || h >= d->H || ww < 0 || ww >= d->W) continue;
                    for (int64_t ch = 0; ch < d->C; ch++)
                        s += (double)x[((nn * d->H + h) * d->W + ww) * d->C + ch] * w[((k * d->C + ch) * d->R + r) * d->S + t];
                }
            ref[i] = s;
        }
    }
    check_fp64(bo_what(c, "cpu y vs fp64"), c->t[G_Y].at[0], ref, ny, c->f[0] + 2, -1);
}

/* ---------------------------------------------------------------------------- rows */

/* Linear v = {M, N, K, bias} */
static const int64_t k_lin[][BO_V] = {
    {3, 5, 7, 1},        /* small and odd: no dimension a multiple of 16 */
    {1, 17, 33, 1},      /* batch 1 */
    {8, 10, 120, 0},     /* batch 8, no bias */
    {8, 64, 784, 1},     /* an MLP's first layer on 28×28 inputs */
    {37, 29, 53, 1},     /* odd everywhere, a bit larger */
    {256, 512, 1024, 1}, /* large: tensor-core tiles, split-K candidates */
};
/* the CPU backend's: the large shape smaller (the CPU-vs-CPU run stays quick under sanitizers) */
static const int64_t k_lin_cpu[][BO_V] = {{3, 5, 7, 1}, {1, 17, 33, 1}, {8, 10, 120, 0},
                                          {8, 64, 784, 1}, {37, 29, 53, 1}, {64, 128, 256, 1}};
static const int64_t k_lin_nonfinite[][BO_V] = {{4, 6, 9, 1}};

/* Conv2d v = {N, H, W, C, K, R, S, stride_h, stride_w, pad_h, pad_w, bias} */
static const int64_t k_conv[][BO_V] = {
    {1, 28, 28, 1, 8, 5, 5, 1, 1, 2, 2, 1},    /* 1 -> 8 channels 5x5 pad 2 on 28x28, batch 1 */
    {8, 28, 28, 1, 8, 5, 5, 1, 1, 2, 2, 1},    /* the same, batch 8 */
    {8, 15, 15, 16, 32, 3, 3, 2, 2, 1, 1, 1},  /* 16 -> 32 3x3 stride 2, odd input */
    {8, 7, 7, 32, 16, 1, 1, 1, 1, 0, 0, 0},    /* 1x1 */
    {1, 7, 9, 3, 5, 3, 3, 1, 1, 1, 1, 1},      /* small and odd */
    {2, 11, 8, 5, 7, 3, 2, 2, 1, 1, 0, 1},     /* non-square kernel, mixed stride */
    {8, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, 0},  /* larger: 64 -> 64 3x3 */
};

const bo_row bo_rows_gemm[] = {
    {&bo_linear_forward, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_lin), BO_CPU_SHAPES(k_lin_cpu),
     .budget = gemm_linear_nmse, .fp64 = gemm_forward_fp64},
    {&bo_linear_backward_data, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_lin), BO_CPU_SHAPES(k_lin_cpu),
     .budget = gemm_linear_nmse},
    {&bo_linear_backward_data_acc, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_lin), BO_CPU_SHAPES(k_lin_cpu),
     .budget = gemm_linear_nmse},
    {&bo_linear_backward_weights, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_lin), BO_CPU_SHAPES(k_lin_cpu),
     .budget = gemm_linear_nmse},
    {&bo_linear_data_t, BO_P(FP8), BO_SHAPES(k_lin), BO_CPU_SHAPES(k_lin_cpu), .budget = bo_bits},
    {&bo_linear_forward, BO_P(FP32), BO_SHAPES(k_lin_nonfinite), .inputs = linear_nonfinite_inputs,
     .budget = gemm_linear_nmse, .variant = "nonfinite"},
    {&bo_conv_forward, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_conv),
     .budget = gemm_conv_nmse, .fp64 = gemm_forward_fp64},
    {&bo_conv_backward_data, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_conv),
     .budget = gemm_conv_nmse},
    {&bo_conv_backward_data_acc, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_conv),
     .budget = gemm_conv_nmse},
    {&bo_conv_backward_weights, BO_GEMM_PRECS | BO_P(INT8), BO_SHAPES(k_conv),
     .budget = gemm_conv_nmse},
    {0},
};
