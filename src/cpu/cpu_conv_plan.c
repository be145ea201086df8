/* src/cpu/cpu_conv_plan.c — defines: the plans of the CPU convolution (oneDNN): per precision and
 * direction a "recipe" (qs_cpu_conv_impl_name reports it), its primitives, weight reorders and
 * workspace (cpu_conv_plan.h). Activations NHWC: X (N,H,W,C), Y (N,P,Q,K); weights stay in the
 * caller's OIHW layout (K,C,R,S). Primitives pick their own weight layout (format_tag_any); the
 * plan holds reorders OIHW → that layout (forward, backward-data) and back (backward-weights),
 * run on every call into the workspace (the weights change every step).
 *   FP32  f32 primitives in all three directions; the bias fused in forward and its gradient in
 *         backward-weights. No im2col path: oneDNN's convolution wins in every direction training
 *         runs.
 *   BF16  bf16 src/weights/diff_dst with f32 outputs, f32 bias fused in forward. On small images
 *         (P·Q ≤ 64), where oneDNN's bf16 backward-weights kernel is slow, backward-weights runs
 *         as the bf16 forward convolution with N and C swapped (one chunk, FP32 accumulation), or
 *         for 1×1 kernels as FP32 on the widened bf16 values: both exact bf16 products summed in
 *         FP32, BF16's numerics.
 *   INT8  int32 accumulation (exact); s_x·s_w, s_dy·s_w, s_dy·s_x applied afterwards.
 *         forward: s8·s8 convolution to an f32 dst without output scales (oneDNN 2.6 has no
 *           runtime ones); s_x·s_w (per output channel for per_row weights) and the bias by binary
 *           post-ops where oneDNN keeps the same kernel with them, else by qs_cpu_epilogue. C == 1
 *           with ≥ 16 taps: the int8 codes widened to f32 through the FP32 primitive + epilogue
 *           (C·R·S·127² < 2^24 keeps every partial sum an exact integer: bit-identical).
 *         backward-data: s8 deconvolution of dY with the same weights (OIHW read as deconvolution
 *           weights (C,K,R,S) through strides) + epilogue; for strided 1×1 kernels without padding
 *           the s8 matmul dY (N·P·Q,K) · W (K,C), whose rows the epilogue scatters into dX.
 *         backward-weights (oneDNN 2.6 has none): a forward s8 convolution with N and C swapped
 *           (X as (C,N,H,W), dY as weights (K,N,P,Q), dilation = stride − 1, output (C,K,R,S)
 *           transposed to OIHW by the epilogue); for 1×1 kernels without padding the s8 matmul
 *           (X gathered at the strided positions)ᵀ · dY. The N·P·Q-term reduction is split (over
 *           images, or rows) into chunks of at most QS_CPU_INT8_EXACT_TERMS terms, whose f32
 *           results are summed; if one image alone has more outputs, backward-weights is emulated.
 *         s8 sources throughout (oneDNN's VNNI kernels then need a weight compensation term, which
 *         the weight reorder computes; AMX multiplies s8·s8 directly). Without VNNI/AMX oneDNN's
 *         int8 kernels are not exact (qs_dnnl_int8_exact), and INT8 runs emulated.
 *   FP16, FP8, and BF16/INT8 on CPUs without native kernels (emulated): operands widened to f32
 *         values (qs_cpu_widen) in the workspace, then the FP32 primitives. Any INT8 primitive
 *         oneDNN cannot build for a shape falls back to emulation for that direction.
 * Bias gradient: fused in FP32 backward-weights (dY is F32); a low-precision dY requires
 * db == NULL (the layer sums its FP32 gradient; backend_ops.def). Output dtypes (y_dt, dx_dt): a
 * BF16 output is the recipe's FP32 result (bias included) in the workspace, rounded to nearest
 * even (qs_f32_to_bf16, the rounding of the straight-through cast it replaces). */
#include "cpu/cpu_conv_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Free a plan: its primitives and reorders (NULL: nothing). */
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

/* oneDNN tensor descriptors: a 4-d tensor in a layout, a strided 4-d one, a strided matrix. */
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

