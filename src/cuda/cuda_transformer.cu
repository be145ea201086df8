/* src/cuda/cuda_transformer.cu — defines: the transformer's memory-bound ops on the GPU, FP32
 * (layer norm, GELU, tanh, embedding and its deterministic gradient, position add, head permutes,
 * masked softmax; contracts: core/backend_ops.def, CUDA specifics beside each op and kernel).
 * Conventions as cuda_map.cuh; temporaries come from the stream-ordered pool. Row-wise
 * reductions: one warp per row, lane partials in column order, then a xor butterfly (the same
 * total in every lane). No floating-point atomics: results are bitwise reproducible. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <cub/device/device_radix_sort.cuh>
#include <initializer_list>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_launch.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;   /* rows per block of the one-warp-per-row kernels */
constexpr int kTx = 32;                 /* channels per block of the column reductions */
constexpr int kTy = 8;                  /* row lanes per block of the column reductions */
constexpr unsigned kFull = 0xffffffffu;

using qs_cuda::args_check;
using qs_cuda::grid_cap;
using qs_cuda::Scratch;
using qs_cuda::stream_of;

/* Blocks of kThreads threads for `items` work items (one per thread per pass). */
unsigned grid_for(qs_backend *be, int64_t items) { return qs_cuda::grid_for(be, items, kThreads); }
/* Blocks for one warp per row over `rows` rows. */
unsigned grid_rows(qs_backend *be, int64_t rows) { return grid_cap(be, (rows + kWarps - 1) / kWarps); }

/* Shapes given as several sizes: all >= 0. */
qs_status dims_check(const char *what, std::initializer_list<int64_t> dims) {
    for (int64_t d : dims)
        if (d < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative dimension %lld", what, (long long)d);
    return QS_OK;
}

/* Warp-wide sum and maximum by xor butterfly: every lane ends with the same bits. */
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
    return v;
}

/* The warp's row sequence of a one-warp-per-row kernel: first row and stride. */
__device__ __forceinline__ int64_t warp_row0() { return (int64_t)blockIdx.x * kWarps + threadIdx.x / 32; }
__device__ __forceinline__ int64_t warp_row_stride() { return (int64_t)gridDim.x * kWarps; }

/* ------------------------------------------------------------- flat element-wise maps */

/* op(i) for every i < n (each element read and written by one thread, reads first, so outputs
 * may alias inputs element for element). */
template <typename Op>
__global__ void __launch_bounds__(kThreads) k_map(int64_t n, Op op) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) op(i);
}

template <typename Op>
qs_status launch_map(qs_backend *be, qs_stream *s, int64_t n, const Op &op, const char *what) {
    if (n == 0) return QS_OK;
    k_map<Op><<<grid_for(be, n), kThreads, 0, stream_of(be, s)>>>(n, op);
    return qs_cuda_check_launch(what);
}

/* old + d with accumulate, else d. */
__device__ __forceinline__ float acc_or_set(bool acc, float old, float d) { return acc ? __fadd_rn(old, d) : d; }

constexpr float kGeluK = 0.7978845608028654f; /* √(2/π) */
constexpr float kGeluA = 0.044715f;

/* The GELU approximation in its logistic form (the CPU's, src/cpu/cpu_transformer.c): with
 * z = √(2/π)·(x + 0.044715·x³) and e = exp(−2z), 0.5·(1 + tanh(z)) = σ(2z) = 1/(1 + e) and
 * 1 − σ = e·σ. Unlike 1 + tanh(z) it does not cancel where x ≪ 0, and e·σ keeps 1 − σ accurate
 * where σ → 1. Returns σ; *one_minus = 1 − σ (1 where e overflows, e·σ would be ∞·0). */
__device__ __forceinline__ float gelu_sigma(float x, float *one_minus) {
    const float x3a = __fmul_rn(__fmul_rn(__fmul_rn(kGeluA, x), x), x);
    const float z2 = __fmul_rn(2.0f * kGeluK, __fadd_rn(x, x3a));
    const float e = expf(-z2), sg = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    *one_minus = z2 < -80.0f ? 1.0f : __fmul_rn(e, sg);
    return sg;
}

