/* src/plan/alloc_greedy.c — the corrected QSync greedy precision recovery
 * (qs_alloc_greedy; the problem and the contract in allocator.h).
 *
 * The rules (QSync's "precision recovery", reference qsync-method.md §5.2, corrected):
 *  1. Start from the fastest plan within the memory cap. The least-time plan (casts
 *     included) is computed exactly by dynamic programming along the layer order (its state
 *     is the options of the layers that still have edges to later layers: exact whenever
 *     K^width ≤ QS_ALLOC_DP_MAX_STATES, which chains and residual networks meet; otherwise
 *     coordinate descent, not proven least). If it misses T: infeasible, the best achievable
 *     time is reported. If it exceeds the cap: Lagrangian plans argmin time + λ·mem (the
 *     same DP, bisection on λ) and a repair (single-layer moves saving the most memory per
 *     ms, or the most ms per byte) look for a plan meeting both; the fastest one found starts.
 *     When none meets both and nothing proves that no plan can, the start is the exact
 *     fastest plan within the cap from the ILP (qs_alloc_fastest): finding any plan under two
 *     constraints is NP-hard, and the greedy must never call a feasible problem infeasible.
 *     res->exact_start says when (how often: docs/BENCHMARKS.md).
 *  2. Repeat: among ALL single-layer moves (layer l from its option to ANY allowed option of
 *     lower ω — several precision steps at once, or a step that is not adjacent), evaluate
 *     each exactly (its own time and memory change plus the cast changes on every incident
 *     edge given the neighbours' current options), drop those that would break T or the
 *     cap, and apply the one with the best ratio
 *         Δω / (Δt⁺ / slack_t + Δm⁺ / slack_m)
 *     (slack = what is left of T and of the cap; with memory ample this is Δω/Δt, QSync's
 *     order). Moves that cost neither time nor memory (Δt ≤ 0, Δm ≤ 0: e.g. a move that
 *     removes a cast) come first, largest Δω first. After applying, the plan is re-evaluated
 *     from scratch and the move is rolled back if it broke a constraint (floating-point
 *     drift; the exact deltas make this a safety net). Stop when no move is feasible and
 *     lowers Σω.
 *  3. Enumeration of the first move: the recovery of rule 2 is run again from the start with
 *     each feasible single move that lowers Σω forced first (L·(K−1) runs), and the best
 *     result is kept — the classic repair of the ratio greedy's knapsack failure, where the
 *     slack goes to many small moves of high ratio and one large move worth more (a big
 *     layer's int8 → bf16) no longer fits.
 *  4. Local search on that plan, until neither finds anything: (a) pair moves — two layers'
 *     options changed together (casts between them counted for the pair) that keep the plan
 *     feasible and lower Σω the most, each followed by rule 2; (b) ejection moves — force one
 *     layer to an option of lower ω that breaks T or the cap, make the plan feasible again
 *     with the other layers (repeatedly the move that removes the most violation per unit of
 *     Σω it adds), run rule 2, and keep the result if Σω went down.
 *  All are on by default; each can be switched off (qs_alloc_greedy_opts) to measure it (what
 *  each adds: docs/BENCHMARKS.md, "Allocator on generated problems").
 * How it differs from QSync's code and why:
 *   - gain order: QSync's heap key is ω(i) − ω(i−1) (wrapping at i = 0), i.e. negative gains
 *     popped in ascending order; here the gain is ω(current) − ω(new), largest ratio first.
 *   - a ratio to the time (and memory) it costs, not the raw gain: a cheap recovery of a
 *     sensitive layer beats an expensive one of equal gain.
 *   - several steps per layer and any target option: QSync moves each layer at most one
 *     step; a step up can be dominated (CPU bf16 slower than fp32) and must be jumpable.
 *   - rejected moves leave no trace (QSync's rejected trial wrote its bit into the shared DAG)
 *     and are re-evaluated after every change (QSync never retries a rejected layer, though
 *     a later move may change the casts that blocked it).
 *   - start from the least-time plan within the cap instead of uniform FP16, so the slack
 *     is the largest possible and infeasibility is detected (and reported) up front.
 *   - cast costs are counted exactly per move on every incident edge (QSync re-costs its
 *     neighbours too, but on a DAG polluted by rejected trials).
 *   - memory is a constraint of every move (QSync's shipped script disables it).
 *   - rules 3 and 4 are not in QSync: a pure ratio greedy is far from the optimum whenever one
 *     large recovery is worth more than the many small ones that used up the slack.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/alloc_internal.h"

/* The plan being improved, with its exact time, memory and Σω kept up to date. */
typedef struct qs_greedy {
    const qs_alloc_problem *p;
    qs_alloc_adj adj;
    int32_t *c;
    double time, omega;
    int64_t mem;
    double tol_t;      /* time tolerance of qs_alloc_meets */
    double tol_w;      /* a Σω change smaller than this is no improvement */
    int64_t evals, moves;
} qs_greedy;

