/* tests/backend_ops/ops_gemm_bf16.c — defines: the GEMM-like ops with a BF16 output (qs_linear_desc
 * / qs_conv_desc y_dt, dx_dt = BF16): Linear and Conv2d forward and backward-data, their rows,
 * and how they are judged.
 *
 * A forward (backward-data) planned with y_dt (dx_dt) BF16 — backend.h: the FP32 result, bias
 * included, rounded to nearest even; a 16-bit-output engine may round its own sums — runs next to
 * the same side's plan with F32 outputs, on the same operands, and is judged twice:
 *  (1) against that FP32 y rounded to nearest even on the host (qs_f32_to_bf16), element by
 *      element (check_bf16_y). Where both plans run the same arithmetic they agree bit for bit:
 *      the epilogue paths round the very FP32 values the F32 plan writes, and a conv's 16-bit
 *      engine is the one the F32 plan widens (paths are chosen independently of y_dt unless
 *      QS_CUDNN_BENCHMARK=1). They may differ where the BF16 output comes from another kernel
 *      than the F32 one — the Linear's cuBLASLt product with a BF16 D (its own algorithm), or
 *      benchmark mode picking another conv path — whose FP32 sums are the same exact products
 *      added in another order: two such sums s1, s2 differ by a few FP32 ulps, far less than a
 *      BF16 ulp, and RNE is monotone, so rne(s1) and rne(s2) are equal or adjacent BF16 values.
 *      Tolerance: at most ONE BF16 ulp (adjacent values: a distance of 1 between the bit
 *      patterns read as a monotone integer, across binades and zero). The one exception is an
 *      element whose sum cancels to near zero, where the FP32 sums' own difference (absolute,
 *      set by the tensor's scale: check.h) can exceed a BF16 ulp of the tiny result: such an
 *      element also passes when |got − want| ≤ atol = rtol·max|want|, rtol = 4·u·sqrt(4·K)
 *      (check.h's budget of a K-term FP32 reduction, doubled for two implementations). And
 *      since the two rounding orders disagree only for sums within a few FP32 ulps of a BF16
 *      rounding boundary (a fraction ~2^8·u·sqrt(K) ≈ 5e-4 at K = 1024), at most 1 + n/100
 *      elements may differ at all: a wrong rounding (truncation: half the elements off by one
 *      ulp) fails that even though each element is within one ulp.
 *  (2) against the reference's FP32 output as an NMSE, within the plan's FP32-output budget
 *      (gemm_budget) plus one more BF16 rounding of the output, O = 2^-14/12 (relative error²
 *      of one RNE to 8 significant bits, ops_gemm.c (e)), with the same MARGIN 10.
 * A BF16 dx that accumulates must be refused (QS_ERR_INVALID_ARG). */
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
#include "gemm.h"
#include "gpu_harness.h"
#include "graph_helpers.h"

/* (2) above: the budget of a BF16 output widened, against the reference's FP32 one. */
static bo_rule bf16_out_budget(const bo_case *c, int i) {
    const gemm_kind kind = (gemm_kind)c->n[6];
    return (bo_rule){BO_NMSE, gemm_budget(kind, c->prec, c->t[i].K) + 10.0 * 0x1p-14 / 12.0, 0};
}

/* BF16 bits as a monotone integer: adjacent BF16 values differ by 1 (+0 and -0 coincide). */
static int32_t bf16_ord(uint16_t h) {
    return (h & 0x8000u) ? 0x8000 - (int32_t)(h & 0x7fffu) : 0x8000 + (int32_t)h;
}
static bool bf16_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }
static double bf16_val(uint16_t h) { return (double)bitsf((uint32_t)h << 16); }

