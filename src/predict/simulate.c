/* src/predict/simulate.c — defines: the replayer's view of one worker (simulate.h): each node's
 * cost from the profile, the charges the planner takes, the predicted memory and the worker's
 * timeline. The cluster around them: simulate_cluster.c. */
#include "predict/simulate_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/precision.h"
#include "parallel/cpu_quota.h"
#include "predict/profile.h"
#include "predict/sim_memory.h"

/* ---- the profile's runs ---- */

qs_status qs_sim_check_profile(const qs_sim_worker *w, int rank) {
    const qs_profile *p = w->profile;
    if (strcmp(p->model, w->m->arch) != 0 || strcmp(p->config, w->m->config) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "%s profiles %s \"%s\", but worker %d trains %s \"%s\": profile the same model "
                       "and options", p->origin, p->model, p->config, rank, w->m->arch, w->m->config);
    if (p->batch != w->batch)
        return QS_FAIL(QS_ERR_MISMATCH, "%s was taken at batch %lld, but worker %d trains a local batch of %lld: "
                       "profile at that batch", p->origin, (long long)p->batch, rank, (long long)w->batch);
    return QS_OK;
}

qs_status qs_sim_worker_emulation(const qs_profile *p, const qs_cluster_worker *cw, int r, double *slowdown,
                                  bool *whole_step) {
    double ps = p->has_emulation ? p->emulated_slowdown : 1, ws = cw ? cw->slowdown : 1;
    *slowdown = 1;
    *whole_step = false;
    if (p->has_emulation && !(ps == ws))
        return QS_FAIL(QS_ERR_MISMATCH, "%s was taken under an emulated slowdown of %g, but worker %d has %g: "
                       "profile with --cluster for this cluster", p->origin, ps, r, ws);
    if (!p->has_emulation && ws > 1) {
        *slowdown = ws;
        *whole_step = strcmp(cw->emulation_method, "cgroup") == 0 ||
                      (strcmp(cw->emulation_method, "auto") == 0 && qs_cpu_quota_available(NULL, 0));
    }
    return QS_OK;
}

/* The run an op at precision p is costed from: p's own for Conv2d/Linear, else the run of the
 * nearest Conv2d/Linear upstream (its cache and memory state), else the base run. */
static qs_status qs_sim_run_for(const qs_sim_worker *w, const qs_node *n, const qs_profile_prec_run **run) {
    if (qs_node_precision_selectable(n->kind)) {
        *run = qs_profile_run_at(w->profile, n->prec);
        if (!*run)
            return QS_FAIL(QS_ERR_MISMATCH, "%s has no run at %s, which %s uses: profile with --precisions including it",
                           w->profile->origin, qs_precision_name(n->prec), n->name);
        return QS_OK;
    }
    const qs_node *up = n;
    while (up->n_inputs > 0 && !qs_node_precision_selectable(up->kind)) up = &w->m->nodes[up->inputs[0]];
    *run = NULL;
    if (qs_node_precision_selectable(up->kind)) *run = qs_profile_run_at(w->profile, up->prec);
    if (!*run) *run = qs_profile_base_run(w->profile);
    return QS_OK;
}

/* ---- one node's cost ---- */

/* One node's cost: times per category (ms) and its workspace (bytes, its arena footprint). */
typedef struct qs_sim_cost {
    double fwd, bwd_data, bwd_weights, cast;
    double workspace;
} qs_sim_cost;

static void qs_sim_cost_from_op(const qs_profile_op *op, qs_sim_cost *c) {
    c->fwd = op->forward_ms;
    c->bwd_data = op->backward_data_ms;
    c->bwd_weights = op->backward_weights_ms;
    c->cast = op->cast_ms;
    c->workspace = (double)op->workspace_bytes;
}

/* A cast measured in no run: its dtype pair's fitted line (no workspace). */
static qs_status qs_sim_cast_cost(const qs_sim_worker *w, const qs_node *n, qs_sim_cost *c) {
    const qs_dtype from = w->m->nodes[n->inputs[0]].out_dtype, to = n->out_dtype;
    double elems = (double)qs_shape_numel(n->out_ndim, n->out_shape) * (double)w->batch;
    for (int i = 0; i < w->profile->n_casts; i++) {
        const qs_profile_cast_fit *f = &w->profile->casts[i];
        if (f->from != from || f->to != to) continue;
        memset(c, 0, sizeof *c);
        c->cast = f->alpha_ms + f->beta_ms_per_element * elems;
        return QS_OK;
    }
    return QS_FAIL(QS_ERR_MISMATCH, "%s has no cast from %s to %s (needed by %s): profile the precision that uses it",
                   w->profile->origin, qs_dtype_name(from), qs_dtype_name(to), n->name);
}

