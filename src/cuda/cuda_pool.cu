/* src/cuda/cuda_pool.cu — defines: max and average pooling on the GPU, FP32, with the CPU
 * backend's semantics (src/cpu/cpu_pool.c): the pool_plan / pool_forward / pool_backward ops.
 *
 * X (N,H,W,C) → Y (N,P,Q,C), one thread per output element (C innermost, coalesced). Max: the
 * first maximum in window scan order (h, then w) wins and NaN propagates (a later NaN replaces an
 * earlier one), like the CPU; idx = h*W+w within the image. Average divides by R·S
 * (count_include_pad). Backward is a gather, one thread per input element, adding the
 * contributions of the windows that contain it in (p, q) order — the order of the CPU's
 * scatter — so no atomics: deterministic, and the same sums as the CPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_launch.cuh"

namespace {

constexpr int kBlock = 256;

/* Blocks of kBlock threads for a grid-stride loop over n elements. */
unsigned grid_for(int64_t n) { return qs_cuda::grid_for_n(n, kBlock); }
using qs_cuda::stream_of;

struct PoolPlan {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_POOL, first */
    qs_pool_desc d;
};

qs_status pool_plan_check(void *plan, const char *what, const qs_pool_desc **d) {
    if (!plan) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: plan is NULL; create it with pool_plan", what);
    const PoolPlan *pp = static_cast<const PoolPlan *>(plan);
    if (pp->kind != QS_CUDA_PLAN_POOL)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan passed is of another operator kind; pass the pool plan", what);
    *d = &pp->d;
    return QS_OK;
}

/* The input window of output element i = ((n·P + p)·Q + q)·C + c: rows [h0, h1) and columns
 * [w0, w1) of the input, clipped to it, and x_at the offset of x[n, 0, 0, c]. */
struct PoolWindow {
    int64_t h0, h1, w0, w1, x_at;
};
__device__ __forceinline__ PoolWindow pool_window(const qs_pool_desc &d, int64_t i) {
    int64_t c = i % d.C, t = i / d.C;
    int64_t q = t % d.Q;
    t /= d.Q;
    int64_t p = t % d.P, n = t / d.P;
    int64_t hs = p * d.stride_h - d.pad_h, ws = q * d.stride_w - d.pad_w;
    int64_t h0 = hs < 0 ? 0 : hs, h1 = hs + d.R < d.H ? hs + d.R : d.H;
    int64_t w0 = ws < 0 ? 0 : ws, w1 = ws + d.S < d.W ? ws + d.S : d.W;
    return {h0, h1, w0, w1, n * d.H * d.W * d.C + c};
}

/* y[n,p,q,c], idx[n,p,q,c] = max over the clipped window and the position h*W+w of the winner. */
__global__ void k_maxpool_fwd(qs_pool_desc d, const float *__restrict__ x, float *__restrict__ y,
                              int32_t *__restrict__ idx) {
    const int64_t n_out = d.N * d.P * d.Q * d.C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_out; i += (int64_t)gridDim.x * blockDim.x) {
        const auto [h0, h1, w0, w1, x_at] = pool_window(d, i);
        const float *xn = x + x_at;
        float best = -__int_as_float(0x7f800000); /* -inf */
        int32_t bi = (int32_t)(h0 * d.W + w0);
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
                float v = xn[(h * d.W + w) * d.C];
                if (v > best || v != v) { /* NaN wins, like PyTorch and the CPU */
                    best = v;
                    bi = (int32_t)(h * d.W + w);
                }
            }
        y[i] = best;
        idx[i] = bi;
    }
}

/* y[n,p,q,c] = Σ over the clipped window · inv (inv = 1/(R·S): padding counts). */
__global__ void k_avgpool_fwd(qs_pool_desc d, float inv, const float *__restrict__ x, float *__restrict__ y) {
    const int64_t n_out = d.N * d.P * d.Q * d.C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_out; i += (int64_t)gridDim.x * blockDim.x) {
        const auto [h0, h1, w0, w1, x_at] = pool_window(d, i);
        const float *xn = x + x_at;
        float sum = 0.0f;
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) sum += xn[(h * d.W + w) * d.C];
        y[i] = sum * inv;
    }
}

/* First output index o with o·stride − pad + K > v (its window reaches v), i.e.
 * ceil((v + pad − K + 1) / stride) clamped at 0. */
__device__ __forceinline__ int64_t first_window(int64_t v, int64_t pad, int64_t K, int64_t stride) {
    int64_t num = v + pad - K + 1;
    return num <= 0 ? 0 : (num + stride - 1) / stride;
}

/* dx[n,h,w,c] (= or +=) Σ over the outputs (p,q) whose window holds (h,w), in (p,q) order:
 * max — dy where idx == h*W+w; average — dy·inv. */
