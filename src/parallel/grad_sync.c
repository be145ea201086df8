/* src/parallel/grad_sync.c — defines: bucketed, overlapped gradient averaging over the
 * communication interface, and the replica check (see grad_sync.h). */
#include "parallel/grad_sync.h"

#include <stdlib.h>
#include <string.h>

#include "qsync/tensor.h"

/* Bucket b's gradients are final: its share of the global mean (unequal local batches), then
 * its sum all-reduce. */
static qs_status start_bucket(qs_grad_sync *gs, qs_grad_bucket *b) {
    const int k = (int)(b - gs->buckets);
    QS_TRY(qs_comm_arrive(gs->comm, gs->m->step, 1 + k)); /* named in timeouts */
    qs_model *m = gs->m;
    float *base = (float *)((char *)m->grad_data + b->offset);
    const int64_t count = (int64_t)(b->bytes / sizeof(float));
    if (gs->weight != 1.0f) QS_TRY(m->be->ops->scale(m->be, m->stream, count, base, gs->weight));
    return qs_coll_allreduce(gs->coll, base, count, QS_F32, m->stream, &b->req);
}

/* After each node's backward: start the buckets it completed, advance the outstanding ones. */
static qs_status on_grads_ready(void *ctx, int node) {
    qs_grad_sync *gs = ctx;
    const qs_node *n = &gs->m->nodes[node];
    for (int k = 0; k < n->n_params; k++) {
        qs_grad_bucket *b = &gs->buckets[gs->entry_bucket[n->param[k]]];
        if (--b->pending == 0 && gs->overlap) QS_TRY(start_bucket(gs, b));
    }
    return gs->overlap ? qs_coll_progress(gs->coll) : QS_OK;
}

/* At the end of backward: start what has not started, wait for every bucket, scale by 1/world. */
static qs_status on_grads_done(void *ctx) {
    qs_grad_sync *gs = ctx;
    qs_model *m = gs->m;
    for (int k = 0; k < gs->n_buckets; k++) {
        qs_grad_bucket *b = &gs->buckets[k];
        if (b->pending != 0)
            return QS_FAIL(QS_ERR_INTERNAL, "gradient bucket %d: %d parameter gradients never became ready", k,
                           b->pending);
        if (!gs->overlap) QS_TRY(start_bucket(gs, b));
    }
    for (int k = 0; k < gs->n_buckets; k++) {
        qs_grad_bucket *b = &gs->buckets[k];
        QS_TRY(qs_coll_wait(gs->coll, b->req, gs->timeout_s));
        b->req = -1;
        b->pending = b->last_entry - b->first_entry + 1; /* ready for the next backward */
    }
    const float inv = 1.0f / (float)qs_comm_world(gs->comm);
    return m->be->ops->scale(m->be, m->stream, (int64_t)(m->params.bytes / sizeof(float)), m->grad_data, inv);
}

int qs_grad_buckets_form(const qs_table *t, size_t bucket_bytes, qs_grad_bucket *buckets, int *entry_bucket) {
    int n = 0, last = t->count - 1;
    for (int e = t->count - 1; e >= 0; e--) { /* from the last entry down */
        size_t lo = t->entries[e].offset, hi = last == t->count - 1 ? t->bytes : t->entries[last + 1].offset;
        if (hi - lo >= bucket_bytes || e == 0) {
            buckets[n] = (qs_grad_bucket){.offset = lo, .bytes = hi - lo, .first_entry = e, .last_entry = last,
                                          .pending = last - e + 1, .req = -1};
            for (int k = e; k <= last; k++) entry_bucket[k] = n;
            n++;
            last = e - 1;
        }
    }
    return n;
}

