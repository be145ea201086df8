/* src/plan/alloc_ilp.c — the exact allocator: the 0/1 ILP of allocator.h solved with GLPK's
 * branch and cut (glp_intopt), and the exact fastest plan within a memory cap. The only file
 * that includes glpk.h.
 *
 * The ILP: binary x[l][k] with Σ_k x[l][k] = 1; per edge continuous y[e][k1][k2] ≥ 0 with the
 * marginal constraints Σ_k2 y[e][k1][k2] = x[src][k1] and Σ_k1 y[e][k1][k2] = x[dst][k2]
 * (integral x makes y the indicator of the pair; tighter than y ≥ x1 + x2 − 1);
 * Σ t·x + Σ c·y ≤ T − fixed_ms; Σ m·x ≤ cap − fixed_mem; minimize Σ ω·x. Edges whose cast
 * matrix is all zero get no y. With warm_start (default) the greedy runs first and the row
 * Σ ω·x ≤ its Σω (+1e-9 relative) prunes the search like an incumbent; it never removes an
 * optimum. The returned plan is re-evaluated exactly; if GLPK's tolerance let it exceed T or the
 * cap, that row is tightened and the ILP solved again. The LP relaxation is weak where casts
 * matter (it mixes two cast-free plans to meet T on average), so the search needs many more
 * nodes than the same problem without casts (docs/BENCHMARKS.md). */
#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/alloc_internal.h"

typedef enum { QS_ILP_MIN_OMEGA, QS_ILP_MIN_TIME } qs_ilp_objective;

/* One ILP run's outcome. */
typedef enum { QS_ILP_OPTIMAL, QS_ILP_FEASIBLE, QS_ILP_INFEASIBLE, QS_ILP_NO_PLAN } qs_ilp_outcome;

typedef struct qs_ilp_info {
    double bound;   /* best bound seen on the objective (branch and bound) */
    int64_t nodes;  /* subproblems created */
} qs_ilp_info;

/* GLPK's branch-and-cut callback: record the best bound and the tree size as it goes. */
static void qs_ilp_callback(glp_tree *tree, void *info) {
    qs_ilp_info *in = info;
    int best = glp_ios_best_node(tree);
    if (best) in->bound = glp_ios_node_bound(tree, best);
    int a, n, t;
    glp_ios_tree_size(tree, &a, &n, &t);
    in->nodes = t;
}

/* Whether any cast cost of edge e is nonzero (edges with none need no pair variables). */
static bool qs_ilp_edge_used(const qs_alloc_problem *p, int32_t e) {
    for (int32_t i = 0; i < p->n_opts * p->n_opts; i++)
        if (p->cast_ms[(int64_t)e * p->n_opts * p->n_opts + i] != 0.0) return true;
    return false;
}

/* The constraint matrix in GLPK's 1-based triplet form, and the rows added so far. */
typedef struct qs_ilp_mat {
    int *ia, *ja;
    double *ar;
    int nz, row;
} qs_ilp_mat;

/* Append the nonzero (r, c) = v. */
static void qs_ilp_nz(qs_ilp_mat *a, int r, int c, double v) {
    ++a->nz;
    a->ia[a->nz] = r, a->ja[a->nz] = c, a->ar[a->nz] = v;
}

/* The columns of lp: x[l][k] (binary; fixed to 0 where not allowed; cost ω or own time by obj)
 * then the pair variables (≥ 0) of the used edges, n_cols in all. */
static void qs_ilp_columns(glp_prob *lp, const qs_alloc_problem *p, qs_ilp_objective obj, int n_cols) {
    const int n_x = p->n_layers * p->n_opts;
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, n_cols);
    for (int32_t l = 0; l < p->n_layers; l++)
        for (int32_t k = 0; k < p->n_opts; k++) {
            int col = (int)qs_alloc_ix(p, l, k) + 1;
            glp_set_col_kind(lp, col, GLP_BV);
            if (!qs_alloc_allowed(p, l, k)) glp_set_col_bnds(lp, col, GLP_FX, 0.0, 0.0);
            double v = obj == QS_ILP_MIN_OMEGA ? p->omega[col - 1] : p->time_ms[col - 1];
            glp_set_obj_coef(lp, col, v);
        }
    for (int c = n_x + 1; c <= n_cols; c++) glp_set_col_bnds(lp, c, GLP_LO, 0.0, 0.0);
}

