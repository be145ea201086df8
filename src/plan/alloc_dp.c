/* src/plan/alloc_dp.c — the least-cost plan of per-layer costs plus pairwise cast costs
 * (qs_alloc_dp_min, alloc_internal.h): exact dynamic programming along the layer order, or
 * coordinate descent when the graph is too wide for it.
 *
 * The DP processes layers 0..L-1. After layer i, the "frontier" F_i is the set of layers
 * j ≤ i with an edge to some layer > i; a state is one option per frontier layer (K^|F_i|
 * states, mixed radix, digit n for the n-th frontier layer in ascending order), and its value
 * the least cost of layers 0..i (their own costs and every edge among them) given those
 * options. Adding layer i+1 with option k adds its cost and the casts of its edges to
 * frontier layers; layers leaving the frontier are minimized out. Each step stores, per new
 * state, the option of the added layer and the predecessor state, so the plan is read back
 * from the single empty final state. For a chain |F_i| = 1; a residual block keeps its
 * input's layer on the frontier (|F_i| = 2–3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/alloc_internal.h"

/* Layers i' ≤ i whose last neighbour is after i, ascending, into members; returns the count. */
static int32_t qs_dp_frontier(const int32_t *last, int32_t i, int32_t *members) {
    int32_t n = 0;
    for (int32_t j = 0; j <= i; j++)
        if (last[j] > i) members[n++] = j;
    return n;
}

/* K^w, or -1 when it exceeds QS_ALLOC_DP_MAX_STATES. */
static int64_t qs_dp_states(int32_t K, int32_t w) {
    int64_t s = 1;
    for (int32_t i = 0; i < w; i++) {
        s *= K;
        if (s > QS_ALLOC_DP_MAX_STATES) return -1;
    }
    return s;
}

/* Coordinate descent: start at each layer's cheapest option, then move single layers to
 * their best option given their neighbours until nothing improves. */
static void qs_dp_descent(const qs_alloc_problem *p, const qs_alloc_adj *a, const double *unary, int32_t *choice) {
    const int32_t L = p->n_layers, K = p->n_opts;
    for (int32_t l = 0; l < L; l++) {
        int32_t best = -1;
        for (int32_t k = 0; k < K; k++)
            if (qs_alloc_allowed(p, l, k) && (best < 0 || unary[qs_alloc_ix(p, l, k)] < unary[qs_alloc_ix(p, l, best)]))
                best = k;
        choice[l] = best;
    }
    for (int pass = 0; pass < 1000; pass++) {
        bool changed = false;
        for (int32_t l = 0; l < L; l++) {
            int32_t k0 = choice[l], best = k0;
            double best_d = 0.0;
            for (int32_t k = 0; k < K; k++) {
                if (k == k0 || !qs_alloc_allowed(p, l, k)) continue;
                /* unary may differ from time: recompute the move's change with it */
                double d = unary[qs_alloc_ix(p, l, k)] - unary[qs_alloc_ix(p, l, k0)] +
                           (qs_alloc_move_dtime(p, a, choice, l, k) -
                            (p->time_ms[qs_alloc_ix(p, l, k)] - p->time_ms[qs_alloc_ix(p, l, k0)]));
                if (d < best_d - 1e-12 * (fabs(best_d) + 1.0)) {
                    best_d = d;
                    best = k;
                }
            }
            if (best != k0) {
                choice[l] = best;
                changed = true;
            }
        }
        if (!changed) break;
    }
}

/* The DP's working arrays. */
typedef struct qs_dp {
    int32_t *last;         /* [L] each layer's latest neighbour (itself when none is later) */
    int32_t *pm, *nm;      /* [L] members of the previous and of the next frontier */
    int64_t *offset;       /* [L+1] first state of each step in prev and opt */
    int32_t *prev;         /* [total] per step and new state: the predecessor state */
    int8_t *opt;           /* [total] per step and new state: the added layer's option */
    double *cur, *nxt;     /* [widest] values of the current and of the next step's states */
    int32_t *src_pos;      /* [L] per next-frontier member: its digit in the previous state, -1: the added layer */
    int32_t *ed_pos, *ed_id; /* [2E+1] the added layer's edges to earlier frontier layers: digit, edge */
    int32_t *pos_of;       /* [L] layer → its digit in the previous state, or -1 */
    int32_t *digits;       /* [L] the previous state's digits */
    int64_t total, widest; /* states over all steps; the most in one step */
    int32_t np;            /* members of the previous frontier */
} qs_dp;

