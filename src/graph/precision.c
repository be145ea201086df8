/* src/graph/precision.c — per-node precisions and the quantizing casts in front of
 * low-precision GEMM nodes (see precision.h). */
#include "graph/precision.h"

#include <stdio.h>
#include <string.h>

bool qs_node_precision_selectable(qs_node_kind kind) {
    return kind == QS_NODE_LINEAR || kind == QS_NODE_CONV2D || kind == QS_NODE_MATMUL;
}

/* How many leading inputs of a GEMM node are quantized operands: both of a MatMul's
 * (activations), the input X of Linear and Conv2d (which quantize their weights themselves). */
static int quantized_inputs(const qs_node *n) { return n->kind == QS_NODE_MATMUL ? 2 : 1; }

void qs_model_set_uniform_precision(qs_model *m, qs_precision p) {
    for (int i = 0; i < m->n_nodes; i++)
        if (qs_node_precision_selectable(m->nodes[i].kind)) m->nodes[i].prec = p;
}

void qs_model_precision_counts(const qs_model *m, int counts[QS_PREC_COUNT]) {
    for (int p = 0; p < QS_PREC_COUNT; p++) counts[p] = 0;
    for (int i = 0; i < m->n_nodes; i++)
        if (qs_node_precision_selectable(m->nodes[i].kind) && (unsigned)m->nodes[i].prec < QS_PREC_COUNT)
            counts[m->nodes[i].prec]++;
}

/* Shift every node reference >= pos up by one (a node is about to be inserted at pos). */
static void shift_refs(qs_model *m, int pos) {
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node *n = &m->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= pos) n->inputs[k]++;
        if (n->alias_of >= pos) n->alias_of++;
        if (n->fused_into >= pos) n->fused_into++;
        if (n->kind == QS_NODE_MERGE_HEADS && n->cfg.merge.fused) {
            int *ix[] = {&n->cfg.merge.q, &n->cfg.merge.k, &n->cfg.merge.v, &n->cfg.merge.scores,
                         &n->cfg.merge.softmax};
            for (size_t j = 0; j < sizeof ix / sizeof *ix; j++)
                if (*ix[j] >= pos) (*ix[j])++;
        }
    }
    for (int i = 0; i < m->params.count; i++)
        if (m->params.entries[i].node >= pos) m->params.entries[i].node++;
    for (int i = 0; i < m->buffers.count; i++)
        if (m->buffers.entries[i].node >= pos) m->buffers.entries[i].node++;
    if (m->logits_node >= pos) m->logits_node++;
}

/* Insert a straight-through cast of node `src` to dtype `to` at index src+1 (after the
 * input and any node fused into it, which all come right after their producer). */
static qs_status insert_cast(qs_model *m, int src, qs_dtype to, const char *name, int *idx_out) {
    /* append through qs_model_add (growth, inference, consumer count), then rotate into place */
    int pos = src + 1;
    while (pos < m->n_nodes && m->nodes[pos].alias_of == src) pos++;
    qs_node_cfg cfg = {.cast = {.to = to, .straight_through = true}};
    int idx;
    QS_TRY(qs_model_add(m, QS_NODE_CAST, name, &src, 1, &cfg, &idx));
    qs_node cast = m->nodes[idx];
    m->n_nodes--; /* take it out, make room at pos, put it back */
    shift_refs(m, pos);
    memmove(&m->nodes[pos + 1], &m->nodes[pos], (size_t)(m->n_nodes - pos) * sizeof *m->nodes);
    m->nodes[pos] = cast;
    m->n_nodes++;
    *idx_out = pos;
    return QS_OK;
}

/* The straight-through cast of node src to dtype `to` that comes before node `before` (a GEMM's
 * quantizing cast of it), or -1. */
static int straight_cast_of(const qs_model *m, int src, qs_dtype to, int before) {
    for (int j = src + 1; j < before; j++) {
        const qs_node *c = &m->nodes[j];
        if (c->kind == QS_NODE_CAST && c->cfg.cast.straight_through && c->out_dtype == to && c->n_inputs == 1 &&
            c->inputs[0] == src)
            return j;
    }
    return -1;
}

/* Route input `slot` of node i through a straight-through cast of its source to the node's
 * operand dtype: reuse one made for an earlier consumer, or insert one (which moves node i
 * up by one; *i follows it). */
