/* src/cuda/cuda_elementwise.cu — memory-bound FP32 ops of the CUDA backend: ReLU, add,
 * accumulate, scale, dropout, NHWC <-> NCHW, f32/bf16/f16 casts, column sums, sum of squares,
 * SGD and AdamW steps. Contracts are those of src/core/backend.h; every op is queued on the
 * stream (asynchronous) except sum_squares, whose result is returned on the host.
 *
 * Bitwise agreement with the CPU backend (src/cpu): the element formulas are the CPU's, in
 * the same order and types, with every product that meets a sum written as __fmul_rn /
 * __fadd_rn so that nvcc cannot contract it into an FMA (the CPU is built as ISO C11, which
 * does not contract either); divisions and square roots are the IEEE-rounded __fdiv_rn /
 * __fsqrt_rn. Dropout masks come from the same Philox words (qsync/rng.h), casts from the
 * same bit-level conversions (core/numfmt.h). One exception: a NaN produced by arithmetic
 * (NaN + x, NaN·x) is the GPU's canonical NaN 0x7fffffff where x86 propagates the input's
 * payload and sign; selects and copies (ReLU, masks, casts) keep the bits. The
 * double-precision reductions (column sums, sum of squares) are deterministic — a fixed split
 * that depends only on the shape — but add in another order than the CPU's, so they agree
 * with it to double rounding (the FP32 column sums came out identical in the tests).
 *
 * Kernels: 256 threads per block, grid-stride loops over int64 indices, n == 0 queues
 * nothing. Flat element-wise ops take 4 floats at a time (float4) when all their pointers are
 * 16-byte aligned, then finish the tail element by element. */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <initializer_list>
#include <type_traits>

#include "core/numfmt.h"
#include "cuda/cuda_launch.cuh"
#include "qsync/rng.h"

