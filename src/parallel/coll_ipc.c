/* src/parallel/coll_ipc.c — defines: the ipc transport of the communication interface
 * (coll_impl.h): device buffers of ranks that share one GPU, through CUDA IPC (NCCL refuses two
 * ranks on one GPU, and the GPU machine's MPI is not CUDA-aware). The device primitives are
 * src/cuda/cuda_ipc.h; the protocol is here.
 *
 * Set-up: every rank maps every peer's registered buffers (qs_coll_register) and owns two
 * interprocess events per slot (a slot carries one collective in flight; max_inflight slots).
 * Collective q (numbered in start order, the same on every rank) takes slot k = q mod slots:
 *   start   its inputs are final on the caller's stream: record ready[k] there; a non-blocking
 *           barrier (a one-float all-reduce over the mpi transport) will say so to the peers —
 *           issued once every earlier collective's barriers are (barriers are collectives, in
 *           one order on every rank);
 *   phase 1 once every rank has arrived: on this rank's transport stream, wait for every rank's
 *           ready[k], then read the peers' buffers — all-reduce: sum the range of all W buffers
 *           in rank order 0..W−1 into this rank's scratch (so every rank computes bit-identical
 *           sums); reduce-scatter: the same for this rank's piece, into recv; all-gather and
 *           all-to-all: copy the pieces into recv — record read[k]; start a second barrier;
 *   phase 2 once every rank has read: wait for every rank's read[k]; an all-reduce copies the
 *           scratch range into this rank's buffer; record done[k].
 * Completion makes the caller's stream wait for done[k]. A rank cannot pass a slot's barriers of
 * collective q + slots before every peer passed those of q, so an event waited for is always
 * the record of the current collective. Barriers progress only in start, progress and test
 * (Open MPI has no asynchronous progress). Point to point (send, recv, send-recv) is refused:
 * it would need a pairwise protocol. */
#include "parallel/coll_impl.h"

#include <stdlib.h>
#include <string.h>

#ifndef QS_HAVE_CUDA
qs_status qs_coll_ipc_open(qs_coll *c) {
    (void)c;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "the ipc transport (CUDA IPC between ranks of one GPU) is not in this build: it "
                   "was configured without the CUDA backend");
}
#else
#include <stdio.h>

#include "cuda/cuda_ipc.h"

#define QS_IPC_MAX_RANKS QS_CUDA_SUM_MAX_SRC
#define QS_IPC_MAX_REGIONS 16

/* IDLE → READY (ready[k] recorded) → ARRIVING (first barrier issued) → READING (phase 1 done,
 * second barrier issued) → DONE (phase 2 queued) → IDLE (reported complete). */
typedef enum slot_state { SLOT_IDLE = 0, SLOT_READY, SLOT_ARRIVING, SLOT_READING, SLOT_DONE } slot_state;

typedef struct ipc_slot {
    slot_state state;
    qs_coll_args a;  /* its collective; a.counts points at counts */
    int64_t *counts; /* [world]: the v calls' pieces, copied */
    int region;      /* the registered buffer peers read */
    size_t off;      /* where in it (bytes; the same on every rank) */
    int barrier;     /* the barrier in flight: a handle of host */
    float flag;      /* its one-float payload */
} ipc_slot;

typedef struct ipc_region {
    size_t bytes;
    char *at[QS_IPC_MAX_RANKS]; /* every rank's buffer, mapped (own: the original) */
    float *scratch;             /* all-reduce sums, as big as the buffer */
} ipc_region;

typedef struct ipc_impl {
    qs_coll *host;                 /* the mpi transport: barriers */
    int n_slots;
    qs_stream *stream;             /* the transport's stream */
    qs_cuda_event **ready, **read; /* [rank·n_slots + k]: own created, peers' opened */
    qs_cuda_event **done;          /* [k] */
    ipc_slot *slots;
    int *slot_of;                  /* [cap]: handle → slot */
    int64_t started, next;         /* collectives started; barriers issued (2 per collective) */
    ipc_region regions[QS_IPC_MAX_REGIONS];
    int n_regions;
} ipc_impl;

