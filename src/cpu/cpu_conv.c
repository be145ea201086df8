/* src/cpu/cpu_conv.c — 2-D convolution on oneDNN, every CPU precision.
 *
 * Activations NHWC: X (N,H,W,C), Y (N,P,Q,K); weights stay in the caller's PyTorch OIHW
 * layout (K,C,R,S). Convolution primitives pick their own weight layout (format_tag_any);
 * the plan holds cached reorder primitives OIHW → that layout (forward, backward-data) and
 * back (backward-weights) that run on every call into the caller's workspace (the weights
 * change every step, so nothing is cached across calls).
 *
 * Per precision and direction (the plan's "recipe"; qs_cpu_conv_impl_name reports it):
 *   FP32  f32 convolution primitives in all three directions; the bias is fused in forward
 *         and its gradient in backward-weights. bench/bench_conv_choice.c measured oneDNN
 *         convolution against im2col + matmul: oneDNN is 1.1–9× faster in every direction
 *         and shape, except backward-data of a 1-input-channel first layer, which training
 *         never runs; so there is no im2col path.
 *   BF16  bf16 src/weights/diff_dst with f32 dst / diff_src / diff_weights (AMX or
 *         AVX512-BF16 kernels where the CPU has them), f32 bias fused in forward. oneDNN's
 *         bf16 backward-weights kernel is slow on small images (2–4× slower than its FP32
 *         one at 7×7 and 4×4 outputs, with or without AMX), so for P·Q ≤ 64 backward-
 *         weights runs as the bf16 forward convolution with N and C swapped (see INT8
 *         below; one chunk, FP32 accumulation), or for 1×1 kernels as FP32 on the widened
 *         bf16 values. Both keep BF16's numerics: exact bf16 products summed in FP32.
 *   INT8  (int32 accumulation, exact; s_x·s_w, s_dy·s_w, s_dy·s_x applied afterwards)
 *         forward: s8·s8 convolution to an f32 dst without output scales (oneDNN 2.6 int8
 *           convolution has no runtime scales). s_x·s_w (per output channel for per_row
 *           weights) and the bias are applied by binary post-ops (multiply, add) whose
 *           per-channel vectors are execution arguments, where oneDNN keeps the same kernel
 *           with them (its brgemm/AMX and VNNI convolutions; this saves qs_cpu_epilogue's
 *           pass over Y, up to 20% of the op), else by that epilogue. For C == 1 with a kernel of ≥ 16 taps (the
 *           5×5 first layer of the cnn on grey images) oneDNN's only int8 kernel is a VNNI
 *           one ≈1.3× slower than widening the int8 codes to f32 and running the FP32
 *           primitive (+ epilogue); C·R·S·127² < 2^24 keeps every partial sum an exact
 *           integer, so that result is bit-identical. (For a 3×3 C == 1 layer the s8 kernel
 *           with fused scale wins, 0.34 vs 0.48 ms.)
 *         backward-data: s8 deconvolution of dY with the same weights (a deconvolution
 *           forward is a convolution's backward-data; OIHW (K,C,R,S) read as deconvolution
 *           weights (C,K,R,S) through strides) + epilogue. oneDNN's own int8 backward-data
 *           is a gemm fallback 10–30× slower. For strided 1×1 kernels without padding (the
 *           ResNet downsample) the deconvolution is 2–2.5× slower than the s8 matmul
 *           dY (N·P·Q,K) · W (K,C) whose rows the epilogue scatters into dX, so that runs.
 *         backward-weights: oneDNN 2.6 has none. For a general kernel, a forward s8
 *           convolution with N and C swapped: "batch" C, "channels" N, input X as
 *           (C,N,H,W) (one reorder into channels-last), "weights" dY as (K,N,P,Q) (one
 *           reorder into the kernel's blocked layout), dilation = stride − 1, output
 *           (C,K,R,S) transposed to OIHW by the epilogue. For 1×1 kernels without padding: the s8 matmul
 *           (X gathered at the strided positions)ᵀ · dY, reading Xᵀ through strides
 *           (oneDNN's gemm kernel; for this long reduction with a tiny output it beat
 *           both the swapped convolution and an AMX brgemm on a transposed copy 2–4×).
 *           The reduction runs over N·P·Q products; int32 is exact only up to
 *           2^31/127² = 133,144 of them, so it is split (over images for the swapped
 *           convolution, over rows for the matmul) into chunks of at most that many terms,
 *           whose f32 results are summed. (Measured exact with all operands at ±127 on
 *           AMX and AVX512-VNNI, even though s8 sources are shifted to u8 internally.) If
 *           one image alone has P·Q > 133,144 outputs, backward-weights is emulated.
 *         s8 or u8 sources: with s8 sources oneDNN's VNNI kernels need weights with a
 *         compensation term, computed by the weight reorder on every call (AMX multiplies
 *         s8·s8 directly: its blocked weights carry no compensation). The u8 alternative —
 *         shift X (dY) by +128 and subtract 128·Σw, which at padded borders depends on the
 *         position — measured 1.3–2× slower than s8 in forward and backward-data on the
 *         AMX host: the shift pass and border correction cost more than reordering the
 *         small weights, so s8 it is. Without VNNI/AMX oneDNN's int8 kernels are not exact
 *         (qs_dnnl_int8_exact), and INT8 runs emulated like FP16/FP8.
 *   FP16, FP8, and BF16/INT8 on CPUs without native kernels (emulated): operands widened
 *         to f32 values (qs_cpu_widen) in the workspace, then the FP32 primitives.
 *   Any INT8 primitive oneDNN cannot build for a shape falls back to emulation for that
 *   direction.
 * Bias gradient: fused in FP32 backward-weights (dY is F32); a low-precision dY requires
 * db == NULL (the layer sums its FP32 gradient; backend.h).
 * Output dtypes (y_dt, dx_dt): F32, or BF16 — every forward recipe computes its FP32 Y (bias
 * included) into the workspace, which is then rounded to nearest even into y
 * (qs_f32_to_bf16, the rounding of the straight-through cast it replaces); backward-data the
 * same for a BF16 dx.
 *
 * Workspace, per direction (each region 64-byte aligned; the plan reports the maximum):
 *   forward          [X f32 | W f32 (widened: emulated, INT8 C==1)][W in the primitive's layout]
 *                    [per-channel scales (INT8, fused)][scratchpad][FP32 Y (y_dt BF16)]
 *   backward_data    [dY f32 | W f32 (emulated)][W in the primitive's layout]
 *                    [dX f32 temp (accumulate; INT8 1×1 strided: the (N·P·Q, C) product)][scratchpad]
 *                    [FP32 dX (dx_dt BF16)]
 *   backward_weights FP32/BF16/emulated: [dY f32 | X f32 (emulated)][dW in the primitive's layout][scratchpad]
 *                    INT8 swapped: [X chunk (C,n,H,W) s8][dY chunk in weights layout][partial f32 (C·R·S,K)]
 *                                  [sum f32 (C·R·S,K)][scratchpad]
 *                    INT8 1×1:     [gathered X s8 (strided only)][partial f32 (C,K)][sum f32 (C,K)][scratchpad]
 * Measurements (2-core Xeon with AMX, batch 128, cnn and resnet18-w16 shapes):
 * docs/BENCHMARKS.md "Convolution at every CPU precision" (bench/bench_conv_prec.c). */
