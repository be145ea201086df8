/* src/cuda/cuda_nccl.c — defines: NCCL's entry points loaded by dlopen, behind plain C types
 * (cuda_nccl.h). */
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_nccl.h"

_Static_assert(sizeof(ncclUniqueId) == QS_CUDA_NCCL_ID_BYTES, "NCCL unique id size");

/* The NCCL entry points qsync calls, from libnccl.so.2 (loaded once, on first use). */
typedef struct nccl_api {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                   cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
} nccl_api;

static nccl_api g_nccl;
static bool g_nccl_loaded;

qs_status qs_cuda_nccl_load(void) {
    if (g_nccl_loaded) return QS_OK;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "ranks on different GPUs communicate through NCCL, but libnccl.so.2 could "
                       "not be loaded (%s): install NCCL or put its directory on LD_LIBRARY_PATH", dlerror());
    struct { void **fn; const char *name; } syms[] = {
        {(void **)&g_nccl.get_unique_id, "ncclGetUniqueId"},   {(void **)&g_nccl.comm_init_rank, "ncclCommInitRank"},
        {(void **)&g_nccl.all_reduce, "ncclAllReduce"},        {(void **)&g_nccl.reduce_scatter, "ncclReduceScatter"},
        {(void **)&g_nccl.reduce, "ncclReduce"},               {(void **)&g_nccl.all_gather, "ncclAllGather"},
        {(void **)&g_nccl.broadcast, "ncclBroadcast"},         {(void **)&g_nccl.send, "ncclSend"},
        {(void **)&g_nccl.recv, "ncclRecv"},                   {(void **)&g_nccl.group_start, "ncclGroupStart"},
        {(void **)&g_nccl.group_end, "ncclGroupEnd"},          {(void **)&g_nccl.async_error, "ncclCommGetAsyncError"},
        {(void **)&g_nccl.comm_abort, "ncclCommAbort"},        {(void **)&g_nccl.comm_destroy, "ncclCommDestroy"},
        {(void **)&g_nccl.error_string, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].fn = dlsym(h, syms[i].name)))
            return QS_FAIL(QS_ERR_UNSUPPORTED, "libnccl.so.2 has no %s: NCCL 2.7 or later is needed", syms[i].name);
    g_nccl_loaded = true;
    return QS_OK;
}