static qs_status qs_sim_node_cost(const qs_sim_worker *w, const qs_node *n, qs_sim_cost *c) {
    memset(c, 0, sizeof *c);
    if (n->kind == QS_NODE_CAST) { /* measured where the same cast ran (the first run holding it), else fitted */
        const qs_profile_op *op = NULL;
        for (int r = 0; r < w->profile->n_runs && !op; r++) op = qs_profile_find_op(&w->profile->runs[r], n->name);
        if (op) qs_sim_cost_from_op(op, c);
        else QS_TRY(qs_sim_cast_cost(w, n, c));
        return QS_OK;
    }
    const qs_profile_prec_run *run;
    QS_TRY(qs_sim_run_for(w, n, &run));
    const qs_profile_op *op = qs_profile_find_op(run, n->name);
    if (!op)
        return QS_FAIL(QS_ERR_MISMATCH, "%s has no op %s: it was not taken of this model", w->profile->origin, n->name);
    qs_sim_cost_from_op(op, c);
    return QS_OK;
}

/* Every node's cost for this worker (cost: [m->n_nodes], zeroed by the caller; aliases stay 0),
 * as the replay charges them. */
static qs_status qs_sim_costs(const qs_sim_worker *w, qs_sim_cost *cost) {
    const qs_model *m = w->m;
    qs_status st = QS_OK;
    for (int pass = 0; pass < 2; pass++) /* casts last: a missing run is the clearer message */
        for (int i = 1; i < m->n_nodes && st == QS_OK; i++)
            if (m->nodes[i].alias_of < 0 && (m->nodes[i].kind == QS_NODE_CAST) == (pass == 1))
                st = qs_sim_node_cost(w, &m->nodes[i], &cost[i]);
    return st;
}

/* ---- memory ---- */

/* Worker w's memory through the memory plan that allocation uses (sim_memory.h): the backend
 * facts of its profile's base run, each node's workspace from its cost, the attentions the
 * profile ran fused, the profile's optimizer. Its peak into *peak; each node's own buffers into
 * node_bytes ([m->n_nodes], or NULL). */
static qs_status qs_sim_plan_memory(const qs_sim_worker *w, const qs_sim_cost *cost, size_t *node_bytes, double *peak) {
    const qs_model *m = w->m;
    size_t *ws = calloc((size_t)m->n_nodes, sizeof *ws);
    if (!ws) return QS_FAIL(QS_ERR_OOM, "out of memory replaying %s", m->arch);
    for (int i = 0; i < m->n_nodes; i++) ws[i] = (size_t)cost[i].workspace;
    const qs_optim_config oc = qs_profile_optim_config(w->profile->optimizer_kind);
    const qs_sim_memory_input in = {.m = m, .batch = w->batch, .facts = qs_profile_base_run(w->profile)->memory_facts,
                                    .workspace = ws, .attention_supported = qs_sim_profile_attention_fused,
                                    .attention_ctx = (void *)w->profile, .optimizer = &oc};
    qs_memory_report r;
    size_t bytes = 0;
    qs_status st = qs_sim_memory(&in, &r, &bytes, node_bytes);
    free(ws);
    *peak = (double)bytes;
    return st;
}

/* ---- time outside the per-op timers ---- */

/* Time a run spent outside its per-op timers and optimizer (input copies, bookkeeping between
 * ops), and how many Conv2d/Linear it had. */
static double qs_sim_run_untimed(const qs_profile_prec_run *run, int *n_selectable) {
    double ops = 0;
    int n = 0;
    for (int i = 0; i < run->n_ops; i++) {
        const qs_profile_op *op = &run->ops[i];
        ops += op->forward_ms + op->backward_data_ms + op->backward_weights_ms + op->cast_ms;
        n += strcmp(op->kind, "Conv2d") == 0 || strcmp(op->kind, "Linear") == 0;
    }
    *n_selectable = n;
    double gap = run->step_ms - ops - run->optimizer_ms;
    return gap > 0 ? gap : 0;
}