/* Set g's plan to choice and evaluate it. */
static void qs_greedy_load(qs_greedy *g, const int32_t *choice) {
    if (g->c != choice) memcpy(g->c, choice, sizeof *choice * (size_t)g->p->n_layers);
    (void)qs_alloc_evaluate(g->p, g->c, &g->time, &g->mem, &g->omega);
}

/* Whether a plan of this time and memory meets the target and the cap. */
static bool qs_greedy_fits(const qs_greedy *g, double t, int64_t m) {
    return t <= g->p->target_ms + g->tol_t && m <= g->p->mem_cap;
}

/* Apply layer l → option k, then re-evaluate from scratch. If the plan was feasible before and
 * the fresh evaluation says the move broke it (floating-point drift between the incremental
 * and the full sum), roll it back and return false. */
static bool qs_greedy_apply(qs_greedy *g, int32_t l, int32_t k) {
    int32_t k0 = g->c[l];
    bool was = qs_greedy_fits(g, g->time, g->mem);
    double t0 = g->time, w0 = g->omega;
    int64_t m0 = g->mem;
    g->c[l] = k;
    (void)qs_alloc_evaluate(g->p, g->c, &g->time, &g->mem, &g->omega);
    if (was && !qs_greedy_fits(g, g->time, g->mem)) {
        g->c[l] = k0;
        g->time = t0, g->mem = m0, g->omega = w0;
        return false;
    }
    g->moves++;
    return true;
}

/* ------------------------------------------------------------------ rule 1: a start */

/* Which resource a repair lowers. */
typedef enum { QS_REPAIR_MEM, QS_REPAIR_TIME } qs_repair;

/* Lower memory (or time) by single-layer moves until it meets the cap (or T), keeping the
 * other resource within its limit. A move that lowers both comes first (the largest saving);
 * otherwise the largest saving per unit of the other resource spent. True when reached. */
static bool qs_greedy_repair(qs_greedy *g, qs_repair what) {
    const qs_alloc_problem *p = g->p;
    for (;;) {
        if (what == QS_REPAIR_MEM ? g->mem <= p->mem_cap : g->time <= p->target_ms + g->tol_t) return true;
        int32_t bl = -1, bk = -1, bcls = -1;
        double bscore = 0.0;
        for (int32_t l = 0; l < p->n_layers; l++)
            for (int32_t k = 0; k < p->n_opts; k++) {
                if (k == g->c[l] || !qs_alloc_allowed(p, l, k)) continue;
                double dt = qs_alloc_move_dtime(p, &g->adj, g->c, l, k);
                int64_t dm = qs_alloc_move_dmem(p, g->c, l, k);
                g->evals++;
                double save, spend;
                if (what == QS_REPAIR_MEM) {
                    if (dm >= 0 || g->time + dt > p->target_ms + g->tol_t) continue;
                    save = (double)-dm, spend = dt;
                } else {
                    if (dt >= -1e-15 || g->mem + dm > p->mem_cap) continue;
                    save = -dt, spend = (double)dm;
                }
                int cls = spend <= 0.0;
                double score = cls ? save : save / spend;
                if (cls > bcls || (cls == bcls && score > bscore)) bl = l, bk = k, bcls = cls, bscore = score;
            }
        if (bl < 0 || !qs_greedy_apply(g, bl, bk)) return false;
    }
}