#include "cpu/cpu_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/numfmt.h"

#define QS_INT8_EXACT_TERMS 133144 /* floor(2^31 / 127^2) */

typedef enum conv_recipe {
    RCP_F32 = 0,    /* FP32 primitive; non-F32 operands widened to their values */
    RCP_BF16,       /* bf16 primitive, f32 output */
    RCP_S8,         /* forward: s8 convolution + epilogue */
    RCP_S8_AS_F32,  /* forward, C == 1: int8 codes widened to f32 (exact sums) + epilogue */
    RCP_S8_DECONV,  /* backward-data: s8 deconvolution + epilogue */
    RCP_S8_SWAPPED, /* backward-weights: s8 forward convolution with N and C swapped */
    RCP_BF16_SWAPPED, /* backward-weights: the same in bf16 (one chunk) */
    RCP_S8_GEMM     /* 1×1 pad 0 — backward-weights: s8 matmul Xᵀ·dY; backward-data (strided):
                     * s8 matmul dY·W, scattered into dX by the epilogue */
} conv_recipe;

enum { DIR_FWD = 0, DIR_BWD_DATA, DIR_BWD_WEIGHTS };

/* Weights in the primitive's layout plus the reorder that converts them (absent when the
 * primitive takes the user layout as is). */
typedef struct qs_cpu_wlayout {
    qs_dnnl_prim reorder;
    bool needed;
    size_t bytes;
} qs_cpu_wlayout;

/* One INT8 backward-weights chunk shape (the full one, and the shorter last one). */
typedef struct conv_chunk {
    qs_dnnl_prim prim;   /* swapped convolution or matmul */
    qs_dnnl_prim xt;     /* swapped: X images → (C, n, H', W') channels-last */
    qs_cpu_wlayout dyw;  /* swapped: dY images → the convolution's weights layout */
    int64_t len;         /* images (swapped) or rows (matmul) */
} conv_chunk;

/* Workspace regions of one direction (WS_Y: forward's FP32 Y when y_dt is BF16, backward-data's
 * FP32 dX when dx_dt is BF16). */
enum { WS_A = 0, WS_B, WS_L, WS_T, WS_S, WS_SCRATCH, WS_Y, WS_N };

typedef struct qs_cpu_conv_plan {
    qs_cpu_plan hdr;
    qs_conv_desc d;
    qs_dtype fdt, gdt;          /* operand storage dtypes: forward (X, W), gradient (dY) */
    conv_recipe rcp[3];
    bool fused_scale;           /* INT8 forward: scale and bias are post-ops of the primitive */
    qs_dnnl_prim fwd, bwd_data, bwd_weights;
    qs_cpu_wlayout w_fwd;       /* OIHW → forward weights layout */
    qs_cpu_wlayout w_bwd;       /* OIHW → backward-data (or deconvolution) weights layout */
    qs_cpu_wlayout dw_user;     /* backward-weights diff layout → OIHW (FP32/BF16) */
    conv_chunk chunk[2];        /* INT8 backward-weights */
    int64_t nchunks;
    int64_t pad_r[2];           /* right/bottom padding that makes the geometry exact (≤ pad; < 0: unread rows) */
    size_t off[3][WS_N];        /* region offsets per direction */
    size_t ws_bytes;
    char impl[3][160];
} qs_cpu_conv_plan_t;

