/* src/predict/simulate_cluster.c — defines: the replay of a cluster (qs_sim_replay,
 * simulate.h): the workers' timelines, the gradient all-reduce between them in the runtime's
 * buckets, the step jitter, the prediction. One worker's costs: simulate.c. */
#include "predict/simulate_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "parallel/grad_sync.h"
#include "qsync/rng.h"

/* ---- communication ---- */

/* The all-reduce of `bytes` between the ranks: linear between measured sizes, the fitted line
 * beyond them. */
static double qs_sim_allreduce_ms(const qs_profile_allreduce_curve *ar, double bytes) {
    for (int i = 0; i + 1 < ar->n_points; i++) {
        double x0 = ar->points[2 * i], y0 = ar->points[2 * i + 1];
        double x1 = ar->points[2 * i + 2], y1 = ar->points[2 * i + 3];
        if (bytes >= x0 && bytes <= x1 && x1 > x0) return y0 + (y1 - y0) * (bytes - x0) / (x1 - x0);
    }
    return ar->alpha_ms + ar->beta_ms_per_byte * bytes;
}

/* Whether the transfers run on the compute cores (a CPU profile: the "serial" model). */
static bool qs_sim_serial_comm(const qs_profile *profile) { return strcmp(profile->device.backend, "cpu") == 0; }

/* The all-reduce measurement for n ranks from any worker's profile, or NULL; *from (may be
 * NULL) receives that profile. */
static const qs_profile_allreduce_curve *qs_sim_find_allreduce(const qs_sim_worker *w, int n, const qs_profile **from) {
    for (int r = 0; r < n; r++) {
        const qs_profile *p = w[r].profile;
        if (p->has_allreduce && (int)p->allreduce.ranks == n) {
            if (from) *from = p;
            return &p->allreduce;
        }
    }
    return NULL;
}

/* A worker's whole-step slowdown as replayed (the CPU quota that also slows the transfers its
 * cores make): one the replayer applies, times the quota its profile was taken under. */
static double qs_sim_whole_step_slowdown(const qs_sim_worker *w) {
    double s = w->slow_whole_step && w->slowdown > 1 ? w->slowdown : 1;
    const qs_profile *p = w->profile;
    if (p->has_emulation && p->emulation_method == QS_PROFILE_EMU_CGROUP_QUOTA && p->emulated_slowdown > 1)
        s *= p->emulated_slowdown;
    return s;
}

/* The model's own gradient sync measured in place between n ranks with these buckets
 * ("grad_sync" of a profile run, docs/PROFILE.md), in the mode asked: from the first worker's
 * base run that holds one; < 0 when none does. */
static double qs_sim_measured_sync(const qs_sim_worker *w, int n, size_t bucket_bytes, int nb, bool overlap,
                                   const qs_profile **from) {
    for (int r = 0; r < n; r++) {
        const qs_profile_prec_run *run = qs_profile_base_run(w[r].profile);
        const qs_profile_sync *gs = &run->sync;
        if (run->has_sync && (int)gs->ranks == n && (int)gs->buckets == nb &&
            (double)gs->bucket_bytes == (double)bucket_bytes) {
            *from = w[r].profile;
            return overlap ? gs->overlap_ms : gs->no_overlap_ms;
        }
    }
    return -1;
}

/* The factor on a measured sync (or all-reduce) on the CPU, where the transfers are made by the
 * workers' own cores inside their polls: a CPU quota slows them as much as its compute. The
 * transfers start when the last worker ends its backward, so the measurement scales by the
 * whole-step slowdown (qs_sim_whole_step_slowdown) of that worker — the largest among those
 * ending last (bwd_end within 10⁻⁹ relative of latest_bwd) — over the one it was measured beside
 * (the profile's co_running_slowdown; in a profile the quota-limited rank is the last to
 * arrive). Profiles without co_running_slowdown were measured beside the replayed workers'
 * quotas: only slowdowns the replayer applies count then. */
static double qs_sim_comm_scale(const qs_sim_worker *w, const qs_sim_timeline *tl, int n, double latest_bwd,
                                const qs_profile *sync_from) {
    double beside = sync_from->co_running_slowdown, last = 1;
    for (int r = 0; r < n; r++) {
        if (tl[r].bwd_end < latest_bwd - 1e-9 * fabs(latest_bwd)) continue; /* arrived before the last */
        last = fmax(last, beside > 0 ? qs_sim_whole_step_slowdown(&w[r]) : w[r].slow_whole_step ? w[r].slowdown : 1);
    }
    return last / (beside > 0 ? beside : 1);
}

/* The replayed communication's outcome. */
typedef struct qs_sim_comm {
    double done;          /* when every worker has its averaged gradients (before its own averaging) */
    double total;         /* the communication's total */
    double measured_sync; /* < 0: not from a sync measured in place */
    bool serial;
} qs_sim_comm;