/* Rows Σ_k x[l][k] = 1, then per used edge (first pair column ycol[e]) the marginals of its
 * pair variables (Σ_k2 y[k1][k2] = x[src][k1], Σ_k1 y[k1][k2] = x[dst][k2]); for the time
 * objective the pair variables cost their casts. */
static void qs_ilp_structure_rows(glp_prob *lp, const qs_alloc_problem *p, qs_ilp_objective obj, const int32_t *ycol,
                                  qs_ilp_mat *a) {
    const int32_t L = p->n_layers, K = p->n_opts;
    glp_add_rows(lp, L);
    for (int32_t l = 0; l < L; l++) {
        glp_set_row_bnds(lp, ++a->row, GLP_FX, 1.0, 1.0);
        for (int32_t k = 0; k < K; k++) qs_ilp_nz(a, a->row, (int)qs_alloc_ix(p, l, k) + 1, 1.0);
    }
    for (int32_t e = 0; e < p->n_edges; e++) {
        if (!ycol[e]) continue;
        glp_add_rows(lp, 2 * K);
        for (int32_t k1 = 0; k1 < K; k1++) {
            glp_set_row_bnds(lp, ++a->row, GLP_FX, 0.0, 0.0);
            for (int32_t k2 = 0; k2 < K; k2++) qs_ilp_nz(a, a->row, ycol[e] + k1 * K + k2, 1.0);
            qs_ilp_nz(a, a->row, (int)qs_alloc_ix(p, p->edges[e].src, k1) + 1, -1.0);
        }
        for (int32_t k2 = 0; k2 < K; k2++) {
            glp_set_row_bnds(lp, ++a->row, GLP_FX, 0.0, 0.0);
            for (int32_t k1 = 0; k1 < K; k1++) qs_ilp_nz(a, a->row, ycol[e] + k1 * K + k2, 1.0);
            qs_ilp_nz(a, a->row, (int)qs_alloc_ix(p, p->edges[e].dst, k2) + 1, -1.0);
        }
        if (obj == QS_ILP_MIN_TIME)
            for (int32_t i = 0; i < K * K; i++) glp_set_obj_coef(lp, ycol[e] + i, p->cast_ms[(int64_t)e * K * K + i]);
    }
}

/* The budget rows, each skipped when its right-hand side is INFINITY: time (own times and
 * casts) ≤ rhs_t and memory ≤ rhs_m, both scaled to a right-hand side near 1, and for the Σω
 * objective the cutoff Σω ≤ rhs_w. */
