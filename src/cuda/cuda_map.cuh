/* src/cuda/cuda_map.cuh — defines: what the element-wise op files of the CUDA backend share (CUDA
 * C++, included by .cu files only): 256-thread blocks, the flat map kernel k_map and its launcher
 * (float4 at a time when every pointer is 16-byte aligned, then the tail element by element),
 * alignment tests, FP32 / BF16 loads and the logistic function.
 *
 * Bitwise agreement with the CPU backend (src/cpu): element formulas are the CPU's, in the same
 * order and types, with every product that meets a sum written as __fmul_rn / __fadd_rn so that
 * nvcc cannot contract it into an FMA (the CPU is built as ISO C11, which does not contract
 * either); divisions and square roots are the IEEE-rounded __fdiv_rn / __fsqrt_rn. A NaN made by
 * arithmetic (NaN + x, NaN·x) is the GPU's canonical NaN 0x7fffffff where x86 propagates the
 * input's payload and sign; selects and copies keep the bits. expf (logistic) is no such bitwise
 * match: ≤ 2 ulp on the GPU, < 1 ulp in glibc, so what follows it agrees within the tolerance its
 * test rows derive. Kernels use grid-stride loops over int64 indices; n == 0 queues nothing. */
#ifndef QSYNC_CUDA_CUDA_MAP_CUH
#define QSYNC_CUDA_CUDA_MAP_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include <initializer_list>

#include "core/numfmt.h"
#include "cuda/cuda_launch.cuh"

namespace {

constexpr int kThreads = 256;
using qs_cuda::stream_of;

/* Blocks of kThreads threads for `items` work items (one per thread per pass). */
inline unsigned int grid_for(qs_backend *be, int64_t items) { return qs_cuda::grid_for(be, items, kThreads); }

/* Whether p is a multiple of `bytes` (a power of two); whether every pointer is 16-byte aligned. */
inline bool aligned(const void *p, uintptr_t bytes) { return ((uintptr_t)p & (bytes - 1)) == 0; }
inline bool aligned16(std::initializer_list<const void *> ptrs) {
    for (const void *p : ptrs)
        if (!aligned(p, 16)) return false;
    return true;
}

/* Elements 4·i4 .. 4·i4+3 of an FP32 tensor (16-byte aligned). */
__device__ __forceinline__ float4 ld4(const float *p, int64_t i4) { return reinterpret_cast<const float4 *>(p)[i4]; }
__device__ __forceinline__ void st4(float *p, int64_t i4, float4 v) { reinterpret_cast<float4 *>(p)[i4] = v; }

/* Apply op over n elements: op.four(i4) handles elements 4·i4 .. 4·i4+3 (only when `vec`:
 * every pointer of op 16-byte aligned), op.one(i) element i. Each element is read and written
 * by one thread, read first, so outputs may alias inputs element for element. */
template <typename Op>
__global__ void __launch_bounds__(kThreads) k_map(int64_t n, bool vec, Op op) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (vec) {
        const int64_t n4 = n / 4;
        for (int64_t i = t; i < n4; i += stride) op.four(i);
        done = n4 * 4;
    }
    for (int64_t i = done + t; i < n; i += stride) op.one(i);
}

template <typename Op>
qs_status launch_map(qs_backend *be, qs_stream *s, int64_t n, bool vec, const Op &op, const char *what) {
    if (n == 0) return QS_OK;
    k_map<Op><<<grid_for(be, vec ? (n + 3) / 4 : n), kThreads, 0, stream_of(be, s)>>>(n, vec, op);
    return qs_cuda_check_launch(what);
}

/* Element i (one) or elements 4·i4 .. 4·i4+3 (four, 8-byte aligned) of an FP32 or BF16 (uint16_t
 * bits, widened exactly) tensor, as FP32. */
__device__ __forceinline__ float ld1(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld1(const uint16_t *p, int64_t i) { return qs_nf_bits_f32(qs_nf_bf16_to_f32(p[i])); }
__device__ __forceinline__ float4 ld4(const uint16_t *p, int64_t i4) {
    const uint2 u = reinterpret_cast<const uint2 *>(p)[i4];
    return make_float4(qs_nf_bits_f32(u.x << 16), qs_nf_bits_f32(u.x & 0xffff0000u), qs_nf_bits_f32(u.y << 16),
                       qs_nf_bits_f32(u.y & 0xffff0000u));
}

/* The logistic σ(z) = 1/(1 + e), e = expf(−z), and 1 − σ = e·σ (taken as 1 below z = −80, as
 * it is in FP32: further down e·σ loses bits and then is ∞·0): the CPU's qs_cpu_logistic
 * (src/cpu/cpu_common.h), operation for operation. */
__device__ __forceinline__ float logistic(float z, float *one_minus) {
    const float e = expf(-z), sg = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    *one_minus = z < -80.0f ? 1.0f : __fmul_rn(e, sg);
    return sg;
}

} // namespace

#endif