/* The gradients' all-reduce when every worker's are done, in the n workers' nb buckets (ar: the
 * size curve, from profile ar_from). */
static void qs_sim_communicate(const qs_sim_worker *w, int n, const qs_sim_options *o, const qs_sim_timeline *tl,
                               const qs_grad_bucket *buckets, int nb, const qs_profile_allreduce_curve *ar,
                               const qs_profile *ar_from, cJSON *trace, qs_sim_comm *c) {
    double latest_bwd = 0;
    for (int r = 0; r < n; r++) latest_bwd = fmax(latest_bwd, tl[r].bwd_end);
    *c = (qs_sim_comm){.done = latest_bwd, .measured_sync = -1, .serial = n > 1 && qs_sim_serial_comm(w[0].profile)};
    if (n == 1) return;
    if (c->serial || !o->overlap) {
        const qs_profile *sync_from = ar_from;
        c->measured_sync = qs_sim_measured_sync(w, n, o->bucket_bytes, nb, o->overlap, &sync_from);
        double comm_scale = c->serial ? qs_sim_comm_scale(w, tl, n, latest_bwd, sync_from) : 1;
        if (c->measured_sync >= 0) { /* the whole sync, averaging included, as measured in place */
            double d = c->measured_sync * comm_scale;
            for (int r = 0; r < n; r++) qs_sim_event(trace, "gradient sync", "comm", r, 1, c->done, d);
            c->done += d;
            c->total += d;
        }
        for (int b = 0; b < nb && c->measured_sync < 0; b++) {
            double d = qs_sim_allreduce_ms(ar, (double)buckets[b].bytes) * comm_scale;
            for (int r = 0; r < n; r++) qs_sim_event(trace, "all-reduce", "comm", r, 1, c->done, d);
            c->done += d;
            c->total += d;
        }
        return;
    }
    c->done = 0;
    for (int b = 0; b < nb; b++) {
        double start = c->done, d = qs_sim_allreduce_ms(ar, (double)buckets[b].bytes);
        for (int r = 0; r < n; r++) start = fmax(start, tl[r].bucket_ready[b]);
        for (int r = 0; r < n; r++) qs_sim_event(trace, "all-reduce", "comm", r, 1, start, d);
        c->done = start + d;
        c->total += d;
    }
    c->done = fmax(c->done, latest_bwd);
}

/* ---- jitter ---- */

#define QS_SIM_JITTER_DRAWS 65536

/* Step-to-step jitter: each worker's measured steps ("step_samples_ms" of its base run) less
 * their median, scaled by an emulated slowdown the profile does not hold, are drawn
 * independently per worker; the synchronized step waits for the latest backward, so it grows by
 * max_r(bwd_end_r + e_r) - max_r(bwd_end_r). *median and *mean: that growth's median and mean
 * over a fixed-seed set of draws; both 0 for one worker or without samples. */
static qs_status qs_sim_jitter(const qs_sim_worker *w, const qs_sim_timeline *tl, int n, double *median,
                               double *mean) {
    *median = *mean = 0;
    if (n < 2) return QS_OK;
    const qs_profile_prec_run **run = calloc((size_t)n, sizeof *run);
    double *centre = calloc((size_t)n, sizeof *centre), *scale = calloc((size_t)n, sizeof *scale);
    double *growth = calloc(QS_SIM_JITTER_DRAWS, sizeof *growth), latest = 0;
    qs_status st = run && centre && scale && growth ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory replaying");
    bool all = st == QS_OK;
    for (int r = 0; r < n && all; r++) {
        run[r] = qs_profile_base_run(w[r].profile);
        int k = run[r]->n_step_samples;
        double *v = k > 0 ? calloc((size_t)k, sizeof *v) : NULL;
        all = v != NULL;
        if (all) memcpy(v, run[r]->step_samples_ms, (size_t)k * sizeof *v);
        if (all) centre[r] = qs_median_inplace(v, k);
        free(v);
        scale[r] = w[r].slowdown > 1 ? w[r].slowdown : 1;
        latest = fmax(latest, tl[r].bwd_end);
    }
    if (all) {
        qs_rng rng;
        qs_rng_init(&rng, qs_rng_key(1, "simulate-jitter", 0), 0);
        double sum = 0;
        for (int d = 0; d < QS_SIM_JITTER_DRAWS; d++) {
            double mx = -INFINITY;
            for (int r = 0; r < n; r++) {
                double e = run[r]->step_samples_ms[qs_rng_below(&rng, (uint64_t)run[r]->n_step_samples)];
                mx = fmax(mx, tl[r].bwd_end + (e - centre[r]) * scale[r]);
            }
            growth[d] = mx - latest;
            sum += growth[d];
        }
        *mean = sum / QS_SIM_JITTER_DRAWS;
        *median = qs_median_inplace(growth, QS_SIM_JITTER_DRAWS);
    }
    free(run);
    free(centre);
    free(scale);
    free(growth);
    return st;
}