namespace {

constexpr int kThreads = 256;
using qs_cuda::args_check;
using qs_cuda::grid_cap;
using qs_cuda::stream_of;
using qs_cuda::with_f32_or_bf16;

/* Blocks of kThreads threads for `items` work items (one per thread per pass). */
unsigned int grid_for(qs_backend *be, int64_t items) { return qs_cuda::grid_for(be, items, kThreads); }

bool aligned(const void *p, uintptr_t bytes) { return ((uintptr_t)p & (bytes - 1)) == 0; }
bool aligned16(std::initializer_list<const void *> ptrs) {
    for (const void *p : ptrs)
        if (!aligned(p, 16)) return false;
    return true;
}

/* ------------------------------------------------------------- flat element-wise maps */

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

/* y = x < 0 ? 0 : x (NaN and -0 pass through, like the CPU and torch.relu). */
struct ReluFwd {
    const float *x;
    float *y;
    __device__ static float f(float v) { return v < 0.0f ? 0.0f : v; }
    __device__ void one(int64_t i) const { y[i] = f(x[i]); }
    __device__ void four(int64_t i) const {
        float4 v = ld4(x, i);
        v.x = f(v.x), v.y = f(v.y), v.z = f(v.z), v.w = f(v.w);
        st4(y, i, v);
    }
};

/* Element i (one) or elements 4·i4 .. 4·i4+3 (four, 8-byte aligned) of an FP32 or BF16 (uint16_t
 * bits, widened exactly) tensor, as FP32. */
__device__ __forceinline__ float ld1(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld1(const uint16_t *p, int64_t i) { return qs_nf_bits_f32(qs_nf_bf16_to_f32(p[i])); }
__device__ __forceinline__ float4 ld4(const uint16_t *p, int64_t i4) {
    const uint2 u = reinterpret_cast<const uint2 *>(p)[i4];
    return make_float4(qs_nf_bits_f32(u.x << 16), qs_nf_bits_f32(u.x & 0xffff0000u), qs_nf_bits_f32(u.y << 16),
                       qs_nf_bits_f32(u.y & 0xffff0000u));
}

/* dx = y > 0 ? dy : 0, or dx += that; G: dy's element type (float, or uint16_t BF16 bits). */
template <bool ACC, typename G>
struct ReluBwd {
    const float *y;
    const G *dy;
    float *dx;
    __device__ static float f(float yv, float g, float old) {
        float d = yv > 0.0f ? g : 0.0f;
        return ACC ? __fadd_rn(old, d) : d;
    }
    __device__ void one(int64_t i) const { dx[i] = f(y[i], ld1(dy, i), ACC ? dx[i] : 0.0f); }
    __device__ void four(int64_t i) const {
        const float4 a = ld4(y, i), g = ld4(dy, i);
        const float4 o = ACC ? ld4(dx, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        st4(dx, i, make_float4(f(a.x, g.x, o.x), f(a.y, g.y, o.y), f(a.z, g.z, o.z), f(a.w, g.w, o.w)));
    }
};

/* y = a + b, or (a + b) > 0 ? a + b : 0 with RELU (NaN → 0, as the CPU's fused Add→ReLU); A, B:
 * a's and b's element types (float, or uint16_t BF16 bits). */
template <bool RELU, typename A, typename B>
struct AddFwd {
    const A *a;
    const B *b;
    float *y;
    __device__ static float f(float u, float v) {
        float r = __fadd_rn(u, v);
        return RELU ? (r > 0.0f ? r : 0.0f) : r;
    }
    __device__ void one(int64_t i) const { y[i] = f(ld1(a, i), ld1(b, i)); }
    __device__ void four(int64_t i) const {
        const float4 u = ld4(a, i), v = ld4(b, i);
        st4(y, i, make_float4(f(u.x, v.x), f(u.y, v.y), f(u.z, v.z), f(u.w, v.w)));
    }
};

/* dst += src. */
struct AccAdd {
    const float *src;
    float *dst;
    __device__ void one(int64_t i) const { dst[i] = __fadd_rn(dst[i], src[i]); }
    __device__ void four(int64_t i) const {
        const float4 u = ld4(dst, i), v = ld4(src, i);
        st4(dst, i, make_float4(__fadd_rn(u.x, v.x), __fadd_rn(u.y, v.y), __fadd_rn(u.z, v.z), __fadd_rn(u.w, v.w)));
    }
};

/* x *= alpha. */
struct Scale {
    float *x;
    float alpha;
    __device__ void one(int64_t i) const { x[i] = __fmul_rn(x[i], alpha); }
    __device__ void four(int64_t i) const {
        float4 v = ld4(x, i);
        v.x = __fmul_rn(v.x, alpha), v.y = __fmul_rn(v.y, alpha), v.z = __fmul_rn(v.z, alpha),
        v.w = __fmul_rn(v.w, alpha);
        st4(x, i, v);
    }
};

/* dx = mask ? dy·scale : 0, or dx += that (four() also needs mask 4-byte aligned). */
template <bool ACC>
struct DropoutBwd {
    const float *dy;
    const uint8_t *mask;
    float scale;
    float *dx;
    __device__ float f(uint8_t m, float g, float old) const {
        float d = m ? __fmul_rn(g, scale) : 0.0f;
        return ACC ? __fadd_rn(old, d) : d;
    }
    __device__ void one(int64_t i) const { dx[i] = f(mask[i], dy[i], ACC ? dx[i] : 0.0f); }
    __device__ void four(int64_t i) const {
        const uchar4 m = reinterpret_cast<const uchar4 *>(mask)[i];
        const float4 g = ld4(dy, i);
        const float4 o = ACC ? ld4(dx, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        st4(dx, i, make_float4(f(m.x, g.x, o.x), f(m.y, g.y, o.y), f(m.z, g.z, o.z), f(m.w, g.w, o.w)));
    }
};

/* ------------------------------------------------------------------------ dropout */

/* Element i keeps iff word i%4 of Philox(key, base + i/4) >= thresh (= ceil(p·2^32)), base as
 * qs_dropout_rng says (rng passed by value, step_at read here); one thread per block of 4
 * elements, as the CPU (src/cpu/cpu_dropout.c). */
__global__ void __launch_bounds__(kThreads)
    k_dropout_fwd(int64_t n, const float *x, float *y, uint8_t *mask, uint64_t thresh, float scale, qs_dropout_rng rng,
                  bool vec) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const uint64_t key = rng.key,
                   counter_base = rng.step_at ? (uint64_t)*rng.step_at * rng.step_stride : rng.counter_base;
    const int64_t nblk = (n + 3) / 4;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nblk; j += stride) {
        uint32_t u[4];
        qs_philox4x32(key, 0, counter_base + (uint64_t)j, u);
        const int64_t i0 = 4 * j;
        if (vec && i0 + 4 <= n) {
            const uchar4 m = make_uchar4((uint64_t)u[0] >= thresh, (uint64_t)u[1] >= thresh,
                                         (uint64_t)u[2] >= thresh, (uint64_t)u[3] >= thresh);
            const float4 v = ld4(x, j);
            st4(y, j,
                make_float4(m.x ? __fmul_rn(v.x, scale) : 0.0f, m.y ? __fmul_rn(v.y, scale) : 0.0f,
                            m.z ? __fmul_rn(v.z, scale) : 0.0f, m.w ? __fmul_rn(v.w, scale) : 0.0f));
            reinterpret_cast<uchar4 *>(mask)[j] = m;
        } else {
            const int64_t cnt = n - i0 < 4 ? n - i0 : 4;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (k < cnt) {
                    const uint8_t keep = (uint64_t)u[k] >= thresh;
                    mask[i0 + k] = keep;
                    y[i0 + k] = keep ? __fmul_rn(x[i0 + k], scale) : 0.0f;
                }
            }
        }
    }
}

qs_status dropout_p_check(const char *what, float p) {
    if (!(p >= 0.0f && p <= 1.0f))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: drop probability %g is outside [0, 1]", what, (double)p);
    return QS_OK;
}

/* 1/(1-p) for kept values; p = 1 drops everything (scale unused). Same float expression as the CPU. */
float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

/* ------------------------------------------------------------------- NHWC <-> NCHW */

constexpr int kTile = 32;

/* For each of `batch` matrices: dst (cols, rows) = src (rows, cols)ᵀ, or dst += srcᵀ with ACC.
 * Block (32, 8) moves one 32×32 tile through shared memory so that reads and writes are both
 * coalesced; tiles are visited grid-stride (batch-major), so any shape fits the grid. */
template <bool ACC>
__global__ void __launch_bounds__(kThreads)
    k_transpose(int64_t batch, int64_t rows, int64_t cols, const float *src, float *dst) {
    __shared__ float tile[kTile][kTile + 1];
    const int64_t rt = (rows + kTile - 1) / kTile, ct = (cols + kTile - 1) / kTile;
    const int64_t per = rt * ct, ntiles = batch * per;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int64_t b = t / per, rem = t % per;
        const int64_t r0 = (rem / ct) * kTile, c0 = (rem % ct) * kTile;
        const float *s = src + b * rows * cols;
        float *d = dst + b * rows * cols;
        for (int k = ty; k < kTile; k += kThreads / kTile) {
            const int64_t r = r0 + k, c = c0 + tx;
            if (r < rows && c < cols) tile[k][tx] = s[r * cols + c];
        }
        __syncthreads();
        for (int k = ty; k < kTile; k += kThreads / kTile) {
            const int64_t c = c0 + k, r = r0 + tx;
            if (r < rows && c < cols) {
                const float v = tile[tx][k];
                float *o = d + c * rows + r;
                *o = ACC ? __fadd_rn(*o, v) : v;
            }
        }
        __syncthreads(); /* the tile is reused by the next iteration */
    }
}