/* y = x·σ(2z) = 0.5·x·(1 + tanh(z)). */
struct GeluFwd {
    const float *x;
    float *y;
    __device__ void operator()(int64_t i) const {
        const float v = x[i];
        float om;
        y[i] = __fmul_rn(v, gelu_sigma(v, &om));
    }
};

/* dx (+)= dy·(σ + 2·x·σ·(1 − σ)·z'), z' = √(2/π)·(1 + 3·0.044715·x²): the tanh form's
 * 0.5·(1 + t) + 0.5·x·(1 − t²)·z' with t = 2σ − 1. */
struct GeluBwd {
    const float *x, *dy;
    float *dx;
    bool acc;
    __device__ void operator()(int64_t i) const {
        const float v = x[i];
        float om;
        const float sg = gelu_sigma(v, &om);
        const float dz = __fmul_rn(kGeluK, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * kGeluA, v), v)));
        const float t = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(2.0f, v), sg), om), dz);
        dx[i] = acc_or_set(acc, acc ? dx[i] : 0.0f, __fmul_rn(dy[i], __fadd_rn(sg, t)));
    }
};

/* y = tanh(x). */
struct TanhFwd {
    const float *x;
    float *y;
    __device__ void operator()(int64_t i) const { y[i] = tanhf(x[i]); }
};

/* dx (+)= dy·(1 − y²). */
struct TanhBwd {
    const float *y, *dy;
    float *dx;
    bool acc;
    __device__ void operator()(int64_t i) const {
        const float v = y[i];
        const float d = __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(v, v)));
        dx[i] = acc_or_set(acc, acc ? dx[i] : 0.0f, d);
    }
};

/* y[i] = x[i] + v[i mod inner]. */
struct AddBroadcast {
    const float *x, *v;
    float *y;
    int64_t inner;
    __device__ void operator()(int64_t i) const { y[i] = __fadd_rn(x[i], v[i % inner]); }
};

/* The table row of an FP32 id (truncated), or -1 when it is not in [0, V) (NaN included). */
__device__ __forceinline__ int64_t embedding_row(float id, int64_t V) {
    if (!(id >= 0.0f && id < 0x1p62f)) return -1; /* also NaN; the cast below is then defined */
    const int64_t v = (int64_t)id;
    return v < V ? v : -1;
}

/* y[r, c] = table[ids[r], c], 0 for an invalid id. */
struct EmbeddingFwd {
    const float *ids, *table;
    float *y;
    int64_t C, V;
    __device__ void operator()(int64_t i) const {
        const int64_t r = i / C, c = i % C;
        const int64_t v = embedding_row(ids[r], V);
        y[i] = v >= 0 ? table[v * C + c] : 0.0f;
    }
};

/* One element of the head permute, indexed in the order of the (N,H,T,D) tensor when to_heads
 * (its writes contiguous) and in token order (n, t, h, d) otherwise (the token rows' writes
 * contiguous); d innermost on both sides. */
struct PermuteHeads {
    const float *src;
    float *dst;
    int64_t T, H, D, ld, off;
    bool to_heads, acc;
    __device__ void operator()(int64_t i) const {
        const int64_t d = i % D;
        int64_t t, h, n, rest = i / D;
        if (to_heads) { /* i = ((n·H + h)·T + t)·D + d */
            t = rest % T;
            rest /= T;
            h = rest % H;
            n = rest / H;
        } else { /* i = ((n·T + t)·H + h)·D + d */
            h = rest % H;
            rest /= H;
            t = rest % T;
            n = rest / T;
        }
        const int64_t head = ((n * H + h) * T + t) * D + d;
        const int64_t tok = (n * T + t) * ld + off + h * D + d;
        const int64_t si = to_heads ? tok : head, di = to_heads ? head : tok;
        dst[di] = acc_or_set(acc, acc ? dst[di] : 0.0f, src[si]);
    }
};