void qs_cpu_conv_plan_destroy(void *plan) {
    qs_cpu_conv_plan_t *cp = plan;
    if (!cp) return;
    qs_dnnl_prim_destroy(&cp->fwd);
    qs_dnnl_prim_destroy(&cp->bwd_data);
    qs_dnnl_prim_destroy(&cp->bwd_weights);
    qs_dnnl_prim_destroy(&cp->w_fwd.reorder);
    qs_dnnl_prim_destroy(&cp->w_bwd.reorder);
    qs_dnnl_prim_destroy(&cp->dw_user.reorder);
    for (int i = 0; i < 2; i++) {
        qs_dnnl_prim_destroy(&cp->chunk[i].prim);
        qs_dnnl_prim_destroy(&cp->chunk[i].xt);
        qs_dnnl_prim_destroy(&cp->chunk[i].dyw.reorder);
    }
    free(cp);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* ws + off, NULL when there is no workspace (the plan then needs none). */
static void *ws_at(void *ws, size_t off) { return ws ? (char *)ws + off : NULL; }

static qs_dnnl_tensor tensor4(int64_t a, int64_t b, int64_t c, int64_t d, qs_dnnl_layout layout, qs_dtype dt) {
    return (qs_dnnl_tensor){.ndims = 4, .dims = {a, b, c, d}, .layout = layout, .dt = dt};
}
static qs_dnnl_tensor strided4(int64_t a, int64_t b, int64_t c, int64_t d, int64_t sa, int64_t sb, int64_t sc,
                               int64_t sd, qs_dtype dt) {
    return (qs_dnnl_tensor){.ndims = 4, .dims = {a, b, c, d}, .strides = {sa, sb, sc, sd},
                            .layout = QS_DNNL_STRIDED, .dt = dt};
}
static qs_dnnl_tensor mat(int64_t rows, int64_t cols, int64_t rs, int64_t cs, qs_dtype dt) {
    return (qs_dnnl_tensor){.ndims = 2, .dims = {rows, cols}, .strides = {rs, cs}, .layout = QS_DNNL_STRIDED,
                            .dt = dt};
}

/* Lay out one direction's regions (sizes in bytes, 0 = absent) and return its total. */
static size_t layout_regions(size_t off[WS_N], const size_t sz[WS_N]) {
    size_t o = 0;
    for (int i = 0; i < WS_N; i++) {
        off[i] = o;
        o += qs_cpu_align(sz[i]);
    }
    return o;
}

static const char *recipe_name(conv_recipe r) {
    switch (r) {
    case RCP_F32: return "f32";
    case RCP_BF16: return "bf16";
    case RCP_S8: return "s8 conv + epilogue";
    case RCP_S8_AS_F32: return "int8 codes as f32 (exact) + epilogue";
    case RCP_S8_DECONV: return "s8 deconvolution + epilogue";
    case RCP_S8_SWAPPED: return "s8 conv, N and C swapped";
    case RCP_BF16_SWAPPED: return "bf16 conv, N and C swapped";
    case RCP_S8_GEMM: return "s8 matmul";
    }
    return "?";
}

/* ------------------------------------------------------------------ building */

static qs_status wl_make(qs_cpu_wlayout *wl, const qs_dnnl_ctx *ctx, const qs_dnnl_prim *p, int arg,
                         const qs_dnnl_tensor *user, bool to_prim) {
    QS_TRY(qs_dnnl_weights_reorder(&wl->reorder, ctx, p, arg, user, to_prim, &wl->needed, &wl->bytes));
    return QS_OK;
}

static size_t wl_scratch(const qs_cpu_wlayout *wl) { return wl->needed ? wl->reorder.scratch_bytes : 0; }

/* Forward: primitive, weight reorder and workspace. */
static qs_status build_fwd(qs_cpu_conv_plan_t *cp, const qs_dnnl_ctx *ctx) {
    const qs_conv_desc *d = &cp->d;
    const conv_recipe r = cp->rcp[DIR_FWD];
    const qs_dtype cdt = r == RCP_BF16 ? QS_BF16 : r == RCP_S8 ? QS_S8 : QS_F32;
    const qs_dnnl_tensor src = tensor4(d->N, d->C, d->H, d->W, QS_DNNL_NHWC, cdt);
    const qs_dnnl_tensor dst = tensor4(d->N, d->K, d->P, d->Q, QS_DNNL_NHWC, QS_F32);
    const qs_dnnl_tensor wany = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_ANY, cdt);
    const qs_dnnl_tensor wuser = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_OIHW, cdt);
    const qs_dnnl_tensor bias = {.ndims = 1, .dims = {d->K}, .layout = QS_DNNL_VECTOR, .dt = QS_F32};
    const bool fused_bias = d->has_bias && (r == RCP_F32 || r == RCP_BF16);
    const int64_t strides[2] = {d->stride_h, d->stride_w}, pads[2] = {d->pad_h, d->pad_w};
    QS_TRY(qs_dnnl_conv_create(&cp->fwd, ctx, QS_DNNL_CONV_FWD, &src, &wany, fused_bias ? &bias : NULL, &dst,
                               strides, pads, NULL, "convolution forward"));
    if (r == RCP_S8) {
        /* the dequantization scale (and the bias) as binary post-ops, kept when oneDNN runs
         * them in the same kernel (true for its brgemm/AMX and VNNI convolutions; not for
         * its int8 deconvolution, which drops to a 5× slower kernel) */
        const qs_dnnl_conv_geom g = {.strides = {d->stride_h, d->stride_w}, .dilates = {0, 0},
                                     .pad_l = {d->pad_h, d->pad_w}, .pad_r = {d->pad_h, d->pad_w}};
        qs_dnnl_prim fused;
        qs_status st = qs_dnnl_conv_fwd_create_ex(&fused, ctx, false, &src, &wany, NULL, &dst, &g, true, d->has_bias,
                                                  "int8 convolution forward (fused scale)");
        if (st == QS_OK && strcmp(qs_dnnl_prim_impl(&fused), qs_dnnl_prim_impl(&cp->fwd)) == 0) {
            qs_dnnl_prim_destroy(&cp->fwd);
            cp->fwd = fused;
            cp->fused_scale = true;
        } else if (st == QS_OK) {
            qs_dnnl_prim_destroy(&fused);
        } else {
            qs_error_clear();
        }
    }
    QS_TRY(wl_make(&cp->w_fwd, ctx, &cp->fwd, 0, &wuser, true));
    size_t sz[WS_N] = {0};
    const bool widen = r == RCP_S8_AS_F32 || (r == RCP_F32 && cp->fdt != QS_F32);
    if (widen) {
        sz[WS_A] = (size_t)(d->N * d->H * d->W * d->C) * sizeof(float);
        sz[WS_B] = (size_t)(d->K * d->C * d->R * d->S) * sizeof(float);
    }
    sz[WS_L] = cp->w_fwd.bytes;
    if (cp->fused_scale) sz[WS_T] = (size_t)d->K * sizeof(float);
    sz[WS_SCRATCH] = max_sz(cp->fwd.scratch_bytes, wl_scratch(&cp->w_fwd));
    if (d->y_dt == QS_BF16) sz[WS_Y] = (size_t)(d->N * d->P * d->Q * d->K) * sizeof(float);
    cp->ws_bytes = max_sz(cp->ws_bytes, layout_regions(cp->off[DIR_FWD], sz));
    return QS_OK;
}

/* Backward-data: convolution backward-data primitive, or the INT8 deconvolution. */
static qs_status build_bwd_data(qs_cpu_conv_plan_t *cp, const qs_dnnl_ctx *ctx) {
    const qs_conv_desc *d = &cp->d;
    const conv_recipe r = cp->rcp[DIR_BWD_DATA];
    const qs_dtype cdt = r == RCP_BF16 ? QS_BF16 : r == RCP_S8_DECONV ? QS_S8 : QS_F32;
    const qs_dnnl_tensor dx = tensor4(d->N, d->C, d->H, d->W, QS_DNNL_NHWC, QS_F32);
    const qs_dnnl_tensor dy = tensor4(d->N, d->K, d->P, d->Q, QS_DNNL_NHWC, cdt);
    const int64_t strides[2] = {d->stride_h, d->stride_w}, pads[2] = {d->pad_h, d->pad_w};
    if (r == RCP_S8_GEMM) { /* dY (N·P·Q, K) · W (K, C) → (N·P·Q, C), scattered by the epilogue */
        const int64_t rows = d->N * d->P * d->Q;
        const qs_dnnl_tensor a = mat(rows, d->K, d->K, 1, QS_S8), b = mat(d->K, d->C, d->C, 1, QS_S8);
        const qs_dnnl_tensor c = mat(rows, d->C, d->C, 1, QS_F32);
        QS_TRY(qs_dnnl_matmul_create(&cp->bwd_data, ctx, &a, &b, NULL, &c, false, NULL,
                                     "int8 1x1 backward-data matmul"));
    } else if (r == RCP_S8_DECONV) {
        /* deconvolution weights (C, K, R, S) = OIHW (K, C, R, S) with the first two dims swapped */
        const qs_dnnl_tensor wany = tensor4(d->C, d->K, d->R, d->S, QS_DNNL_ANY, QS_S8);
        const qs_dnnl_tensor wuser =
            strided4(d->C, d->K, d->R, d->S, d->R * d->S, d->C * d->R * d->S, d->S, 1, QS_S8);
        const qs_dnnl_conv_geom g = {.strides = {d->stride_h, d->stride_w}, .dilates = {0, 0},
                                     .pad_l = {d->pad_h, d->pad_w}, .pad_r = {cp->pad_r[0], cp->pad_r[1]}};
        QS_TRY(qs_dnnl_conv_fwd_create_ex(&cp->bwd_data, ctx, true, &dy, &wany, NULL, &dx, &g, false, false,
                                          "int8 deconvolution (convolution backward-data)"));
        QS_TRY(wl_make(&cp->w_bwd, ctx, &cp->bwd_data, 0, &wuser, true));
    } else {
        const qs_dnnl_tensor wany = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_ANY, cdt);
        const qs_dnnl_tensor wuser = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_OIHW, cdt);
        /* the forward primitive is a layout hint when it has this direction's precision */
        const bool same = cp->rcp[DIR_FWD] == r || (r == RCP_F32 && cp->rcp[DIR_FWD] == RCP_S8_AS_F32);
        QS_TRY(qs_dnnl_conv_create(&cp->bwd_data, ctx, QS_DNNL_CONV_BWD_DATA, &dx, &wany, NULL, &dy, strides, pads,
                                   same ? &cp->fwd : NULL, "convolution backward-data"));
        QS_TRY(wl_make(&cp->w_bwd, ctx, &cp->bwd_data, 0, &wuser, true));
    }
    size_t sz[WS_N] = {0};
    if (r == RCP_F32 && cp->gdt != QS_F32) sz[WS_A] = (size_t)(d->N * d->P * d->Q * d->K) * sizeof(float);
    if (r == RCP_F32 && cp->fdt != QS_F32) sz[WS_B] = (size_t)(d->K * d->C * d->R * d->S) * sizeof(float);
    sz[WS_L] = cp->w_bwd.bytes;
    sz[WS_T] = (size_t)((r == RCP_S8_GEMM ? d->N * d->P * d->Q : d->N * d->H * d->W) * d->C) * sizeof(float);
    sz[WS_SCRATCH] = max_sz(cp->bwd_data.scratch_bytes, wl_scratch(&cp->w_bwd));
    if (d->dx_dt == QS_BF16) sz[WS_Y] = (size_t)(d->N * d->H * d->W * d->C) * sizeof(float);
    cp->ws_bytes = max_sz(cp->ws_bytes, layout_regions(cp->off[DIR_BWD_DATA], sz));
    return QS_OK;
}