qs_status batched_transpose(qs_backend *be, qs_stream *s, int64_t batch, int64_t rows, int64_t cols,
                            const float *src, float *dst, bool accumulate, const char *what) {
    const int64_t tiles = batch * ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
    const dim3 block(kTile, kThreads / kTile);
    const unsigned int grid = grid_cap(be, tiles);
    if (accumulate)
        k_transpose<true><<<grid, block, 0, stream_of(be, s)>>>(batch, rows, cols, src, dst);
    else
        k_transpose<false><<<grid, block, 0, stream_of(be, s)>>>(batch, rows, cols, src, dst);
    return qs_cuda_check_launch(what);
}

qs_status layout_check(const char *what, int64_t N, int64_t H, int64_t W, int64_t C, const float *x,
                       const float *y) {
    if (N < 0 || H < 0 || W < 0 || C < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative dimension in (%lld,%lld,%lld,%lld)", what, (long long)N,
                       (long long)H, (long long)W, (long long)C);
    return args_check(what, N * H * W * C, {x, y});
}

/* --------------------------------------------------------------------------- cast */

enum CastMode { kF32toBF16, kF32toF16, kBF16toF32, kF16toF32, kBF16toF16, kF16toBF16 };

/* dst[i] = src[i] converted with round-to-nearest-even by core/numfmt.h's bit-level element
 * functions (the CPU's), bf16 <-> f16 through the exact f32 value. 32-bit values move as
 * their bit patterns, so NaN payloads are those the CPU produces. */
