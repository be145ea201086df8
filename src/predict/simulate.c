/* src/predict/simulate.c — the replayer (see simulate.h). */
#include "predict/simulate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/grad_sync.h"
#include "core/stats.h"
#include "graph/precision.h"
#include "qsync/rng.h"

/* ---- reading a profile ---- */

static double qs_sim_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* A profile's base run: the run of its highest precision (first in fp32, tf32, bf16, fp16, fp8,
 * int8: fp32's in a CPU profile, bf16's in a GPU profile of bf16 and fp8; the planner's base,
 * src/plan/plan_build.h), else its first run. */
static const cJSON *qs_sim_top_run(const cJSON *profile) {
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(profile, "runs");
    qs_precision p;
    if (qs_profile_top_precision(profile, &p)) return cJSON_GetObjectItemCaseSensitive(runs, qs_precision_name(p));
    return runs ? runs->child : NULL;
}

bool qs_profile_top_precision(const cJSON *profile, qs_precision *out) {
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(profile, "runs");
    for (int p = 0; p < QS_PREC_COUNT; p++)
        if (cJSON_GetObjectItemCaseSensitive(runs, qs_precision_name((qs_precision)p))) {
            *out = (qs_precision)p;
            return true;
        }
    return false;
}

/* The op named `name` in run `run`, or NULL. */
static const cJSON *qs_sim_find_op(const cJSON *run, const char *name) {
    const cJSON *op;
    cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(run, "ops")) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(op, "name");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0) return op;
    }
    return NULL;
}

bool qs_profile_op_fused(const cJSON *profile, const char *name) {
    const cJSON *op = qs_sim_find_op(qs_sim_top_run(profile), name);
    return op && cJSON_GetObjectItemCaseSensitive(op, "fused_into") != NULL;
}

/* The profile must be of this model, with these options, at this batch. */
static qs_status qs_sim_check_profile(const qs_sim_worker *w, int rank) {
    const cJSON *p = w->profile, *fmt = cJSON_GetObjectItemCaseSensitive(p, "format");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(p, "model"), *config = cJSON_GetObjectItemCaseSensitive(p, "config");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "qsync-profile") != 0 || qs_sim_num(p, "version") != 1 ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(p, "runs")))
        return QS_FAIL(QS_ERR_FORMAT, "%s is not a qsync profile of version 1 (docs/PROFILE.md)", w->profile_path);
    if (!cJSON_IsString(model) || !cJSON_IsString(config) || strcmp(model->valuestring, w->m->arch) != 0 ||
        strcmp(config->valuestring, w->m->config) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "%s profiles %s \"%s\", but worker %d trains %s \"%s\": profile the same model "
                       "and options", w->profile_path, cJSON_IsString(model) ? model->valuestring : "?",
                       cJSON_IsString(config) ? config->valuestring : "?", rank, w->m->arch, w->m->config);
    if ((int64_t)qs_sim_num(p, "batch") != w->batch)
        return QS_FAIL(QS_ERR_MISMATCH, "%s was taken at batch %lld, but worker %d trains a local batch of %lld: "
                       "profile at that batch", w->profile_path, (long long)qs_sim_num(p, "batch"), rank,
                       (long long)w->batch);
    return QS_OK;
}

/* The run an op at precision p is costed from: p's own for Conv2d/Linear, else the base run's
 * (qs_sim_top_run). */
static qs_status qs_sim_run_for(const qs_sim_worker *w, const qs_node *n, const cJSON **run) {
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(w->profile, "runs");
    if (qs_node_precision_selectable(n->kind)) {
        *run = cJSON_GetObjectItemCaseSensitive(runs, qs_precision_name(n->prec));
        if (!*run)
            return QS_FAIL(QS_ERR_MISMATCH, "%s has no run at %s, which %s uses: profile with --precisions including it",
                           w->profile_path, qs_precision_name(n->prec), n->name);
        return QS_OK;
    }
    /* an op without a precision of its own runs beside its producer: cost it from the run of
     * the nearest Conv2d/Linear upstream (its cache and memory state), else from the base run */
    const qs_node *up = n;
    while (up->n_inputs > 0 && !qs_node_precision_selectable(up->kind)) up = &w->m->nodes[up->inputs[0]];
    *run = NULL;
    if (qs_node_precision_selectable(up->kind))
        *run = cJSON_GetObjectItemCaseSensitive(runs, qs_precision_name(up->prec));
    if (!*run) *run = qs_sim_top_run(w->profile);
    return QS_OK;
}

