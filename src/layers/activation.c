/* src/layers/activation.c — GELU (tanh approximation) and SiLU (backward from the input), and
 * Tanh (backward from the output), elementwise over any shape. */
#include "layers/layer_util.h"

static qs_status act_infer(qs_model *m, qs_node *n) {
    qs_layer_same_shape(n, qs_layer_input(m, n, 0));
    n->flops_fwd = 10.0 * (double)qs_layer_out_numel_per_sample(n);
    n->flops_bwd_data = n->flops_fwd;
    n->bytes_saved_for_backward = (size_t)qs_layer_out_numel_per_sample(n) * sizeof(float);
    return QS_OK;
}

static int64_t act_numel(const qs_model *m, const qs_node *n) { return m->batch * qs_layer_out_numel_per_sample(n); }

/* y = f(x) over the node's elements. */
typedef qs_status (*act_fwd_op)(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
static qs_status act_forward(qs_model *m, qs_node *n, act_fwd_op op) {
    return op(m->be, m->stream, act_numel(m, n), qs_layer_input(m, n, 0)->y, n->y);
}

/* dx (+)= dy·f'(…) from `from`: the input's y (GELU, SiLU) or the node's own (Tanh). */
typedef qs_status (*act_bwd_op)(qs_backend *be, qs_stream *s, int64_t n, const float *from, const float *dy,
                                float *dx, bool accumulate);
static qs_status act_backward(qs_model *m, qs_node *n, act_bwd_op op, const float *from) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    return op(m->be, m->stream, act_numel(m, n), from, n->dy, dx, acc);
}

static qs_status gelu_forward(qs_model *m, qs_node *n) { return act_forward(m, n, m->be->ops->gelu_forward); }
static qs_status gelu_backward(qs_model *m, qs_node *n) {
    return act_backward(m, n, m->be->ops->gelu_backward, qs_layer_input(m, n, 0)->y);
}
const qs_layer_impl qs_layer_gelu = {.kind_name = "GELU", .infer = act_infer, .forward = gelu_forward,
                                     .backward_data = gelu_backward};

static qs_status silu_forward(qs_model *m, qs_node *n) { return act_forward(m, n, m->be->ops->silu_forward); }
static qs_status silu_backward(qs_model *m, qs_node *n) {
    return act_backward(m, n, m->be->ops->silu_backward, qs_layer_input(m, n, 0)->y);
}
const qs_layer_impl qs_layer_silu = {.kind_name = "SiLU", .infer = act_infer, .forward = silu_forward,
                                     .backward_data = silu_backward};

static qs_status tanh_forward(qs_model *m, qs_node *n) { return act_forward(m, n, m->be->ops->tanh_forward); }
static qs_status tanh_backward(qs_model *m, qs_node *n) { return act_backward(m, n, m->be->ops->tanh_backward, n->y); }
const qs_layer_impl qs_layer_tanh = {.kind_name = "Tanh", .infer = act_infer, .forward = tanh_forward,
                                     .backward_data = tanh_backward};