/* One chunk of the swapped backward-weights convolution over n images, operands of dtype dt
 * (S8 or BF16). */
static qs_status build_swapped_chunk(qs_cpu_conv_plan_t *cp, const qs_dnnl_ctx *ctx, conv_chunk *ch, int64_t n,
                                     qs_dtype dt) {
    const qs_conv_desc *d = &cp->d;
    /* the last input row/column any output reads is H − 1 + pad_r: a negative pad_r
     * truncates the input instead (oneDNN rejects negative convolution padding) */
    const int64_t Hs = d->H + (cp->pad_r[0] < 0 ? cp->pad_r[0] : 0), Ws = d->W + (cp->pad_r[1] < 0 ? cp->pad_r[1] : 0);
    const qs_dnnl_tensor xu = strided4(d->C, n, Hs, Ws, 1, d->H * d->W * d->C, d->W * d->C, d->C, dt);
    const qs_dnnl_tensor xp = tensor4(d->C, n, Hs, Ws, QS_DNNL_NHWC, dt);
    const qs_dnnl_tensor wu = strided4(d->K, n, d->P, d->Q, 1, d->P * d->Q * d->K, d->Q * d->K, d->K, dt);
    const qs_dnnl_tensor wany = tensor4(d->K, n, d->P, d->Q, QS_DNNL_ANY, dt);
    const qs_dnnl_tensor dst = tensor4(d->C, d->K, d->R, d->S, QS_DNNL_NHWC, QS_F32);
    const qs_dnnl_conv_geom g = {.strides = {1, 1}, .dilates = {d->stride_h - 1, d->stride_w - 1},
                                 .pad_l = {d->pad_h, d->pad_w},
                                 .pad_r = {cp->pad_r[0] > 0 ? cp->pad_r[0] : 0, cp->pad_r[1] > 0 ? cp->pad_r[1] : 0}};
    ch->len = n;
    QS_TRY(qs_dnnl_conv_fwd_create_ex(&ch->prim, ctx, false, &xp, &wany, NULL, &dst, &g, false, false,
                                      "backward-weights (convolution with N and C swapped)"));
    QS_TRY(qs_dnnl_reorder_create_t(&ch->xt, ctx, &xu, &xp, "backward-weights input transposition"));
    QS_TRY(wl_make(&ch->dyw, ctx, &ch->prim, 0, &wu, true));
    return QS_OK;
}

/* One chunk of the 1×1 INT8 backward-weights matmul (C, rows)·(rows, K) → (C, K). */
static qs_status build_gemm_chunk(qs_cpu_conv_plan_t *cp, const qs_dnnl_ctx *ctx, conv_chunk *ch, int64_t rows) {
    const qs_conv_desc *d = &cp->d;
    const qs_dnnl_tensor a = mat(d->C, rows, 1, d->C, QS_S8), b = mat(rows, d->K, d->K, 1, QS_S8);
    const qs_dnnl_tensor c = mat(d->C, d->K, d->K, 1, QS_F32);
    ch->len = rows;
    return qs_dnnl_matmul_create(&ch->prim, ctx, &a, &b, NULL, &c, false, NULL, "int8 1x1 backward-weights matmul");
}