/* What a rank publishes at open: its GPU and slot count, then its 2·n_slots event handles. */
typedef struct ipc_card {
    unsigned char uuid[16];
    int32_t n_slots;
} ipc_card;

static size_t card_bytes(int n_slots) { return sizeof(ipc_card) + 2 * (size_t)n_slots * sizeof(qs_cuda_ipc_handle); }

/* Reads a peer's published blob (checked against this rank's, mine). */
typedef qs_status (*ipc_peer_fn)(qs_coll *c, int p, const char *blob, const char *mine);

/* Publish this rank's blob (an empty one when `ok` is false: this rank could not set up) and
 * read every peer's with fn, one broadcast per rank. Every rank takes part in every broadcast
 * even after a local failure, so that none is left waiting; the first failure is returned (a
 * failed broadcast at once). */
static qs_status ipc_exchange(qs_coll *c, char *mine, size_t n, bool ok, ipc_peer_fn fn) {
    qs_status first = QS_OK;
    for (int root = 0; root < c->world; root++) {
        char *blob = root == c->rank ? mine : NULL;
        size_t len = root == c->rank && !ok ? 0 : n;
        QS_TRY(qs_comm_bcast_bytes(c->comm, root, &blob, &len, c->timeout_s));
        if (root == c->rank) continue;
        qs_status st = QS_OK;
        if (len == 0)
            st = QS_FAIL(QS_ERR_BACKEND, "rank %d could not set up the IPC transport (its own message says why)", root);
        else if (len != n)
            st = QS_FAIL(QS_ERR_MISMATCH, "rank %d published %zu bytes of IPC handles, rank %d expected %zu: the ranks "
                         "built different models", root, len, c->rank, n);
        else if (ok && first == QS_OK)
            st = fn(c, root, blob, mine);
        free(blob);
        if (first == QS_OK) first = st;
    }
    return first;
}

/* This rank's stream, events and card. */
static qs_status ipc_create_own(qs_coll *c, char *blob) {
    ipc_impl *x = c->impl;
    QS_TRY(qs_cuda_ipc_stream_create(c->be, &x->stream));
    ipc_card card;
    memset(&card, 0, sizeof card);
    QS_TRY(qs_cuda_ipc_device_uuid(c->be, card.uuid));
    card.n_slots = x->n_slots;
    memcpy(blob, &card, sizeof card);
    qs_cuda_ipc_handle *h = (qs_cuda_ipc_handle *)(blob + sizeof card);
    for (int k = 0; k < x->n_slots; k++) {
        qs_cuda_event **r = &x->ready[c->rank * x->n_slots + k], **d = &x->read[c->rank * x->n_slots + k];
        QS_TRY(qs_cuda_ipc_event_create(c->be, false, &x->done[k]));
        QS_TRY(qs_cuda_ipc_event_create(c->be, true, r));
        QS_TRY(qs_cuda_ipc_event_create(c->be, true, d));
        QS_TRY(qs_cuda_ipc_event_handle(*r, &h[k]));
        QS_TRY(qs_cuda_ipc_event_handle(*d, &h[x->n_slots + k]));
    }
    return QS_OK;
}

static void uuid_text(const unsigned char *u, char *out) {
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", u[i]);
}

