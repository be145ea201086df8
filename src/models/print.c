/* src/models/print.c — qs_models_print: a per-node summary table of a built model. */
#include "models/models.h"

#include <string.h>

/* Per-sample output shape in PyTorch order: "C×H×W" for NHWC nodes (attention's (N,H,T,T') prints
 * as T'×H×T), "T×C" for sequences (N,T,C), "F" for (N,F), "scalar" for (N). */
static void shape_text(const qs_node *n, char *buf, size_t cap) {
    const int64_t *s = n->out_shape;
    if (n->out_ndim == 4)
        snprintf(buf, cap, "%lldx%lldx%lld", (long long)s[3], (long long)s[1], (long long)s[2]);
    else if (n->out_ndim == 3)
        snprintf(buf, cap, "%lldx%lld", (long long)s[1], (long long)s[2]);
    else if (n->out_ndim == 2)
        snprintf(buf, cap, "%lld", (long long)s[1]);
    else
        snprintf(buf, cap, "scalar");
}

/* Input node indices as "a,b", or "-" for none. */
static void inputs_text(const qs_node *n, char *buf, size_t cap) {
    if (n->n_inputs == 0) {
        snprintf(buf, cap, "-");
    } else if (n->n_inputs == 1) {
        snprintf(buf, cap, "%d", n->inputs[0]);
    } else {
        snprintf(buf, cap, "%d,%d", n->inputs[0], n->inputs[1]);
    }
}

/* Sum of the element counts of a table's entries. */
static int64_t table_numel(const qs_table *t) {
    int64_t total = 0;
    for (int i = 0; i < t->count; i++) total += t->entries[i].numel;
    return total;
}

/* Kind name of a node ("Conv2d", ...), "?" if its kind has no implementation. */
static const char *kind_text(const qs_node *n) {
    const qs_layer_impl *impl = qs_layer_impl_for(n->kind);
    return impl && impl->kind_name ? impl->kind_name : "?";
}

void qs_models_print(const qs_model *m, FILE *f) {
    int name_w = 4, kind_w = 4;
    for (int i = 0; i < m->n_nodes; i++) {
        int len = (int)strlen(m->nodes[i].name), klen = (int)strlen(kind_text(&m->nodes[i]));
        if (len > name_w) name_w = len;
        if (klen > kind_w) kind_w = klen;
    }
    fprintf(f, "model %s (%s)\n", m->arch, m->config);
    fprintf(f, "%4s  %-*s  %-*s  %-7s %-16s %12s %14s\n", "#", name_w, "name", kind_w, "kind",
            "inputs", "output (C,H,W)", "params", "MFLOPs/sample");
    double fwd = 0, bwd = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        char shape[48], ins[24];
        shape_text(n, shape, sizeof shape);
        inputs_text(n, ins, sizeof ins);
        fprintf(f, "%4d  %-*s  %-*s  %-7s %-16s %12lld %14.3f\n", i, name_w, n->name, kind_w,
                kind_text(n), ins, shape,
                (long long)n->param_count, n->flops_fwd / 1e6);
        fwd += n->flops_fwd;
        bwd += n->flops_bwd_data + n->flops_bwd_weights;
    }
    fprintf(f, "total: %lld parameters in %d tensors, %lld buffer elements in %d tensors; "
               "%.4f GFLOPs forward, %.4f GFLOPs backward per sample\n",
            (long long)table_numel(&m->params), m->params.count,
            (long long)table_numel(&m->buffers), m->buffers.count, fwd / 1e9, bwd / 1e9);
}