/* One node's cost: times per category (ms) and memory (bytes). */
typedef struct qs_sim_cost {
    double fwd, bwd_data, bwd_weights, cast;
    double out, grad, saved, workspace;
} qs_sim_cost;

static void qs_sim_cost_from_op(const cJSON *op, qs_sim_cost *c) {
    c->fwd = qs_sim_num(op, "forward_ms");
    c->bwd_data = qs_sim_num(op, "backward_data_ms");
    c->bwd_weights = qs_sim_num(op, "backward_weights_ms");
    c->cast = qs_sim_num(op, "cast_ms");
    c->out = qs_sim_num(op, "out_bytes");
    c->grad = qs_sim_num(op, "grad_bytes");
    c->saved = qs_sim_num(op, "saved_bytes");
    c->workspace = qs_sim_num(op, "workspace_bytes");
}

/* A cast measured in no run: its dtype pair's fitted line, its output at its dtype and an FP32
 * gradient unless it shares its input's (straight-through, sole consumer). */
static qs_status qs_sim_cast_cost(const qs_sim_worker *w, const qs_node *n, qs_sim_cost *c) {
    const char *from = qs_dtype_name(w->m->nodes[n->inputs[0]].out_dtype), *to = qs_dtype_name(n->out_dtype);
    double elems = (double)qs_shape_numel(n->out_ndim, n->out_shape) * (double)w->batch;
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(w->profile, "casts")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(f, "from"), *b = cJSON_GetObjectItemCaseSensitive(f, "to");
        if (!cJSON_IsString(a) || !cJSON_IsString(b) || strcmp(a->valuestring, from) || strcmp(b->valuestring, to)) continue;
        memset(c, 0, sizeof *c);
        c->cast = qs_sim_num(f, "alpha_ms") + qs_sim_num(f, "beta_ms_per_element") * elems;
        c->out = elems * (double)qs_dtype_size(n->out_dtype);
        c->saved = sizeof(float); /* its scale */
        return QS_OK;
    }
    return QS_FAIL(QS_ERR_MISMATCH, "%s has no cast from %s to %s (needed by %s): profile the precision that uses it",
                   w->profile_path, from, to, n->name);
}

/* The gradient buffer of a straight-through cast in this graph (graph.c's rule): none when
 * nothing upstream needs gradients, the input's own when the cast is its only consumer, else
 * an FP32 one. It depends on the neighbours, so it is not taken from a profiled run. */
static double qs_sim_cast_grad(const qs_sim_worker *w, const qs_node *n, const bool *needs_grad) {
    const qs_node *in = &w->m->nodes[n->inputs[0]];
    if (!needs_grad[n - w->m->nodes] || in->n_consumers == 1) return 0;
    return (double)qs_shape_numel(n->out_ndim, n->out_shape) * (double)w->batch * sizeof(float);
}

static qs_status qs_sim_node_cost(const qs_sim_worker *w, const qs_node *n, const bool *needs_grad, qs_sim_cost *c) {
    memset(c, 0, sizeof *c);
    if (n->kind == QS_NODE_CAST) { /* measured where the same cast ran, else fitted */
        const cJSON *run;
        bool found = false;
        cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(w->profile, "runs")) {
            const cJSON *op = qs_sim_find_op(run, n->name);
            if (op && !found) {
                qs_sim_cost_from_op(op, c);
                found = true;
            }
        }
        if (!found) QS_TRY(qs_sim_cast_cost(w, n, c));
        c->grad = qs_sim_cast_grad(w, n, needs_grad);
        return QS_OK;
    }
    const cJSON *run;
    QS_TRY(qs_sim_run_for(w, n, &run));
    const cJSON *op = qs_sim_find_op(run, n->name);
    if (!op)
        return QS_FAIL(QS_ERR_MISMATCH, "%s has no op %s: it was not taken of this model", w->profile_path, n->name);
    qs_sim_cost_from_op(op, c);
    return QS_OK;
}