template <int MODE>
__global__ void __launch_bounds__(kThreads) k_cast(int64_t n, const void *src, void *dst) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if constexpr (MODE == kF32toBF16) {
            static_cast<uint16_t *>(dst)[i] = qs_nf_f32_to_bf16_rne(static_cast<const uint32_t *>(src)[i]);
        } else if constexpr (MODE == kF32toF16) {
            static_cast<uint16_t *>(dst)[i] = (uint16_t)qs_nf_f32_to_f16_rne(static_cast<const uint32_t *>(src)[i]);
        } else if constexpr (MODE == kBF16toF32) {
            static_cast<uint32_t *>(dst)[i] = qs_nf_bf16_to_f32(static_cast<const uint16_t *>(src)[i]);
        } else if constexpr (MODE == kF16toF32) {
            static_cast<uint32_t *>(dst)[i] = qs_nf_f16_to_f32(static_cast<const uint16_t *>(src)[i]);
        } else if constexpr (MODE == kBF16toF16) {
            static_cast<uint16_t *>(dst)[i] =
                (uint16_t)qs_nf_f32_to_f16_rne(qs_nf_bf16_to_f32(static_cast<const uint16_t *>(src)[i]));
        } else {
            static_cast<uint16_t *>(dst)[i] =
                qs_nf_f32_to_bf16_rne(qs_nf_f16_to_f32(static_cast<const uint16_t *>(src)[i]));
        }
    }
}

template <int MODE>
qs_status launch_cast(qs_backend *be, qs_stream *s, int64_t n, const void *src, void *dst) {
    k_cast<MODE><<<grid_for(be, n), kThreads, 0, stream_of(be, s)>>>(n, src, dst);
    return qs_cuda_check_launch("cast");
}

bool cast_supported(qs_dtype dt) { return dt == QS_F32 || dt == QS_BF16 || dt == QS_F16; }

/* -------------------------------------------------------------------- column sums */

constexpr int kColRowsPerChunk = 256; /* at least, before the chunk count is capped */
constexpr int64_t kColMaxBlocks = 4096;
constexpr int64_t kColMaxChunks = 1024;

/* Block (32, 8): columns [32·blockIdx.x, +32), rows of chunk blockIdx.y (of nchunk equal
 * splits). Thread (tx, ty) sums rows ty, ty+8, ... of its column in double; the 8 partials are
 * added in ty order. Writes part[chunk·cols + c], or the float sums[c] directly when there is
 * only one chunk (part NULL). */
__global__ void __launch_bounds__(kThreads)
    k_colsum_part(int64_t rows, int64_t cols, int64_t nchunk, const float *x, double *part, float *sums) {
    __shared__ double acc[kThreads / kTile][kTile];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = (int64_t)blockIdx.x * kTile + tx;
    const int64_t ch = blockIdx.y;
    const int64_t r0 = rows * ch / nchunk, r1 = rows * (ch + 1) / nchunk;
    double sum = 0.0;
    if (c < cols)
        for (int64_t r = r0 + ty; r < r1; r += kThreads / kTile) sum += (double)x[r * cols + c];
    acc[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && c < cols) {
        double t = acc[0][tx];
        for (int k = 1; k < kThreads / kTile; k++) t += acc[k][tx];
        if (part)
            part[ch * cols + c] = t;
        else
            sums[c] = (float)t;
    }
}

/* sums[c] = Σ_chunk part[chunk·cols + c], in chunk order. */
__global__ void __launch_bounds__(kThreads) k_colsum_final(int64_t cols, int64_t nchunk, const double *part, float *sums) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += stride) {
        double t = 0.0;
        for (int64_t ch = 0; ch < nchunk; ch++) t += part[ch * cols + c];
        sums[c] = (float)t;
    }
}

/* ---------------------------------------------------------------- sum of squares */