/* Check a peer's card against this rank's and open its events. */
static qs_status ipc_open_peer(qs_coll *c, int p, const char *blob, const char *mine) {
    ipc_impl *x = c->impl;
    ipc_card card, own;
    memcpy(&card, blob, sizeof card);
    memcpy(&own, mine, sizeof own);
    if (memcmp(card.uuid, own.uuid, sizeof card.uuid) != 0) {
        char a[33], b[33];
        uuid_text(own.uuid, a);
        uuid_text(card.uuid, b);
        return QS_FAIL(QS_ERR_UNSUPPORTED, "rank %d is on GPU %s and rank %d on GPU %s: the ipc transport is for ranks "
                       "sharing one GPU (ranks on different GPUs communicate through nccl)", c->rank, a, p, b);
    }
    if (card.n_slots != own.n_slots)
        return QS_FAIL(QS_ERR_MISMATCH, "rank %d keeps %d collectives in flight, rank %d %d: the ranks built different "
                       "models", c->rank, own.n_slots, p, card.n_slots);
    const qs_cuda_ipc_handle *h = (const qs_cuda_ipc_handle *)(blob + sizeof card);
    for (int k = 0; k < x->n_slots; k++) {
        QS_TRY(qs_cuda_ipc_event_open(&h[k], &x->ready[p * x->n_slots + k]));
        QS_TRY(qs_cuda_ipc_event_open(&h[x->n_slots + k], &x->read[p * x->n_slots + k]));
    }
    return QS_OK;
}

/* Check a peer's registered size against this rank's and map its buffer. */
static qs_status ipc_map_peer(qs_coll *c, int p, const char *blob, const char *mine) {
    ipc_impl *x = c->impl;
    ipc_region *g = &x->regions[x->n_regions];
    uint64_t theirs, own;
    memcpy(&theirs, blob, sizeof theirs);
    memcpy(&own, mine, sizeof own);
    if (theirs != own)
        return QS_FAIL(QS_ERR_MISMATCH, "rank %d registers %llu bytes as its buffer %d, rank %d %llu bytes: the ranks "
                       "built different models", c->rank, (unsigned long long)own, x->n_regions, p,
                       (unsigned long long)theirs);
    qs_cuda_ipc_handle h;
    memcpy(&h, blob + sizeof theirs, sizeof h);
    void *ptr = NULL;
    QS_TRY(qs_cuda_ipc_mem_open(&h, &ptr));
    g->at[p] = ptr;
    return QS_OK;
}

static qs_status ipc_register(qs_coll *c, void *buf, size_t bytes) {
    ipc_impl *x = c->impl;
    if (x->n_regions == QS_IPC_MAX_REGIONS)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "the ipc transport maps at most %d registered buffers", QS_IPC_MAX_REGIONS);
    ipc_region *g = &x->regions[x->n_regions];
    memset(g, 0, sizeof *g);
    g->bytes = bytes;
    g->at[c->rank] = buf;
    char blob[sizeof(uint64_t) + sizeof(qs_cuda_ipc_handle)];
    const uint64_t n = bytes;
    memcpy(blob, &n, sizeof n);
    qs_status st = c->be->ops->alloc(c->be, bytes ? bytes : 4, (void **)&g->scratch);
    if (st == QS_OK) st = qs_cuda_ipc_mem_handle(buf, (qs_cuda_ipc_handle *)(blob + sizeof n));
    const qs_status ex = ipc_exchange(c, blob, sizeof blob, st == QS_OK, ipc_map_peer);
    if (st == QS_OK) st = ex;
    x->n_regions++; /* mapped or not, close releases it */
    return qs_coll_agree(c, st, "the IPC transport's buffers");
}

/* The registered buffer holding [p, p + bytes): its index and p's offset in it. */
static qs_status ipc_find(const qs_coll *c, const qs_coll_args *a, const void *p, size_t bytes, int *r, size_t *off) {
    const ipc_impl *x = c->impl;
    for (int i = 0; i < x->n_regions; i++) {
        const char *base = x->regions[i].at[c->rank];
        if ((const char *)p >= base && (const char *)p + bytes <= base + x->regions[i].bytes) {
            *r = i;
            *off = (size_t)((const char *)p - base);
            return QS_OK;
        }
    }
    return QS_FAIL(QS_ERR_INVALID_ARG, "the ipc transport's %s reads %zu bytes at %p from the peers, which are not inside "
                   "a registered buffer (qs_coll_register)", qs_coll_kind_name(a->kind), bytes, p);
}

