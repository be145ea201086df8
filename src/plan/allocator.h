/* src/plan/allocator.h — defines: the precision allocation problem of ONE device type, its
 * two solvers (QSync's greedy precision recovery, corrected; an exact ILP through GLPK), the
 * evaluation of a plan, and a documented generator of random problems for testing them.
 *
 * ---- The problem (one device type; the device types of a cluster are independent given T)
 * L layers (the selectable GEMM-like layers, in the model's topological order), each with K
 * precision options; option 0 is the highest precision (e.g. fp32 < bf16 < int8 for k = 0,
 * 1, 2). A plan chooses one allowed option k_l per layer. For a plan:
 *     time(plan)  = fixed_ms  + Σ_l t[l][k_l] + Σ_e c[e][k_src(e)][k_dst(e)]
 *     mem(plan)   = fixed_mem + Σ_l m[l][k_l]
 *     Σω(plan)    = Σ_l ω[l][k_l]
 * t: the layer's own compute time at that precision (ms); m: the bytes it holds at that
 * precision (saved activations, low-precision weight copies); ω: the indicator (≥ 0,
 * normally 0 for option 0); c[e]: the time added on the edge e = (src → dst) between a
 * producer and a consumer for each pair of precisions (casts; normally 0 on the diagonal;
 * a full matrix, so a shared cast of two consumers of one input is expressible too). The
 * edges make the time non-additive. fixed_ms / fixed_mem: everything the plan does not
 * change (other ops, communication wait, parameters, optimizer state).
 * Find a plan with time ≤ target_ms and mem ≤ mem_cap minimizing Σω.
 *
 * Feasibility is decided in one place (qs_alloc_meets): time ≤ T + 1e-9·max(1, T) (the
 * tolerance absorbs floating-point summation order), mem ≤ cap exactly (int64 bytes).
 *
 * ---- Greedy (qs_alloc_greedy): QSync's "precision recovery" (reference qsync-method.md §5.2),
 * corrected; it never calls a feasible problem infeasible. Rules (alloc_greedy.c gives each in
 * full, and how they differ from QSync's code):
 *  1. start from the fastest plan within the memory cap (exact least-time DP, else Lagrangian
 *     plans and a repair, else the ILP's fastest plan: res->exact_start); if it misses T the
 *     problem is infeasible and the best achievable time is reported;
 *  2. recovery: repeatedly apply the feasible single-layer move (to ANY allowed option of lower
 *     ω) with the best ratio Δω / (Δt⁺ / slack_t + Δm⁺ / slack_m), free moves first;
 *  3. enumeration of the first move (qs_alloc_greedy_opts.enumerate_first);
 *  4. local search: (a) pair moves (local_search), (b) ejection moves (eject).
 * All are on by default. Their quality on the generator below: docs/BENCHMARKS.md, "Allocator
 * on generated problems".
 *
 * ---- Exact (qs_alloc_exact): the same problem as a 0/1 ILP (formulation in alloc_ilp.c) solved
 * by GLPK's branch and cut; with warm_start (default) the greedy runs first and its Σω bounds the
 * search without removing an optimum. The returned plan is re-evaluated exactly and meets T and
 * the cap (the ILP is solved again, tightened, when GLPK's tolerance let it exceed them).
 *
 * ---- Errors: QS_ERR_INVALID_ARG for bad input (no layers, K out of range, negative or
 * non-finite costs, edges naming missing layers or a layer twice, a layer with no allowed
 * option, sums overflowing int64); QS_ERR_INFEASIBLE when no plan meets T and the cap (the
 * message gives the best achievable time within the cap, or the least memory; the result
 * still holds that best-effort plan); QS_ERR_TIMEOUT when the exact solver's time limit
 * passed before it found any plan; QS_ERR_BACKEND when GLPK fails; QS_ERR_OOM. */
#ifndef QSYNC_PLAN_ALLOCATOR_H
#define QSYNC_PLAN_ALLOCATOR_H