/* Least-time plan of unary = t + lambda·m (the least-time DP). */
static qs_status qs_greedy_lagrange(const qs_alloc_problem *p, const qs_alloc_adj *a, double lambda, double *unary,
                                    int32_t *out) {
    for (int64_t i = 0; i < (int64_t)p->n_layers * p->n_opts; i++) unary[i] = p->time_ms[i] + lambda * (double)p->mem[i];
    bool exact;
    return qs_alloc_dp_min(p, a, unary, out, &exact);
}

/* Candidate starts within the cap when the least-time plan ct exceeds it: the Lagrangian
 * plans around the cap (bisection on λ) and repairs from both sides; *out = the fastest one
 * that meets the cap (and T if any does). Returns QS_OK; *found = false if none fits the cap. */
static qs_status qs_greedy_start_in_cap(qs_greedy *g, const int32_t *ct, int32_t *out, bool *found) {
    const qs_alloc_problem *p = g->p;
    const int32_t L = p->n_layers;
    const size_t bytes = sizeof(int32_t) * (size_t)L;
    double *unary = malloc(sizeof *unary * (size_t)L * (size_t)p->n_opts);
    int32_t *lo = malloc(bytes), *hi = malloc(bytes), *mid = malloc(bytes);
    qs_status st = QS_OK;
    if (!unary || !lo || !hi || !mid) {
        st = QS_FAIL(QS_ERR_OOM, "allocator greedy: out of memory");
        goto done;
    }
    /* λ_hi: one byte outweighs every time difference, so the plan has the least memory */
    double spread = 1.0;
    for (int32_t l = 0; l < L; l++) {
        double mn = INFINITY, mx = 0.0;
        for (int32_t k = 0; k < p->n_opts; k++) {
            double t = p->time_ms[qs_alloc_ix(p, l, k)];
            mn = t < mn ? t : mn, mx = t > mx ? t : mx;
        }
        spread += mx - mn;
    }
    for (int32_t e = 0; e < p->n_edges; e++)
        for (int32_t i = 0; i < p->n_opts * p->n_opts; i++) spread += p->cast_ms[(int64_t)e * p->n_opts * p->n_opts + i];
    double log_hi = log(2.0 * spread), log_lo = log_hi - 60.0;
    memcpy(lo, ct, bytes);
    if ((st = qs_greedy_lagrange(p, &g->adj, exp(log_hi), unary, hi)) != QS_OK) goto done;
    int64_t m;
    (void)qs_alloc_evaluate(p, hi, NULL, &m, NULL);
    if (m > p->mem_cap) qs_alloc_min_mem_plan(p, hi); /* coordinate descent missed it */
    for (int it = 0; it < 60; it++) {
        double lm = 0.5 * (log_lo + log_hi);
        if ((st = qs_greedy_lagrange(p, &g->adj, exp(lm), unary, mid)) != QS_OK) goto done;
        (void)qs_alloc_evaluate(p, mid, NULL, &m, NULL);
        if (m <= p->mem_cap) memcpy(hi, mid, bytes), log_hi = lm;
        else memcpy(lo, mid, bytes), log_lo = lm;
    }
    /* candidates: hi itself, memory repairs from lo and from ct, a time repair from hi */
    const int32_t *from[4] = {hi, lo, ct, hi};
    const int repair[4] = {-1, QS_REPAIR_MEM, QS_REPAIR_MEM, QS_REPAIR_TIME};
    bool have = false, have_feasible = false;
    double best_t = INFINITY;
    for (int i = 0; i < 4; i++) {
        qs_greedy_load(g, from[i]);
        if (repair[i] >= 0) qs_greedy_repair(g, (qs_repair)repair[i]);
        if (g->mem > p->mem_cap) continue;
        bool feas = qs_greedy_fits(g, g->time, g->mem);
        if ((feas && !have_feasible) || (feas == have_feasible && g->time < best_t)) {
            memcpy(out, g->c, bytes);
            best_t = g->time;
            have = true;
            have_feasible = feas;
        }
    }
    *found = have;
done:
    free(unary), free(lo), free(hi), free(mid);
    return st;
}