/* ------------------------------------------------------------------------ layer norm */

/* One warp per row: mean and biased variance in double (two passes), rstd rounded once, then
 * y = (x − mean)·rstd·gamma + beta in float. */
__global__ void __launch_bounds__(kThreads)
    k_ln_fwd(int64_t rows, int64_t C, const float *__restrict__ x, const float *__restrict__ gamma,
             const float *__restrict__ beta, float eps, float *__restrict__ y, float *__restrict__ save_mean,
             float *__restrict__ save_rstd) {
    const int lane = threadIdx.x & 31;
    for (int64_t r = warp_row0(); r < rows; r += warp_row_stride()) {
        const float *xr = x + r * C;
        double s = 0.0;
        for (int64_t c = lane; c < C; c += 32) s += (double)xr[c];
        const double mean = warp_sum(s) / (double)C;
        double q = 0.0;
        for (int64_t c = lane; c < C; c += 32) {
            const double dv = (double)xr[c] - mean;
            q += dv * dv;
        }
        const double var = warp_sum(q) / (double)C;
        const float m = (float)mean, rs = (float)(1.0 / sqrt(var + (double)eps));
        float *yr = y + r * C;
        for (int64_t c = lane; c < C; c += 32) {
            float v = __fmul_rn(__fsub_rn(xr[c], m), rs);
            if (gamma) v = __fmul_rn(v, gamma[c]);
            if (beta) v = __fadd_rn(v, beta[c]);
            yr[c] = v;
        }
        if (lane == 0) {
            save_mean[r] = m;
            save_rstd[r] = rs;
        }
    }
}

/* x̂ = (x − mean)·rstd and g = dy·gamma, as both backward kernels form them. */
__device__ __forceinline__ float ln_xhat(float x, float m, float rs) { return __fmul_rn(__fsub_rn(x, m), rs); }

/* One warp per row: dx (+)= rstd·(g − Σg/C − x̂·Σ(g·x̂)/C), the sums in double (g exact there),
 * the element formula in float. */
__global__ void __launch_bounds__(kThreads)
    k_ln_bwd_dx(int64_t rows, int64_t C, const float *__restrict__ x, const float *__restrict__ dy,
                const float *__restrict__ gamma, const float *__restrict__ save_mean,
                const float *__restrict__ save_rstd, float *__restrict__ dx, bool accumulate) {
    const int lane = threadIdx.x & 31;
    for (int64_t r = warp_row0(); r < rows; r += warp_row_stride()) {
        const float *xr = x + r * C, *gr = dy + r * C;
        const float m = save_mean[r], rs = save_rstd[r];
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = lane; c < C; c += 32) {
            const double g = gamma ? (double)gr[c] * (double)gamma[c] : (double)gr[c]; /* exact */
            sg += g;
            sgx += g * (double)ln_xhat(xr[c], m, rs);
        }
        const float a = (float)(warp_sum(sg) / (double)C), b = (float)(warp_sum(sgx) / (double)C);
        float *dr = dx + r * C;
        for (int64_t c = lane; c < C; c += 32) {
            const float g = gamma ? __fmul_rn(gr[c], gamma[c]) : gr[c];
            const float xh = ln_xhat(xr[c], m, rs);
            const float v = __fmul_rn(rs, __fsub_rn(__fsub_rn(g, a), __fmul_rn(xh, b)));
            dr[c] = acc_or_set(accumulate, accumulate ? dr[c] : 0.0f, v);
        }
    }
}

/* Row chunks of the parameter-gradient reductions: a function of (rows, C) only (reproducible),
 * at least 64 rows each, about 1024 blocks in all. */
int64_t ln_chunks(int64_t rows, int64_t C) {
    const int64_t cb = (C + kTx - 1) / kTx;
    int64_t n = 1024 / cb;
    const int64_t by_rows = (rows + 63) / 64;
    if (n > by_rows) n = by_rows;
    if (n > 65535) n = 65535;
    return n < 1 ? 1 : n;
}

