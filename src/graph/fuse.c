/* src/graph/fuse.c — graph-level fusion of memory-bound neighbours (BatchNorm → ReLU,
 * Add → ReLU). */
#include "graph/graph.h"

int qs_model_fuse(qs_model *m) {
    if (m->be) return 0; /* buffers are laid out already: fusing now would be unsafe */
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
