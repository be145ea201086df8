/* src/graph/memory_plan.c — the model's one memory plan (see memory_plan.h): the layers'
 * declarations gathered node by node, then laid out in one arena per category. */
#include "graph/memory_plan.h"

#include <stdlib.h>
#include <string.h>
#include "layers/registry.h"

_Static_assert(QS_MAX_NODE_SAVED == 3, "qs_mem_node.saved is initialised to {-1, -1, -1}");

void qs_model_mark_grads(qs_model *m) {
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        n->needs_grad = (i == 0) ? m->want_input_grad : qs_node_has_weights(n);
        for (int k = 0; k < n->n_inputs; k++) n->needs_grad |= m->nodes[n->inputs[k]].needs_grad;
    }
}

/* Append buffer b (offset laid out later); its index into *idx, or -1 when it is empty. */
static qs_status plan_add(qs_memory_plan *p, qs_mem_buffer b, int *idx) {
    *idx = -1;
    if (b.bytes == 0) return QS_OK;
    if (p->n_buf == p->cap_buf) {
        int cap = p->cap_buf ? 2 * p->cap_buf : 64;
        qs_mem_buffer *t = realloc(p->buf, (size_t)cap * sizeof *t);
        if (!t) return QS_FAIL(QS_ERR_OOM, "out of memory planning the model's buffers (%d)", cap);
        p->buf = t;
        p->cap_buf = cap;
    }
    *idx = p->n_buf;
    p->buf[p->n_buf++] = b;
    return QS_OK;
}

/* A node buffer of declaration d in arena a, live for the whole step. */
static qs_mem_buffer node_buffer(const qs_model *m, int i, qs_mem_role role, int slot, qs_mem_arena a,
                                 qs_buffer_decl d) {
    return (qs_mem_buffer){.node = i, .role = role, .slot = slot, .arena = a, .bytes = d.bytes, .dtype = d.dtype,
                           .persistent = d.persistent, .first = 0, .last = 2 * m->n_nodes - 1};
}

/* The declaration every node starts from: its output at out_dtype; where it needs a gradient,
 * one of its own at grad_dtype; nothing saved. */
static qs_node_decl node_defaults(const qs_node *n) {
    const size_t numel = (size_t)qs_shape_numel(n->out_ndim, n->out_shape);
    qs_node_decl d;
    memset(&d, 0, sizeof d);
    d.out = (qs_buffer_decl){.bytes = numel * qs_dtype_size(n->out_dtype), .dtype = n->out_dtype};
    d.grad = n->needs_grad ? QS_GRAD_OWN : QS_GRAD_NONE;
    d.dy = (qs_buffer_decl){.bytes = numel * qs_dtype_size(n->grad_dtype), .dtype = n->grad_dtype};
    return d;
}

/* Node i's buffers: its owner's (fused, alias_of), none (inside a fused attention), or what
 * its layer declares. */
static qs_status plan_node(qs_memory_plan *p, const qs_model *m, int i, const qs_mem_facts *f) {
    const qs_node *n = &m->nodes[i];
    qs_mem_node *pn = &p->node[i];
    if (n->alias_of >= 0) {
        pn->y = p->node[n->alias_of].y;
        pn->dy = p->node[n->alias_of].dy;
        return QS_OK;
    }
    if (n->fused_into >= 0) return QS_OK;
    qs_node_decl d = node_defaults(n);
    const qs_layer_impl *impl = qs_layer_impl_for(n->kind);
    if (impl->declare) impl->declare(m, n, f, &d);
    QS_TRY(plan_add(p, node_buffer(m, i, QS_MEM_Y, -1, QS_MEM_ACTIVATIONS, d.out), &pn->y));
    if (d.grad == QS_GRAD_SHARE_INPUT && n->n_inputs > 0 && p->node[n->inputs[0]].dy >= 0) {
        pn->dy = p->node[n->inputs[0]].dy;
        pn->dy_shared = true;
    } else if (d.grad != QS_GRAD_NONE) {
        QS_TRY(plan_add(p, node_buffer(m, i, QS_MEM_DY, -1, QS_MEM_ACTIVATION_GRADS, d.dy), &pn->dy));
    }
    for (int k = 0; k < QS_MAX_NODE_SAVED; k++)
        QS_TRY(plan_add(p, node_buffer(m, i, QS_MEM_SAVED_TENSOR, k, QS_MEM_SAVED, d.saved[k]), &pn->saved[k]));
    return QS_OK;
}

