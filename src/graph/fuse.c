/* src/graph/fuse.c — graph-level fusion of memory-bound neighbours (BatchNorm → ReLU,
 * Add → ReLU, BatchNorm[+ReLU] → straight-through BF16 cast). */
#include "graph/graph.h"

int qs_model_fuse(qs_model *m) {
    if (m->be) return 0; /* buffers are laid out already: fusing now would be unsafe */
    m->fuse_casts = true;
    int fused = 0;
    for (int i = 1; i < m->n_nodes; i++) {
        qs_node *r = &m->nodes[i];
        if (r->kind != QS_NODE_RELU || r->alias_of >= 0) continue;
        qs_node *p = &m->nodes[r->inputs[0]];
        if (p->n_consumers != 1) continue;
        if (p->kind == QS_NODE_BATCHNORM2D && !p->cfg.bn.relu) p->cfg.bn.relu = true;
        else if (p->kind == QS_NODE_ADD && !p->cfg.add.relu) p->cfg.add.relu = true;
        else continue;
        r->alias_of = r->inputs[0];
        fused++;
    }
    return fused;
}

int qs_model_fuse_casts(qs_model *m) {
    if (m->be) return 0;
    int fused = 0;
    for (int i = 1; i < m->n_nodes; i++) {
        qs_node *c = &m->nodes[i];
        if (c->kind != QS_NODE_CAST || !c->cfg.cast.straight_through || c->out_dtype != QS_BF16 || c->alias_of >= 0)
            continue;
        qs_node *src = &m->nodes[c->inputs[0]]; /* the BatchNorm, or the ReLU fused into it */
        const int bn = src->alias_of >= 0 ? src->alias_of : c->inputs[0];
        qs_node *b = &m->nodes[bn];
        if (b->kind != QS_NODE_BATCHNORM2D || b->out_dtype != QS_F32 || src->n_consumers != 1) continue;
        if (src != b && b->n_consumers != 1) continue;
        b->out_dtype = QS_BF16;
        src->out_dtype = QS_BF16;
        c->alias_of = bn;
        fused++;
    }
    return fused;
}