static void qs_ilp_budget_rows(glp_prob *lp, const qs_alloc_problem *p, qs_ilp_objective obj, const int32_t *ycol,
                               double rhs_t, double rhs_m, double rhs_w, qs_ilp_mat *a) {
    const int32_t K = p->n_opts, n_x = p->n_layers * p->n_opts;
    if (isfinite(rhs_t)) {
        double s = fabs(rhs_t) > 1e-300 ? 1.0 / fabs(rhs_t) : 1.0;
        glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, ++a->row, GLP_UP, 0.0, rhs_t * s);
        for (int i = 0; i < n_x; i++)
            if (p->time_ms[i] != 0.0) qs_ilp_nz(a, a->row, i + 1, p->time_ms[i] * s);
        for (int32_t e = 0; e < p->n_edges; e++)
            if (ycol[e])
                for (int32_t i = 0; i < K * K; i++)
                    if (p->cast_ms[(int64_t)e * K * K + i] != 0.0)
                        qs_ilp_nz(a, a->row, ycol[e] + i, p->cast_ms[(int64_t)e * K * K + i] * s);
    }
    if (isfinite(rhs_m)) {
        double s = fabs(rhs_m) > 1e-300 ? 1.0 / fabs(rhs_m) : 1.0;
        glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, ++a->row, GLP_UP, 0.0, rhs_m * s);
        for (int i = 0; i < n_x; i++)
            if (p->mem[i] != 0) qs_ilp_nz(a, a->row, i + 1, (double)p->mem[i] * s);
    }
    /* Σω ≤ a known plan's Σω (the greedy's): prunes like an incumbent, never cuts the optimum */
    if (isfinite(rhs_w) && obj == QS_ILP_MIN_OMEGA) {
        glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, ++a->row, GLP_UP, 0.0, rhs_w);
        for (int i = 0; i < n_x; i++)
            if (p->omega[i] != 0.0) qs_ilp_nz(a, a->row, i + 1, p->omega[i]);
    }
}

/* Branch and cut on the loaded lp (time_limit_ms ≤ 0: none): the outcome, the plan into
 * choice[L] when there is one, the bound and tree size into *info. */
static qs_status qs_ilp_run(glp_prob *lp, const qs_alloc_problem *p, double time_limit_ms, int32_t *choice,
                            qs_ilp_outcome *outcome, qs_ilp_info *info) {
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_ON; /* GLPK's default cuts and heuristics (the others: docs/BENCHMARKS.md, allocator) */
    parm.tm_lim = time_limit_ms > 0 ? (time_limit_ms < INT_MAX ? (int)time_limit_ms : INT_MAX) : INT_MAX;
    parm.cb_func = qs_ilp_callback;
    parm.cb_info = info;
    info->bound = NAN;
    info->nodes = 0;
    int term = glp_term_out(GLP_OFF);
    int ret = glp_intopt(lp, &parm);
    glp_term_out(term);
    int mst = glp_mip_status(lp);
    if (ret == GLP_ENOPFS || (ret == 0 && mst == GLP_NOFEAS)) *outcome = QS_ILP_INFEASIBLE;
    else if ((ret == 0 || ret == GLP_ETMLIM || ret == GLP_EMIPGAP) && (mst == GLP_OPT || mst == GLP_FEAS))
        *outcome = ret == 0 && mst == GLP_OPT ? QS_ILP_OPTIMAL : QS_ILP_FEASIBLE;
    else if (ret == GLP_ETMLIM) *outcome = QS_ILP_NO_PLAN;
    else return QS_FAIL(QS_ERR_BACKEND, "exact allocator: GLPK's glp_intopt returned %d (MIP status %d)", ret, mst);
    if (*outcome == QS_ILP_OPTIMAL || *outcome == QS_ILP_FEASIBLE) {
        for (int32_t l = 0; l < p->n_layers; l++) {
            int32_t best = 0;
            for (int32_t k = 1; k < p->n_opts; k++)
                if (glp_mip_col_val(lp, (int)qs_alloc_ix(p, l, k) + 1) > glp_mip_col_val(lp, (int)qs_alloc_ix(p, l, best) + 1))
                    best = k;
            choice[l] = best;
        }
        if (*outcome == QS_ILP_OPTIMAL) info->bound = glp_mip_obj_val(lp);
    }
    return QS_OK;
}

/* Solve the ILP of p for `obj` with time row Σ ≤ rhs_t (skipped when rhs_t is INFINITY), memory
 * row Σ m·x ≤ rhs_m and, for the Σω objective, the cutoff row Σ ω·x ≤ rhs_w (each skipped when
 * INFINITY) into choice[L]; time_limit_ms ≤ 0: none. */