constexpr int64_t kSsqPerBlock = (int64_t)kThreads * 16; /* elements per block, at least */
constexpr int64_t kSsqMaxBlocks = 1024;

/* Fixed-order block sum of one double per thread (blockDim.x == kThreads); thread 0 gets it. */
__device__ double block_sum(double v) {
    __shared__ double sh[kThreads];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}

/* part[b] = Σ x_i² over the elements i ≡ b·256 + t (mod gridDim·256), in double. */
__global__ void __launch_bounds__(kThreads) k_ssq_part(int64_t n, const float *x, double *part) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double v = (double)x[i];
        acc = __dadd_rn(acc, __dmul_rn(v, v)); /* the square of a float is exact in double */
    }
    const double t = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = t;
}

/* *out = Σ part[0..nparts) (one block). */
__global__ void __launch_bounds__(kThreads) k_ssq_final(int64_t nparts, const double *part, double *out) {
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < nparts; i += blockDim.x) acc += part[i];
    const double t = block_sum(acc);
    if (threadIdx.x == 0) *out = t;
}

/* ------------------------------------------------------------------------ optimizers */

/* PyTorch SGD on one element; the CPU's expression order (src/cpu/cpu_optim.c). */
__global__ void __launch_bounds__(kThreads)
    k_sgd(int64_t n, float *p, const float *g, float *buf, float lr, float momentum, float keep, float wd,
          bool use_buf, bool nesterov, bool first_step) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float pi = p[i];
        float d = wd != 0.0f ? __fadd_rn(g[i], __fmul_rn(wd, pi)) : g[i];
        if (use_buf) {
            const float b = first_step ? d : __fadd_rn(__fmul_rn(momentum, buf[i]), __fmul_rn(keep, d));
            buf[i] = b;
            d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b;
        }
        p[i] = __fsub_rn(pi, __fmul_rn(lr, d));
    }
}

/* PyTorch AdamW on one element; the CPU's expression order and float scalars:
 * p = p·decay − step_size·(m / (sqrt(v)/bc2_sqrt + eps)). */
__global__ void __launch_bounds__(kThreads)
    k_adamw(int64_t n, float *p, const float *g, float *m, float *v, float decay, float b1, float b2, float c1,
            float c2, float step_size, float bc2_sqrt, float eps) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i];
        const float pi = __fmul_rn(p[i], decay);
        const float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(c1, gi));
        const float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(c2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        const float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        p[i] = __fsub_rn(pi, __fmul_rn(step_size, __fdiv_rn(mi, den)));
    }
}

} // namespace

/* ============================================================== exported ops (C linkage) */

/* y = max(x, 0) elementwise (NaN stays NaN; y may alias x). */
qs_status qs_cuda_relu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(args_check("relu_forward", n, {x, y}));
    return launch_map(be, s, n, aligned16({x, y}), ReluFwd{x, y}, "relu_forward");
}

/* dx = dy·[y > 0], or dx += that with accumulate; dy F32 or BF16 (dy_dt). */
qs_status qs_cuda_relu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const void *dy,
                                qs_dtype dy_dt, float *dx, bool accumulate) {
    QS_TRY(args_check("relu_backward", n, {y, dy, dx}));
    QS_TRY(qs_dy_dtype_check("relu_backward", dy_dt));
    const bool vec = aligned16({y, dy, dx});
    if (dy_dt == QS_BF16) {
        const uint16_t *g = static_cast<const uint16_t *>(dy);
        if (accumulate) return launch_map(be, s, n, vec, ReluBwd<true, uint16_t>{y, g, dx}, "relu_backward");
        return launch_map(be, s, n, vec, ReluBwd<false, uint16_t>{y, g, dx}, "relu_backward");
    }
    const float *g = static_cast<const float *>(dy);
    if (accumulate) return launch_map(be, s, n, vec, ReluBwd<true, float>{y, g, dx}, "relu_backward");
    return launch_map(be, s, n, vec, ReluBwd<false, float>{y, g, dx}, "relu_backward");
}

