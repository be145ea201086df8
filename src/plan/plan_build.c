/* src/plan/plan_build.c — `qsync plan`'s core (see plan_build.h). */
#include "plan/plan_build.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "graph/graph.h"
#include "graph/precision.h"
#include "models/models.h"
#include "plan/allocator.h"
#include "predict/simulate.h"

#define QS_PB_MAX_TYPES 16

/* One slower device type's state. */
typedef struct qs_pb_type {
    const char *name;
    int tmpl;                      /* index of its first worker */
    int n_opts;
    qs_precision menu[QS_PREC_COUNT];
    qs_alloc_problem prob;
    qs_alloc_result greedy, exact;
    bool has_exact;
    const int32_t *choice;         /* the chosen plan (greedy's or exact's) */
    double sync_base_ms;           /* replay with this type all at the base, the others fastest-type */
    double sync_base_cal_ms;       /* the same, calibrated (src/predict/calibrate.h): the document's */
    qs_precision *prec;            /* [L] chosen precision per layer */
    int32_t rounds_tightened;      /* times its target or cap was lowered after a replay */
    bool best_effort;              /* no plan met T: the fastest plan was taken (request best_effort) */
} qs_pb_type;

typedef struct qs_pb_ctx {
    const qs_planb_request *rq;
    qs_precision base;             /* the profiles' highest precision: what the fastest type trains at */
    int n_layers;
    char (*layer)[QS_NAME_MAX];    /* [L] selectable layer names, in order */
    int *first_consumer;           /* [L] the first layer reading the same input */
} qs_pb_ctx;

static double qs_pb_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool qs_pb_is_layer(const qs_pb_ctx *c, const qs_node *n);

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

/* The replayer's view of worker template t, with model m. */
static qs_sim_worker qs_pb_sim_worker(const qs_planb_request *rq, int t, const qs_model *m) {
    const qs_planb_worker *w = &rq->workers[t];
    return (qs_sim_worker){.type = w->type, .slowdown = w->slowdown, .slow_whole_step = w->slow_whole_step,
                           .profile = w->profile, .profile_path = w->profile_path, .m = m, .batch = rq->batch};
}

/* Replay the cluster where worker r is played by template src[r] (NULL: itself) with layer
 * precisions prec[r] (NULL entries, or prec NULL: all at the base); calibrated (qs_simulate) for
 * the document, else the replay alone (qs_sim_replay), the scale the planner works on. *out: the
 * simulation document. */
static qs_status qs_pb_replay(const qs_pb_ctx *c, const int *src, qs_precision *const *prec, bool calibrated,
                              cJSON **out) {
    const qs_planb_request *rq = c->rq;
    int n = rq->n_workers;
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

static const cJSON *qs_pb_worker_doc(const cJSON *sim, int r) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(sim, "workers"), r);
}

/* The highest precision (first in fp32, tf32, bf16, fp16, fp8, int8) worker w's profile has a
 * run for: its base. QS_ERR_FORMAT when it has none. */
static qs_status qs_pb_profile_base(const qs_planb_worker *w, qs_precision *base) {
    if (qs_profile_top_precision(w->profile, base)) return QS_OK;
    return QS_FAIL(QS_ERR_FORMAT, "profile %s (device type \"%s\") has no run at any precision (\"runs\"): profile "
                   "again with qsync profile", w->profile_path, w->type);
}

/* The inputs the request must agree on: profiles of this model, config and batch, all with the
 * same highest precision (*base); ≥ 2 types. */
