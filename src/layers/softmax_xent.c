/* src/layers/softmax_xent.c — fused softmax + cross-entropy: logits (N, [T,] classes) and the
 * model's labels (N·label_len) → per-label loss (N) or (N, T); probabilities saved for backward.
 * The mean is over all N·label_len labels. */
#include "layers/layer_util.h"

static qs_status xent_infer(qs_model *m, qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    if (in->out_ndim != 2 && in->out_ndim != 3)
        return QS_FAIL(QS_ERR_MISMATCH, "expects (N, classes) or (N, T, classes) logits, but %s is %d-d", in->name,
                       in->out_ndim);
    const int64_t classes = in->out_shape[in->out_ndim - 1];
    const int64_t rows = qs_layer_out_numel_per_sample(in) / classes; /* labels per sample */
    n->out_ndim = rows == 1 ? 1 : 2;
    n->out_shape[0] = 1;
    n->out_shape[1] = rows;
    n->flops_fwd = 5.0 * (double)(rows * classes);
    n->flops_bwd_data = 2.0 * (double)(rows * classes);
    n->bytes_saved_for_backward = (size_t)(rows * classes) * sizeof(float);
    return QS_OK;
}

/* Rows of the loss: one per label. */
static int64_t xent_rows(const qs_model *m) { return m->batch * m->label_len; }
static int64_t xent_classes(const qs_model *m, const qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    return in->out_shape[in->out_ndim - 1];
}

/* saved[0]: the probabilities; no dy (the loss is where backward starts). */
static void xent_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    (void)f;
    d->saved[0] = (qs_buffer_decl){.bytes = (size_t)(xent_rows(m) * xent_classes(m, n)) * sizeof(float),
                                   .dtype = QS_F32};
    d->grad = QS_GRAD_NONE;
}

static qs_status xent_forward(qs_model *m, qs_node *n) {
    return m->be->ops->softmax_xent_forward(m->be, m->stream, xent_rows(m), xent_classes(m, n),
                                            qs_layer_input(m, n, 0)->y, m->labels, n->y, n->saved[0]);
}

/* d(mean loss · loss_scale)/d logits. */
static qs_status xent_backward(qs_model *m, qs_node *n) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    if (acc) return QS_FAIL(QS_ERR_UNSUPPORTED, "loss %s: its logits have several consumers", n->name);
    return m->be->ops->softmax_xent_backward(m->be, m->stream, xent_rows(m), xent_classes(m, n), n->saved[0], m->labels,
                                             m->loss_scale / (float)xent_rows(m), dx);
}

const qs_layer_impl qs_layer_softmax_xent = {.kind_name = "CrossEntropyLoss", .infer = xent_infer,
                                             .declare = xent_declare, .forward = xent_forward,
                                             .backward_data = xent_backward};
