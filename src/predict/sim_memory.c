/* src/predict/sim_memory.c — the replayer's memory prediction through the model's memory plan
 * (see sim_memory.h). */
#include "predict/sim_memory.h"

#include <stdlib.h>
#include <string.h>
#include "graph/memory_plan.h"

static bool qs_sim_every_attention(void *ctx, const qs_attention_desc *d) {
    (void)ctx;
    (void)d;
    return true;
}

/* Node i of m's own buffers in its plan p (qs_sim_memory's node_bytes): none for a fused alias,
 * whose buffers are its owner's. */
static size_t qs_sim_node_plan_bytes(const qs_memory_plan *p, const qs_model *m, int i) {
    const qs_mem_node *n = &p->node[i];
    size_t b = 0;
    if (m->nodes[i].alias_of >= 0) return 0;
    if (n->y >= 0) b += qs_mem_footprint(p->buf[n->y].bytes);
    if (n->dy >= 0 && !n->dy_shared) b += qs_mem_footprint(p->buf[n->dy].bytes);
    for (int k = 0; k < QS_MAX_NODE_SAVED; k++)
        if (n->saved[k] >= 0) b += qs_mem_footprint(p->buf[n->saved[k]].bytes);
    return b;
}

qs_status qs_sim_memory(const qs_sim_memory_input *in, qs_memory_report *r, size_t *peak, size_t *node_bytes) {
    const qs_model *m = in->m;
    memset(r, 0, sizeof *r);
    *peak = 0;
    qs_model c = *m; /* a copy to fuse attention in, as qs_model_setup does on the backend */
    c.be = NULL;
    c.batch = in->batch;
    c.nodes = malloc((size_t)m->n_nodes * sizeof *c.nodes);
    if (!c.nodes) return QS_FAIL(QS_ERR_OOM, "out of memory predicting the memory of %s", m->arch);
    memcpy(c.nodes, m->nodes, (size_t)m->n_nodes * sizeof *c.nodes);
    if (in->facts.fused_attention)
        qs_model_fuse_attention(&c, in->attention_supported ? in->attention_supported : qs_sim_every_attention,
                                in->attention_ctx);
    qs_memory_plan p;
    qs_status st = qs_model_memory_plan(&c, in->batch, &in->facts, in->workspace, &p);
    free(c.nodes);
    if (st != QS_OK) return qs_error_wrap(st, "predicting the memory of %s: ", m->arch);
    r->params = m->params.bytes;
    r->grads = m->params.bytes;
    r->optimizer = in->optimizer ? qs_optim_state_bytes(in->optimizer, &m->params) : 0;
    r->buffers = m->buffers.bytes + sizeof *m->step_dev; /* and the device step counter */
    r->activations = p.arena_bytes[QS_MEM_ACTIVATIONS];
    r->activation_grads = p.arena_bytes[QS_MEM_ACTIVATION_GRADS];
    r->saved = p.arena_bytes[QS_MEM_SAVED];
    r->workspace = p.arena_bytes[QS_MEM_WORKSPACE];
    r->labels = p.arena_bytes[QS_MEM_LABELS];
    *peak = r->params + r->grads + r->optimizer + r->buffers + qs_memory_plan_bytes(&p);
    for (int i = 0; node_bytes && i < m->n_nodes; i++) node_bytes[i] = qs_sim_node_plan_bytes(&p, m, i);
    qs_memory_plan_free(&p);
    return QS_OK;
}

bool qs_sim_profile_attention_fused(void *ctx, const qs_attention_desc *d) {
    const qs_profile *p = ctx;
    const qs_profile_prec_run *run = qs_profile_run_at(p, d->dtype == QS_BF16 ? QS_PREC_BF16 : QS_PREC_FP16);
    for (int i = 0; run && i < run->n_ops; i++) {
        if (!run->ops[i].fused) continue;
        const qs_profile_op *into = qs_profile_find_op(run, run->ops[i].fused_into);
        if (into && strcmp(into->kind, "MergeHeads") == 0) return true;
    }
    return false;
}