static qs_status qs_pb_check(const qs_planb_request *rq, int *n_types, const char **types, qs_precision *base) {
    if (rq->n_workers < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the cluster has %d worker: there is nothing to plan (a plan keeps several "
                       "device types in step)", rq->n_workers);
    *n_types = 0;
    for (int r = 0; r < rq->n_workers; r++) {
        const qs_planb_worker *w = &rq->workers[r];
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(w->profile, "model");
        const cJSON *config = cJSON_GetObjectItemCaseSensitive(w->profile, "config");
        if (!cJSON_IsString(model) || strcmp(model->valuestring, rq->arch) != 0)
            return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") is of model %s, but the plan is for %s: "
                           "profile %s on that device type", w->profile_path, w->type,
                           cJSON_IsString(model) ? model->valuestring : "?", rq->arch, rq->arch);
        if (!cJSON_IsString(config) || strcmp(config->valuestring, rq->config) != 0)
            return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") is of %s built with \"%s\", but the plan is "
                           "for \"%s\": profile with the same options (--width)", w->profile_path, w->type, rq->arch,
                           cJSON_IsString(config) ? config->valuestring : "?", rq->config);
        double b = qs_pb_num(w->profile, "batch");
        if (!(b == (double)rq->batch))
            return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") was taken at batch %g, but the plan is for a "
                           "local batch of %lld: profile at that batch", w->profile_path, w->type, b,
                           (long long)rq->batch);
        qs_precision top = QS_PREC_FP32;
        QS_TRY(qs_pb_profile_base(w, &top));
        if (r == 0) *base = top;
        else if (top != *base)
            return QS_FAIL(QS_ERR_MISMATCH, "profile %s (device type \"%s\") starts at %s, but profile %s (device type "
                           "\"%s\") starts at %s: the profiles of one plan must share their highest precision (the base "
                           "the fastest type trains at); profile every type with --precisions starting with the same one",
                           w->profile_path, w->type, qs_precision_name(top), rq->workers[0].profile_path,
                           rq->workers[0].type, qs_precision_name(*base));
        int k = 0;
        while (k < *n_types && strcmp(types[k], w->type) != 0) k++;
        if (k == *n_types) {
            if (k == QS_PB_MAX_TYPES) return QS_FAIL(QS_ERR_INVALID_ARG, "more than %d device types", QS_PB_MAX_TYPES);
            types[(*n_types)++] = w->type;
        }
    }
    if (*n_types < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "every worker of the cluster is of device type \"%s\": there is nothing to "
                       "plan (a plan keeps several device types in step; train with --precision instead)", types[0]);
    const cJSON *ind = rq->indicator, *fmt = cJSON_GetObjectItemCaseSensitive(ind, "format");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(ind, "model"), *config = cJSON_GetObjectItemCaseSensitive(ind, "config");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "qsync-indicator") != 0 || qs_pb_num(ind, "version") != 1 ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(ind, "layers")))
        return QS_FAIL(QS_ERR_FORMAT, "indicator %s is not a qsync indicator of version 1 (format \"qsync-indicator\", "
                       "\"layers\"): make one with qsync indicate", rq->indicator_path);
    if (!cJSON_IsString(model) || strcmp(model->valuestring, rq->arch) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "indicator %s is for model %s, but the plan is for %s: run qsync indicate on %s",
                       rq->indicator_path, cJSON_IsString(model) ? model->valuestring : "?", rq->arch, rq->arch);
    if (!cJSON_IsString(config) || strcmp(config->valuestring, rq->config) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "indicator %s is for %s built with \"%s\", but the plan is for \"%s\": run qsync "
                       "indicate with the same options", rq->indicator_path, rq->arch,
                       cJSON_IsString(config) ? config->valuestring : "?", rq->config);
    return QS_OK;
}

/* The layers (names, in order) and each one's first co-consumer of its input, from the model at
 * fp32 (the graph without quantizing casts: only its structure is read). */
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

static qs_status qs_pb_layers(qs_pb_ctx *c) {
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
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(c->rq->indicator, "layers");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(layers, c->layer[j]);
    if (!cJSON_IsObject(l))
        return QS_FAIL(QS_ERR_NOT_FOUND, "indicator %s has no layer \"%s\" (layers[\"%s\"].omega): make it for this "
                       "model with qsync indicate", c->rq->indicator_path, c->layer[j], c->layer[j]);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(l, "omega"), qs_precision_name(p));
    if (!v && p == c->base) {
        *out = 0;
        return QS_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
        return QS_FAIL(QS_ERR_FORMAT, "indicator %s: layers[\"%s\"].omega.%s must be a number >= 0 (the profile has a "
                       "run at %s)", c->rq->indicator_path, c->layer[j], qs_precision_name(p), qs_precision_name(p));
    *out = v->valuedouble;
    return QS_OK;
}

/* Type d's allocator problem: options from its profile's runs (the base first: qs_pb_check),
 * costs as the replayer charges them, fixed parts from a replay of d at the base among
 * fastest-type workers (fast_tmpl). */