/* The all-reduce of `bytes` between the ranks: linear between measured sizes, the fitted line
 * beyond them. */
static double qs_sim_allreduce_ms(const cJSON *ar, double bytes) {
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(ar, "points");
    int n = cJSON_GetArraySize(pts);
    for (int i = 0; i + 1 < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(pts, i), *b = cJSON_GetArrayItem(pts, i + 1);
        double x0 = cJSON_GetArrayItem(a, 0)->valuedouble, y0 = cJSON_GetArrayItem(a, 1)->valuedouble;
        double x1 = cJSON_GetArrayItem(b, 0)->valuedouble, y1 = cJSON_GetArrayItem(b, 1)->valuedouble;
        if (bytes >= x0 && bytes <= x1 && x1 > x0) return y0 + (y1 - y0) * (bytes - x0) / (x1 - x0);
    }
    return qs_sim_num(ar, "alpha_ms") + qs_sim_num(ar, "beta_ms_per_byte") * bytes;
}

/* Time a run spent outside its per-op timers and optimizer (input copies, bookkeeping between
 * ops), and how many Conv2d/Linear it had. */
static double qs_sim_run_untimed(const cJSON *run, int *n_selectable) {
    double ops = 0;
    int n = 0;
    const cJSON *op;
    cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(run, "ops")) {
        ops += qs_sim_num(op, "forward_ms") + qs_sim_num(op, "backward_data_ms") + qs_sim_num(op, "backward_weights_ms") +
               qs_sim_num(op, "cast_ms");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(op, "kind");
        n += cJSON_IsString(kind) && (strcmp(kind->valuestring, "Conv2d") == 0 || strcmp(kind->valuestring, "Linear") == 0);
    }
    *n_selectable = n;
    double gap = qs_sim_num(run, "step_ms") - ops - qs_sim_num(run, "optimizer_ms");
    return gap > 0 ? gap : 0;
}

/* What Conv2d/Linear node n adds to the base run's untimed time: its share of what its
 * precision's run had beyond the base (0 for other nodes). */
static double qs_sim_untimed_share(const qs_sim_worker *w, const cJSON *base, const qs_node *n) {
    int nb = 0, k = 0;
    if (!qs_node_precision_selectable(n->kind)) return 0;
    double gap_base = qs_sim_run_untimed(base, &nb);
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(w->profile, "runs"),
                                                        qs_precision_name(n->prec));
    double g = run ? qs_sim_run_untimed(run, &k) : gap_base;
    return run && k > 0 ? (g - gap_base) / k : 0;
}

/* The untimed time of this worker's plan: the base run's, plus for every Conv2d/Linear its
 * share of what its precision's run had beyond the base. */
static double qs_sim_untimed(const qs_sim_worker *w, const cJSON *base) {
    int nb = 0;
    double gap_base = qs_sim_run_untimed(base, &nb), extra = 0;
    for (int i = 1; i < w->m->n_nodes; i++) extra += qs_sim_untimed_share(w, base, &w->m->nodes[i]);
    return gap_base + extra;
}

/* The base run of a worker's profile (qs_sim_top_run). */
static const cJSON *qs_sim_base_run(const qs_sim_worker *w) { return qs_sim_top_run(w->profile); }

/* Every node's cost for this worker (cost: [m->n_nodes], zeroed by the caller; aliases stay 0),
 * as the replay charges them. */
static qs_status qs_sim_costs(const qs_sim_worker *w, qs_sim_cost *cost) {
    const qs_model *m = w->m;
    bool *needs_grad = calloc((size_t)m->n_nodes, sizeof *needs_grad);
    qs_status st = needs_grad ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory replaying %s", m->arch);
    for (int i = 1; i < m->n_nodes && st == QS_OK; i++) { /* as graph.c marks them */
        const qs_node *n = &m->nodes[i];
        needs_grad[i] = qs_node_has_weights(n);
        for (int k = 0; k < n->n_inputs; k++) needs_grad[i] |= needs_grad[n->inputs[k]];
    }
    for (int pass = 0; pass < 2; pass++) /* casts last: a missing run is the clearer message */
        for (int i = 1; i < m->n_nodes && st == QS_OK; i++)
            if (m->nodes[i].alias_of < 0 && (m->nodes[i].kind == QS_NODE_CAST) == (pass == 1))
                st = qs_sim_node_cost(w, &m->nodes[i], needs_grad, &cost[i]);
    free(needs_grad);
    return st;
}

