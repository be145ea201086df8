/* src/predict/profile_comm.c — all-reduce cost between the job's ranks (profile_comm.h). */
#include "predict/profile_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/coll.h"
#include "parallel/grad_sync.h"

#include "core/stats.h"
#include "core/timer.h"
#include "qsync/tensor.h"

#define QS_PROF_AR_MAX_SIZES 24
#define QS_PROF_AR_TIMEOUT_S 300.0

/* The sizes to time: 64 KiB, ×4 up to 16 MiB, 25 MiB, then doubling until max_bytes is covered. */
static int qs_prof_ar_sizes(double max_bytes, double *sizes) {
    int n = 0;
    for (double b = 64 << 10; b <= 16 << 20; b *= 4) sizes[n++] = b;
    sizes[n++] = 25 << 20;
    for (double b = 32 << 20; sizes[n - 1] < max_bytes && n < QS_PROF_AR_MAX_SIZES; b *= 2) sizes[n++] = b;
    return n;
}

/* The buffer the reductions run on, made once at the largest size (each size reduces its
 * first n floats): host memory or device memory of a CUDA backend, and the transport training
 * uses between these ranks (parallel/coll.h: mpi on the host, ipc on one shared GPU, nccl
 * across GPUs), one collective in flight. */
typedef struct qs_prof_ar_buf {
    qs_backend *be;       /* NULL: host */
    float *host, *dev;
    int64_t cap;
    qs_coll *coll;
} qs_prof_ar_buf;

static void qs_prof_ar_buf_free(qs_prof_ar_buf *b) {
    qs_coll_close(b->coll);
    if (b->dev) b->be->ops->free(b->be, b->dev);
    qs_host_free(b->host);
    memset(b, 0, sizeof *b);
}

/* A buffer of cap floats and its communicator (collective). */
static qs_status qs_prof_ar_buf_make(qs_comm *comm, qs_backend *be, int64_t cap, qs_prof_ar_buf *b) {
    memset(b, 0, sizeof *b);
    b->be = be;
    b->cap = cap;
    const size_t bytes = (size_t)cap * sizeof(float);
    const qs_coll_options o = {.transport = QS_COLL_AUTO, .be = be, .max_inflight = 1, .timeout_s = QS_PROF_AR_TIMEOUT_S};
    QS_TRY(qs_coll_open(comm, &o, &b->coll));
    if (!be) b->host = qs_host_alloc(bytes);
    else QS_TRY(be->ops->alloc(be, bytes, (void **)&b->dev));
    if (!be && !b->host) return QS_FAIL(QS_ERR_OOM, "out of memory for the all-reduce profile");
    return qs_coll_register(b->coll, be ? (void *)b->dev : (void *)b->host, bytes);
}

/* Write the first n floats where they live (as backward writes the gradients a bucket holds:
 * host values v, device zeros — the reduction's time does not depend on the values), outside
 * the timing. */
static qs_status qs_prof_ar_fill(qs_prof_ar_buf *b, int64_t n, float v) {
    if (!b->be) {
        for (int64_t i = 0; i < n; i++) b->host[i] = v;
        return QS_OK;
    }
    qs_stream *s = b->be->ops->default_stream(b->be);
    QS_TRY(b->be->ops->memset_zero(b->be, s, b->dev, (size_t)n * sizeof(float)));
    return b->be->ops->stream_sync(b->be, s);
}

/* One timed reduction of the first n floats: started, then waited for (on the GPU until its
 * result is on the device). */
static qs_status qs_prof_ar_once(qs_prof_ar_buf *b, int64_t n) {
    int req = -1;
    QS_TRY(qs_coll_allreduce(b->coll, b->be ? (void *)b->dev : (void *)b->host, n, QS_F32, NULL, &req));
    QS_TRY(qs_coll_wait(b->coll, req, QS_PROF_AR_TIMEOUT_S));
    return b->be ? b->be->ops->stream_sync(b->be, b->be->ops->default_stream(b->be)) : QS_OK;
}

