/* src/parallel/ipc_reduce.h — defines: the sum all-reduce of FP32 device buffers between ranks that
 * share one GPU, through CUDA IPC (NCCL refuses two ranks on one GPU, and this machine's MPI is
 * not CUDA-aware). Used by gradient averaging (grad_sync.c) when the model lives on a GPU.
 *
 * Every rank maps every peer's buffer (cudaIpcOpenMemHandle) and owns two interprocess events
 * per slot (a slot is one range reduced per step: a gradient bucket). Reducing slot k of range
 * [off, off + bytes):
 *   start   the range is final on the caller's stream: record ready[k] there; a non-blocking
 *           barrier (a one-float MPI all-reduce) will say so to the peers — issued as soon as
 *           every earlier slot's barriers are (collectives go in one order on every rank);
 *   phase 1 once every rank has arrived: on this rank's reduction stream, wait for every rank's
 *           ready[k], then sum the range of all W buffers in rank order 0..W−1 into this rank's
 *           scratch buffer (so every rank computes bit-identical sums); record read[k]; start a
 *           second barrier;
 *   phase 2 once every rank has read: wait for every rank's read[k], copy the scratch range into
 *           this rank's buffer.
 * finish waits for every started slot (the barriers with a timeout that names the ranks that
 * did not arrive) and makes the caller's stream wait for the copies. A rank cannot pass a
 * slot's barriers of the next step before every peer reached them in this one, so an event
 * waited for is always the record of the current step. Barriers progress only in start, poll
 * and finish (Open MPI has no asynchronous progress). */
#ifndef QSYNC_PARALLEL_IPC_REDUCE_H
#define QSYNC_PARALLEL_IPC_REDUCE_H

#include <stddef.h>

#include "core/backend.h"
#include "parallel/comm.h"

/* At most this many ranks share one GPU. */
#define QS_IPC_MAX_RANKS 8

typedef struct qs_ipc_reduce qs_ipc_reduce;

/* Collective over comm: map the peers' buffers. buf: this rank's device buffer of `bytes`, the
 * base of an allocation of backend be (CUDA); every rank passes the same bytes and n_slots.
 * Every rank fails when any does (the others with a message pointing at it). Errors:
 * QS_ERR_UNSUPPORTED (a build without CUDA; ranks on different GPUs — those reduce through
 * NCCL, parallel/nccl_reduce.h; more than QS_IPC_MAX_RANKS ranks), QS_ERR_MISMATCH (ranks disagree
 * on bytes or n_slots), QS_ERR_INVALID_ARG, QS_ERR_OOM, QS_ERR_BACKEND (a CUDA call failed, or
 * another rank's setup), QS_ERR_TIMEOUT (a peer did not arrive for the handle broadcasts). */
qs_status qs_ipc_reduce_open(qs_backend *be, qs_comm *comm, void *buf, size_t bytes, int n_slots, double timeout_s,
                             qs_ipc_reduce **out);
/* The range [off, off + bytes) of buf (4-byte aligned) is final on stream s: begin reducing it
 * as slot k (not started since the last finish). */
qs_status qs_ipc_reduce_start(qs_ipc_reduce *x, qs_stream *s, int k, size_t off, size_t bytes);
/* Advance every started slot as far as the barriers allow, without blocking. */
qs_status qs_ipc_reduce_poll(qs_ipc_reduce *x);
/* Complete every slot (all must have been started since the last finish: QS_ERR_INTERNAL
 * otherwise; each barrier waited for up to the timeout given at open), then make stream s wait
 * for the results; every slot is free again. */
qs_status qs_ipc_reduce_finish(qs_ipc_reduce *x, qs_stream *s);
/* Unmap, destroy events and scratch; safe on NULL. Collective only in the sense that peers
 * must not reduce afterwards. */
void qs_ipc_reduce_close(qs_ipc_reduce *x);

#endif
