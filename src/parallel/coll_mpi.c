/* src/parallel/coll_mpi.c — defines: the mpi transport of the communication interface
 * (coll_impl.h): host buffers, MPI's non-blocking collectives on the world communicator
 * (MPI_Iallreduce, MPI_Ireduce_scatter[_block], MPI_Iallgather[v], MPI_Ialltoall, MPI_Isend /
 * MPI_Irecv). Open MPI progresses them only inside MPI calls: in test, progress and wait. A
 * group of one (no launcher, or one rank) copies locally and completes at once. Sums are MPI's
 * (its reduction order, as training has always used on the CPU). */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/coll_impl.h"
#include "parallel/comm_mpi.h"

#define QS_COLL_TAG_P2P 7208 /* send / recv (comm_mpi.c's announcements use 7207) */
#define QS_MPI_PARTS 4       /* an all-reduce of more than INT_MAX elements is split, up to 4 parts */

typedef struct mpi_req {
    MPI_Request r[QS_MPI_PARTS];
    int n;         /* requests in r */
    bool done;     /* completed, not yet reported */
    int *ints;     /* the v calls' counts and displacements, alive until completion */
} mpi_req;

typedef struct mpi_impl {
    mpi_req *reqs; /* [c->cap] */
} mpi_impl;

/* The MPI type of dt: a sum needs a real one (f32, s32, i64); moving data any of its size. */
static MPI_Datatype mpi_type(qs_dtype dt, bool sum) {
    switch (dt) {
    case QS_F32: return MPI_FLOAT;
    case QS_S32: return MPI_INT32_T;
    case QS_I64: return MPI_INT64_T;
    default: break;
    }
    if (sum) return MPI_DATATYPE_NULL;
    switch (qs_dtype_size(dt)) {
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
    }
}

/* A group of one: the result is the input. */
static void mpi_local(const qs_coll_args *a) {
    const size_t bytes = (size_t)qs_coll_piece(a, 0) * a->esize;
    if (bytes && (a->kind == QS_COLL_REDUCE_SCATTER || a->kind == QS_COLL_ALLTOALL ||
                  (a->kind == QS_COLL_ALLGATHER && !a->in_place)))
        memcpy(a->recv, a->send, bytes);
}

/* The sum all-reduce in parts of at most INT_MAX elements. */
static qs_status mpi_allreduce(const qs_coll_args *a, MPI_Datatype t, mpi_req *q) {
    char *buf = a->recv;
    for (int64_t off = 0; off < a->count; off += INT_MAX) {
        if (q->n == QS_MPI_PARTS)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "all-reduce of %lld elements is too large", (long long)a->count);
        const int cnt = (int)(a->count - off < INT_MAX ? a->count - off : INT_MAX);
        QS_TRY(qs_mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf + (size_t)off * a->esize, cnt, t, MPI_SUM, MPI_COMM_WORLD,
                                           &q->r[q->n]),
                            "Iallreduce"));
        q->n++;
    }
    return QS_OK;
}

/* The counts (and, after them, the displacements) of a v call as MPI's ints. */
static qs_status mpi_ints(const qs_coll *c, const qs_coll_args *a, mpi_req *q) {
    q->ints = malloc(2 * (size_t)c->world * sizeof *q->ints);
    if (!q->ints) return QS_FAIL(QS_ERR_OOM, "out of memory for a %s's counts", qs_coll_kind_name(a->kind));
    for (int p = 0; p < c->world; p++) {
        q->ints[p] = (int)qs_coll_piece(a, p);
        q->ints[c->world + p] = (int)qs_coll_displ(a, p);
    }
    return QS_OK;
}

