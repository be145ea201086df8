/* src/plan/plan_problem.c — defines: the parts of `qsync plan`'s core that read the request
 * (plan_build_internal.h): its checks, the layers the allocator chooses for, the models and
 * replays of the cluster, and each slower device type's allocator problem (plan_build.h). */
#include "plan/plan_build_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/precision.h"
#include "models/models.h"

/* ---- the request ---- */

/* The highest precision worker w's profile has a run for: its base (a profile has runs). */
static qs_precision qs_pb_profile_base(const qs_planb_worker *w) {
    qs_precision base = QS_PREC_FP32;
    qs_profile_top_precision(w->profile, &base);
    return base;
}

/* Worker w's profile is of the request's model, config and batch. */
static qs_status qs_pb_check_profile(const qs_planb_request *rq, const qs_planb_worker *w) {
    const qs_profile *p = w->profile;
    if (strcmp(p->model, rq->arch) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") is of model %s, but the plan is for %s: "
                       "profile %s on that device type", p->origin, w->type, p->model, rq->arch, rq->arch);
    if (strcmp(p->config, rq->config) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") is of %s built with \"%s\", but the plan is "
                       "for \"%s\": profile with the same options (--width)", p->origin, w->type, rq->arch, p->config,
                       rq->config);
    if (p->batch != rq->batch)
        return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") was taken at batch %g, but the plan is for a "
                       "local batch of %lld: profile at that batch", p->origin, w->type, (double)p->batch,
                       (long long)rq->batch);
    return QS_OK;
}

/* The indicator is of the request's model and config. */
static qs_status qs_pb_check_indicator(const qs_planb_request *rq) {
    const qs_indicator_file *ind = rq->indicator;
    if (strcmp(ind->model, rq->arch) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "indicator %s is for model %s, but the plan is for %s: run qsync indicate on %s",
                       ind->origin, ind->model, rq->arch, rq->arch);
    if (strcmp(ind->config, rq->config) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "indicator %s is for %s built with \"%s\", but the plan is for \"%s\": run qsync "
                       "indicate with the same options", ind->origin, rq->arch, ind->config, rq->config);
    return QS_OK;
}

qs_status qs_pb_check(qs_pb_ctx *c) {
    const qs_planb_request *rq = c->rq;
    if (rq->n_workers < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the cluster has %d worker: there is nothing to plan (a plan keeps several "
                       "device types in step)", rq->n_workers);
    c->n_types = 0;
    for (int r = 0; r < rq->n_workers; r++) {
        const qs_planb_worker *w = &rq->workers[r];
        QS_TRY(qs_pb_check_profile(rq, w));
        qs_precision top = qs_pb_profile_base(w);
        if (r == 0) c->base = top;
        else if (top != c->base)
            return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") starts at %s, but profile %s (device type "
                           "\"%s\") starts at %s: the profiles of one plan must share their highest precision (the base "
                           "the fastest type trains at); profile every type with --precisions starting with the same one",
                           w->profile->origin, w->type, qs_precision_name(top), rq->workers[0].profile->origin,
                           rq->workers[0].type, qs_precision_name(c->base));
        int k = 0;
        while (k < c->n_types && strcmp(c->types[k], w->type) != 0) k++;
        if (k == c->n_types) {
            if (k == QS_PB_MAX_TYPES) return QS_FAIL(QS_ERR_INVALID_ARG, "more than %d device types", QS_PB_MAX_TYPES);
            c->types[c->n_types++] = w->type;
        }
    }
    if (c->n_types < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "every worker of the cluster is of device type \"%s\": there is nothing to "
                       "plan (a plan keeps several device types in step; train with --precision instead)", c->types[0]);
    return qs_pb_check_indicator(rq);
}

/* ---- layers and models ---- */

/* Whether node n is a layer the allocator chooses for. Not the MatMuls of an attention that some
 * worker's profile ran fused at the base precision: the fused kernel needs both at that one
 * 16-bit precision (a plan that moved one would run the attention unfused, at a cost no profile
 * shows), so they keep the base — as QSync keeps attention's matmuls at 16 bits. */
static bool qs_pb_is_layer(const qs_pb_ctx *c, const qs_node *n) {
    if (!qs_node_precision_selectable(n->kind)) return false;
    if (n->kind == QS_NODE_MATMUL)
        for (int w = 0; w < c->rq->n_workers; w++)
            if (qs_profile_op_fused(c->rq->workers[w].profile, n->name)) return false;
    return true;
}

/* Build the model with every planned layer at prec[j] (j in layer order, qs_pb_is_layer) and
 * the other selectable nodes at the base or, prec NULL, every selectable node at `uniform`;
 * fused, casts inserted, not set up. */