static qs_status build_bwd_weights(qs_cpu_conv_plan_t *cp, const qs_dnnl_ctx *ctx) {
    const qs_conv_desc *d = &cp->d;
    const conv_recipe r = cp->rcp[DIR_BWD_WEIGHTS];
    size_t sz[WS_N] = {0};
    const size_t part = (size_t)(d->K * d->C * d->R * d->S) * sizeof(float);
    if (r == RCP_S8_SWAPPED || r == RCP_BF16_SWAPPED || r == RCP_S8_GEMM) {
        const bool swapped = r != RCP_S8_GEMM;
        const qs_dtype dt = r == RCP_BF16_SWAPPED ? QS_BF16 : QS_S8;
        const size_t esz = qs_dtype_size(dt);
        const int64_t per = swapped ? d->P * d->Q : 1;           /* terms per unit of length */
        const int64_t total = swapped ? d->N : d->N * d->P * d->Q; /* images or rows */
        /* ≥ 1 (checked by choose_recipes); FP32 accumulation (BF16) needs no split */
        const int64_t max_len = dt == QS_BF16 ? total : QS_INT8_EXACT_TERMS / per;
        cp->nchunks = (total + max_len - 1) / max_len;
        const int64_t len = (total + cp->nchunks - 1) / cp->nchunks, last = total - (cp->nchunks - 1) * len;
        for (int i = 0; i < (last != len ? 2 : 1); i++) {
            conv_chunk *ch = &cp->chunk[i];
            if (swapped)
                QS_TRY(build_swapped_chunk(cp, ctx, ch, i ? last : len, dt));
            else
                QS_TRY(build_gemm_chunk(cp, ctx, ch, i ? last : len));
            sz[WS_SCRATCH] = max_sz(sz[WS_SCRATCH], max_sz(ch->prim.scratch_bytes, ch->xt.scratch_bytes));
            sz[WS_SCRATCH] = max_sz(sz[WS_SCRATCH], wl_scratch(&ch->dyw));
        }
        if (swapped) {
            sz[WS_A] = (size_t)(d->C * len * d->H * d->W) * esz;
            sz[WS_B] = cp->chunk[0].dyw.needed ? cp->chunk[0].dyw.bytes : 0;
        } else if (d->stride_h != 1 || d->stride_w != 1) {
            sz[WS_A] = (size_t)(d->N * d->P * d->Q * d->C);
        }
        sz[WS_T] = part;
        sz[WS_S] = part;
    } else {
        const qs_dtype cdt = r == RCP_BF16 ? QS_BF16 : QS_F32;
        const qs_dnnl_tensor src = tensor4(d->N, d->C, d->H, d->W, QS_DNNL_NHWC, cdt);
        const qs_dnnl_tensor dy = tensor4(d->N, d->K, d->P, d->Q, QS_DNNL_NHWC, cdt);
        const qs_dnnl_tensor wany = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_ANY, QS_F32);
        const qs_dnnl_tensor wuser = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_OIHW, QS_F32);
        const qs_dnnl_tensor bias = {.ndims = 1, .dims = {d->K}, .layout = QS_DNNL_VECTOR, .dt = QS_F32};
        const int64_t strides[2] = {d->stride_h, d->stride_w}, pads[2] = {d->pad_h, d->pad_w};
        const bool fused_db = d->has_bias && cp->gdt == QS_F32;
        const bool same = cp->rcp[DIR_FWD] == r || (r == RCP_F32 && cp->rcp[DIR_FWD] == RCP_S8_AS_F32);
        QS_TRY(qs_dnnl_conv_create(&cp->bwd_weights, ctx, QS_DNNL_CONV_BWD_WEIGHTS, &src, &wany,
                                   fused_db ? &bias : NULL, &dy, strides, pads, same ? &cp->fwd : NULL,
                                   "convolution backward-weights"));
        QS_TRY(wl_make(&cp->dw_user, ctx, &cp->bwd_weights, 1, &wuser, false));
        if (r == RCP_F32 && cp->gdt != QS_F32) sz[WS_A] = (size_t)(d->N * d->P * d->Q * d->K) * sizeof(float);
        if (r == RCP_F32 && cp->fdt != QS_F32) sz[WS_B] = (size_t)(d->N * d->H * d->W * d->C) * sizeof(float);
        sz[WS_L] = cp->dw_user.bytes;
        sz[WS_SCRATCH] = max_sz(cp->bwd_weights.scratch_bytes, wl_scratch(&cp->dw_user));
    }
    cp->ws_bytes = max_sz(cp->ws_bytes, layout_regions(cp->off[DIR_BWD_WEIGHTS], sz));
    return QS_OK;
}

/* Build one direction; an INT8 recipe oneDNN cannot build for this shape falls back to FP32
 * emulation of that direction. */
typedef qs_status (*build_fn)(qs_cpu_conv_plan_t *, const qs_dnnl_ctx *);
static qs_status build_dir(qs_cpu_conv_plan_t *cp, const qs_dnnl_ctx *ctx, int dir, build_fn fn) {
    qs_status st = fn(cp, ctx);
    const conv_recipe r = cp->rcp[dir];
    if (st == QS_ERR_UNSUPPORTED && r != RCP_F32 && r != RCP_BF16) {
        qs_error_clear();
        if (dir == DIR_FWD) {
            cp->fused_scale = false;
            qs_dnnl_prim_destroy(&cp->fwd);
            qs_dnnl_prim_destroy(&cp->w_fwd.reorder);
        } else if (dir == DIR_BWD_DATA) {
            qs_dnnl_prim_destroy(&cp->bwd_data);
            qs_dnnl_prim_destroy(&cp->w_bwd.reorder);
        }
        cp->nchunks = dir == DIR_BWD_WEIGHTS ? 0 : cp->nchunks;
        for (int i = 0; dir == DIR_BWD_WEIGHTS && i < 2; i++) {
            qs_dnnl_prim_destroy(&cp->chunk[i].prim);
            qs_dnnl_prim_destroy(&cp->chunk[i].xt);
            qs_dnnl_prim_destroy(&cp->chunk[i].dyw.reorder);
            memset(&cp->chunk[i], 0, sizeof cp->chunk[i]);
        }
        cp->rcp[dir] = RCP_F32;
        st = fn(cp, ctx);
    }
    if (st != QS_OK) return st;
    const qs_dnnl_prim *p = dir == DIR_FWD ? &cp->fwd : dir == DIR_BWD_DATA ? &cp->bwd_data : &cp->bwd_weights;
    if (dir == DIR_BWD_WEIGHTS &&
        (cp->rcp[dir] == RCP_S8_SWAPPED || cp->rcp[dir] == RCP_BF16_SWAPPED || cp->rcp[dir] == RCP_S8_GEMM))
        p = &cp->chunk[0].prim;
    const bool emulated = cp->rcp[dir] == RCP_F32 && cp->hdr.prec != QS_PREC_FP32;
    const char *rn = dir == DIR_FWD && cp->fused_scale ? "s8 conv, scale fused" : recipe_name(cp->rcp[dir]);
    snprintf(cp->impl[dir], sizeof cp->impl[dir], "%s%s: %s", rn, emulated ? " (emulated)" : "", qs_dnnl_prim_impl(p));
    if (cp->nchunks > 1 && dir == DIR_BWD_WEIGHTS) {
        size_t n = strlen(cp->impl[dir]);
        snprintf(cp->impl[dir] + n, sizeof cp->impl[dir] - n, " x%lld chunks", (long long)cp->nchunks);
    }
    return QS_OK;
}