static qs_status qs_pb_problem(const qs_pb_ctx *c, qs_pb_type *d, int fast_tmpl) {
    const qs_planb_request *rq = c->rq;
    const qs_planb_worker *w = &rq->workers[d->tmpl];
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(w->profile, "runs");
    d->n_opts = 0;
    for (int p = 0; p < QS_PREC_COUNT; p++)
        if (cJSON_GetObjectItemCaseSensitive(runs, qs_precision_name((qs_precision)p))) d->menu[d->n_opts++] = (qs_precision)p;
    int L = c->n_layers, K = d->n_opts, E = 0;
    for (int j = 0; j < L; j++) E += c->first_consumer[j] != j;
    QS_TRY(qs_alloc_problem_alloc(&d->prob, L, K, E));
    snprintf(d->prob.name, sizeof d->prob.name, "%s", d->name);
    double *cast_own = calloc((size_t)L * (size_t)K, sizeof *cast_own), *mem = calloc((size_t)L * (size_t)K, sizeof *mem);
    qs_status st = cast_own && mem ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory planning");
    for (int k = 0; k < K && st == QS_OK; k++) {
        qs_model *m = NULL;
        st = qs_pb_model(c, NULL, d->menu[k], &m);
        qs_sim_charge *ch = st == QS_OK ? calloc((size_t)m->n_nodes, sizeof *ch) : NULL;
        if (st == QS_OK && !ch) st = QS_FAIL(QS_ERR_OOM, "out of memory planning");
        if (st == QS_OK) {
            qs_sim_worker sw = qs_pb_sim_worker(rq, d->tmpl, m);
            st = qs_sim_node_charges(&sw, ch);
        }
        for (int i = 1; st == QS_OK && i < m->n_nodes; i++) {
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
        free(ch);
        qs_model_free(m);
    }
    /* shared casts: consumer j pays its own cast unless it needs the first consumer's dtype */
    for (int j = 0, e = 0; j < L && st == QS_OK; j++) {
        if (c->first_consumer[j] == j) continue;
        d->prob.edges[e] = (qs_alloc_edge){.src = c->first_consumer[j], .dst = j};
        for (int k1 = 0; k1 < K; k1++)
            for (int k2 = 0; k2 < K; k2++)
                d->prob.cast_ms[((size_t)e * K + k1) * K + k2] =
                    qs_precision_operand_dtype(d->menu[k1], false) == qs_precision_operand_dtype(d->menu[k2], false)
                        ? 0 : cast_own[(size_t)j * K + k2];
        e++;
    }
    /* a layer's least time moves into the fixed part (the untimed shares may be negative) */
    double sum0 = 0;
    int64_t mem0 = 0;
    for (int j = 0; j < L && st == QS_OK; j++) {
        double lo = INFINITY;
        for (int k = 0; k < K; k++) lo = fmin(lo, d->prob.time_ms[(size_t)j * K + k]);
        for (int k = 0; k < K; k++) {
            size_t jk = (size_t)j * K + k;
            d->prob.time_ms[jk] -= lo;
            if (d->prob.time_ms[jk] < 0) d->prob.time_ms[jk] = 0;
            d->prob.mem[jk] = (int64_t)llround(mem[jk]);
            st = st == QS_OK ? qs_pb_omega(c, j, d->menu[k], &d->prob.omega[jk]) : st;
        }
        sum0 += d->prob.time_ms[(size_t)j * K];
        mem0 += d->prob.mem[(size_t)j * K];
    }
    free(cast_own);
    free(mem);
    if (st != QS_OK) return st;
    /* fixed parts: d at the base, every other worker a fastest-type one */
    int *src = calloc((size_t)rq->n_workers, sizeof *src);
    if (!src) return QS_FAIL(QS_ERR_OOM, "out of memory planning");
    for (int r = 0; r < rq->n_workers; r++) src[r] = strcmp(rq->workers[r].type, d->name) == 0 ? r : fast_tmpl;
    cJSON *sim = NULL, *cal = NULL;
    st = qs_pb_replay(c, src, NULL, false, &sim);
    if (st == QS_OK) st = qs_pb_replay(c, src, NULL, true, &cal);
    free(src);
    d->sync_base_cal_ms = qs_pb_num(cal, "iteration_ms");
    cJSON_Delete(cal);
    if (st != QS_OK) {
        cJSON_Delete(sim);
        return st;
    }
    d->sync_base_ms = qs_pb_num(sim, "iteration_ms");
    double m_d = qs_pb_num(qs_pb_worker_doc(sim, d->tmpl), "memory_bytes");
    cJSON_Delete(sim);
    d->prob.fixed_ms = fmax(0, d->sync_base_ms - sum0);
    d->prob.fixed_mem = (int64_t)llround(fmax(0, m_d - (double)mem0));
    d->prob.mem_cap = QS_ALLOC_NO_CAP;
    for (int r = 0; r < rq->n_workers; r++)
        if (strcmp(rq->workers[r].type, d->name) == 0 && rq->workers[r].memory_cap > 0 &&
            rq->workers[r].memory_cap < d->prob.mem_cap)
            d->prob.mem_cap = rq->workers[r].memory_cap;
    return qs_alloc_problem_check(&d->prob);
}

/* Solve d's problem once (greedy, then exact unless greedy_only, or when the greedy finds it
 * infeasible); QS_ERR_INFEASIBLE leaves the best-effort results in d. */
static qs_status qs_pb_solve_once(const qs_pb_ctx *c, qs_pb_type *d) {
    qs_alloc_result_free(&d->greedy);
    qs_alloc_result_free(&d->exact);
    d->has_exact = false;
    qs_status st = qs_alloc_greedy(&d->prob, NULL, &d->greedy);
    if (st == QS_ERR_INFEASIBLE || (st == QS_OK && !c->rq->greedy_only)) {
        qs_alloc_exact_opts eo = qs_alloc_exact_defaults();
        eo.time_limit_s = 60;
        qs_status se = qs_alloc_exact(&d->prob, &eo, &d->exact);
        if (se == QS_OK) {
            d->has_exact = true;
            qs_alloc_set_gap(&d->greedy, &d->exact);
            st = QS_OK;
        } else if (se != QS_ERR_INFEASIBLE) {
            return se;
        } else if (isfinite(d->exact.best_time_ms)) {
            d->greedy.best_time_ms = d->exact.best_time_ms; /* proven */
        }
    }
    return st;
}

/* Solve d's problem; the chosen plan into d->prec. With best_effort, a time target no plan
 * meets is relaxed to the fastest plan's time (d->best_effort set), so the least-ω fastest plan
 * is chosen. */
static qs_status qs_pb_solve(const qs_pb_ctx *c, qs_pb_type *d, double T_sync) {
    qs_status st = qs_pb_solve_once(c, d);
    const qs_alloc_result *r = &d->greedy;
    bool memory_bound = d->prob.mem_cap != QS_ALLOC_NO_CAP && r->min_mem > d->prob.mem_cap;
    if (st == QS_ERR_INFEASIBLE && c->rq->best_effort && !memory_bound && isfinite(r->best_time_ms)) {
        d->prob.target_ms = r->best_time_ms * (1 + 1e-9);
        d->best_effort = true;
        st = qs_pb_solve_once(c, d);
    }
    if (st == QS_ERR_INFEASIBLE) {
        if (memory_bound)
            return QS_FAIL(QS_ERR_INFEASIBLE, "no plan fits device type \"%s\" in its memory cap of %.1f MiB: even with "
                           "every layer at its least-memory precision it is predicted to need %.1f MiB (raise the "
                           "workers' memory_mb or lower the batch)", d->name, (double)d->prob.mem_cap / 1048576.0,
                           (double)r->min_mem / 1048576.0);
        double best = r->best_time_ms + (T_sync - d->prob.target_ms); /* back to the synchronized scale */
        return QS_FAIL(QS_ERR_INFEASIBLE, "no plan for device type \"%s\" meets T = %.3f ms: the fastest plan %s is "
                       "predicted to take %.3f ms per synchronized iteration (all %s: %.3f ms); give --target-ms "
                       ">= %.3f, or profile lower precisions", d->name, T_sync,
                       d->prob.mem_cap != QS_ALLOC_NO_CAP ? "within the memory cap" : "(every layer at its fastest precision)",
                       best, qs_precision_name(c->base), d->sync_base_ms, best);
    }
    if (st != QS_OK) return st;
    d->choice = d->has_exact ? d->exact.choice : d->greedy.choice;
    for (int j = 0; j < c->n_layers; j++) d->prec[j] = d->menu[d->choice[j]];
    return QS_OK;
}

/* The plan document: a section per device type, predictions (sim: the plan's replay, on whose
 * scale T is met or not; cal: its calibrated replay, the prediction). */
static cJSON *qs_pb_document(const qs_pb_ctx *c, const char *const *types, int n_types, const char *fast, qs_pb_type *t,
                             int n_slow, double T, bool target_given, const cJSON *sim, const cJSON *cal,
                             int rounds) {
    const qs_planb_request *rq = c->rq;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "format", "qsync-plan");
    cJSON_AddNumberToObject(doc, "version", 2);
    cJSON_AddStringToObject(doc, "model", rq->arch);
    cJSON_AddStringToObject(doc, "config", rq->config);
    const cJSON *be = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rq->workers[0].profile, "device"),
                                                       "backend");
    if (cJSON_IsString(be)) cJSON_AddStringToObject(doc, "backend", be->valuestring);
    const char *base = qs_precision_name(c->base);
    cJSON_AddStringToObject(doc, "default", base);
    cJSON_AddStringToObject(doc, "comment", "chosen by qsync plan (docs/PLANS.md)");
    cJSON *sections = cJSON_AddObjectToObject(doc, "device_types");
    cJSON *pred = cJSON_CreateObject();
    cJSON_AddNumberToObject(pred, "target_ms", T);
    char source[64];
    snprintf(source, sizeof source, "fastest device type, all %s", base);
    cJSON_AddStringToObject(pred, "target_source", target_given ? "--target-ms" : source);
    cJSON_AddStringToObject(pred, "base_precision", base);
    cJSON_AddStringToObject(pred, "fastest_type", fast);
    cJSON_AddNumberToObject(pred, "synchronized_ms", qs_pb_num(cal, "iteration_ms"));
    cJSON_AddNumberToObject(pred, "replayed_ms", qs_pb_num(sim, "iteration_ms"));
    cJSON *calibration = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cal, "calibration"), true);
    if (calibration) cJSON_AddItemToObject(pred, "calibration", calibration);
    cJSON_AddNumberToObject(pred, "rounds", rounds);
    cJSON_AddBoolToObject(pred, "target_met", qs_pb_num(sim, "iteration_ms") <= T * (1 + rq->tolerance));
    cJSON *ptypes = cJSON_AddObjectToObject(pred, "types");
    for (int i = 0; i < n_types; i++) {
        cJSON *s = cJSON_AddObjectToObject(sections, types[i]);
        cJSON *pt = cJSON_AddObjectToObject(ptypes, types[i]);
        const qs_pb_type *d = NULL;
        for (int k = 0; k < n_slow; k++)
            if (strcmp(t[k].name, types[i]) == 0) d = &t[k];
        if (!d) {
            cJSON_AddStringToObject(s, "default", base);
            cJSON_AddNumberToObject(pt, "omega", 0);
            cJSON_AddNumberToObject(pt, "quantized_layers", 0);
            continue;
        }
        cJSON *precs = cJSON_AddObjectToObject(s, "precisions");
        int quantized = 0;
        for (int j = 0; j < c->n_layers; j++) {
            cJSON_AddStringToObject(precs, c->layer[j], qs_precision_name(d->prec[j]));
            quantized += d->prec[j] != c->base;
        }
        const qs_alloc_result *chosen = d->has_exact ? &d->exact : &d->greedy;
        cJSON_AddNumberToObject(pt, "omega", chosen->omega);
        cJSON_AddNumberToObject(pt, "quantized_layers", quantized);
        cJSON_AddStringToObject(pt, "solver", d->has_exact ? "exact" : "greedy");
        cJSON_AddNumberToObject(pt, "model_ms", chosen->time_ms); /* the additive model, at its (tightened) target */
        cJSON_AddNumberToObject(pt, "model_target_ms", d->prob.target_ms);
        cJSON_AddNumberToObject(pt, "base_synchronized_ms", d->sync_base_cal_ms);
        cJSON_AddNumberToObject(pt, "greedy_omega", d->greedy.omega);
        if (d->has_exact) {
            cJSON_AddNumberToObject(pt, "exact_omega", d->exact.omega);
            cJSON_AddBoolToObject(pt, "exact_optimal", d->exact.optimal);
            if (isfinite(d->greedy.gap)) cJSON_AddNumberToObject(pt, "greedy_gap", d->greedy.gap);
        }
        if (d->prob.mem_cap != QS_ALLOC_NO_CAP) cJSON_AddNumberToObject(pt, "memory_cap_bytes", (double)d->prob.mem_cap);
        cJSON_AddNumberToObject(pt, "tightened", d->rounds_tightened); /* times its target or cap was lowered */
        if (d->best_effort) cJSON_AddBoolToObject(pt, "best_effort", true); /* T relaxed to its fastest plan */
    }
    cJSON *workers = cJSON_AddArrayToObject(pred, "workers");
    const cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(cal, "workers")) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", qs_pb_num(x, "rank"));
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(x, "type");
        if (cJSON_IsString(ty)) cJSON_AddStringToObject(o, "type", ty->valuestring);
        cJSON_AddNumberToObject(o, "iteration_ms", qs_pb_num(x, "iteration_ms"));
        cJSON_AddNumberToObject(o, "memory_bytes", qs_pb_num(x, "memory_bytes"));
        cJSON_AddItemToArray(workers, o);
    }
    cJSON_AddItemToObject(doc, "predictions", pred);
    return doc;
}