/* ------------------------------------------------------------------ rule 2: recovery */

/* Apply the best feasible single-layer move lowering Σω (rule 2 above) until none
 * is left (or, never seen, a move the fresh evaluation rejects). g's plan must be feasible. */
static void qs_greedy_recover(qs_greedy *g) {
    const qs_alloc_problem *p = g->p;
    int64_t max_mem = p->fixed_mem; /* a cap above every plan's memory never binds: no weight */
    for (int32_t l = 0; l < p->n_layers; l++) {
        int64_t mx = 0;
        for (int32_t k = 0; k < p->n_opts; k++)
            if (qs_alloc_allowed(p, l, k) && p->mem[qs_alloc_ix(p, l, k)] > mx) mx = p->mem[qs_alloc_ix(p, l, k)];
        max_mem += mx;
    }
    for (;;) {
        int32_t bl = -1, bk = -1, bcls = -1;
        double bscore = 0.0, bdw = 0.0;
        double slack_t = p->target_ms + g->tol_t - g->time;
        double slack_m = max_mem <= p->mem_cap ? INFINITY : (double)(p->mem_cap - g->mem);
        for (int32_t l = 0; l < p->n_layers; l++) {
            const double w0 = p->omega[qs_alloc_ix(p, l, g->c[l])];
            for (int32_t k = 0; k < p->n_opts; k++) {
                if (k == g->c[l] || !qs_alloc_allowed(p, l, k)) continue;
                double dw = w0 - p->omega[qs_alloc_ix(p, l, k)];
                if (dw <= g->tol_w) continue;
                double dt = qs_alloc_move_dtime(p, &g->adj, g->c, l, k);
                int64_t dm = qs_alloc_move_dmem(p, g->c, l, k);
                g->evals++;
                if (!qs_greedy_fits(g, g->time + dt, g->mem + dm)) continue; /* rejected: nothing to undo */
                double cost = (dt > 0.0 ? dt / slack_t : 0.0) + (dm > 0 ? (double)dm / slack_m : 0.0);
                int cls = cost <= 0.0;
                double score = cls ? dw : dw / cost;
                if (cls > bcls || (cls == bcls && (score > bscore || (score == bscore && dw > bdw))))
                    bl = l, bk = k, bcls = cls, bscore = score, bdw = dw;
            }
        }
        if (bl < 0 || !qs_greedy_apply(g, bl, bk)) return;
    }
}

/* ------------------------------------------------------------------ rule 4a: pair moves */

/* One feasible move of two layers together lowering Σω the most (the casts between them
 * counted for the pair); applies it and returns true, or false when there is none. */
