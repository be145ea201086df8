/* src/cuda/cuda_launch.cuh — defines: what the CUDA kernel files share to launch their kernels
 * (CUDA C++, included by .cu files only): the stream of an op, grid sizes for grid-stride loops,
 * the argument checks every op starts with, the dispatch on an F32-or-BF16 operand, and
 * stream-ordered temporaries. */
#ifndef QSYNC_CUDA_CUDA_LAUNCH_CUH
#define QSYNC_CUDA_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>
#include <initializer_list>
#include <stdint.h>

#include "cuda/cuda_backend.h"

namespace qs_cuda {

constexpr int kBlocksPerSM = 16; /* grid cap of grid-stride loops: 2 full waves at 2048 threads/SM */

/* The op's stream: s, or the backend's default stream when s is NULL. */
inline cudaStream_t stream_of(qs_backend *be, qs_stream *s) { return s ? s->s : qs_cuda_be(be)->stream.s; }

/* Blocks for a grid-stride loop over `blocks_wanted` blocks' worth of work: all of them, up to
 * what fills the GPU (kBlocksPerSM per SM this process sees), at least 1. */
inline unsigned grid_cap(qs_backend *be, int64_t blocks_wanted) {
    const int64_t cap = (int64_t)qs_cuda_be(be)->props.multiProcessorCount * kBlocksPerSM;
    const int64_t b = blocks_wanted < cap ? blocks_wanted : cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* Blocks of `threads` threads for `items` work items (one per thread per pass). */
inline unsigned grid_for(qs_backend *be, int64_t items, int threads) {
    return grid_cap(be, (items + threads - 1) / threads);
}

/* Blocks of `threads` threads for a grid-stride loop over n elements, whatever the GPU: all of
 * them up to 65535·8, at least 1. */
inline unsigned grid_for_n(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535 * 8) b = 65535 * 8;
    return (unsigned)b;
}

/* n >= 0 elements and, when n > 0, no NULL pointer among ptrs (numbered from 1 in the message). */
inline qs_status args_check(const char *what, int64_t n, std::initializer_list<const void *> ptrs) {
    if (n < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative element count %lld", what, (long long)n);
    if (n == 0) return QS_OK;
    int k = 0;
    for (const void *p : ptrs) {
        k++;
        if (!p)
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s: pointer argument %d is NULL for %lld elements; pass a buffer", what,
                           k, (long long)n);
    }
    return QS_OK;
}

/* f(p) with p = x typed by dt (checked F32 or BF16 by the caller): const float *, or const
 * uint16_t * (BF16 bits) — how a launcher picks a kernel's element type. */
template <typename F>
void with_f32_or_bf16(const void *x, qs_dtype dt, F &&f) {
    if (dt == QS_BF16)
        f(static_cast<const uint16_t *>(x));
    else
        f(static_cast<const float *>(x));
}

/* A stream-ordered temporary, freed (stream-ordered) when it goes out of scope. */
struct Scratch {
    void *p = nullptr;
    cudaStream_t s;
    explicit Scratch(cudaStream_t st) : s(st) {}
    ~Scratch() {
        if (p) (void)cudaFreeAsync(p, s);
    }
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;
};

/* Allocate sc's `bytes` (at least 1) of `what` on its stream: QS_ERR_OOM or QS_ERR_BACKEND with
 * the op named when cudaMallocAsync fails. */
inline qs_status scratch_alloc(Scratch &sc, size_t bytes, const char *op, const char *what) {
    const cudaError_t e = cudaMallocAsync(&sc.p, bytes ? bytes : 1, sc.s);
    if (e != cudaSuccess) {
        sc.p = nullptr;
        (void)cudaGetLastError();
        return QS_FAIL(e == cudaErrorMemoryAllocation ? QS_ERR_OOM : QS_ERR_BACKEND,
                       "%s: cudaMallocAsync of %zu bytes of %s failed: %s (%s)", op, bytes, what, cudaGetErrorName(e),
                       cudaGetErrorString(e));
    }
    return QS_OK;
}

} // namespace qs_cuda

#endif