/* (1) above: got, want n BF16 values of outputs with reduction length K. */
static bool check_bf16_y(const char *what, const uint16_t *got, const uint16_t *want, int64_t n, double K) {
    double maxw = 0;
    for (int64_t i = 0; i < n; i++)
        if (!bf16_nan(want[i])) maxw = fmax(maxw, fabs(bf16_val(want[i])));
    const double atol = qs_tol_fp32(4.0 * K, -1.0).rtol * maxw;
    const int64_t max_unequal = 1 + n / 100;
    int64_t unequal = 0, one_ulp = 0, by_atol = 0, bad = 0, first = -1;
    int32_t max_ulps = 0;
    for (int64_t i = 0; i < n; i++) {
        if (bf16_nan(got[i]) && bf16_nan(want[i])) continue;
        if (!bf16_nan(got[i]) && !bf16_nan(want[i]) && bf16_ord(got[i]) == bf16_ord(want[i])) continue; /* ±0 too */
        unequal++;
        const int32_t d = bf16_nan(got[i]) || bf16_nan(want[i]) ? INT32_MAX : abs(bf16_ord(got[i]) - bf16_ord(want[i]));
        if (d > max_ulps) max_ulps = d;
        if (d <= 1) {
            one_ulp++;
        } else if (d != INT32_MAX && fabs(bf16_val(got[i]) - bf16_val(want[i])) <= atol) {
            by_atol++;
        } else {
            if (first < 0) first = i;
            bad++;
        }
    }
    const bool pass = bad == 0 && unequal <= max_unequal;
    char detail[300];
    int len = snprintf(detail, sizeof detail, "unequal %lld of %lld (limit %lld): %lld by 1 ulp, %lld within atol %.2e",
                       (long long)unequal, (long long)n, (long long)max_unequal, (long long)one_ulp, (long long)by_atol,
                       atol);
    if (bad)
        snprintf(detail + len, sizeof detail - (size_t)len,
                 " — %lld beyond, first [%lld]: dut 0x%04x want 0x%04x; largest distance %d ulps", (long long)bad,
                 (long long)first, got[first], want[first], (int)max_ulps);
    return check_figure(what, "bf16_unequal", bad ? (double)INFINITY : (double)unequal, (double)max_unequal, pass,
                        detail);
}

/* Tensor slots of the y16 rows: the F32 and the BF16 output of one direction. */
enum { FWD16, BWD16 };

/* Operands seeded as the BF16-output rows always were; the two outputs of the direction. */
static void y16_inputs(bo_case *c, gemm_kind kind) {
    const int64_t *v = c->v;
    const bool bias = kind == GEMM_LINEAR ? v[3] != 0 : v[11] != 0;
    const gemm_dims g = gemm_setup(c, kind, "linear_y16", "conv_y16", bias);
    const int64_t *n = c->n;
    const float *x = rnd(g.nx, g.lin ? -2 : -1, g.lin ? 2 : 1), *w = rnd(g.nw, -0.5f, 0.5f);
    const float *b = g.bias ? rnd(g.nb, -1, 1) : NULL;
    bo_quantized(c, G_X, "x", x, n[0], n[1], g.fdt, NULL);
    bo_quantized(c, G_W, "w", w, n[2], n[3], g.fdt, NULL);
    if (b) bo_in(c, G_B, "b", b, (size_t)g.nb * 4);
    else bo_none(c, G_B, "b");
    bo_quantized(c, G_DY, "dy", rnd(g.ny, -1, 1), n[4], n[5], g.gdt, NULL);
    const int64_t nx = g.nx, ny = g.ny;
    if (c->op->variant == FWD16) {
        bo_out(c, G_Y, "y f32", ny, 4, BO_NOCMP, c->f[0]);
        bo_out(c, G_Y16, "y bf16", ny, 2, BO_NOCMP, c->f[0]);
    } else {
        bo_out(c, G_DX, "dx f32", nx, 4, BO_NOCMP, c->f[1]);
        bo_out(c, G_DX16, "dx bf16", nx, 2, BO_NOCMP, c->f[1]);
    }
}
static void linear_y16_inputs(bo_case *c) { y16_inputs(c, GEMM_LINEAR); }
static void conv_y16_inputs(bo_case *c) { y16_inputs(c, GEMM_CONV); }

/* Plan 0 with F32 outputs, plan 1 with BF16 ones. */
static qs_status y16_plan(bo_case *c, bo_side *s) {
    QS_TRY(gemm_plan_dt(c, s, QS_F32, 0));
    return gemm_plan_dt(c, s, QS_BF16, 1);
}

