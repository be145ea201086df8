/* src/cuda/cuda_ipc.c — the sum all-reduce between ranks sharing one GPU through CUDA IPC
 * (contract and protocol: src/parallel/ipc_reduce.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_ipc.h"
#include "parallel/ipc_reduce.h"

/* IDLE → READY (start: ready[k] recorded) → ARRIVING (first barrier issued) → READING (summed,
 * second barrier issued) → COPIED → IDLE (finish). */
typedef enum slot_state { SLOT_IDLE = 0, SLOT_READY, SLOT_ARRIVING, SLOT_READING, SLOT_COPIED } slot_state;

typedef struct ipc_slot {
    slot_state state;
    size_t off, bytes;
    int req;              /* the barrier in flight */
    float flag;           /* its one-float payload */
} ipc_slot;

/* What every rank publishes about itself. */
typedef struct ipc_card {
    char uuid[16];        /* the GPU */
    uint64_t bytes;
    int32_t n_slots;
    cudaIpcMemHandle_t mem;
} ipc_card;

struct qs_ipc_reduce {
    qs_backend *be;
    qs_comm *comm;
    int rank, world, n_slots;
    double timeout_s;
    cudaStream_t stream;                      /* the reductions' stream */
    float *scratch;                           /* sums, as big as the buffer */
    const float *bufs[QS_IPC_MAX_RANKS];      /* every rank's buffer, mapped (own: the original) */
    bool mapped[QS_IPC_MAX_RANKS];
    cudaEvent_t *ready, *read;                /* [rank·n_slots + k]: own created, peers' opened */
    cudaEvent_t done;
    ipc_slot *slots;
    /* The barriers are collectives on one communicator, so every rank must issue them in one
     * order: slot 0's first, slot 0's second, slot 1's first, ... `next` is the next to issue
     * (even: the first barrier of slot next/2, odd: its second). */
    int next;
};

/* A rank's card followed by its 2·n_slots event handles, ready then read. */
static size_t blob_bytes(int n_slots) { return sizeof(ipc_card) + 2 * (size_t)n_slots * sizeof(cudaIpcEventHandle_t); }

static qs_status create_own(qs_ipc_reduce *x, void *buf, size_t bytes, char *blob) {
    qs_cuda_backend *cb = qs_cuda_be(x->be);
    QS_TRY(qs_cuda_make_current(cb));
    QS_CUDA_TRY(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
    QS_CUDA_TRY(cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming));
    QS_TRY(x->be->ops->alloc(x->be, bytes ? bytes : 4, (void **)&x->scratch));
    ipc_card card;
    memset(&card, 0, sizeof card);
    memcpy(card.uuid, cb->props.uuid.bytes, sizeof card.uuid);
    card.bytes = bytes;
    card.n_slots = x->n_slots;
    QS_CUDA_TRY(cudaIpcGetMemHandle(&card.mem, buf));
    memcpy(blob, &card, sizeof card);
    cudaIpcEventHandle_t *h = (cudaIpcEventHandle_t *)(blob + sizeof card);
    for (int k = 0; k < x->n_slots; k++) {
        cudaEvent_t *r = &x->ready[x->rank * x->n_slots + k], *d = &x->read[x->rank * x->n_slots + k];
        QS_CUDA_TRY(cudaEventCreateWithFlags(r, cudaEventDisableTiming | cudaEventInterprocess));
        QS_CUDA_TRY(cudaEventCreateWithFlags(d, cudaEventDisableTiming | cudaEventInterprocess));
        QS_CUDA_TRY(cudaIpcGetEventHandle(&h[k], *r));
        QS_CUDA_TRY(cudaIpcGetEventHandle(&h[x->n_slots + k], *d));
    }
    return QS_OK;
}

static void uuid_text(const char *u, char *out) {
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", (unsigned char)u[i]);
}

/* Check a peer's card against this rank's and open its buffer and events. */
static qs_status open_peer(qs_ipc_reduce *x, int p, const char *blob, const ipc_card *mine) {
    ipc_card card;
    memcpy(&card, blob, sizeof card);
    if (memcmp(card.uuid, mine->uuid, sizeof card.uuid) != 0) {
        char a[33], b[33];
        uuid_text(mine->uuid, a);
        uuid_text(card.uuid, b);
        return QS_FAIL(QS_ERR_UNSUPPORTED, "rank %d is on GPU %s and rank %d on GPU %s: the IPC all-reduce is for "
                       "ranks sharing one GPU (ranks on different GPUs reduce through NCCL, parallel/nccl_reduce.h)",
                       x->rank, a, p, b);
    }
    if (card.bytes != mine->bytes || card.n_slots != mine->n_slots)
        return QS_FAIL(QS_ERR_MISMATCH, "rank %d reduces %llu bytes in %d buckets, rank %d %llu bytes in %d: the ranks "
                       "built different models", x->rank, (unsigned long long)mine->bytes, mine->n_slots, p,
                       (unsigned long long)card.bytes, card.n_slots);
    void *ptr = NULL;
    QS_CUDA_TRY(cudaIpcOpenMemHandle(&ptr, card.mem, cudaIpcMemLazyEnablePeerAccess));
    x->bufs[p] = ptr;
    x->mapped[p] = true;
    const cudaIpcEventHandle_t *h = (const cudaIpcEventHandle_t *)(blob + sizeof card);
    for (int k = 0; k < x->n_slots; k++) {
        QS_CUDA_TRY(cudaIpcOpenEventHandle(&x->ready[p * x->n_slots + k], h[k]));
        QS_CUDA_TRY(cudaIpcOpenEventHandle(&x->read[p * x->n_slots + k], h[x->n_slots + k]));
    }
    return QS_OK;
}

