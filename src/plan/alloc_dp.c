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

qs_status qs_alloc_dp_min(const qs_alloc_problem *p, const qs_alloc_adj *a, const double *unary, int32_t *choice,
                          bool *exact) {
    const int32_t L = p->n_layers, K = p->n_opts;
    int32_t *last = malloc(sizeof *last * (size_t)L);
    int32_t *pm = malloc(sizeof *pm * (size_t)L), *nm = malloc(sizeof *nm * (size_t)L);
    int64_t *offset = malloc(sizeof *offset * ((size_t)L + 1));
    if (!last || !pm || !nm || !offset) {
        free(last), free(pm), free(nm), free(offset);
        return QS_FAIL(QS_ERR_OOM, "allocator: out of memory for the least-time DP");
    }
    for (int32_t l = 0; l < L; l++) last[l] = l;
    for (int32_t e = 0; e < p->n_edges; e++) {
        int32_t s = p->edges[e].src, d = p->edges[e].dst;
        if (d > last[s]) last[s] = d;
        if (s > last[d]) last[d] = s;
    }
    /* sizes of every step's state space; too wide: coordinate descent */
    int64_t total = 0, widest = 1;
    bool fits = true;
    for (int32_t i = 0; i < L && fits; i++) {
        int64_t n = qs_dp_states(K, qs_dp_frontier(last, i, nm));
        if (n < 0) fits = false;
        else {
            offset[i] = total;
            total += n;
            if (n > widest) widest = n;
        }
    }
    if (!fits) {
        free(last), free(pm), free(nm), free(offset);
        qs_dp_descent(p, a, unary, choice);
        *exact = false;
        return QS_OK;
    }
    offset[L] = total;
    int32_t *prev = malloc(sizeof *prev * (size_t)total);
    int8_t *opt = malloc((size_t)total);
    double *cur = malloc(sizeof *cur * (size_t)widest), *nxt = malloc(sizeof *nxt * (size_t)widest);
    int32_t *src_pos = malloc(sizeof *src_pos * (size_t)L);
    int32_t *ed_pos = malloc(sizeof *ed_pos * (size_t)(2 * (int64_t)p->n_edges + 1));
    int32_t *ed_id = malloc(sizeof *ed_id * (size_t)(2 * (int64_t)p->n_edges + 1));
    int32_t *pos_of = malloc(sizeof *pos_of * (size_t)L), *digits = malloc(sizeof *digits * (size_t)L);
    if (!prev || !opt || !cur || !nxt || !src_pos || !ed_pos || !ed_id || !pos_of || !digits) {
        free(prev), free(opt), free(cur), free(nxt), free(src_pos), free(ed_pos), free(ed_id), free(pos_of);
        free(digits);
        free(last), free(pm), free(nm), free(offset);
        return QS_FAIL(QS_ERR_OOM, "allocator: out of memory for the least-time DP (%lld states)", (long long)total);
    }
    int32_t np = 0;
    cur[0] = 0.0;
    int64_t n_prev = 1;
    for (int32_t i = 0; i < L; i++) {
        int32_t nn = qs_dp_frontier(last, i, nm);
        int64_t n_next = offset[i + 1] - offset[i];
        for (int32_t j = 0; j < L; j++) pos_of[j] = -1;
        for (int32_t j = 0; j < np; j++) pos_of[pm[j]] = j;
        for (int32_t n = 0; n < nn; n++) src_pos[n] = nm[n] == i ? -1 : pos_of[nm[n]];
        int32_t ne = 0; /* edges between layer i and frontier layers before it */
        for (int32_t q = a->start[i]; q < a->start[i + 1]; q++) {
            int32_t e = a->ids[q];
            int32_t other = p->edges[e].src == i ? p->edges[e].dst : p->edges[e].src;
            if (other < i) {
                ed_pos[ne] = pos_of[other];
                ed_id[ne++] = e;
            }
        }
        for (int64_t s = 0; s < n_next; s++) nxt[s] = INFINITY;
        int32_t *prv = prev + offset[i];
        int8_t *op = opt + offset[i];
        for (int64_t s = 0; s < n_prev; s++) {
            if (cur[s] == INFINITY) continue;
            int64_t r = s;
            for (int32_t j = 0; j < np; j++) {
                digits[j] = (int32_t)(r % K);
                r /= K;
            }
            for (int32_t k = 0; k < K; k++) {
                if (!qs_alloc_allowed(p, i, k)) continue;
                double v = cur[s] + unary[qs_alloc_ix(p, i, k)];
                for (int32_t q = 0; q < ne; q++) {
                    int32_t e = ed_id[q], ko = digits[ed_pos[q]];
                    v += p->edges[e].src == i ? qs_alloc_cast(p, e, k, ko) : qs_alloc_cast(p, e, ko, k);
                }
                int64_t ns = 0;
                for (int32_t n = nn - 1; n >= 0; n--) ns = ns * K + (src_pos[n] < 0 ? k : digits[src_pos[n]]);
                if (v < nxt[ns]) {
                    nxt[ns] = v;
                    prv[ns] = (int32_t)s;
                    op[ns] = (int8_t)k;
                }
            }
        }
        double *t = cur;
        cur = nxt;
        nxt = t;
        n_prev = n_next;
        memcpy(pm, nm, sizeof *pm * (size_t)nn);
        np = nn;
    }
    /* F_{L-1} is empty: one final state */
    int64_t s = 0;
    for (int32_t i = L - 1; i >= 0; i--) {
        choice[i] = opt[offset[i] + s];
        s = prev[offset[i] + s];
    }
    free(prev), free(opt), free(cur), free(nxt), free(src_pos), free(ed_pos), free(ed_id), free(pos_of);
    free(digits), free(last), free(pm), free(nm), free(offset);
    *exact = true;
    return QS_OK;
}