qs_status qs_profile_allreduce(qs_comm *comm, qs_backend *be, int reps, double max_bytes, cJSON **out) {
    *out = NULL;
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    if (world < 2) return QS_FAIL(QS_ERR_INVALID_ARG, "the all-reduce profile needs several ranks (run under mpirun)");
    if (reps < 3) return QS_FAIL(QS_ERR_INVALID_ARG, "the all-reduce profile needs at least 3 repetitions");
    if (be && strcmp(be->ops->name, "cuda") != 0) be = NULL; /* host buffers on the CPU backend */
    double sizes[QS_PROF_AR_MAX_SIZES];
    const int n_sizes = qs_prof_ar_sizes(max_bytes, sizes);
    double *t = calloc((size_t)reps, sizeof *t), *slowest = calloc((size_t)world * n_sizes, sizeof *slowest);
    qs_status st = t && slowest ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for the all-reduce profile");
    qs_prof_ar_buf b;
    memset(&b, 0, sizeof b);
    if (st == QS_OK) st = qs_prof_ar_buf_make(comm, be, (int64_t)sizes[n_sizes - 1] / (int64_t)sizeof(float), &b);
    for (int s = 0; s < n_sizes && st == QS_OK; s++) {
        const int64_t n = (int64_t)sizes[s] / (int64_t)sizeof(float);
        for (int k = -1; k < reps && st == QS_OK; k++) { /* k = -1: warm-up */
            st = qs_prof_ar_fill(&b, n, 1e-3f * (float)(k + 2));
            uint64_t lo, hi;
            if (st == QS_OK) st = qs_comm_allreduce_minmax_u64(comm, (uint64_t)k + 1, &lo, &hi, QS_PROF_AR_TIMEOUT_S);
            double t0 = qs_now_ms();
            if (st == QS_OK) st = qs_prof_ar_once(&b, n);
            if (k >= 0) t[k] = qs_now_ms() - t0;
        }
        if (st == QS_OK) slowest[(size_t)rank * n_sizes + s] = qs_median_inplace(t, reps);
    }
    qs_prof_ar_buf_free(&b);
    if (st == QS_OK) st = qs_comm_allreduce_sum_f64(comm, slowest, world * n_sizes, QS_PROF_AR_TIMEOUT_S);
    if (st == QS_OK) {
        double ms[QS_PROF_AR_MAX_SIZES], alpha, beta;
        for (int s = 0; s < n_sizes; s++) {
            ms[s] = 0;
            for (int r = 0; r < world; r++)
                if (slowest[(size_t)r * n_sizes + s] > ms[s]) ms[s] = slowest[(size_t)r * n_sizes + s];
        }
        qs_linear_fit(sizes, ms, n_sizes, &alpha, &beta);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "ranks", world);
        cJSON_AddNumberToObject(o, "reps", reps);
        cJSON_AddNumberToObject(o, "alpha_ms", alpha);
        cJSON_AddNumberToObject(o, "beta_ms_per_byte", beta);
        cJSON *pts = cJSON_AddArrayToObject(o, "points");
        for (int s = 0; s < n_sizes; s++) {
            cJSON *pt = cJSON_CreateArray();
            cJSON_AddItemToArray(pt, cJSON_CreateNumber(sizes[s]));
            cJSON_AddItemToArray(pt, cJSON_CreateNumber(ms[s]));
            cJSON_AddItemToArray(pts, pt);
        }
        *out = o;
    }
    free(t);
    free(slowest);
    return st;
}

/* ---- the model's own gradient sync, as training runs it ---- */

typedef struct qs_prof_sync {
    qs_status (*ready)(void *, int); /* the runtime's hooks, wrapped */
    qs_status (*done)(void *);
    void *ctx;
    double in_hooks; /* this step's time inside them */
    double *ms;      /* per repetition */
    int rep;
} qs_prof_sync;

static qs_status qs_prof_sync_ready(void *ctx, int node) {
    qs_prof_sync *ps = ctx;
    double t0 = qs_now_ms();
    qs_status st = ps->ready(ps->ctx, node);
    ps->in_hooks += qs_now_ms() - t0;
    return st;
}

static qs_status qs_prof_sync_done(void *ctx) {
    qs_prof_sync *ps = ctx;
    double t0 = qs_now_ms();
    qs_status st = ps->done(ps->ctx);
    ps->in_hooks += qs_now_ms() - t0;
    if (ps->rep >= 0) ps->ms[ps->rep] = ps->in_hooks;
    ps->in_hooks = 0;
    return st;
}

/* Per step k, the least (lowest) or the largest of the ranks' samples[k] (k < reps), into
 * samples; all: world·reps scratch. Collective. */
static qs_status qs_prof_across_ranks(qs_comm *comm, double *samples, int reps, bool lowest, double *all) {
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    for (int k = 0; k < world * reps; k++) all[k] = 0;
    for (int k = 0; k < reps; k++) all[(size_t)rank * (size_t)reps + (size_t)k] = samples[k];
    QS_TRY(qs_comm_allreduce_sum_f64(comm, all, world * reps, QS_PROF_AR_TIMEOUT_S));
    for (int k = 0; k < reps; k++) {
        samples[k] = all[k];
        for (int r = 1; r < world; r++) {
            double v = all[(size_t)r * (size_t)reps + (size_t)k];
            samples[k] = lowest ? fmin(samples[k], v) : fmax(samples[k], v);
        }
    }
    return QS_OK;
}