/* Sum the kTy row lanes of a block (fixed order) and store the chunk partial of channel c. */
__device__ __forceinline__ void block_store(double (*sh)[kTx], double v, bool valid, double *out) {
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && valid) {
        double s = 0.0;
        for (int j = 0; j < kTy; j++) s += sh[j][threadIdx.x];
        *out = s;
    }
    __syncthreads();
}

/* Grid (channel blocks, chunks), block (kTx, kTy): part[ch, c] = Σ dy·x̂ and part[nch + ch, c] =
 * Σ dy over the chunk's rows (thread lanes stride by kTy rows), in double. */
__global__ void __launch_bounds__(kTx *kTy)
    k_ln_bwd_param(int64_t rows, int64_t C, const float *__restrict__ x, const float *__restrict__ dy,
                   const float *__restrict__ save_mean, const float *__restrict__ save_rstd, double *__restrict__ part) {
    __shared__ double sh[kTy][kTx];
    const int64_t c = (int64_t)blockIdx.x * kTx + threadIdx.x;
    const int64_t ch = blockIdx.y, nch = gridDim.y;
    const int64_t r0 = rows * ch / nch, r1 = rows * (ch + 1) / nch;
    double sgx = 0.0, sg = 0.0;
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += kTy) {
            const float g = dy[r * C + c];
            sgx += (double)g * (double)ln_xhat(x[r * C + c], save_mean[r], save_rstd[r]);
            sg += (double)g;
        }
    const bool valid = c < C;
    const int64_t cc = valid ? c : 0;
    block_store(sh, sgx, valid, part + ch * C + cc);
    block_store(sh, sg, valid, part + (nch + ch) * C + cc);
}

/* dgamma[c], dbeta[c] = the chunk partials of channel c added in chunk order (either may be NULL). */
__global__ void __launch_bounds__(kThreads)
    k_ln_bwd_param_final(int64_t C, int64_t nch, const double *__restrict__ part, float *__restrict__ dgamma,
                         float *__restrict__ dbeta) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double sgx = 0.0, sg = 0.0;
        for (int64_t k = 0; k < nch; k++) {
            sgx += part[k * C + c];
            sg += part[(nch + k) * C + c];
        }
        if (dgamma) dgamma[c] = (float)sgx;
        if (dbeta) dbeta[c] = (float)sg;
    }
}

/* ------------------------------------------------------------------------ embedding backward */

/* keys[r] = the row's table index, or V for an invalid id (sorted last, then skipped);
 * vals[r] = r. */
__global__ void __launch_bounds__(kThreads)
    k_emb_keys(int64_t rows, int64_t V, const float *__restrict__ ids, uint32_t *__restrict__ keys,
               int32_t *__restrict__ vals) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const int64_t v = embedding_row(ids[r], V);
        keys[r] = (uint32_t)(v >= 0 ? v : V);
        vals[r] = (int32_t)r;
    }
}

/* Grid (sorted positions / kWarps, channel chunks of 32), one warp per (position, chunk): the
 * warp at the first position of an id's run sums that run's dy rows in increasing row order (the
 * sort is stable) in double, rounds once, and stores the sum into dtable[id, chunk·32 + lane]
 * (accumulate: adds it to the old value, one FP32 rounding); every other warp returns at once. */
__global__ void __launch_bounds__(kThreads)
    k_emb_grad(int64_t rows, int64_t C, int64_t V, const uint32_t *__restrict__ keys,
               const int32_t *__restrict__ order, const float *__restrict__ dy, float *__restrict__ dtable,
               bool accumulate) {
    const int64_t i = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
    const int64_t c = (int64_t)blockIdx.y * 32 + (threadIdx.x & 31);
    if (i >= rows || c >= C) return;
    const uint32_t key = keys[i];
    if ((int64_t)key >= V || (i > 0 && keys[i - 1] == key)) return;
    double acc = 0.0;
    for (int64_t j = i; j < rows && keys[j] == key; j++) acc += (double)dy[(int64_t)order[j] * C + c];
    float *out = dtable + (int64_t)key * C + c;
    *out = acc_or_set(accumulate, accumulate ? *out : 0.0f, (float)acc);
}