qs_status qs_plan_build(const qs_planb_request *rq, cJSON **plan_doc) {
    *plan_doc = NULL;
    const char *types[QS_PB_MAX_TYPES];
    int n_types = 0;
    qs_pb_ctx c = {.rq = rq};
    QS_TRY(qs_pb_check(rq, &n_types, types, &c.base));
    double tol = rq->tolerance >= 0 ? rq->tolerance : 0.005;
    int max_rounds = rq->max_rounds > 0 ? rq->max_rounds : 4, n = rq->n_workers;
    qs_pb_type t[QS_PB_MAX_TYPES];
    memset(t, 0, sizeof t);
    int n_slow = 0, fast_tmpl = -1, rounds = 0;
    cJSON *sim = NULL;
    qs_precision **prec = calloc((size_t)n, sizeof *prec);
    int *src = calloc((size_t)n, sizeof *src);
    qs_status st = prec && src ? qs_pb_layers(&c) : QS_FAIL(QS_ERR_OOM, "out of memory planning");
    /* the fastest type: least own compute (data to end of backward) at the base */
    if (st == QS_OK) st = qs_pb_replay(&c, NULL, NULL, false, &sim);
    double best_own = INFINITY;
    for (int i = 0; i < n_types && st == QS_OK; i++) {
        double own = 0;
        int first = -1;
        for (int r = 0; r < n; r++) {
            if (strcmp(rq->workers[r].type, types[i]) != 0) continue;
            const cJSON *x = qs_pb_worker_doc(sim, r);
            own = fmax(own, qs_pb_num(x, "data_ms") + qs_pb_num(x, "untimed_ms") + qs_pb_num(x, "forward_ms") +
                                qs_pb_num(x, "backward_ms"));
            if (first < 0) first = r;
        }
        if (own < best_own) {
            best_own = own;
            fast_tmpl = first;
        }
    }
    cJSON_Delete(sim);
    sim = NULL;
    const char *fast = fast_tmpl >= 0 ? rq->workers[fast_tmpl].type : "";
    /* T: a cluster of fastest-type workers at the base */
    double T = rq->target_ms, T_fast = NAN;
    if (st == QS_OK) {
        for (int r = 0; r < n; r++) src[r] = fast_tmpl;
        st = qs_pb_replay(&c, src, NULL, false, &sim);
        if (st == QS_OK) T_fast = qs_pb_num(sim, "iteration_ms");
        cJSON_Delete(sim);
        sim = NULL;
    }
    if (st == QS_OK && !(T > 0)) T = T_fast;
    /* the fastest type trains at the base: the cluster cannot step faster than a cluster of it */
    const double T_asked = T;
    if (st == QS_OK && T < T_fast * (1 - tol) && rq->best_effort) T = T_fast;
    if (st == QS_OK && T < T_fast * (1 - tol))
        st = QS_FAIL(QS_ERR_INFEASIBLE, "no plan meets T = %.3f ms: the fastest device type (\"%s\"), which stays %s, "
                     "is predicted to take %.3f ms per synchronized iteration by itself; the best achievable time is "
                     "about %.3f ms (give --target-ms >= %.3f)", T, fast, qs_precision_name(c.base), T_fast, T_fast,
                     T_fast);
    for (int i = 0; i < n_types && st == QS_OK; i++) {
        if (strcmp(types[i], fast) == 0) continue;
        qs_pb_type *d = &t[n_slow++];
        d->name = types[i];
        for (d->tmpl = 0; strcmp(rq->workers[d->tmpl].type, d->name) != 0; d->tmpl++) {}
        d->prec = calloc((size_t)c.n_layers, sizeof *d->prec);
        st = d->prec ? qs_pb_problem(&c, d, fast_tmpl) : QS_FAIL(QS_ERR_OOM, "out of memory planning");
        /* the problem's time is the synchronized iteration when d is the slowest: its target is T */
        d->prob.target_ms = T;
    }
    /* solve, replay, tighten */
    bool met = false;
    double miss = 0;
    while (st == QS_OK && !met && rounds < max_rounds) {
        rounds++;
        for (int k = 0; k < n_slow && st == QS_OK; k++) st = qs_pb_solve(&c, &t[k], T);
        for (int r = 0; r < n && st == QS_OK; r++) {
            prec[r] = NULL;
            for (int k = 0; k < n_slow; k++)
                if (strcmp(rq->workers[r].type, t[k].name) == 0) prec[r] = t[k].prec;
        }
        cJSON_Delete(sim);
        sim = NULL;
        if (st == QS_OK) st = qs_pb_replay(&c, NULL, prec, false, &sim);
        if (st != QS_OK) break;
        double sync = qs_pb_num(sim, "iteration_ms");
        miss = sync - T;
        met = miss <= tol * T;
        for (int r = 0; r < n; r++) { /* memory caps, as replayed */
            double mb = qs_pb_num(qs_pb_worker_doc(sim, r), "memory_bytes");
            if (rq->workers[r].memory_cap > 0 && mb > (double)rq->workers[r].memory_cap) {
                met = false;
                for (int k = 0; k < n_slow; k++)
                    if (strcmp(rq->workers[r].type, t[k].name) == 0 && t[k].prob.mem_cap != QS_ALLOC_NO_CAP) {
                        t[k].prob.mem_cap -= (int64_t)ceil(mb - (double)rq->workers[r].memory_cap);
                        t[k].rounds_tightened++;
                    }
            }
        }
        if (!met && miss > tol * T) {
            int slowest = (int)qs_pb_num(sim, "slowest");
            for (int k = 0; k < n_slow; k++)
                if (strcmp(rq->workers[slowest].type, t[k].name) == 0 || strcmp(rq->workers[slowest].type, fast) == 0) {
                    t[k].prob.target_ms -= miss;
                    t[k].rounds_tightened++;
                    if (!(t[k].prob.target_ms > 0))
                        st = QS_FAIL(QS_ERR_INFEASIBLE, "the replay of the best plan for device type \"%s\" misses T = "
                                     "%.3f ms by %.3f ms and the problem cannot be tightened further", t[k].name, T, miss);
                }
        }
    }
    if (st == QS_OK && !met && !rq->best_effort)
        st = QS_FAIL(QS_ERR_INFEASIBLE, "after %d rounds the replayed plan still misses T = %.3f ms by %.3f ms (%.1f%%; "
                     "tolerance %.1f%%): the best achievable synchronized time is about %.3f ms; give --target-ms",
                     rounds, T, miss, 100 * miss / T, 100 * tol, T + miss);
    cJSON *cal = NULL;
    if (st == QS_OK) st = qs_pb_replay(&c, NULL, prec, true, &cal);
    if (st == QS_OK)
        *plan_doc = qs_pb_document(&c, types, n_types, fast, t, n_slow, T, rq->target_ms > 0, sim, cal, rounds);
    cJSON_Delete(cal);
    if (st == QS_OK && T_asked < T) { /* best effort: the asked T was below the fastest type's own time */
        cJSON *pred = cJSON_GetObjectItemCaseSensitive(*plan_doc, "predictions");
        cJSON_AddNumberToObject(pred, "target_asked_ms", T_asked);
        cJSON_ReplaceItemInObjectCaseSensitive(pred, "target_met", cJSON_CreateFalse());
    }
    cJSON_Delete(sim);
    for (int k = 0; k < n_slow; k++) {
        qs_alloc_problem_free(&t[k].prob);
        qs_alloc_result_free(&t[k].greedy);
        qs_alloc_result_free(&t[k].exact);
        free(t[k].prec);
    }
    free(c.layer);
    free(c.first_consumer);
    free(prec);
    free(src);
    return st;
}