static void qs_dp_free(qs_dp *d) {
    free(d->prev), free(d->opt), free(d->cur), free(d->nxt), free(d->src_pos), free(d->ed_pos), free(d->ed_id);
    free(d->pos_of), free(d->digits), free(d->last), free(d->pm), free(d->nm), free(d->offset);
}

/* d->last from p's edges. */
static void qs_dp_last(const qs_alloc_problem *p, qs_dp *d) {
    for (int32_t l = 0; l < p->n_layers; l++) d->last[l] = l;
    for (int32_t e = 0; e < p->n_edges; e++) {
        int32_t s = p->edges[e].src, t = p->edges[e].dst;
        if (t > d->last[s]) d->last[s] = t;
        if (s > d->last[t]) d->last[t] = s;
    }
}

/* The size of every step's state space into d->offset, total and widest; false when one
 * exceeds QS_ALLOC_DP_MAX_STATES (then the DP does not run). */
static bool qs_dp_layout(const qs_alloc_problem *p, qs_dp *d) {
    const int32_t L = p->n_layers;
    d->total = 0;
    d->widest = 1;
    for (int32_t i = 0; i < L; i++) {
        int64_t n = qs_dp_states(p->n_opts, qs_dp_frontier(d->last, i, d->nm));
        if (n < 0) return false;
        d->offset[i] = d->total;
        d->total += n;
        if (n > d->widest) d->widest = n;
    }
    d->offset[L] = d->total;
    return true;
}

/* Allocate the per-state arrays of d (after qs_dp_layout). */
static qs_status qs_dp_alloc_states(const qs_alloc_problem *p, qs_dp *d) {
    const size_t L = (size_t)p->n_layers, E2 = (size_t)(2 * (int64_t)p->n_edges + 1);
    d->prev = malloc(sizeof *d->prev * (size_t)d->total);
    d->opt = malloc((size_t)d->total);
    d->cur = malloc(sizeof *d->cur * (size_t)d->widest), d->nxt = malloc(sizeof *d->nxt * (size_t)d->widest);
    d->src_pos = malloc(sizeof *d->src_pos * L);
    d->ed_pos = malloc(sizeof *d->ed_pos * E2);
    d->ed_id = malloc(sizeof *d->ed_id * E2);
    d->pos_of = malloc(sizeof *d->pos_of * L), d->digits = malloc(sizeof *d->digits * L);
    if (!d->prev || !d->opt || !d->cur || !d->nxt || !d->src_pos || !d->ed_pos || !d->ed_id || !d->pos_of ||
        !d->digits)
        return QS_FAIL(QS_ERR_OOM, "allocator: out of memory for the least-time DP (%lld states)", (long long)d->total);
    return QS_OK;
}

/* Map the previous frontier's digits, the next frontier's sources and layer i's edges to
 * earlier frontier layers (into d->src_pos, ed_pos, ed_id); returns that edge count. */
static int32_t qs_dp_wire(const qs_alloc_problem *p, const qs_alloc_adj *a, qs_dp *d, int32_t i, int32_t nn) {
    for (int32_t j = 0; j < p->n_layers; j++) d->pos_of[j] = -1;
    for (int32_t j = 0; j < d->np; j++) d->pos_of[d->pm[j]] = j;
    for (int32_t n = 0; n < nn; n++) d->src_pos[n] = d->nm[n] == i ? -1 : d->pos_of[d->nm[n]];
    int32_t ne = 0; /* edges between layer i and frontier layers before it */
    for (int32_t q = a->start[i]; q < a->start[i + 1]; q++) {
        int32_t e = a->ids[q];
        int32_t other = p->edges[e].src == i ? p->edges[e].dst : p->edges[e].src;
        if (other < i) {
            d->ed_pos[ne] = d->pos_of[other];
            d->ed_id[ne++] = e;
        }
    }
    return ne;
}