qs_status qs_sim_node_charges(const qs_sim_worker *w, qs_sim_charge *out) {
    const qs_model *m = w->m;
    QS_TRY(qs_sim_check_profile(w, 0));
    qs_sim_cost *cost = calloc((size_t)m->n_nodes, sizeof *cost);
    if (!cost) return QS_FAIL(QS_ERR_OOM, "out of memory replaying %s", m->arch);
    qs_status st = qs_sim_costs(w, cost);
    const cJSON *base = qs_sim_base_run(w);
    double op_scale = w->slowdown > 1 ? w->slowdown : 1, step_scale = w->slow_whole_step ? op_scale : 1;
    for (int i = 0; i < m->n_nodes && st == QS_OK; i++) {
        const qs_sim_cost *c = &cost[i];
        out[i].ms = i == 0 ? 0 : (c->fwd + c->cast) * op_scale + (c->bwd_weights + c->bwd_data) * op_scale;
        out[i].untimed_ms = i == 0 ? 0 : qs_sim_untimed_share(w, base, &m->nodes[i]) * step_scale;
        out[i].mem = c->out + c->grad + c->saved;
        out[i].workspace = c->workspace;
    }
    free(cost);
    return st;
}

/* ---- one worker's timeline ---- */

typedef struct qs_sim_timeline {
    double data, untimed, forward, backward, optimizer, grad_average; /* durations */
    double bwd_end;                            /* from the iteration's start */
    double *bucket_ready;                      /* per bucket, from the iteration's start */
    double memory;
} qs_sim_timeline;

