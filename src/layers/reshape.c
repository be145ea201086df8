/* src/layers/reshape.c — Flatten: (N,H,W,C) channels-last → (N, C·H·W) in PyTorch's (C,H,W)
 * order, so a Linear after it keeps PyTorch's weight layout; and Cast: element-type
 * conversion as a graph node (RNE), with the gradient cast back. */
#include "layers/gemm_quant.h"

static qs_status flatten_infer(qs_model *m, qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    n->out_ndim = 2;
    n->out_shape[0] = 1;
    n->out_shape[1] = qs_shape_numel(in->out_ndim - 1, in->out_shape + 1);
    return QS_OK;
}

/* Dims of the input as (H, W, C); a 2-d input is (1, 1, F). */
static void flatten_hwc(qs_model *m, const qs_node *n, int64_t *h, int64_t *w, int64_t *c) {
    const qs_node *in = qs_layer_input(m, n, 0);
    *h = in->out_ndim == 4 ? in->out_shape[1] : 1;
    *w = in->out_ndim == 4 ? in->out_shape[2] : 1;
    *c = in->out_shape[in->out_ndim - 1];
}

static qs_status flatten_forward(qs_model *m, qs_node *n) {
    int64_t h, w, c;
    flatten_hwc(m, n, &h, &w, &c);
    const float *x = qs_layer_input(m, n, 0)->y;
    if (h * w == 1) return m->be->ops->accumulate(m->be, m->stream, m->batch * c, x, n->y, false);
    return m->be->ops->nhwc_to_nchw(m->be, m->stream, m->batch, h, w, c, x, n->y);
}

static qs_status flatten_backward(qs_model *m, qs_node *n) {
    int64_t h, w, c;
    flatten_hwc(m, n, &h, &w, &c);
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    if (h * w == 1) return m->be->ops->accumulate(m->be, m->stream, m->batch * c, n->dy, dx, acc);
    return m->be->ops->nchw_to_nhwc(m->be, m->stream, m->batch, h, w, c, n->dy, dx, acc);
}

const qs_layer_impl qs_layer_flatten = {.kind_name = "Flatten", .infer = flatten_infer,
                                        .forward = flatten_forward, .backward_data = flatten_backward};

/* Whether a cast's output dtype carries a per-tensor scale (kept in saved[0]). */
static bool cast_scaled(qs_dtype dt) { return dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2; }

static qs_status cast_infer(qs_model *m, qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    qs_dtype to = n->cfg.cast.to;
    bool plain = to == QS_F32 || to == QS_BF16 || to == QS_F16;
    if (!plain && !(n->cfg.cast.straight_through && cast_scaled(to)))
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "cast to %s is not supported (f32, bf16, f16; s8 and fp8 only as quantizing casts)",
                       qs_dtype_name(to));
    if (n->cfg.cast.straight_through && in->out_dtype != QS_F32)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "a quantizing cast needs an f32 input (got %s)", qs_dtype_name(in->out_dtype));
    n->out_ndim = in->out_ndim;
    for (int i = 0; i < in->out_ndim; i++) n->out_shape[i] = in->out_shape[i];
    n->out_dtype = to;
    n->flops_fwd = (double)qs_layer_out_numel_per_sample(n);
    n->flops_bwd_data = n->flops_fwd;
    return QS_OK;
}

/* Whether a quantizing cast keeps its output transposed in saved[1] (Xᵀ for the FP8 products
 * of the Linear nodes it feeds, gemm_quant.h): the output is FP8, the backend reads
 * transposed copies, and every consumer is a Linear or a Conv2d run as one (which see the
 * output as a 2-D matrix). */
