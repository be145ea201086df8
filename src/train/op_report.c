/* src/train/op_report.c — per-op breakdown from node timers. */
#include "train/op_report.h"

/* The op's kind as reported: the layer's class name, "+Add" / "+ReLU" for what is fused into it. */
static const char *qs_op_kind_name(const qs_node *n) {
    if (n->kind == QS_NODE_BATCHNORM2D && n->cfg.bn.add) return n->cfg.bn.relu ? "BatchNorm2d+Add+ReLU" : "BatchNorm2d+Add";
    if (n->kind == QS_NODE_BATCHNORM2D && n->cfg.bn.relu) return "BatchNorm2d+ReLU";
    if (n->kind == QS_NODE_ADD && n->cfg.add.relu) return "Add+ReLU";
    if (n->kind == QS_NODE_MERGE_HEADS && n->cfg.merge.fused) return "FusedAttention";
    return qs_layer_impl_for(n->kind)->kind_name;
}

/* Mean ms per step of node n in category c. */
static double per_step(const qs_op_time *t, int64_t steps) { return steps > 0 ? t->total_ms / (double)steps : 0.0; }

static void totals(const qs_model *m, int64_t steps, double out[QS_CAT_COUNT]) {
    for (int c = 0; c < QS_CAT_COUNT; c++) out[c] = 0;
    for (int i = 0; i < m->n_nodes; i++)
        for (int c = 0; c < QS_CAT_COUNT; c++) out[c] += per_step(&m->nodes[i].time[c], steps);
    out[QS_CAT_OPTIMIZER] += per_step(&m->optimizer_time, steps);
    out[QS_CAT_COMM_WAIT] += per_step(&m->comm_wait_time, steps);
}

void qs_op_report_print(const qs_model *m, int64_t steps, size_t optimizer_bytes, FILE *f) {
    fprintf(f, "per-op time, ms per step (mean over %lld steps)\n", (long long)steps);
    fprintf(f, "  %-28s %-17s %9s %9s %9s %9s\n", "op", "kind", "forward", "bwd_data", "bwd_wgt", "cast");
    for (int i = 1; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        if (!qs_node_runs(n)) continue; /* fused into its producer, timed there */
        fprintf(f, "  %-28s %-17s %9.3f %9.3f %9.3f %9.3f\n", n->name, qs_op_kind_name(n),
                per_step(&n->time[QS_CAT_FORWARD], steps), per_step(&n->time[QS_CAT_BACKWARD_DATA], steps),
                per_step(&n->time[QS_CAT_BACKWARD_WEIGHTS], steps), per_step(&n->time[QS_CAT_CAST], steps));
    }
    double t[QS_CAT_COUNT], sum = 0;
    totals(m, steps, t);
    fprintf(f, "  totals:");
    for (int c = 0; c < QS_CAT_COUNT; c++) {
        fprintf(f, " %s %.3f", qs_cost_cat_name(c), t[c]);
        sum += t[c];
    }
    fprintf(f, " | sum %.3f ms\n", sum);
    qs_memory_report r;
    qs_model_memory(m, &r);
    fprintf(f, "memory (MiB): params %.2f, grads %.2f, optimizer %.2f, buffers %.2f, activations %.2f, "
               "activation grads %.2f, saved %.2f, workspace %.2f\n",
            r.params / 1048576.0, r.grads / 1048576.0, optimizer_bytes / 1048576.0, r.buffers / 1048576.0,
            r.activations / 1048576.0, r.activation_grads / 1048576.0, r.saved / 1048576.0, r.workspace / 1048576.0);
}

cJSON *qs_op_report_json(const qs_model *m, int64_t steps, size_t optimizer_bytes) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "steps", (double)steps);
    cJSON *ops = cJSON_AddArrayToObject(o, "ops");
    for (int i = 1; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        if (!qs_node_runs(n)) continue;
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "name", n->name);
        cJSON_AddStringToObject(op, "kind", qs_op_kind_name(n));
        cJSON_AddStringToObject(op, "precision", qs_precision_name(n->prec));
        for (int c = 0; c < QS_CAT_COUNT; c++)
            if (n->time[c].calls) cJSON_AddNumberToObject(op, qs_cost_cat_name(c), per_step(&n->time[c], steps));
        cJSON_AddNumberToObject(op, "flops_fwd_per_sample", n->flops_fwd);
        cJSON_AddNumberToObject(op, "saved_bytes_per_sample", (double)n->bytes_saved_for_backward);
        cJSON_AddItemToArray(ops, op);
    }
    double t[QS_CAT_COUNT];
    totals(m, steps, t);
    cJSON *tot = cJSON_AddObjectToObject(o, "totals_ms");
    for (int c = 0; c < QS_CAT_COUNT; c++) cJSON_AddNumberToObject(tot, qs_cost_cat_name(c), t[c]);
    qs_memory_report r;
    qs_model_memory(m, &r);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory_bytes");
    cJSON_AddNumberToObject(mem, "params", (double)r.params);
    cJSON_AddNumberToObject(mem, "grads", (double)r.grads);
    cJSON_AddNumberToObject(mem, "optimizer", (double)optimizer_bytes);
    cJSON_AddNumberToObject(mem, "buffers", (double)r.buffers);
    cJSON_AddNumberToObject(mem, "activations", (double)r.activations);
    cJSON_AddNumberToObject(mem, "activation_grads", (double)r.activation_grads);
    cJSON_AddNumberToObject(mem, "saved", (double)r.saved);
    cJSON_AddNumberToObject(mem, "workspace", (double)r.workspace);
    return o;
}
