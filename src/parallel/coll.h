/* src/parallel/coll.h — defines: the communication interface of the job's ranks — a
 * communicator (qs_coll) over the process group (parallel/comm.h) on one transport, and
 * asynchronous collectives on its buffers, each returning a completion handle to test, wait for
 * with a timeout, or cancel. Gradient averaging (grad_sync.c), the all-reduce profile and
 * `qsync bench allreduce` use it; compression, sharding and decentralized schedules are written
 * once above it.
 *
 * Transports (one per communicator, chosen at open; QS_COLL_AUTO picks it from the buffers'
 * backend and the ranks' GPUs, the same on every rank):
 *   mpi   host buffers, Open MPI (coll_mpi.c). Open MPI has no asynchronous progress: a started
 *         collective advances only while this rank is inside MPI, i.e. in qs_coll_test,
 *         qs_coll_progress or qs_coll_wait, so callers overlapping compute poll one of them.
 *   ipc   device buffers of ranks that share one GPU, through CUDA IPC (coll_ipc.c): every rank
 *         maps the peers' registered buffers; a two-barrier protocol per collective; sums in
 *         FP32 in rank order 0..W−1 on every rank, so every rank's result is bit-identical.
 *   nccl  device buffers, one GPU per rank, through NCCL loaded by dlopen (coll_nccl.c).
 * A build without the CUDA backend refuses ipc and nccl at open (QS_ERR_UNSUPPORTED).
 *
 * Collectives (every rank calls the same ones in the same order with matching counts; counts
 * are elements of dtype dt; a rank's pieces are laid out in rank order, piece p at the sum of
 * the counts before it):
 *                    mpi   ipc   nccl   dtypes summed
 *   all-reduce       yes   yes   yes    mpi: f32 s32 i64; ipc: f32; nccl: f32 bf16 f16 s32 i64
 *   reduce-scatter   yes   yes   yes    as all-reduce (equal or per-rank counts)
 *   all-gather       yes   yes   yes    any dtype (equal or per-rank counts)
 *   all-to-all       yes   yes   yes    any dtype (equal counts)
 *   send / recv      yes   no    yes    any dtype
 *   send-recv        yes   no    yes    any dtype (one exchange: a send and a recv together)
 * What a transport cannot do fails with QS_ERR_UNSUPPORTED naming the transport and the
 * collective. Buffers that are read or written by several collectives in flight at once are the
 * caller's to keep apart; out-of-place collectives refuse overlapping send and receive buffers
 * (but the in-place all-gather, below).
 *
 * Device transports (ipc, nccl): a collective starts once its inputs are final on the stream s
 * given at start (NULL: the backend's default stream) and runs on the transport's own stream;
 * when its handle completes (test or wait says done), s has been made to wait for the results,
 * so work queued on s afterwards sees them; the host does not wait for the GPU except where
 * the transport needs it (nccl's test looks at an event). The mpi transport ignores s: host
 * buffers are final when the call is made.
 *
 * Handles: an int >= 0 while outstanding (at most max_inflight of them); it is released when
 * test or wait reports completion, or by cancel. A wait that times out names the ranks that did
 * not arrive (qs_comm_timeout_error: the step announcements of qs_comm_arrive) and cancels the
 * collective. Cancelling a collective (all but mpi's send and recv) leaves the ranks out of
 * step: the communicator then refuses new collectives and may only be closed — the job is
 * aborting. */
#ifndef QSYNC_PARALLEL_COLL_H
#define QSYNC_PARALLEL_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "parallel/comm.h"
#include "qsync/dtype.h"
#include "qsync/status.h"

typedef enum qs_coll_transport {
    QS_COLL_AUTO = 0, /* at open: mpi for host buffers, else by the ranks' GPUs (qs_coll_gpu_layout) */
    QS_COLL_MPI,
    QS_COLL_IPC,
    QS_COLL_NCCL
} qs_coll_transport;

/* "auto", "mpi", "ipc", "nccl". */
const char *qs_coll_transport_name(qs_coll_transport t);

typedef struct qs_coll_options {
    qs_coll_transport transport;
    qs_backend *be;   /* the backend owning the buffers; NULL or a CPU backend: host buffers */
    int max_inflight; /* handles outstanding at once (ipc: its event slots); <= 0: 256 */
    double timeout_s; /* for the collectives of open and register (<= 0: none) */
} qs_coll_options;

typedef struct qs_coll qs_coll;

/* Collective over comm: make a communicator of its ranks on o->transport. Every rank fails
 * when any does (the others with a message pointing at it). Errors: QS_ERR_UNSUPPORTED (a
 * transport this build or these GPUs cannot have: ipc across GPUs, nccl within one, more than
 * 8 ranks on one GPU for ipc, ranks mixed over GPUs for auto, libnccl.so.2 missing),
 * QS_ERR_INVALID_ARG (a device transport without a CUDA backend), QS_ERR_MISMATCH (the ranks
 * disagree), QS_ERR_OOM, QS_ERR_BACKEND, QS_ERR_TIMEOUT. */
qs_status qs_coll_open(qs_comm *comm, const qs_coll_options *o, qs_coll **out);
/* Release the transport; handles still outstanding are abandoned. Safe on NULL. Peers must not
 * start collectives with this rank afterwards. */