__global__ void k_pool_bwd(qs_pool_desc d, bool is_max, float inv, const float *__restrict__ dy,
                           const int32_t *__restrict__ idx, float *__restrict__ dx, bool accumulate) {
    const int64_t n_in = d.N * d.H * d.W * d.C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_in; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % d.C, t = i / d.C;
        int64_t w = t % d.W;
        t /= d.W;
        int64_t h = t % d.H, n = t / d.H;
        int64_t p0 = first_window(h, d.pad_h, d.R, d.stride_h), p1 = (h + d.pad_h) / d.stride_h;
        int64_t q0 = first_window(w, d.pad_w, d.S, d.stride_w), q1 = (w + d.pad_w) / d.stride_w;
        if (p1 > d.P - 1) p1 = d.P - 1;
        if (q1 > d.Q - 1) q1 = d.Q - 1;
        const int32_t pos = (int32_t)(h * d.W + w);
        float acc = accumulate ? dx[i] : 0.0f;
        for (int64_t p = p0; p <= p1; p++)
            for (int64_t q = q0; q <= q1; q++) {
                int64_t o = ((n * d.P + p) * d.Q + q) * d.C + c;
                if (is_max) {
                    if (idx[o] == pos) acc += dy[o];
                } else {
                    acc += dy[o] * inv;
                }
            }
        dx[i] = acc;
    }
}

} // namespace

/* Validate the descriptor (P,Q must be qs_pool_desc_finish()'s) and keep it; no workspace. */
extern "C" qs_status qs_cuda_pool_plan(qs_backend *, const qs_pool_desc *d, void **plan, size_t *workspace) {
    QS_TRY(qs_pool_plan_args(d, plan, workspace));
    qs_pool_desc dd = *d; /* finished: the same P,Q */
    PoolPlan *pp = static_cast<PoolPlan *>(calloc(1, sizeof(PoolPlan)));
    if (!pp) return QS_FAIL(QS_ERR_OOM, "pool_plan: out of memory for the plan");
    pp->kind = QS_CUDA_PLAN_POOL;
    pp->d = dd;
    *plan = pp;
    return QS_OK;
}

extern "C" void qs_cuda_pool_plan_destroy(qs_backend *, void *plan) { free(plan); }

/* y (N,P,Q,C) from x (N,H,W,C); max pooling also writes idx (N,P,Q,C). */
extern "C" qs_status qs_cuda_pool_forward(qs_backend *be, void *plan, qs_stream *s, const void *x, void *y,
                                          int32_t *idx, void * /* ws: none needed */) {
    const qs_pool_desc *d = nullptr;
    QS_TRY(pool_plan_check(plan, "pool_forward", &d));
    const bool is_max = d->kind == QS_POOL_MAX;
    if (!x || !y || (is_max && !idx))
        return QS_FAIL(QS_ERR_INVALID_ARG, "pool_forward: NULL x, y or (max pooling) idx");
    const int64_t n = d->N * d->P * d->Q * d->C;
    if (n <= 0) return QS_OK;
    cudaStream_t st = stream_of(be, s);
    if (is_max) {
        k_maxpool_fwd<<<grid_for(n), kBlock, 0, st>>>(*d, static_cast<const float *>(x), static_cast<float *>(y), idx);
        return qs_cuda_check_launch("pool_forward (max pooling kernel)");
    }
    const float inv = 1.0f / (float)(d->R * d->S);
    k_avgpool_fwd<<<grid_for(n), kBlock, 0, st>>>(*d, inv, static_cast<const float *>(x), static_cast<float *>(y));
    return qs_cuda_check_launch("pool_forward (average pooling kernel)");
}

/* dx (N,H,W,C) = (or +=) the gradient of pooling for dy (N,P,Q,C). */
extern "C" qs_status qs_cuda_pool_backward(qs_backend *be, void *plan, qs_stream *s, const void *dy,
                                           const int32_t *idx, void *dx, bool accumulate, void * /* ws */) {
    const qs_pool_desc *d = nullptr;
    QS_TRY(pool_plan_check(plan, "pool_backward", &d));
    const bool is_max = d->kind == QS_POOL_MAX;
    if (!dy || !dx || (is_max && !idx))
        return QS_FAIL(QS_ERR_INVALID_ARG, "pool_backward: NULL dy, dx or (max pooling) idx");
    const int64_t n = d->N * d->H * d->W * d->C;
    if (n <= 0) return QS_OK;
    const float inv = 1.0f / (float)(d->R * d->S);
    k_pool_bwd<<<grid_for(n), kBlock, 0, stream_of(be, s)>>>(*d, is_max, inv, static_cast<const float *>(dy), idx,
                                                             static_cast<float *>(dx), accumulate);
    return qs_cuda_check_launch(is_max ? "pool_backward (max pooling kernel)" : "pool_backward (average pooling kernel)");
}