static qs_status qs_pb_model(const qs_pb_ctx *c, const qs_precision *prec, qs_precision uniform, qs_model **out) {
    QS_TRY(qs_models_build_config(c->rq->arch, c->rq->config, out));
    qs_model_fuse(*out);
    int j = 0;
    for (int i = 0; i < (*out)->n_nodes; i++) {
        qs_node *n = &(*out)->nodes[i];
        if (!qs_node_precision_selectable(n->kind)) continue;
        n->prec = !prec ? uniform : qs_pb_is_layer(c, n) ? prec[j++] : c->base;
    }
    qs_status st = qs_model_insert_casts(*out, NULL);
    if (st != QS_OK) {
        qs_model_free(*out);
        *out = NULL;
    }
    return st;
}

/* The layers (names, in order) and each one's first co-consumer of its input, from the model at
 * fp32 (the graph without quantizing casts: only its structure is read). */
qs_status qs_pb_layers(qs_pb_ctx *c) {
    qs_model *m = NULL;
    QS_TRY(qs_pb_model(c, NULL, QS_PREC_FP32, &m));
    int L = 0, *src = NULL;
    for (int i = 0; i < m->n_nodes; i++) L += qs_pb_is_layer(c, &m->nodes[i]);
    c->n_layers = L;
    c->layer = calloc((size_t)(L > 0 ? L : 1), sizeof *c->layer);
    c->first_consumer = calloc((size_t)(L > 0 ? L : 1), sizeof *c->first_consumer);
    src = calloc((size_t)(L > 0 ? L : 1), sizeof *src);
    qs_status st = c->layer && c->first_consumer && src ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory planning");
    if (st == QS_OK && L == 0) st = QS_FAIL(QS_ERR_INVALID_ARG, "model %s has no Conv2d/Linear/MatMul layer to plan", m->arch);
    for (int i = 0, j = 0; i < m->n_nodes && st == QS_OK; i++) {
        const qs_node *n = &m->nodes[i];
        if (!qs_pb_is_layer(c, n)) continue;
        snprintf(c->layer[j], QS_NAME_MAX, "%s", n->name);
        src[j] = n->inputs[0];
        c->first_consumer[j] = j;
        for (int k = 0; k < j; k++)
            if (src[k] == src[j]) {
                c->first_consumer[j] = k;
                break;
            }
        j++;
    }
    free(src);
    qs_model_free(m);
    return st;
}

/* The replayer's view of worker template t, with model m. */
static qs_sim_worker qs_pb_sim_worker(const qs_planb_request *rq, int t, const qs_model *m) {
    const qs_planb_worker *w = &rq->workers[t];
    return (qs_sim_worker){.type = w->type, .slowdown = w->slowdown, .slow_whole_step = w->slow_whole_step,
                           .profile = w->profile, .m = m, .batch = rq->batch};
}

qs_status qs_pb_replay(const qs_pb_ctx *c, const int *src, qs_precision *const *prec, bool calibrated,
                       qs_sim_result *out) {
    const qs_planb_request *rq = c->rq;
    int n = rq->n_workers;
    memset(out, 0, sizeof *out);
    qs_sim_worker *w = calloc((size_t)n, sizeof *w);
    if (!w) return QS_FAIL(QS_ERR_OOM, "out of memory planning");
    qs_status st = QS_OK;
    for (int r = 0; r < n && st == QS_OK; r++) {
        qs_model *m = NULL;
        st = qs_pb_model(c, prec ? prec[r] : NULL, c->base, &m);
        if (st == QS_OK) w[r] = qs_pb_sim_worker(rq, src ? src[r] : r, m);
        if (st == QS_OK) w[r].type = rq->workers[r].type;
    }
    qs_sim_options so = {.bucket_bytes = rq->bucket_bytes, .overlap = rq->overlap};
    if (st == QS_OK) st = calibrated ? qs_simulate(w, n, &so, NULL, out) : qs_sim_replay(w, n, &so, NULL, out);
    for (int r = 0; r < n; r++) qs_model_free((qs_model *)w[r].m);
    free(w);
    return st;
}

/* ---- one slower type's problem ---- */

/* The layer index of node i of m (walking up through ops without a precision of their own, as
 * the replayer costs them), or -1 when no Conv2d/Linear is upstream. */
static int qs_pb_owner(const qs_pb_ctx *c, const qs_model *m, int i) {
    const qs_node *up = &m->nodes[i];
    while (up->n_inputs > 0 && !qs_node_precision_selectable(up->kind)) up = &m->nodes[up->inputs[0]];
    if (!qs_node_precision_selectable(up->kind)) return -1;
    for (int j = 0; j < c->n_layers; j++)
        if (strcmp(c->layer[j], up->name) == 0) return j;
    return -1;
}