/* The recipe's part of the impl name. */
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
         * its int8 deconvolution, which drops to a slower kernel: docs/BENCHMARKS.md) */
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
    sz[WS_SCRATCH] = qs_cpu_max_size(cp->fwd.scratch_bytes, wl_scratch(&cp->w_fwd));
    if (d->y_dt == QS_BF16) sz[WS_Y] = (size_t)(d->N * d->P * d->Q * d->K) * sizeof(float);
    cp->ws_bytes = qs_cpu_max_size(cp->ws_bytes, layout_regions(cp->off[DIR_FWD], sz));
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
    sz[WS_SCRATCH] = qs_cpu_max_size(cp->bwd_data.scratch_bytes, wl_scratch(&cp->w_bwd));
    if (d->dx_dt == QS_BF16) sz[WS_Y] = (size_t)(d->N * d->H * d->W * d->C) * sizeof(float);
    cp->ws_bytes = qs_cpu_max_size(cp->ws_bytes, layout_regions(cp->off[DIR_BWD_DATA], sz));
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

/* Backward-weights: primitive(s) — the INT8 chunks where the recipe splits the reduction —,
 * the diff-weights reorder and workspace. */
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
        const int64_t max_len = dt == QS_BF16 ? total : QS_CPU_INT8_EXACT_TERMS / per;
        cp->nchunks = (total + max_len - 1) / max_len;
        const int64_t len = (total + cp->nchunks - 1) / cp->nchunks, last = total - (cp->nchunks - 1) * len;
        for (int i = 0; i < (last != len ? 2 : 1); i++) {
            conv_chunk *ch = &cp->chunk[i];
            if (swapped)
                QS_TRY(build_swapped_chunk(cp, ctx, ch, i ? last : len, dt));
            else
                QS_TRY(build_gemm_chunk(cp, ctx, ch, i ? last : len));
            sz[WS_SCRATCH] = qs_cpu_max_size(sz[WS_SCRATCH], qs_cpu_max_size(ch->prim.scratch_bytes, ch->xt.scratch_bytes));
            sz[WS_SCRATCH] = qs_cpu_max_size(sz[WS_SCRATCH], wl_scratch(&ch->dyw));
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
        sz[WS_SCRATCH] = qs_cpu_max_size(cp->bwd_weights.scratch_bytes, wl_scratch(&cp->dw_user));
    }
    cp->ws_bytes = qs_cpu_max_size(cp->ws_bytes, layout_regions(cp->off[DIR_BWD_WEIGHTS], sz));
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
        /* oneDNN's bf16 backward-weights kernel slows down on small images (docs/BENCHMARKS.md,
         * "Convolution at every CPU precision"): there the swapped bf16 forward convolution (3×3)
         * or FP32 on the widened values (1×1) is faster */
        if (d->P * d->Q <= 64) cp->rcp[DIR_BWD_WEIGHTS] = d->R * d->S > 1 ? RCP_BF16_SWAPPED : RCP_F32;
    } else if (d->prec == QS_PREC_INT8 && qs_dnnl_int8_exact()) {
        /* f32 sums of int8 codes stay exact integers while C·R·S·127² < 2^24 */
        const int64_t taps = d->R * d->S;
        cp->rcp[DIR_FWD] = d->C == 1 && taps >= 16 && taps * 127 * 127 < (1 << 24) ? RCP_S8_AS_F32 : RCP_S8;
        const bool pointwise = d->R == 1 && d->S == 1 && d->pad_h == 0 && d->pad_w == 0;
        const bool strided = d->stride_h > 1 || d->stride_w > 1;
        cp->rcp[DIR_BWD_DATA] = pointwise && strided && d->K <= QS_CPU_INT8_EXACT_TERMS ? RCP_S8_GEMM : RCP_S8_DECONV;
        if (pointwise)
            cp->rcp[DIR_BWD_WEIGHTS] = RCP_S8_GEMM;
        else if (d->P * d->Q <= QS_CPU_INT8_EXACT_TERMS)
            cp->rcp[DIR_BWD_WEIGHTS] = RCP_S8_SWAPPED;
    }
}

/* Contract: core/backend_ops.def conv_plan; recipes chosen, then the three directions built. */
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

/* Contract: cpu_backend.h. */
const char *qs_cpu_conv_impl_name(const void *plan, int dir) {
    const qs_cpu_conv_plan_t *cp = plan;
    if (!cp || cp->hdr.kind != QS_CPU_PLAN_CONV || dir < 0 || dir > 2) return "?";
    return cp->impl[dir];
}