/* Each running node's workspace (live from its forward to its backward), and the labels. */
static qs_status plan_scratch_and_labels(qs_memory_plan *p, const qs_model *m, const size_t *workspace) {
    int idx;
    for (int i = 0; workspace && i < m->n_nodes; i++) {
        if (!qs_node_runs(&m->nodes[i])) continue;
        qs_mem_buffer b = {.node = i, .role = QS_MEM_SCRATCH, .slot = -1, .arena = QS_MEM_WORKSPACE,
                           .bytes = workspace[i], .dtype = QS_U8, .first = qs_mem_position(m->n_nodes, i, false),
                           .last = qs_mem_position(m->n_nodes, i, true)};
        QS_TRY(plan_add(p, b, &idx));
    }
    const size_t label_bytes = (size_t)(p->batch * m->label_len) * sizeof(int32_t);
    const qs_mem_role roles[2] = {QS_MEM_LABEL_IDS, QS_MEM_PREDICTIONS};
    for (int k = 0; k < 2; k++) {
        qs_mem_buffer b = {.node = -1, .role = roles[k], .slot = -1, .arena = QS_MEM_LABELS, .bytes = label_bytes,
                           .dtype = QS_S32, .first = 0, .last = 2 * m->n_nodes - 1};
        QS_TRY(plan_add(p, b, &idx));
    }
    return QS_OK;
}

/* Offsets: one after another in each arena, except the workspace arena, where every op's
 * scratch starts at 0 (one op runs at a time). */
static void plan_layout(qs_memory_plan *p) {
    memset(p->arena_bytes, 0, sizeof p->arena_bytes);
    for (int b = 0; b < p->n_buf; b++) {
        qs_mem_buffer *x = &p->buf[b];
        size_t *end = &p->arena_bytes[x->arena];
        const size_t fp = qs_mem_footprint(x->bytes);
        if (x->arena == QS_MEM_WORKSPACE) {
            x->offset = 0;
            if (fp > *end) *end = fp;
        } else {
            x->offset = *end;
            *end += fp;
        }
    }
}

qs_status qs_model_memory_plan(const qs_model *m, int64_t batch, const qs_mem_facts *f, const size_t *workspace,
                               qs_memory_plan *out) {
    memset(out, 0, sizeof *out);
    if (m->logits_node < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: qs_model_finalize was not called", m->arch);
    if (batch < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "memory plan of %s: batch size must be ≥ 1 (got %lld)", m->arch,
                                  (long long)batch);
    qs_model c = *m; /* shaped for the batch, without a backend: the declarations see only f */
    c.be = NULL;
    c.batch = batch;
    c.facts = *f;
    c.nodes = malloc((size_t)m->n_nodes * sizeof *c.nodes);
    out->node = malloc((size_t)m->n_nodes * sizeof *out->node);
    qs_status st = c.nodes && out->node ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory planning %s", m->arch);
    if (st == QS_OK) {
        memcpy(c.nodes, m->nodes, (size_t)m->n_nodes * sizeof *c.nodes);
        for (int i = 0; i < c.n_nodes; i++) c.nodes[i].out_shape[0] = batch;
        qs_model_mark_grads(&c);
        out->batch = batch;
        out->facts = *f;
        out->n_nodes = m->n_nodes;
        for (int i = 0; i < m->n_nodes; i++) out->node[i] = (qs_mem_node){.y = -1, .dy = -1, .saved = {-1, -1, -1}};
    }
    for (int i = 0; i < c.n_nodes && st == QS_OK; i++) {
        st = plan_node(out, &c, i, f);
        if (st != QS_OK) st = qs_error_wrap(st, "memory plan of node %s: ", c.nodes[i].name);
    }
    if (st == QS_OK) st = plan_scratch_and_labels(out, &c, workspace);
    free(c.nodes);
    if (st != QS_OK) {
        qs_memory_plan_free(out);
        return st;
    }
    plan_layout(out);
    return QS_OK;
}

void qs_memory_plan_free(qs_memory_plan *p) {
    free(p->buf);
    free(p->node);
    memset(p, 0, sizeof *p);
}

const char *qs_mem_arena_name(qs_mem_arena a) {
    static const char *const names[QS_MEM_ARENA_COUNT] = {"activations", "activation_grads", "saved", "workspace",
                                                          "labels"};
    return (unsigned)a < QS_MEM_ARENA_COUNT ? names[a] : "invalid";
}

size_t qs_memory_plan_bytes(const qs_memory_plan *p) {
    size_t total = 0;
    for (int a = 0; a < QS_MEM_ARENA_COUNT; a++) total += p->arena_bytes[a];
    return total;
}

void qs_memory_plan_node(const qs_memory_plan *p, int i, size_t *out, size_t *grad, size_t *saved) {
    *out = *grad = *saved = 0;
    const qs_mem_node *pn = &p->node[i];
    if (pn->y >= 0 && p->buf[pn->y].node == i) *out = qs_mem_footprint(p->buf[pn->y].bytes);
    if (pn->dy >= 0 && p->buf[pn->dy].node == i) *grad = qs_mem_footprint(p->buf[pn->dy].bytes);
    for (int k = 0; k < QS_MAX_NODE_SAVED; k++)
        if (pn->saved[k] >= 0) *saved += qs_mem_footprint(p->buf[pn->saved[k]].bytes);
}
