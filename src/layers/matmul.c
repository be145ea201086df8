/* src/layers/matmul.c — MatMul: a batched product of two activations, C = alpha·A·op(B) over
 * the (N, H) leading dimensions: A (N,H,M,K), B (N,H,N',K) with trans_b (C = A·Bᵀ, attention's
 * scores QKᵀ/√d) or (N,H,K,N') without (C = P·V). Precision-selectable like Linear: at a low
 * precision both inputs come through quantizing casts (graph/precision.c) and the output
 * gradient is quantized once per step (layers/gemm_quant.h). */
#include "layers/gemm_quant.h"

/* Dimensions: batch (N·H), M, N', K. */
typedef struct mm_dims {
    int64_t heads, M, N, K;
} mm_dims;

static mm_dims mm_dims_of(const qs_model *m, const qs_node *n) {
    const qs_node *a = &m->nodes[n->inputs[0]], *b = &m->nodes[n->inputs[1]];
    return (mm_dims){.heads = a->out_shape[1], .M = a->out_shape[2], .K = a->out_shape[3],
                     .N = n->cfg.matmul.trans_b ? b->out_shape[2] : b->out_shape[3]};
}

static qs_status mm_infer(qs_model *m, qs_node *n) {
    if (n->n_inputs != 2) return QS_FAIL(QS_ERR_INVALID_ARG, "MatMul needs 2 inputs (got %d)", n->n_inputs);
    const qs_node *a = qs_layer_input(m, n, 0), *b = qs_layer_input(m, n, 1);
    const bool tb = n->cfg.matmul.trans_b;
    if (a->out_ndim != 4 || b->out_ndim != 4 || a->out_shape[1] != b->out_shape[1] ||
        a->out_shape[3] != (tb ? b->out_shape[3] : b->out_shape[2]))
        return QS_FAIL(QS_ERR_MISMATCH, "MatMul of %s and %s%s: needs (N,H,M,K) and (N,H,%s) inputs", a->name, b->name,
                       tb ? "ᵀ" : "", tb ? "N',K" : "K,N'");
    if (!(n->cfg.matmul.alpha != 0)) n->cfg.matmul.alpha = 1.0f;
    const mm_dims d = mm_dims_of(m, n);
    qs_layer_set_out_nhwc(n, d.heads, d.M, d.N);
    n->flops_fwd = 2.0 * (double)(d.heads * d.M * d.N * d.K);
    n->flops_bwd_data = 2.0 * n->flops_fwd; /* both inputs' gradients */
    n->bytes_saved_for_backward = (size_t)(d.heads * (d.M * d.K + d.N * d.K)) * sizeof(float);
    return QS_OK;
}

static qs_status mm_setup(qs_model *m, qs_node *n) {
    const mm_dims d = mm_dims_of(m, n);
    qs_bmm_desc desc = {.batch = m->batch * d.heads, .M = d.M, .N = d.N, .K = d.K, .trans_b = n->cfg.matmul.trans_b,
                        .alpha = n->cfg.matmul.alpha, .prec = n->prec};
    QS_TRY(m->be->ops->bmm_plan(m->be, &desc, &n->plan, &n->workspace));
    qs_gemm_quant_setup(m, n, (qs_gemm_shape){0});
    return QS_OK;
}

/* The quantized output gradient (both inputs come through casts). */
static void mm_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    const mm_dims dm = mm_dims_of(m, n);
    qs_gemm_dy_declare(m, n, m->batch * dm.heads * dm.M, dm.N, f, d);
}

static qs_status mm_forward(qs_model *m, qs_node *n) {
    const qs_operand a = qs_gemm_input_operand(m, n, 0), b = qs_gemm_input_operand(m, n, 1);
    return m->be->ops->bmm_forward(m->be, n->plan, m->stream, &a, &b, n->y, m->workspace);
}

/* Both inputs' gradients (neither is a parameter). */
static qs_status mm_backward(qs_model *m, qs_node *n) {
    const mm_dims d = mm_dims_of(m, n);
    qs_operand dc;
    QS_TRY(qs_gemm_quantized_dy(m, n, m->batch * d.heads * d.M, d.N, &dc));
    bool acc;
    float *da = qs_model_grad_target(m, n, 0, &acc);
    if (da) {
        const qs_operand b = qs_gemm_input_operand(m, n, 1);
        QS_TRY(m->be->ops->bmm_backward_a(m->be, n->plan, m->stream, &dc, &b, da, acc, m->workspace));
    }
    float *db = qs_model_grad_target(m, n, 1, &acc);
    if (!db) return QS_OK;
    const qs_operand a = qs_gemm_input_operand(m, n, 0);
    return m->be->ops->bmm_backward_b(m->be, n->plan, m->stream, &dc, &a, db, acc, m->workspace);
}

const qs_layer_impl qs_layer_matmul = {.kind_name = "MatMul", .infer = mm_infer, .declare = mm_declare,
                                       .setup = mm_setup,
                                       .forward = mm_forward, .backward_data = mm_backward};
