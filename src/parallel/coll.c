/* src/parallel/coll.c — defines: the communication interface's front (parallel/coll.h): the
 * choice of transport, argument checks, handles, test / wait / cancel, and the GPU layout of a
 * job's ranks. The transports are coll_mpi.c, coll_ipc.c and coll_nccl.c (coll_impl.h). */
#include "parallel/coll_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#ifdef QS_HAVE_CUDA
#include "cuda/cuda_ipc.h"
#endif

const char *qs_coll_transport_name(qs_coll_transport t) {
    static const char *const names[] = {"auto", "mpi", "ipc", "nccl"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

/* Each kind's name, with its article for messages. */
static const char *const qs_coll_kinds[QS_COLL_KINDS][2] = {
    {"an", "all-reduce"}, {"a", "reduce-scatter"}, {"an", "all-gather"},
    {"an", "all-to-all"}, {"a", "send"},           {"a", "receive"}, {"a", "send-recv"},
};

const char *qs_coll_kind_name(qs_coll_kind k) { return (unsigned)k < QS_COLL_KINDS ? qs_coll_kinds[k][1] : "?"; }

qs_status qs_coll_unsupported(const qs_coll *c, const qs_coll_args *a, const char *why) {
    return QS_FAIL(QS_ERR_UNSUPPORTED, "the %s transport has no %s of %s (%s)", qs_coll_transport_name(c->transport),
                   qs_coll_kind_name(a->kind), qs_dtype_name(a->dt), why);
}

qs_status qs_coll_agree(qs_coll *c, qs_status st, const char *what) {
    uint64_t lo = 1, hi = 1;
    const qs_status a = qs_comm_allreduce_minmax_u64(c->comm, st == QS_OK, &lo, &hi, c->timeout_s);
    if (st != QS_OK) return st;
    if (a != QS_OK) return a;
    return lo ? QS_OK : QS_FAIL(QS_ERR_BACKEND, "another rank could not set up %s (its own message says why)", what);
}

qs_status qs_coll_gpu_layout(qs_backend *be, qs_comm *comm, double timeout_s, qs_gpu_layout *out, int *n_gpus) {
#ifndef QS_HAVE_CUDA
    (void)be, (void)comm, (void)timeout_s, (void)out, (void)n_gpus;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "no GPU in this build: it was configured without the CUDA backend");
#else
    if (!be || strcmp(be->ops->name, "cuda") != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the GPU layout needs the CUDA backend");
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    char *uuid = malloc((size_t)world * 16);
    if (!uuid) return QS_FAIL(QS_ERR_OOM, "out of memory for the GPU layout");
    qs_status st = qs_cuda_ipc_device_uuid(be, (unsigned char *)uuid + 16 * rank);
    for (int root = 0; root < world && st == QS_OK; root++) { /* every rank's UUID to every rank */
        char *msg = root == rank ? uuid + 16 * rank : NULL;
        size_t n = 16;
        st = qs_comm_bcast_bytes(comm, root, &msg, &n, timeout_s);
        if (st == QS_OK && root != rank) {
            if (n == 16) memcpy(uuid + 16 * root, msg, 16);
            else st = QS_FAIL(QS_ERR_MISMATCH, "rank %d sent %zu bytes for its GPU's UUID", root, n);
            free(msg);
        }
    }
    int distinct = 0;
    for (int r = 0; r < world && st == QS_OK; r++) {
        bool seen = false;
        for (int q = 0; q < r && !seen; q++) seen = memcmp(uuid + 16 * q, uuid + 16 * r, 16) == 0;
        distinct += !seen;
    }
    free(uuid);
    QS_TRY(st);
    *n_gpus = distinct;
    *out = distinct == 1 ? QS_GPUS_SHARED : distinct == world ? QS_GPUS_ONE_EACH : QS_GPUS_MIXED;
    return QS_OK;
#endif
}

/* QS_COLL_AUTO: every rank must take the same transport (their collectives differ), so the
 * ranks agree first whether their buffers are on GPUs; then CUDA IPC when every rank shares
 * one GPU, NCCL when each has its own. A job with several ranks on some of several GPUs would
 * need both (IPC within a GPU, NCCL between them), which is not built. */
static qs_status qs_coll_choose(qs_comm *comm, qs_backend *be, double timeout_s, qs_coll_transport *out) {
    const bool gpu = be && strcmp(be->ops->name, "cuda") == 0;
    uint64_t lo = 0, hi = 0;
    QS_TRY(qs_comm_allreduce_minmax_u64(comm, gpu, &lo, &hi, timeout_s));
    if (lo != hi)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "rank %d trains on %s while another rank trains on %s: the ranks of one job "
                       "all run on CPUs or all on one GPU", qs_comm_rank(comm), gpu ? "a GPU" : "the CPU",
                       gpu ? "the CPU" : "a GPU");
    *out = QS_COLL_MPI;
    if (!gpu) return QS_OK;
    qs_gpu_layout layout = QS_GPUS_MIXED;
    int n_gpus = 0;
    QS_TRY(qs_coll_gpu_layout(be, comm, timeout_s, &layout, &n_gpus));
    if (layout == QS_GPUS_MIXED)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "%d ranks on %d GPUs, some GPUs holding several: that needs CUDA IPC within "
                       "each GPU and NCCL between them (hierarchical), which this qsync does not have; put every rank "
                       "on its own GPU or all on one", qs_comm_world(comm), n_gpus);
    *out = layout == QS_GPUS_SHARED ? QS_COLL_IPC : QS_COLL_NCCL;
    return QS_OK;
}