/* Publish this rank's blob (an empty one when `ok` is false: this rank could not set up) and
 * open every peer's, one broadcast per rank. Every rank takes part in every broadcast even after
 * a local failure, so that none is left waiting; the first failure is returned (a failed
 * broadcast at once). */
static qs_status exchange(qs_ipc_reduce *x, char *mine, bool ok) {
    const size_t n = blob_bytes(x->n_slots);
    ipc_card card;
    memcpy(&card, mine, sizeof card);
    qs_status first = QS_OK;
    for (int root = 0; root < x->world; root++) {
        char *blob = root == x->rank ? mine : NULL;
        size_t len = root == x->rank && !ok ? 0 : n;
        QS_TRY(qs_comm_bcast_bytes(x->comm, root, &blob, &len, x->timeout_s));
        if (root == x->rank) continue;
        qs_status st = QS_OK;
        if (len == 0)
            st = QS_FAIL(QS_ERR_BACKEND, "rank %d could not set up the IPC all-reduce (its own message says why)", root);
        else if (len != n)
            st = QS_FAIL(QS_ERR_MISMATCH, "rank %d published %zu bytes of IPC handles, rank %d expected %zu: the ranks "
                         "built different models", root, len, x->rank, n);
        else if (ok && first == QS_OK)
            st = open_peer(x, root, blob, &card);
        free(blob);
        if (first == QS_OK) first = st;
    }
    return first;
}

qs_status qs_ipc_reduce_open(qs_backend *be, qs_comm *comm, void *buf, size_t bytes, int n_slots, double timeout_s,
                             qs_ipc_reduce **out) {
    *out = NULL;
    if (!be || strcmp(be->ops->name, "cuda") != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "the IPC all-reduce needs buffers of the CUDA backend");
    const int world = qs_comm_world(comm);
    if (world > QS_IPC_MAX_RANKS)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "%d ranks on one GPU: the IPC all-reduce takes at most %d", world,
                       QS_IPC_MAX_RANKS);
    if (n_slots < 1 || bytes % sizeof(float) != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "IPC all-reduce of %zu bytes in %d slots", bytes, n_slots);
    qs_ipc_reduce *x = calloc(1, sizeof *x);
    if (!x) return QS_FAIL(QS_ERR_OOM, "out of memory for the IPC all-reduce");
    x->be = be;
    x->comm = comm;
    x->rank = qs_comm_rank(comm);
    x->world = world;
    x->n_slots = n_slots;
    x->timeout_s = timeout_s;
    x->bufs[x->rank] = buf;
    x->ready = calloc((size_t)world * (size_t)n_slots, sizeof *x->ready);
    x->read = calloc((size_t)world * (size_t)n_slots, sizeof *x->read);
    x->slots = calloc((size_t)n_slots, sizeof *x->slots);
    char *blob = calloc(1, blob_bytes(n_slots));
    qs_status st = x->ready && x->read && x->slots && blob ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for IPC handles");
    if (st == QS_OK && blob) st = create_own(x, buf, bytes, blob);
    if (blob) { /* taken part in even after a local failure (see exchange) */
        const qs_status ex = exchange(x, blob, st == QS_OK);
        if (st == QS_OK) st = ex;
    }
    free(blob);
    uint64_t lo = 1, hi = 1; /* all ranks fail alike, or none does */
    const qs_status agreed = qs_comm_allreduce_minmax_u64(comm, st == QS_OK, &lo, &hi, timeout_s);
    if (st == QS_OK && agreed != QS_OK) st = agreed;
    if (st == QS_OK && lo == 0)
        st = QS_FAIL(QS_ERR_BACKEND, "another rank could not set up the IPC all-reduce (its own message says why)");
    if (st != QS_OK) {
        qs_ipc_reduce_close(x);
        return st;
    }
    *out = x;
    return QS_OK;
}

qs_status qs_ipc_reduce_start(qs_ipc_reduce *x, qs_stream *s, int k, size_t off, size_t bytes) {
    if (k < 0 || k >= x->n_slots || x->slots[k].state != SLOT_IDLE || off % sizeof(float) || bytes % sizeof(float))
        return QS_FAIL(QS_ERR_INTERNAL, "IPC all-reduce: slot %d started twice or out of range (%zu bytes at %zu)", k,
                       bytes, off);
    ipc_slot *sl = &x->slots[k];
    QS_CUDA_TRY(cudaEventRecord(x->ready[x->rank * x->n_slots + k], s->s));
    sl->off = off;
    sl->bytes = bytes;
    sl->state = SLOT_READY;
    return qs_ipc_reduce_poll(x);
}