/* reps + 1 steps (the first a warm-up) under the runtime's gradient sync; *ms = the median
 * over the steps of the least time any rank spent inside its hooks in that step (the rank that
 * arrived last waited for no one), *step_ms = the median of the slowest rank's step. samples,
 * step_samples: reps each; all: world·reps scratch. */
static qs_status qs_prof_sync_mode(qs_comm *comm, qs_model *m, size_t bucket_bytes, bool overlap, int reps,
                                   qs_status (*step)(void *, double *), void *step_ctx, double *samples,
                                   double *step_samples, double *all, double *ms, double *step_ms) {
    qs_grad_sync gs;
    QS_TRY(qs_grad_sync_init(&gs, comm, m, bucket_bytes, overlap, QS_PROF_AR_TIMEOUT_S));
    qs_prof_sync ps = {.ready = m->grads_ready, .done = m->grads_done, .ctx = m->grads_ctx, .ms = samples};
    m->grads_ready = qs_prof_sync_ready;
    m->grads_done = qs_prof_sync_done;
    m->grads_ctx = &ps;
    qs_status st = QS_OK;
    for (ps.rep = -1; ps.rep < reps && st == QS_OK; ps.rep++) {
        double wall = 0;
        st = step(step_ctx, &wall);
        if (ps.rep >= 0) step_samples[ps.rep] = wall;
    }
    m->grads_ready = ps.ready; /* back to the runtime's, which qs_grad_sync_free removes */
    m->grads_done = ps.done;
    m->grads_ctx = ps.ctx;
    qs_grad_sync_free(&gs);
    if (st == QS_OK) st = qs_prof_across_ranks(comm, samples, reps, true, all);
    if (st == QS_OK) st = qs_prof_across_ranks(comm, step_samples, reps, false, all);
    if (st == QS_OK) {
        *ms = qs_median_inplace(samples, reps);
        *step_ms = qs_median_inplace(step_samples, reps);
    }
    return st;
}

qs_status qs_profile_model_sync(qs_comm *comm, qs_model *m, size_t bucket_bytes, int reps,
                                qs_status (*step)(void *ctx, double *ms), void *step_ctx, cJSON **out) {
    *out = NULL;
    const int world = qs_comm_world(comm);
    if (world < 2 || m->params.count == 0 || bucket_bytes == 0 || reps < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the gradient-sync profile needs several ranks, parameters, a bucket size "
                       "and repetitions");
    double *samples = calloc((size_t)reps, sizeof *samples), ms[2] = {0, 0}, step_ms[2] = {0, 0};
    double *step_samples = calloc((size_t)reps, sizeof *step_samples);
    double *all = calloc((size_t)world * (size_t)reps, sizeof *all);
    qs_status st = samples && step_samples && all ? QS_OK
                                                  : QS_FAIL(QS_ERR_OOM, "out of memory for the gradient-sync profile");
    for (int mode = 0; mode < 2 && st == QS_OK; mode++) /* 0: overlapped with backward, 1: after it */
        st = qs_prof_sync_mode(comm, m, bucket_bytes, mode == 0, reps, step, step_ctx, samples, step_samples, all,
                               &ms[mode], &step_ms[mode]);
    free(samples);
    free(step_samples);
    free(all);
    if (st != QS_OK) return st;
    qs_grad_bucket *b = calloc((size_t)m->params.count, sizeof *b);
    int *eb = calloc((size_t)m->params.count, sizeof *eb);
    if (!b || !eb) {
        free(b);
        free(eb);
        return QS_FAIL(QS_ERR_OOM, "out of memory for the gradient-sync profile");
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "ranks", world);
    cJSON_AddNumberToObject(o, "bucket_bytes", (double)bucket_bytes);
    cJSON_AddNumberToObject(o, "buckets", qs_grad_buckets_form(&m->params, bucket_bytes, b, eb));
    cJSON_AddNumberToObject(o, "overlap_ms", ms[0]);
    cJSON_AddNumberToObject(o, "no_overlap_ms", ms[1]);
    cJSON_AddNumberToObject(o, "overlap_step_ms", step_ms[0]);
    cJSON_AddNumberToObject(o, "no_overlap_step_ms", step_ms[1]);
    free(b);
    free(eb);
    *out = o;
    return QS_OK;
}