static qs_status qs_ilp_solve(const qs_alloc_problem *p, qs_ilp_objective obj, double rhs_t, double rhs_m, double rhs_w,
                              double time_limit_ms, int32_t *choice, qs_ilp_outcome *outcome, qs_ilp_info *info) {
    const int32_t K = p->n_opts, E = p->n_edges;
    int32_t n_used = 0;
    int32_t *ycol = malloc(sizeof *ycol * (size_t)(E ? E : 1)); /* first y column of edge e, or 0 */
    if (!ycol) return QS_FAIL(QS_ERR_OOM, "exact allocator: out of memory");
    for (int32_t e = 0; e < E; e++) ycol[e] = qs_ilp_edge_used(p, e) ? ++n_used : 0;
    const int n_x = p->n_layers * K, n_cols = n_x + n_used * K * K;
    for (int32_t e = 0, c = n_x + 1; e < E; e++)
        if (ycol[e]) ycol[e] = c, c += K * K;
    /* nonzeros: assignment L·K, marginals 2·K·K + 2·K per edge, time, memory and cutoff rows */
    const size_t nz_cap = (size_t)n_x * 4 + (size_t)n_used * (size_t)(3 * K * K + 2 * K) + 1;
    qs_ilp_mat a = {.ia = malloc(sizeof *a.ia * (nz_cap + 1)), .ja = malloc(sizeof *a.ja * (nz_cap + 1)),
                    .ar = malloc(sizeof *a.ar * (nz_cap + 1))};
    glp_prob *lp = glp_create_prob();
    qs_status st = QS_OK;
    if (!a.ia || !a.ja || !a.ar || !lp) st = QS_FAIL(QS_ERR_OOM, "exact allocator: out of memory for the ILP");
    if (st == QS_OK) {
        qs_ilp_columns(lp, p, obj, n_cols);
        qs_ilp_structure_rows(lp, p, obj, ycol, &a);
        qs_ilp_budget_rows(lp, p, obj, ycol, rhs_t, rhs_m, rhs_w, &a);
        glp_load_matrix(lp, a.nz, a.ia, a.ja, a.ar);
        st = qs_ilp_run(lp, p, time_limit_ms, choice, outcome, info);
    }
    if (lp) glp_delete_prob(lp);
    free(a.ia), free(a.ja), free(a.ar), free(ycol);
    return st;
}

/* Solve with the problem's own target and cap (the time row only with time_row) and the cutoff
 * rhs_w, re-evaluating the plan exactly and tightening a row GLPK's tolerance let it exceed (up
 * to 4 times). */
static qs_status qs_ilp_solve_checked(const qs_alloc_problem *p, qs_ilp_objective obj, bool time_row, double rhs_w,
                                      double time_limit_ms, int32_t *choice, qs_ilp_outcome *outcome,
                                      qs_ilp_info *info) {
    int64_t max_m = p->fixed_mem;
    for (int32_t l = 0; l < p->n_layers; l++) {
        int64_t mx = 0;
        for (int32_t k = 0; k < p->n_opts; k++)
            if (qs_alloc_allowed(p, l, k) && p->mem[qs_alloc_ix(p, l, k)] > mx) mx = p->mem[qs_alloc_ix(p, l, k)];
        max_m += mx;
    }
    double rhs_t = time_row && isfinite(p->target_ms) ? p->target_ms - p->fixed_ms : INFINITY;
    double rhs_m = max_m <= p->mem_cap ? INFINITY : (double)(p->mem_cap - p->fixed_mem);
    const double t0 = qs_alloc_now_ms();
    for (int attempt = 0; attempt < 5; attempt++) {
        double left = time_limit_ms > 0 ? time_limit_ms - (qs_alloc_now_ms() - t0) : 0.0;
        if (time_limit_ms > 0 && left < 1.0) left = 1.0;
        QS_TRY(qs_ilp_solve(p, obj, rhs_t, rhs_m, rhs_w, left, choice, outcome, info));
        if (*outcome != QS_ILP_OPTIMAL && *outcome != QS_ILP_FEASIBLE) return QS_OK;
        double t;
        int64_t m;
        QS_TRY(qs_alloc_evaluate(p, choice, &t, &m, NULL));
        bool t_ok = !isfinite(rhs_t) || t <= p->target_ms + qs_alloc_time_tol(p->target_ms);
        bool m_ok = m <= p->mem_cap;
        if (t_ok && m_ok) return QS_OK;
        if (!t_ok) rhs_t -= (t - p->target_ms) + qs_alloc_time_tol(p->target_ms);
        if (!m_ok) rhs_m -= (double)(m - p->mem_cap) + 1.0;
    }
    return QS_FAIL(QS_ERR_BACKEND, "exact allocator: GLPK's plans kept exceeding the constraints by its tolerance");
}