static bool qs_greedy_pair_step(qs_greedy *g, double *dt1, int64_t *dm1) {
    const qs_alloc_problem *p = g->p;
    const int32_t L = p->n_layers, K = p->n_opts;
    for (int32_t l = 0; l < L; l++)
        for (int32_t k = 0; k < K; k++) {
            int64_t i = qs_alloc_ix(p, l, k);
            dt1[i] = k == g->c[l] || !qs_alloc_allowed(p, l, k) ? NAN : qs_alloc_move_dtime(p, &g->adj, g->c, l, k);
            dm1[i] = qs_alloc_move_dmem(p, g->c, l, k);
        }
    const double room_t = p->target_ms + g->tol_t - g->time;
    const int64_t room_m = p->mem_cap - g->mem;
    int32_t ba = -1, bka = -1, bb = -1, bkb = -1;
    double bdw = g->tol_w;
    for (int32_t a = 0; a < L; a++) {
        const double wa0 = p->omega[qs_alloc_ix(p, a, g->c[a])];
        for (int32_t ka = 0; ka < K; ka++) {
            int64_t ia = qs_alloc_ix(p, a, ka);
            if (isnan(dt1[ia])) continue;
            double dwa = wa0 - p->omega[ia];
            for (int32_t b = a + 1; b < L; b++) {
                const double wb0 = p->omega[qs_alloc_ix(p, b, g->c[b])];
                for (int32_t kb = 0; kb < K; kb++) {
                    int64_t ib = qs_alloc_ix(p, b, kb);
                    if (isnan(dt1[ib])) continue;
                    double dw = dwa + wb0 - p->omega[ib];
                    if (dw <= bdw) continue;
                    int64_t dm = dm1[ia] + dm1[ib];
                    if (dm > room_m) continue;
                    double dt = dt1[ia] + dt1[ib];
                    /* casts on edges between a and b were counted with the other's old option */
                    for (int32_t q = g->adj.start[a]; q < g->adj.start[a + 1]; q++) {
                        int32_t e = g->adj.ids[q];
                        qs_alloc_edge ed = p->edges[e];
                        if (ed.src == a && ed.dst == b)
                            dt += qs_alloc_cast(p, e, ka, kb) - qs_alloc_cast(p, e, ka, g->c[b]) -
                                  qs_alloc_cast(p, e, g->c[a], kb) + qs_alloc_cast(p, e, g->c[a], g->c[b]);
                        else if (ed.src == b && ed.dst == a)
                            dt += qs_alloc_cast(p, e, kb, ka) - qs_alloc_cast(p, e, g->c[b], ka) -
                                  qs_alloc_cast(p, e, kb, g->c[a]) + qs_alloc_cast(p, e, g->c[b], g->c[a]);
                    }
                    g->evals++;
                    if (dt > room_t) continue;
                    ba = a, bka = ka, bb = b, bkb = kb, bdw = dw;
                }
            }
        }
    }
    if (ba < 0) return false;
    /* apply both, re-evaluate from scratch, roll both back if drift broke a constraint */
    int32_t old_a = g->c[ba], old_b = g->c[bb];
    g->c[ba] = bka, g->c[bb] = bkb;
    qs_greedy_load(g, g->c);
    if (!qs_greedy_fits(g, g->time, g->mem)) {
        g->c[ba] = old_a, g->c[bb] = old_b;
        qs_greedy_load(g, g->c);
        return false;
    }
    g->moves += 2;
    return true;
}

/* ------------------------------------------------------------------ rule 4b: ejection */

/* How far a plan of time t and memory m is over T and the cap, relative to them. */
static double qs_greedy_violation(const qs_greedy *g, double t, int64_t m) {
    const qs_alloc_problem *p = g->p;
    double v = 0.0;
    if (t > p->target_ms + g->tol_t) v += (t - p->target_ms) / p->target_ms;
    if (m > p->mem_cap) v += (double)(m - p->mem_cap) / (double)p->mem_cap;
    return v;
}

/* Make an infeasible plan feasible again without touching layer `keep`: repeatedly apply the
 * move that removes the most violation per unit of Σω it adds (moves adding none first). True
 * when feasible. */
static bool qs_greedy_eject_repair(qs_greedy *g, int32_t keep) {
    const qs_alloc_problem *p = g->p;
    for (int guard = 0; guard < p->n_layers * p->n_opts + 1; guard++) {
        double v0 = qs_greedy_violation(g, g->time, g->mem);
        if (v0 <= 0.0) return true;
        int32_t bl = -1, bk = -1, bcls = -1;
        double bscore = 0.0;
        for (int32_t l = 0; l < p->n_layers; l++) {
            if (l == keep) continue;
            const double w0 = p->omega[qs_alloc_ix(p, l, g->c[l])];
            for (int32_t k = 0; k < p->n_opts; k++) {
                if (k == g->c[l] || !qs_alloc_allowed(p, l, k)) continue;
                double dt = qs_alloc_move_dtime(p, &g->adj, g->c, l, k);
                int64_t dm = qs_alloc_move_dmem(p, g->c, l, k);
                g->evals++;
                double r = v0 - qs_greedy_violation(g, g->time + dt, g->mem + dm);
                if (r <= 0.0) continue;
                double dw = p->omega[qs_alloc_ix(p, l, k)] - w0;
                int cls = dw <= 0.0;
                double score = cls ? r : r / dw;
                if (cls > bcls || (cls == bcls && score > bscore)) bl = l, bk = k, bcls = cls, bscore = score;
            }
        }
        if (bl < 0) return false;
        g->c[bl] = bk;
        qs_greedy_load(g, g->c);
        g->moves++;
    }
    return qs_greedy_violation(g, g->time, g->mem) <= 0.0;
}

