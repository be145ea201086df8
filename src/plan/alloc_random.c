/* src/plan/alloc_random.c — random allocation problems for testing the allocator
 * (qs_alloc_random_problem; what is drawn and why is documented in allocator.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan/alloc_internal.h"
#include "qsync/rng.h"

#define QS_MIB 1048576.0

qs_alloc_random_opts qs_alloc_random_defaults(void) {
    qs_alloc_random_opts o = {
        .min_layers = 4,
        .max_layers = 60,
        .n_opts = 3,
        .target_ms = 100.0,
        .p_skip = 0.1,
        .p_slow_mid = 0.15,
        .p_mem_binding = 0.3,
        .omega_noise = 0.5,
    };
    return o;
}

static double qs_rand_u(qs_rng *r, double lo, double hi) { return lo + (hi - lo) * (double)qs_rng_uniform(r); }
static double qs_rand_logn(qs_rng *r, double sigma) { return exp(sigma * (double)qs_rng_normal(r)); }
static bool qs_rand_prob_ok(double v) { return v >= 0.0 && v <= 1.0; }

/* The model part of instance `seed` (layers, edges, ω, memory) into *p, plus the per-layer
 * size, activation size and parameter size the device part needs (arrays of L, malloc'ed). */
static qs_status qs_rand_model(uint64_t seed, const qs_alloc_random_opts *o, qs_alloc_problem *p, double **size_out,
                               double **act_out, double **par_out) {
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(seed, "alloc-model", 0), 0);
    const int32_t L = o->min_layers + (int32_t)qs_rng_below(&r, (uint64_t)(o->max_layers - o->min_layers + 1));
    const int32_t K = o->n_opts;
    double *s = malloc(sizeof *s * (size_t)L), *act = malloc(sizeof *act * (size_t)L);
    double *par = malloc(sizeof *par * (size_t)L), *sens = malloc(sizeof *sens * (size_t)L);
    int32_t *skip = malloc(sizeof *skip * (size_t)L);
    qs_status st = QS_OK;
    if (!s || !act || !par || !sens || !skip) {
        st = QS_FAIL(QS_ERR_OOM, "random allocator problem: out of memory");
        goto fail;
    }
    int32_t E = L - 1;
    for (int32_t l = 0; l < L; l++) {
        s[l] = qs_rand_logn(&r, 0.9);
        act[l] = pow(s[l], 0.7) * qs_rand_logn(&r, 0.4);
        par[l] = s[l] * qs_rand_logn(&r, 0.5);
        sens[l] = qs_rand_logn(&r, o->omega_noise);
        skip[l] = -1;
        if ((double)qs_rng_uniform(&r) < o->p_skip) {
            int32_t to = l + 2 + (int32_t)qs_rng_below(&r, 2);
            if (to < L) skip[l] = to, E++;
        }
    }
    if ((st = qs_alloc_problem_alloc(p, L, K, E)) != QS_OK) goto fail;
    int32_t e = 0;
    for (int32_t l = 0; l + 1 < L; l++) p->edges[e++] = (qs_alloc_edge){l, l + 1};
    for (int32_t l = 0; l < L; l++)
        if (skip[l] >= 0) p->edges[e++] = (qs_alloc_edge){l, skip[l]};
    for (int32_t l = 0; l < L; l++) {
        p->omega[qs_alloc_ix(p, l, 0)] = 0.0;
        for (int32_t k = 1; k < K; k++)
            p->omega[qs_alloc_ix(p, l, k)] = p->omega[qs_alloc_ix(p, l, k - 1)] +
                                             s[l] * sens[l] * pow(10.0, (double)(k - K + 1)) * qs_rand_logn(&r, 0.3);
        for (int32_t k = 0; k < K; k++) {
            int bytes = (4 >> k) > 1 ? (4 >> k) : 1;
            p->mem[qs_alloc_ix(p, l, k)] = llround(act[l] * 4.0 * QS_MIB * bytes / 4.0);
        }
    }
    free(sens), free(skip);
    *size_out = s, *act_out = act, *par_out = par;
    return QS_OK;
