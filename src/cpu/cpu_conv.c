/* src/cpu/cpu_conv.c — 2-D convolution on oneDNN convolution primitives (FP32).
 *
 * Activations NHWC: X (N,H,W,C), Y (N,P,Q,K); weights stay in the caller's PyTorch OIHW
 * layout (K,C,R,S). The primitives pick their own weight layout (format_tag_any); the plan
 * holds cached reorder primitives OIHW → that layout (forward, backward-data) and back
 * (backward-weights) that run on every call into the caller's workspace.
 * Workspace, per direction (the plan reports the maximum):
 *   forward          [reordered W][scratchpad]
 *   backward_data    [reordered W][dX temp, only when accumulating][scratchpad]
 *   backward_weights [dW in the primitive's layout][scratchpad]
 * bench/bench_conv_choice.c measured oneDNN convolution against im2col + matmul: oneDNN is
 * 1.1–9× faster in every direction and shape (one tie: 14 px 32→64 stride-2 backward-data),
 * except backward-data of the 1-input-channel first layer (im2col 1.8× faster), which
 * training never runs (the input needs no gradient); so there is no im2col path. */
#include "cpu/cpu_backend.h"

#include <stdlib.h>

/* Weights in the primitive's layout plus the reorder that converts them (absent when the
 * primitive takes OIHW as is). */
typedef struct qs_cpu_wlayout {
    qs_dnnl_prim reorder;
    bool needed;
    size_t bytes;
} qs_cpu_wlayout;

typedef struct qs_cpu_conv_plan {
    qs_cpu_plan hdr;
    qs_conv_desc d;
    qs_dnnl_prim fwd, bwd_data, bwd_weights;
    qs_cpu_wlayout w_fwd;      /* OIHW → forward weights layout */
    qs_cpu_wlayout w_bwd;      /* OIHW → backward-data weights layout */
    qs_cpu_wlayout dw_user;    /* backward-weights diff layout → OIHW */
    size_t dx_bytes;           /* N·H·W·C floats: backward-data temp when accumulating */
    size_t ws_bytes;
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
    free(cp);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* ws + off, NULL when there is no workspace (the plan then needs none). */
static void *ws_at(void *ws, size_t off) { return ws ? (char *)ws + off : NULL; }

static qs_dnnl_tensor tensor4(int64_t a, int64_t b, int64_t c, int64_t d, qs_dnnl_layout layout) {
    return (qs_dnnl_tensor){.ndims = 4, .dims = {a, b, c, d}, .layout = layout};
}

/* Build the three convolution primitives and the weight reorders. */
static qs_status conv_build(qs_cpu_conv_plan_t *cp, const qs_dnnl_ctx *ctx) {
    const qs_conv_desc *d = &cp->d;
    const qs_dnnl_tensor src = tensor4(d->N, d->C, d->H, d->W, QS_DNNL_NHWC);
    const qs_dnnl_tensor dst = tensor4(d->N, d->K, d->P, d->Q, QS_DNNL_NHWC);
    const qs_dnnl_tensor wany = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_ANY);
    const qs_dnnl_tensor wuser = tensor4(d->K, d->C, d->R, d->S, QS_DNNL_OIHW);
    const qs_dnnl_tensor bias = {.ndims = 1, .dims = {d->K}, .layout = QS_DNNL_VECTOR};
    const qs_dnnl_tensor *bp = d->has_bias ? &bias : NULL;
    const int64_t strides[2] = {d->stride_h, d->stride_w}, pads[2] = {d->pad_h, d->pad_w};

    QS_TRY(qs_dnnl_conv_create(&cp->fwd, ctx, QS_DNNL_CONV_FWD, &src, &wany, bp, &dst, strides, pads, NULL,
                               "convolution forward"));
    QS_TRY(qs_dnnl_conv_create(&cp->bwd_data, ctx, QS_DNNL_CONV_BWD_DATA, &src, &wany, NULL, &dst, strides, pads,
                               &cp->fwd, "convolution backward-data"));
    QS_TRY(qs_dnnl_conv_create(&cp->bwd_weights, ctx, QS_DNNL_CONV_BWD_WEIGHTS, &src, &wany, bp, &dst, strides,
                               pads, &cp->fwd, "convolution backward-weights"));
    qs_cpu_wlayout *wl[3] = {&cp->w_fwd, &cp->w_bwd, &cp->dw_user};
    const qs_dnnl_prim *prims[3] = {&cp->fwd, &cp->bwd_data, &cp->bwd_weights};
    for (int i = 0; i < 3; i++) {
        QS_TRY(qs_dnnl_weights_reorder(&wl[i]->reorder, ctx, prims[i], i == 2, &wuser, i < 2, &wl[i]->needed,
                                       &wl[i]->bytes));
        wl[i]->bytes = qs_cpu_align(wl[i]->bytes);
    }

    cp->dx_bytes = qs_cpu_align((size_t)(d->N * d->H * d->W * d->C) * sizeof(float));
    size_t ws_f = cp->w_fwd.bytes + max_sz(cp->fwd.scratch_bytes, cp->w_fwd.reorder.scratch_bytes);
    size_t ws_b = cp->w_bwd.bytes + cp->dx_bytes + max_sz(cp->bwd_data.scratch_bytes, cp->w_bwd.reorder.scratch_bytes);
    size_t ws_w = cp->dw_user.bytes + max_sz(cp->bwd_weights.scratch_bytes, cp->dw_user.reorder.scratch_bytes);
    cp->ws_bytes = qs_cpu_align(max_sz(ws_f, max_sz(ws_b, ws_w)));
    return QS_OK;
}

