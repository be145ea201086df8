/* src/cuda/cuda_common.h — defines: what every src/cuda file shares (cuda_common.c): the CUDA
 * backend's handle and stream, the plan kind tags, the error-check macro of CUDA runtime calls,
 * the launch check and making the backend's context current. Host code is C (gcc); kernels are
 * CUDA C++ (nvcc), exported with C linkage.
 *
 * Errors inside kernels that the CPU backend reports at once (non-finite input to an INT8/FP8
 * quantize) are recorded in a device flag word (qs_cuda_backend.flags) and reported, with the
 * op named, by the next stream_sync. */
#ifndef QSYNC_CUDA_CUDA_COMMON_H
#define QSYNC_CUDA_CUDA_COMMON_H

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "cuda/cuda_green.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qs_stream {
    cudaStream_t s;
};

/* Bits of the device flag word (qs_cuda_backend.flags). */
enum { QS_CUDA_FLAG_NONFINITE_QUANTIZE = 1u };

typedef struct qs_cuda_backend {
    qs_backend base;              /* ops, num_threads (unused) */
    int device;                   /* CUDA device ordinal */
    struct cudaDeviceProp props;
    struct qs_stream stream;      /* the default stream (created non-blocking) */
    unsigned int *flags;          /* device word of QS_CUDA_FLAG_* bits, cleared by stream_sync */
    size_t in_use, peak;          /* bytes from alloc(), as requested */
    struct qs_cuda_alloc *allocs; /* live allocations (pointer → size), for free() accounting */
    void *lt;                     /* cublasLtHandle_t (cuda_gemm.c), created on first use */
    void *dnn;                    /* cudnnHandle_t (cuda_conv_common.c), created on first use */
    qs_cuda_green green;          /* the SM partition all work runs on (QS_CUDA_SM_PARTITION), or none */
} qs_cuda_backend;

static inline qs_cuda_backend *qs_cuda_be(qs_backend *be) { return (qs_cuda_backend *)be; }

/* The stream an op runs on: s, or the backend's default stream when s is NULL. */
static inline cudaStream_t qs_cuda_stream_of(qs_backend *be, qs_stream *s) { return s ? s->s : qs_cuda_be(be)->stream.s; }

/* Every plan (linear, conv, pool, bmm) starts with this tag so plan_destroy can dispatch. */
typedef enum qs_cuda_plan_kind {
    QS_CUDA_PLAN_LINEAR = 0x4c494e31,
    QS_CUDA_PLAN_CONV,
    QS_CUDA_PLAN_POOL,
    QS_CUDA_PLAN_BMM
} qs_cuda_plan_kind;

/* Check a CUDA runtime call; on failure record a message naming the call and return
 * QS_ERR_BACKEND from the enclosing function. */
#define QS_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t qs_cu_err_ = (call);                                                           \
        if (qs_cu_err_ != cudaSuccess) {                                                           \
            (void)cudaGetLastError(); /* not to be reported again by the next launch check */       \
            return QS_FAIL(QS_ERR_BACKEND, "%s failed: %s (%s)", #call, cudaGetErrorName(qs_cu_err_), \
                           cudaGetErrorString(qs_cu_err_));                                        \
        }                                                                                          \
    } while (0)

/* After a kernel launch: a launch error (bad configuration, no kernel image for this GPU, or
 * an earlier asynchronous fault) as QS_ERR_BACKEND naming `what`. */
qs_status qs_cuda_check_launch(const char *what);

/* Make the backend's context current for the calling thread: its green context when it runs
 * on an SM partition, else the device's primary context (cudaSetDevice). Call it before
 * creating anything that belongs to a context (streams, events, library handles). */
qs_status qs_cuda_make_current(qs_cuda_backend *cb);

#ifdef __cplusplus
}
#endif
#endif
