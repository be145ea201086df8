/* src/cpu/cpu_conv.c — defines: the conv_forward / conv_backward_data / conv_backward_weights ops
 * of the CPU backend: each runs its direction's recipe of the plan (cpu_conv_plan.c) — weights
 * reordered into the workspace, oneDNN's primitive, the INT8 epilogue — and rounds a BF16 output
 * from the FP32 result. */
#include "cpu/cpu_conv_plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/numfmt.h"

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

/* ws holds the plan's workspace when it needs one. */
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

/* Contract: core/backend_ops.def conv_backward_weights; the recipe's path, db fused (F32 dY). */
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

