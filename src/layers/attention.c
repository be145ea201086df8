/* src/layers/attention.c — the memory-bound parts of multi-head attention: splitting a
 * (N, T, parts·H·D) projection into heads (N, H, T, D), merging heads back to (N, T, H·D), the
 * masked softmax over attention scores (N, H, Tq, Tk), and taking a sequence's first position
 * (N, T, C) → (N, C). The two matmuls are MatMul nodes (matmul.c). A MergeHeads node may run
 * the whole attention feeding it as one fused op (graph/fuse_attention.c). */
#include "layers/layer_util.h"

/* Write the gradient of a node that reads only a column slice of its input: the first
 * consumer to run zeroes the whole input gradient, then every slice is accumulated. */
static float *slice_grad_target(qs_model *m, qs_node *n, qs_status *st) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    *st = QS_OK;
    if (dx && !acc) {
        const qs_node *x = qs_layer_input(m, n, 0);
        *st = m->be->ops->memset_zero(m->be, m->stream, dx, (size_t)(m->batch * qs_layer_out_numel_per_sample(x)) * sizeof(float));
    }
    return dx;
}

/* ---- SplitHeads: part s of (N, T, parts·H·D) → (N, H, T, D) ---- */
static qs_status split_infer(qs_model *m, qs_node *n) {
    const qs_node *x = qs_layer_input(m, n, 0);
    const int64_t H = n->cfg.heads.heads, parts = n->cfg.heads.parts, s = n->cfg.heads.part;
    if (x->out_ndim != 3 || H < 1 || parts < 1 || s < 0 || s >= parts || x->out_shape[2] % (parts * H) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "cannot take part %lld of %lld × %lld heads from %s (needs (N, T, C) with C a "
                       "multiple of parts × heads)", (long long)s, (long long)parts, (long long)H, x->name);
    const int64_t T = x->out_shape[1], D = x->out_shape[2] / (parts * H);
    qs_layer_set_out_nhwc(n, H, T, D);
    return QS_OK;
}

static qs_status split_forward(qs_model *m, qs_node *n) {
    const int64_t H = n->out_shape[1], T = n->out_shape[2], D = n->out_shape[3], ld = n->cfg.heads.parts * H * D;
    return m->be->ops->permute_heads(m->be, m->stream, m->batch, T, H, D, ld, n->cfg.heads.part * H * D,
                                     qs_layer_input(m, n, 0)->y, n->y, true, false);
}

static qs_status split_backward(qs_model *m, qs_node *n) {
    qs_status st;
    float *dx = slice_grad_target(m, n, &st);
    if (st != QS_OK || !dx) return st;
    const int64_t H = n->out_shape[1], T = n->out_shape[2], D = n->out_shape[3], ld = n->cfg.heads.parts * H * D;
    return m->be->ops->permute_heads(m->be, m->stream, m->batch, T, H, D, ld, n->cfg.heads.part * H * D, n->dy, dx,
                                     false, true);
}

const qs_layer_impl qs_layer_split_heads = {.kind_name = "SplitHeads", .infer = split_infer,
                                            .forward = split_forward, .backward_data = split_backward};

/* ---- MergeHeads: (N, H, T, D) → (N, T, H·D) ---- */
static qs_status merge_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 4));
    const qs_node *x = qs_layer_input(m, n, 0);
    n->out_ndim = 3;
    n->out_shape[0] = 1;
    n->out_shape[1] = x->out_shape[2];
    n->out_shape[2] = x->out_shape[1] * x->out_shape[3];
    return QS_OK;
}

/* ---- fused: the whole attention feeding a MergeHeads node (graph/fuse_attention.c) ---- */
static qs_attention_desc fused_desc(const qs_model *m, const qs_node *n) {
    const qs_node *q = &m->nodes[n->cfg.merge.q], *s = &m->nodes[n->cfg.merge.scores];
    const qs_node *p = &m->nodes[n->cfg.merge.softmax];
    return (qs_attention_desc){.N = m->batch, .T = q->out_shape[2], .H = q->out_shape[1], .D = q->out_shape[3],
                               .alpha = s->cfg.matmul.alpha, .causal = p->cfg.softmax.causal,
                               .key_ids = p->n_inputs == 2 ? qs_layer_input(m, p, 1)->y : NULL,
                               .pad_id = p->cfg.softmax.pad_id, .dtype = s->prec == QS_PREC_BF16 ? QS_BF16 : QS_F16};
}