/* What Conv2d/Linear node n adds to the base run's untimed time: its share of what its
 * precision's run had beyond the base (0 for other nodes). */
static double qs_sim_untimed_share(const qs_sim_worker *w, const qs_profile_prec_run *base, const qs_node *n) {
    int nb = 0, k = 0;
    if (!qs_node_precision_selectable(n->kind)) return 0;
    double gap_base = qs_sim_run_untimed(base, &nb);
    const qs_profile_prec_run *run = qs_profile_run_at(w->profile, n->prec);
    double g = run ? qs_sim_run_untimed(run, &k) : gap_base;
    return run && k > 0 ? (g - gap_base) / k : 0;
}

/* The untimed time of this worker's plan: the base run's, plus for every Conv2d/Linear its
 * share of what its precision's run had beyond the base. */
static double qs_sim_untimed(const qs_sim_worker *w, const qs_profile_prec_run *base) {
    int nb = 0;
    double gap_base = qs_sim_run_untimed(base, &nb), extra = 0;
    for (int i = 1; i < w->m->n_nodes; i++) extra += qs_sim_untimed_share(w, base, &w->m->nodes[i]);
    return gap_base + extra;
}

qs_status qs_sim_node_charges(const qs_sim_worker *w, qs_sim_charge *out) {
    const qs_model *m = w->m;
    QS_TRY(qs_sim_check_profile(w, 0));
    qs_sim_cost *cost = calloc((size_t)m->n_nodes, sizeof *cost);
    size_t *node_bytes = calloc((size_t)m->n_nodes, sizeof *node_bytes);
    qs_status st = cost && node_bytes ? qs_sim_costs(w, cost) : QS_FAIL(QS_ERR_OOM, "out of memory replaying %s", m->arch);
    double peak = 0;
    if (st == QS_OK) st = qs_sim_plan_memory(w, cost, node_bytes, &peak);
    const qs_profile_prec_run *base = qs_profile_base_run(w->profile);
    double op_scale = w->slowdown > 1 ? w->slowdown : 1, step_scale = w->slow_whole_step ? op_scale : 1;
    for (int i = 0; i < m->n_nodes && st == QS_OK; i++) {
        const qs_sim_cost *c = &cost[i];
        out[i].ms = i == 0 ? 0 : (c->fwd + c->cast) * op_scale + (c->bwd_weights + c->bwd_data) * op_scale;
        out[i].untimed_ms = i == 0 ? 0 : qs_sim_untimed_share(w, base, &m->nodes[i]) * step_scale;
        out[i].mem = i == 0 ? 0 : (double)node_bytes[i];
        out[i].workspace = c->workspace;
    }
    free(cost);
    free(node_bytes);
    return st;
}

/* ---- one worker's timeline ---- */

void qs_sim_event(cJSON *trace, const char *name, const char *cat, int pid, int tid, double t0_ms, double ms) {
    if (!trace || ms <= 0) return;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "cat", cat);
    cJSON_AddStringToObject(e, "ph", "X");
    cJSON_AddNumberToObject(e, "ts", t0_ms * 1e3);
    cJSON_AddNumberToObject(e, "dur", ms * 1e3);
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON_AddItemToArray(trace, e);
}

/* Bucket b of entries of node n is ready at time t at the latest. */
static void qs_sim_buckets_ready(const qs_node *n, int nb, const int *entry_bucket, double t, qs_sim_timeline *tl) {
    for (int k = 0; k < n->n_params && nb > 0; k++) {
        int b = entry_bucket[n->param[k]];
        tl->bucket_ready[b] = fmax(tl->bucket_ready[b], t);
    }
}

/* The timeline of a worker replayed as one lockstep run of its profile measured it (w->as_run,
 * for the calibration, src/predict/calibrate.h): its ops in their order, forward then backward
 * in reverse (a bucket is ready when the last gradient of the model's node of that name is),
 * its untimed time, optimizer and averaging; no data loading (the run repeats one batch). */
