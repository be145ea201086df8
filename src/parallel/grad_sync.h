/* src/parallel/grad_sync.h — defines: data-parallel gradient averaging over a qs_comm, bucketed
 * and overlapped with backward.
 *
 * Buckets: the parameter table's entries are grouped, walking from the last entry to the
 * first (the order backward produces them), into runs of at least `bucket_bytes` (the last may
 * be smaller); a bucket is one contiguous byte range of the gradient buffer. The assignment
 * depends only on the model, so every rank forms the same buckets in the same order.
 * Overlap: when the last node owning a bucket's gradients finishes its backward, the bucket's
 * sum all-reduce starts (non-blocking), and every later node's backward ends with progress of
 * the outstanding ones (Open MPI progresses only inside MPI calls). At the end of backward the
 * remaining ones are waited for (time accounted as comm_wait) and the sums are scaled by
 * 1/world — the gradient of the global-batch mean when ranks have equal local batches. With
 * unequal ones (qs_grad_sync_set_local_batch) each rank first multiplies its buckets by
 * world·b_r/B, so the result is Σ_r b_r·g_r / B, again the global-batch mean.
 * Without overlap every bucket starts at the end of backward.
 * Transport: one code path over the communication interface (parallel/coll.h), its transport
 * chosen from the model's backend and the ranks' GPUs — mpi on host buffers (the CPU backend),
 * ipc when every rank shares one GPU, nccl when each has its own; the gradient buffer is
 * registered with it, one handle per bucket. */
#ifndef QSYNC_PARALLEL_GRAD_SYNC_H
#define QSYNC_PARALLEL_GRAD_SYNC_H

#include <stdbool.h>
#include <stddef.h>

#include "parallel/coll.h"
#include "parallel/comm.h"
#include "graph/graph.h"

typedef struct qs_grad_bucket {
    size_t offset, bytes;  /* range of the gradient buffer */
    int first_entry, last_entry; /* parameter table entries covered */
    int pending;           /* entries whose gradients are not final yet in this backward */
    int req;               /* outstanding all-reduce (a qs_coll handle), or -1 */
} qs_grad_bucket;

typedef struct qs_grad_sync {
    qs_comm *comm;
    qs_model *m;
    bool overlap;
    double timeout_s;
    qs_grad_bucket *buckets;
    int n_buckets;
    int *entry_bucket;     /* parameter entry → bucket */
    float weight;          /* world·b_r/B: 1 with equal local batches (then no scaling) */
    qs_coll *coll;         /* the buckets' communicator, or NULL (a group of one) */
} qs_grad_sync;

/* The buckets of a parameter table's gradients (see above) into buckets[] and, per entry, its
 * bucket into entry_bucket[] (both t->count long); returns how many. The runtime and the
 * replayer (src/predict) form them with this one function. */
int qs_grad_buckets_form(const qs_table *t, size_t bucket_bytes, qs_grad_bucket *buckets, int *entry_bucket);

/* Form the buckets of m's gradients and install the model's gradient hooks. bucket_bytes > 0.
 * With a group of one nothing is installed (gradients are already the mean). */
qs_status qs_grad_sync_init(qs_grad_sync *gs, qs_comm *comm, qs_model *m, size_t bucket_bytes, bool overlap,
                            double timeout_s);
void qs_grad_sync_free(qs_grad_sync *gs);

/* This rank's local batch b_r out of the global batch B (the ranks' b_r sum to B): its
 * gradients, the mean over its b_r samples, enter the sum weighted so that the result is the
 * gradient of the global-batch mean. */
void qs_grad_sync_set_local_batch(qs_grad_sync *gs, int64_t local_batch, int64_t global_batch);

/* A fingerprint of the parameters (FNV-1a over their bytes) compared across ranks: fails with
 * QS_ERR_MISMATCH when any two replicas differ, naming the step. */
qs_status qs_grad_sync_check_replicas(qs_grad_sync *gs, int64_t step);

#endif