/* ------------------------------------------------------------------------ softmax */

/* Whether key j of query i (sample n) is masked. */
__device__ __forceinline__ bool key_masked(bool causal, int64_t i, int64_t j, const float *kid, float pad_id) {
    return (causal && j > i) || (kid && kid[j] == pad_id);
}

/* One warp per row (n, h, i) of x (N·H·Tq rows of Tk): masked softmax (masking: core/backend_ops.def softmax_forward):
 * the maximum over the unmasked keys, e = expf(x − max) in FP32, Σe in double, then
 * y = e·(float)(1/Σe). */
__global__ void __launch_bounds__(kThreads)
    k_softmax_fwd(int64_t rows, int64_t H, int64_t Tq, int64_t Tk, const float *__restrict__ x, float *__restrict__ y,
                  bool causal, const float *__restrict__ key_ids, float pad_id) {
    const int lane = threadIdx.x & 31;
    for (int64_t r = warp_row0(); r < rows; r += warp_row_stride()) {
        const int64_t i = r % Tq, n = r / (H * Tq);
        const float *xr = x + r * Tk, *kid = key_ids ? key_ids + n * Tk : nullptr;
        float *yr = y + r * Tk;
        float m = -INFINITY;
        bool any = false;
        for (int64_t j = lane; j < Tk; j += 32)
            if (!key_masked(causal, i, j, kid, pad_id)) {
                m = fmaxf(m, xr[j]);
                any = true;
            }
        m = warp_max(m);
        if (!__any_sync(kFull, any)) {
            for (int64_t j = lane; j < Tk; j += 32) yr[j] = 0.0f;
            continue;
        }
        double s = 0.0;
        for (int64_t j = lane; j < Tk; j += 32)
            if (!key_masked(causal, i, j, kid, pad_id)) s += (double)expf(__fsub_rn(xr[j], m));
        const float inv = (float)(1.0 / warp_sum(s));
        for (int64_t j = lane; j < Tk; j += 32)
            yr[j] = key_masked(causal, i, j, kid, pad_id) ? 0.0f : __fmul_rn(expf(__fsub_rn(xr[j], m)), inv);
    }
}

/* One warp per row: dx (+)= y·(dy − Σ dy·y), the dot product in double (exact products). */
__global__ void __launch_bounds__(kThreads)
    k_softmax_bwd(int64_t rows, int64_t cols, const float *__restrict__ y, const float *__restrict__ dy,
                  float *__restrict__ dx, bool accumulate) {
    const int lane = threadIdx.x & 31;
    for (int64_t r = warp_row0(); r < rows; r += warp_row_stride()) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        double dot = 0.0;
        for (int64_t j = lane; j < cols; j += 32) dot += (double)gr[j] * (double)yr[j];
        const float s = (float)warp_sum(dot);
        float *dr = dx + r * cols;
        for (int64_t j = lane; j < cols; j += 32) {
            const float v = __fmul_rn(yr[j], __fsub_rn(gr[j], s));
            dr[j] = acc_or_set(accumulate, accumulate ? dr[j] : 0.0f, v);
        }
    }
}

} // namespace

/* x, y (rows, C); gamma, beta (C) (NULL: 1 / 0); save_mean, save_rstd (rows): k_ln_fwd. */
extern "C" qs_status qs_cuda_layernorm_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                               const float *gamma, const float *beta, float eps, float *y,
                                               float *save_mean, float *save_rstd) {
    const char *what = "layernorm_forward";
    if (rows < 0 || C < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld; need rows >= 0 and C >= 1", what, (long long)rows,
                       (long long)C);
    QS_TRY(args_check(what, rows * C, {x, y, save_mean, save_rstd}));
    if (rows == 0) return QS_OK;
    k_ln_fwd<<<grid_rows(be, rows), kThreads, 0, stream_of(be, s)>>>(rows, C, x, gamma, beta, eps, y, save_mean,
                                                                      save_rstd);
    return qs_cuda_check_launch(what);
}