static void qs_sim_run_timeline(const qs_sim_worker *w, int rank, int nb, const int *entry_bucket, cJSON *trace,
                                qs_sim_timeline *tl) {
    const qs_profile_prec_run *run = w->as_run;
    int n_sel = 0;
    tl->memory = tl->data = 0;
    tl->untimed = qs_sim_run_untimed(run, &n_sel);
    qs_sim_event(trace, "outside the ops", "other", rank, 0, 0, tl->untimed);
    double t = tl->untimed;
    for (int i = 0; i < run->n_ops; i++) t += run->ops[i].forward_ms + run->ops[i].cast_ms;
    tl->forward = t - tl->untimed;
    const double b0 = t;
    for (int i = run->n_ops - 1; i >= 0; i--) {
        const qs_profile_op *op = &run->ops[i];
        t += op->backward_data_ms + op->backward_weights_ms;
        for (int j = 1; j < w->m->n_nodes && nb > 0; j++)
            if (strcmp(w->m->nodes[j].name, op->name) == 0) qs_sim_buckets_ready(&w->m->nodes[j], nb, entry_bucket, t, tl);
    }
    qs_sim_event(trace, "ops of the run", "forward", rank, 0, tl->untimed, b0 - tl->untimed);
    tl->backward = t - b0;
    tl->bwd_end = t;
    tl->optimizer = run->optimizer_ms;
    tl->grad_average = run->grad_average_ms;
}

/* The forward and backward of the plan's nodes (costs from qs_sim_costs) from time t. */
static void qs_sim_passes(const qs_sim_worker *w, int rank, const qs_sim_cost *cost, double op_scale, int nb,
                          const int *entry_bucket, cJSON *trace, double t, qs_sim_timeline *tl) {
    const qs_model *m = w->m;
    double f0 = t;
    for (int i = 1; i < m->n_nodes; i++) {
        double d = (cost[i].fwd + cost[i].cast) * op_scale;
        qs_sim_event(trace, m->nodes[i].name, m->nodes[i].kind == QS_NODE_CAST ? "cast" : "forward", rank, 0, t, d);
        t += d;
    }
    tl->forward = t - f0;
    double b0 = t;
    for (int i = m->n_nodes - 1; i >= 1; i--) {
        const qs_node *n = &m->nodes[i];
        double d = (cost[i].bwd_weights + cost[i].bwd_data) * op_scale;
        qs_sim_event(trace, n->name, "backward", rank, 0, t, d);
        t += d;
        qs_sim_buckets_ready(n, nb, entry_bucket, t, tl);
    }
    tl->backward = t - b0;
    tl->bwd_end = t;
}

qs_status qs_sim_worker_timeline(const qs_sim_worker *w, int rank, int nb, const int *entry_bucket, cJSON *trace,
                                 qs_sim_timeline *tl) {
    if (w->as_run) {
        qs_sim_run_timeline(w, rank, nb, entry_bucket, trace, tl);
        return QS_OK;
    }
    const qs_model *m = w->m;
    const qs_profile_prec_run *base = qs_profile_base_run(w->profile);
    double op_scale = w->slowdown > 1 ? w->slowdown : 1, step_scale = w->slow_whole_step ? op_scale : 1;
    qs_sim_cost *cost = calloc((size_t)m->n_nodes, sizeof *cost);
    qs_status st = cost ? qs_sim_costs(w, cost) : QS_FAIL(QS_ERR_OOM, "out of memory replaying %s", m->arch);
    if (st == QS_OK) st = qs_sim_plan_memory(w, cost, NULL, &tl->memory);
    if (st != QS_OK) {
        free(cost);
        return st;
    }
    double t = 0;
    tl->data = w->profile->data_ms * step_scale;
    qs_sim_event(trace, "data", "data", rank, 0, t, tl->data);
    t += tl->data;
    tl->untimed = qs_sim_untimed(w, base) * step_scale;
    qs_sim_event(trace, "outside the ops", "other", rank, 0, t, tl->untimed);
    t += tl->untimed;
    qs_sim_passes(w, rank, cost, op_scale, nb, entry_bucket, trace, t, tl);
    tl->optimizer = base->optimizer_ms * step_scale;
    tl->grad_average = base->grad_average_ms * step_scale;
    free(cost);
    return QS_OK;
}
