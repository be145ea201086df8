/* src/cuda/cuda_nccl.c — the GPU layout of a job's ranks and the NCCL all-reduce between ranks
 * on different GPUs (contract: src/parallel/nccl_reduce.h). */
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "cuda/cuda_backend.h"
#include "parallel/nccl_reduce.h"

/* The NCCL entry points qsync calls, from libnccl.so.2 (loaded once, on first use). */
typedef struct nccl_api {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
} nccl_api;

static nccl_api g_nccl;
static bool g_nccl_loaded;

static qs_status nccl_load(void) {
    if (g_nccl_loaded) return QS_OK;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "ranks on different GPUs reduce through NCCL, but libnccl.so.2 could not "
                       "be loaded (%s): install NCCL or put its directory on LD_LIBRARY_PATH", dlerror());
    struct { void **fn; const char *name; } syms[] = {
        {(void **)&g_nccl.get_unique_id, "ncclGetUniqueId"},   {(void **)&g_nccl.comm_init_rank, "ncclCommInitRank"},
        {(void **)&g_nccl.all_reduce, "ncclAllReduce"},        {(void **)&g_nccl.async_error, "ncclCommGetAsyncError"},
        {(void **)&g_nccl.comm_abort, "ncclCommAbort"},        {(void **)&g_nccl.comm_destroy, "ncclCommDestroy"},
        {(void **)&g_nccl.error_string, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].fn = dlsym(h, syms[i].name)))
            return QS_FAIL(QS_ERR_UNSUPPORTED, "libnccl.so.2 has no %s: a NCCL 2 release is needed", syms[i].name);
    g_nccl_loaded = true;
    return QS_OK;
}

