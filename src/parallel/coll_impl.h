/* src/parallel/coll_impl.h — defines: what a transport of the communication interface
 * (parallel/coll.h) implements — its table of operations and the checked description of one
 * collective — and the communicator they share. Private to coll*.c.
 *
 * coll.c checks every argument (counts, dtype, peer, overlap, the stream) and hands out the
 * handles; a transport's start only has to run the collective it is given, or refuse it with
 * QS_ERR_UNSUPPORTED through qs_coll_unsupported. To add a collective: a kind here, its
 * wrapper and checks in coll.c, a case in each transport's start (or a refusal). */
#ifndef QSYNC_PARALLEL_COLL_IMPL_H
#define QSYNC_PARALLEL_COLL_IMPL_H

#include "parallel/coll.h"

typedef enum qs_coll_kind {
    QS_COLL_ALLREDUCE,
    QS_COLL_REDUCE_SCATTER,
    QS_COLL_ALLGATHER,
    QS_COLL_ALLTOALL,
    QS_COLL_SEND,
    QS_COLL_RECV,
    QS_COLL_SENDRECV,
    QS_COLL_KINDS
} qs_coll_kind;

/* "all-reduce", "reduce-scatter", ... */
const char *qs_coll_kind_name(qs_coll_kind k);

/* One collective, checked. Pieces in rank order: piece p has qs_coll_piece(a, p) elements and
 * starts qs_coll_displ(a, p) elements in. */
typedef struct qs_coll_args {
    qs_coll_kind kind;
    const void *send;      /* all-reduce: the buffer (= recv); recv: NULL */
    void *recv;            /* send: NULL */
    int64_t count;         /* all-reduce and point to point: the length; others: the equal piece */
    const int64_t *counts; /* the v calls: world pieces (valid during start only), else NULL */
    int64_t total;         /* Σ pieces (reduce-scatter's send, all-gather's recv, all-to-all's buffers) */
    qs_dtype dt;
    size_t esize;          /* bytes per element */
    int peer;              /* send, recv: the other rank; send-recv: where send goes */
    int from;              /* send-recv: where recv comes from */
    bool in_place;         /* all-gather: send is this rank's piece of recv */
    qs_stream *s;          /* device transports: the caller's stream (never NULL) */
} qs_coll_args;

static inline int64_t qs_coll_piece(const qs_coll_args *a, int p) { return a->counts ? a->counts[p] : a->count; }
static inline int64_t qs_coll_displ(const qs_coll_args *a, int p) {
    if (!a->counts) return (int64_t)p * a->count;
    int64_t d = 0;
    for (int q = 0; q < p; q++) d += a->counts[q];
    return d;
}

typedef struct qs_coll_ops {
    int nap_us; /* wait: microseconds to sleep between looks (0: spin, for MPI's progress) */
    /* Begin a; req is its handle, free until start returns (refusals: qs_coll_unsupported). */
    qs_status (*start)(qs_coll *c, const qs_coll_args *a, int req);
    /* Advance every outstanding collective without blocking. */
    qs_status (*progress)(qs_coll *c);
    /* Advance, and *done when req has completed (device transports: the caller's stream of its
     * start made to wait for it). The handle is released by coll.c. */
    qs_status (*test)(qs_coll *c, int req, bool *done);
    /* Stop tracking req; false when the ranks are now out of step (the communicator broken). */
    bool (*cancel)(qs_coll *c, int req);
    /* Declare a buffer peers read (NULL: none needed). */
    qs_status (*reg)(qs_coll *c, void *buf, size_t bytes);
    void (*close)(qs_coll *c);
} qs_coll_ops;

struct qs_coll {
    const qs_coll_ops *ops;
    qs_coll_transport transport;
    qs_comm *comm;
    qs_backend *be;        /* device transports: the CUDA backend */
    int rank, world, cap;  /* cap: handles (qs_coll_options.max_inflight) */
    double timeout_s;      /* for open's and register's own collectives */
    bool *used;            /* [cap] */
    qs_coll_kind *kind;    /* [cap]: what each outstanding handle is, for messages */
    int64_t *elems;        /* [cap]: its length */
    bool broken;           /* a collective was cancelled: only close is left */
    void *impl;            /* the transport's state */
};

/* The transports' set-up, after coll.c filled c (but ops and impl): set c->ops and c->impl. */
qs_status qs_coll_mpi_open(qs_coll *c);
qs_status qs_coll_ipc_open(qs_coll *c);
qs_status qs_coll_nccl_open(qs_coll *c);

/* The refusal of a collective a transport does not have. */
qs_status qs_coll_unsupported(const qs_coll *c, const qs_coll_args *a, const char *why);
/* Every rank learns whether every rank's st is QS_OK: the local failure first, else a failure
 * of the agreement itself, else QS_ERR_BACKEND when another rank failed (its own message says
 * why `what` failed). */
qs_status qs_coll_agree(qs_coll *c, qs_status st, const char *what);

#endif