static qs_status y16_exec(bo_case *c, bo_side *s) {
    if (c->op->variant == FWD16) {
        QS_TRY(gemm_fwd(c, s, 0, BO_F(G_Y)));
        return gemm_fwd(c, s, 1, bo_at(c, s, G_Y16));
    }
    const qs_operand w = gemm_op(c, s, G_W, qs_precision_operand_dtype(c->prec, false), -1);
    const qs_operand dy = gemm_op(c, s, G_DY, qs_precision_operand_dtype(c->prec, true), -1);
    QS_TRY(gemm_bwd_data(c, s, 0, &dy, &w, BO_F(G_DX), false));
    return gemm_bwd_data(c, s, 1, &dy, &w, bo_at(c, s, G_DX16), false);
}

/* (1) and (2) on the DUT's outputs; backward-data also: accumulating into a BF16 dx is refused. */
static void y16_judge(bo_case *c, bo_side *ref, bo_side *dut) {
    const bool fwd = c->op->variant == FWD16;
    const int i32 = fwd ? G_Y : G_DX, i16 = fwd ? G_Y16 : G_DX16;
    const int64_t n = (int64_t)(c->t[i32].bytes / 4);
    /* the log shows the path: a direct BF16 output needs no staging, an epilogue path one of y's size */
    printf("  info %-72s workspace: f32-output plan %zu B, bf16-output plan %zu B\n", c->name, dut->wsb[0], dut->wsb[1]);
    const float *y32 = bo_fetch(c, dut, i32);
    const uint16_t *y16 = bo_fetch(c, dut, i16);
    if (y32 && y16) {
        uint16_t *want = halloc((size_t)n * 2);
        float *wide = hf(n);
        ASSERT_OK(qs_f32_to_bf16(n, y32, want, NULL));
        check_bf16_y(bo_what(c, "bf16 = rne(f32)"), y16, want, n, c->t[i32].K);
        ASSERT_OK(qs_bf16_to_f32(n, y16, wide));
        check_nmse(bo_what(c, "bf16 vs reference"), wide, bo_at(c, ref, i32), n, c->row->budget(c, i32).value);
    }
    if (fwd) return;
    const qs_operand w = gemm_op(c, dut, G_W, qs_precision_operand_dtype(c->prec, false), -1);
    const qs_operand dy = gemm_op(c, dut, G_DY, qs_precision_operand_dtype(c->prec, true), -1);
    qs_error_clear();
    const qs_status st = gemm_bwd_data(c, dut, 1, &dy, &w, bo_at(c, dut, G_DX16), true);
    check_fact(bo_what(c, "bf16 dx accumulate refused"), st == QS_ERR_INVALID_ARG, qs_last_error());
    qs_error_clear();
}

static double y16_flops(const bo_case *c) { return 2.0 * c->f[3]; }

#define Y16_OP(nm, var, desc, in, ...)                                                                         \
    {.name = nm, .variant = var, .seed_key = 20261202, .describe = desc, .inputs = in, .plan = y16_plan,      \
     .exec = y16_exec, .judge = y16_judge, .flops = y16_flops, __VA_ARGS__}
static const bo_op bo_linear_forward_y_bf16 = Y16_OP("linear_forward_y_bf16", FWD16, gemm_describe_linear,
                                                     linear_y16_inputs, .need = {BO_NEED(linear_forward)});
static const bo_op bo_linear_backward_data_dx_bf16 = Y16_OP(
    "linear_backward_data_dx_bf16", BWD16, gemm_describe_linear, linear_y16_inputs, .need = {BO_NEED(linear_backward_data)});
static const bo_op bo_conv_forward_y_bf16 = Y16_OP("conv_forward_y_bf16", FWD16, gemm_describe_conv, conv_y16_inputs,
                                                   .need = {BO_NEED(conv_forward)});
static const bo_op bo_conv_backward_data_dx_bf16 = Y16_OP("conv_backward_data_dx_bf16", BWD16, gemm_describe_conv,
                                                          conv_y16_inputs, .need = {BO_NEED(conv_backward_data)});

/* Linear v = {M, N, K, bias}. At BF16 without a bias cuBLASLt writes a BF16 D (where it has an
 * algorithm for the shape); with a bias, at FP8, and at FP32 and FP16 (whose inputs cuBLASLt
 * pairs with no BF16 D: the plan falls back by itself) an FP32 product is rounded into y. */