/* Operand heads of a SplitHeads node: its part of its input's token rows. */
static qs_heads_ref split_ref(qs_model *m, const qs_node *split) {
    const int64_t H = split->cfg.heads.heads, D = split->out_shape[3];
    return (qs_heads_ref){.ptr = qs_layer_input(m, split, 0)->y, .ld = split->cfg.heads.parts * H * D,
                          .off = split->cfg.heads.part * H * D};
}

/* Fused: saved[0], what the attention's forward keeps for its backward (q, k, v at 16 bits and
 * each row's log-sum-exp). */
static void merge_declare(const qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d) {
    (void)f;
    if (!n->cfg.merge.fused) return;
    const qs_attention_desc ad = fused_desc(m, n);
    d->saved[0] = (qs_buffer_decl){.bytes = qs_attention_saved_bytes(&ad), .dtype = ad.dtype};
}

/* Fused: the backward's workspace. */
static qs_status merge_setup(qs_model *m, qs_node *n) {
    if (!n->cfg.merge.fused) return QS_OK;
    const qs_attention_desc d = fused_desc(m, n);
    n->workspace = qs_attention_workspace_bytes(&d);
    return QS_OK;
}

static qs_status fused_forward(qs_model *m, qs_node *n) {
    const qs_attention_desc d = fused_desc(m, n);
    const qs_heads_ref q = split_ref(m, &m->nodes[n->cfg.merge.q]), k = split_ref(m, &m->nodes[n->cfg.merge.k]),
                       v = split_ref(m, &m->nodes[n->cfg.merge.v]);
    return m->be->ops->attention_forward(m->be, m->stream, &d, &q, &k, &v, n->y, n->saved[0]);
}

/* The gradients of q, k, v go straight into their SplitHeads nodes' inputs. Slices of one
 * input that together cover it (q, k, v of one projection) overwrite it when this is its
 * first reader to run; a slice of an input covered only in part is added to a zeroed one. */
static qs_status fused_backward(qs_model *m, qs_node *n) {
    const int splits[3] = {n->cfg.merge.q, n->cfg.merge.k, n->cfg.merge.v};
    qs_heads_ref g[3];
    for (int i = 0; i < 3; i++) {
        qs_node *sp = &m->nodes[splits[i]];
        g[i] = split_ref(m, sp);
        bool acc;
        g[i].ptr = qs_model_grad_target(m, sp, 0, &acc);
        g[i].accumulate = acc;
        int first = i, parts_seen = 0;
        for (int j = 0; j < 3; j++) /* the first of this group's splits of the same input */
            if (m->nodes[splits[j]].inputs[0] == sp->inputs[0]) {
                if (j < first) first = j;
                parts_seen |= 1 << m->nodes[splits[j]].cfg.heads.part;
            }
        if (first < i) { /* that one decided (and zeroed the input if needed) */
            g[i].accumulate = g[first].accumulate;
        } else if (g[i].ptr && !acc && parts_seen != (1 << sp->cfg.heads.parts) - 1) {
            const qs_node *x = qs_layer_input(m, sp, 0);
            QS_TRY(m->be->ops->memset_zero(m->be, m->stream, g[i].ptr,
                                           (size_t)(m->batch * qs_layer_out_numel_per_sample(x)) * sizeof(float)));
            g[i].accumulate = true;
        }
    }
    const qs_attention_desc d = fused_desc(m, n);
    return m->be->ops->attention_backward(m->be, m->stream, &d, n->saved[0], n->y, n->dy, &g[0], &g[1], &g[2],
                                          m->workspace);
}

static qs_status merge_forward(qs_model *m, qs_node *n) {
    if (n->cfg.merge.fused) return fused_forward(m, n);
    const qs_node *x = qs_layer_input(m, n, 0);
    const int64_t H = x->out_shape[1], T = x->out_shape[2], D = x->out_shape[3];
    return m->be->ops->permute_heads(m->be, m->stream, m->batch, T, H, D, H * D, 0, x->y, n->y, false, false);
}