static void qs_sim_event(cJSON *trace, const char *name, const char *cat, int pid, int tid, double t0_ms, double ms) {
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

/* The timeline of a worker replayed as one lockstep run of its profile measured it (w->as_run,
 * for the calibration, src/predict/calibrate.h): its ops in their order, forward then backward
 * in reverse (a bucket is ready when the last gradient of the model's node of that name is),
 * its untimed time, optimizer and averaging; no data loading (the run repeats one batch). */
static void qs_sim_run_timeline(const qs_sim_worker *w, int rank, int nb, const int *entry_bucket, cJSON *trace,
                                qs_sim_timeline *tl) {
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(w->as_run, "ops");
    const int n_ops = cJSON_GetArraySize(ops);
    int n_sel = 0;
    tl->memory = tl->data = 0;
    tl->untimed = qs_sim_run_untimed(w->as_run, &n_sel);
    qs_sim_event(trace, "outside the ops", "other", rank, 0, 0, tl->untimed);
    double t = tl->untimed;
    for (int i = 0; i < n_ops; i++) {
        const cJSON *op = cJSON_GetArrayItem(ops, i);
        t += qs_sim_num(op, "forward_ms") + qs_sim_num(op, "cast_ms");
    }
    tl->forward = t - tl->untimed;
    const double b0 = t;
    for (int i = n_ops - 1; i >= 0; i--) {
        const cJSON *op = cJSON_GetArrayItem(ops, i), *name = cJSON_GetObjectItemCaseSensitive(op, "name");
        t += qs_sim_num(op, "backward_data_ms") + qs_sim_num(op, "backward_weights_ms");
        for (int j = 1; j < w->m->n_nodes && nb > 0 && cJSON_IsString(name); j++) {
            const qs_node *n = &w->m->nodes[j];
            if (strcmp(n->name, name->valuestring) != 0) continue;
            for (int k = 0; k < n->n_params; k++) {
                int b = entry_bucket[n->param[k]];
                tl->bucket_ready[b] = fmax(tl->bucket_ready[b], t);
            }
        }
    }
    qs_sim_event(trace, "ops of the run", "forward", rank, 0, tl->untimed, b0 - tl->untimed);
    tl->backward = t - b0;
    tl->bwd_end = t;
    tl->optimizer = qs_sim_num(w->as_run, "optimizer_ms");
    tl->grad_average = qs_sim_num(w->as_run, "grad_average_ms");
}

static qs_status qs_sim_worker_timeline(const qs_sim_worker *w, int rank, int nb, const int *entry_bucket, cJSON *trace,
                                        qs_sim_timeline *tl) {
    if (w->as_run) {
        qs_sim_run_timeline(w, rank, nb, entry_bucket, trace, tl);
        return QS_OK;
    }
    const qs_model *m = w->m;
    const cJSON *base = qs_sim_base_run(w);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(base, "memory_bytes");
    double op_scale = w->slowdown > 1 ? w->slowdown : 1, step_scale = w->slow_whole_step ? op_scale : 1;
    qs_sim_cost *cost = calloc((size_t)m->n_nodes, sizeof *cost);
    qs_status st = cost ? qs_sim_costs(w, cost) : QS_FAIL(QS_ERR_OOM, "out of memory replaying %s", m->arch);
    if (st != QS_OK) {
        free(cost);
        return st;
    }
    /* memory: what every run shares (parameters, gradients, optimizer, buffers, labels, the
     * input batch) plus each node's own at its precision */
    double shared_out = 0;
    const cJSON *op;
    cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(base, "ops")) shared_out += qs_sim_num(op, "out_bytes");
    double input = qs_sim_num(mem, "activations") - shared_out, workspace = 0;
    tl->memory = qs_sim_num(mem, "params") + qs_sim_num(mem, "grads") + qs_sim_num(mem, "optimizer") +
                 qs_sim_num(mem, "buffers") + qs_sim_num(mem, "labels") + input;
    for (int i = 1; i < m->n_nodes; i++) {
        tl->memory += cost[i].out + cost[i].grad + cost[i].saved;
        workspace = fmax(workspace, cost[i].workspace);
    }
    tl->memory += workspace;
    /* time */
    double t = 0;
    tl->data = qs_sim_num(w->profile, "data_ms") * step_scale;
    qs_sim_event(trace, "data", "data", rank, 0, t, tl->data);
    t += tl->data;
    tl->untimed = qs_sim_untimed(w, base) * step_scale;
    qs_sim_event(trace, "outside the ops", "other", rank, 0, t, tl->untimed);
    t += tl->untimed;
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
        for (int k = 0; k < n->n_params && nb > 0; k++) {
            int b = entry_bucket[n->param[k]];
            tl->bucket_ready[b] = fmax(tl->bucket_ready[b], t);
        }
    }
    tl->backward = t - b0;
    tl->bwd_end = t;
    tl->optimizer = qs_sim_num(base, "optimizer_ms") * step_scale;
    tl->grad_average = qs_sim_num(base, "grad_average_ms") * step_scale;
    free(cost);
    return QS_OK;
}

/* ---- the cluster ---- */

static bool qs_sim_serial_comm(const cJSON *profile) {
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(profile, "device");
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(dev, "backend");
    return !cJSON_IsString(be) || strcmp(be->valuestring, "cpu") == 0;
}

/* The all-reduce measurement for n ranks from any worker's profile, or NULL; *from (may be
 * NULL) receives that profile. */
static const cJSON *qs_sim_find_allreduce(const qs_sim_worker *w, int n, const cJSON **from) {
    for (int r = 0; r < n; r++) {
        const cJSON *ar = cJSON_GetObjectItemCaseSensitive(w[r].profile, "allreduce");
        if (ar && (int)qs_sim_num(ar, "ranks") == n) {
            if (from) *from = w[r].profile;
            return ar;
        }
    }
    return NULL;
}

/* A worker's whole-step slowdown as replayed (the CPU quota that also slows the transfers its
 * cores make): one the replayer applies, times the quota its profile was taken under. */
static double qs_sim_whole_step_slowdown(const qs_sim_worker *w) {
    double s = w->slow_whole_step && w->slowdown > 1 ? w->slowdown : 1;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(w->profile, "emulation");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(e, "method");
    if (cJSON_IsString(method) && strcmp(method->valuestring, "cgroup-quota") == 0 && qs_sim_num(e, "slowdown") > 1)
        s *= qs_sim_num(e, "slowdown");
    return s;
}

/* The largest whole-step slowdown among the ranks a profile's communication was measured beside
 * ("co_running_slowdown"), or 0 when the profile does not record it (then it is taken to have
 * been measured beside the replayed workers' own quotas). */
