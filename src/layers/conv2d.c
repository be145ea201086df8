/* src/layers/conv2d.c — Conv2d (groups = 1): X (N,H,W,C) → Y (N,P,Q,K), W (K,C,R,S) OIHW.
 *
 * A pointwise convolution (1×1 kernel, stride 1, no padding) is exactly a Linear over the
 * (N·H·W, C) rows of its channels-last input, with W (K, C, 1, 1) read as the (K, C) matrix.
 * On a backend that asks for it (qs_backend.pointwise_conv_as_linear: CUDA, where cuBLASLt
 * runs ResNet-50's 1×1 layers several times faster than cuDNN, docs/BENCHMARKS.md) it runs the
 * backend's Linear ops and keeps FP8 transposed copies like a Linear (qs_conv_runs_as_linear);
 * every other convolution runs the backend's conv ops. Its output y is FP32, or BF16 where the
 * precision pass made it so (qs_model_bf16_conv_outputs: a BF16 convolution whose only reader
 * is a batch norm); the plans get that dtype as y_dt. */
#include <math.h>
#include "layers/gemm_quant.h"

bool qs_conv_as_linear(const qs_node *n, const qs_mem_facts *f) {
    return n->kind == QS_NODE_CONV2D && n->cfg.conv.kernel == 1 && n->cfg.conv.stride == 1 && n->cfg.conv.pad == 0 &&
           f->pointwise_conv_as_linear;
}

bool qs_conv_runs_as_linear(const qs_model *m, const qs_node *n) { return m->be && qs_conv_as_linear(n, &m->facts); }

/* The backend descriptor for this node at batch `batch`. */
static qs_conv_desc conv_desc(qs_model *m, const qs_node *n, int64_t batch) {
    const qs_node *in = qs_layer_input(m, n, 0);
    qs_conv_desc d = {.N = batch, .H = in->out_shape[1], .W = in->out_shape[2], .C = in->out_shape[3],
                      .K = n->cfg.conv.out_channels, .R = n->cfg.conv.kernel, .S = n->cfg.conv.kernel,
                      .stride_h = n->cfg.conv.stride, .stride_w = n->cfg.conv.stride,
                      .pad_h = n->cfg.conv.pad, .pad_w = n->cfg.conv.pad,
                      .has_bias = n->cfg.conv.bias, .prec = n->prec, .y_dt = n->out_dtype,
                      .dx_dt = qs_gemm_dx_dtype(m, n)};
    return d;
}

static qs_status conv_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 4));
    if (n->cfg.conv.out_channels < 1 || n->cfg.conv.kernel < 1 || n->cfg.conv.stride < 1 || n->cfg.conv.pad < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "invalid out_channels/kernel/stride/pad %lld/%lld/%lld/%lld",
                       (long long)n->cfg.conv.out_channels, (long long)n->cfg.conv.kernel,
                       (long long)n->cfg.conv.stride, (long long)n->cfg.conv.pad);
    qs_conv_desc d = conv_desc(m, n, 1);
    QS_TRY(qs_conv_desc_finish(&d));
    qs_layer_set_out_nhwc(n, d.P, d.Q, d.K);
    QS_TRY(qs_layer_declare_param(m, n, "weight", 4, (int64_t[]){d.K, d.C, d.R, d.S}));
    if (d.has_bias) QS_TRY(qs_layer_declare_param(m, n, "bias", 1, (int64_t[]){d.K}));
    n->flops_fwd = 2.0 * (double)(d.P * d.Q * d.K) * (double)(d.C * d.R * d.S);
    n->flops_bwd_data = n->flops_fwd;
    n->flops_bwd_weights = n->flops_fwd;
    n->bytes_saved_for_backward = (size_t)(d.H * d.W * d.C) * sizeof(float);
    return QS_OK;
}