qs_status qs_grad_sync_init(qs_grad_sync *gs, qs_comm *comm, qs_model *m, size_t bucket_bytes, bool overlap,
                            double timeout_s) {
    memset(gs, 0, sizeof *gs);
    gs->comm = comm;
    gs->m = m;
    gs->overlap = overlap;
    gs->timeout_s = timeout_s;
    gs->weight = 1.0f;
    if (bucket_bytes == 0) return QS_FAIL(QS_ERR_INVALID_ARG, "gradient bucket size must be > 0");
    if (qs_comm_world(comm) == 1 || m->params.count == 0) return QS_OK;
    const qs_table *t = &m->params;
    gs->entry_bucket = calloc((size_t)t->count, sizeof *gs->entry_bucket);
    gs->buckets = calloc((size_t)t->count, sizeof *gs->buckets);
    if (!gs->entry_bucket || !gs->buckets) {
        qs_grad_sync_free(gs);
        return QS_FAIL(QS_ERR_OOM, "out of memory for gradient buckets");
    }
    gs->n_buckets = qs_grad_buckets_form(t, bucket_bytes, gs->buckets, gs->entry_bucket);
    const qs_coll_options o = {.transport = QS_COLL_AUTO, .be = m->be, .max_inflight = gs->n_buckets,
                               .timeout_s = timeout_s};
    qs_status st = qs_coll_open(comm, &o, &gs->coll);
    if (st == QS_OK) st = qs_coll_register(gs->coll, m->grad_data, m->params.bytes);
    if (st != QS_OK) {
        qs_grad_sync_free(gs);
        return st;
    }
    m->grads_ready = on_grads_ready;
    m->grads_done = on_grads_done;
    m->grads_ctx = gs;
    return QS_OK;
}

void qs_grad_sync_free(qs_grad_sync *gs) {
    if (gs->m && gs->m->grads_ctx == gs) {
        gs->m->grads_ready = NULL;
        gs->m->grads_done = NULL;
        gs->m->grads_ctx = NULL;
    }
    qs_coll_close(gs->coll);
    free(gs->buckets);
    free(gs->entry_bucket);
    memset(gs, 0, sizeof *gs);
}

void qs_grad_sync_set_local_batch(qs_grad_sync *gs, int64_t local_batch, int64_t global_batch) {
    gs->weight = (float)((double)local_batch * qs_comm_world(gs->comm) / (double)global_batch);
}

/* FNV-1a over 64-bit words (then the tail bytes) of p[0..n), continuing from f: the replica
 * fingerprint, 8× fewer steps than byte-wise FNV-1a. */
static uint64_t qs_replica_fold(uint64_t f, const unsigned char *p, size_t n) {
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        f = (f ^ w) * 1099511628211ull;
    }
    for (size_t i = 8 * words; i < n; i++) f = (f ^ p[i]) * 1099511628211ull;
    return f;
}

#define QS_REPLICA_CHUNK ((size_t)64 << 20) /* host staging per copy (bytes) */

qs_status qs_grad_sync_check_replicas(qs_grad_sync *gs, int64_t step) {
    if (qs_comm_world(gs->comm) == 1) return QS_OK;
    qs_model *m = gs->m;
    const size_t bytes = m->params.bytes, chunk = bytes < QS_REPLICA_CHUNK ? bytes : QS_REPLICA_CHUNK;
    unsigned char *h = qs_host_alloc(chunk > 0 ? chunk : 1);
    if (!h) return QS_FAIL(QS_ERR_OOM, "replica check: out of memory");
    uint64_t f = 1469598103934665603ull;
    qs_status st = QS_OK;
    for (size_t off = 0; st == QS_OK && off < bytes; off += chunk) { /* chunk is a multiple of 8 but the last */
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        st = m->be->ops->copy_d2h(m->be, m->stream, h, (const unsigned char *)m->param_data + off, n);
        if (st == QS_OK) st = m->be->ops->stream_sync(m->be, m->stream);
        if (st == QS_OK) f = qs_replica_fold(f, h, n);
    }
    qs_host_free(h);
    QS_TRY(st);
    uint64_t lo, hi;
    QS_TRY(qs_comm_allreduce_minmax_u64(gs->comm, f, &lo, &hi, gs->timeout_s));
    if (lo != hi)
        return QS_FAIL(QS_ERR_MISMATCH,
                       "after step %lld the replicas' parameters differ between ranks (fingerprints %016llx .. %016llx): "
                       "data parallelism lost synchronisation; this is a qsync bug",
                       (long long)step, (unsigned long long)lo, (unsigned long long)hi);
    return QS_OK;
}