static double qs_sim_corunning_slowdown(const cJSON *profile) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(profile, "co_running_slowdown");
    return cJSON_IsNumber(c) && c->valuedouble >= 1 ? c->valuedouble : 0;
}

/* The model's own gradient sync measured in place between n ranks with these buckets
 * ("grad_sync" of a profile run, docs/PROFILE.md), in the mode asked: from the first worker's
 * base run (qs_sim_top_run) that holds one; < 0 when none does. */
static double qs_sim_measured_sync(const qs_sim_worker *w, int n, size_t bucket_bytes, int nb, bool overlap,
                                   const cJSON **from) {
    for (int r = 0; r < n; r++) {
        const cJSON *run = qs_sim_top_run(w[r].profile);
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(run, "grad_sync");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(gs, overlap ? "overlap_ms" : "no_overlap_ms");
        if (gs && cJSON_IsNumber(ms) && (int)qs_sim_num(gs, "ranks") == n && (int)qs_sim_num(gs, "buckets") == nb &&
            qs_sim_num(gs, "bucket_bytes") == (double)bucket_bytes) {
            *from = w[r].profile;
            return ms->valuedouble;
        }
    }
    return -1;
}

/* The factor on a measured sync (or all-reduce) on the CPU, where the transfers are made by the
 * workers' own cores inside their polls: a CPU quota slows them as much as its compute. The
 * transfers start when the last worker ends its backward, so the measurement scales by the
 * whole-step slowdown (qs_sim_whole_step_slowdown) of that worker — the largest among those
 * ending last (bwd_end within 10⁻⁹ relative of latest_bwd) — over the one it was measured beside
 * (the profile's co_running_slowdown; in a profile the quota-limited rank is the last to arrive).
 * Measured on the README's cnn pair (cpu-slow at 1.29×, 2026-12-03): 13.2 ms in the profile,
 * the same in the all-fp32 arm (the slowed rank last), about 8.5 ms when the slowed rank was
 * quantized and arrived first. Profiles without co_running_slowdown were measured beside the
 * replayed workers' quotas: only slowdowns the replayer applies count then. */
static double qs_sim_comm_scale(const qs_sim_worker *w, const qs_sim_timeline *tl, int n, double latest_bwd,
                                const cJSON *sync_from) {
    double beside = qs_sim_corunning_slowdown(sync_from), last = 1;
    for (int r = 0; r < n; r++) {
        if (tl[r].bwd_end < latest_bwd - 1e-9 * fabs(latest_bwd)) continue; /* arrived before the last */
        last = fmax(last, beside > 0 ? qs_sim_whole_step_slowdown(&w[r]) : w[r].slow_whole_step ? w[r].slowdown : 1);
    }
    return last / (beside > 0 ? beside : 1);
}

#define QS_SIM_JITTER_DRAWS 65536

/* Step-to-step jitter: each worker's measured steps ("step_samples_ms" of its base run,
 * qs_sim_top_run) less their median, scaled by an emulated slowdown the profile does not hold, are
 * drawn independently per worker; the synchronized step waits for the latest backward, so it
 * grows by max_r(bwd_end_r + e_r) - max_r(bwd_end_r). *median and *mean: that growth's median
 * and mean over a fixed-seed set of draws; both 0 for one worker or without samples. */