/* One pass of ejection moves from the plan in g: for each move of one layer to an option of
 * lower ω that breaks T or the cap, force it, repair the plan with the other layers
 * (qs_greedy_eject_repair), recover, and keep the result when it lowers Σω. The best plan
 * found ends up in g; returns whether it improved. scratch, base: [L]. */
static bool qs_greedy_eject_pass(qs_greedy *g, int32_t *base, int32_t *scratch) {
    const qs_alloc_problem *p = g->p;
    const size_t bytes = sizeof *base * (size_t)p->n_layers;
    memcpy(base, g->c, bytes);
    double best_w = g->omega;
    bool improved = false;
    for (int32_t l = 0; l < p->n_layers; l++)
        for (int32_t k = 0; k < p->n_opts; k++) {
            if (k == base[l] || !qs_alloc_allowed(p, l, k)) continue;
            if (p->omega[qs_alloc_ix(p, l, k)] >= p->omega[qs_alloc_ix(p, l, base[l])] - g->tol_w) continue;
            qs_greedy_load(g, base);
            g->c[l] = k;
            qs_greedy_load(g, g->c);
            if (qs_greedy_fits(g, g->time, g->mem)) continue; /* a plain move: recovery's job */
            if (!qs_greedy_eject_repair(g, l)) continue;
            qs_greedy_recover(g);
            if (g->omega < best_w - g->tol_w && qs_greedy_fits(g, g->time, g->mem)) {
                memcpy(scratch, g->c, bytes);
                best_w = g->omega;
                improved = true;
            }
        }
    qs_greedy_load(g, improved ? scratch : base);
    return improved;
}

/* ------------------------------------------------------------------ the solver */

qs_alloc_greedy_opts qs_alloc_greedy_defaults(void) {
    qs_alloc_greedy_opts o = {.enumerate_first = true, .local_search = true, .eject = true};
    return o;
}

/* Rules 2–4 from the feasible plan `start`, the best plan into best[L]: recovery from start;
 * with o->enumerate_first the recovery after each feasible single move from start that lowers
 * Σω (rule 3); then on the best, pair moves (o->local_search) and ejection passes (o->eject)
 * until neither improves. dt1, dm1: scratch [L*K]. QS_ERR_OOM. */
static qs_status qs_greedy_search(qs_greedy *g, const int32_t *start, const qs_alloc_greedy_opts *o, int32_t *best,
                                  double *dt1, int64_t *dm1) {
    const qs_alloc_problem *p = g->p;
    const size_t bytes = sizeof *best * (size_t)p->n_layers;
    qs_greedy_load(g, start);
    qs_greedy_recover(g);
    memcpy(best, g->c, bytes);
    double best_w = g->omega;
    if (o->enumerate_first)
        for (int32_t l = 0; l < p->n_layers; l++)
            for (int32_t k = 0; k < p->n_opts; k++) {
                if (k == start[l] || !qs_alloc_allowed(p, l, k)) continue;
                if (p->omega[qs_alloc_ix(p, l, k)] >= p->omega[qs_alloc_ix(p, l, start[l])] - g->tol_w) continue;
                qs_greedy_load(g, start);
                double dt = qs_alloc_move_dtime(p, &g->adj, g->c, l, k);
                int64_t dm = qs_alloc_move_dmem(p, g->c, l, k);
                g->evals++;
                if (!qs_greedy_fits(g, g->time + dt, g->mem + dm) || !qs_greedy_apply(g, l, k)) continue;
                qs_greedy_recover(g);
                if (g->omega < best_w - g->tol_w) {
                    memcpy(best, g->c, bytes);
                    best_w = g->omega;
                }
            }
    qs_greedy_load(g, best);
    if (o->local_search)
        while (qs_greedy_pair_step(g, dt1, dm1)) qs_greedy_recover(g);
    if (o->eject) {
        int32_t *base = malloc(bytes), *scratch = malloc(bytes);
        if (!base || !scratch) {
            free(base), free(scratch);
            return QS_FAIL(QS_ERR_OOM, "allocator greedy: out of memory");
        }
        for (int pass = 0; pass < 4 * p->n_layers && qs_greedy_eject_pass(g, base, scratch); pass++)
            if (o->local_search)
                while (qs_greedy_pair_step(g, dt1, dm1)) qs_greedy_recover(g);
        free(base), free(scratch);
    }
    memcpy(best, g->c, bytes);
    return QS_OK;
}

