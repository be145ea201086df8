/* src/plan/alloc_internal.h — defines: helpers shared by the allocator's files (not public):
 * array indexing, the exact time change of a single-layer move, the least-cost DP over the
 * layer order, a monotonic clock and the description of a problem for messages. */
#ifndef QSYNC_PLAN_ALLOC_INTERNAL_H
#define QSYNC_PLAN_ALLOC_INTERNAL_H

#include "plan/allocator.h"

static inline int64_t qs_alloc_ix(const qs_alloc_problem *p, int32_t l, int32_t k) {
    return (int64_t)l * p->n_opts + k;
}

static inline double qs_alloc_cast(const qs_alloc_problem *p, int32_t e, int32_t k1, int32_t k2) {
    return p->cast_ms[((int64_t)e * p->n_opts + k1) * p->n_opts + k2];
}

/* Incident edges per layer (CSR): the edges of layer l are ids[start[l] .. start[l+1]). */
typedef struct qs_alloc_adj {
    int32_t *start; /* [L+1] */
    int32_t *ids;   /* [2E] edge indices */
} qs_alloc_adj;

/* Build / free the incidence lists of p (checked). */
qs_status qs_alloc_adj_build(const qs_alloc_problem *p, qs_alloc_adj *a);
void qs_alloc_adj_free(qs_alloc_adj *a);

/* Exact time change of moving layer l from choice[l] to option k, the other layers fixed
 * (the layer's own time and the casts on its incident edges). */
double qs_alloc_move_dtime(const qs_alloc_problem *p, const qs_alloc_adj *a, const int32_t *choice, int32_t l,
                           int32_t k);
/* Memory change of the same move. */
static inline int64_t qs_alloc_move_dmem(const qs_alloc_problem *p, const int32_t *choice, int32_t l, int32_t k) {
    return p->mem[qs_alloc_ix(p, l, k)] - p->mem[qs_alloc_ix(p, l, choice[l])];
}

/* The plan minimizing Σ_l unary[l*K + k_l] + Σ_e cast_ms[e][k_src][k_dst] over allowed
 * options, into choice[L]. Exact dynamic programming along the layer order whose state is
 * the options of the layers already placed that have edges to later ones, when every
 * state space is at most QS_ALLOC_DP_MAX_STATES (*exact = true); otherwise coordinate descent
 * from the per-layer minimum (*exact = false). unary must be finite. QS_ERR_OOM. */
qs_status qs_alloc_dp_min(const qs_alloc_problem *p, const qs_alloc_adj *a, const double *unary, int32_t *choice,
                          bool *exact);

/* The per-layer least-memory plan (ties: least own time) into choice[L]. */
void qs_alloc_min_mem_plan(const qs_alloc_problem *p, int32_t *choice);

/* Fill res's choice (allocating it), omega, time and memory from choice; feasible per
 * qs_alloc_meets. QS_ERR_OOM. */
qs_status qs_alloc_result_set(const qs_alloc_problem *p, const int32_t *choice, qs_alloc_result *res);

/* Milliseconds on a monotonic clock. */
double qs_alloc_now_ms(void);

/* "problem 'name'" or "problem" for messages. */
const char *qs_alloc_label(const qs_alloc_problem *p, char *buf, int cap);

/* Bytes as "123.4 MiB (129394278 B)" for messages. */
const char *qs_alloc_bytes(int64_t b, char *buf, int cap);

/* Time tolerance of qs_alloc_meets for target T. */
static inline double qs_alloc_time_tol(double T) {
    return 1e-9 * (T > 1.0 ? T : 1.0);
}

#endif