/* ---- the prediction ---- */

/* Every worker's finish after the communication c, into out's workers; the latest finish into
 * *iteration (on a tie, the worker whose backward ended last is the slowest). */
static void qs_sim_finish(const qs_sim_worker *w, int n, const qs_sim_timeline *tl, const qs_sim_comm *c, cJSON *trace,
                          qs_sim_result *out, double *iteration) {
    *iteration = 0;
    for (int r = 0; r < n; r++) {
        double average = n > 1 && c->measured_sync < 0 ? tl[r].grad_average : 0;
        double finish = c->done + average + tl[r].optimizer;
        qs_sim_event(trace, "average gradients", "comm", r, 0, c->done, average);
        qs_sim_event(trace, "optimizer", "optimizer", r, 0, c->done + average, tl[r].optimizer);
        if (finish > *iteration || (finish == *iteration && tl[r].bwd_end > tl[out->slowest].bwd_end)) {
            *iteration = finish;
            out->slowest = r;
        }
        out->workers[r] = (qs_sim_worker_result){
            .rank = r, .type = w[r].type, .slowdown = w[r].slowdown > 1 ? w[r].slowdown : 1, .data_ms = tl[r].data,
            .untimed_ms = tl[r].untimed, .forward_ms = tl[r].forward, .backward_ms = tl[r].backward,
            .comm_wait_ms = c->done - tl[r].bwd_end, .grad_average_ms = average, .optimizer_ms = tl[r].optimizer,
            .iteration_ms = finish, .memory_bytes = tl[r].memory};
    }
    out->n_workers = n;
}

/* The workers' timelines (tl[r].bucket_ready: nb + 1 entries each, in ready[]). */
static qs_status qs_sim_timelines(const qs_sim_worker *w, int n, int nb, const int *entry_bucket, cJSON *trace,
                                  qs_sim_timeline *tl, double **ready) {
    *ready = calloc((size_t)n * (size_t)(nb + 1), sizeof **ready);
    if (!*ready) return QS_FAIL(QS_ERR_OOM, "out of memory replaying");
    for (int r = 0; r < n; r++) {
        tl[r].bucket_ready = *ready + (size_t)r * (size_t)(nb + 1);
        QS_TRY(qs_sim_worker_timeline(&w[r], r, nb, entry_bucket, trace, &tl[r]));
    }
    return QS_OK;
}

qs_status qs_sim_replay(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, qs_sim_result *out) {
    memset(out, 0, sizeof *out);
    if (n < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "simulate: no workers");
    for (int r = 0; r < n; r++) QS_TRY(qs_sim_check_profile(&w[r], r));
    const qs_profile *ar_from = NULL;
    const qs_profile_allreduce_curve *ar = NULL;
    if (n > 1 && !(ar = qs_sim_find_allreduce(w, n, &ar_from)))
        return QS_FAIL(QS_ERR_MISMATCH, "no profile holds an all-reduce measured between %d ranks: take one with "
                       "`mpirun -np %d qsync profile ...`", n, n);
    const qs_table *t = &w[0].m->params;
    qs_grad_bucket *buckets = calloc((size_t)t->count + 1, sizeof *buckets);
    int *entry_bucket = calloc((size_t)t->count + 1, sizeof *entry_bucket);
    qs_sim_timeline *tl = calloc((size_t)n, sizeof *tl);
    out->workers = calloc((size_t)n, sizeof *out->workers);
    double *ready = NULL;
    qs_status st = buckets && entry_bucket && tl && out->workers ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory replaying");
    int nb = st == QS_OK && n > 1 ? qs_grad_buckets_form(t, o->bucket_bytes, buckets, entry_bucket) : 0;
    if (st == QS_OK) st = qs_sim_timelines(w, n, nb, entry_bucket, trace, tl, &ready);
    qs_sim_comm c;
    double iteration = 0, jitter = 0, jitter_mean = 0;
    if (st == QS_OK) {
        qs_sim_communicate(w, n, o, tl, buckets, nb, ar, ar_from, trace, &c);
        qs_sim_finish(w, n, tl, &c, trace, out, &iteration);
        st = qs_sim_jitter(w, tl, n, &jitter, &jitter_mean);
    }
    if (st == QS_OK) {
        out->iteration_ms = iteration + jitter;
        out->iteration_mean_ms = iteration + jitter_mean;
        out->jitter_ms = jitter;
        out->comm_model = n == 1 ? "none" : c.serial ? "serial" : "concurrent";
        out->comm_source = n == 1 ? "none" : c.measured_sync >= 0 ? "measured sync" : "size curve";
        out->buckets = nb;
        out->allreduce_ms = c.total;
    }
    free(buckets);
    free(entry_bucket);
    free(ready);
    free(tl);
    if (st != QS_OK) qs_sim_result_free(out);
    return st;
}
