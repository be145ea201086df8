/* src/layers/layernorm.c — LayerNorm over the last dimension (PyTorch nn.LayerNorm(C)): weight
 * 1, bias 0; saves each row's mean and 1/σ. Parameter gradients come with the input gradient
 * (one backend op), so there is no separate weight pass. */
#include "layers/layer_util.h"

static qs_status ln_infer(qs_model *m, qs_node *n) {
    const qs_node *x = qs_layer_input(m, n, 0);
    if (!(n->cfg.ln.eps > 0)) return QS_FAIL(QS_ERR_INVALID_ARG, "LayerNorm eps must be > 0 (got %g)", n->cfg.ln.eps);
    qs_layer_same_shape(n, x);
    const int64_t C = qs_layer_last_dim(x), rows = qs_layer_rows_per_sample(x);
    QS_TRY(qs_layer_declare_param(m, n, "weight", 1, &C));
    QS_TRY(qs_layer_declare_param(m, n, "bias", 1, &C));
    n->flops_fwd = 8.0 * (double)(rows * C);
    n->flops_bwd_data = 10.0 * (double)(rows * C);
    n->bytes_saved_for_backward = (size_t)(rows * C + 2 * rows) * sizeof(float);
    return QS_OK;
}

static void ln_init(qs_model *m, qs_node *n, float *hp, void *hb, uint64_t seed) {
    (void)hb;
    (void)seed;
    const int64_t C = m->params.entries[n->param[0]].numel;
    qs_layer_init_const(qs_layer_host_param(m, n, 0, hp), C, 1.0f);
    qs_layer_init_const(qs_layer_host_param(m, n, 1, hp), C, 0.0f);
}

static int64_t ln_rows(const qs_model *m, const qs_node *n) { return m->batch * qs_layer_rows_per_sample(n); }

/* saved[0], saved[1]: each row's mean and 1/σ. */
static void ln_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    (void)f;
    d->saved[0] = d->saved[1] = (qs_buffer_decl){.bytes = (size_t)ln_rows(m, n) * sizeof(float), .dtype = QS_F32};
}

static qs_status ln_forward(qs_model *m, qs_node *n) {
    return m->be->ops->layernorm_forward(m->be, m->stream, ln_rows(m, n), qs_layer_last_dim(n),
                                         qs_layer_input(m, n, 0)->y, qs_model_param_ptr(m, n->param[0]),
                                         qs_model_param_ptr(m, n->param[1]), n->cfg.ln.eps, n->y, n->saved[0],
                                         n->saved[1]);
}

static qs_status ln_backward(qs_model *m, qs_node *n) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    return m->be->ops->layernorm_backward(m->be, m->stream, ln_rows(m, n), qs_layer_last_dim(n),
                                          qs_layer_input(m, n, 0)->y, n->dy, qs_model_param_ptr(m, n->param[0]),
                                          n->saved[0], n->saved[1], dx, acc, qs_model_grad_ptr(m, n->param[0]),
                                          qs_model_grad_ptr(m, n->param[1]));
}

const qs_layer_impl qs_layer_layernorm = {.kind_name = "LayerNorm", .infer = ln_infer, .init = ln_init,
                                          .declare = ln_declare, .forward = ln_forward, .backward_data = ln_backward};
