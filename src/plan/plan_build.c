/* src/plan/plan_build.c — defines: `qsync plan`'s core (qs_plan_build, plan_build.h): the
 * fastest type, the target T, and the rounds of solving each slower type's problem and
 * replaying the chosen plans. The problems: plan_problem.c; the document: plan_build_doc.c. */
#include "plan/plan_build_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* The fastest type: least own compute (data to end of backward) at the base; into c->fast and
 * c->fast_tmpl (its first worker). */
static qs_status qs_pb_fastest(qs_pb_ctx *c) {
    const qs_planb_request *rq = c->rq;
    qs_sim_result sim;
    QS_TRY(qs_pb_replay(c, NULL, NULL, false, &sim));
    double best_own = INFINITY;
    c->fast_tmpl = -1;
    for (int i = 0; i < c->n_types; i++) {
        double own = 0;
        int first = -1;
        for (int r = 0; r < rq->n_workers; r++) {
            if (strcmp(rq->workers[r].type, c->types[i]) != 0) continue;
            const qs_sim_worker_result *x = &sim.workers[r];
            own = fmax(own, x->data_ms + x->untimed_ms + x->forward_ms + x->backward_ms);
            if (first < 0) first = r;
        }
        if (own < best_own) {
            best_own = own;
            c->fast_tmpl = first;
        }
    }
    qs_sim_result_free(&sim);
    c->fast = c->fast_tmpl >= 0 ? rq->workers[c->fast_tmpl].type : "";
    return QS_OK;
}

/* T: the asked target, else the replayed iteration of a cluster of fastest-type workers at the
 * base (*T_fast), below which no plan can go (with best_effort a lower T is raised to it). */
static qs_status qs_pb_target(const qs_pb_ctx *c, double tol, double *T, double *T_fast) {
    const int n = c->rq->n_workers;
    int *src = calloc((size_t)n, sizeof *src);
    if (!src) return QS_FAIL(QS_ERR_OOM, "out of memory planning");
    for (int r = 0; r < n; r++) src[r] = c->fast_tmpl;
    qs_sim_result sim;
    qs_status st = qs_pb_replay(c, src, NULL, false, &sim);
    *T_fast = st == QS_OK ? sim.iteration_ms : NAN;
    qs_sim_result_free(&sim);
    free(src);
    QS_TRY(st);
    *T = c->rq->target_ms;
    if (!(*T > 0)) *T = *T_fast;
    if (*T < *T_fast * (1 - tol) && c->rq->best_effort) *T = *T_fast;
    if (*T < *T_fast * (1 - tol))
        return QS_FAIL(QS_ERR_INFEASIBLE, "no plan meets T = %.3f ms: the fastest device type (\"%s\"), which stays %s, "
                       "is predicted to take %.3f ms per synchronized iteration by itself; the best achievable time is "
                       "about %.3f ms (give --target-ms >= %.3f)", *T, c->fast, qs_precision_name(c->base), *T_fast,
                       *T_fast, *T_fast);
    return QS_OK;
}

/* Every slower type's state and problem, its target T. */
static qs_status qs_pb_problems(qs_pb_ctx *c, double T) {
    for (int i = 0; i < c->n_types; i++) {
        if (strcmp(c->types[i], c->fast) == 0) continue;
        qs_pb_type *d = &c->t[c->n_slow++];
        d->name = c->types[i];
        for (d->tmpl = 0; strcmp(c->rq->workers[d->tmpl].type, d->name) != 0; d->tmpl++) {}
        d->prec = calloc((size_t)c->n_layers, sizeof *d->prec);
        QS_TRY(d->prec ? qs_pb_problem(c, d) : QS_FAIL(QS_ERR_OOM, "out of memory planning"));
        /* the problem's time is the synchronized iteration when d is the slowest: its target is T */
        d->prob.target_ms = T;
    }
    return QS_OK;
}

/* After a replay sim of the chosen plans: lower the caps of the types whose workers exceed
 * theirs by the excess, and (a miss beyond the tolerance) the slowest type's target by the
 * miss; whether the plans met T and every cap. */