fail:
    free(s), free(act), free(par), free(sens), free(skip);
    return st;
}

/* The time of the plan with every layer at option 0. */
static double qs_rand_time_all0(const qs_alloc_problem *p) {
    double t = p->fixed_ms;
    for (int32_t l = 0; l < p->n_layers; l++) t += p->time_ms[qs_alloc_ix(p, l, 0)];
    for (int32_t e = 0; e < p->n_edges; e++) t += qs_alloc_cast(p, e, 0, 0);
    return t;
}

/* Σ over layers of the option-0 memory (the fixed part not included). */
static int64_t qs_rand_mem_all0(const qs_alloc_problem *p) {
    int64_t m0 = 0;
    for (int32_t l = 0; l < p->n_layers; l++) m0 += p->mem[qs_alloc_ix(p, l, 0)];
    return m0;
}

/* Whether o and type describe a drawable problem (QS_ERR_INVALID_ARG naming the fault). */
static qs_status qs_rand_check(const qs_alloc_random_opts *o, int32_t type) {
    if (type < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "random allocator problem: device type %d < 0", (int)type);
    if (o->min_layers < 1 || o->max_layers < o->min_layers || o->max_layers > 100000)
        return QS_FAIL(QS_ERR_INVALID_ARG, "random allocator problem: layers %d..%d; need 1 ≤ min ≤ max ≤ 100000",
                       (int)o->min_layers, (int)o->max_layers);
    if (o->n_opts < 1 || o->n_opts > QS_ALLOC_MAX_OPTS)
        return QS_FAIL(QS_ERR_INVALID_ARG, "random allocator problem: %d options; allowed 1..%d", (int)o->n_opts,
                       QS_ALLOC_MAX_OPTS);
    if (!(o->target_ms > 0.0) || !isfinite(o->target_ms) || !qs_rand_prob_ok(o->p_skip) ||
        !qs_rand_prob_ok(o->p_slow_mid) || !qs_rand_prob_ok(o->p_mem_binding) || !(o->omega_noise >= 0.0) ||
        !isfinite(o->omega_noise))
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "random allocator problem: target %g ms must be finite and > 0, probabilities in [0, 1], "
                       "omega_noise finite and ≥ 0",
                       o->target_ms);
    return QS_OK;
}

/* The device part of instance (seed, type) on p's model part (per-layer size s, activation
 * size act, parameter size par): per-option times, cast costs, the fixed time and memory and
 * the memory cap, from the device's own random stream; returns that stream's last draw, the
 * tightness of the target in [0.02, 0.98). */