static bool cast_keeps_transposed(const qs_model *m, const qs_node *n, const qs_mem_facts *f) {
    if (!n->cfg.cast.straight_through || !f->fp8_wants_transposed) return false;
    if (n->out_dtype != QS_F8E4M3 && n->out_dtype != QS_F8E5M2) return false;
    const int self = (int)(n - m->nodes);
    int linear = 0;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_inputs; k++)
            if (m->nodes[i].inputs[k] == self) {
                if (m->nodes[i].kind != QS_NODE_LINEAR && !qs_conv_as_linear(&m->nodes[i], f)) return false;
                linear++;
            }
    return linear > 0;
}

/* The cast's output as a 2-D (rows, last dimension) matrix. */
static void cast_matrix(const qs_model *m, const qs_node *n, int64_t *rows, int64_t *cols) {
    *cols = n->out_shape[n->out_ndim - 1];
    *rows = m->batch * qs_layer_out_numel_per_sample(n) / *cols;
}

/* saved[0]: the scale; saved[1]: the transposed copy (cast_keeps_transposed); saved[2]: the
 * amax history of FP8 delayed scaling (qs_model.fp8_amax_history), carried from step to step.
 * The gradient: a plain cast's arrives in its output dtype; a straight-through cast shares its
 * input's (QS_GRAD_SHARE_INPUT: its backward is then the identity in place). */
static void cast_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    if (d->grad == QS_GRAD_OWN && n->cfg.cast.straight_through) d->grad = QS_GRAD_SHARE_INPUT;
    if (!n->cfg.cast.straight_through) d->dy = d->out;
    if (!cast_scaled(n->out_dtype)) return;
    d->saved[0] = (qs_buffer_decl){.bytes = sizeof(float), .dtype = QS_F32};
    if (n->cfg.cast.straight_through && m->fp8_amax_history > 0 &&
        (n->out_dtype == QS_F8E4M3 || n->out_dtype == QS_F8E5M2))
        d->saved[2] = (qs_buffer_decl){.bytes = qs_fp8_history_bytes(m), .dtype = QS_F32, .persistent = true};
    if (cast_keeps_transposed(m, n, f))
        d->saved[1] = (qs_buffer_decl){.bytes = (size_t)(m->batch * qs_layer_out_numel_per_sample(n)),
                                       .dtype = n->out_dtype};
}

static qs_status cast_forward(qs_model *m, qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    const int64_t count = m->batch * qs_layer_out_numel_per_sample(n);
    if (n->cfg.cast.straight_through) { /* round to nearest: forward values must not be noisy */
        int64_t rows, cols;
        cast_matrix(m, n, &rows, &cols);
        qs_quant_delayed dl;
        return m->be->ops->quantize(m->be, m->stream, rows, cols, in->y, NULL, n->out_dtype, n->y, n->saved[0], false,
                                    NULL, n->saved[1], qs_fp8_delayed(m, n->saved[2], &dl));
    }
    return m->be->ops->cast(m->be, m->stream, count, in->y, in->out_dtype, n->y, n->out_dtype);
}

/* Plain casts: the gradient arrives in the cast's output dtype and is cast back to the
 * input's. Straight-through casts: the FP32 gradient passes unchanged (in place when the
 * cast shares its input's gradient buffer). An accumulating target is not supported for
 * plain casts (a plain cast has one consumer by construction). */
static qs_status cast_backward(qs_model *m, qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    bool acc;
    void *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    const int64_t count = m->batch * qs_layer_out_numel_per_sample(n);
    if (n->cfg.cast.straight_through) {
        if (n->dy_alias) return QS_OK;
        return m->be->ops->accumulate(m->be, m->stream, count, n->dy, dx, acc);
    }
    if (acc) return QS_FAIL(QS_ERR_UNSUPPORTED, "cast %s: its input has several consumers", n->name);
    return m->be->ops->cast(m->be, m->stream, count, n->dy, n->out_dtype, dx, in->out_dtype);
}

const qs_layer_impl qs_layer_cast = {.kind_name = "Cast", .infer = cast_infer, .declare = cast_declare,
                                     .forward = cast_forward, .backward_data = cast_backward};