/* Add layer i: from every state of the previous step (n_prev of them, values in d->cur), each
 * allowed option of i; the least value per state of the next frontier into d->nxt, with its
 * predecessor and option. Then the next step becomes the current one; returns its size. */
static int64_t qs_dp_step(const qs_alloc_problem *p, const qs_alloc_adj *a, const double *unary, qs_dp *d,
                          int32_t i, int64_t n_prev) {
    const int32_t K = p->n_opts;
    int32_t nn = qs_dp_frontier(d->last, i, d->nm);
    int64_t n_next = d->offset[i + 1] - d->offset[i];
    int32_t ne = qs_dp_wire(p, a, d, i, nn);
    for (int64_t s = 0; s < n_next; s++) d->nxt[s] = INFINITY;
    int32_t *prv = d->prev + d->offset[i];
    int8_t *op = d->opt + d->offset[i];
    for (int64_t s = 0; s < n_prev; s++) {
        if (d->cur[s] == INFINITY) continue;
        int64_t r = s;
        for (int32_t j = 0; j < d->np; j++) {
            d->digits[j] = (int32_t)(r % K);
            r /= K;
        }
        for (int32_t k = 0; k < K; k++) {
            if (!qs_alloc_allowed(p, i, k)) continue;
            double v = d->cur[s] + unary[qs_alloc_ix(p, i, k)];
            for (int32_t q = 0; q < ne; q++) {
                int32_t e = d->ed_id[q], ko = d->digits[d->ed_pos[q]];
                v += p->edges[e].src == i ? qs_alloc_cast(p, e, k, ko) : qs_alloc_cast(p, e, ko, k);
            }
            int64_t ns = 0;
            for (int32_t n = nn - 1; n >= 0; n--) ns = ns * K + (d->src_pos[n] < 0 ? k : d->digits[d->src_pos[n]]);
            if (v < d->nxt[ns]) {
                d->nxt[ns] = v;
                prv[ns] = (int32_t)s;
                op[ns] = (int8_t)k;
            }
        }
    }
    double *t = d->cur;
    d->cur = d->nxt;
    d->nxt = t;
    memcpy(d->pm, d->nm, sizeof *d->pm * (size_t)nn);
    d->np = nn;
    return n_next;
}

qs_status qs_alloc_dp_min(const qs_alloc_problem *p, const qs_alloc_adj *a, const double *unary, int32_t *choice,
                          bool *exact) {
    const int32_t L = p->n_layers;
    qs_dp d = {0};
    d.last = malloc(sizeof *d.last * (size_t)L);
    d.pm = malloc(sizeof *d.pm * (size_t)L), d.nm = malloc(sizeof *d.nm * (size_t)L);
    d.offset = malloc(sizeof *d.offset * ((size_t)L + 1));
    if (!d.last || !d.pm || !d.nm || !d.offset) {
        qs_dp_free(&d);
        return QS_FAIL(QS_ERR_OOM, "allocator: out of memory for the least-time DP");
    }
    qs_dp_last(p, &d);
    if (!qs_dp_layout(p, &d)) { /* too wide: coordinate descent */
        qs_dp_free(&d);
        qs_dp_descent(p, a, unary, choice);
        *exact = false;
        return QS_OK;
    }
    qs_status st = qs_dp_alloc_states(p, &d);
    if (st != QS_OK) {
        qs_dp_free(&d);
        return st;
    }
    d.cur[0] = 0.0;
    int64_t n_prev = 1;
    for (int32_t i = 0; i < L; i++) n_prev = qs_dp_step(p, a, unary, &d, i, n_prev);
    /* F_{L-1} is empty: one final state */
    int64_t s = 0;
    for (int32_t i = L - 1; i >= 0; i--) {
        choice[i] = d.opt[d.offset[i] + s];
        s = d.prev[d.offset[i] + s];
    }
    qs_dp_free(&d);
    *exact = true;
    return QS_OK;
}