#include <stdbool.h>
#include <stdint.h>

#include "qsync/status.h"

#define QS_ALLOC_MAX_OPTS 8
#define QS_ALLOC_NO_CAP INT64_MAX          /* mem_cap: no memory constraint */
#define QS_ALLOC_DP_MAX_STATES (1 << 16)   /* least-time DP: largest K^width solved exactly */

/* A producer → consumer pair of layers whose precisions interact through a cast. */
typedef struct qs_alloc_edge {
    int32_t src, dst;
} qs_alloc_edge;

/* One device type's problem. Arrays are row-major: [l*K + k], cast_ms[(e*K + k1)*K + k2]. */
typedef struct qs_alloc_problem {
    char name[64];          /* for messages, e.g. the device type; "" is fine */
    int32_t n_layers;       /* L ≥ 1 */
    int32_t n_opts;         /* K, 1..QS_ALLOC_MAX_OPTS */
    int32_t n_edges;        /* E ≥ 0 */
    double *time_ms;        /* [L*K] t ≥ 0 */
    int64_t *mem;           /* [L*K] m ≥ 0, bytes */
    double *omega;          /* [L*K] ω ≥ 0 */
    uint8_t *allowed;       /* [L*K] nonzero = option usable for the layer; NULL = all */
    qs_alloc_edge *edges;   /* [E] */
    double *cast_ms;        /* [E*K*K] c ≥ 0 */
    double fixed_ms;        /* ≥ 0 */
    int64_t fixed_mem;      /* ≥ 0 */
    double target_ms;       /* T > 0; INFINITY = no time constraint */
    int64_t mem_cap;        /* > 0; QS_ALLOC_NO_CAP = none */
    bool owned;             /* arrays allocated by qs_alloc_problem_alloc */
} qs_alloc_problem;

/* A solver's answer. choice is owned (qs_alloc_result_free). */
typedef struct qs_alloc_result {
    int32_t n_layers;
    int32_t *choice;        /* [L] option per layer; NULL when no plan at all */
    bool feasible;          /* choice meets T and the cap */
    bool optimal;           /* exact solver: proven optimal */
    double omega;           /* Σω of choice */
    double time_ms;         /* predicted time of choice */
    int64_t mem;            /* predicted memory of choice */
    double bound;           /* exact: best lower bound on Σω (= omega when optimal); else NAN */
    double gap;             /* greedy: (Σω − optimum) / optimum after qs_alloc_set_gap; else NAN */
    double best_time_ms;    /* least time a plan within the cap achieves (NAN: not computed;
                               the greedy's is proven only when time_exact) */
    bool time_exact;        /* best_time_ms is proven least */
    bool exact_start;       /* greedy: its start came from the ILP (rule 1's last resort) */
    int64_t min_mem;        /* least memory any plan needs (exact, additive) */
    double solve_ms;        /* wall time of the solver call */
    int64_t moves;          /* greedy: moves applied (recovery + local search) */
    int64_t evaluations;    /* greedy: moves evaluated; exact: branch-and-bound nodes */
} qs_alloc_result;

typedef struct qs_alloc_exact_opts {
    double time_limit_s;    /* ≤ 0: none */
    bool warm_start;        /* run the greedy first; its Σω bounds the search (default true) */
} qs_alloc_exact_opts;

typedef struct qs_alloc_greedy_opts {
    bool enumerate_first;   /* rule 3 (default true) */
    bool local_search;      /* rule 4a, pair moves (default true) */
    bool eject;             /* rule 4b, ejection moves (default true) */
} qs_alloc_greedy_opts;

/* ---- problems and plans (allocator.c) ---- */

/* Allocate zeroed arrays for L layers, K options and E edges into *p (all options allowed
 * via a filled `allowed`, no fixed costs, T = INFINITY, no cap, owned = true). *p is zeroed
 * first; on failure nothing stays allocated. Sizes are checked (L ≥ 1, 1 ≤ K ≤ MAX, E ≥ 0). */
