/* src/plan/allocator.c — allocation problems and plans: allocation, validation, evaluation,
 * results and the gap between two solvers (see allocator.h). */
#include "plan/allocator.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan/alloc_internal.h"

/* ------------------------------------------------------------------ problems */

qs_status qs_alloc_problem_alloc(qs_alloc_problem *p, int32_t L, int32_t K, int32_t E) {
    memset(p, 0, sizeof *p);
    if (L < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "allocator problem: %d layers; it needs at least one", (int)L);
    if (K < 1 || K > QS_ALLOC_MAX_OPTS)
        return QS_FAIL(QS_ERR_INVALID_ARG, "allocator problem: %d precision options; allowed 1..%d", (int)K,
                       QS_ALLOC_MAX_OPTS);
    if (E < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "allocator problem: %d edges (negative)", (int)E);
    size_t lk = (size_t)L * (size_t)K, ekk = (size_t)E * (size_t)K * (size_t)K;
    p->time_ms = calloc(lk, sizeof *p->time_ms);
    p->mem = calloc(lk, sizeof *p->mem);
    p->omega = calloc(lk, sizeof *p->omega);
    p->allowed = malloc(lk);
    p->edges = calloc(E ? (size_t)E : 1, sizeof *p->edges);
    p->cast_ms = calloc(ekk ? ekk : 1, sizeof *p->cast_ms);
    p->owned = true;
    if (!p->time_ms || !p->mem || !p->omega || !p->allowed || !p->edges || !p->cast_ms) {
        qs_alloc_problem_free(p);
        return QS_FAIL(QS_ERR_OOM, "allocator problem: out of memory for %d layers × %d options, %d edges", (int)L,
                       (int)K, (int)E);
    }
    memset(p->allowed, 1, lk);
    p->n_layers = L;
    p->n_opts = K;
    p->n_edges = E;
    p->target_ms = INFINITY;
    p->mem_cap = QS_ALLOC_NO_CAP;
    return QS_OK;
}

void qs_alloc_problem_free(qs_alloc_problem *p) {
    if (!p) return;
    if (p->owned) {
        free(p->time_ms);
        free(p->mem);
        free(p->omega);
        free(p->allowed);
        free(p->edges);
        free(p->cast_ms);
    }
    memset(p, 0, sizeof *p);
}

bool qs_alloc_allowed(const qs_alloc_problem *p, int32_t l, int32_t k) {
    return !p->allowed || p->allowed[qs_alloc_ix(p, l, k)] != 0;
}

const char *qs_alloc_label(const qs_alloc_problem *p, char *buf, int cap) {
    if (p->name[0]) snprintf(buf, (size_t)cap, "allocator problem '%.64s'", p->name);
    else snprintf(buf, (size_t)cap, "allocator problem");
    return buf;
}

const char *qs_alloc_bytes(int64_t b, char *buf, int cap) {
    snprintf(buf, (size_t)cap, "%.1f MiB (%lld B)", (double)b / 1048576.0, (long long)b);
    return buf;
}

/* A finite cost ≥ 0. */
static bool qs_alloc_cost_ok(double v) { return isfinite(v) && v >= 0.0; }

