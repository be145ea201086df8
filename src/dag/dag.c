/* src/dag/dag.c — the accessors of src/dag/dag.h: cost-category names, table pointers, the
 * gradient target of an input slot, a node's only reader and the owner of a gradient buffer. */
#include "dag/dag.h"

const char *qs_cost_cat_name(qs_cost_cat c) {
    static const char *const names[QS_CAT_COUNT] = {
        "forward", "backward_data", "backward_weights", "cast", "optimizer", "comm_wait"};
    return (unsigned)c < QS_CAT_COUNT ? names[c] : "invalid";
}

void *qs_model_param_ptr(qs_model *m, int i) { return (char *)m->param_data + m->params.entries[i].offset; }
void *qs_model_grad_ptr(qs_model *m, int i) { return (char *)m->grad_data + m->params.entries[i].offset; }
void *qs_model_buffer_ptr(qs_model *m, int i) { return (char *)m->buffer_data + m->buffers.entries[i].offset; }

qs_node *qs_model_only_reader(const qs_model *m, int i) {
    if (m->nodes[i].n_consumers != 1) return NULL;
    for (int j = i + 1; j < m->n_nodes; j++)
        for (int k = 0; k < m->nodes[j].n_inputs; k++)
            if (m->nodes[j].inputs[k] == i) return &m->nodes[j];
    return NULL;
}

int qs_model_grad_owner(const qs_model *m, int i) {
    for (;;) {
        const qs_node *n = &m->nodes[i];
        if (n->alias_of >= 0) i = n->alias_of;
        else if (n->kind == QS_NODE_CAST && n->cfg.cast.straight_through && n->n_inputs == 1) i = n->inputs[0];
        else return i;
    }
}

void *qs_model_grad_target(qs_model *m, qs_node *n, int slot, bool *accumulate) {
    qs_node *in = &m->nodes[n->inputs[slot]];
    while (in->dy_alias) in = &m->nodes[in->inputs[0]]; /* a cast sharing its input's gradient */
    *accumulate = false;
    if (!in->needs_grad || !in->dy) return NULL;
    *accumulate = in->grads_received > 0;
    in->grads_received++;
    return in->dy;
}