/* x, dy, dx (rows, C; dx NULL: not needed); gamma (C) (NULL: 1); save_mean, save_rstd (rows).
 * dx: k_ln_bwd_dx; dgamma, dbeta (C; NULL: not needed): fixed row chunks in double, in order. */
extern "C" qs_status qs_cuda_layernorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                                const float *dy, const float *gamma, const float *save_mean,
                                                const float *save_rstd, float *dx, bool accumulate, float *dgamma,
                                                float *dbeta) {
    const char *what = "layernorm_backward";
    if (rows < 0 || C < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld; need rows >= 0 and C >= 1", what, (long long)rows,
                       (long long)C);
    QS_TRY(args_check(what, rows * C, {x, dy, save_mean, save_rstd}));
    cudaStream_t st = stream_of(be, s);
    if (rows == 0) { /* empty sums */
        if (dgamma) QS_CUDA_TRY(cudaMemsetAsync(dgamma, 0, (size_t)C * sizeof(float), st));
        if (dbeta) QS_CUDA_TRY(cudaMemsetAsync(dbeta, 0, (size_t)C * sizeof(float), st));
        return QS_OK;
    }
    if (dx) {
        k_ln_bwd_dx<<<grid_rows(be, rows), kThreads, 0, st>>>(rows, C, x, dy, gamma, save_mean, save_rstd, dx,
                                                              accumulate);
        QS_TRY(qs_cuda_check_launch("layernorm_backward (input gradient)"));
    }
    if (!dgamma && !dbeta) return QS_OK;
    const int64_t cb = (C + kTx - 1) / kTx;
    if (cb > INT32_MAX) return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: C=%lld exceeds the CUDA grid", what, (long long)C);
    const int64_t nch = ln_chunks(rows, C);
    Scratch sc(st);
    QS_TRY(qs_cuda::scratch_alloc(sc, (size_t)(2 * nch) * (size_t)C * sizeof(double), what,
                                  "per-channel partial sums"));
    double *part = static_cast<double *>(sc.p);
    k_ln_bwd_param<<<dim3((unsigned)cb, (unsigned)nch), dim3(kTx, kTy), 0, st>>>(rows, C, x, dy, save_mean, save_rstd,
                                                                                part);
    QS_TRY(qs_cuda_check_launch("layernorm_backward (parameter gradient partials)"));
    k_ln_bwd_param_final<<<grid_for(be, C), kThreads, 0, st>>>(C, nch, part, dgamma, dbeta);
    return qs_cuda_check_launch("layernorm_backward (parameter gradients)");
}

/* y = GELU(x) over n elements (y may alias x), in the logistic form x·σ(2z) (GeluFwd). */
extern "C" qs_status qs_cuda_gelu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(args_check("gelu_forward", n, {x, y}));
    return launch_map(be, s, n, GeluFwd{x, y}, "gelu_forward");
}

/* dx (=, or += with accumulate) dy·GELU'(x), x the forward's input (n elements). */
extern "C" qs_status qs_cuda_gelu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *x, const float *dy,
                                           float *dx, bool accumulate) {
    QS_TRY(args_check("gelu_backward", n, {x, dy, dx}));
    return launch_map(be, s, n, GeluBwd{x, dy, dx, accumulate}, "gelu_backward");
}

/* y = tanh(x) over n elements (y may alias x). */
extern "C" qs_status qs_cuda_tanh_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y) {
    QS_TRY(args_check("tanh_forward", n, {x, y}));
    return launch_map(be, s, n, TanhFwd{x, y}, "tanh_forward");
}