static qs_status qs_sim_jitter(const qs_sim_worker *w, const qs_sim_timeline *tl, int n, double *median,
                               double *mean) {
    *median = *mean = 0;
    if (n < 2) return QS_OK;
    const cJSON **samples = calloc((size_t)n, sizeof *samples);
    double *centre = calloc((size_t)n, sizeof *centre), *scale = calloc((size_t)n, sizeof *scale);
    double *growth = calloc(QS_SIM_JITTER_DRAWS, sizeof *growth), latest = 0;
    qs_status st = samples && centre && scale && growth ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory replaying");
    bool all = st == QS_OK;
    for (int r = 0; r < n && all; r++) {
        const cJSON *run = qs_sim_top_run(w[r].profile);
        samples[r] = cJSON_GetObjectItemCaseSensitive(run, "step_samples_ms");
        int k = cJSON_GetArraySize(samples[r]);
        double *v = k > 0 ? calloc((size_t)k, sizeof *v) : NULL;
        all = v != NULL;
        for (int i = 0; i < k && all; i++) v[i] = cJSON_GetNumberValue(cJSON_GetArrayItem(samples[r], i));
        if (all) centre[r] = qs_median_inplace(v, k);
        free(v);
        scale[r] = w[r].slowdown > 1 ? w[r].slowdown : 1;
        latest = fmax(latest, tl[r].bwd_end);
    }
    if (all) {
        qs_rng rng;
        qs_rng_init(&rng, qs_rng_key(1, "simulate-jitter", 0), 0);
        double sum = 0;
        for (int d = 0; d < QS_SIM_JITTER_DRAWS; d++) {
            double mx = -INFINITY;
            for (int r = 0; r < n; r++) {
                int k = cJSON_GetArraySize(samples[r]);
                double e = cJSON_GetNumberValue(cJSON_GetArrayItem(samples[r], (int)qs_rng_below(&rng, (uint64_t)k)));
                mx = fmax(mx, tl[r].bwd_end + (e - centre[r]) * scale[r]);
            }
            growth[d] = mx - latest;
            sum += growth[d];
        }
        *mean = sum / QS_SIM_JITTER_DRAWS;
        *median = qs_median_inplace(growth, QS_SIM_JITTER_DRAWS);
    }
    free(samples);
    free(centre);
    free(scale);
    free(growth);
    return st;
}

