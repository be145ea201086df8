/* src/cuda/cuda_softmax.cu — defines: fused softmax + cross-entropy and the row argmax on the
 * GPU, FP32, with the CPU backend's semantics (src/cpu/cpu_softmax.c).
 *
 * Softmax + cross-entropy: one block per row; one pass over the logits keeps a running maximum
 * and Σexp(x − max) per thread (FP32 exponentials, double sums), merged over the block in a fixed
 * order into the log-sum-exp (double); a second pass writes the probabilities (float4 loads and
 * stores where the rows allow). The CPU takes the maximum first and the exponentials in double:
 * the two agree to FP32 rounding of the terms. Labels live in device memory and cannot be checked
 * without a synchronisation: an out-of-range label gives a NaN loss (forward) and a NaN gradient
 * row (backward) instead of an out-of-bounds read, so the step's loss shows it. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_launch.cuh"

namespace {

constexpr int kBlock = 256;

using qs_cuda::args_check;
using qs_cuda::stream_of;

/* Running (max m, Σ exp(x − m)) of a stream of values: one more value x. The exponentials are
 * FP32, their sum double. */
__device__ __forceinline__ void lse_push(float &m, double &s, float x) {
    if (x > m) {
        s = s * (double)expf(m - x) + 1.0; /* m = -inf at first: expf(-inf) = 0 */
        m = x;
    } else {
        s += (double)expf(x - m);
    }
}

/* Merge another running pair (om, os) into (m, s). */
__device__ __forceinline__ void lse_merge(float &m, double &s, float om, double os) {
    const float nm = fmaxf(m, om);
    if (nm == -INFINITY) return; /* both empty */
    s = s * (double)expf(m - nm) + os * (double)expf(om - nm);
    m = nm;
}

/* Whether a row of K floats at p can be read as float4s. */
__device__ __forceinline__ bool vec4_ok(const float *p, int64_t K) {
    return K % 4 == 0 && ((uintptr_t)p & 15) == 0;
}

/* One block per row: the row's log-sum-exp in one pass over the logits (running maximum and
 * sum per thread, merged over the block), then probs = exp(logits − lse) and
 * loss = lse − logits[label] (NaN for a label outside [0, K)). */
__global__ void __launch_bounds__(kBlock) k_xent_fwd(int64_t K, const float *__restrict__ logits,
                                                     const int32_t *__restrict__ labels, float *__restrict__ loss,
                                                     float *__restrict__ probs) {
    __shared__ float sm[kBlock / 32];
    __shared__ double ss[kBlock / 32];
    __shared__ double lse_s;
    const int64_t row = blockIdx.x;
    const float *l = logits + row * K;
    float *pr = probs + row * K;
    const bool vec = vec4_ok(l, K) && vec4_ok(pr, K);
    float m = -INFINITY;
    double s = 0.0;
    if (vec) {
        for (int64_t i = threadIdx.x; i < K / 4; i += kBlock) {
            const float4 v = reinterpret_cast<const float4 *>(l)[i];
            lse_push(m, s, v.x);
            lse_push(m, s, v.y);
            lse_push(m, s, v.z);
            lse_push(m, s, v.w);
        }
    } else {
        for (int64_t c = threadIdx.x; c < K; c += kBlock) lse_push(m, s, l[c]);
    }
    for (int o = 16; o > 0; o >>= 1) lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bm = sm[0];
        double bs = ss[0];
        for (int w = 1; w < kBlock / 32; w++) lse_merge(bm, bs, sm[w], ss[w]); /* fixed order */
        lse_s = (double)bm + log(bs);
        const int32_t lab = labels[row];
        loss[row] = (lab >= 0 && lab < K) ? (float)(lse_s - (double)l[lab]) : __int_as_float(0x7fc00000);
    }
    __syncthreads();
    const double lse = lse_s;
    if (vec) {
        for (int64_t i = threadIdx.x; i < K / 4; i += kBlock) {
            const float4 v = reinterpret_cast<const float4 *>(l)[i];
            reinterpret_cast<float4 *>(pr)[i] =
                make_float4(expf((float)((double)v.x - lse)), expf((float)((double)v.y - lse)),
                            expf((float)((double)v.z - lse)), expf((float)((double)v.w - lse)));
        }
    } else {
        for (int64_t c = threadIdx.x; c < K; c += kBlock) pr[c] = expf((float)((double)l[c] - lse));
    }
}

/* One block per row: dlogits = (probs - onehot(label))·scale; a row with an out-of-range label
 * becomes NaN. */
