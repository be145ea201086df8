/* src/layers/activation.c — GELU (tanh approximation; backward from the input) and Tanh
 * (backward from the output), elementwise over any shape. */
#include "layers/layer_util.h"

static qs_status act_infer(qs_model *m, qs_node *n) {
    qs_layer_same_shape(n, qs_layer_input(m, n, 0));
    n->flops_fwd = 10.0 * (double)qs_layer_out_numel_per_sample(n);
    n->flops_bwd_data = n->flops_fwd;
    n->bytes_saved_for_backward = (size_t)qs_layer_out_numel_per_sample(n) * sizeof(float);
    return QS_OK;
}

static int64_t act_numel(const qs_model *m, const qs_node *n) { return m->batch * qs_layer_out_numel_per_sample(n); }

/* The backward of an activation whose op reads one saved tensor (x or y, act_numel elements):
 * dx (=, or += where another consumer wrote first) from dy; nothing when the input needs no
 * gradient. */
typedef qs_status (*act_backward_op)(qs_backend *be, qs_stream *s, int64_t n, const float *saved, const float *dy,
                                     float *dx, bool accumulate);
static qs_status act_backward(qs_model *m, qs_node *n, const float *saved, act_backward_op op) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    return op(m->be, m->stream, act_numel(m, n), saved, n->dy, dx, acc);
}

static qs_status gelu_forward(qs_model *m, qs_node *n) {
    return m->be->ops->gelu_forward(m->be, m->stream, act_numel(m, n), qs_layer_input(m, n, 0)->y, n->y);
}

static qs_status gelu_backward(qs_model *m, qs_node *n) {
    return act_backward(m, n, qs_layer_input(m, n, 0)->y, m->be->ops->gelu_backward);
}

const qs_layer_impl qs_layer_gelu = {.kind_name = "GELU", .infer = act_infer, .forward = gelu_forward,
                                     .backward_data = gelu_backward};

static qs_status tanh_forward(qs_model *m, qs_node *n) {
    return m->be->ops->tanh_forward(m->be, m->stream, act_numel(m, n), qs_layer_input(m, n, 0)->y, n->y);
}

static qs_status tanh_backward(qs_model *m, qs_node *n) { return act_backward(m, n, n->y, m->be->ops->tanh_backward); }

const qs_layer_impl qs_layer_tanh = {.kind_name = "Tanh", .infer = act_infer, .forward = tanh_forward,
                                     .backward_data = tanh_backward};