/* y = a + b, or max(a + b, 0) with relu (y may alias an F32 a or b); a, b F32 or BF16. */
qs_status qs_cuda_add_forward(qs_backend *be, qs_stream *s, int64_t n, const void *a, qs_dtype a_dt, const void *b,
                              qs_dtype b_dt, float *y, bool relu) {
    QS_TRY(args_check("add_forward", n, {a, b, y}));
    QS_TRY(qs_f32_or_bf16_check("add_forward", "first input dtype (a_dt)", a_dt));
    QS_TRY(qs_f32_or_bf16_check("add_forward", "second input dtype (b_dt)", b_dt));
    const bool vec = aligned16({a, b, y});
    qs_status st = QS_OK;
    with_f32_or_bf16(a, a_dt, [&](auto ap) {
        with_f32_or_bf16(b, b_dt, [&](auto bp) {
            using A = std::remove_cv_t<std::remove_pointer_t<decltype(ap)>>;
            using B = std::remove_cv_t<std::remove_pointer_t<decltype(bp)>>;
            st = relu ? launch_map(be, s, n, vec, AddFwd<true, A, B>{ap, bp, y}, "add_forward")
                      : launch_map(be, s, n, vec, AddFwd<false, A, B>{ap, bp, y}, "add_forward");
        });
    });
    return st;
}

/* dst = src (a device copy; nothing when src == dst) or dst += src. */
qs_status qs_cuda_accumulate(qs_backend *be, qs_stream *s, int64_t n, const float *src, float *dst, bool accumulate) {
    QS_TRY(args_check("accumulate", n, {src, dst}));
    if (n == 0) return QS_OK;
    if (!accumulate) {
        if (src != dst)
            QS_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, stream_of(be, s)));
        return QS_OK;
    }
    return launch_map(be, s, n, aligned16({src, dst}), AccAdd{src, dst}, "accumulate");
}

/* Inverted dropout: mask[i] = keep (uint8 0/1, the CPU's bits), y = keep ? x/(1-p) : 0. */
qs_status qs_cuda_dropout_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y, uint8_t *mask,
                                  float p, const qs_dropout_rng *rng) {
    QS_TRY(args_check("dropout_forward", n, {x, y, mask, rng}));
    QS_TRY(dropout_p_check("dropout_forward", p));
    if (n == 0) return QS_OK;
    const uint64_t thresh = (uint64_t)ceil((double)p * 4294967296.0); /* keep iff u32 >= thresh */
    const bool vec = aligned16({x, y}) && aligned(mask, 4);
    k_dropout_fwd<<<grid_for(be, (n + 3) / 4), kThreads, 0, stream_of(be, s)>>>(n, x, y, mask, thresh,
                                                                                  dropout_scale(p), *rng, vec);
    return qs_cuda_check_launch("dropout_forward");
}

/* dx = dy·mask/(1-p), or dx += that. */
qs_status qs_cuda_dropout_backward(qs_backend *be, qs_stream *s, int64_t n, const float *dy, const uint8_t *mask,
                                   float p, float *dx, bool accumulate) {
    QS_TRY(args_check("dropout_backward", n, {dy, mask, dx}));
    QS_TRY(dropout_p_check("dropout_backward", p));
    const float scale = dropout_scale(p);
    const bool vec = aligned16({dy, dx}) && aligned(mask, 4);
    if (accumulate) return launch_map(be, s, n, vec, DropoutBwd<true>{dy, mask, scale, dx}, "dropout_backward");
    return launch_map(be, s, n, vec, DropoutBwd<false>{dy, mask, scale, dx}, "dropout_backward");
}

/* x (N,H,W,C) → y (N,C,H,W); x and y must not overlap. */
qs_status qs_cuda_nhwc_to_nchw(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                               const float *x, float *y) {
    QS_TRY(layout_check("nhwc_to_nchw", N, H, W, C, x, y));
    if (N * H * W * C == 0) return QS_OK;
    return batched_transpose(be, s, N, H * W, C, x, y, false, "nhwc_to_nchw");
}

/* x (N,C,H,W) → y (N,H,W,C), or y += that; x and y must not overlap. */
qs_status qs_cuda_nchw_to_nhwc(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                               const float *x, float *y, bool accumulate) {
    QS_TRY(layout_check("nchw_to_nhwc", N, H, W, C, x, y));
    if (N * H * W * C == 0) return QS_OK;
    return batched_transpose(be, s, N, C, H * W, x, y, accumulate, "nchw_to_nhwc");
}

/* dst[i] = RNE(src[i]) among f32/bf16/f16 (same dtype: a copy). dst must not overlap src
 * unless both are the same buffer and dtype. */