static qs_status cast_input(qs_model *m, int *i, int slot, int *inserted) {
    qs_node *n = &m->nodes[*i];
    const qs_dtype want = qs_precision_operand_dtype(n->prec, false);
    const int src = n->inputs[slot];
    if (m->nodes[src].out_dtype == want) return QS_OK;
    const int found = straight_cast_of(m, src, want, *i);
    if (found >= 0) {
        m->nodes[src].n_consumers--;
        m->nodes[found].n_consumers++;
        n->inputs[slot] = found;
        return QS_OK;
    }
    char name[QS_NAME_MAX];
    snprintf(name, sizeof name, "%.70s.to_%s", m->nodes[src].name, qs_dtype_name(want));
    int cast;
    QS_TRY(insert_cast(m, src, want, name, &cast));
    if (cast <= *i) (*i)++; /* our node moved up by one */
    n = &m->nodes[*i];
    m->nodes[src].n_consumers--; /* qs_model_add counted the cast; the GEMM moves to it */
    m->nodes[cast].n_consumers++;
    n->inputs[slot] = cast;
    if (inserted) (*inserted)++;
    return QS_OK;
}

int qs_model_bf16_conv_outputs(qs_model *m) {
    if (m->be) return 0;
    int made = 0;
    for (int i = 1; i < m->n_nodes; i++) {
        qs_node *c = &m->nodes[i];
        if (c->kind != QS_NODE_CONV2D || c->alias_of >= 0 || c->cfg.conv.bias || c->out_dtype != QS_F32 ||
            qs_precision_operand_dtype(c->prec, false) != QS_BF16)
            continue;
        const qs_node *r = qs_model_only_reader(m, i);
        if (!r || r->kind != QS_NODE_BATCHNORM2D || r->alias_of >= 0) continue;
        c->out_dtype = QS_BF16;
        made++;
    }
    return made;
}

int qs_model_bf16_residuals(qs_model *m) {
    if (m->be) return 0;
    int made = 0;
    for (int i = 1; i < m->n_nodes; i++) {
        qs_node *a = &m->nodes[i];
        if (a->kind != QS_NODE_ADD) continue;
        for (int k = 0; k < a->n_inputs; k++) {
            const int src = a->inputs[k], cast = straight_cast_of(m, src, QS_BF16, i);
            if (cast < 0) continue;
            m->nodes[src].n_consumers--;
            m->nodes[cast].n_consumers++;
            a->inputs[k] = cast;
            made++;
        }
    }
    return made;
}

/* Whether node j writes the gradient of its input slot k into that input's owner's buffer:
 * everything but a straight-through cast (it shares the buffer) and a node fused into that owner
 * (its backward is the owner's). */
static bool writes_input_grad(const qs_model *m, int j, int k) {
    const qs_node *r = &m->nodes[j];
    if (r->kind == QS_NODE_CAST && r->cfg.cast.straight_through && r->alias_of < 0) return false;
    return r->alias_of < 0 || r->alias_of != qs_model_grad_owner(m, r->inputs[k]);
}

int qs_model_bf16_input_grads(qs_model *m) {
    if (m->be) return 0;
    int made = 0;
    for (int i = 1; i < m->n_nodes; i++) {
        qs_node *t = &m->nodes[i];
        if ((t->kind != QS_NODE_BATCHNORM2D && t->kind != QS_NODE_RELU) || t->alias_of >= 0 || t->grad_dtype != QS_F32)
            continue;
        int writers = 0, writer = -1;
        for (int j = i + 1; j < m->n_nodes; j++)
            for (int k = 0; k < m->nodes[j].n_inputs; k++)
                if (qs_model_grad_owner(m, m->nodes[j].inputs[k]) == i && writes_input_grad(m, j, k)) {
                    writers++;
                    writer = j;
                }
        if (writers != 1) continue;
        const qs_node *g = &m->nodes[writer];
        if ((g->kind != QS_NODE_CONV2D && g->kind != QS_NODE_LINEAR) || g->alias_of >= 0 ||
            qs_model_grad_owner(m, g->inputs[0]) != i || qs_precision_operand_dtype(g->prec, false) != QS_BF16)
            continue;
        t->grad_dtype = QS_BF16;
        made++;
    }
    return made;
}

qs_status qs_model_insert_casts(qs_model *m, int *inserted) {
    if (inserted) *inserted = 0;
    if (m->be) return QS_FAIL(QS_ERR_INVALID_ARG, "model %s: casts must be inserted before qs_model_setup", m->arch);
    for (int i = 1; i < m->n_nodes; i++) {
        if (!qs_node_precision_selectable(m->nodes[i].kind)) continue;
        const int slots = quantized_inputs(&m->nodes[i]);
        for (int k = 0; k < slots; k++) QS_TRY(cast_input(m, &i, k, inserted));
    }
    qs_model_bf16_residuals(m);
    if (m->fuse_casts) qs_model_fuse_casts(m);
    qs_model_bf16_conv_outputs(m);
    qs_model_bf16_input_grads(m);
    return QS_OK;
}