qs_status qs_alloc_problem_check(const qs_alloc_problem *p) {
    char lb[96];
    if (!p) return QS_FAIL(QS_ERR_INVALID_ARG, "allocator: no problem given");
    const char *who = qs_alloc_label(p, lb, sizeof lb);
    if (p->n_layers < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: no layers (n_layers = %d)", who, (int)p->n_layers);
    if (p->n_opts < 1 || p->n_opts > QS_ALLOC_MAX_OPTS)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %d precision options; allowed 1..%d", who, (int)p->n_opts,
                       QS_ALLOC_MAX_OPTS);
    if (p->n_edges < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative edge count %d", who, (int)p->n_edges);
    if (!p->time_ms || !p->mem || !p->omega)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the time, memory and indicator arrays must all be given", who);
    if (p->n_edges > 0 && (!p->edges || !p->cast_ms))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %d edges but no edge list or cast costs", who, (int)p->n_edges);
    const int32_t L = p->n_layers, K = p->n_opts;
    int64_t max_sum = p->fixed_mem;
    if (p->fixed_mem < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: fixed memory %lld B is negative", who, (long long)p->fixed_mem);
    for (int32_t l = 0; l < L; l++) {
        int n_allowed = 0;
        int64_t max_m = 0;
        for (int32_t k = 0; k < K; k++) {
            int64_t i = qs_alloc_ix(p, l, k);
            if (!qs_alloc_cost_ok(p->time_ms[i]))
                return QS_FAIL(QS_ERR_INVALID_ARG, "%s: time of layer %d option %d is %g ms; costs must be finite and ≥ 0",
                               who, (int)l, (int)k, p->time_ms[i]);
            if (!qs_alloc_cost_ok(p->omega[i]))
                return QS_FAIL(QS_ERR_INVALID_ARG, "%s: indicator ω of layer %d option %d is %g; it must be finite and ≥ 0",
                               who, (int)l, (int)k, p->omega[i]);
            if (p->mem[i] < 0)
                return QS_FAIL(QS_ERR_INVALID_ARG, "%s: memory of layer %d option %d is %lld B; it must be ≥ 0", who,
                               (int)l, (int)k, (long long)p->mem[i]);
            if (p->mem[i] > max_m) max_m = p->mem[i];
            if (qs_alloc_allowed(p, l, k)) n_allowed++;
        }
        if (!n_allowed) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: layer %d has no allowed option", who, (int)l);
        if (__builtin_add_overflow(max_sum, max_m, &max_sum))
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s: memory sums overflow int64 (layer %d)", who, (int)l);
    }
    for (int32_t e = 0; e < p->n_edges; e++) {
        qs_alloc_edge ed = p->edges[e];
        if (ed.src < 0 || ed.src >= L || ed.dst < 0 || ed.dst >= L)
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s: edge %d (%d → %d) names a layer outside 0..%d", who, (int)e,
                           (int)ed.src, (int)ed.dst, (int)(L - 1));
        if (ed.src == ed.dst)
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s: edge %d joins layer %d to itself", who, (int)e, (int)ed.src);
        for (int32_t a = 0; a < K; a++)
            for (int32_t b = 0; b < K; b++)
                if (!qs_alloc_cost_ok(qs_alloc_cast(p, e, a, b)))
                    return QS_FAIL(QS_ERR_INVALID_ARG,
                                   "%s: cast cost of edge %d (%d → %d) for options %d → %d is %g ms; costs must be "
                                   "finite and ≥ 0",
                                   who, (int)e, (int)ed.src, (int)ed.dst, (int)a, (int)b, qs_alloc_cast(p, e, a, b));
    }
    if (!qs_alloc_cost_ok(p->fixed_ms))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: fixed time %g ms must be finite and ≥ 0", who, p->fixed_ms);
    if (isnan(p->target_ms) || p->target_ms <= 0.0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: target time %g ms must be > 0 (INFINITY for none)", who, p->target_ms);
    if (p->mem_cap <= 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: memory cap %lld B must be > 0 (QS_ALLOC_NO_CAP for none)", who,
                       (long long)p->mem_cap);
    return QS_OK;
}

/* ------------------------------------------------------------------ plans */

qs_status qs_alloc_evaluate(const qs_alloc_problem *p, const int32_t *choice, double *time_ms, int64_t *mem,
                            double *omega) {
    double t = p->fixed_ms, w = 0.0;
    int64_t m = p->fixed_mem;
    for (int32_t l = 0; l < p->n_layers; l++) {
        int32_t k = choice[l];
        if (k < 0 || k >= p->n_opts || !qs_alloc_allowed(p, l, k))
            return QS_FAIL(QS_ERR_INVALID_ARG, "allocator plan: layer %d has option %d, which is %s", (int)l, (int)k,
                           k < 0 || k >= p->n_opts ? "out of range" : "not allowed for it");
        int64_t i = qs_alloc_ix(p, l, k);
        t += p->time_ms[i];
        m += p->mem[i];
        w += p->omega[i];
    }
    for (int32_t e = 0; e < p->n_edges; e++) t += qs_alloc_cast(p, e, choice[p->edges[e].src], choice[p->edges[e].dst]);
    if (time_ms) *time_ms = t;
    if (mem) *mem = m;
    if (omega) *omega = w;
    return QS_OK;
}

bool qs_alloc_meets(const qs_alloc_problem *p, double time_ms, int64_t mem) {
    return time_ms <= p->target_ms + qs_alloc_time_tol(p->target_ms) && mem <= p->mem_cap;
}

void qs_alloc_min_mem_plan(const qs_alloc_problem *p, int32_t *choice) {
    for (int32_t l = 0; l < p->n_layers; l++) {
        int32_t best = -1;
        for (int32_t k = 0; k < p->n_opts; k++) {
            if (!qs_alloc_allowed(p, l, k)) continue;
            int64_t i = qs_alloc_ix(p, l, k), b = qs_alloc_ix(p, l, best < 0 ? k : best);
            if (best < 0 || p->mem[i] < p->mem[b] || (p->mem[i] == p->mem[b] && p->time_ms[i] < p->time_ms[b])) best = k;
        }
        choice[l] = best;
    }
}

int64_t qs_alloc_min_mem(const qs_alloc_problem *p) {
    int64_t m = p->fixed_mem;
    for (int32_t l = 0; l < p->n_layers; l++) {
        int64_t best = INT64_MAX;
        for (int32_t k = 0; k < p->n_opts; k++)
            if (qs_alloc_allowed(p, l, k) && p->mem[qs_alloc_ix(p, l, k)] < best) best = p->mem[qs_alloc_ix(p, l, k)];
        m += best;
    }
    return m;
}

/* ------------------------------------------------------------------ incidence and moves */

qs_status qs_alloc_adj_build(const qs_alloc_problem *p, qs_alloc_adj *a) {
    a->start = calloc((size_t)p->n_layers + 1, sizeof *a->start);
    a->ids = malloc(sizeof *a->ids * (size_t)(2 * (int64_t)p->n_edges + 1));
    if (!a->start || !a->ids) {
        qs_alloc_adj_free(a);
        return QS_FAIL(QS_ERR_OOM, "allocator: out of memory for the incidence lists");
    }
    for (int32_t e = 0; e < p->n_edges; e++) {
        a->start[p->edges[e].src + 1]++;
        a->start[p->edges[e].dst + 1]++;
    }
    for (int32_t l = 0; l < p->n_layers; l++) a->start[l + 1] += a->start[l];
    int32_t *fill = calloc((size_t)p->n_layers, sizeof *fill);
    if (!fill) {
        qs_alloc_adj_free(a);
        return QS_FAIL(QS_ERR_OOM, "allocator: out of memory for the incidence lists");
    }
    for (int32_t e = 0; e < p->n_edges; e++) {
        int32_t s = p->edges[e].src, d = p->edges[e].dst;
        a->ids[a->start[s] + fill[s]++] = e;
        a->ids[a->start[d] + fill[d]++] = e;
    }
    free(fill);
    return QS_OK;
}

void qs_alloc_adj_free(qs_alloc_adj *a) {
    free(a->start);
    free(a->ids);
    a->start = NULL;
    a->ids = NULL;
}

double qs_alloc_move_dtime(const qs_alloc_problem *p, const qs_alloc_adj *a, const int32_t *choice, int32_t l,
                           int32_t k) {
    int32_t k0 = choice[l];
    double d = p->time_ms[qs_alloc_ix(p, l, k)] - p->time_ms[qs_alloc_ix(p, l, k0)];
    for (int32_t i = a->start[l]; i < a->start[l + 1]; i++) {
        int32_t e = a->ids[i];
        qs_alloc_edge ed = p->edges[e];
        if (ed.src == l) d += qs_alloc_cast(p, e, k, choice[ed.dst]) - qs_alloc_cast(p, e, k0, choice[ed.dst]);
        else d += qs_alloc_cast(p, e, choice[ed.src], k) - qs_alloc_cast(p, e, choice[ed.src], k0);
    }
    return d;
}

/* ------------------------------------------------------------------ results */

void qs_alloc_result_init(qs_alloc_result *r) {
    memset(r, 0, sizeof *r);
    r->bound = NAN;
    r->gap = NAN;
    r->best_time_ms = NAN;
}

void qs_alloc_result_free(qs_alloc_result *r) {
    if (!r) return;
    free(r->choice);
    memset(r, 0, sizeof *r);
}

qs_status qs_alloc_result_set(const qs_alloc_problem *p, const int32_t *choice, qs_alloc_result *res) {
    if (!res->choice) {
        res->choice = malloc(sizeof *res->choice * (size_t)p->n_layers);
        if (!res->choice) return QS_FAIL(QS_ERR_OOM, "allocator: out of memory for a plan");
    }
    res->n_layers = p->n_layers;
    if (res->choice != choice) memcpy(res->choice, choice, sizeof *choice * (size_t)p->n_layers);
    QS_TRY(qs_alloc_evaluate(p, choice, &res->time_ms, &res->mem, &res->omega));
    res->feasible = qs_alloc_meets(p, res->time_ms, res->mem);
    return QS_OK;
}

double qs_alloc_set_gap(qs_alloc_result *greedy, const qs_alloc_result *exact) {
    double g = NAN;
    if (exact->optimal && exact->feasible && greedy->feasible) {
        double d = greedy->omega - exact->omega;
        if (exact->omega > 1e-12) g = d / exact->omega;
        else g = greedy->omega <= 1e-12 ? 0.0 : INFINITY;
        if (g < 0.0 && g > -1e-9) g = 0.0;
    }
    greedy->gap = g;
    return g;
}

double qs_alloc_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