/* The recipe of each direction for the plan's precision on this CPU. */
static void choose_recipes(qs_cpu_conv_plan_t *cp, qs_backend *be) {
    const qs_conv_desc *d = &cp->d;
    cp->rcp[0] = cp->rcp[1] = cp->rcp[2] = RCP_F32;
    if (qs_cpu_prec_of(be, d->prec) != QS_PREC_NATIVE) return;
    if (d->prec == QS_PREC_BF16) {
        cp->rcp[0] = cp->rcp[1] = cp->rcp[2] = RCP_BF16;
        /* oneDNN's bf16 backward-weights kernel slows down on small images (measured 2–4×
         * slower than FP32 at 4×4 and 7×7): there the swapped bf16 forward convolution (3×3)
         * or FP32 on the widened values (1×1) is faster */
        if (d->P * d->Q <= 64) cp->rcp[DIR_BWD_WEIGHTS] = d->R * d->S > 1 ? RCP_BF16_SWAPPED : RCP_F32;
    } else if (d->prec == QS_PREC_INT8 && qs_dnnl_int8_exact()) {
        /* f32 sums of int8 codes stay exact integers while C·R·S·127² < 2^24 */
        const int64_t taps = d->R * d->S;
        cp->rcp[DIR_FWD] = d->C == 1 && taps >= 16 && taps * 127 * 127 < (1 << 24) ? RCP_S8_AS_F32 : RCP_S8;
        const bool pointwise = d->R == 1 && d->S == 1 && d->pad_h == 0 && d->pad_w == 0;
        const bool strided = d->stride_h > 1 || d->stride_w > 1;
        cp->rcp[DIR_BWD_DATA] = pointwise && strided && d->K <= QS_INT8_EXACT_TERMS ? RCP_S8_GEMM : RCP_S8_DECONV;
        if (pointwise)
            cp->rcp[DIR_BWD_WEIGHTS] = RCP_S8_GEMM;
        else if (d->P * d->Q <= QS_INT8_EXACT_TERMS)
            cp->rcp[DIR_BWD_WEIGHTS] = RCP_S8_SWAPPED;
    }
}

qs_status qs_cpu_conv_plan(qs_backend *be, const qs_conv_desc *d, void **plan, size_t *workspace) {
    QS_TRY(qs_conv_plan_args(d, plan, workspace));
    qs_conv_desc dd = *d; /* finished: the same P,Q */
    QS_TRY(qs_cpu_prec_check(be, d->prec, "conv_plan"));
    QS_TRY(qs_gemm_out_dtype_check("conv_plan", d->y_dt, d->dx_dt));
    qs_cpu_conv_plan_t *cp = calloc(1, sizeof *cp);
    if (!cp) return QS_FAIL(QS_ERR_OOM, "conv_plan: out of memory for the plan");
    cp->hdr.kind = QS_CPU_PLAN_CONV;
    cp->hdr.prec = d->prec;
    cp->d = dd;
    cp->fdt = qs_precision_operand_dtype(d->prec, false);
    cp->gdt = qs_precision_operand_dtype(d->prec, true);
    cp->pad_r[0] = (dd.P - 1) * dd.stride_h + dd.R - dd.H - dd.pad_h;
    cp->pad_r[1] = (dd.Q - 1) * dd.stride_w + dd.S - dd.W - dd.pad_w;
    choose_recipes(cp, be);
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    qs_status st = build_dir(cp, ctx, DIR_FWD, build_fwd);
    if (st == QS_OK) st = build_dir(cp, ctx, DIR_BWD_DATA, build_bwd_data);
    if (st == QS_OK) st = build_dir(cp, ctx, DIR_BWD_WEIGHTS, build_bwd_weights);
    if (st != QS_OK) {
        qs_cpu_conv_plan_destroy(cp);
        return qs_error_wrap(st, "conv_plan (%s, N=%lld H=%lld W=%lld C=%lld K=%lld R=%lld S=%lld): ",
                             qs_precision_name(d->prec), (long long)d->N, (long long)d->H, (long long)d->W,
                             (long long)d->C, (long long)d->K, (long long)d->R, (long long)d->S);
    }
    cp->ws_bytes = qs_cpu_align(cp->ws_bytes);
    *plan = cp;
    *workspace = cp->ws_bytes;
    return QS_OK;
}

/* ------------------------------------------------------------------ execution */

/* Convert weights for a primitive: returns the pointer to pass to it (w itself or the
 * reordered copy at ws + off[WS_L]). */
static qs_status prepare_w(qs_cpu_wlayout *wl, const qs_dnnl_ctx *ctx, const void *w, void *ws, const size_t *off,
                           void **out) {
    *out = (void *)w;
    if (!wl->needed) return QS_OK;
    void *dst = ws_at(ws, off[WS_L]);
    void *h[2] = {(void *)w, dst};
    QS_TRY(qs_dnnl_prim_exec(&wl->reorder, ctx, h, ws_at(ws, off[WS_SCRATCH]), "convolution weight reorder"));
    *out = dst;
    return QS_OK;
}

static qs_status conv_ws_check(const qs_cpu_conv_plan_t *cp, const void *ws, const char *what) {
    if (cp->ws_bytes && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan needs %zu bytes of workspace but ws is NULL", what,
                       cp->ws_bytes);
    return QS_OK;
}

/* The int8 codes of an S8 operand as f32 integers (scale 1) into dst. */
static qs_status widen_codes(qs_backend *be, int64_t rows, int64_t cols, const qs_operand *op, float *dst) {
    static const float one = 1.0f;
    const qs_operand codes = {.data = op->data, .dt = QS_S8, .scale = &one, .per_row = false};
    return qs_cpu_dequantize(be, NULL, rows, cols, &codes, dst);
}

/* The FP32 forward result Y = conv(X, W) + b into y (N·P·Q·K floats) by the plan's recipe. */
static qs_status conv_forward_f32(qs_backend *be, qs_cpu_conv_plan_t *cp, const qs_operand *xo, const qs_operand *wo,
                                  const float *b, float *y, void *ws) {
    const qs_conv_desc *d = &cp->d;
    const size_t *off = cp->off[DIR_FWD];
    const conv_recipe r = cp->rcp[DIR_FWD];
    const int64_t NHW = d->N * d->H * d->W, CRS = d->C * d->R * d->S;
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    void *px = (void *)xo->data, *pw = (void *)wo->data;
    if (r == RCP_F32) {
        float *fx, *fw;
        QS_TRY(qs_cpu_widen(be, NHW, d->C, xo, &fx, ws_at(ws, off[WS_A])));
        QS_TRY(qs_cpu_widen(be, d->K, CRS, wo, &fw, ws_at(ws, off[WS_B])));
        px = fx, pw = fw;
    } else if (r == RCP_S8_AS_F32) {
        px = ws_at(ws, off[WS_A]), pw = ws_at(ws, off[WS_B]);
        QS_TRY(widen_codes(be, NHW, d->C, xo, px));
        QS_TRY(widen_codes(be, d->K, CRS, wo, pw));
    }
    void *wp;
    QS_TRY(prepare_w(&cp->w_fwd, ctx, pw, ws, off, &wp));
    const float sx = r == RCP_S8 || r == RCP_S8_AS_F32 ? xo->scale[0] : 1.0f;
    if (cp->fused_scale) { /* SRC, WEIGHTS, DST, MUL (per output channel), [ADD (bias)] */
        float *scale = ws_at(ws, off[WS_T]);
        for (int64_t k = 0; k < d->K; k++) scale[k] = wo->per_row ? sx * wo->scale[k] : sx * wo->scale[0];
        void *h[5] = {px, wp, y, scale, (void *)b};
        return qs_dnnl_prim_exec(&cp->fwd, ctx, h, ws_at(ws, off[WS_SCRATCH]), "int8 convolution forward");
    }
    const bool fused_bias = d->has_bias && (r == RCP_F32 || r == RCP_BF16);
    void *h[4] = {px, wp, fused_bias ? (void *)b : (void *)y, y}; /* SRC, WEIGHTS, [BIAS,] DST */
    QS_TRY(qs_dnnl_prim_exec(&cp->fwd, ctx, h, ws_at(ws, off[WS_SCRATCH]), "convolution forward"));
    if (r == RCP_S8 || r == RCP_S8_AS_F32) {
        qs_cpu_epilogue(d->N * d->P * d->Q, d->K, y, wo->per_row ? sx : sx * wo->scale[0],
                        wo->per_row ? wo->scale : NULL, d->has_bias ? b : NULL, y, false);
    }
    return QS_OK;
}

