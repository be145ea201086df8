/* src/cuda/cuda_ipc.h — defines: the device primitives the GPU transports of the communication
 * interface (src/parallel/coll_ipc.c, coll_nccl.c) are built from, in plain C types: the GPU's
 * UUID, streams of their own, events (also interprocess), CUDA IPC memory handles, and the sum
 * of several buffers in a fixed order (cuda_ipc_sum.cu). Nothing here knows of ranks,
 * communicators or protocols. Every stream and event belongs to the backend's context (its
 * green context when it runs on an SM partition). */
#ifndef QSYNC_CUDA_CUDA_IPC_H
#define QSYNC_CUDA_CUDA_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "qsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of a CUDA IPC handle (cudaIpcMemHandle_t, cudaIpcEventHandle_t). */
#define QS_CUDA_IPC_HANDLE_BYTES 64
/* At most this many buffers in one qs_cuda_ipc_sum. */
#define QS_CUDA_SUM_MAX_SRC 8

typedef struct qs_cuda_ipc_handle {
    unsigned char bytes[QS_CUDA_IPC_HANDLE_BYTES];
} qs_cuda_ipc_handle;

typedef struct qs_cuda_event qs_cuda_event; /* a cudaEvent_t */

/* The 16-byte UUID of backend be's GPU (CUDA backend). */
qs_status qs_cuda_ipc_device_uuid(qs_backend *be, unsigned char uuid[16]);

/* A non-blocking stream of backend be; destroy synchronizes it first. Destroy is safe on NULL. */
qs_status qs_cuda_ipc_stream_create(qs_backend *be, qs_stream **out);
void qs_cuda_ipc_stream_destroy(qs_stream *s);

/* An event without timing of backend be; interprocess: one whose handle another process can
 * open. Destroy (also of an opened one) is safe on NULL. */
qs_status qs_cuda_ipc_event_create(qs_backend *be, bool interprocess, qs_cuda_event **out);
void qs_cuda_ipc_event_destroy(qs_cuda_event *e);
/* Record e after the work queued on s so far. */
qs_status qs_cuda_ipc_event_record(qs_cuda_event *e, qs_stream *s);
/* Make work queued on s afterwards wait for e's latest record (as of this call). */
qs_status qs_cuda_ipc_stream_wait(qs_stream *s, qs_cuda_event *e);
/* Whether e's latest record has completed. */
qs_status qs_cuda_ipc_event_query(qs_cuda_event *e, bool *done);
/* The handle of an interprocess event, and an event of this process opened from one. */
qs_status qs_cuda_ipc_event_handle(qs_cuda_event *e, qs_cuda_ipc_handle *out);
qs_status qs_cuda_ipc_event_open(const qs_cuda_ipc_handle *h, qs_cuda_event **out);

/* The handle of device allocation base (cudaMalloc'ed, its start), and the same allocation
 * mapped into this process from a handle; close unmaps (safe on NULL). */
qs_status qs_cuda_ipc_mem_handle(void *base, qs_cuda_ipc_handle *out);
qs_status qs_cuda_ipc_mem_open(const qs_cuda_ipc_handle *h, void **out);
void qs_cuda_ipc_mem_close(void *mapped);

/* dst[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ... for i < n, summed in FP32 in the order
 * of src (1 ≤ n_src ≤ QS_CUDA_SUM_MAX_SRC buffers, any of them mapped from another process),
 * on stream s of backend be (its SM count sizes the grid). dst may be none of the sources. */
qs_status qs_cuda_ipc_sum(qs_backend *be, qs_stream *s, const float *const *src, int n_src, float *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