/* Issue slot k's next barrier. */
static qs_status ipc_barrier(ipc_impl *x, ipc_slot *sl, slot_state next) {
    sl->flag = 1.0f;
    sl->state = next;
    x->next++;
    return qs_coll_allreduce(x->host, &sl->flag, 1, QS_F32, NULL, &sl->barrier);
}

/* Where rank p's piece of slot sl lies in p's mapping of the slot's buffer. */
static const char *ipc_source(const ipc_impl *x, const ipc_slot *sl, int p, int rank) {
    const qs_coll_args *a = &sl->a;
    const char *base = x->regions[sl->region].at[p] + sl->off;
    if (a->kind == QS_COLL_ALLGATHER) return a->in_place ? base + (size_t)qs_coll_displ(a, p) * a->esize : base;
    if (a->kind == QS_COLL_REDUCE_SCATTER) return base + (size_t)qs_coll_displ(a, rank) * a->esize;
    if (a->kind == QS_COLL_ALLTOALL) return base + (size_t)rank * (size_t)a->count * a->esize;
    return base; /* all-reduce */
}

/* Every rank's ready[k] is recorded: read the peers' buffers (see the file comment). */
static qs_status ipc_phase_read(qs_coll *c, int k) {
    ipc_impl *x = c->impl;
    ipc_slot *sl = &x->slots[k];
    const qs_coll_args *a = &sl->a;
    for (int p = 0; p < c->world; p++) QS_TRY(qs_cuda_ipc_stream_wait(x->stream, x->ready[p * x->n_slots + k]));
    if (a->kind == QS_COLL_ALLREDUCE || a->kind == QS_COLL_REDUCE_SCATTER) {
        const float *src[QS_IPC_MAX_RANKS];
        for (int p = 0; p < c->world; p++) src[p] = (const float *)ipc_source(x, sl, p, c->rank);
        float *dst = a->kind == QS_COLL_ALLREDUCE ? x->regions[sl->region].scratch + sl->off / sizeof(float) : a->recv;
        const int64_t n = a->kind == QS_COLL_ALLREDUCE ? a->count : qs_coll_piece(a, c->rank);
        QS_TRY(qs_cuda_ipc_sum(c->be, x->stream, src, c->world, dst, n));
    } else {
        for (int p = 0; p < c->world; p++) {
            if (a->kind == QS_COLL_ALLGATHER && a->in_place && p == c->rank) continue;
            const int64_t n = a->kind == QS_COLL_ALLGATHER ? qs_coll_piece(a, p) : a->count;
            const int64_t at = a->kind == QS_COLL_ALLGATHER ? qs_coll_displ(a, p) : (int64_t)p * a->count;
            QS_TRY(c->be->ops->copy_d2d(c->be, x->stream, (char *)a->recv + (size_t)at * a->esize,
                                        ipc_source(x, sl, p, c->rank), (size_t)n * a->esize));
        }
    }
    QS_TRY(qs_cuda_ipc_event_record(x->read[c->rank * x->n_slots + k], x->stream));
    return ipc_barrier(x, sl, SLOT_READING);
}

/* Every rank has read: an all-reduce overwrites its range with the sums; done[k]. */
static qs_status ipc_phase_write(qs_coll *c, int k) {
    ipc_impl *x = c->impl;
    ipc_slot *sl = &x->slots[k];
    for (int p = 0; p < c->world; p++)
        if (p != c->rank) QS_TRY(qs_cuda_ipc_stream_wait(x->stream, x->read[p * x->n_slots + k]));
    if (sl->a.kind == QS_COLL_ALLREDUCE) {
        const ipc_region *g = &x->regions[sl->region];
        QS_TRY(c->be->ops->copy_d2d(c->be, x->stream, g->at[c->rank] + sl->off, g->scratch + sl->off / sizeof(float),
                                    (size_t)sl->a.count * sizeof(float)));
    }
    QS_TRY(qs_cuda_ipc_event_record(x->done[k], x->stream));
    sl->state = SLOT_DONE;
    return QS_OK;
}