qs_status qs_cuda_cast(qs_backend *be, qs_stream *s, int64_t n, const void *src, qs_dtype src_dt, void *dst,
                       qs_dtype dst_dt) {
    QS_TRY(args_check("cast", n, {src, dst}));
    if (!cast_supported(src_dt) || !cast_supported(dst_dt))
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cast: %s -> %s is not supported by the CUDA backend (only f32/bf16/f16)",
                       qs_dtype_name(src_dt), qs_dtype_name(dst_dt));
    if (n == 0) return QS_OK;
    if (src_dt == dst_dt) {
        if (src != dst)
            QS_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * qs_dtype_size(src_dt), cudaMemcpyDeviceToDevice,
                                        stream_of(be, s)));
        return QS_OK;
    }
    if (src_dt == QS_F32) {
        if (dst_dt == QS_BF16) return launch_cast<kF32toBF16>(be, s, n, src, dst);
        return launch_cast<kF32toF16>(be, s, n, src, dst);
    }
    if (src_dt == QS_BF16) {
        if (dst_dt == QS_F32) return launch_cast<kBF16toF32>(be, s, n, src, dst);
        return launch_cast<kBF16toF16>(be, s, n, src, dst);
    }
    if (dst_dt == QS_F32) return launch_cast<kF16toF32>(be, s, n, src, dst);
    return launch_cast<kF16toBF16>(be, s, n, src, dst);
}

/* sums[c] = Σ_r x[r,c] over the row-major (rows, cols) x, accumulated in double, rounded once
 * to float (rows == 0 gives zeros). Deterministic: the row split depends only on the shape.
 * A temporary of chunks × cols doubles comes from the stream-ordered pool. */
qs_status qs_cuda_column_sums(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x,
                              float *sums) {
    if (rows < 0 || cols < 1 || !sums || (rows > 0 && !x))
        return QS_FAIL(QS_ERR_INVALID_ARG, "column_sums: bad shape (%lld, %lld) or NULL pointer", (long long)rows,
                       (long long)cols);
    cudaStream_t st = stream_of(be, s);
    if (rows == 0) {
        QS_CUDA_TRY(cudaMemsetAsync(sums, 0, (size_t)cols * sizeof(float), st));
        return QS_OK;
    }
    const int64_t ctiles = (cols + kTile - 1) / kTile;
    if (ctiles > INT32_MAX)
        return QS_FAIL(QS_ERR_INVALID_ARG, "column_sums: %lld columns exceed the CUDA grid", (long long)cols);
    int64_t nchunk = (rows + kColRowsPerChunk - 1) / kColRowsPerChunk;
    const int64_t by_blocks = kColMaxBlocks / ctiles > 1 ? kColMaxBlocks / ctiles : 1;
    if (nchunk > by_blocks) nchunk = by_blocks;
    if (nchunk > kColMaxChunks) nchunk = kColMaxChunks;
    const dim3 block(kTile, kThreads / kTile), grid((unsigned int)ctiles, (unsigned int)nchunk);
    if (nchunk == 1) {
        k_colsum_part<<<grid, block, 0, st>>>(rows, cols, 1, x, nullptr, sums);
        return qs_cuda_check_launch("column_sums");
    }
    double *part = nullptr;
    QS_CUDA_TRY(cudaMallocAsync((void **)&part, (size_t)(nchunk * cols) * sizeof(double), st));
    k_colsum_part<<<grid, block, 0, st>>>(rows, cols, nchunk, x, part, nullptr);
    qs_status rc = qs_cuda_check_launch("column_sums (partial sums)");
    if (rc == QS_OK) {
        k_colsum_final<<<grid_for(be, cols), kThreads, 0, st>>>(cols, nchunk, part, sums);
        rc = qs_cuda_check_launch("column_sums (final sums)");
    }
    const cudaError_t fe = cudaFreeAsync(part, st);
    if (rc == QS_OK && fe != cudaSuccess)
        return QS_FAIL(QS_ERR_BACKEND, "column_sums: cudaFreeAsync of the partial sums failed: %s (%s)",
                       cudaGetErrorName(fe), cudaGetErrorString(fe));
    return rc;
}