#define QS_NCCL_TRY(call)                                                                                  \
    do {                                                                                                   \
        ncclResult_t qs_nc_err_ = (call);                                                                  \
        if (qs_nc_err_ != ncclSuccess)                                                                     \
            return QS_FAIL(QS_ERR_BACKEND, "%s failed: %s", #call, g_nccl.error_string(qs_nc_err_));       \
    } while (0)

qs_status qs_gpu_layout_of(qs_backend *be, qs_comm *comm, double timeout_s, qs_gpu_layout *out, int *n_gpus) {
    if (!be || strcmp(be->ops->name, "cuda") != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the GPU layout needs the CUDA backend");
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    char *uuid = malloc((size_t)world * 16);
    if (!uuid) return QS_FAIL(QS_ERR_OOM, "out of memory for the GPU layout");
    memcpy(uuid + 16 * rank, qs_cuda_be(be)->props.uuid.bytes, 16);
    qs_status st = QS_OK;
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
}

struct qs_nccl_reduce {
    qs_backend *be;
    qs_comm *comm;
    float *buf;
    size_t bytes;
    double timeout_s;
    ncclComm_t nc;
    cudaStream_t stream;   /* the reductions' stream */
    cudaEvent_t ready, done;
};

/* Rank 0's unique id to every rank (an empty message: rank 0 could not make one). */
static qs_status share_unique_id(qs_nccl_reduce *x, bool loaded, ncclUniqueId *id) {
    const int rank = qs_comm_rank(x->comm);
    char *msg = NULL;
    size_t n = 0;
    qs_status st = QS_OK;
    if (rank == 0 && loaded) {
        ncclResult_t r = g_nccl.get_unique_id(id);
        if (r == ncclSuccess) {
            msg = (char *)id;
            n = sizeof *id;
        } else {
            st = QS_FAIL(QS_ERR_BACKEND, "ncclGetUniqueId failed: %s", g_nccl.error_string(r));
        }
    }
    QS_TRY(qs_comm_bcast_bytes(x->comm, 0, &msg, &n, x->timeout_s));
    if (rank == 0) return st;
    if (n == sizeof *id) memcpy(id, msg, sizeof *id);
    else st = QS_FAIL(QS_ERR_BACKEND, "rank 0 could not make NCCL's unique id (its own message says why)");
    free(msg);
    return st;
}

/* Every rank learns whether all got this far; the first failure is kept. */
static qs_status agree(qs_nccl_reduce *x, qs_status st) {
    uint64_t lo = 1, hi = 1;
    const qs_status a = qs_comm_allreduce_minmax_u64(x->comm, st == QS_OK, &lo, &hi, x->timeout_s);
    if (st != QS_OK) return st;
    if (a != QS_OK) return a;
    return lo ? QS_OK : QS_FAIL(QS_ERR_BACKEND, "another rank could not set up the NCCL all-reduce (its own message "
                                "says why)");
}

static qs_status make_stream(qs_nccl_reduce *x) {
    QS_TRY(qs_cuda_make_current(qs_cuda_be(x->be)));
    QS_CUDA_TRY(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
    QS_CUDA_TRY(cudaEventCreateWithFlags(&x->ready, cudaEventDisableTiming));
    QS_CUDA_TRY(cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming));
    return QS_OK;
}

qs_status qs_nccl_reduce_open(qs_backend *be, qs_comm *comm, void *buf, size_t bytes, double timeout_s,
                              qs_nccl_reduce **out) {
    *out = NULL;
    if (!be || strcmp(be->ops->name, "cuda") != 0 || bytes % sizeof(float) != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the NCCL all-reduce needs a CUDA buffer of whole floats (%zu bytes)", bytes);
    qs_nccl_reduce *x = calloc(1, sizeof *x);
    if (!x) return QS_FAIL(QS_ERR_OOM, "out of memory for the NCCL all-reduce");
    *x = (qs_nccl_reduce){.be = be, .comm = comm, .buf = buf, .bytes = bytes, .timeout_s = timeout_s};
    qs_status st = nccl_load();
    ncclUniqueId id;
    const qs_status shared = share_unique_id(x, st == QS_OK, &id); /* taken part in after a local failure too */
    if (st == QS_OK) st = shared;
    if (st == QS_OK) st = make_stream(x);
    st = agree(x, st); /* ncclCommInitRank blocks until every rank joins: only all or none */
    if (st == QS_OK) {
        setenv("NCCL_NVLS_ENABLE", "0", 1); /* NVLink SHARP multicast stays off (nccl_reduce.h) */
        ncclResult_t r = g_nccl.comm_init_rank(&x->nc, qs_comm_world(comm), id, qs_comm_rank(comm));
        if (r != ncclSuccess) {
            x->nc = NULL;
            st = QS_FAIL(QS_ERR_BACKEND, "ncclCommInitRank (rank %d of %d) failed: %s", qs_comm_rank(comm),
                         qs_comm_world(comm), g_nccl.error_string(r));
        }
        st = agree(x, st);
    }
    if (st != QS_OK) {
        qs_nccl_reduce_close(x);
        return st;
    }
    *out = x;
    return QS_OK;
}

qs_status qs_nccl_reduce_start(qs_nccl_reduce *x, qs_stream *s, size_t off, size_t bytes) {
    if (!x->nc) return QS_FAIL(QS_ERR_BACKEND, "the NCCL communicator was aborted");
    if (off % sizeof(float) || bytes % sizeof(float) || off + bytes > x->bytes)
        return QS_FAIL(QS_ERR_INTERNAL, "NCCL all-reduce of %zu bytes at %zu outside the %zu-byte buffer", bytes, off,
                       x->bytes);
    QS_CUDA_TRY(cudaEventRecord(x->ready, s->s));
    QS_CUDA_TRY(cudaStreamWaitEvent(x->stream, x->ready, 0));
    float *p = x->buf + off / sizeof(float);
    QS_NCCL_TRY(g_nccl.all_reduce(p, p, bytes / sizeof(float), ncclFloat32, ncclSum, x->nc, x->stream));
    return QS_OK;
}

qs_status qs_nccl_reduce_poll(qs_nccl_reduce *x) {
    if (!x->nc) return QS_FAIL(QS_ERR_BACKEND, "the NCCL communicator was aborted");
    ncclResult_t e = ncclSuccess;
    QS_NCCL_TRY(g_nccl.async_error(x->nc, &e));
    if (e != ncclSuccess && e != ncclInProgress)
        return QS_FAIL(QS_ERR_BACKEND, "NCCL reported an asynchronous error: %s", g_nccl.error_string(e));
    return QS_OK;
}

qs_status qs_nccl_reduce_finish(qs_nccl_reduce *x, qs_stream *s) {
    QS_CUDA_TRY(cudaEventRecord(x->done, x->stream));
    const double t0 = qs_now_ms();
    for (;;) {
        cudaError_t q = cudaEventQuery(x->done);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) QS_CUDA_TRY(q);
        QS_TRY(qs_nccl_reduce_poll(x));
        if (qs_now_ms() - t0 > 1e3 * x->timeout_s) {
            (void)g_nccl.comm_abort(x->nc);
            x->nc = NULL;
            return QS_FAIL(QS_ERR_TIMEOUT, "the NCCL all-reduce did not complete within %g s: a peer stalled or "
                           "died (the communicator is aborted)", x->timeout_s);
        }
        struct timespec nap = {0, 50000}; /* 50 µs between looks */
        nanosleep(&nap, NULL);
    }
    QS_CUDA_TRY(cudaStreamWaitEvent(s->s, x->done, 0));
    return QS_OK;
}

void qs_nccl_reduce_close(qs_nccl_reduce *x) {
    if (!x) return;
    if (x->stream) (void)cudaStreamSynchronize(x->stream);
    if (x->nc) (void)g_nccl.comm_destroy(x->nc);
    if (x->ready) (void)cudaEventDestroy(x->ready);
    if (x->done) (void)cudaEventDestroy(x->done);
    if (x->stream) (void)cudaStreamDestroy(x->stream);
    free(x);
}