/* ------------------------------------------------------------------ public */

qs_status qs_alloc_fastest(const qs_alloc_problem *p, const qs_alloc_exact_opts *o, qs_alloc_result *res) {
    qs_alloc_result_init(res);
    QS_TRY(qs_alloc_problem_check(p));
    const double t_start = qs_alloc_now_ms();
    char lb[96], b1[64], b2[64];
    const char *who = qs_alloc_label(p, lb, sizeof lb);
    int32_t *c = malloc(sizeof *c * (size_t)p->n_layers);
    qs_alloc_adj adj = {0};
    qs_status st = QS_OK;
    if (!c) return QS_FAIL(QS_ERR_OOM, "%s: out of memory", who);
    if ((st = qs_alloc_adj_build(p, &adj)) != QS_OK) goto done;
    res->min_mem = qs_alloc_min_mem(p);
    if (res->min_mem > p->mem_cap) {
        qs_alloc_min_mem_plan(p, c);
        if ((st = qs_alloc_result_set(p, c, res)) != QS_OK) goto done;
        st = QS_FAIL(QS_ERR_INFEASIBLE, "%s: no plan fits the memory cap of %s: the smallest plan needs %s", who,
                     qs_alloc_bytes(p->mem_cap, b1, sizeof b1), qs_alloc_bytes(res->min_mem, b2, sizeof b2));
        goto done;
    }
    bool exact;
    if ((st = qs_alloc_dp_min(p, &adj, p->time_ms, c, &exact)) != QS_OK) goto done;
    int64_t m;
    (void)qs_alloc_evaluate(p, c, NULL, &m, NULL);
    if (exact && m <= p->mem_cap) {
        res->optimal = true;
    } else {
        qs_ilp_outcome out;
        qs_ilp_info info;
        double lim = o && o->time_limit_s > 0 ? o->time_limit_s * 1e3 : 0.0;
        if ((st = qs_ilp_solve_checked(p, QS_ILP_MIN_TIME, false, INFINITY, lim, c, &out, &info)) != QS_OK) goto done;
        if (out == QS_ILP_INFEASIBLE) {
            st = QS_FAIL(QS_ERR_INTERNAL, "%s: GLPK found no plan within the cap though the least-memory plan fits", who);
            goto done;
        }
        if (out == QS_ILP_NO_PLAN) {
            st = QS_FAIL(QS_ERR_TIMEOUT, "%s: the exact solver's time limit of %g s passed before it found a plan", who,
                         o ? o->time_limit_s : 0.0);
            goto done;
        }
        res->optimal = out == QS_ILP_OPTIMAL;
        res->bound = info.bound;
        res->evaluations = info.nodes;
    }
    if ((st = qs_alloc_result_set(p, c, res)) != QS_OK) goto done;
    res->best_time_ms = res->time_ms;
    res->time_exact = res->optimal;
done:
    res->solve_ms = qs_alloc_now_ms() - t_start;
    qs_alloc_adj_free(&adj);
    free(c);
    return st;
}

qs_alloc_exact_opts qs_alloc_exact_defaults(void) {
    qs_alloc_exact_opts o = {.time_limit_s = 0.0, .warm_start = true};
    return o;
}

