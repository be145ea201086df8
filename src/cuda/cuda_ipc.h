/* src/cuda/cuda_ipc.h — defines: the kernel side of the IPC all-reduce (cuda_ipc.c). */
#ifndef QSYNC_CUDA_CUDA_IPC_H
#define QSYNC_CUDA_CUDA_IPC_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "core/backend.h"
#include "qsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ... for i < n, summed in FP32 in the order
 * of src (n_src ≤ QS_IPC_MAX_RANKS buffers, any of them mapped from another process), on
 * stream s of backend be (its SM count sizes the grid). dst may be none of the sources. */
qs_status qs_cuda_sum_ranks(qs_backend *be, cudaStream_t s, const float *const *src, int n_src, float *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