qs_status qs_alloc_problem_alloc(qs_alloc_problem *p, int32_t L, int32_t K, int32_t E);
/* Free the arrays of a problem made by qs_alloc_problem_alloc (others are left alone) and
 * zero it. NULL is fine. */
void qs_alloc_problem_free(qs_alloc_problem *p);
/* QS_OK when p satisfies the contract above; else QS_ERR_INVALID_ARG naming the first
 * offending field, layer, option or edge. */
qs_status qs_alloc_problem_check(const qs_alloc_problem *p);
/* Whether option k of layer l may be chosen. */
bool qs_alloc_allowed(const qs_alloc_problem *p, int32_t l, int32_t k);
/* Predicted time, memory and Σω of a plan (any output may be NULL). QS_ERR_INVALID_ARG for
 * an option out of range or not allowed. p must have passed qs_alloc_problem_check. */
qs_status qs_alloc_evaluate(const qs_alloc_problem *p, const int32_t *choice, double *time_ms, int64_t *mem,
                            double *omega);
/* Whether a plan of this time and memory meets p's target and cap (tolerance above). */
bool qs_alloc_meets(const qs_alloc_problem *p, double time_ms, int64_t mem);
/* Least memory any plan of p needs (fixed_mem + Σ_l min allowed m); p checked. */
int64_t qs_alloc_min_mem(const qs_alloc_problem *p);

/* Zero *r. */
void qs_alloc_result_init(qs_alloc_result *r);
/* Free r->choice and zero *r. NULL is fine. */
void qs_alloc_result_free(qs_alloc_result *r);
/* Set greedy->gap = (greedy Σω − exact Σω) / exact Σω when exact is a proven optimum and
 * greedy is feasible (0 when both Σω are 0 within 1e-12, INFINITY when only the optimum is
 * 0); NAN otherwise. Returns the gap. */
double qs_alloc_set_gap(qs_alloc_result *greedy, const qs_alloc_result *exact);

/* ---- solvers ---- */

/* Defaults: local search on. */
qs_alloc_greedy_opts qs_alloc_greedy_defaults(void);
/* The greedy above (alloc_greedy.c). o may be NULL (defaults). On QS_OK *res holds a feasible
 * plan; on QS_ERR_INFEASIBLE it holds the best-effort plan (the fastest found within the cap,
 * else the least-memory plan) with feasible = false, best_time_ms and min_mem; the message
 * says whether infeasibility is proven. *res is reset first and must be freed either way. */
qs_status qs_alloc_greedy(const qs_alloc_problem *p, const qs_alloc_greedy_opts *o, qs_alloc_result *res);

/* Defaults: no time limit, warm start. */
qs_alloc_exact_opts qs_alloc_exact_defaults(void);
/* The exact ILP above (alloc_ilp.c). o may be NULL (defaults). QS_OK: optimal = true, or false
 * with a feasible plan when the time limit stopped the search (bound set when GLPK had one; the
 * greedy's plan when GLPK had found none better and warm_start is on). On
 * QS_ERR_INFEASIBLE (proven) *res holds the fastest plan within the cap (best_time_ms, also
 * proven) or, when even the least-memory plan exceeds the cap, that plan. *res is reset first
 * and must be freed either way. */
qs_status qs_alloc_exact(const qs_alloc_problem *p, const qs_alloc_exact_opts *o, qs_alloc_result *res);
/* The fastest plan of p within its memory cap, ignoring T (exact: the least-time DP when its
 * plan fits the cap, else the ILP with time as the objective). QS_ERR_INFEASIBLE when even the
 * least-memory plan exceeds the cap. res->best_time_ms = res->time_ms. */
qs_status qs_alloc_fastest(const qs_alloc_problem *p, const qs_alloc_exact_opts *o, qs_alloc_result *res);