/* y = conv(x, w) + b in the plan's y_dt: F32 directly, BF16 as the FP32 result (in the
 * workspace) rounded to nearest even. */
qs_status qs_cpu_conv_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *xo,
                              const qs_operand *wo, const float *b, void *y, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_CONV, "conv_forward"));
    qs_cpu_conv_plan_t *cp = plan;
    QS_TRY(qs_cpu_operand_check(xo, cp->fdt, false, "conv_forward x"));
    QS_TRY(qs_cpu_operand_check(wo, cp->fdt, true, "conv_forward w"));
    if (!y || (cp->d.has_bias && !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv_forward: NULL y or (planned with bias) b");
    QS_TRY(conv_ws_check(cp, ws, "conv_forward"));
    const qs_conv_desc *d = &cp->d;
    if (d->y_dt != QS_BF16) return conv_forward_f32(be, cp, xo, wo, b, y, ws);
    float *yf = ws_at(ws, cp->off[DIR_FWD][WS_Y]);
    QS_TRY(conv_forward_f32(be, cp, xo, wo, b, yf, ws));
    return qs_f32_to_bf16(d->N * d->P * d->Q * d->K, yf, y, NULL);
}

/* Strided 1×1 backward-data: dX[n, p·sh, q·sw, :] = (+=) alpha·acc[(n·P + p)·Q + q, :]; every
 * other position of dX is 0 (or unchanged when accumulating). */
static void scatter_epilogue(const qs_conv_desc *d, const float *acc, float alpha, float *dx, bool accumulate) {
    const int64_t C = d->C, W = d->W;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t h = 0; h < d->H; h++) {
            float *o = dx + (n * d->H + h) * W * C;
            const int64_t p = h / d->stride_h;
            const bool hit_h = h % d->stride_h == 0 && p < d->P;
            for (int64_t w = 0; w < W; w++) {
                float *ow = o + w * C;
                const int64_t q = w / d->stride_w;
                if (!hit_h || w % d->stride_w != 0 || q >= d->Q) {
                    if (!accumulate) memset(ow, 0, (size_t)C * sizeof(float));
                    continue;
                }
                const float *a = acc + ((n * d->P + p) * d->Q + q) * C;
                if (accumulate)
                    for (int64_t c = 0; c < C; c++) ow[c] += a[c] * alpha;
                else
                    for (int64_t c = 0; c < C; c++) ow[c] = a[c] * alpha;
            }
        }
}

/* dx (FP32) = conv_backward_data(dy, w), or dx += ... with accumulate (arguments checked). */
static qs_status conv_backward_data_f32(qs_backend *be, qs_cpu_conv_plan_t *cp, const qs_operand *dyo,
                                        const qs_operand *wo, float *dx, bool accumulate, void *ws) {
    const qs_conv_desc *d = &cp->d;
    const size_t *off = cp->off[DIR_BWD_DATA];
    const conv_recipe r = cp->rcp[DIR_BWD_DATA];
    const int64_t nx = d->N * d->H * d->W * d->C;
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    void *pdy = (void *)dyo->data, *pw = (void *)wo->data;
    if (r == RCP_F32) {
        float *fdy, *fw;
        QS_TRY(qs_cpu_widen(be, d->N * d->P * d->Q, d->K, dyo, &fdy, ws_at(ws, off[WS_A])));
        QS_TRY(qs_cpu_widen(be, d->K, d->C * d->R * d->S, wo, &fw, ws_at(ws, off[WS_B])));
        pdy = fdy, pw = fw;
    }
    if (r == RCP_S8_GEMM) {
        float *acc = ws_at(ws, off[WS_T]);
        void *h[3] = {pdy, pw, acc}; /* A = dY, B = W, C */
        QS_TRY(qs_dnnl_prim_exec(&cp->bwd_data, ctx, h, ws_at(ws, off[WS_SCRATCH]), "int8 1x1 backward-data matmul"));
        scatter_epilogue(d, acc, dyo->scale[0] * wo->scale[0], dx, accumulate);
        return QS_OK;
    }
    void *wp;
    QS_TRY(prepare_w(&cp->w_bwd, ctx, pw, ws, off, &wp));
    float *tmp = ws_at(ws, off[WS_T]);
    float *out = accumulate ? tmp : dx;
    void *h[3] = {pdy, wp, out}; /* DIFF_DST, WEIGHTS, DIFF_SRC (deconvolution: SRC, WEIGHTS, DST) */
    QS_TRY(qs_dnnl_prim_exec(&cp->bwd_data, ctx, h, ws_at(ws, off[WS_SCRATCH]), "convolution backward-data"));
    if (r == RCP_S8_DECONV)
        qs_cpu_epilogue(d->N * d->H * d->W, d->C, out, dyo->scale[0] * wo->scale[0], NULL, NULL, dx, accumulate);
    else if (accumulate)
        qs_cpu_copy_or_add(nx, tmp, dx, true);
    return QS_OK;
}

/* dx (N,H,W,C) in the plan's dx_dt = conv_backward_data(dy, w): F32 directly (or accumulated),
 * BF16 as the FP32 result (in the workspace) rounded to nearest even. */
qs_status qs_cpu_conv_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dyo,
                                    const qs_operand *wo, void *dx, bool accumulate, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_CONV, "conv_backward_data"));
    qs_cpu_conv_plan_t *cp = plan;
    QS_TRY(qs_cpu_operand_check(dyo, cp->gdt, false, "conv_backward_data dy"));
    QS_TRY(qs_cpu_operand_check(wo, cp->fdt, false, "conv_backward_data w"));
    if (!dx) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_data: NULL dx");
    QS_TRY(qs_dx_accumulate_check("conv_backward_data", cp->d.dx_dt, accumulate));
    QS_TRY(conv_ws_check(cp, ws, "conv_backward_data"));
    const qs_conv_desc *d = &cp->d;
    if (d->dx_dt != QS_BF16) return conv_backward_data_f32(be, cp, dyo, wo, dx, accumulate, ws);
    float *dxf = ws_at(ws, cp->off[DIR_BWD_DATA][WS_Y]);
    QS_TRY(conv_backward_data_f32(be, cp, dyo, wo, dxf, false, ws));
    return qs_f32_to_bf16(d->N * d->H * d->W * d->C, dxf, dx, NULL);
}