/* ω of layer j at precision p from the indicator (the base may be absent: 0). */
static qs_status qs_pb_omega(const qs_pb_ctx *c, int j, qs_precision p, double *out) {
    const qs_indicator_file *ind = c->rq->indicator;
    const qs_indicator_file_layer *l = qs_indicator_file_layer_of(ind, c->layer[j]);
    if (!l)
        return QS_FAIL(QS_ERR_NOT_FOUND, "indicator %s has no layer \"%s\" (layers[\"%s\"].omega): make it for this "
                       "model with qsync indicate", ind->origin, c->layer[j], c->layer[j]);
    if (!l->has_omega[p] && p == c->base) {
        *out = 0;
        return QS_OK;
    }
    if (!l->has_omega[p])
        return QS_FAIL(QS_ERR_FORMAT, "indicator %s: layers[\"%s\"].omega.%s must be a number >= 0 (the profile has a "
                       "run at %s)", ind->origin, c->layer[j], qs_precision_name(p), qs_precision_name(p));
    *out = l->omega[p];
    return QS_OK;
}

/* What the replayer charges layer j at option k of the model m (every layer at d->menu[k]), from
 * the node charges ch: its nodes' time and memory into d->prob.time_ms[jk] and mem[jk], its
 * input cast's time into cast_own[jk]. */
static void qs_pb_charge_layers(const qs_pb_ctx *c, qs_pb_type *d, const qs_model *m, const qs_sim_charge *ch, int k,
                                double *mem, double *cast_own) {
    const int K = d->n_opts;
    for (int i = 1; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        if (n->kind == QS_NODE_CAST) continue; /* charged with the layer it feeds, below */
        int j = qs_pb_owner(c, m, i);
        if (j < 0) continue; /* upstream of every layer: fixed */
        size_t jk = (size_t)j * (size_t)K + (size_t)k;
        d->prob.time_ms[jk] += ch[i].ms + ch[i].untimed_ms;
        mem[jk] += ch[i].mem;
        if (qs_node_precision_selectable(n->kind) && m->nodes[n->inputs[0]].kind == QS_NODE_CAST) {
            const qs_sim_charge *cc = &ch[n->inputs[0]];
            cast_own[jk] = cc->ms;
            mem[jk] += cc->mem; /* a shared cast's buffers counted per consumer: conservative */
            if (c->first_consumer[j] == j) d->prob.time_ms[jk] += cc->ms;
        }
        /* a MatMul's second operand (K or V heads) has a cast of its own, never shared */
        if (n->kind == QS_NODE_MATMUL && m->nodes[n->inputs[1]].kind == QS_NODE_CAST) {
            d->prob.time_ms[jk] += ch[n->inputs[1]].ms;
            mem[jk] += ch[n->inputs[1]].mem;
        }
    }
}

/* Every option's charges of every layer (qs_pb_charge_layers, from the model with every layer at
 * that option). */
static qs_status qs_pb_charges(const qs_pb_ctx *c, qs_pb_type *d, double *mem, double *cast_own) {
    qs_status st = QS_OK;
    for (int k = 0; k < d->n_opts && st == QS_OK; k++) {
        qs_model *m = NULL;
        st = qs_pb_model(c, NULL, d->menu[k], &m);
        qs_sim_charge *ch = st == QS_OK ? calloc((size_t)m->n_nodes, sizeof *ch) : NULL;
        if (st == QS_OK && !ch) st = QS_FAIL(QS_ERR_OOM, "out of memory planning");
        if (st == QS_OK) {
            qs_sim_worker sw = qs_pb_sim_worker(c->rq, d->tmpl, m);
            st = qs_sim_node_charges(&sw, ch);
        }
        if (st == QS_OK) qs_pb_charge_layers(c, d, m, ch, k, mem, cast_own);
        free(ch);
        qs_model_free(m);
    }
    return st;
}

/* Shared casts: consumer j pays its own cast unless it needs the first consumer's dtype. */
static void qs_pb_edges(const qs_pb_ctx *c, qs_pb_type *d, const double *cast_own) {
    const int K = d->n_opts;
    for (int j = 0, e = 0; j < c->n_layers; j++) {
        if (c->first_consumer[j] == j) continue;
        d->prob.edges[e] = (qs_alloc_edge){.src = c->first_consumer[j], .dst = j};
        for (int k1 = 0; k1 < K; k1++)
            for (int k2 = 0; k2 < K; k2++)
                d->prob.cast_ms[((size_t)e * K + k1) * K + k2] =
                    qs_precision_operand_dtype(d->menu[k1], false) == qs_precision_operand_dtype(d->menu[k2], false)
                        ? 0 : cast_own[(size_t)j * K + k2];
        e++;
    }
}