static const int64_t k_lin16[][BO_V] = {
    {3, 5, 7, 0},        /* small and odd */
    {37, 29, 53, 1},     /* odd, with a bias */
    {8, 64, 784, 0},     /* an MLP's first layer */
    {256, 512, 1024, 0}, /* large: tensor-core tiles */
    {256, 512, 1024, 1},
};
static const int64_t k_lin16_fallback[][BO_V] = {{3, 5, 7, 0}, {256, 512, 1024, 0}};
/* the CPU backend's: the large shapes smaller */
static const int64_t k_lin16_cpu[][BO_V] = {{3, 5, 7, 0}, {37, 29, 53, 1}, {8, 64, 784, 0}, {64, 128, 256, 0},
                                            {64, 128, 256, 1}};
static const int64_t k_lin16_fallback_cpu[][BO_V] = {{3, 5, 7, 0}, {64, 128, 256, 0}};

/* Conv2d v = {N, H, W, C, K, R, S, sh, sw, ph, pw, bias}. At BF16 without a bias cuDNN's 16-bit
 * engine writes y itself (a 3x3, a strided 3x3; a single-channel input, which may have no such
 * engine and take the FP32 paths); with a bias, and at FP32, TF32 and FP8, the epilogue rounds
 * the result into y. */
static const int64_t k_conv16_direct[][BO_V] = {
    {8, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, 0}, /* 64 -> 64 3x3 */
    {8, 15, 15, 16, 32, 3, 3, 2, 2, 1, 1, 0}, /* 16 -> 32 3x3 stride 2, odd input */
    {8, 28, 28, 1, 8, 5, 5, 1, 1, 2, 2, 0},   /* 1 -> 8 channels 5x5 */
};
static const int64_t k_conv16_bias[][BO_V] = {{8, 15, 15, 16, 32, 3, 3, 2, 2, 1, 1, 1}};
static const int64_t k_conv16_epilogue[][BO_V] = {
    {8, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, 0},
    {8, 15, 15, 16, 32, 3, 3, 2, 2, 1, 1, 1}, /* with a bias */
};

const bo_row bo_rows_gemm_bf16[] = {
    {&bo_linear_forward_y_bf16, BO_P(BF16) | BO_P(FP8), BO_SHAPES(k_lin16), BO_CPU_SHAPES(k_lin16_cpu),
     .budget = bf16_out_budget},
    {&bo_linear_forward_y_bf16, BO_P(FP32) | BO_P(FP16), BO_SHAPES(k_lin16_fallback), BO_CPU_SHAPES(k_lin16_fallback_cpu),
     .budget = bf16_out_budget},
    {&bo_linear_backward_data_dx_bf16, BO_P(BF16) | BO_P(FP8), BO_SHAPES(k_lin16), BO_CPU_SHAPES(k_lin16_cpu),
     .budget = bf16_out_budget},
    {&bo_linear_backward_data_dx_bf16, BO_P(FP32) | BO_P(FP16), BO_SHAPES(k_lin16_fallback), BO_CPU_SHAPES(k_lin16_fallback_cpu),
     .budget = bf16_out_budget},
    {&bo_conv_forward_y_bf16, BO_P(BF16), BO_SHAPES(k_conv16_direct), .budget = bf16_out_budget},
    {&bo_conv_forward_y_bf16, BO_P(BF16), BO_SHAPES(k_conv16_bias),
     .budget = bf16_out_budget, .variant = "bias"},
    {&bo_conv_forward_y_bf16, BO_P(FP32) | BO_P(TF32) | BO_P(FP8), BO_SHAPES(k_conv16_epilogue),
     .budget = bf16_out_budget},
    {&bo_conv_backward_data_dx_bf16, BO_P(BF16), BO_SHAPES(k_conv16_direct), .budget = bf16_out_budget},
    {&bo_conv_backward_data_dx_bf16, BO_P(BF16), BO_SHAPES(k_conv16_bias), .budget = bf16_out_budget, .variant = "bias"},
    {&bo_conv_backward_data_dx_bf16, BO_P(FP32) | BO_P(TF32) | BO_P(FP8), BO_SHAPES(k_conv16_epilogue),
     .budget = bf16_out_budget},
    {0},
};