/* X (N,H,W,C) at the strided output positions → (N·P·Q, C) rows (1×1, pad 0). */
static void gather_rows_s8(const qs_conv_desc *d, const int8_t *x, int8_t *out) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t p = 0; p < d->P; p++)
            for (int64_t q = 0; q < d->Q; q++)
                memcpy(out + ((n * d->P + p) * d->Q + q) * d->C,
                       x + ((n * d->H + p * d->stride_h) * d->W + q * d->stride_w) * d->C, (size_t)d->C);
}

/* Swapped (INT8, BF16) or 1×1 matmul (INT8) backward-weights: chunked products summed in
 * f32, then dW (K,C,R,S) = alpha · sum (C·R·S, K)ᵀ. */
static qs_status bwd_weights_chunked(qs_backend *be, qs_cpu_conv_plan_t *cp, const qs_operand *dyo,
                                     const qs_operand *xo, float *dw, void *ws) {
    const qs_conv_desc *d = &cp->d;
    const size_t *off = cp->off[DIR_BWD_WEIGHTS];
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    const bool swapped = cp->rcp[DIR_BWD_WEIGHTS] != RCP_S8_GEMM;
    const size_t esz = qs_dtype_size(xo->dt);
    const char *x = xo->data, *dy = dyo->data;
    float *part = ws_at(ws, off[WS_T]), *sum = ws_at(ws, off[WS_S]);
    void *scratch = ws_at(ws, off[WS_SCRATCH]);
    const int64_t CRS = d->C * d->R * d->S, CRSK = CRS * d->K;
    if (!swapped && (d->stride_h != 1 || d->stride_w != 1)) {
        int8_t *g = ws_at(ws, off[WS_A]);
        gather_rows_s8(d, xo->data, g);
        x = (const char *)g;
    }
    int64_t at = 0; /* images (swapped) or rows (matmul) done */
    for (int64_t i = 0; i < cp->nchunks; i++) {
        conv_chunk *ch = &cp->chunk[i + 1 < cp->nchunks || !cp->chunk[1].prim.prim ? 0 : 1];
        float *out = i == 0 ? sum : part;
        if (swapped) {
            void *xt = ws_at(ws, off[WS_A]), *dyw = ws_at(ws, off[WS_B]);
            void *hx[2] = {(void *)(x + (size_t)(at * d->H * d->W * d->C) * esz), xt};
            QS_TRY(qs_dnnl_prim_exec(&ch->xt, ctx, hx, scratch, "backward-weights input transposition"));
            const void *dyc = dy + (size_t)(at * d->P * d->Q * d->K) * esz;
            void *wp = (void *)dyc;
            if (ch->dyw.needed) {
                void *hw[2] = {(void *)dyc, dyw};
                QS_TRY(qs_dnnl_prim_exec(&ch->dyw.reorder, ctx, hw, scratch, "backward-weights dY reorder"));
                wp = dyw;
            }
            void *h[3] = {xt, wp, out}; /* SRC, WEIGHTS, DST */
            QS_TRY(qs_dnnl_prim_exec(&ch->prim, ctx, h, scratch, "backward-weights convolution (N, C swapped)"));
        } else {
            void *h[3] = {(void *)(x + at * d->C), (void *)(dy + at * d->K), out}; /* A = Xᵀ, B = dY, C */
            QS_TRY(qs_dnnl_prim_exec(&ch->prim, ctx, h, scratch, "int8 backward-weights matmul"));
        }
        if (i > 0) qs_cpu_copy_or_add(CRSK, part, sum, true);
        at += ch->len;
    }
    /* sum[(c·R·S + rs)·K + k] → dw[(k·C + c)·R·S + rs] (for the matmul R·S = 1) */
    const float alpha = qs_cpu_operand_tensor_scale(dyo) * qs_cpu_operand_tensor_scale(xo);
    const int64_t K = d->K;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < CRS; j++) dw[k * CRS + j] = sum[j * K + k] * alpha;
    return QS_OK;
}

qs_status qs_cpu_conv_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dyo,
                                       const qs_operand *xo, float *dw, float *db, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_CONV, "conv_backward_weights"));
    qs_cpu_conv_plan_t *cp = plan;
    QS_TRY(qs_cpu_operand_check(dyo, cp->gdt, false, "conv_backward_weights dy"));
    QS_TRY(qs_cpu_operand_check(xo, cp->fdt, false, "conv_backward_weights x"));
    if (!dw) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_weights: NULL dw");
    const qs_conv_desc *d = &cp->d;
    QS_TRY(qs_bias_grad_check(dyo->dt, db, d->has_bias, "conv_backward_weights"));
    QS_TRY(conv_ws_check(cp, ws, "conv_backward_weights"));
    const conv_recipe r = cp->rcp[DIR_BWD_WEIGHTS];
    if (r == RCP_S8_SWAPPED || r == RCP_BF16_SWAPPED || r == RCP_S8_GEMM)
        return bwd_weights_chunked(be, cp, dyo, xo, dw, ws);
    const size_t *off = cp->off[DIR_BWD_WEIGHTS];
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    void *pdy = (void *)dyo->data, *px = (void *)xo->data;
    if (r == RCP_F32) {
        float *fdy, *fx;
        QS_TRY(qs_cpu_widen(be, d->N * d->P * d->Q, d->K, dyo, &fdy, ws_at(ws, off[WS_A])));
        QS_TRY(qs_cpu_widen(be, d->N * d->H * d->W, d->C, xo, &fx, ws_at(ws, off[WS_B])));
        pdy = fdy, px = fx;
    }
    void *dwp = cp->dw_user.needed ? ws_at(ws, off[WS_L]) : (void *)dw;
    void *h[4] = {px, pdy, dwp, db}; /* SRC, DIFF_DST, DIFF_WEIGHTS, [DIFF_BIAS] */
    void *scratch = ws_at(ws, off[WS_SCRATCH]);
    QS_TRY(qs_dnnl_prim_exec(&cp->bwd_weights, ctx, h, scratch, "convolution backward-weights"));
    if (!cp->dw_user.needed) return QS_OK;
    void *hr[2] = {dwp, dw};
    return qs_dnnl_prim_exec(&cp->dw_user.reorder, ctx, hr, scratch, "convolution weight-gradient reorder");
}

const char *qs_cpu_conv_impl_name(const void *plan, int dir) {
    const qs_cpu_conv_plan_t *cp = plan;
    if (!cp || cp->hdr.kind != QS_CPU_PLAN_CONV || dir < 0 || dir > 2) return "?";
    return cp->impl[dir];
}