/* What rule 1 learnt of the least-time plan (ignoring the memory cap). */
typedef struct qs_greedy_fastest {
    double t_fast;  /* its time */
    int64_t m_fast; /* its memory */
    bool exact;     /* the DP proved it least (not coordinate descent) */
} qs_greedy_fastest;

/* No heuristic start meets T within the cap and nothing proves there is none: ask the ILP
 * for the fastest plan within the cap (finding any plan under two constraints is NP-hard);
 * when it has one, it becomes start (loaded into g) and res's best time. */
static qs_status qs_greedy_exact_start(qs_greedy *g, int32_t *start, qs_alloc_result *res) {
    qs_alloc_result fast;
    qs_status fs = qs_alloc_fastest(g->p, NULL, &fast);
    if (fs == QS_OK) {
        memcpy(start, fast.choice, sizeof *start * (size_t)g->p->n_layers);
        qs_greedy_load(g, start);
        res->best_time_ms = fast.time_ms;
        res->time_exact = fast.optimal;
        res->exact_start = true;
    }
    qs_alloc_result_free(&fast);
    return fs == QS_ERR_INFEASIBLE ? QS_OK : fs;
}

/* Rule 1: the least-time plan ct (facts into *f), the least memory into res->min_mem, and a
 * start within the cap loaded into g and copied to start[L]: ct when it fits, else one
 * repaired into the cap (or the least-memory plan), else the ILP's fastest plan within the
 * cap when the start misses T (qs_greedy_exact_start); res's best time is the start's.
 * QS_ERR_INFEASIBLE (res set to the least-memory plan) when no plan fits the cap. */
static qs_status qs_greedy_start(qs_greedy *g, int32_t *ct, int32_t *start, qs_alloc_result *res,
                                 qs_greedy_fastest *f, const char *who) {
    const qs_alloc_problem *p = g->p;
    char b1[64], b2[64];
    QS_TRY(qs_alloc_dp_min(p, &g->adj, p->time_ms, ct, &f->exact));
    (void)qs_alloc_evaluate(p, ct, &f->t_fast, &f->m_fast, NULL);
    res->min_mem = qs_alloc_min_mem(p);
    if (res->min_mem > p->mem_cap) {
        qs_alloc_min_mem_plan(p, start);
        QS_TRY(qs_alloc_result_set(p, start, res));
        return QS_FAIL(QS_ERR_INFEASIBLE, "%s: no plan fits the memory cap of %s: the smallest plan needs %s", who,
                       qs_alloc_bytes(p->mem_cap, b1, sizeof b1), qs_alloc_bytes(res->min_mem, b2, sizeof b2));
    }
    bool found = true, fastest_exact = f->exact;
    if (f->m_fast <= p->mem_cap) memcpy(start, ct, sizeof *ct * (size_t)p->n_layers);
    else {
        fastest_exact = false;
        QS_TRY(qs_greedy_start_in_cap(g, ct, start, &found));
        if (!found) qs_alloc_min_mem_plan(p, start);
    }
    qs_greedy_load(g, start);
    res->best_time_ms = g->time;
    res->time_exact = fastest_exact;
    if (!qs_greedy_fits(g, g->time, g->mem) && !(f->exact && f->t_fast > p->target_ms + g->tol_t))
        QS_TRY(qs_greedy_exact_start(g, start, res));
    return QS_OK;
}

/* The start in g misses T: res set to it, and QS_ERR_INFEASIBLE saying whether the fastest
 * plan of all or only the fastest within the cap misses it. */
