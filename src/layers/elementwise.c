/* src/layers/elementwise.c — shape-preserving layers: Input (holds the batch), ReLU, the
 * residual Add (two inputs of equal shape) and inverted Dropout. */
#include "layers/layer_util.h"
#include "qsync/rng.h"

/* Output shape = shape of input 0. */
static void same_shape(const qs_model *m, qs_node *n) {
    const qs_node *in = qs_layer_input(m, n, 0);
    n->out_ndim = in->out_ndim;
    for (int i = 0; i < in->out_ndim; i++) n->out_shape[i] = in->out_shape[i];
}

static int64_t numel(const qs_model *m, const qs_node *n) { return m->batch * qs_layer_out_numel_per_sample(n); }

/* ---- Input: (N, H, W, C) ---- */
static qs_status input_infer(qs_model *m, qs_node *n) {
    n->out_ndim = 4;
    n->out_shape[0] = 1;
    n->out_shape[1] = m->in_h;
    n->out_shape[2] = m->in_w;
    n->out_shape[3] = m->in_c;
    return QS_OK;
}
static qs_status input_forward(qs_model *m, qs_node *n) { return QS_OK; }

const qs_layer_impl qs_layer_input_impl = {.kind_name = "Input", .infer = input_infer, .forward = input_forward};

/* ---- ReLU ---- */
static qs_status relu_infer(qs_model *m, qs_node *n) {
    same_shape(m, n);
    n->flops_fwd = (double)qs_layer_out_numel_per_sample(n);
    n->flops_bwd_data = n->flops_fwd;
    n->bytes_saved_for_backward = (size_t)qs_layer_out_numel_per_sample(n) * sizeof(float);
    return QS_OK;
}
static qs_status relu_forward(qs_model *m, qs_node *n) {
    return m->be->ops->relu_forward(m->be, m->stream, numel(m, n), qs_layer_input(m, n, 0)->y, n->y);
}
static qs_status relu_backward(qs_model *m, qs_node *n) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    return m->be->ops->relu_backward(m->be, m->stream, numel(m, n), n->y, n->dy, n->grad_dtype, dx, acc);
}
const qs_layer_impl qs_layer_relu = {
    .kind_name = "ReLU", .infer = relu_infer, .forward = relu_forward, .backward_data = relu_backward};

/* ---- Add: y = a + b ---- */
static qs_status add_infer(qs_model *m, qs_node *n) {
    if (n->n_inputs != 2) return QS_FAIL(QS_ERR_INVALID_ARG, "Add needs exactly 2 inputs (got %d)", n->n_inputs);
    const qs_node *a = qs_layer_input(m, n, 0), *b = qs_layer_input(m, n, 1);
    bool same = a->out_ndim == b->out_ndim;
    for (int i = 1; same && i < a->out_ndim; i++) same = a->out_shape[i] == b->out_shape[i];
    if (!same) {
        char sa[96], sb[96];
        qs_shape_format(a->out_ndim, a->out_shape, sa, sizeof sa);
        qs_shape_format(b->out_ndim, b->out_shape, sb, sizeof sb);
        return QS_FAIL(QS_ERR_MISMATCH, "Add inputs differ in shape: %s is %s, %s is %s", a->name, sa, b->name, sb);
    }
    same_shape(m, n);
    n->flops_fwd = (double)qs_layer_out_numel_per_sample(n);
    return QS_OK;
}
/* Either input may be a BF16 block output (qs_model_bf16_residuals); y is FP32. */
static qs_status add_forward(qs_model *m, qs_node *n) {
    const qs_node *a = qs_layer_input(m, n, 0), *b = qs_layer_input(m, n, 1);
    return m->be->ops->add_forward(m->be, m->stream, numel(m, n), a->y, a->out_dtype, b->y, b->out_dtype, n->y,
                                   n->cfg.add.relu);
}
qs_node *qs_bn_grad_from_add(const qs_model *m, const qs_node *n) {
    if (!m->fuse_casts || n->kind != QS_NODE_BATCHNORM2D || n->cfg.bn.relu || n->cfg.bn.add || n->alias_of >= 0)
        return NULL;
    qs_node *r = qs_model_only_reader(m, (int)(n - m->nodes));
    return r && r->kind == QS_NODE_ADD ? r : NULL;
}

/* Both inputs receive dy (masked by [y > 0] when a ReLU is fused in), except a BatchNorm that
 * reads it itself (qs_bn_grad_from_add). */
static qs_status add_backward(qs_model *m, qs_node *n) {
    for (int k = 0; k < 2; k++) {
        if (qs_bn_grad_from_add(m, qs_layer_input(m, n, k)) == n) continue;
        bool acc;
        float *dx = qs_model_grad_target(m, n, k, &acc);
        if (!dx) continue;
        if (n->cfg.add.relu)
            QS_TRY(m->be->ops->relu_backward(m->be, m->stream, numel(m, n), n->y, n->dy, QS_F32, dx, acc));
        else QS_TRY(m->be->ops->accumulate(m->be, m->stream, numel(m, n), n->dy, dx, acc));
    }
    return QS_OK;
}
const qs_layer_impl qs_layer_add = {
    .kind_name = "Add", .infer = add_infer, .forward = add_forward, .backward_data = add_backward};

/* ---- Dropout (inverted); mask saved as one byte per element ---- */
static qs_status dropout_infer(qs_model *m, qs_node *n) {
    if (n->cfg.dropout.p < 0 || n->cfg.dropout.p >= 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dropout probability must be in [0, 1) (got %g)", n->cfg.dropout.p);
    same_shape(m, n);
    n->flops_fwd = (double)qs_layer_out_numel_per_sample(n);
    n->flops_bwd_data = n->flops_fwd;
    n->bytes_saved_for_backward = (size_t)qs_layer_out_numel_per_sample(n);
    return QS_OK;
}
/* saved[0]: the mask, one byte per element. */
static void dropout_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    (void)f;
    d->saved[0] = (qs_buffer_decl){.bytes = (size_t)numel(m, n), .dtype = QS_U8};
}
/* Mask stream: key (seed, "dropout", node index), 128-bit blocks counted per step (the step
 * read from backend memory where passes may be captured: qs_model.step_dev). */
static qs_status dropout_forward(qs_model *m, qs_node *n) {
    int64_t count = numel(m, n);
    const float *x = qs_layer_input(m, n, 0)->y;
    if (!m->training || n->cfg.dropout.p == 0.0f)
        return m->be->ops->accumulate(m->be, m->stream, count, x, n->y, false);
    const uint64_t blocks = (uint64_t)((count + 3) / 4);
    const qs_dropout_rng rng = {.key = qs_rng_key(m->seed, "dropout", (uint64_t)(n - m->nodes)),
                                .counter_base = (uint64_t)m->step * blocks,
                                .step_at = m->capture.on ? m->step_dev : NULL,
                                .step_stride = blocks};
    return m->be->ops->dropout_forward(m->be, m->stream, count, x, n->y, n->saved[0], n->cfg.dropout.p, &rng);
}
static qs_status dropout_backward(qs_model *m, qs_node *n) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    if (n->cfg.dropout.p == 0.0f) return m->be->ops->accumulate(m->be, m->stream, numel(m, n), n->dy, dx, acc);
    return m->be->ops->dropout_backward(m->be, m->stream, numel(m, n), n->dy, n->saved[0], n->cfg.dropout.p, dx, acc);
}
const qs_layer_impl qs_layer_dropout = {.kind_name = "Dropout", .infer = dropout_infer, .declare = dropout_declare,
                                        .forward = dropout_forward, .backward_data = dropout_backward};
