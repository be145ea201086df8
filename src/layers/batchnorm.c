/* src/layers/batchnorm.c — BatchNorm2d over channels-last input (N,H,W,C): statistics per
 * channel over N·H·W rows; running stats updated in training (PyTorch semantics). Its
 * backward computes dx, dγ and dβ in one fused op, accounted as backward-data. With
 * cfg.bn.relu (qs_model_fuse) it also applies the following ReLU and its backward. Its input
 * is FP32, or BF16 where a BF16 convolution writes BF16 for it (qs_model_bf16_conv_outputs);
 * its gradient dx is FP32, or, for such a convolution in a fused model, that convolution's
 * quantized BF16 dY (qs_gemm_dy_from_reader). With cfg.bn.add (qs_model_fuse) the Add that
 * reads it is fused in: it adds the Add's other input (the residual) before the ReLU and
 * writes the residual's gradient in its backward. A BatchNorm whose only reader is an Add it
 * does not own (the residual of another one, or an unfused Add) reads the Add's gradient and
 * ReLU mask itself (qs_bn_grad_from_add). */
#include "layers/gemm_quant.h"

static qs_status bn_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 4));
    const qs_node *in = qs_layer_input(m, n, 0);
    int64_t C = in->out_shape[3];
    n->out_ndim = 4;
    for (int i = 0; i < 4; i++) n->out_shape[i] = in->out_shape[i];
    if (n->cfg.bn.eps <= 0) n->cfg.bn.eps = 1e-5f;
    if (n->cfg.bn.momentum <= 0) n->cfg.bn.momentum = 0.1f;
    QS_TRY(qs_layer_declare_param(m, n, "weight", 1, (int64_t[]){C}));
    QS_TRY(qs_layer_declare_param(m, n, "bias", 1, (int64_t[]){C}));
    QS_TRY(qs_layer_declare_buffer(m, n, "running_mean", QS_F32, 1, (int64_t[]){C}));
    QS_TRY(qs_layer_declare_buffer(m, n, "running_var", QS_F32, 1, (int64_t[]){C}));
    QS_TRY(qs_layer_declare_buffer(m, n, "num_batches_tracked", QS_I64, 0, NULL));
    int64_t per_sample = qs_layer_out_numel_per_sample(n);
    n->flops_fwd = 8.0 * (double)per_sample;
    n->flops_bwd_data = 10.0 * (double)per_sample;
    n->bytes_saved_for_backward = (size_t)per_sample * sizeof(float);
    return QS_OK;
}

/* γ = 1, β = 0, running_mean = 0, running_var = 1. */
static void bn_init(qs_model *m, qs_node *n, float *hp, void *hb, uint64_t seed) {
    int64_t C = m->params.entries[n->param[0]].numel;
    qs_layer_init_const(qs_layer_host_param(m, n, 0, hp), C, 1.0f);
    qs_layer_init_const(qs_layer_host_param(m, n, 1, hp), C, 0.0f);
    float *rv = (float *)((char *)hb + m->buffers.entries[n->buffer[1]].offset);
    qs_layer_init_const(rv, C, 1.0f);
}

/* saved[0], saved[1]: the batch's per-channel mean and 1/σ; no dy of its own where it reads
 * the gradient of the Add it feeds (qs_bn_grad_from_add). */
static void bn_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    (void)f;
    const qs_buffer_decl stats = {.bytes = (size_t)n->out_shape[3] * sizeof(float), .dtype = QS_F32};
    d->saved[0] = d->saved[1] = stats;
    if (qs_bn_grad_from_add(m, n)) d->grad = QS_GRAD_NONE;
}

/* With an Add fused in (cfg.bn.add): that Add (n's only reader) and in *slot which of its
 * inputs is the residual; NULL otherwise. */
static qs_node *fused_add(qs_model *m, const qs_node *n, int *slot) {
    if (!n->cfg.bn.add) return NULL;
    qs_node *a = qs_model_only_reader(m, (int)(n - m->nodes));
    *slot = a->inputs[0] == (int)(n - m->nodes) ? 1 : 0;
    return a;
}