qs_status qs_coll_open(qs_comm *comm, const qs_coll_options *o, qs_coll **out) {
    *out = NULL;
    qs_coll_transport t = o->transport;
    if (t == QS_COLL_AUTO) QS_TRY(qs_coll_choose(comm, o->be, o->timeout_s, &t));
    if (t != QS_COLL_MPI && (!o->be || strcmp(o->be->ops->name, "cuda") != 0))
        return QS_FAIL(QS_ERR_INVALID_ARG, "the %s transport needs buffers of the CUDA backend",
                       qs_coll_transport_name(t));
    qs_coll *c = calloc(1, sizeof *c);
    if (!c) return QS_FAIL(QS_ERR_OOM, "out of memory for a communicator");
    c->transport = t;
    c->comm = comm;
    c->be = t == QS_COLL_MPI ? NULL : o->be;
    c->rank = qs_comm_rank(comm);
    c->world = qs_comm_world(comm);
    c->cap = o->max_inflight > 0 ? o->max_inflight : 256;
    c->timeout_s = o->timeout_s;
    c->used = calloc((size_t)c->cap, sizeof *c->used);
    c->kind = calloc((size_t)c->cap, sizeof *c->kind);
    c->elems = calloc((size_t)c->cap, sizeof *c->elems);
    qs_status st = c->used && c->kind && c->elems ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for a communicator");
    if (st == QS_OK)
        st = t == QS_COLL_MPI ? qs_coll_mpi_open(c) : t == QS_COLL_IPC ? qs_coll_ipc_open(c) : qs_coll_nccl_open(c);
    if (st != QS_OK) {
        qs_coll_close(c);
        return st;
    }
    *out = c;
    return QS_OK;
}

void qs_coll_close(qs_coll *c) {
    if (!c) return;
    if (c->ops) c->ops->close(c);
    free(c->used);
    free(c->kind);
    free(c->elems);
    free(c);
}

qs_coll_transport qs_coll_transport_of(const qs_coll *c) { return c->transport; }
qs_comm *qs_coll_comm(const qs_coll *c) { return c->comm; }

qs_status qs_coll_register(qs_coll *c, void *buf, size_t bytes) {
    if (!buf && bytes) return QS_FAIL(QS_ERR_INVALID_ARG, "register: NULL buffer of %zu bytes", bytes);
    return c->ops->reg ? c->ops->reg(c, buf, bytes) : QS_OK;
}