/* ---- random problems (alloc_random.c) ----
 * One instance = one model and n device types; qs_alloc_random_problem(seed, d, ...) gives
 * device type d's problem of instance `seed`. What is drawn (all from Philox, keyed by seed):
 *  model (shared by the device types of an instance):
 *   - L uniform in [min_layers, max_layers]; chain edges l → l+1 for every l, and with
 *     probability p_skip a skip edge l → l+2 or l+3 (residual-like, makes the DP wider);
 *   - a layer size s_l = exp(N(0, 0.9)) (relative FLOPs); activation size a_l = s_l^0.7 ·
 *     exp(N(0, 0.4)); parameter size w_l = s_l · exp(N(0, 0.5));
 *   - ω[l][0] = 0 and ω[l][k] = ω[l][k−1] + s_l · σ_l · 10^(k−K+1) · exp(N(0, 0.3)), with the
 *     layer's sensitivity σ_l = exp(N(0, omega_noise)): a larger layer saves more time by
 *     going down AND loses more accuracy (the correlation), the noise decides which layers
 *     are the cheap ones;
 *   - m[l][k] = a_l · 4 MiB · max(1, 4 >> k) / 4 (activations saved at 4, 2, 1 bytes).
 *  device type d:
 *   - t[l][0] = s_l · exp(N(0, 0.25)); per step k a device-wide gain h_k ~ U(0.15, 0.4) and
 *     t[l][k] = b_k with b_k = b_{k−1} · (1 − clamp(h_k · exp(N(0, 0.35)), 0.02, 0.8));
 *     when K ≥ 3, with probability p_slow_mid option 1 is instead 0–10% SLOWER than option 0
 *     (oneDNN's bf16 on CPUs: kept for its memory saving only);
 *   - c[e][k1][k2] = 0 for k1 = k2, else cast_d · a_src · (1 when lowering precision, 0.6
 *     when raising it) · exp(N(0, 0.2)), cast_d ~ U(0.03, 0.12);
 *   - fixed_ms = U(0.2, 0.6) · Σ t[l][0]; fixed_mem = 4 · Σ w_l · 2 MiB;
 *   - mem_cap: with probability p_mem_binding cap = fixed + Mmin + v·(M0 − Mmin), v ~
 *     U(0.25, 0.9) (M0: all option 0, Mmin: least memory), so the all-option-0 plan does not
 *     fit; otherwise fixed + M0 · (1 + U(0, 0.5)) (never binding);
 *   - target: the device's time range is [τ_fast, τ_free] with τ_fast the least time within
 *     the cap (qs_alloc_fastest) and τ_free the time of a Σω-optimal plan under the cap alone
 *     (T no longer binds beyond it); a tightness u ~ U(0.02, 0.98) is drawn and every time of
 *     the device (t, c, fixed) is scaled so that target_ms = τ_fast + u·(τ_free − τ_fast)
 *     lands exactly at the requested target (the device types of an instance share T, as the
 *     slower workers of a cluster share the fast workers' iteration time).
 * Every generated problem is feasible. */
typedef struct qs_alloc_random_opts {
    int32_t min_layers, max_layers; /* default 4, 60 */
    int32_t n_opts;                 /* default 3 */
    double target_ms;               /* default 100 */
    double p_skip;                  /* default 0.1 */
    double p_slow_mid;              /* default 0.15 */
    double p_mem_binding;           /* default 0.3 */
    double omega_noise;             /* default 0.5 */
} qs_alloc_random_opts;

qs_alloc_random_opts qs_alloc_random_defaults(void);
/* Device type `type` (≥ 0) of instance `seed` into *out (owned; qs_alloc_problem_free).
 * o may be NULL (defaults). QS_ERR_INVALID_ARG for options out of range. Uses the exact
 * solver (GLPK) to place the target. */
qs_status qs_alloc_random_problem(uint64_t seed, int32_t type, const qs_alloc_random_opts *o, qs_alloc_problem *out);

#endif