qs_status qs_cpu_conv_plan(qs_backend *be, const qs_conv_desc *d, void **plan, size_t *workspace) {
    if (!d || !plan || !workspace) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_plan: NULL descriptor or output");
    *plan = NULL;
    *workspace = 0;
    qs_conv_desc dd = *d;
    QS_TRY(qs_conv_desc_finish(&dd));
    if (dd.P != d->P || dd.Q != d->Q)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "conv_plan: descriptor has P,Q = %lld,%lld but the geometry gives %lld,%lld; call "
                       "qs_conv_desc_finish() first",
                       (long long)d->P, (long long)d->Q, (long long)dd.P, (long long)dd.Q);
    QS_TRY(qs_cpu_prec_check(be, d->prec, "conv_plan"));
    if (d->prec != QS_PREC_FP32)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "conv_plan: %s convolution is not implemented yet", qs_precision_name(d->prec));
    qs_cpu_conv_plan_t *cp = calloc(1, sizeof *cp);
    if (!cp) return QS_FAIL(QS_ERR_OOM, "conv_plan: out of memory for the plan");
    cp->hdr.kind = QS_CPU_PLAN_CONV;
    cp->hdr.prec = d->prec;
    cp->d = dd;
    qs_status st = conv_build(cp, &qs_cpu_be(be)->dnnl);
    if (st != QS_OK) {
        qs_cpu_conv_plan_destroy(cp);
        return qs_error_wrap(st, "conv_plan (N=%lld H=%lld W=%lld C=%lld K=%lld R=%lld S=%lld): ", (long long)d->N,
                             (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K, (long long)d->R,
                             (long long)d->S);
    }
    *plan = cp;
    *workspace = cp->ws_bytes;
    return QS_OK;
}

/* Convert the caller's OIHW weights for a primitive: returns the pointer to pass to it
 * (w itself or the reordered copy at the start of ws). */
static qs_status conv_prepare_w(qs_cpu_wlayout *wl, const qs_dnnl_ctx *ctx, const void *w, void *ws,
                                void **out) {
    *out = (void *)w;
    if (!wl->needed) return QS_OK;
    void *h[2] = {(void *)w, ws};
    QS_TRY(qs_dnnl_prim_exec(&wl->reorder, ctx, h, ws_at(ws, wl->bytes), "convolution weight reorder"));
    *out = ws;
    return QS_OK;
}

static qs_status conv_ws_check(const qs_cpu_conv_plan_t *cp, const void *ws, const char *what) {
    if (cp->ws_bytes && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan needs %zu bytes of workspace but ws is NULL", what,
                       cp->ws_bytes);
    return QS_OK;
}