void qs_coll_close(qs_coll *c);

/* The transport chosen (never QS_COLL_AUTO) and the group. */
qs_coll_transport qs_coll_transport_of(const qs_coll *c);
qs_comm *qs_coll_comm(const qs_coll *c);

/* Collective: declare buf[0..bytes) (device memory of the backend, the base of its own
 * allocation) as a buffer that peers read from. ipc maps it in every peer and keeps a scratch
 * copy of its size for in-place sums; every ipc collective's send buffer (and an all-reduce's
 * buffer) must lie inside a registered buffer, at the same offset on every rank. Every rank
 * registers the same sizes in the same order. mpi and nccl need none: QS_OK at once. */
qs_status qs_coll_register(qs_coll *c, void *buf, size_t bytes);

/* Sum of buf[0..count) over the ranks, in place. */
qs_status qs_coll_allreduce(qs_coll *c, void *buf, int64_t count, qs_dtype dt, qs_stream *s, int *req);
/* send holds world·count elements; recv[0..count) = the sum over the ranks of their piece
 * `rank` (send[rank·count ..]). recv must not overlap send. */
qs_status qs_coll_reduce_scatter(qs_coll *c, const void *send, void *recv, int64_t count, qs_dtype dt, qs_stream *s,
                                 int *req);
/* The same with per-rank pieces: counts[p] (world entries, equal on every rank) is piece p's
 * length; send holds Σcounts, recv counts[rank]. counts is read during the call only. */
qs_status qs_coll_reduce_scatterv(qs_coll *c, const void *send, void *recv, const int64_t *counts, qs_dtype dt,
                                  qs_stream *s, int *req);
/* recv (world·count elements) = every rank's send[0..count) in rank order. In place when send
 * is recv + rank·count (this rank's piece already there). */
qs_status qs_coll_allgather(qs_coll *c, const void *send, void *recv, int64_t count, qs_dtype dt, qs_stream *s,
                            int *req);
/* The same with per-rank pieces: rank p contributes counts[p] elements; recv holds Σcounts. In
 * place when send is recv + (Σ_{p<rank} counts[p]). */
qs_status qs_coll_allgatherv(qs_coll *c, const void *send, void *recv, const int64_t *counts, qs_dtype dt,
                             qs_stream *s, int *req);
/* send and recv hold world·count elements: recv's piece p = rank p's send piece `rank`. */
qs_status qs_coll_alltoall(qs_coll *c, const void *send, void *recv, int64_t count, qs_dtype dt, qs_stream *s,
                           int *req);
/* Point to point with rank peer (not this rank): messages between two ranks arrive in the order
 * they were sent; a recv's count equals its send's. On nccl a send or recv holds the
 * transport's stream until the peer's matching call runs, so ranks exchanging in both
 * directions (a ring, neighbours) use qs_coll_sendrecv, which nccl runs as one group. */
qs_status qs_coll_send(qs_coll *c, const void *buf, int64_t count, qs_dtype dt, int peer, qs_stream *s, int *req);
qs_status qs_coll_recv(qs_coll *c, void *buf, int64_t count, qs_dtype dt, int peer, qs_stream *s, int *req);
/* One exchange: send[0..count) to rank `to` and recv[0..count) from rank `from` (neither this
 * rank; they may be the same peer), one handle. send and recv must not overlap. */
qs_status qs_coll_sendrecv(qs_coll *c, const void *send, int to, void *recv, int from, int64_t count, qs_dtype dt,
                           qs_stream *s, int *req);

/* Advance every outstanding collective as far as it can go without blocking (and look for a
 * transport's asynchronous errors). */
qs_status qs_coll_progress(qs_coll *c);
/* Progress, then whether handle req has completed (*done; then req is released). */
qs_status qs_coll_test(qs_coll *c, int req, bool *done);
/* Poll req (with heartbeats) until it completes; after timeout_s seconds (<= 0: no timeout)
 * QS_ERR_TIMEOUT naming the ranks that did not arrive, and the collective is cancelled. */
qs_status qs_coll_wait(qs_coll *c, int req, double timeout_s);
/* Abandon req without completing it (see the file comment); its buffers stay the transport's
 * until close. */
void qs_coll_cancel(qs_coll *c, int req);

/* How the ranks of a job sit on GPUs. */
typedef enum qs_gpu_layout {
    QS_GPUS_SHARED,   /* every rank on one GPU: ipc */
    QS_GPUS_ONE_EACH, /* every rank on its own GPU: nccl */
    QS_GPUS_MIXED     /* some GPUs hold several ranks, and there are several GPUs */
} qs_gpu_layout;

/* Collective over comm: each rank's GPU (its UUID, CUDA backend be) compared with every
 * other's; the layout into *out, the number of distinct GPUs into *n_gpus. Errors:
 * QS_ERR_UNSUPPORTED (a build without CUDA), QS_ERR_INVALID_ARG, QS_ERR_TIMEOUT. */
qs_status qs_coll_gpu_layout(qs_backend *be, qs_comm *comm, double timeout_s, qs_gpu_layout *out, int *n_gpus);

#endif