static qs_status qs_pb_tighten(qs_pb_ctx *c, const qs_sim_result *sim, double T, double tol, double *miss, bool *met) {
    const qs_planb_request *rq = c->rq;
    *miss = sim->iteration_ms - T;
    *met = *miss <= tol * T;
    for (int r = 0; r < rq->n_workers; r++) { /* memory caps, as replayed */
        double mb = sim->workers[r].memory_bytes;
        if (!(rq->workers[r].memory_cap > 0 && mb > (double)rq->workers[r].memory_cap)) continue;
        *met = false;
        for (int k = 0; k < c->n_slow; k++)
            if (strcmp(rq->workers[r].type, c->t[k].name) == 0 && c->t[k].prob.mem_cap != QS_ALLOC_NO_CAP) {
                c->t[k].prob.mem_cap -= (int64_t)ceil(mb - (double)rq->workers[r].memory_cap);
                c->t[k].rounds_tightened++;
            }
    }
    if (*met || !(*miss > tol * T)) return QS_OK;
    const char *slowest = rq->workers[sim->slowest].type;
    qs_status st = QS_OK;
    for (int k = 0; k < c->n_slow; k++)
        if (strcmp(slowest, c->t[k].name) == 0 || strcmp(slowest, c->fast) == 0) {
            c->t[k].prob.target_ms -= *miss;
            c->t[k].rounds_tightened++;
            if (!(c->t[k].prob.target_ms > 0))
                st = QS_FAIL(QS_ERR_INFEASIBLE, "the replay of the best plan for device type \"%s\" misses T = %.3f ms "
                             "by %.3f ms and the problem cannot be tightened further", c->t[k].name, T, *miss);
        }
    return st;
}

/* Solve, replay, tighten, up to max_rounds; the last replay into *sim, the rounds taken into
 * *rounds, each worker's precisions into prec. */
static qs_status qs_pb_rounds(qs_pb_ctx *c, double T, double tol, qs_precision **prec, qs_sim_result *sim, int *rounds) {
    const qs_planb_request *rq = c->rq;
    const int max_rounds = rq->max_rounds > 0 ? rq->max_rounds : 4;
    bool met = false;
    double miss = 0;
    qs_status st = QS_OK;
    while (st == QS_OK && !met && *rounds < max_rounds) {
        (*rounds)++;
        for (int k = 0; k < c->n_slow && st == QS_OK; k++) st = qs_pb_solve(c, &c->t[k], T);
        for (int r = 0; r < rq->n_workers && st == QS_OK; r++) {
            prec[r] = NULL;
            for (int k = 0; k < c->n_slow; k++)
                if (strcmp(rq->workers[r].type, c->t[k].name) == 0) prec[r] = c->t[k].prec;
        }
        qs_sim_result_free(sim);
        if (st == QS_OK) st = qs_pb_replay(c, NULL, prec, false, sim);
        if (st == QS_OK) st = qs_pb_tighten(c, sim, T, tol, &miss, &met);
    }
    if (st == QS_OK && !met && !rq->best_effort)
        st = QS_FAIL(QS_ERR_INFEASIBLE, "after %d rounds the replayed plan still misses T = %.3f ms by %.3f ms (%.1f%%; "
                     "tolerance %.1f%%): the best achievable synchronized time is about %.3f ms; give --target-ms",
                     *rounds, T, miss, 100 * miss / T, 100 * tol, T + miss);
    return st;
}

static void qs_pb_ctx_free(qs_pb_ctx *c) {
    for (int k = 0; k < c->n_slow; k++) {
        qs_alloc_problem_free(&c->t[k].prob);
        qs_alloc_result_free(&c->t[k].greedy);
        qs_alloc_result_free(&c->t[k].exact);
        free(c->t[k].prec);
    }
    free(c->layer);
    free(c->first_consumer);
}

qs_status qs_plan_build(const qs_planb_request *rq, cJSON **plan_doc) {
    *plan_doc = NULL;
    qs_pb_ctx *c = calloc(1, sizeof *c);
    qs_precision **prec = calloc((size_t)rq->n_workers + 1, sizeof *prec);
    if (!c || !prec) {
        free(c);
        free(prec);
        return QS_FAIL(QS_ERR_OOM, "out of memory planning");
    }
    c->rq = rq;
    const double tol = rq->tolerance >= 0 ? rq->tolerance : 0.005;
    double T = NAN, T_fast = NAN;
    int rounds = 0;
    qs_sim_result sim, cal;
    memset(&sim, 0, sizeof sim);
    memset(&cal, 0, sizeof cal);
    qs_status st = qs_pb_check(c);
    if (st == QS_OK) st = qs_pb_layers(c);
    if (st == QS_OK) st = qs_pb_fastest(c);
    if (st == QS_OK) st = qs_pb_target(c, tol, &T, &T_fast);
    if (st == QS_OK) st = qs_pb_problems(c, T);
    if (st == QS_OK) st = qs_pb_rounds(c, T, tol, prec, &sim, &rounds);
    if (st == QS_OK) st = qs_pb_replay(c, NULL, prec, true, &cal);
    if (st == QS_OK) *plan_doc = qs_pb_document(c, T, &sim, &cal, rounds);
    if (st == QS_OK && !*plan_doc) st = QS_FAIL(QS_ERR_OOM, "out of memory writing the plan");
    qs_sim_result_free(&sim);
    qs_sim_result_free(&cal);
    qs_pb_ctx_free(c);
    free(c);
    free(prec);
    return st;
}
