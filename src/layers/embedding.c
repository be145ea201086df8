/* src/layers/embedding.c — token Embedding: ids (N, T) → (N, T, C) rows of a (V, C) table, and
 * the learned position embedding: (N, T, C) + wpe[0..T) with wpe (P, C), P ≥ T. Both tables are
 * initialised N(0, 0.02²) (GPT-2's initialisation). */
#include "layers/layer_util.h"

#define QS_EMBED_INIT_STD 0.02f

static qs_status embed_check(const qs_node *n) {
    if (n->cfg.embed.rows < 1 || n->cfg.embed.dim < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "embedding table must be at least 1×1 (got %lld×%lld)",
                       (long long)n->cfg.embed.rows, (long long)n->cfg.embed.dim);
    return QS_OK;
}

static void embed_init(qs_model *m, qs_node *n, float *hp, void *hb, uint64_t seed) {
    (void)hb;
    qs_layer_init_normal(qs_layer_host_param(m, n, 0, hp), m->params.entries[n->param[0]].numel, QS_EMBED_INIT_STD,
                         seed, (uint64_t)n->param[0]);
}

/* ---- Embedding: every element of the input (all of a sample's T ids) becomes a row ---- */
static qs_status embedding_infer(qs_model *m, qs_node *n) {
    QS_TRY(embed_check(n));
    const int64_t T = qs_layer_out_numel_per_sample(qs_layer_input(m, n, 0)), C = n->cfg.embed.dim;
    n->out_ndim = 3;
    n->out_shape[0] = 1;
    n->out_shape[1] = T;
    n->out_shape[2] = C;
    QS_TRY(qs_layer_declare_param(m, n, "weight", 2, (int64_t[]){n->cfg.embed.rows, C}));
    n->flops_bwd_weights = (double)(T * C);
    n->bytes_saved_for_backward = (size_t)T * sizeof(float); /* the ids */
    return QS_OK;
}

static int64_t embedding_rows(const qs_model *m, const qs_node *n) { return m->batch * n->out_shape[1]; }

static qs_status embedding_forward(qs_model *m, qs_node *n) {
    return m->be->ops->embedding_forward(m->be, m->stream, embedding_rows(m, n), n->cfg.embed.dim, n->cfg.embed.rows,
                                         qs_layer_input(m, n, 0)->y, qs_model_param_ptr(m, n->param[0]), n->y);
}

/* The table's gradient; a later node tied to the table (which runs its backward first) has
 * written its share already, so this one accumulates then. */
static qs_status embedding_backward_weights(qs_model *m, qs_node *n) {
    bool tied = false;
    for (int i = (int)(n - m->nodes) + 1; i < m->n_nodes && !tied; i++) tied = m->nodes[i].tied_param == n->param[0];
    return m->be->ops->embedding_backward(m->be, m->stream, embedding_rows(m, n), n->cfg.embed.dim,
                                          n->cfg.embed.rows, qs_layer_input(m, n, 0)->y, n->dy,
                                          qs_model_grad_ptr(m, n->param[0]), tied);
}

const qs_layer_impl qs_layer_embedding = {.kind_name = "Embedding", .infer = embedding_infer, .init = embed_init,
                                          .forward = embedding_forward,
                                          .backward_weights = embedding_backward_weights};

/* ---- position embedding: y[n,t,:] = x[n,t,:] + wpe[t,:] ---- */
static qs_status pos_infer(qs_model *m, qs_node *n) {
    QS_TRY(embed_check(n));
    const qs_node *x = qs_layer_input(m, n, 0);
    if (x->out_ndim != 3 || x->out_shape[2] != n->cfg.embed.dim || x->out_shape[1] > n->cfg.embed.rows)
        return QS_FAIL(QS_ERR_MISMATCH, "position embedding of %lld positions × %lld needs an (N, T ≤ %lld, %lld) input",
                       (long long)n->cfg.embed.rows, (long long)n->cfg.embed.dim, (long long)n->cfg.embed.rows,
                       (long long)n->cfg.embed.dim);
    qs_layer_same_shape(n, x);
    QS_TRY(qs_layer_declare_param(m, n, "weight", 2, (int64_t[]){n->cfg.embed.rows, n->cfg.embed.dim}));
    n->flops_fwd = (double)qs_layer_out_numel_per_sample(n);
    n->flops_bwd_weights = n->flops_fwd;
    return QS_OK;
}

static qs_status pos_forward(qs_model *m, qs_node *n) {
    return m->be->ops->add_broadcast(m->be, m->stream, m->batch, qs_layer_out_numel_per_sample(n),
                                     qs_layer_input(m, n, 0)->y, qs_model_param_ptr(m, n->param[0]), n->y);
}

static qs_status pos_backward_data(qs_model *m, qs_node *n) {
    bool acc;
    float *dx = qs_model_grad_target(m, n, 0, &acc);
    if (!dx) return QS_OK;
    return m->be->ops->accumulate(m->be, m->stream, m->batch * qs_layer_out_numel_per_sample(n), n->dy, dx, acc);
}

/* dwpe[t] = Σ_n dy[n,t] for the T positions used; rows T..P get 0. */
static qs_status pos_backward_weights(qs_model *m, qs_node *n) {
    const int64_t used = qs_layer_out_numel_per_sample(n), all = n->cfg.embed.rows * n->cfg.embed.dim;
    float *g = qs_model_grad_ptr(m, n->param[0]);
    QS_TRY(m->be->ops->column_sums(m->be, m->stream, m->batch, used, n->dy, g));
    if (all == used) return QS_OK;
    return m->be->ops->memset_zero(m->be, m->stream, g + used, (size_t)(all - used) * sizeof(float));
}

const qs_layer_impl qs_layer_pos_embedding = {.kind_name = "PositionEmbedding", .infer = pos_infer,
                                              .init = embed_init, .forward = pos_forward,
                                              .backward_data = pos_backward_data,
                                              .backward_weights = pos_backward_weights};