/* dx (=, or +=) dy·(1 − y²), y the forward's output (n elements). */
extern "C" qs_status qs_cuda_tanh_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const float *dy,
                                           float *dx, bool accumulate) {
    QS_TRY(args_check("tanh_backward", n, {y, dy, dx}));
    return launch_map(be, s, n, TanhBwd{y, dy, dx, accumulate}, "tanh_backward");
}

/* y (rows, C) row r = table (V, C) row ids[r] (FP32 ids); an id outside [0, V) (or NaN) gives a
 * zero row, a fractional one is truncated towards zero (loaders check ids). */
extern "C" qs_status qs_cuda_embedding_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                               const float *ids, const float *table, float *y) {
    const char *what = "embedding_forward";
    if (rows < 0 || C < 1 || V < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld V=%lld; need rows >= 0, C >= 1, V >= 1", what,
                       (long long)rows, (long long)C, (long long)V);
    QS_TRY(args_check(what, rows * C, {ids, table, y}));
    return launch_map(be, s, rows * C, EmbeddingFwd{ids, table, y, C, V}, what);
}

/* dtable (V, C) (+)= per-id sums of dy rows (ids outside [0, V) ignored): rows sorted by id (CUB
 * stable radix sort), then k_emb_grad. rows ≤ 2^31 − 1; 16·rows bytes + CUB's storage from the pool;
 * the slowest warp grows with the count of the most frequent id. */
extern "C" qs_status qs_cuda_embedding_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                                const float *ids, const float *dy, float *dtable, bool accumulate) {
    const char *what = "embedding_backward";
    if (rows < 0 || C < 1 || V < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld V=%lld; need rows >= 0, C >= 1, V >= 1", what,
                       (long long)rows, (long long)C, (long long)V);
    if (!dtable) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: dtable is NULL", what);
    QS_TRY(args_check(what, rows * C, {ids, dy}));
    if (rows > INT32_MAX || V >= (int64_t)UINT32_MAX || (C + 31) / 32 > 65535)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: rows=%lld V=%lld C=%lld; the sort takes at most 2^31-1 rows and V < 2^32-1, the grid at "
                       "most 65535·32 channels",
                       what, (long long)rows, (long long)V, (long long)C);
    cudaStream_t st = stream_of(be, s);
    if (!accumulate) QS_CUDA_TRY(cudaMemsetAsync(dtable, 0, (size_t)V * (size_t)C * sizeof(float), st));
    if (rows == 0) return QS_OK;
    int end_bit = 1; /* keys are 0..V (V: invalid ids) */
    while (end_bit < 32 && ((uint64_t)1 << end_bit) <= (uint64_t)V) end_bit++;
    const int n = (int)rows;
    size_t sort_bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const uint32_t *)nullptr, (uint32_t *)nullptr,
                                                    (const int32_t *)nullptr, (int32_t *)nullptr, n, 0, end_bit, st);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return QS_FAIL(QS_ERR_BACKEND, "%s: cub::DeviceRadixSort::SortPairs (size query) failed: %s (%s)", what,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    /* keys in, keys out, rows in, rows out (4 bytes each per row, 256-byte aligned regions), then CUB's */
    const size_t region = ((size_t)rows * 4 + 255) / 256 * 256;
    Scratch sc(st);
    QS_TRY(qs_cuda::scratch_alloc(sc, 4 * region + sort_bytes, what, "sort temporaries"));
    char *base = static_cast<char *>(sc.p);
    uint32_t *keys_in = reinterpret_cast<uint32_t *>(base), *keys = reinterpret_cast<uint32_t *>(base + region);
    int32_t *rows_in = reinterpret_cast<int32_t *>(base + 2 * region);
    int32_t *order = reinterpret_cast<int32_t *>(base + 3 * region);
    k_emb_keys<<<grid_for(be, rows), kThreads, 0, st>>>(rows, V, ids, keys_in, rows_in);
    QS_TRY(qs_cuda_check_launch("embedding_backward (sort keys)"));
    e = cub::DeviceRadixSort::SortPairs(base + 4 * region, sort_bytes, keys_in, keys, rows_in, order, n, 0, end_bit, st);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return QS_FAIL(QS_ERR_BACKEND, "%s: cub::DeviceRadixSort::SortPairs of %d rows failed: %s (%s)", what, n,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    const dim3 grid((unsigned)((rows + kWarps - 1) / kWarps), (unsigned)((C + 31) / 32));
    k_emb_grad<<<grid, kThreads, 0, st>>>(rows, C, V, keys, order, dy, dtable, accumulate);
    return qs_cuda_check_launch("embedding_backward (row sums)");
}

/* y[o·inner + i] = x[o·inner + i] + v[i] for o < outer, i < inner (y may alias x). */
extern "C" qs_status qs_cuda_add_broadcast(qs_backend *be, qs_stream *s, int64_t outer, int64_t inner, const float *x,
                                           const float *v, float *y) {
    const char *what = "add_broadcast";
    QS_TRY(dims_check(what, {outer, inner}));
    QS_TRY(args_check(what, outer * inner, {x, v, y}));
    return launch_map(be, s, outer * inner, AddBroadcast{x, v, y, inner}, what);
}

/* to_heads: dst (N,H,T,D)[n,h,t,d] (=, or +=) src[(n·T + t)·ld + off + h·D + d];
 * !to_heads: dst[(n·T + t)·ld + off + h·D + d] (=, or +=) src (N,H,T,D)[n,h,t,d], only that
 * slice of dst touched. ld ≥ off + H·D. src and dst must not overlap. */
extern "C" qs_status qs_cuda_permute_heads(qs_backend *be, qs_stream *s, int64_t N, int64_t T, int64_t H, int64_t D,
                                           int64_t ld, int64_t off, const float *src, float *dst, bool to_heads,
                                           bool accumulate) {
    const char *what = "permute_heads";
    QS_TRY(dims_check(what, {N, T, H, D, ld, off}));
    if (ld < off + H * D)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: token rows of ld=%lld floats cannot hold off=%lld + H·D=%lld", what,
                       (long long)ld, (long long)off, (long long)(H * D));
    const int64_t n = N * T * H * D;
    QS_TRY(args_check(what, n, {src, dst}));
    return launch_map(be, s, n, PermuteHeads{src, dst, T, H, D, ld, off, to_heads, accumulate}, what);
}

