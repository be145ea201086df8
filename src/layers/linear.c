/* src/layers/linear.c — Linear: Y(N,out) = X(N,in)·Wᵀ + b, W (out,in) as in PyTorch. */
#include <math.h>
#include "layers/gemm_quant.h"

static qs_status linear_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 2));
    int64_t in = qs_layer_input(m, n, 0)->out_shape[1], out = n->cfg.linear.out_features;
    if (out < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "out_features must be ≥ 1 (got %lld)", (long long)out);
    n->out_ndim = 2;
    n->out_shape[0] = 1;
    n->out_shape[1] = out;
    QS_TRY(qs_layer_declare_param(m, n, "weight", 2, (int64_t[]){out, in}));
    if (n->cfg.linear.bias) QS_TRY(qs_layer_declare_param(m, n, "bias", 1, (int64_t[]){out}));
    n->flops_fwd = 2.0 * (double)in * (double)out;
    n->flops_bwd_data = n->flops_fwd;
    n->flops_bwd_weights = n->flops_fwd;
    n->bytes_saved_for_backward = (size_t)in * sizeof(float);
    return QS_OK;
}

/* PyTorch default: kaiming_uniform(a=√5) → U(±1/√fan_in) for weight and bias. */
static void linear_init(qs_model *m, qs_node *n, float *hp, void *hb, uint64_t seed) {
    const qs_table_entry *w = &m->params.entries[n->param[0]];
    float bound = 1.0f / sqrtf((float)w->shape[1]);
    for (int k = 0; k < n->n_params; k++) {
        const qs_table_entry *e = &m->params.entries[n->param[k]];
        qs_layer_init_uniform(qs_layer_host_param(m, n, k, hp), e->numel, bound, seed, (uint64_t)n->param[k]);
    }
}

/* The node's matrices: W (out, in), dY (batch, out). */
static qs_gemm_shape linear_shape(qs_model *m, const qs_node *n) {
    const int64_t out = n->out_shape[1], in = qs_layer_input(m, n, 0)->out_shape[1];
    return (qs_gemm_shape){.w_rows = out, .w_cols = in, .dy_rows = m->batch, .dy_cols = out};
}

static qs_status linear_setup(qs_model *m, qs_node *n) {
    qs_linear_desc d = {.M = m->batch, .N = n->out_shape[1], .K = qs_layer_input(m, n, 0)->out_shape[1],
                        .has_bias = n->cfg.linear.bias, .prec = n->prec};
    QS_TRY(m->be->ops->linear_plan(m->be, &d, &n->plan, &n->workspace));
    return qs_gemm_quant_setup(m, n, linear_shape(m, n));
}

static qs_status linear_forward(qs_model *m, qs_node *n) {
    return qs_gemm_forward(m, n, linear_shape(m, n), m->be->ops->linear_forward);
}

static qs_status linear_backward_data(qs_model *m, qs_node *n) {
    return qs_gemm_backward_data(m, n, linear_shape(m, n), m->be->ops->linear_backward_data);
}

static qs_status linear_backward_weights(qs_model *m, qs_node *n) {
    return qs_gemm_backward_weights(m, n, linear_shape(m, n), m->be->ops->linear_backward_weights);
}

const qs_layer_impl qs_layer_linear = {
    .kind_name = "Linear", .infer = linear_infer, .init = linear_init, .setup = linear_setup,
    .forward = linear_forward, .backward_data = linear_backward_data,
    .backward_weights = linear_backward_weights,
};
