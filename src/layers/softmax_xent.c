/* src/layers/softmax_xent.c — fused softmax + cross-entropy: logits (N,classes) and the
 * model's labels → per-sample loss (N); probabilities saved for backward. */
#include "layers/layer_util.h"

static qs_status xent_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 2));
    n->out_ndim = 1;
    n->out_shape[0] = 1;
    int64_t classes = qs_layer_input(m, n, 0)->out_shape[1];
    n->flops_fwd = 5.0 * (double)classes;
    n->flops_bwd_data = 2.0 * (double)classes;
    n->bytes_saved_for_backward = (size_t)classes * sizeof(float);
    return QS_OK;
}

static qs_status xent_setup(qs_model *m, qs_node *n) {
    n->saved_bytes[0] = (size_t)(m->batch * qs_layer_input(m, n, 0)->out_shape[1]) * sizeof(float);
    return m->be->ops->alloc(m->be, n->saved_bytes[0], &n->saved[0]);
}

static qs_status xent_forward(qs_model *m, qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    return m->be->ops->softmax_xent_forward(m->be, m->stream, m->batch, in->out_shape[1], in->y, m->labels, n->y,
                                            n->saved[0]);
}

/* d(mean loss · loss_scale)/d logits. */
static qs_status xent_backward(qs_model *m, qs_node *n) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    if (acc) return QS_FAIL(QS_ERR_UNSUPPORTED, "loss %s: its logits have several consumers", n->name);
    const qs_node *in = qs_layer_input(m, n, 0);
    return m->be->ops->softmax_xent_backward(m->be, m->stream, m->batch, in->out_shape[1], n->saved[0], m->labels,
                                             m->loss_scale / (float)m->batch, dx);
}

const qs_layer_impl qs_layer_softmax_xent = {.kind_name = "CrossEntropyLoss", .infer = xent_infer,
                                             .setup = xent_setup, .forward = xent_forward,
                                             .backward_data = xent_backward};