static qs_status qs_greedy_no_plan(const qs_greedy *g, qs_alloc_result *res, const qs_greedy_fastest *f,
                                   const char *who) {
    const qs_alloc_problem *p = g->p;
    char b1[64], b2[64];
    QS_TRY(qs_alloc_result_set(p, g->c, res));
    if (f->t_fast > p->target_ms + g->tol_t)
        return QS_FAIL(QS_ERR_INFEASIBLE,
                       "%s: no plan meets the target of %.4g ms: the fastest plan takes %.4g ms%s%s (fixed part %.4g "
                       "ms)",
                       who, p->target_ms, f->t_fast,
                       f->exact ? "" : " (coordinate descent; the graph is too wide to prove it)",
                       f->m_fast <= p->mem_cap ? "" : " ignoring the memory cap", p->fixed_ms);
    return QS_FAIL(QS_ERR_INFEASIBLE,
                   "%s: no plan meets the target of %.4g ms within the memory cap of %s: the fastest plan within "
                   "the cap takes %.4g ms%s (the fastest of all, %.4g ms, needs %s)",
                   who, p->target_ms, qs_alloc_bytes(p->mem_cap, b1, sizeof b1), res->best_time_ms,
                   res->time_exact ? "" : " (not proven fastest)", f->t_fast, qs_alloc_bytes(f->m_fast, b2, sizeof b2));
}

qs_status qs_alloc_greedy(const qs_alloc_problem *p, const qs_alloc_greedy_opts *o, qs_alloc_result *res) {
    qs_alloc_result_init(res);
    QS_TRY(qs_alloc_problem_check(p));
    qs_alloc_greedy_opts opts = o ? *o : qs_alloc_greedy_defaults();
    const double t_start = qs_alloc_now_ms();
    const int32_t L = p->n_layers, K = p->n_opts;
    char lb[96];
    const char *who = qs_alloc_label(p, lb, sizeof lb);
    qs_greedy g = {.p = p, .tol_t = qs_alloc_time_tol(p->target_ms)};
    double wmax = 0.0;
    for (int64_t i = 0; i < (int64_t)L * K; i++) wmax = p->omega[i] > wmax ? p->omega[i] : wmax;
    g.tol_w = 1e-12 * (wmax * L > 1.0 ? wmax * L : 1.0);
    int32_t *ct = malloc(sizeof *ct * (size_t)L), *start = malloc(sizeof *start * (size_t)L);
    int32_t *best = malloc(sizeof *best * (size_t)L);
    g.c = malloc(sizeof *g.c * (size_t)L);
    double *dt1 = malloc(sizeof *dt1 * (size_t)L * (size_t)K);
    int64_t *dm1 = malloc(sizeof *dm1 * (size_t)L * (size_t)K);
    qs_greedy_fastest f = {0};
    qs_status st = QS_OK;
    if (!ct || !start || !best || !g.c || !dt1 || !dm1)
        st = QS_FAIL(QS_ERR_OOM, "%s: out of memory in the greedy allocator", who);
    if (st == QS_OK) st = qs_alloc_adj_build(p, &g.adj);
    if (st == QS_OK) st = qs_greedy_start(&g, ct, start, res, &f, who); /* rule 1 */
    if (st == QS_OK && !qs_greedy_fits(&g, g.time, g.mem)) st = qs_greedy_no_plan(&g, res, &f, who);
    if (st == QS_OK) st = qs_greedy_search(&g, start, &opts, best, dt1, dm1); /* rules 2–4 */
    if (st == QS_OK) st = qs_alloc_result_set(p, best, res);
    if (st == QS_OK && !res->feasible)
        st = QS_FAIL(QS_ERR_INTERNAL, "%s: the greedy's plan broke a constraint (a bug)", who);
    res->moves = g.moves;
    res->evaluations = g.evals;
    res->solve_ms = qs_alloc_now_ms() - t_start;
    qs_alloc_adj_free(&g.adj);
    free(ct), free(start), free(best), free(g.c), free(dt1), free(dm1);
    return st;
}