/* Issue the barriers in their one order as far as they allow, then finish every slot whose
 * second barrier has completed. Never blocks. */
static qs_status ipc_progress(qs_coll *c) {
    ipc_impl *x = c->impl;
    while (x->next < 2 * x->started) {
        const int k = (int)((x->next / 2) % x->n_slots);
        if (x->next % 2 == 0) {
            QS_TRY(ipc_barrier(x, &x->slots[k], SLOT_ARRIVING));
            continue;
        }
        bool done = false;
        QS_TRY(qs_coll_test(x->host, x->slots[k].barrier, &done));
        if (!done) break;
        QS_TRY(ipc_phase_read(c, k));
    }
    for (int k = 0; k < x->n_slots; k++) {
        if (x->slots[k].state != SLOT_READING) continue;
        bool done = false;
        QS_TRY(qs_coll_test(x->host, x->slots[k].barrier, &done));
        if (done) QS_TRY(ipc_phase_write(c, k));
    }
    return QS_OK;
}

/* The registered buffer peers read for a (see the file comment) into the slot. */
static qs_status ipc_locate(const qs_coll *c, const qs_coll_args *a, ipc_slot *sl) {
    const void *p = a->send;
    size_t n = (size_t)a->total * a->esize;
    if (a->kind == QS_COLL_ALLREDUCE) n = (size_t)a->count * a->esize;
    if (a->kind == QS_COLL_ALLGATHER && a->in_place) p = a->recv;
    else if (a->kind == QS_COLL_ALLGATHER) n = (size_t)qs_coll_piece(a, c->rank) * a->esize;
    QS_TRY(ipc_find(c, a, p, n, &sl->region, &sl->off));
    if (a->kind == QS_COLL_ALLREDUCE && sl->off % sizeof(float) != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the ipc transport's all-reduce at byte %zu of a registered buffer: not a "
                       "whole float", sl->off);
    return QS_OK;
}

static qs_status ipc_start(qs_coll *c, const qs_coll_args *a, int req) {
    ipc_impl *x = c->impl;
    if (a->kind >= QS_COLL_SEND)
        return qs_coll_unsupported(c, a, "point to point would need a pairwise protocol; use nccl or mpi");
    if ((a->kind == QS_COLL_ALLREDUCE || a->kind == QS_COLL_REDUCE_SCATTER) && a->dt != QS_F32)
        return qs_coll_unsupported(c, a, "the IPC transport sums f32");
    const int k = (int)(x->started % x->n_slots);
    ipc_slot *sl = &x->slots[k];
    if (sl->state != SLOT_IDLE)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the ipc transport: collective %lld would reuse slot %d while collective %lld "
                       "still holds it (more than max_inflight = %d in flight)", (long long)x->started, k,
                       (long long)(x->started - x->n_slots), x->n_slots);
    QS_TRY(ipc_locate(c, a, sl));
    sl->a = *a;
    if (a->counts) {
        memcpy(sl->counts, a->counts, (size_t)c->world * sizeof *sl->counts);
        sl->a.counts = sl->counts;
    }
    QS_TRY(qs_cuda_ipc_event_record(x->ready[c->rank * x->n_slots + k], a->s));
    sl->state = SLOT_READY;
    x->slot_of[req] = k;
    x->started++;
    return ipc_progress(c);
}

static qs_status ipc_test(qs_coll *c, int req, bool *done) {
    ipc_impl *x = c->impl;
    QS_TRY(ipc_progress(c));
    ipc_slot *sl = &x->slots[x->slot_of[req]];
    *done = sl->state == SLOT_DONE;
    if (!*done) return QS_OK;
    sl->state = SLOT_IDLE;
    return qs_cuda_ipc_stream_wait(sl->a.s, x->done[x->slot_of[req]]);
}