/* Every collective but the all-reduce: one request (counts checked to fit MPI's int). */
static qs_status mpi_other(qs_coll *c, const qs_coll_args *a, MPI_Datatype t, mpi_req *q) {
    const int64_t biggest = a->kind >= QS_COLL_SEND ? a->count : a->total;
    if (biggest > INT_MAX) return qs_coll_unsupported(c, a, "more than INT_MAX elements");
    const MPI_Comm w = MPI_COMM_WORLD;
    const int n = (int)a->count, W = c->world;
    MPI_Request *r = &q->r[q->n++];
    switch (a->kind) {
    case QS_COLL_REDUCE_SCATTER:
        if (!a->counts)
            return qs_mpi_check(MPI_Ireduce_scatter_block(a->send, a->recv, n, t, MPI_SUM, w, r), "Ireduce_scatter_block");
        QS_TRY(mpi_ints(c, a, q));
        return qs_mpi_check(MPI_Ireduce_scatter(a->send, a->recv, q->ints, t, MPI_SUM, w, r), "Ireduce_scatter");
    case QS_COLL_ALLGATHER: {
        const void *send = a->in_place ? MPI_IN_PLACE : a->send;
        if (!a->counts) return qs_mpi_check(MPI_Iallgather(send, n, t, a->recv, n, t, w, r), "Iallgather");
        QS_TRY(mpi_ints(c, a, q));
        return qs_mpi_check(MPI_Iallgatherv(send, q->ints[c->rank], t, a->recv, q->ints, q->ints + W, t, w, r),
                            "Iallgatherv");
    }
    case QS_COLL_ALLTOALL: return qs_mpi_check(MPI_Ialltoall(a->send, n, t, a->recv, n, t, w, r), "Ialltoall");
    case QS_COLL_SEND: return qs_mpi_check(MPI_Isend(a->send, n, t, a->peer, QS_COLL_TAG_P2P, w, r), "Isend");
    case QS_COLL_RECV: return qs_mpi_check(MPI_Irecv(a->recv, n, t, a->peer, QS_COLL_TAG_P2P, w, r), "Irecv");
    case QS_COLL_SENDRECV:
        QS_TRY(qs_mpi_check(MPI_Irecv(a->recv, n, t, a->from, QS_COLL_TAG_P2P, w, r), "Irecv"));
        return qs_mpi_check(MPI_Isend(a->send, n, t, a->peer, QS_COLL_TAG_P2P, w, &q->r[q->n++]), "Isend");
    default: return QS_FAIL(QS_ERR_INTERNAL, "mpi transport: collective kind %d", (int)a->kind);
    }
}

static qs_status mpi_start(qs_coll *c, const qs_coll_args *a, int req) {
    mpi_impl *x = c->impl;
    mpi_req *q = &x->reqs[req];
    memset(q, 0, sizeof *q);
    const MPI_Datatype t = mpi_type(a->dt, a->kind == QS_COLL_ALLREDUCE || a->kind == QS_COLL_REDUCE_SCATTER);
    if (t == MPI_DATATYPE_NULL) return qs_coll_unsupported(c, a, "MPI sums f32, s32 and i64");
    if (c->world == 1) {
        mpi_local(a);
        q->done = true;
        return QS_OK;
    }
    const qs_status st = a->kind == QS_COLL_ALLREDUCE ? mpi_allreduce(a, t, q) : mpi_other(c, a, t, q);
    if (st != QS_OK) free(q->ints);
    return st;
}

/* Test one request's parts; mark it done. */
static qs_status mpi_poll(mpi_req *q) {
    if (q->done) return QS_OK;
    int flag = 1;
    if (q->n > 0) QS_TRY(qs_mpi_check(MPI_Testall(q->n, q->r, &flag, MPI_STATUSES_IGNORE), "Testall"));
    if (!flag) return QS_OK;
    q->done = true;
    free(q->ints);
    q->ints = NULL;
    return QS_OK;
}

static qs_status mpi_progress(qs_coll *c) {
    mpi_impl *x = c->impl;
    for (int r = 0; r < c->cap; r++)
        if (c->used[r]) QS_TRY(mpi_poll(&x->reqs[r]));
    return QS_OK;
}

static qs_status mpi_test(qs_coll *c, int req, bool *done) {
    mpi_impl *x = c->impl;
    QS_TRY(mpi_poll(&x->reqs[req]));
    *done = x->reqs[req].done;
    return QS_OK;
}

/* Point to point can be cancelled; MPI forbids cancelling a collective, so it is abandoned
 * (its requests and counts left to MPI) and the ranks are out of step. */
static bool mpi_cancel(qs_coll *c, int req) {
    mpi_impl *x = c->impl;
    mpi_req *q = &x->reqs[req];
    if (q->done) return true;
    if (c->kind[req] < QS_COLL_SEND) {
        q->ints = NULL;
        return false;
    }
    for (int i = 0; i < q->n; i++) {
        (void)MPI_Cancel(&q->r[i]);
        (void)MPI_Request_free(&q->r[i]);
    }
    return true;
}

static void mpi_close(qs_coll *c) {
    mpi_impl *x = c->impl;
    if (!x) return;
    free(x->reqs); /* the counts of collectives still in flight stay MPI's */
    free(x);
}

static const qs_coll_ops mpi_ops = {
    .nap_us = 0, .start = mpi_start, .progress = mpi_progress, .test = mpi_test, .cancel = mpi_cancel,
    .reg = NULL, .close = mpi_close,
};

qs_status qs_coll_mpi_open(qs_coll *c) {
    mpi_impl *x = calloc(1, sizeof *x);
    if (x) x->reqs = calloc((size_t)c->cap, sizeof *x->reqs);
    if (!x || !x->reqs) {
        free(x);
        return QS_FAIL(QS_ERR_OOM, "out of memory for the mpi transport");
    }
    c->impl = x;
    c->ops = &mpi_ops;
    return QS_OK;
}