qs_status qs_cpu_conv_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *xo,
                              const qs_operand *wo, const float *b, float *y, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_CONV, "conv_forward"));
    qs_cpu_conv_plan_t *cp = plan;
    QS_TRY(qs_cpu_operand_check(xo, QS_F32, false, "conv_forward x"));
    QS_TRY(qs_cpu_operand_check(wo, QS_F32, false, "conv_forward w"));
    const void *x = xo->data, *w = wo->data;
    if (!y || (cp->d.has_bias && !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv_forward: NULL x, w, y or (planned with bias) b");
    QS_TRY(conv_ws_check(cp, ws, "conv_forward"));
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    void *wp;
    QS_TRY(conv_prepare_w(&cp->w_fwd, ctx, w, ws, &wp));
    void *h[4] = {(void *)x, wp, cp->d.has_bias ? (void *)b : (void *)y, y}; /* SRC, WEIGHTS, [BIAS,] DST */
    return qs_dnnl_prim_exec(&cp->fwd, ctx, h, ws_at(ws, cp->w_fwd.bytes), "convolution forward");
}

qs_status qs_cpu_conv_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dyo,
                                    const qs_operand *wo, float *dx, bool accumulate, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_CONV, "conv_backward_data"));
    qs_cpu_conv_plan_t *cp = plan;
    QS_TRY(qs_cpu_operand_check(dyo, QS_F32, false, "conv_backward_data dy"));
    QS_TRY(qs_cpu_operand_check(wo, QS_F32, false, "conv_backward_data w"));
    const void *dy = dyo->data, *w = wo->data;
    if (!dx) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_data: NULL dy, w or dx");
    QS_TRY(conv_ws_check(cp, ws, "conv_backward_data"));
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    void *wp;
    QS_TRY(conv_prepare_w(&cp->w_bwd, ctx, w, ws, &wp));
    float *tmp = ws_at(ws, cp->w_bwd.bytes);
    void *h[3] = {(void *)dy, wp, accumulate ? (void *)tmp : (void *)dx};
    QS_TRY(qs_dnnl_prim_exec(&cp->bwd_data, ctx, h, ws_at(ws, cp->w_bwd.bytes + cp->dx_bytes), "convolution backward-data"));
    if (accumulate) qs_cpu_copy_or_add(cp->d.N * cp->d.H * cp->d.W * cp->d.C, tmp, dx, true);
    return QS_OK;
}

qs_status qs_cpu_conv_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dyo,
                                       const qs_operand *xo, float *dw, float *db, void *ws) {
    QS_TRY(qs_cpu_plan_check(plan, QS_CPU_PLAN_CONV, "conv_backward_weights"));
    qs_cpu_conv_plan_t *cp = plan;
    QS_TRY(qs_cpu_operand_check(dyo, QS_F32, false, "conv_backward_weights dy"));
    QS_TRY(qs_cpu_operand_check(xo, QS_F32, false, "conv_backward_weights x"));
    const void *dy = dyo->data, *x = xo->data;
    if (!dw) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_weights: NULL dy, x or dw");
    if (db && !cp->d.has_bias)
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_weights: db given but the plan has no bias; pass NULL");
    if (!db && cp->d.has_bias)
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_weights: the plan has a bias but db is NULL");
    QS_TRY(conv_ws_check(cp, ws, "conv_backward_weights"));
    const qs_dnnl_ctx *ctx = &qs_cpu_be(be)->dnnl;
    void *dwp = cp->dw_user.needed ? ws : (void *)dw;
    void *h[4] = {(void *)x, (void *)dy, dwp, db}; /* SRC, DIFF_DST, DIFF_WEIGHTS, [DIFF_BIAS] */
    void *scratch = ws_at(ws, cp->dw_user.bytes);
    QS_TRY(qs_dnnl_prim_exec(&cp->bwd_weights, ctx, h, scratch, "convolution backward-weights"));
    if (!cp->dw_user.needed) return QS_OK;
    void *hr[2] = {dwp, dw};
    return qs_dnnl_prim_exec(&cp->dw_user.reorder, ctx, hr, scratch, "convolution weight-gradient reorder");
}

const char *qs_cpu_conv_impl_name(const void *plan, int dir) {
    const qs_cpu_conv_plan_t *cp = plan;
    if (!cp || cp->hdr.kind != QS_CPU_PLAN_CONV) return "?";
    return qs_dnnl_prim_impl(dir == 0 ? &cp->fwd : dir == 1 ? &cp->bwd_data : &cp->bwd_weights);
}