/* The slot protocol cannot be undone: the ranks are out of step. */
static bool ipc_cancel(qs_coll *c, int req) {
    ipc_impl *x = c->impl;
    ipc_slot *sl = &x->slots[x->slot_of[req]];
    if (sl->state == SLOT_ARRIVING || sl->state == SLOT_READING) qs_coll_cancel(x->host, sl->barrier);
    return false;
}

static void ipc_close(qs_coll *c) {
    ipc_impl *x = c->impl;
    if (!x) return;
    qs_cuda_ipc_stream_destroy(x->stream); /* after its reads of the peers' buffers */
    for (int e = 0; x->ready && x->read && e < c->world * x->n_slots; e++) {
        qs_cuda_ipc_event_destroy(x->ready[e]);
        qs_cuda_ipc_event_destroy(x->read[e]);
    }
    for (int k = 0; x->done && k < x->n_slots; k++) qs_cuda_ipc_event_destroy(x->done[k]);
    for (int i = 0; i < x->n_regions; i++) {
        for (int p = 0; p < c->world; p++)
            if (p != c->rank) qs_cuda_ipc_mem_close(x->regions[i].at[p]);
        if (x->regions[i].scratch) c->be->ops->free(c->be, x->regions[i].scratch);
    }
    for (int k = 0; x->slots && k < x->n_slots; k++) free(x->slots[k].counts);
    qs_coll_close(x->host);
    free(x->ready);
    free(x->read);
    free(x->done);
    free(x->slots);
    free(x->slot_of);
    free(x);
}

static const qs_coll_ops ipc_ops = {
    .nap_us = 0, .start = ipc_start, .progress = ipc_progress, .test = ipc_test, .cancel = ipc_cancel,
    .reg = ipc_register, .close = ipc_close,
};

/* The arrays of x (n_slots slots over c->world ranks); false when out of memory. */
static bool ipc_alloc(qs_coll *c, ipc_impl *x) {
    const size_t events = (size_t)c->world * (size_t)x->n_slots;
    x->ready = calloc(events, sizeof *x->ready);
    x->read = calloc(events, sizeof *x->read);
    x->done = calloc((size_t)x->n_slots, sizeof *x->done);
    x->slots = calloc((size_t)x->n_slots, sizeof *x->slots);
    x->slot_of = calloc((size_t)c->cap, sizeof *x->slot_of);
    bool ok = x->ready && x->read && x->done && x->slots && x->slot_of;
    for (int k = 0; ok && k < x->n_slots; k++) ok = (x->slots[k].counts = calloc((size_t)c->world, sizeof(int64_t)));
    return ok;
}

qs_status qs_coll_ipc_open(qs_coll *c) {
    if (c->world > QS_IPC_MAX_RANKS)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "%d ranks on one GPU: the ipc transport takes at most %d", c->world,
                       QS_IPC_MAX_RANKS);
    ipc_impl *x = calloc(1, sizeof *x);
    if (!x) return QS_FAIL(QS_ERR_OOM, "out of memory for the ipc transport");
    c->impl = x;
    c->ops = &ipc_ops;
    x->n_slots = c->cap;
    const qs_coll_options host = {.transport = QS_COLL_MPI, .max_inflight = x->n_slots, .timeout_s = c->timeout_s};
    qs_status st = qs_coll_open(c->comm, &host, &x->host);
    char *blob = calloc(1, card_bytes(x->n_slots));
    if (st == QS_OK && (!ipc_alloc(c, x) || !blob)) st = QS_FAIL(QS_ERR_OOM, "out of memory for IPC handles");
    if (st == QS_OK) st = ipc_create_own(c, blob);
    if (blob) { /* taken part in even after a local failure (see ipc_exchange) */
        const qs_status ex = ipc_exchange(c, blob, card_bytes(x->n_slots), st == QS_OK, ipc_open_peer);
        if (st == QS_OK) st = ex;
    }
    free(blob);
    return qs_coll_agree(c, st, "the IPC transport"); /* all ranks fail alike, or none does */
}
#endif