/* Issue slot k's next barrier. */
static qs_status issue_barrier(qs_ipc_reduce *x, int k, slot_state next) {
    ipc_slot *sl = &x->slots[k];
    sl->flag = 1.0f;
    sl->state = next;
    x->next++;
    return qs_comm_iallreduce_sum_f32(x->comm, &sl->flag, 1, &sl->req);
}

/* Whether slot k's barrier in flight has completed (blocking: wait for it up to the timeout). */
static qs_status barrier_done(qs_ipc_reduce *x, int k, bool blocking, bool *done) {
    if (!blocking) return qs_comm_test(x->comm, x->slots[k].req, done);
    QS_TRY(qs_comm_wait(x->comm, x->slots[k].req, x->timeout_s));
    *done = true;
    return QS_OK;
}

/* Every rank's ready[k] is recorded: sum the range of all buffers into scratch. */
static qs_status phase_sum(qs_ipc_reduce *x, int k) {
    ipc_slot *sl = &x->slots[k];
    const float *src[QS_IPC_MAX_RANKS];
    const size_t first = sl->off / sizeof(float);
    for (int p = 0; p < x->world; p++) {
        QS_CUDA_TRY(cudaStreamWaitEvent(x->stream, x->ready[p * x->n_slots + k], 0));
        src[p] = x->bufs[p] + first;
    }
    QS_TRY(qs_cuda_sum_ranks(x->be, x->stream, src, x->world, x->scratch + first, (int64_t)(sl->bytes / sizeof(float))));
    QS_CUDA_TRY(cudaEventRecord(x->read[x->rank * x->n_slots + k], x->stream));
    return issue_barrier(x, k, SLOT_READING);
}

/* Every rank has read the range: overwrite it with the sums. */
static qs_status phase_copy(qs_ipc_reduce *x, int k) {
    ipc_slot *sl = &x->slots[k];
    for (int p = 0; p < x->world; p++)
        if (p != x->rank) QS_CUDA_TRY(cudaStreamWaitEvent(x->stream, x->read[p * x->n_slots + k], 0));
    float *dst = (float *)x->bufs[x->rank] + sl->off / sizeof(float);
    QS_CUDA_TRY(cudaMemcpyAsync(dst, x->scratch + sl->off / sizeof(float), sl->bytes, cudaMemcpyDeviceToDevice,
                                x->stream));
    sl->state = SLOT_COPIED;
    return QS_OK;
}

/* Issue the barriers in their one order as far as the slots allow, then copy the sums of every
 * slot whose second barrier has completed. Blocking (finish): every slot must have started;
 * wait for each barrier up to the timeout. */
static qs_status progress(qs_ipc_reduce *x, bool blocking) {
    while (x->next < 2 * x->n_slots) {
        const int k = x->next / 2;
        if (x->next % 2 == 0) {
            if (x->slots[k].state != SLOT_READY) {
                if (!blocking) break;
                return QS_FAIL(QS_ERR_INTERNAL, "IPC all-reduce finished before slot %d was started", k);
            }
            QS_TRY(issue_barrier(x, k, SLOT_ARRIVING));
        } else {
            bool done = false;
            QS_TRY(barrier_done(x, k, blocking, &done));
            if (!done) break;
            QS_TRY(phase_sum(x, k));
        }
    }
    for (int k = 0; k < x->n_slots; k++) {
        if (x->slots[k].state != SLOT_READING) continue;
        bool done = false;
        QS_TRY(barrier_done(x, k, blocking, &done));
        if (done) QS_TRY(phase_copy(x, k));
    }
    return QS_OK;
}

qs_status qs_ipc_reduce_poll(qs_ipc_reduce *x) { return progress(x, false); }

qs_status qs_ipc_reduce_finish(qs_ipc_reduce *x, qs_stream *s) {
    QS_TRY(progress(x, true));
    for (int k = 0; k < x->n_slots; k++) x->slots[k].state = SLOT_IDLE;
    x->next = 0;
    QS_CUDA_TRY(cudaEventRecord(x->done, x->stream));
    QS_CUDA_TRY(cudaStreamWaitEvent(s->s, x->done, 0));
    return QS_OK;
}

void qs_ipc_reduce_close(qs_ipc_reduce *x) {
    if (!x) return;
    if (x->stream) (void)cudaStreamSynchronize(x->stream);
    for (int p = 0; p < x->world; p++) {
        for (int k = 0; x->ready && x->read && k < x->n_slots; k++) {
            if (x->ready[p * x->n_slots + k]) (void)cudaEventDestroy(x->ready[p * x->n_slots + k]);
            if (x->read[p * x->n_slots + k]) (void)cudaEventDestroy(x->read[p * x->n_slots + k]);
        }
        if (x->mapped[p]) (void)cudaIpcCloseMemHandle((void *)x->bufs[p]);
    }
    if (x->done) (void)cudaEventDestroy(x->done);
    if (x->stream) (void)cudaStreamDestroy(x->stream);
    if (x->scratch) x->be->ops->free(x->be, x->scratch);
    free(x->ready);
    free(x->read);
    free(x->slots);
    free(x);
}
