/* src/graph/fuse.c — graph-level fusion of memory-bound neighbours (BatchNorm → ReLU,
 * Add → ReLU, BatchNorm → Add[+ReLU], BatchNorm[+ReLU] → straight-through BF16 cast). */
#include "graph/graph.h"

/* The input slot of Add node a whose BatchNorm can take the Add in (cfg.bn.add), or -1: a
 * BatchNorm without a fused ReLU or Add, read by nothing else, that comes after the Add's other
 * input (which must be computed when the BatchNorm runs). */
static int bn_slot_for_add(const qs_model *m, const qs_node *a) {
    if (a->alias_of >= 0 || a->inputs[0] == a->inputs[1]) return -1;
    for (int k = 0; k < 2; k++) {
        const qs_node *b = &m->nodes[a->inputs[k]];
        if (b->kind == QS_NODE_BATCHNORM2D && !b->cfg.bn.relu && !b->cfg.bn.add && b->alias_of < 0 &&
            b->n_consumers == 1 && b->out_dtype == QS_F32 && a->inputs[k] > a->inputs[1 - k])
            return k;
    }
    return -1;
}

/* Fuse each Add (with its ReLU) into the BatchNorm bn_slot_for_add finds: the BatchNorm adds the
 * other input before its ReLU, the Add and its ReLU become aliases of the BatchNorm. */
static int fuse_bn_add(qs_model *m) {
    int fused = 0;
    for (int i = 1; i < m->n_nodes; i++) {
        qs_node *a = &m->nodes[i];
        if (a->kind != QS_NODE_ADD) continue;
        const int k = bn_slot_for_add(m, a);
        if (k < 0) continue;
        const int bn = a->inputs[k];
        m->nodes[bn].cfg.bn.add = true;
        m->nodes[bn].cfg.bn.relu = a->cfg.add.relu;
        a->alias_of = bn;
        for (int j = i + 1; j < m->n_nodes; j++) /* the ReLU fused into the Add */
            if (m->nodes[j].alias_of == i) m->nodes[j].alias_of = bn;
        fused++;
    }
    return fused;
}

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
    return fused + fuse_bn_add(m);
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