/* The refusal of a communicator whose ranks are out of step. */
static qs_status qs_coll_broken(const char *what) {
    return QS_FAIL(QS_ERR_BACKEND, "%s on a communicator whose ranks are out of step (a collective timed out or was "
                   "cancelled): it can only be closed", what);
}

/* Whether [a, a + na) and [b, b + nb) share a byte. */
static bool qs_coll_overlap(const void *a, size_t na, const void *b, size_t nb) {
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

/* The checks every collective passes (see coll.h), then a free handle and the transport's start. */
static qs_status qs_coll_start(qs_coll *c, qs_coll_args *a, int *req) {
    *req = -1;
    const char *what = qs_coll_kind_name(a->kind);
    if (c->broken) return qs_coll_broken(what);
    if ((unsigned)a->dt >= QS_DTYPE_COUNT) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: unknown dtype %d", what, (int)a->dt);
    a->esize = qs_dtype_size(a->dt);
    a->total = 0;
    for (int p = 0; p < c->world; p++) {
        const int64_t n = qs_coll_piece(a, p);
        if (n < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rank %d's piece has %lld elements", what, p, (long long)n);
        a->total += n;
    }
    if (a->count < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s of %lld elements", what, (long long)a->count);
    for (int k = 0; a->kind >= QS_COLL_SEND && k < (a->kind == QS_COLL_SENDRECV ? 2 : 1); k++) {
        const int peer = k ? a->from : a->peer;
        if (peer < 0 || peer >= c->world || peer == c->rank)
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s between rank %d and rank %d in a job of %d ranks", what, c->rank,
                           peer, c->world);
    }
    if (a->kind == QS_COLL_ALLGATHER)
        a->in_place = a->send == (const char *)a->recv + (size_t)qs_coll_displ(a, c->rank) * a->esize;
    size_t send_n = a->kind == QS_COLL_ALLGATHER ? (size_t)qs_coll_piece(a, c->rank) : (size_t)a->total;
    size_t recv_n = a->kind == QS_COLL_REDUCE_SCATTER ? (size_t)qs_coll_piece(a, c->rank) : (size_t)a->total;
    if (a->kind == QS_COLL_SENDRECV) send_n = recv_n = (size_t)a->count;
    const bool apart = a->kind == QS_COLL_REDUCE_SCATTER || a->kind == QS_COLL_ALLTOALL ||
                       a->kind == QS_COLL_SENDRECV || (a->kind == QS_COLL_ALLGATHER && !a->in_place);
    if (apart && qs_coll_overlap(a->send, send_n * a->esize, a->recv, recv_n * a->esize))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the send and receive buffers overlap", what);
    if (c->be && !a->s) a->s = c->be->ops->default_stream(c->be);
    int r = 0;
    while (r < c->cap && c->used[r]) r++;
    if (r == c->cap)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: more than %d collectives outstanding (qs_coll_options.max_inflight)",
                       what, c->cap);
    const int64_t elems = a->kind == QS_COLL_ALLREDUCE || a->kind >= QS_COLL_SEND ? a->count : a->total;
    QS_TRY(c->ops->start(c, a, r));
    c->used[r] = true;
    c->kind[r] = a->kind;
    c->elems[r] = elems;
    *req = r;
    return QS_OK;
}

qs_status qs_coll_allreduce(qs_coll *c, void *buf, int64_t count, qs_dtype dt, qs_stream *s, int *req) {
    qs_coll_args a = {.kind = QS_COLL_ALLREDUCE, .send = buf, .recv = buf, .count = count, .dt = dt, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_reduce_scatter(qs_coll *c, const void *send, void *recv, int64_t count, qs_dtype dt, qs_stream *s,
                                 int *req) {
    qs_coll_args a = {.kind = QS_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_reduce_scatterv(qs_coll *c, const void *send, void *recv, const int64_t *counts, qs_dtype dt,
                                  qs_stream *s, int *req) {
    if (!counts) return QS_FAIL(QS_ERR_INVALID_ARG, "reduce-scatter: no counts");
    qs_coll_args a = {.kind = QS_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .counts = counts, .dt = dt, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_allgather(qs_coll *c, const void *send, void *recv, int64_t count, qs_dtype dt, qs_stream *s,
                            int *req) {
    qs_coll_args a = {.kind = QS_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .dt = dt, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_allgatherv(qs_coll *c, const void *send, void *recv, const int64_t *counts, qs_dtype dt,
                             qs_stream *s, int *req) {
    if (!counts) return QS_FAIL(QS_ERR_INVALID_ARG, "all-gather: no counts");
    qs_coll_args a = {.kind = QS_COLL_ALLGATHER, .send = send, .recv = recv, .counts = counts, .dt = dt, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_alltoall(qs_coll *c, const void *send, void *recv, int64_t count, qs_dtype dt, qs_stream *s,
                           int *req) {
    qs_coll_args a = {.kind = QS_COLL_ALLTOALL, .send = send, .recv = recv, .count = count, .dt = dt, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_send(qs_coll *c, const void *buf, int64_t count, qs_dtype dt, int peer, qs_stream *s, int *req) {
    qs_coll_args a = {.kind = QS_COLL_SEND, .send = buf, .count = count, .dt = dt, .peer = peer, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_recv(qs_coll *c, void *buf, int64_t count, qs_dtype dt, int peer, qs_stream *s, int *req) {
    qs_coll_args a = {.kind = QS_COLL_RECV, .recv = buf, .count = count, .dt = dt, .peer = peer, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_sendrecv(qs_coll *c, const void *send, int to, void *recv, int from, int64_t count, qs_dtype dt,
                           qs_stream *s, int *req) {
    qs_coll_args a = {.kind = QS_COLL_SENDRECV, .send = send, .recv = recv, .count = count, .dt = dt, .peer = to,
                      .from = from, .s = s};
    return qs_coll_start(c, &a, req);
}

qs_status qs_coll_progress(qs_coll *c) { return c->broken ? qs_coll_broken("progress") : c->ops->progress(c); }

qs_status qs_coll_test(qs_coll *c, int req, bool *done) {
    *done = false;
    if (req < 0 || req >= c->cap || !c->used[req])
        return QS_FAIL(QS_ERR_INTERNAL, "collective handle %d is not outstanding", req);
    if (c->broken) return qs_coll_broken("a test");
    QS_TRY(c->ops->test(c, req, done));
    if (*done) c->used[req] = false;
    return QS_OK;
}

void qs_coll_cancel(qs_coll *c, int req) {
    if (req < 0 || req >= c->cap || !c->used[req]) return;
    if (!c->ops->cancel(c, req)) c->broken = true;
    c->used[req] = false;
}

qs_status qs_coll_wait(qs_coll *c, int req, double timeout_s) {
    const double t0 = qs_now_ms();
    for (;;) {
        bool done;
        QS_TRY(qs_coll_test(c, req, &done));
        if (done) return QS_OK;
        qs_comm_heartbeat(c->comm);
        if (timeout_s > 0 && qs_now_ms() - t0 > 1e3 * timeout_s) {
            char what[128];
            snprintf(what, sizeof what, "%s %s of %lld elements (%s)", qs_coll_kinds[c->kind[req]][0],
                     qs_coll_kinds[c->kind[req]][1], (long long)c->elems[req], qs_coll_transport_name(c->transport));
            const qs_status st = qs_comm_timeout_error(c->comm, what, timeout_s);
            qs_coll_cancel(c, req);
            return st;
        }
        if (c->ops->nap_us) {
            struct timespec nap = {0, 1000L * c->ops->nap_us};
            nanosleep(&nap, NULL);
        }
    }
}