/* y (N,H,Tq,Tk) = masked softmax over the last axis of x (k_softmax_fwd); key_ids (N,Tk) may be
 * NULL. A NaN among a row's unmasked keys makes them all NaN. */
extern "C" qs_status qs_cuda_softmax_forward(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t Tq,
                                             int64_t Tk, const float *x, float *y, bool causal, const float *key_ids,
                                             float pad_id) {
    const char *what = "softmax_forward";
    QS_TRY(dims_check(what, {N, H, Tq, Tk}));
    const int64_t rows = N * H * Tq;
    QS_TRY(args_check(what, rows * Tk, {x, y}));
    if (rows * Tk == 0) return QS_OK;
    k_softmax_fwd<<<grid_rows(be, rows), kThreads, 0, stream_of(be, s)>>>(rows, H, Tq, Tk, x, y, causal, key_ids,
                                                                           pad_id);
    return qs_cuda_check_launch(what);
}

/* dx (rows, cols) (=, or +=) y ⊙ (dy − Σ_j dy·y) per row (k_softmax_bwd). */
extern "C" qs_status qs_cuda_softmax_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *y,
                                              const float *dy, float *dx, bool accumulate) {
    const char *what = "softmax_backward";
    QS_TRY(dims_check(what, {rows, cols}));
    QS_TRY(args_check(what, rows * cols, {y, dy, dx}));
    if (rows * cols == 0) return QS_OK;
    k_softmax_bwd<<<grid_rows(be, rows), kThreads, 0, stream_of(be, s)>>>(rows, cols, y, dy, dx, accumulate);
    return qs_cuda_check_launch(what);
}