/* PyTorch default: kaiming_uniform(a=√5) → U(±1/√(C·R·S)) for weight and bias. */
static void conv_init(qs_model *m, qs_node *n, float *hp, void *hb, uint64_t seed) {
    const qs_table_entry *w = &m->params.entries[n->param[0]];
    float bound = 1.0f / sqrtf((float)(w->shape[1] * w->shape[2] * w->shape[3]));
    for (int k = 0; k < n->n_params; k++) {
        const qs_table_entry *e = &m->params.entries[n->param[k]];
        qs_layer_init_uniform(qs_layer_host_param(m, n, k, hp), e->numel, bound, seed, (uint64_t)n->param[k]);
    }
}

/* The node's matrices on a backend with facts f: W (K, C·R·S), dY (N·P·Q, K). */
static qs_gemm_shape conv_shape_on(const qs_model *m, const qs_node *n, const qs_mem_facts *f) {
    const qs_node *in = &m->nodes[n->inputs[0]];
    const int64_t K = n->cfg.conv.out_channels, R = n->cfg.conv.kernel;
    return (qs_gemm_shape){.w_rows = K, .w_cols = in->out_shape[3] * R * R,
                           .dy_rows = m->batch * n->out_shape[1] * n->out_shape[2], .dy_cols = K,
                           .transposable = qs_conv_as_linear(n, f)};
}

/* The same on the set-up model's backend. */
static qs_gemm_shape conv_shape(qs_model *m, const qs_node *n) { return conv_shape_on(m, n, &m->facts); }

/* The quantized copies; no FP32 dY where the BatchNorm reading it writes the quantized one. */
static void conv_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    qs_gemm_quant_declare(m, n, conv_shape_on(m, n, f), f, d);
    if (qs_gemm_dy_written_by_reader(m, n)) d->grad = QS_GRAD_NONE;
}

static qs_status conv_bind(qs_model *m, qs_node *n) { return qs_gemm_quant_bind(m, n, conv_shape(m, n)); }

static qs_status conv_setup(qs_model *m, qs_node *n) {
    const qs_gemm_shape sh = conv_shape(m, n);
    if (qs_conv_runs_as_linear(m, n)) {
        const qs_linear_desc ld = {.M = sh.dy_rows, .N = sh.w_rows, .K = sh.w_cols, .has_bias = n->cfg.conv.bias,
                                   .prec = n->prec, .y_dt = n->out_dtype, .dx_dt = qs_gemm_dx_dtype(m, n)};
        QS_TRY(m->be->ops->linear_plan(m->be, &ld, &n->plan, &n->workspace));
    } else {
        qs_conv_desc d = conv_desc(m, n, m->batch);
        QS_TRY(qs_conv_desc_finish(&d));
        QS_TRY(m->be->ops->conv_plan(m->be, &d, &n->plan, &n->workspace));
    }
    qs_gemm_quant_setup(m, n, sh);
    return QS_OK;
}

static qs_status conv_forward(qs_model *m, qs_node *n) {
    const qs_backend_ops *o = m->be->ops;
    return qs_gemm_forward(m, n, conv_shape(m, n), qs_conv_runs_as_linear(m, n) ? o->linear_forward : o->conv_forward);
}

static qs_status conv_backward_data(qs_model *m, qs_node *n) {
    const qs_backend_ops *o = m->be->ops;
    return qs_gemm_backward_data(m, n, conv_shape(m, n),
                                 qs_conv_runs_as_linear(m, n) ? o->linear_backward_data : o->conv_backward_data);
}

static qs_status conv_backward_weights(qs_model *m, qs_node *n) {
    const qs_backend_ops *o = m->be->ops;
    return qs_gemm_backward_weights(m, n, conv_shape(m, n),
                                    qs_conv_runs_as_linear(m, n) ? o->linear_backward_weights : o->conv_backward_weights);
}

const qs_layer_impl qs_layer_conv2d = {
    .kind_name = "Conv2d", .infer = conv_infer, .init = conv_init, .declare = conv_declare, .setup = conv_setup,
    .bind = conv_bind, .forward = conv_forward, .backward_data = conv_backward_data, .backward_weights = conv_backward_weights,
};
