/* src/layers/linear.c — Linear: Y(rows,out) = X(rows,in)·Wᵀ + b, W (out,in) as in PyTorch. The
 * input is (N, in) or a sequence (N, T, in); rows = N·T then, and the output keeps the shape
 * with the last dimension replaced. The weight may be tied to another node's parameter. */
#include <math.h>
#include "layers/gemm_quant.h"

/* Rows of X per sample (1 for (N, in), T for (N, T, in)). */
static int64_t linear_rows_per_sample(const qs_model *m, const qs_node *n) {
    const qs_node *in = &m->nodes[n->inputs[0]];
    return qs_layer_out_numel_per_sample(in) / in->out_shape[in->out_ndim - 1];
}

/* Declare or check the weight: own (out, in) parameter, or the tied one of that shape. */
static qs_status linear_weight(qs_model *m, qs_node *n, int64_t in, int64_t out) {
    if (!n->cfg.linear.tied) return qs_layer_declare_param(m, n, "weight", 2, (int64_t[]){out, in});
    const int t = n->cfg.linear.tie_param;
    if (t < 0 || t >= m->params.count)
        return QS_FAIL(QS_ERR_INVALID_ARG, "tied weight: parameter %d does not exist", t);
    const qs_table_entry *e = &m->params.entries[t];
    if (e->ndim != 2 || e->shape[0] != out || e->shape[1] != in)
        return QS_FAIL(QS_ERR_MISMATCH, "tied weight %s is not (%lld, %lld)", e->name, (long long)out, (long long)in);
    if (n->cfg.linear.bias) return QS_FAIL(QS_ERR_INVALID_ARG, "a Linear with a tied weight has no bias");
    n->tied_param = t;
    return QS_OK;
}

static qs_status linear_infer(qs_model *m, qs_node *n) {
    const qs_node *x = qs_layer_input(m, n, 0);
    if (x->out_ndim != 2 && x->out_ndim != 3)
        return QS_FAIL(QS_ERR_MISMATCH, "expects an (N, features) or (N, T, features) input, but %s is %d-d", x->name,
                       x->out_ndim);
    int64_t in = x->out_shape[x->out_ndim - 1], out = n->cfg.linear.out_features;
    if (out < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "out_features must be ≥ 1 (got %lld)", (long long)out);
    n->out_ndim = x->out_ndim;
    for (int d = 0; d < x->out_ndim; d++) n->out_shape[d] = x->out_shape[d];
    n->out_shape[0] = 1;
    n->out_shape[n->out_ndim - 1] = out;
    QS_TRY(linear_weight(m, n, in, out));
    if (n->cfg.linear.bias) QS_TRY(qs_layer_declare_param(m, n, "bias", 1, (int64_t[]){out}));
    const double rows = (double)linear_rows_per_sample(m, n);
    n->flops_fwd = 2.0 * rows * (double)in * (double)out;
    n->flops_bwd_data = n->flops_fwd;
    n->flops_bwd_weights = n->flops_fwd;
    n->bytes_saved_for_backward = (size_t)(rows * (double)in) * sizeof(float);
    return QS_OK;
}

/* PyTorch default: kaiming_uniform(a=√5) → U(±1/√fan_in) for weight and bias (a tied weight
 * is initialised by its owner). */
static void linear_init(qs_model *m, qs_node *n, float *hp, void *hb, uint64_t seed) {
    (void)hb;
    if (n->n_params == 0) return;
    const qs_table_entry *w = &m->params.entries[n->param[0]];
    float bound = 1.0f / sqrtf((float)w->shape[1]);
    for (int k = 0; k < n->n_params; k++) {
        const qs_table_entry *e = &m->params.entries[n->param[k]];
        qs_layer_init_uniform(qs_layer_host_param(m, n, k, hp), e->numel, bound, seed, (uint64_t)n->param[k]);
    }
}

/* The node's matrices: W (out, in), dY (rows, out). */
static qs_gemm_shape linear_shape(const qs_model *m, const qs_node *n) {
    const qs_node *x = &m->nodes[n->inputs[0]];
    const int64_t out = n->out_shape[n->out_ndim - 1], in = x->out_shape[x->out_ndim - 1];
    return (qs_gemm_shape){.w_rows = out, .w_cols = in, .dy_rows = m->batch * linear_rows_per_sample(m, n),
                           .dy_cols = out, .transposable = true};
}

static qs_status linear_setup(qs_model *m, qs_node *n) {
    const qs_gemm_shape sh = linear_shape(m, n);
    qs_linear_desc d = {.M = sh.dy_rows, .N = sh.w_rows, .K = sh.w_cols, .has_bias = n->cfg.linear.bias,
                        .prec = n->prec, .y_dt = n->out_dtype, .dx_dt = qs_gemm_dx_dtype(m, n)};
    QS_TRY(m->be->ops->linear_plan(m->be, &d, &n->plan, &n->workspace));
    qs_gemm_quant_setup(m, n, sh);
    return QS_OK;
}

static void linear_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    qs_gemm_quant_declare(m, n, linear_shape(m, n), f, d);
}

static qs_status linear_bind(qs_model *m, qs_node *n) { return qs_gemm_quant_bind(m, n, linear_shape(m, n)); }

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
    .kind_name = "Linear", .infer = linear_infer, .init = linear_init, .declare = linear_declare,
    .setup = linear_setup, .bind = linear_bind, .forward = linear_forward, .backward_data = linear_backward_data,
    .backward_weights = linear_backward_weights,
};