__global__ void __launch_bounds__(kBlock) k_xent_bwd(int64_t K, const float *__restrict__ probs,
                                                     const int32_t *__restrict__ labels, float scale,
                                                     float *__restrict__ d) {
    const int64_t row = blockIdx.x;
    const float *p = probs + row * K;
    float *dr = d + row * K;
    const int32_t lab = labels[row];
    if (lab < 0 || lab >= K) {
        for (int64_t c = threadIdx.x; c < K; c += kBlock) dr[c] = __int_as_float(0x7fc00000); /* NaN */
        return;
    }
    if (vec4_ok(p, K) && vec4_ok(dr, K)) {
        for (int64_t i = threadIdx.x; i < K / 4; i += kBlock) {
            const float4 v = reinterpret_cast<const float4 *>(p)[i];
            reinterpret_cast<float4 *>(dr)[i] = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
        }
    } else {
        for (int64_t c = threadIdx.x; c < K; c += kBlock) dr[c] = p[c] * scale;
    }
    __syncthreads(); /* the label's element is rewritten after the row (same thread order) */
    if (threadIdx.x == 0) dr[lab] = (p[lab] - 1.0f) * scale;
}

/* One warp per row: every lane scans its columns with `>` (so it keeps its first maximum), then
 * the lanes' (value, column) pairs meet, the larger value or, on a tie, the smaller column. */
__global__ void k_argmax_rows(int64_t rows, int64_t cols, const float *__restrict__ x, int32_t *__restrict__ idx) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return; /* whole warps leave together */
    const float *r = x + row * cols;
    float best = -__int_as_float(0x7f800000);
    int64_t at = cols; /* none yet */
    for (int64_t c = lane; c < cols; c += 32)
        if (at == cols || r[c] > best) best = r[c], at = c;
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int64_t oa = __shfl_xor_sync(0xffffffffu, at, o);
        if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
    }
    if (lane == 0) idx[row] = (int32_t)(at < cols ? at : 0);
}

qs_status xent_check(const char *what, int64_t B, int64_t classes, std::initializer_list<const void *> ptrs) {
    if (B < 0 || classes < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: B=%lld classes=%lld; need B >= 0 and classes >= 1", what,
                       (long long)B, (long long)classes);
    return args_check(what, B, ptrs);
}

} // namespace

/* logits, probs (B, classes); labels (B) int32 in [0, classes); loss (B). */
extern "C" qs_status qs_cuda_softmax_xent_forward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                                  const float *logits, const int32_t *labels, float *loss,
                                                  float *probs) {
    QS_TRY(xent_check("softmax_xent_forward", B, classes, {logits, labels, loss, probs}));
    if (B == 0) return QS_OK;
    if (B > INT32_MAX)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "softmax_xent_forward: %lld rows are too many for one launch", (long long)B);
    k_xent_fwd<<<(unsigned)B, kBlock, 0, stream_of(be, s)>>>(classes, logits, labels, loss, probs);
    return qs_cuda_check_launch("softmax_xent_forward (softmax kernel)");
}

/* dlogits (B, classes) = (probs - onehot(labels))·scale. */
extern "C" qs_status qs_cuda_softmax_xent_backward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                                   const float *probs, const int32_t *labels, float scale,
                                                   float *dlogits) {
    QS_TRY(xent_check("softmax_xent_backward", B, classes, {probs, labels, dlogits}));
    if (B == 0) return QS_OK;
    if (B > INT32_MAX)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "softmax_xent_backward: %lld rows are too many for one launch", (long long)B);
    k_xent_bwd<<<(unsigned)B, kBlock, 0, stream_of(be, s)>>>(classes, probs, labels, scale, dlogits);
    return qs_cuda_check_launch("softmax_xent_backward (gradient kernel)");
}

/* idx (rows) = the first column of each row's largest value of x (rows, cols). */
extern "C" qs_status qs_cuda_argmax_rows(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x,
                                         int32_t *idx) {
    QS_TRY(xent_check("argmax_rows", rows, cols, {x, idx}));
    if (cols > INT32_MAX) return QS_FAIL(QS_ERR_INVALID_ARG, "argmax_rows: %lld columns exceed int32", (long long)cols);
    if (rows == 0) return QS_OK;
    const int rows_per_block = kBlock / 32;
    const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    if (blocks > INT32_MAX)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "argmax_rows: %lld rows are too many for one launch", (long long)rows);
    k_argmax_rows<<<(unsigned)blocks, kBlock, 0, stream_of(be, s)>>>(rows, cols, x, idx);
    return qs_cuda_check_launch("argmax_rows (kernel)");
}
