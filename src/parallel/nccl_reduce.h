/* src/parallel/nccl_reduce.h — defines: the sum all-reduce of FP32 device buffers between ranks on
 * different GPUs, through NCCL (one rank per GPU; ranks sharing one GPU use CUDA IPC instead,
 * parallel/ipc_reduce.h: NCCL refuses two ranks on one GPU). Used by gradient averaging
 * (grad_sync.c), which picks the transport from the ranks' GPU layout (qs_gpu_layout_of).
 *
 * NCCL is loaded when first needed (dlopen of libnccl.so.2), so that qsync runs where it is
 * absent as long as no job spans GPUs. One communicator per job: rank 0 makes the unique id
 * and broadcasts it over MPI. NVLink SHARP multicast is kept off (NCCL_NVLS_ENABLE=0 is set
 * before the communicator is made), as the lent multi-GPU machines require. A range is reduced
 * in place on the transport's own stream once it is final on the caller's stream (start), so
 * buckets run beside the rest of backward; finish waits for them on the host, checking NCCL's
 * asynchronous error state, and aborts the communicator when they do not complete within the
 * timeout (a peer stalled or died). */
#ifndef QSYNC_PARALLEL_NCCL_REDUCE_H
#define QSYNC_PARALLEL_NCCL_REDUCE_H

#include <stddef.h>

#include "core/backend.h"
#include "parallel/comm.h"

/* How the ranks of a job sit on GPUs. */
typedef enum qs_gpu_layout {
    QS_GPUS_SHARED,   /* every rank on one GPU: CUDA IPC */
    QS_GPUS_ONE_EACH, /* every rank on its own GPU: NCCL */
    QS_GPUS_MIXED     /* some GPUs hold several ranks, and there are several GPUs */
} qs_gpu_layout;

/* Collective over comm: each rank's GPU (its UUID, backend be) compared with every other's;
 * the layout into *out, the number of distinct GPUs into *n_gpus. Errors: QS_ERR_UNSUPPORTED
 * (a build without CUDA), QS_ERR_TIMEOUT (a peer did not arrive). */
qs_status qs_gpu_layout_of(qs_backend *be, qs_comm *comm, double timeout_s, qs_gpu_layout *out, int *n_gpus);

typedef struct qs_nccl_reduce qs_nccl_reduce;

/* Collective over comm (every rank on its own GPU): load NCCL, make the communicator. buf: this
 * rank's device buffer of `bytes` (backend be, CUDA). Every rank fails when any does. Errors:
 * QS_ERR_UNSUPPORTED (no CUDA in this build; libnccl.so.2 not found), QS_ERR_BACKEND (NCCL or
 * CUDA failed, here or on another rank), QS_ERR_INVALID_ARG, QS_ERR_OOM, QS_ERR_TIMEOUT. */
qs_status qs_nccl_reduce_open(qs_backend *be, qs_comm *comm, void *buf, size_t bytes, double timeout_s,
                              qs_nccl_reduce **out);
/* The range [off, off + bytes) of buf (4-byte aligned) is final on stream s: enqueue its sum
 * over the ranks, in place, after it. Every rank starts the same ranges in the same order. */
qs_status qs_nccl_reduce_start(qs_nccl_reduce *x, qs_stream *s, size_t off, size_t bytes);
/* NCCL's asynchronous error state, without blocking (QS_ERR_BACKEND on an error). */
qs_status qs_nccl_reduce_poll(qs_nccl_reduce *x);
/* Wait until every started range is reduced (QS_ERR_TIMEOUT after the timeout given at open:
 * the communicator is aborted), then make stream s wait for the results. */
qs_status qs_nccl_reduce_finish(qs_nccl_reduce *x, qs_stream *s);
/* Destroy the communicator and the stream; safe on NULL. */
void qs_nccl_reduce_close(qs_nccl_reduce *x);

#endif