static qs_status merge_backward(qs_model *m, qs_node *n) {
    if (n->cfg.merge.fused) return fused_backward(m, n);
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    const qs_node *x = qs_layer_input(m, n, 0);
    const int64_t H = x->out_shape[1], T = x->out_shape[2], D = x->out_shape[3];
    return m->be->ops->permute_heads(m->be, m->stream, m->batch, T, H, D, H * D, 0, n->dy, dx, true, acc);
}

const qs_layer_impl qs_layer_merge_heads = {.kind_name = "MergeHeads", .infer = merge_infer,
                                            .declare = merge_declare, .setup = merge_setup,
                                            .forward = merge_forward, .backward_data = merge_backward};

/* ---- Softmax over scores (N, H, Tq, Tk); optional input 1: the token ids (N, Tk) ---- */
static qs_status softmax_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 4));
    const qs_node *x = qs_layer_input(m, n, 0);
    if (n->n_inputs == 2 && qs_layer_out_numel_per_sample(qs_layer_input(m, n, 1)) != x->out_shape[3])
        return QS_FAIL(QS_ERR_MISMATCH, "the padding mask's ids (%s) are not one per key (%lld)",
                       qs_layer_input(m, n, 1)->name, (long long)x->out_shape[3]);
    if (n->cfg.softmax.causal && x->out_shape[2] != x->out_shape[3])
        return QS_FAIL(QS_ERR_MISMATCH, "a causal mask needs as many queries as keys (%lld vs %lld)",
                       (long long)x->out_shape[2], (long long)x->out_shape[3]);
    qs_layer_same_shape(n, x);
    n->flops_fwd = 5.0 * (double)qs_layer_out_numel_per_sample(n);
    n->flops_bwd_data = 4.0 * (double)qs_layer_out_numel_per_sample(n);
    n->bytes_saved_for_backward = (size_t)qs_layer_out_numel_per_sample(n) * sizeof(float);
    return QS_OK;
}

static qs_status softmax_forward(qs_model *m, qs_node *n) {
    const float *ids = n->n_inputs == 2 ? qs_layer_input(m, n, 1)->y : NULL;
    return m->be->ops->softmax_forward(m->be, m->stream, m->batch, n->out_shape[1], n->out_shape[2], n->out_shape[3],
                                       qs_layer_input(m, n, 0)->y, n->y, n->cfg.softmax.causal, ids,
                                       n->cfg.softmax.pad_id);
}

static qs_status softmax_backward(qs_model *m, qs_node *n) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    return m->be->ops->softmax_backward(m->be, m->stream, m->batch * n->out_shape[1] * n->out_shape[2],
                                        n->out_shape[3], n->y, n->dy, dx, acc);
}

const qs_layer_impl qs_layer_softmax = {.kind_name = "Softmax", .infer = softmax_infer, .forward = softmax_forward,
                                        .backward_data = softmax_backward};

/* ---- SelectToken: (N, T, C) → (N, C), position 0 (as heads: one head of width C, one
 * "position" per sample whose row is the whole T·C sequence) ---- */
static qs_status select_infer(qs_model *m, qs_node *n) {
    QS_TRY(qs_layer_expect_ndim(m, n, 3));
    n->out_ndim = 2;
    n->out_shape[0] = 1;
    n->out_shape[1] = qs_layer_input(m, n, 0)->out_shape[2];
    return QS_OK;
}

static qs_status select_forward(qs_model *m, qs_node *n) {
    const qs_node *x = qs_layer_input(m, n, 0);
    const int64_t C = n->out_shape[1];
    return m->be->ops->permute_heads(m->be, m->stream, m->batch, 1, 1, C, qs_layer_out_numel_per_sample(x), 0, x->y,
                                     n->y, true, false);
}

static qs_status select_backward(qs_model *m, qs_node *n) {
    qs_status st;
    float *dx = slice_grad_target(m, n, &st);
    if (st != QS_OK || !dx) return st;
    const int64_t C = n->out_shape[1];
    return m->be->ops->permute_heads(m->be, m->stream, m->batch, 1, 1, C,
                                     qs_layer_out_numel_per_sample(qs_layer_input(m, n, 0)), 0, n->dy, dx, false, true);
}

const qs_layer_impl qs_layer_select_token = {.kind_name = "SelectToken", .infer = select_infer,
                                             .forward = select_forward, .backward_data = select_backward};