/* A layer's least time moves into the fixed part (the untimed shares may be negative); memory
 * rounded to bytes; ω from the indicator. The layers' times and memory at the base into *sum0,
 * *mem0. */
static qs_status qs_pb_normalize(const qs_pb_ctx *c, qs_pb_type *d, const double *mem, double *sum0, int64_t *mem0) {
    const int K = d->n_opts;
    *sum0 = 0;
    *mem0 = 0;
    for (int j = 0; j < c->n_layers; j++) {
        double lo = INFINITY;
        for (int k = 0; k < K; k++) lo = fmin(lo, d->prob.time_ms[(size_t)j * K + k]);
        for (int k = 0; k < K; k++) {
            size_t jk = (size_t)j * K + k;
            d->prob.time_ms[jk] -= lo;
            if (d->prob.time_ms[jk] < 0) d->prob.time_ms[jk] = 0;
            d->prob.mem[jk] = (int64_t)llround(mem[jk]);
            QS_TRY(qs_pb_omega(c, j, d->menu[k], &d->prob.omega[jk]));
        }
        *sum0 += d->prob.time_ms[(size_t)j * K];
        *mem0 += d->prob.mem[(size_t)j * K];
    }
    return QS_OK;
}

/* Fixed parts: d at the base, every other worker a fastest-type one; the memory cap. */
static qs_status qs_pb_fixed(const qs_pb_ctx *c, qs_pb_type *d, double sum0, int64_t mem0) {
    const qs_planb_request *rq = c->rq;
    int *src = calloc((size_t)rq->n_workers, sizeof *src);
    if (!src) return QS_FAIL(QS_ERR_OOM, "out of memory planning");
    for (int r = 0; r < rq->n_workers; r++) src[r] = strcmp(rq->workers[r].type, d->name) == 0 ? r : c->fast_tmpl;
    qs_sim_result sim, cal;
    memset(&cal, 0, sizeof cal);
    qs_status st = qs_pb_replay(c, src, NULL, false, &sim);
    if (st == QS_OK) st = qs_pb_replay(c, src, NULL, true, &cal);
    free(src);
    d->sync_base_cal_ms = st == QS_OK ? cal.iteration_ms : NAN;
    if (st == QS_OK) {
        d->sync_base_ms = sim.iteration_ms;
        double m_d = sim.workers[d->tmpl].memory_bytes;
        d->prob.fixed_ms = fmax(0, d->sync_base_ms - sum0);
        d->prob.fixed_mem = (int64_t)llround(fmax(0, m_d - (double)mem0));
    }
    qs_sim_result_free(&sim);
    qs_sim_result_free(&cal);
    QS_TRY(st);
    d->prob.mem_cap = QS_ALLOC_NO_CAP;
    for (int r = 0; r < rq->n_workers; r++)
        if (strcmp(rq->workers[r].type, d->name) == 0 && rq->workers[r].memory_cap > 0 &&
            rq->workers[r].memory_cap < d->prob.mem_cap)
            d->prob.mem_cap = rq->workers[r].memory_cap;
    return QS_OK;
}

qs_status qs_pb_problem(const qs_pb_ctx *c, qs_pb_type *d) {
    const qs_profile *p = c->rq->workers[d->tmpl].profile;
    d->n_opts = 0;
    for (int k = 0; k < QS_PREC_COUNT; k++)
        if (qs_profile_run_at(p, (qs_precision)k)) d->menu[d->n_opts++] = (qs_precision)k;
    int L = c->n_layers, K = d->n_opts, E = 0;
    for (int j = 0; j < L; j++) E += c->first_consumer[j] != j;
    QS_TRY(qs_alloc_problem_alloc(&d->prob, L, K, E));
    snprintf(d->prob.name, sizeof d->prob.name, "%s", d->name);
    double *cast_own = calloc((size_t)L * (size_t)K, sizeof *cast_own), *mem = calloc((size_t)L * (size_t)K, sizeof *mem);
    qs_status st = cast_own && mem ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory planning");
    if (st == QS_OK) st = qs_pb_charges(c, d, mem, cast_own);
    if (st == QS_OK) qs_pb_edges(c, d, cast_own);
    double sum0 = 0;
    int64_t mem0 = 0;
    if (st == QS_OK) st = qs_pb_normalize(c, d, mem, &sum0, &mem0);
    free(cast_own);
    free(mem);
    if (st == QS_OK) st = qs_pb_fixed(c, d, sum0, mem0);
    return st == QS_OK ? qs_alloc_problem_check(&d->prob) : st;
}