qs_status qs_sim_replay(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, cJSON **out) {
    *out = NULL;
    if (n < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "simulate: no workers");
    for (int r = 0; r < n; r++) QS_TRY(qs_sim_check_profile(&w[r], r));
    const cJSON *ar = NULL;
    const cJSON *ar_from = NULL;
    if (n > 1 && !(ar = qs_sim_find_allreduce(w, n, &ar_from)))
        return QS_FAIL(QS_ERR_MISMATCH, "no profile holds an all-reduce measured between %d ranks: take one with "
                       "`mpirun -np %d qsync profile ...`", n, n);
    const qs_table *t = &w[0].m->params;
    qs_grad_bucket *buckets = calloc((size_t)t->count + 1, sizeof *buckets);
    int *entry_bucket = calloc((size_t)t->count + 1, sizeof *entry_bucket);
    qs_sim_timeline *tl = calloc((size_t)n, sizeof *tl);
    double *ready = NULL;
    qs_status st = buckets && entry_bucket && tl ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory replaying");
    int nb = st == QS_OK && n > 1 ? qs_grad_buckets_form(t, o->bucket_bytes, buckets, entry_bucket) : 0;
    if (st == QS_OK) {
        ready = calloc((size_t)n * (size_t)(nb + 1), sizeof *ready);
        if (!ready) st = QS_FAIL(QS_ERR_OOM, "out of memory replaying");
    }
    for (int r = 0; r < n && st == QS_OK; r++) {
        tl[r].bucket_ready = ready + (size_t)r * (size_t)(nb + 1);
        st = qs_sim_worker_timeline(&w[r], r, nb, entry_bucket, trace, &tl[r]);
    }
    if (st != QS_OK) {
        free(buckets);
        free(entry_bucket);
        free(ready);
        free(tl);
        return st;
    }
    /* the gradients' all-reduce: when every worker's are done (C), then each worker steps */
    double latest_bwd = 0, comm_total = 0, done = 0, measured_sync = -1;
    for (int r = 0; r < n; r++) latest_bwd = fmax(latest_bwd, tl[r].bwd_end);
    bool serial = n > 1 && qs_sim_serial_comm(w[0].profile);
    if (n == 1) done = latest_bwd;
    else if (serial || !o->overlap) {
        const cJSON *sync_from = ar_from;
        done = latest_bwd;
        measured_sync = qs_sim_measured_sync(w, n, o->bucket_bytes, nb, o->overlap, &sync_from);
        double comm_scale = serial ? qs_sim_comm_scale(w, tl, n, latest_bwd, sync_from) : 1;
        if (measured_sync >= 0) { /* the whole sync, averaging included, as measured in place */
            double d = measured_sync * comm_scale;
            for (int r = 0; r < n; r++) qs_sim_event(trace, "gradient sync", "comm", r, 1, done, d);
            done += d;
            comm_total += d;
        }
        for (int b = 0; b < nb && measured_sync < 0; b++) {
            double d = qs_sim_allreduce_ms(ar, (double)buckets[b].bytes) * comm_scale;
            for (int r = 0; r < n; r++) qs_sim_event(trace, "all-reduce", "comm", r, 1, done, d);
            done += d;
            comm_total += d;
        }
    } else {
        for (int b = 0; b < nb; b++) {
            double start = done, d = qs_sim_allreduce_ms(ar, (double)buckets[b].bytes);
            for (int r = 0; r < n; r++) start = fmax(start, tl[r].bucket_ready[b]);
            for (int r = 0; r < n; r++) qs_sim_event(trace, "all-reduce", "comm", r, 1, start, d);
            done = start + d;
            comm_total += d;
        }
        done = fmax(done, latest_bwd);
    }
    cJSON *doc = cJSON_CreateObject(), *workers = cJSON_CreateArray();
    cJSON_AddStringToObject(doc, "format", QS_SIM_FORMAT);
    cJSON_AddNumberToObject(doc, "version", QS_SIM_VERSION);
    double iteration = 0;
    int slowest = 0;
    for (int r = 0; r < n; r++) {
        double average = n > 1 && measured_sync < 0 ? tl[r].grad_average : 0, finish = done + average + tl[r].optimizer;
        qs_sim_event(trace, "average gradients", "comm", r, 0, done, average);
        qs_sim_event(trace, "optimizer", "optimizer", r, 0, done + average, tl[r].optimizer);
        if (finish > iteration || (finish == iteration && tl[r].bwd_end > tl[slowest].bwd_end)) {
            iteration = finish;
            slowest = r;
        }
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "rank", r);
        if (w[r].type) cJSON_AddStringToObject(x, "type", w[r].type);
        cJSON_AddNumberToObject(x, "slowdown", w[r].slowdown > 1 ? w[r].slowdown : 1);
        cJSON_AddNumberToObject(x, "data_ms", tl[r].data);
        cJSON_AddNumberToObject(x, "untimed_ms", tl[r].untimed);
        cJSON_AddNumberToObject(x, "forward_ms", tl[r].forward);
        cJSON_AddNumberToObject(x, "backward_ms", tl[r].backward);
        cJSON_AddNumberToObject(x, "comm_wait_ms", done - tl[r].bwd_end);
        cJSON_AddNumberToObject(x, "grad_average_ms", average);
        cJSON_AddNumberToObject(x, "optimizer_ms", tl[r].optimizer);
        cJSON_AddNumberToObject(x, "iteration_ms", finish);
        cJSON_AddNumberToObject(x, "memory_bytes", tl[r].memory);
        cJSON_AddItemToArray(workers, x);
    }
    double jitter = 0, jitter_mean = 0;
    qs_status js = qs_sim_jitter(w, tl, n, &jitter, &jitter_mean);
    if (js != QS_OK) {
        cJSON_Delete(doc);
        cJSON_Delete(workers);
        free(buckets);
        free(entry_bucket);
        free(ready);
        free(tl);
        return js;
    }
    cJSON_AddNumberToObject(doc, "iteration_ms", iteration + jitter);
    cJSON_AddNumberToObject(doc, "iteration_mean_ms", iteration + jitter_mean);
    cJSON_AddNumberToObject(doc, "jitter_ms", jitter);
    cJSON_AddNumberToObject(doc, "slowest", slowest); /* on a tie, the one whose backward ended last */
    cJSON *comm = cJSON_AddObjectToObject(doc, "comm");
    cJSON_AddStringToObject(comm, "model", n == 1 ? "none" : serial ? "serial" : "concurrent");
    cJSON_AddStringToObject(comm, "source", n == 1 ? "none" : measured_sync >= 0 ? "measured sync" : "size curve");
    cJSON_AddNumberToObject(comm, "buckets", nb);
    cJSON_AddNumberToObject(comm, "allreduce_ms", comm_total);
    cJSON_AddItemToObject(doc, "workers", workers);
    free(buckets);
    free(entry_bucket);
    free(ready);
    free(tl);
    *out = doc;
    return QS_OK;
}
