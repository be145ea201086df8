/* src/cuda/cuda_optim.cu — defines: the optimizer steps of the CUDA backend (PyTorch SGD and
 * AdamW on FP32 master weights, the CPU's expression order and roundings: src/cpu/cpu_optim.c)
 * and the sum of squares (gradient norms), a deterministic double-precision reduction whose
 * result is returned on the host. */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_map.cuh"

namespace {

using qs_cuda::args_check;

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

/* PyTorch SGD (see core/backend_ops.def); momentum == 0 is plain SGD and buf may be NULL. */
qs_status qs_cuda_sgd_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *buf, float lr,
                           float momentum, float dampening, float wd, bool nesterov, bool first_step) {
    QS_TRY(args_check("sgd_step", n, {p, g}));
    QS_TRY(qs_sgd_step_check(n, buf, momentum, dampening, nesterov));
    const bool use_buf = momentum != 0.0f;
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
    QS_TRY(qs_adamw_step_check(step));
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
