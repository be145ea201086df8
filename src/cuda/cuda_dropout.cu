/* src/cuda/cuda_dropout.cu — defines: inverted dropout on the GPU, forward and backward, with the
 * CPU backend's mask bits (the same Philox words, qsync/rng.h; src/cpu/cpu_dropout.c). */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_map.cuh"
#include "qsync/rng.h"

namespace {

using qs_cuda::args_check;

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

} // namespace

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
