/* src/layers/pool.c — MaxPool2d / AvgPool2d over (N,H,W,C); `global` pools the whole
 * image (AdaptiveAvgPool2d((1,1)) in PyTorch). Max pooling saves int32 argmax indices. */
#include "layers/layer_util.h"

static qs_pool_desc pool_desc(const qs_model *m, const qs_node *n, int64_t batch) {
    const qs_node *in = qs_layer_input(m, n, 0);
    qs_pool_desc d = {.kind = n->kind == QS_NODE_MAXPOOL2D ? QS_POOL_MAX : QS_POOL_AVG, .N = batch,
                      .H = in->out_shape[1], .W = in->out_shape[2], .C = in->out_shape[3],
                      .R = n->cfg.pool.kernel, .S = n->cfg.pool.kernel, .stride_h = n->cfg.pool.stride,
                      .stride_w = n->cfg.pool.stride, .pad_h = n->cfg.pool.pad, .pad_w = n->cfg.pool.pad};
    if (n->cfg.pool.global) {
        d.R = d.H;
        d.S = d.W;
        d.stride_h = d.stride_w = 1;
        d.pad_h = d.pad_w = 0;
    }
    return d;
}

static qs_status pool_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 4));
    if (!n->cfg.pool.global && n->cfg.pool.stride == 0) n->cfg.pool.stride = n->cfg.pool.kernel;
    qs_pool_desc d = pool_desc(m, n, 1);
    QS_TRY(qs_pool_desc_finish(&d));
    qs_layer_set_out_nhwc(n, d.P, d.Q, d.C);
    n->flops_fwd = (double)(d.P * d.Q * d.C * d.R * d.S);
    n->flops_bwd_data = (double)(d.P * d.Q * d.C);
    n->bytes_saved_for_backward = d.kind == QS_POOL_MAX ? (size_t)(d.P * d.Q * d.C) * sizeof(int32_t) : 0;
    return QS_OK;
}

/* Max pooling: saved[0], the int32 argmax index of every output element. */
static void pool_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    (void)f;
    qs_pool_desc pd = pool_desc(m, n, m->batch);
    if (qs_pool_desc_finish(&pd) != QS_OK || pd.kind != QS_POOL_MAX) return; /* checked at infer */
    d->saved[0] = (qs_buffer_decl){.bytes = (size_t)(pd.N * pd.P * pd.Q * pd.C) * sizeof(int32_t), .dtype = QS_S32};
}

static qs_status pool_setup(qs_model *m, qs_node *n) {
    qs_pool_desc d = pool_desc(m, n, m->batch);
    QS_TRY(qs_pool_desc_finish(&d));
    return m->be->ops->pool_plan(m->be, &d, &n->plan, &n->workspace);
}

static qs_status pool_forward(qs_model *m, qs_node *n) {
    return m->be->ops->pool_forward(m->be, n->plan, m->stream, qs_layer_input(m, n, 0)->y, n->y, n->saved[0],
                                    m->workspace);
}

static qs_status pool_backward(qs_model *m, qs_node *n) {
    bool acc;
    void *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    return m->be->ops->pool_backward(m->be, n->plan, m->stream, n->dy, n->saved[0], dx, acc, m->workspace);
}

const qs_layer_impl qs_layer_maxpool2d = {.kind_name = "MaxPool2d", .infer = pool_infer, .declare = pool_declare,
                                          .setup = pool_setup, .forward = pool_forward, .backward_data = pool_backward};
const qs_layer_impl qs_layer_avgpool2d = {.kind_name = "AvgPool2d", .infer = pool_infer, .declare = pool_declare,
                                          .setup = pool_setup, .forward = pool_forward, .backward_data = pool_backward};
