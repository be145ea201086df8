/* src/parallel/coll_nccl.c — defines: the nccl transport of the communication interface
 * (coll_impl.h): device buffers, one GPU per rank (ranks sharing one GPU use ipc: NCCL refuses
 * two ranks on one GPU). NCCL's entry points are src/cuda/cuda_nccl.h; the set-up protocol is
 * here: one communicator per job, rank 0 makes the unique id and broadcasts it over the process
 * group, and every rank fails when any does.
 *
 * A collective is enqueued on the transport's own stream once its inputs are final on the
 * caller's stream, so it runs beside the caller's later work; an event recorded after it tells
 * test when it has completed (test checks NCCL's asynchronous error state meanwhile). Equal
 * pieces use NCCL's own collectives; per-rank pieces are a group of ncclReduce (reduce-scatter)
 * or ncclBroadcast (all-gather), one per root; all-to-all a group of send/recv pairs, send-recv
 * a group of one send and one recv. A wait
 * that times out aborts the communicator (cancel). */
#include "parallel/coll_impl.h"

#include <stdlib.h>
#include <string.h>

#ifndef QS_HAVE_CUDA
qs_status qs_coll_nccl_open(qs_coll *c) {
    (void)c;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "the nccl transport is not in this build: it was configured without the CUDA "
                   "backend");
}
#else
#include "cuda/cuda_ipc.h"
#include "cuda/cuda_nccl.h"

typedef struct nccl_impl {
    qs_cuda_nccl *nc;      /* NULL once aborted */
    qs_stream *stream;     /* the transport's stream */
    qs_cuda_event *ready;  /* the caller's stream, recorded at each start */
    qs_cuda_event **done;  /* [cap]: after each handle's collective, made on first use */
    qs_stream **caller;    /* [cap]: the stream each handle's start was given */
} nccl_impl;

/* Rank 0's unique id to every rank (an empty message: rank 0 could not make one). */
static qs_status nccl_share_id(qs_coll *c, bool loaded, unsigned char *id) {
    char *msg = NULL;
    size_t n = 0;
    qs_status st = QS_OK;
    if (c->rank == 0 && loaded) {
        st = qs_cuda_nccl_unique_id(id);
        if (st == QS_OK) {
            msg = (char *)id;
            n = QS_CUDA_NCCL_ID_BYTES;
        }
    }
    QS_TRY(qs_comm_bcast_bytes(c->comm, 0, &msg, &n, c->timeout_s));
    if (c->rank == 0) return st;
    if (n == QS_CUDA_NCCL_ID_BYTES) memcpy(id, msg, n);
    else st = QS_FAIL(QS_ERR_BACKEND, "rank 0 could not make NCCL's unique id (its own message says why)");
    free(msg);
    return st;
}

/* Pieces per root: reduce-scatter as ncclReduce, all-gather as ncclBroadcast. */
static qs_status nccl_per_root(qs_coll *c, nccl_impl *x, const qs_coll_args *a) {
    for (int p = 0; p < c->world; p++) {
        const size_t n = (size_t)qs_coll_piece(a, p), at = (size_t)qs_coll_displ(a, p) * a->esize;
        if (a->kind == QS_COLL_REDUCE_SCATTER)
            QS_TRY(qs_cuda_nccl_reduce(x->nc, (const char *)a->send + at, a->recv, n, a->dt, p, x->stream));
        else
            QS_TRY(qs_cuda_nccl_broadcast(x->nc, a->send, (char *)a->recv + at, n, a->dt, p, x->stream));
    }
    return QS_OK;
}

/* All-to-all: piece p of send to rank p, piece p of recv from it. */
static qs_status nccl_pairs(qs_coll *c, nccl_impl *x, const qs_coll_args *a) {
    const size_t piece = (size_t)a->count * a->esize;
    for (int p = 0; p < c->world; p++) {
        QS_TRY(qs_cuda_nccl_send(x->nc, (const char *)a->send + p * piece, (size_t)a->count, a->dt, p, x->stream));
        QS_TRY(qs_cuda_nccl_recv(x->nc, (char *)a->recv + p * piece, (size_t)a->count, a->dt, p, x->stream));
    }
    return QS_OK;
}