#define QS_NCCL_TRY(call)                                                                                  \
    do {                                                                                                   \
        ncclResult_t qs_nc_err_ = (call);                                                                  \
        if (qs_nc_err_ != ncclSuccess)                                                                     \
            return QS_FAIL(QS_ERR_BACKEND, "%s failed: %s", #call, g_nccl.error_string(qs_nc_err_));       \
    } while (0)

static ncclComm_t nc_of(qs_cuda_nccl *nc) { return (ncclComm_t)nc; }

qs_status qs_cuda_nccl_unique_id(unsigned char id[QS_CUDA_NCCL_ID_BYTES]) {
    ncclUniqueId u;
    QS_NCCL_TRY(g_nccl.get_unique_id(&u));
    memcpy(id, &u, sizeof u);
    return QS_OK;
}

qs_status qs_cuda_nccl_init(qs_backend *be, int world, int rank, const unsigned char id[QS_CUDA_NCCL_ID_BYTES],
                            qs_cuda_nccl **out) {
    *out = NULL;
    QS_TRY(qs_cuda_make_current(qs_cuda_be(be)));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    ncclComm_t c = NULL;
    const ncclResult_t r = g_nccl.comm_init_rank(&c, world, u, rank);
    if (r != ncclSuccess)
        return QS_FAIL(QS_ERR_BACKEND, "ncclCommInitRank (rank %d of %d) failed: %s", rank, world,
                       g_nccl.error_string(r));
    *out = (qs_cuda_nccl *)c;
    return QS_OK;
}

/* NCCL's type for dt; a sum needs an arithmetic one. */
static bool nccl_type(qs_dtype dt, bool sum, ncclDataType_t *t) {
    switch (dt) {
    case QS_F32: *t = ncclFloat32; return true;
    case QS_BF16: *t = ncclBfloat16; return true;
    case QS_F16: *t = ncclFloat16; return true;
    case QS_S32: *t = ncclInt32; return true;
    case QS_I64: *t = ncclInt64; return true;
    case QS_S8: *t = ncclInt8; return !sum;
    default: *t = ncclUint8; return !sum && qs_dtype_size(dt) == 1;
    }
}

bool qs_cuda_nccl_has_dtype(qs_dtype dt, bool sum) {
    ncclDataType_t t;
    return nccl_type(dt, sum, &t);
}

/* The type of dt, or QS_ERR_UNSUPPORTED from the enclosing function. */
#define QS_NCCL_TYPE(dt, sum, t)                                                                            \
    ncclDataType_t t;                                                                                       \
    if (!nccl_type((dt), (sum), &t))                                                                        \
        return QS_FAIL(QS_ERR_UNSUPPORTED, "NCCL has no %s of %s", (sum) ? "sum" : "type", qs_dtype_name(dt))

qs_status qs_cuda_nccl_all_reduce(qs_cuda_nccl *nc, const void *send, void *recv, size_t count, qs_dtype dt,
                                  qs_stream *s) {
    QS_NCCL_TYPE(dt, true, t);
    QS_NCCL_TRY(g_nccl.all_reduce(send, recv, count, t, ncclSum, nc_of(nc), s->s));
    return QS_OK;
}

qs_status qs_cuda_nccl_reduce_scatter(qs_cuda_nccl *nc, const void *send, void *recv, size_t recv_count, qs_dtype dt,
                                      qs_stream *s) {
    QS_NCCL_TYPE(dt, true, t);
    QS_NCCL_TRY(g_nccl.reduce_scatter(send, recv, recv_count, t, ncclSum, nc_of(nc), s->s));
    return QS_OK;
}

qs_status qs_cuda_nccl_reduce(qs_cuda_nccl *nc, const void *send, void *recv, size_t count, qs_dtype dt, int root,
                              qs_stream *s) {
    QS_NCCL_TYPE(dt, true, t);
    QS_NCCL_TRY(g_nccl.reduce(send, recv, count, t, ncclSum, root, nc_of(nc), s->s));
    return QS_OK;
}

qs_status qs_cuda_nccl_all_gather(qs_cuda_nccl *nc, const void *send, void *recv, size_t send_count, qs_dtype dt,
                                  qs_stream *s) {
    QS_NCCL_TYPE(dt, false, t);
    QS_NCCL_TRY(g_nccl.all_gather(send, recv, send_count, t, nc_of(nc), s->s));
    return QS_OK;
}

qs_status qs_cuda_nccl_broadcast(qs_cuda_nccl *nc, const void *send, void *recv, size_t count, qs_dtype dt, int root,
                                 qs_stream *s) {
    QS_NCCL_TYPE(dt, false, t);
    QS_NCCL_TRY(g_nccl.broadcast(send, recv, count, t, root, nc_of(nc), s->s));
    return QS_OK;
}

qs_status qs_cuda_nccl_send(qs_cuda_nccl *nc, const void *buf, size_t count, qs_dtype dt, int peer, qs_stream *s) {
    QS_NCCL_TYPE(dt, false, t);
    QS_NCCL_TRY(g_nccl.send(buf, count, t, peer, nc_of(nc), s->s));
    return QS_OK;
}

qs_status qs_cuda_nccl_recv(qs_cuda_nccl *nc, void *buf, size_t count, qs_dtype dt, int peer, qs_stream *s) {
    QS_NCCL_TYPE(dt, false, t);
    QS_NCCL_TRY(g_nccl.recv(buf, count, t, peer, nc_of(nc), s->s));
    return QS_OK;
}

qs_status qs_cuda_nccl_group_start(void) {
    QS_NCCL_TRY(g_nccl.group_start());
    return QS_OK;
}

qs_status qs_cuda_nccl_group_end(void) {
    QS_NCCL_TRY(g_nccl.group_end());
    return QS_OK;
}

qs_status qs_cuda_nccl_async_error(qs_cuda_nccl *nc) {
    ncclResult_t e = ncclSuccess;
    QS_NCCL_TRY(g_nccl.async_error(nc_of(nc), &e));
    if (e != ncclSuccess && e != ncclInProgress)
        return QS_FAIL(QS_ERR_BACKEND, "NCCL reported an asynchronous error: %s", g_nccl.error_string(e));
    return QS_OK;
}

void qs_cuda_nccl_abort(qs_cuda_nccl *nc) {
    if (nc) (void)g_nccl.comm_abort(nc_of(nc));
}

void qs_cuda_nccl_destroy(qs_cuda_nccl *nc) {
    if (nc) (void)g_nccl.comm_destroy(nc_of(nc));
}