qs_status qs_alloc_exact(const qs_alloc_problem *p, const qs_alloc_exact_opts *o, qs_alloc_result *res) {
    qs_alloc_result_init(res);
    QS_TRY(qs_alloc_problem_check(p));
    const qs_alloc_exact_opts opts = o ? *o : qs_alloc_exact_defaults();
    const double t_start = qs_alloc_now_ms();
    char lb[96];
    const char *who = qs_alloc_label(p, lb, sizeof lb);
    const double lim = opts.time_limit_s > 0 ? opts.time_limit_s * 1e3 : 0.0;
    int32_t *c = malloc(sizeof *c * (size_t)p->n_layers);
    if (!c) return QS_FAIL(QS_ERR_OOM, "%s: out of memory", who);
    qs_status st = QS_OK;
    qs_ilp_outcome out = QS_ILP_NO_PLAN;
    qs_ilp_info info = {NAN, 0};
    qs_alloc_result warm;
    qs_alloc_result_init(&warm);
    double rhs_w = INFINITY;
    if (opts.warm_start) { /* the greedy's Σω bounds the search; its errors only mean no bound */
        qs_status gs = qs_alloc_greedy(p, NULL, &warm);
        if (gs == QS_OK) rhs_w = warm.omega + 1e-9 * (warm.omega > 1.0 ? warm.omega : 1.0);
        else if (gs == QS_ERR_OOM) {
            st = gs;
            goto done;
        }
        qs_error_clear();
    }
    res->min_mem = qs_alloc_min_mem(p);
    if (res->min_mem <= p->mem_cap &&
        (st = qs_ilp_solve_checked(p, QS_ILP_MIN_OMEGA, true, rhs_w, lim, c, &out, &info)) != QS_OK)
        goto done;
    if (res->min_mem > p->mem_cap || out == QS_ILP_INFEASIBLE) {
        /* say why: the fastest plan within the cap (or that nothing fits the cap) */
        qs_alloc_result fast;
        qs_alloc_exact_opts fo = {.time_limit_s = opts.time_limit_s};
        qs_status fs = qs_alloc_fastest(p, &fo, &fast);
        if (fs == QS_OK || fs == QS_ERR_INFEASIBLE) {
            qs_alloc_result_free(res);
            *res = fast;
            res->optimal = false;
            res->feasible = false;
            res->bound = NAN;
        }
        if (fs == QS_OK) {
            char b1[64];
            st = QS_FAIL(QS_ERR_INFEASIBLE,
                         "%s: no plan meets the target of %.4g ms within the memory cap of %s: the fastest plan within "
                         "the cap takes %.4g ms (%.1f%% over; fixed part %.4g ms)%s",
                         who, p->target_ms, qs_alloc_bytes(p->mem_cap, b1, sizeof b1), res->time_ms,
                         100.0 * (res->time_ms / p->target_ms - 1.0), p->fixed_ms,
                         res->time_exact ? "" : " (not proven fastest: the time limit passed)");
        } else st = fs; /* the fastest-plan message: nothing fits the cap, or an error */
        goto done;
    }
    if (out == QS_ILP_NO_PLAN) {
        if (!isfinite(rhs_w)) {
            st = QS_FAIL(QS_ERR_TIMEOUT, "%s: the exact solver's time limit of %g s passed before it found a plan", who,
                         opts.time_limit_s);
            goto done;
        }
        memcpy(c, warm.choice, sizeof *c * (size_t)p->n_layers); /* the greedy's plan, not proven */
    }
    if ((st = qs_alloc_result_set(p, c, res)) != QS_OK) goto done;
    res->optimal = out == QS_ILP_OPTIMAL;
    res->bound = res->optimal ? res->omega : info.bound;
    res->evaluations = info.nodes;
done:
    res->solve_ms = qs_alloc_now_ms() - t_start;
    qs_alloc_result_free(&warm);
    free(c);
    return st;
}