/* Enqueue a on the transport's stream; the groups end even after a failure inside them. */
static qs_status nccl_enqueue(qs_coll *c, nccl_impl *x, const qs_coll_args *a) {
    const size_t n = (size_t)a->count;
    switch (a->kind) {
    case QS_COLL_ALLREDUCE: return qs_cuda_nccl_all_reduce(x->nc, a->send, a->recv, n, a->dt, x->stream);
    case QS_COLL_SEND: return qs_cuda_nccl_send(x->nc, a->send, n, a->dt, a->peer, x->stream);
    case QS_COLL_RECV: return qs_cuda_nccl_recv(x->nc, a->recv, n, a->dt, a->peer, x->stream);
    case QS_COLL_SENDRECV: break;
    case QS_COLL_REDUCE_SCATTER:
        if (!a->counts) return qs_cuda_nccl_reduce_scatter(x->nc, a->send, a->recv, n, a->dt, x->stream);
        break;
    case QS_COLL_ALLGATHER:
        if (!a->counts) return qs_cuda_nccl_all_gather(x->nc, a->send, a->recv, n, a->dt, x->stream);
        break;
    default: break;
    }
    QS_TRY(qs_cuda_nccl_group_start());
    qs_status st = QS_OK;
    if (a->kind == QS_COLL_SENDRECV) {
        st = qs_cuda_nccl_send(x->nc, a->send, n, a->dt, a->peer, x->stream);
        if (st == QS_OK) st = qs_cuda_nccl_recv(x->nc, a->recv, n, a->dt, a->from, x->stream);
    } else {
        st = a->kind == QS_COLL_ALLTOALL ? nccl_pairs(c, x, a) : nccl_per_root(c, x, a);
    }
    const qs_status end = qs_cuda_nccl_group_end();
    return st != QS_OK ? st : end;
}

static qs_status nccl_start(qs_coll *c, const qs_coll_args *a, int req) {
    nccl_impl *x = c->impl;
    if (!x->nc) return QS_FAIL(QS_ERR_BACKEND, "the NCCL communicator was aborted");
    if (!qs_cuda_nccl_has_dtype(a->dt, a->kind == QS_COLL_ALLREDUCE || a->kind == QS_COLL_REDUCE_SCATTER))
        return qs_coll_unsupported(c, a, "NCCL sums f32, bf16, f16, s32 and i64");
    if (!x->done[req]) QS_TRY(qs_cuda_ipc_event_create(c->be, false, &x->done[req]));
    QS_TRY(qs_cuda_ipc_event_record(x->ready, a->s));
    QS_TRY(qs_cuda_ipc_stream_wait(x->stream, x->ready));
    QS_TRY(nccl_enqueue(c, x, a));
    QS_TRY(qs_cuda_ipc_event_record(x->done[req], x->stream));
    x->caller[req] = a->s;
    return QS_OK;
}

static qs_status nccl_progress(qs_coll *c) {
    nccl_impl *x = c->impl;
    if (!x->nc) return QS_FAIL(QS_ERR_BACKEND, "the NCCL communicator was aborted");
    return qs_cuda_nccl_async_error(x->nc);
}

static qs_status nccl_test(qs_coll *c, int req, bool *done) {
    nccl_impl *x = c->impl;
    QS_TRY(qs_cuda_ipc_event_query(x->done[req], done));
    if (!*done) return nccl_progress(c);
    return qs_cuda_ipc_stream_wait(x->caller[req], x->done[req]);
}

static bool nccl_cancel(qs_coll *c, int req) {
    nccl_impl *x = c->impl;
    (void)req;
    qs_cuda_nccl_abort(x->nc);
    x->nc = NULL;
    return false;
}

static void nccl_close(qs_coll *c) {
    nccl_impl *x = c->impl;
    if (!x) return;
    qs_cuda_ipc_stream_destroy(x->stream);
    qs_cuda_nccl_destroy(x->nc);
    qs_cuda_ipc_event_destroy(x->ready);
    for (int r = 0; x->done && r < c->cap; r++) qs_cuda_ipc_event_destroy(x->done[r]);
    free(x->done);
    free(x->caller);
    free(x);
}

static const qs_coll_ops nccl_ops = {
    .nap_us = 50, .start = nccl_start, .progress = nccl_progress, .test = nccl_test, .cancel = nccl_cancel,
    .reg = NULL, .close = nccl_close,
};

qs_status qs_coll_nccl_open(qs_coll *c) {
    nccl_impl *x = calloc(1, sizeof *x);
    if (!x) return QS_FAIL(QS_ERR_OOM, "out of memory for the nccl transport");
    c->impl = x;
    c->ops = &nccl_ops;
    x->done = calloc((size_t)c->cap, sizeof *x->done);
    x->caller = calloc((size_t)c->cap, sizeof *x->caller);
    qs_status st = x->done && x->caller ? qs_cuda_nccl_load() : QS_FAIL(QS_ERR_OOM, "out of memory for the nccl transport");
    unsigned char id[QS_CUDA_NCCL_ID_BYTES];
    const qs_status shared = nccl_share_id(c, st == QS_OK, id); /* taken part in after a local failure too */
    if (st == QS_OK) st = shared;
    if (st == QS_OK) st = qs_cuda_ipc_stream_create(c->be, &x->stream);
    if (st == QS_OK) st = qs_cuda_ipc_event_create(c->be, false, &x->ready);
    st = qs_coll_agree(c, st, "the NCCL transport"); /* ncclCommInitRank blocks until every rank joins: all or none */
    if (st == QS_OK) st = qs_cuda_nccl_init(c->be, c->world, c->rank, id, &x->nc);
    return qs_coll_agree(c, st, "the NCCL transport");
}
#endif