static double qs_rand_device(qs_alloc_problem *p, uint64_t seed, int32_t type, const qs_alloc_random_opts *o,
                             const double *s, const double *act, const double *par) {
    const int32_t L = p->n_layers, K = p->n_opts;
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(seed, "alloc-device", (uint64_t)type), 0);
    double h[QS_ALLOC_MAX_OPTS];
    for (int32_t k = 1; k < K; k++) h[k] = qs_rand_u(&r, 0.15, 0.4);
    const double cast_d = qs_rand_u(&r, 0.03, 0.12);
    double sum_t0 = 0.0, sum_par = 0.0;
    for (int32_t l = 0; l < L; l++) {
        double b = s[l] * qs_rand_logn(&r, 0.25);
        p->time_ms[qs_alloc_ix(p, l, 0)] = b;
        sum_t0 += b;
        sum_par += par[l];
        const double t0 = b;
        for (int32_t k = 1; k < K; k++) {
            double gain = h[k] * qs_rand_logn(&r, 0.35);
            gain = gain < 0.02 ? 0.02 : gain > 0.8 ? 0.8 : gain;
            b *= 1.0 - gain;
            p->time_ms[qs_alloc_ix(p, l, k)] = b;
        }
        double u = (double)qs_rng_uniform(&r), slower = qs_rand_u(&r, 0.0, 0.1);
        if (K >= 3 && u < o->p_slow_mid) p->time_ms[qs_alloc_ix(p, l, 1)] = t0 * (1.0 + slower);
    }
    for (int32_t e = 0; e < p->n_edges; e++)
        for (int32_t k1 = 0; k1 < K; k1++)
            for (int32_t k2 = 0; k2 < K; k2++) {
                double noise = qs_rand_logn(&r, 0.2);
                p->cast_ms[((int64_t)e * K + k1) * K + k2] =
                    k1 == k2 ? 0.0 : cast_d * act[p->edges[e].src] * (k2 > k1 ? 1.0 : 0.6) * noise;
            }
    p->fixed_ms = qs_rand_u(&r, 0.2, 0.6) * sum_t0;
    p->fixed_mem = llround(4.0 * sum_par * 2.0 * QS_MIB);
    const int64_t m0 = qs_rand_mem_all0(p), mmin = qs_alloc_min_mem(p) - p->fixed_mem;
    const double u_mem = (double)qs_rng_uniform(&r), v = qs_rand_u(&r, 0.25, 0.9), extra = qs_rand_u(&r, 0.0, 0.5);
    if (u_mem < o->p_mem_binding) p->mem_cap = p->fixed_mem + mmin + llround(v * (double)(m0 - mmin));
    else p->mem_cap = p->fixed_mem + m0 + llround(extra * (double)m0);
    return qs_rand_u(&r, 0.02, 0.98);
}

/* Place the target at `tight` between τ_fast (the least time within the cap) and τ_free
 * (where T stops binding), then scale every time so that it is o->target_ms. */
static qs_status qs_rand_place_target(qs_alloc_problem *p, const qs_alloc_random_opts *o, double tight) {
    const int32_t K = p->n_opts;
    p->target_ms = INFINITY;
    qs_alloc_result fast, free_plan;
    qs_status fs = qs_alloc_fastest(p, NULL, &fast);
    double tau_fast = fast.time_ms, tau_free;
    qs_alloc_result_free(&fast);
    QS_TRY(fs);
    if (p->fixed_mem + qs_rand_mem_all0(p) <= p->mem_cap) tau_free = qs_rand_time_all0(p);
    else {
        qs_status st = qs_alloc_exact(p, NULL, &free_plan);
        if (st == QS_OK) tau_free = free_plan.time_ms;
        qs_alloc_result_free(&free_plan);
        QS_TRY(st);
    }
    const double tau = tau_fast + tight * (tau_free - tau_fast);
    const double scale = o->target_ms / tau;
    for (int64_t i = 0; i < (int64_t)p->n_layers * K; i++) p->time_ms[i] *= scale;
    for (int64_t i = 0; i < (int64_t)p->n_edges * K * K; i++) p->cast_ms[i] *= scale;
    p->fixed_ms *= scale;
    p->target_ms = o->target_ms;
    return QS_OK;
}

qs_status qs_alloc_random_problem(uint64_t seed, int32_t type, const qs_alloc_random_opts *o, qs_alloc_problem *out) {
    qs_alloc_random_opts d = qs_alloc_random_defaults();
    if (!o) o = &d;
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "random allocator problem: no output given");
    QS_TRY(qs_rand_check(o, type));
    double *s = NULL, *act = NULL, *par = NULL;
    QS_TRY(qs_rand_model(seed, o, out, &s, &act, &par));
    snprintf(out->name, sizeof out->name, "random-%llu-type%d", (unsigned long long)seed, (int)type);
    const double tight = qs_rand_device(out, seed, type, o, s, act, par);
    free(s), free(act), free(par);
    qs_status st = qs_rand_place_target(out, o, tight);
    if (st != QS_OK) {
        qs_alloc_problem_free(out);
        return qs_error_wrap(st, "random allocator problem %llu type %d: ", (unsigned long long)seed, (int)type);
    }
    return QS_OK;
}
