/* src/cuda/cuda_quant.cuh — defines: what the quant family's kernel files (cuda_quant.cu,
 * cuda_quant_dequant.cu) share (CUDA C++, included by .cu files only): the element formats, the
 * block size and grid rule, the op's stream and which dtypes carry scales. */
#ifndef QSYNC_CUDA_CUDA_QUANT_CUH
#define QSYNC_CUDA_CUDA_QUANT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/cuda_backend.h"

/* Threads per block of every kernel here (a multiple of 32: the reductions use whole warps). */
#define QQ_THREADS 256
/* Grid-stride kernels use at most this many blocks per SM. */
#define QQ_BLOCKS_PER_SM 8

/* Element formats of the kernels (qs_dtype mapped to compile-time cases). */
enum qq_fmt { QQ_F32, QQ_BF16, QQ_F16, QQ_S8, QQ_E4M3, QQ_E5M2 };

/* The op's stream: s, or the backend's default stream. */
static inline cudaStream_t qq_stream(qs_backend *be, qs_stream *s) { return s ? s->s : qs_cuda_be(be)->stream.s; }

/* Blocks for `work` independent items in a grid-stride kernel: enough to cover them, at most
 * QQ_BLOCKS_PER_SM per SM. work > 0. */
static inline unsigned qq_grid(qs_backend *be, uint64_t work) {
    uint64_t need = (work + QQ_THREADS - 1) / QQ_THREADS;
    int sms = qs_cuda_be(be)->props.multiProcessorCount;
    uint64_t cap = (uint64_t)(sms > 0 ? sms : 1) * QQ_BLOCKS_PER_SM;
    return (unsigned)(need < cap ? (need > 0 ? need : 1) : cap);
}

/* Whether dt carries dequantization scales (S8, FP8). */
static inline bool qq_scaled(qs_dtype dt) { return dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2; }

#endif
