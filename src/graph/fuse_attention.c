/* src/graph/fuse_attention.c — graph-level fusion of multi-head attention into its MergeHeads
 * node (see qs_model_fuse_attention in graph.h; the fused op is core/backend.h's
 * attention_forward/backward, run by layers/attention.c). */
#include "graph/graph.h"

/* The node behind a straight-through cast that is its only reader, or the node itself. */
static int through_cast(const qs_model *m, int i) {
    const qs_node *n = &m->nodes[i];
    if (n->kind == QS_NODE_CAST && n->cfg.cast.straight_through && n->n_consumers == 1) return n->inputs[0];
    return i;
}

static bool is_16bit(qs_precision p) { return p == QS_PREC_BF16 || p == QS_PREC_FP16; }

/* A node of `kind` read by exactly one node (the attention it belongs to). */
static bool single_use(const qs_model *m, int i, qs_node_kind kind) {
    return m->nodes[i].kind == kind && m->nodes[i].n_consumers == 1;
}

/* Fuse the attention that ends in MergeHeads node `mi`, if it has the pattern
 *   q, k, v SplitHeads → [casts] → scores MatMul (q·kᵀ) → Softmax → [cast] → context MatMul (·v)
 * with both MatMuls at one 16-bit precision and every inner node read only inside it. */
static bool fuse_one(qs_model *m, int mi, qs_attention_supported_fn supported, void *ctx) {
    qs_node *mg = &m->nodes[mi];
    const int c = mg->inputs[0];
    const qs_node *cn = &m->nodes[c];
    if (!single_use(m, c, QS_NODE_MATMUL) || cn->cfg.matmul.trans_b || cn->cfg.matmul.alpha != 1.0f ||
        !is_16bit(cn->prec))
        return false;
    const int p = through_cast(m, cn->inputs[0]), v = through_cast(m, cn->inputs[1]);
    if (!single_use(m, p, QS_NODE_SOFTMAX) || !single_use(m, v, QS_NODE_SPLIT_HEADS)) return false;
    const qs_node *pn = &m->nodes[p];
    const int s = pn->inputs[0];
    const qs_node *sn = &m->nodes[s];
    if (!single_use(m, s, QS_NODE_MATMUL) || !sn->cfg.matmul.trans_b || sn->prec != cn->prec) return false;
    const int q = through_cast(m, sn->inputs[0]), k = through_cast(m, sn->inputs[1]);
    if (!single_use(m, q, QS_NODE_SPLIT_HEADS) || !single_use(m, k, QS_NODE_SPLIT_HEADS) || q == k) return false;
    const qs_node *qn = &m->nodes[q];
    for (int i = 0; i < 4; i++) /* the three operands have one shape (N, H, T, D) */
        if (m->nodes[k].out_shape[i] != qn->out_shape[i] || m->nodes[v].out_shape[i] != qn->out_shape[i]) return false;
    const qs_attention_desc d = {.N = m->batch, .T = qn->out_shape[2], .H = qn->out_shape[1], .D = qn->out_shape[3],
                                 .alpha = sn->cfg.matmul.alpha, .causal = pn->cfg.softmax.causal,
                                 .pad_id = pn->cfg.softmax.pad_id,
                                 .dtype = cn->prec == QS_PREC_BF16 ? QS_BF16 : QS_F16};
    if (!supported(ctx, &d)) return false;
    /* every node from the splits to the context product, casts included */
    const int readers[] = {c, s};
    for (size_t r = 0; r < sizeof readers / sizeof *readers; r++)
        for (int slot = 0; slot < 2; slot++) {
            const int in = m->nodes[readers[r]].inputs[slot];
            if (in != through_cast(m, in)) m->nodes[in].fused_into = mi; /* a cast */
        }
    const int members[] = {q, k, v, s, p, c};
    for (size_t j = 0; j < sizeof members / sizeof *members; j++) m->nodes[members[j]].fused_into = mi;
    mg->cfg.merge.fused = true;
    mg->cfg.merge.q = q;
    mg->cfg.merge.k = k;
    mg->cfg.merge.v = v;
    mg->cfg.merge.scores = s;
    mg->cfg.merge.softmax = p;
    return true;
}

int qs_model_fuse_attention(qs_model *m, qs_attention_supported_fn supported, void *ctx) {
    int fused = 0;
    for (int i = 1; i < m->n_nodes; i++)
        if (m->nodes[i].kind == QS_NODE_MERGE_HEADS && !m->nodes[i].cfg.merge.fused && fuse_one(m, i, supported, ctx))
            fused++;
    return fused;
}