static qs_status bn_forward(qs_model *m, qs_node *n) {
    int64_t C = n->out_shape[3], rows = qs_shape_numel(3, n->out_shape);
    const qs_node *in = qs_layer_input(m, n, 0);
    int slot;
    const qs_node *add = fused_add(m, n, &slot);
    const qs_node *rn = add ? qs_layer_input(m, add, slot) : NULL; /* the residual: F32, or BF16 (qs_model_bf16_residuals) */
    const void *res = rn ? rn->y : NULL;
    const qs_dtype res_dt = rn ? rn->out_dtype : QS_F32;
    const void *x = in->y;
    const float *g = qs_model_param_ptr(m, n->param[0]), *b = qs_model_param_ptr(m, n->param[1]);
    float *rm = qs_model_buffer_ptr(m, n->buffer[0]), *rv = qs_model_buffer_ptr(m, n->buffer[1]);
    if (m->training)
        return m->be->ops->batchnorm_forward_train(m->be, m->stream, rows, C, x, in->out_dtype, g, b, n->y, n->out_dtype,
                                                   n->saved[0], n->saved[1], rm, rv, n->cfg.bn.momentum,
                                                   n->cfg.bn.eps, n->cfg.bn.relu, res, res_dt);
    return m->be->ops->batchnorm_forward_eval(m->be, m->stream, rows, C, x, in->out_dtype, g, b, rm, rv, n->cfg.bn.eps, n->y,
                                              n->out_dtype, n->cfg.bn.relu, res, res_dt);
}

/* dx goes to the input's FP32 gradient, or — when the input is a BF16 convolution whose
 * quantized dY this node may write (qs_gemm_dy_from_reader) — straight into that quantized dY,
 * rounded as the convolution would round it. dy and the ReLU mask are this node's, or those of
 * the Add it alone feeds (qs_bn_grad_from_add: the Add's owner's buffers when the Add is fused
 * into another BatchNorm). With an Add fused in, it also writes the residual's gradient, unless
 * the residual is a BatchNorm that reads it itself. */
static qs_status bn_backward(qs_model *m, qs_node *n) {
    int64_t C = n->out_shape[3], rows = qs_shape_numel(3, n->out_shape);
    bool acc = false;
    qs_node *in = &m->nodes[n->inputs[0]];
    qs_sr sr_buf;
    const qs_sr *sr = NULL;
    void *dx;
    const bool direct = in->needs_grad && qs_gemm_dy_from_reader(m, in, &dx, &sr, &sr_buf); /* its only reader */
    const qs_dtype dx_dt = direct ? QS_BF16 : QS_F32;
    if (!direct) dx = qs_model_grad_target(m, n, 0, &acc);
    const qs_node *reader = qs_bn_grad_from_add(m, n);
    const qs_node *g = reader && reader->alias_of >= 0 ? &m->nodes[reader->alias_of] : reader ? reader : n;
    const bool masked = reader ? reader->cfg.add.relu : n->cfg.bn.relu;
    int slot;
    qs_node *add = fused_add(m, n, &slot);
    float *dres = NULL;
    bool dres_acc = false;
    if (add && qs_bn_grad_from_add(m, qs_layer_input(m, add, slot)) != add)
        dres = qs_model_grad_target(m, add, slot, &dres_acc);
    QS_TRY(m->be->ops->batchnorm_backward(m->be, m->stream, rows, C, in->y, in->out_dtype, g->dy, g->grad_dtype,
                                          qs_model_param_ptr(m, n->param[0]), n->saved[0], n->saved[1], dx, dx_dt, sr,
                                          acc, qs_model_grad_ptr(m, n->param[0]), qs_model_grad_ptr(m, n->param[1]),
                                          masked ? g->y : NULL, g->out_dtype, dres, dres_acc));
    if (direct) qs_gemm_dy_mark_quantized(m, in);
    return QS_OK;
}

const qs_layer_impl qs_layer_batchnorm2d = {
    .kind_name = "BatchNorm2d", .infer = bn_infer, .init = bn_init, .declare = bn_declare,
    .forward = bn_forward, .backward_data = bn_backward,
};