/* PyTorch SGD (see backend.h); momentum == 0 is plain SGD and buf may be NULL. */
qs_status qs_cuda_sgd_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *buf, float lr,
                           float momentum, float dampening, float wd, bool nesterov, bool first_step) {
    QS_TRY(args_check("sgd_step", n, {p, g}));
    const bool use_buf = momentum != 0.0f;
    if (use_buf && n > 0 && !buf)
        return QS_FAIL(QS_ERR_INVALID_ARG, "sgd_step: momentum %g needs a momentum buffer but buf is NULL",
                       (double)momentum);
    if (nesterov && (!use_buf || dampening != 0.0f))
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "sgd_step: Nesterov momentum requires momentum > 0 and dampening = 0 (PyTorch rule)");
    if (n == 0) return QS_OK;
    const float keep = (float)(1.0 - (double)dampening);
    k_sgd<<<grid_for(be, n), kThreads, 0, stream_of(be, s)>>>(n, p, g, buf, lr, momentum, keep, wd, use_buf, nesterov,
                                                             first_step);
    return qs_cuda_check_launch("sgd_step");
}

/* PyTorch AdamW (decoupled weight decay), step counted from 1; scalars derived on the host in
 * double exactly as the CPU does, then rounded once to float. p, g, m, v must not overlap. */
qs_status qs_cuda_adamw_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *m, float *v,
                             float lr, double beta1, double beta2, float eps, float wd, int64_t step) {
    QS_TRY(args_check("adamw_step", n, {p, g, m, v}));
    if (step < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "adamw_step: step %lld; steps count from 1", (long long)step);
    if (n == 0) return QS_OK;
    const float decay = (float)(1.0 - (double)lr * (double)wd);
    const float b1 = (float)beta1, b2 = (float)beta2;
    const float c1 = (float)(1.0 - beta1), c2 = (float)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    k_adamw<<<grid_for(be, n), kThreads, 0, stream_of(be, s)>>>(n, p, g, m, v, decay, b1, b2, c1, c2, step_size,
                                                               bc2_sqrt, eps);
    return qs_cuda_check_launch("adamw_step");
}

/* *out (host) = Σ x_i² in double. Waits for the stream (the result is needed on the host).
 * Deterministic: the split into blocks depends only on n. */
qs_status qs_cuda_sum_squares(qs_backend *be, qs_stream *s, int64_t n, const float *x, double *out) {
    QS_TRY(args_check("sum_squares", n, {x}));
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "sum_squares: out is NULL");
    if (n == 0) {
        *out = 0.0;
        return QS_OK;
    }
    cudaStream_t st = stream_of(be, s);
    int64_t nb = (n + kSsqPerBlock - 1) / kSsqPerBlock;
    if (nb > kSsqMaxBlocks) nb = kSsqMaxBlocks;
    double *tmp = nullptr; /* nb partials, then the total */
    QS_CUDA_TRY(cudaMallocAsync((void **)&tmp, (size_t)(nb + 1) * sizeof(double), st));
    k_ssq_part<<<(unsigned int)nb, kThreads, 0, st>>>(n, x, tmp);
    qs_status rc = qs_cuda_check_launch("sum_squares (partial sums)");
    if (rc == QS_OK) {
        k_ssq_final<<<1, kThreads, 0, st>>>(nb, tmp, tmp + nb);
        rc = qs_cuda_check_launch("sum_squares (total)");
    }
    double total = 0.0;
    cudaError_t e = cudaSuccess;
    if (rc == QS_OK) e = cudaMemcpyAsync(&total, tmp + nb, sizeof total, cudaMemcpyDeviceToHost, st);
    const cudaError_t fe = cudaFreeAsync(tmp, st);
    if (e == cudaSuccess) e = fe;
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (rc != QS_OK) return rc;
    if (e != cudaSuccess)
        return QS_FAIL(QS_ERR_BACKEND, "sum_squares of %lld floats: reading the result back failed: %s (%s)",
                       (long long)n, cudaGetErrorName(e), cudaGetErrorString(e));
    *out = total;
    return QS_OK;
}

/* x *= alpha. */
qs_status qs_cuda_scale(qs_backend *be, qs_stream *s, int64_t n, float *x, float alpha) {
    QS_TRY(args_check("scale", n, {x}));
    return launch_map(be, s, n, aligned16({x}), Scale{x, alpha}, "scale");
}
