/* src/cuda/cuda_norm.cu — defines: batch normalisation on the GPU (the batchnorm_* ops), with the
 * CPU backend's semantics (src/cpu/cpu_norm.c).
 *
 * x viewed as (rows, C), FP32 or BF16 (x_dt; every kernel that reads x is templated on its
 * element type and widens a BF16 value exactly, so the results are bitwise those of the FP32 op
 * on the widened x). Blocks of 32 channels × 8 row lanes (a warp reads 32 consecutive channels of
 * one row); each block reduces one chunk of rows in double, chunk partials go to a per-call
 * stream-ordered scratch (cudaMallocAsync) and are summed per channel in a fixed order by 32
 * chunk lanes of one block (bn_chunk_sums). The chunking and the order depend only on (rows, C),
 * so results are bitwise reproducible. Training statistics are two-pass like the CPU: mean =
 * Σx/n, then var = Σ(x-mean)²/n (biased) normalises, running_var takes Σ(x-mean)²/(n-1). The
 * backward's dx is FP32, or BF16 rounded in the dx kernel from the FP32 value it computes —
 * stochastically with the words quantize uses (core/quant_sr.h) or to nearest even — so the BF16
 * gradient of the convolution before it costs no FP32 write and no pass. When C and the rounding
 * offset are multiples of 64, a thread rounds four channels of a row with one Philox block
 * (k_bn_bwd_dx_sr64); otherwise the (channel, row) layout gives a thread no two elements of one
 * block and it computes a block per element. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_launch.cuh"
#include "core/numfmt.h"
#include "core/quant_sr.h"

namespace {

constexpr int kTx = 32; /* channels per batch-norm block */
constexpr int kTy = 8;  /* row lanes per batch-norm block */

using qs_cuda::args_check;
using qs_cuda::Scratch;
using qs_cuda::stream_of;
using qs_cuda::with_f32_or_bf16;

/* Row chunks of the per-channel reductions: a function of (rows, C) only (reproducible),
 * at least 64 rows each, about 1024 blocks in all. */
int64_t bn_chunks(int64_t rows, int64_t C) {
    int64_t cb = (C + kTx - 1) / kTx;
    int64_t n = 1024 / cb;
    int64_t by_rows = (rows + 63) / 64;
    if (n > by_rows) n = by_rows;
    if (n > 65535) n = 65535;
    return n < 1 ? 1 : n;
}

/* Row blocks of an element-wise batch-norm kernel with col_blocks blocks across the channels
 * and row_lanes rows per block (each thread loops over its rows): about 8192 blocks in all. */
unsigned bn_row_blocks_of(int64_t rows, int64_t col_blocks, int64_t row_lanes) {
    int64_t n = 8192 / (col_blocks > 0 ? col_blocks : 1);
    int64_t by_rows = (rows + row_lanes - 1) / row_lanes;
    if (n > by_rows) n = by_rows;
    if (n > 65535) n = 65535;
    return (unsigned)(n < 1 ? 1 : n);
}

/* The same for the kernels of kTx channels × kTy rows per block. */
unsigned bn_row_blocks(int64_t rows, int64_t C) { return bn_row_blocks_of(rows, (C + kTx - 1) / kTx, kTy); }

/* Sum the 8 row lanes of a block (fixed order) and store the chunk partial of channel c. */
__device__ __forceinline__ void bn_block_store(double (*sh)[kTx], double v, int64_t c, int64_t C, double *out) {
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double s = 0.0;
        for (int j = 0; j < kTy; j++) s += sh[j][threadIdx.x];
        *out = s;
    }
    __syncthreads();
}

/* This block's row chunk (grid y: chunk ch of nch): rows [r0, r1) of `rows`. */
struct BnChunk {
    int64_t ch, nch, r0, r1;
};
__device__ __forceinline__ BnChunk bn_chunk(int64_t rows) {
    const int64_t ch = blockIdx.y, nch = gridDim.y;
    return {ch, nch, rows * ch / nch, rows * (ch + 1) / nch};
}

/* Store a block's two chunk partials s1, s2 of channel c (bn_block_store) into the two (nch, C)
 * planes of part. */
__device__ __forceinline__ void bn_chunk_store(double (*sh)[kTx], double s1, double s2, int64_t c, int64_t C,
                                               const BnChunk &ck, double *part) {
    const int64_t cc = c < C ? c : 0;
    bn_block_store(sh, s1, c, C, part + ck.ch * C + cc);
    bn_block_store(sh, s2, c, C, part + (ck.nch + ck.ch) * C + cc);
}

/* Element i of x as FP32: an FP32 x, or BF16 bits widened exactly (core/numfmt.h). X: float or
 * uint16_t. */
__device__ __forceinline__ float bn_load(const float *x, int64_t i) { return x[i]; }
__device__ __forceinline__ float bn_load(const uint16_t *x, int64_t i) {
    return qs_nf_bits_f32(qs_nf_bf16_to_f32(x[i]));
}

/* Rows r = first, first + step, ... below end of one thread, kRowUnroll at a time: their loads
 * first (load(r), more bytes in flight per thread: one 2-byte BF16 load at a time left most of
 * the memory bandwidth unused), then use(r, value) in row order — the order, and so the results,
 * of the plain loop. */
constexpr int kRowUnroll = 4;
template <typename Load, typename Use>
__device__ __forceinline__ void bn_rows(int64_t r, int64_t end, int64_t step, const Load &load, const Use &use) {
    using V = decltype(load(r));
    for (; r + (kRowUnroll - 1) * step < end; r += kRowUnroll * step) {
        V v[kRowUnroll];
#pragma unroll
        for (int u = 0; u < kRowUnroll; u++) v[u] = load(r + u * step);
#pragma unroll
        for (int u = 0; u < kRowUnroll; u++) use(r + u * step, v[u]);
    }
    for (; r < end; r += step) use(r, load(r));
}

/* Per chunk, two (nch, C) planes of part: Σ d and Σ d² over the chunk's rows, d = x - x[0, c]
 * (shifted by the channel's first value, so the sums do not cancel when |mean| >> std), in
 * double. One pass over x. Grid (channel blocks, chunks), block (kTx, kTy). */
template <typename X>
__global__ void k_bn_stats(int64_t rows, int64_t C, const X *__restrict__ x, double *__restrict__ part) {
    __shared__ double sh[kTy][kTx];
    const int64_t c = (int64_t)blockIdx.x * kTx + threadIdx.x;
    const BnChunk ck = bn_chunk(rows);
    double s1 = 0.0, s2 = 0.0;
    if (c < C) {
        const double shift = (double)bn_load(x, c);
        bn_rows(
            ck.r0 + threadIdx.y, ck.r1, kTy, [&](int64_t r) { return bn_load(x, r * C + c); },
            [&](int64_t, float xv) {
                const double d = (double)xv - shift;
                s1 += d;
                s2 += d * d;
            });
    }
    bn_chunk_store(sh, s1, s2, c, C, ck, part);
}

/* The sums over the nch chunks of channel c = blockIdx.x·kTx + threadIdx.x of the two (nch, C)
 * planes of part, in a fixed order (reproducible): lane threadIdx.y adds chunks y, y + kFinLanes,
 * ... in ascending order, then the lane-0 thread adds the lanes' sums in lane order. Block (kTx,
 * kFinLanes), grid (channel blocks). Returns true in the thread that holds them (lane 0, c < C). */
constexpr int kFinLanes = 32;
__device__ __forceinline__ bool bn_chunk_sums(const double *__restrict__ part, int64_t C, int64_t nch, int64_t c,
                                              double *s1, double *s2) {
    __shared__ double sh[2][kFinLanes][kTx];
    double a = 0.0, b = 0.0;
    if (c < C)
        for (int64_t k = threadIdx.y; k < nch; k += kFinLanes) {
            a += part[k * C + c];
            b += part[(nch + k) * C + c];
        }
    sh[0][threadIdx.y][threadIdx.x] = a;
    sh[1][threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return false;
    a = 0.0, b = 0.0;
    for (int j = 0; j < kFinLanes; j++) {
        a += sh[0][j][threadIdx.x];
        b += sh[1][j][threadIdx.x];
    }
    *s1 = a, *s2 = b;
    return true;
}

/* From the chunk sums of d = x - x[0, c]: save_mean, save_invstd = 1/sqrt(var + eps) (biased
 * var), and the running statistics (unbiased var), as cpu_norm.c. Block (kTx, kFinLanes), grid
 * (channel blocks). */
template <typename X>
__global__ void __launch_bounds__(kTx *kFinLanes)
    k_bn_var(int64_t rows, int64_t C, int64_t nch, const double *__restrict__ part, const X *__restrict__ x, float eps,
             float momentum, float *__restrict__ save_mean, float *__restrict__ save_invstd, float *running_mean,
             float *running_var) {
    const int64_t c = (int64_t)blockIdx.x * kTx + threadIdx.x;
    double s1, s2;
    if (bn_chunk_sums(part, C, nch, c, &s1, &s2)) {
        const double n = (double)rows, dm = s1 / n;
        double sq = s2 - s1 * dm; /* Σ (x - mean)² */
        if (sq < 0.0) sq = 0.0;
        const double mean = (double)bn_load(x, c) + dm, var = sq / n;
        save_mean[c] = (float)mean;
        save_invstd[c] = (float)(1.0 / sqrt(var + (double)eps));
        if (running_mean) running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * (float)mean;
        if (running_var)
            running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (float)(sq / (double)(rows - 1));
    }
}

/* A batch-norm output element: FP32, or BF16 rounded to nearest even (the bits of the CPU's
 * and of the straight-through cast's rounding, core/numfmt.h). */
__device__ __forceinline__ void bn_store(float *y, int64_t i, float v) { y[i] = v; }
__device__ __forceinline__ void bn_store(uint16_t *y, int64_t i, float v) {
    y[i] = qs_nf_f32_to_bf16_rne(qs_nf_f32_bits(v));
}
/* [mask > 0] as 0/1 from an FP32 or BF16 ReLU output. */
__device__ __forceinline__ float bn_mask(const float *m, int64_t i) { return (float)(m[i] > 0.0f); }
__device__ __forceinline__ float bn_mask(const uint16_t *m, int64_t i) {
    return (float)(qs_nf_bits_f32(qs_nf_bf16_to_f32(m[i])) > 0.0f);
}

/* y = (x - mean[c])·k[c] + b[c] (+ res when set; then max(·,0) when relu), k = invstd·gamma, b = beta; invstd is
 * given (training) or 1/sqrt(var + eps) from var (evaluation). Grid (channel blocks, row
 * blocks), block (kTx, kTy); the per-channel constants are computed once per thread. X, R, Y:
 * float or uint16_t (BF16 bits). */
template <typename X, typename R, typename Y>
__global__ void k_bn_apply(int64_t rows, int64_t C, const X *__restrict__ x, const float *__restrict__ mean,
                           const float *__restrict__ stat, bool stat_is_var, float eps, const float *__restrict__ gamma,
                           const float *__restrict__ beta, const R *__restrict__ res, Y *__restrict__ y,
                           bool relu) {
    const int64_t c = (int64_t)blockIdx.x * kTx + threadIdx.x;
    if (c >= C) return;
    const float m = mean[c];
    const float invstd = stat_is_var ? (float)(1.0 / sqrt((double)stat[c] + (double)eps)) : stat[c];
    const float k = invstd * (gamma ? gamma[c] : 1.0f);
    const float b = beta ? beta[c] : 0.0f;
    bn_rows(
        (int64_t)blockIdx.y * kTy + threadIdx.y, rows, (int64_t)gridDim.y * kTy,
        [&](int64_t r) { return make_float2(bn_load(x, r * C + c), res ? bn_load(res, r * C + c) : 0.0f); },
        [&](int64_t r, float2 xr) {
            float v = (xr.x - m) * k + b;
            if (res) v = __fadd_rn(v, xr.y); /* never contracted into the line above */
            bn_store(y, r * C + c, relu ? (v > 0.0f ? v : 0.0f) : v);
        });
}

/* Per chunk: Σ g and Σ g·(x - mean) in double, g = dy·[y_relu > 0] (or dy). part holds two
 * (nch, C) planes. X, G, M: x's, dy's and the mask's element types (float or uint16_t BF16 bits). */
template <typename X, typename G, typename M>
__global__ void k_bn_bwd_stats(int64_t rows, int64_t C, const X *__restrict__ x, const G *__restrict__ dy,
                               const M *__restrict__ mask, const float *__restrict__ save_mean,
                               double *__restrict__ part) {
    __shared__ double sh[kTy][kTx];
    const int64_t c = (int64_t)blockIdx.x * kTx + threadIdx.x;
    const BnChunk ck = bn_chunk(rows);
    double s1 = 0.0, s2 = 0.0;
    if (c < C) {
        const double m = (double)save_mean[c];
        bn_rows(
            ck.r0 + threadIdx.y, ck.r1, kTy,
            [&](int64_t r) {
                const int64_t i = r * C + c;
                float g = bn_load(dy, i);
                if (mask) g = g * bn_mask(mask, i); /* a multiply, like the CPU */
                return make_float2(g, bn_load(x, i));
            },
            [&](int64_t, float2 gx) {
                s1 += (double)gx.x;
                s2 += (double)gx.x * ((double)gx.y - m);
            });
    }
    bn_chunk_store(sh, s1, s2, c, C, ck, part);
}

/* From the chunk partials: dgamma = Σg(x-mean)·invstd, dbeta = Σg, and (kap != NULL) the dx
 * coefficients k = invstd·gamma, a = Σg/n, p = Σg(x-mean)/n·invstd² in kap[0..C), [C..2C),
 * [2C..3C). Block (kTx, kFinLanes), grid (channel blocks). */
__global__ void __launch_bounds__(kTx *kFinLanes)
    k_bn_bwd_final(int64_t rows, int64_t C, int64_t nch, const double *__restrict__ part,
                   const float *__restrict__ save_invstd, const float *__restrict__ gamma, float *__restrict__ kap,
                   float *__restrict__ dgamma, float *__restrict__ dbeta) {
    const int64_t c = (int64_t)blockIdx.x * kTx + threadIdx.x;
    double sum_dy, sum_dy_xmu;
    if (bn_chunk_sums(part, C, nch, c, &sum_dy, &sum_dy_xmu)) {
        const double is = save_invstd[c];
        if (kap) {
            kap[c] = (float)(is * (gamma ? gamma[c] : 1.0f));
            kap[C + c] = (float)(sum_dy / (double)rows);
            kap[2 * C + c] = (float)(sum_dy_xmu / (double)rows * is * is);
        }
        if (dgamma) dgamma[c] = (float)(sum_dy_xmu * is);
        if (dbeta) dbeta[c] = (float)sum_dy;
    }
}

/* The stochastic rounding of a BF16 dx (the qs_sr passed as dx_sr, by value): element i of the
 * (rows, C) matrix takes the word of global index offset + i of (key, counter), the counter read
 * from counter_at (device memory) when that is set — quantize's rounding (cuda_quant.cu). */
struct BnDxSr {
    uint64_t key, counter, offset;
    const uint64_t *counter_at;
};

/* The counter a thread rounds with (SR only; read once per thread). */
template <bool SR>
__device__ __forceinline__ uint64_t bn_dx_counter(const BnDxSr &sr) {
    if constexpr (SR) return sr.counter_at ? *sr.counter_at : sr.counter;
    return 0u;
}

/* The stochastic-rounding word of global index j: qs_sr_word_inline's (core/quant_sr.h), with
 * the block's word picked by selects rather than a dynamic index into the array, which would put
 * the array in local memory. */
__device__ __forceinline__ uint32_t bn_sr_word(uint64_t key, uint64_t ctr, uint64_t j) {
    uint32_t o[4];
    qs_sr_block(key, ctr, j >> 6, (uint32_t)(j & 15u), o);
    const uint32_t w = (uint32_t)(j >> 4) & 3u;
    return w == 0u ? o[0] : w == 1u ? o[1] : w == 2u ? o[2] : o[3];
}

/* Store dx element i = v: FP32 (= or +=), or BF16 (never accumulated; the caller checks) rounded
 * stochastically with the random word `word` (SR) or to nearest even — the bits quantize(F32 dx
 * → BF16, sr) gives (core/numfmt.h) when word is the one of global index sr.offset + i. */
template <bool SR>
__device__ __forceinline__ void bn_dx_store(float *dx, int64_t i, float v, bool accumulate, uint32_t) {
    dx[i] = accumulate ? dx[i] + v : v;
}
template <bool SR>
__device__ __forceinline__ void bn_dx_store(uint16_t *dx, int64_t i, float v, bool, uint32_t word) {
    const uint32_t u = qs_nf_f32_bits(v);
    dx[i] = SR ? qs_nf_f32_to_bf16_sr(u, word) : qs_nf_f32_to_bf16_rne(u);
}

/* The per-channel constants of the input gradient: k, a, p from kap (k_bn_bwd_final) and the
 * saved mean m of channel c. */
struct BnDxCoef {
    float k, a, p, m;
};
__device__ __forceinline__ BnDxCoef bn_dx_coef(const float *kap, const float *save_mean, int64_t C, int64_t c) {
    return {kap[c], kap[C + c], kap[2 * C + c], save_mean[c]};
}

/* Element i's loads: (dy, mask as 0/1 (1 without a mask), x (0 without dx)). */
template <typename X, typename G, typename M>
__device__ __forceinline__ float3 bn_dx_load(const X *x, const G *dy, const M *mask, bool need_x, int64_t i) {
    return make_float3(bn_load(dy, i), mask ? bn_mask(mask, i) : 1.0f, need_x ? bn_load(x, i) : 0.0f);
}

/* Element i from its loads dmx (bn_dx_load): writes dres[i] (= or += with dres_acc; NULL: none),
 * dy where the mask is set, and returns the FP32 dx value (g - a - (x - m)·p)·k, g = dy·mask. */
__device__ __forceinline__ float bn_dx_elem(const BnDxCoef &q, float3 dmx, bool masked, int64_t i,
                                            float *__restrict__ dres, bool dres_acc) {
    const float d = dmx.x, mk = dmx.y;
    if (dres) {
        const float rv = mk > 0.0f ? d : 0.0f;
        dres[i] = dres_acc ? __fadd_rn(dres[i], rv) : rv;
    }
    const float g = masked ? d * mk : d;
    return (g - q.a - (dmx.z - q.m) * q.p) * q.k;
}

/* dx (= or +=; NULL: none) (g - a[c] - (x - mean[c])·p[c])·k[c]; dres (= or += with dres_acc;
 * NULL: none) the residual's gradient, dy where mask > 0 (relu_backward's select), or dy without
 * a mask. Grid (channel blocks, row blocks). G: dy's element type (float or uint16_t BF16 bits).
 * D: float (FP32 dx), or uint16_t (BF16 bits: SR stochastic rounding with sr — one Philox block
 * per element, as a thread here holds no two elements of one block — else nearest even). */
template <typename X, typename G, typename M, typename D, bool SR>
__global__ void k_bn_bwd_dx(int64_t rows, int64_t C, const X *__restrict__ x, const G *__restrict__ dy,
                            const M *__restrict__ mask, const float *__restrict__ save_mean,
                            const float *__restrict__ kap, D *__restrict__ dx, bool accumulate,
                            float *__restrict__ dres, bool dres_acc, BnDxSr sr) {
    const int64_t c = (int64_t)blockIdx.x * kTx + threadIdx.x;
    if (c >= C) return;
    const BnDxCoef q = bn_dx_coef(kap, save_mean, C, c);
    const uint64_t ctr = bn_dx_counter<SR>(sr);
    bn_rows(
        (int64_t)blockIdx.y * kTy + threadIdx.y, rows, (int64_t)gridDim.y * kTy,
        [&](int64_t r) { return bn_dx_load(x, dy, mask, dx != nullptr, r * C + c); },
        [&](int64_t r, float3 dmx) {
            const int64_t i = r * C + c;
            const float v = bn_dx_elem(q, dmx, mask != nullptr, i, dres, dres_acc);
            if (!dx) return;
            bn_dx_store<SR>(dx, i, v, accumulate, SR ? bn_sr_word(sr.key, ctr, sr.offset + (uint64_t)i) : 0u);
        });
}

/* The BF16 dx with stochastic rounding when C % 64 == 0 and sr.offset % 64 == 0: then the 64
 * words of one Philox group (core/quant_sr.h) are those of 64 consecutive channels of one row,
 * and the thread of lane l (0..15) of a 64-channel unit rounds channels 16·w + l (w = 0..3) of a
 * row with the four words of one Philox block — a quarter of the generator's work of
 * k_bn_bwd_dx, which computes a block per element. Same bits as k_bn_bwd_dx<..., uint16_t, true>.
 * Grid (C / 64 units, row blocks), block (kSrLanes, kSrRows); dx is not NULL. */
constexpr int kSrLanes = 16, kSrRows = 16;
template <typename X, typename G, typename M>
__global__ void __launch_bounds__(kSrLanes *kSrRows)
    k_bn_bwd_dx_sr64(int64_t rows, int64_t C, const X *__restrict__ x, const G *__restrict__ dy,
                     const M *__restrict__ mask, const float *__restrict__ save_mean, const float *__restrict__ kap,
                     uint16_t *__restrict__ dx, float *__restrict__ dres, bool dres_acc, BnDxSr sr) {
    const int64_t c0 = (int64_t)blockIdx.x * 64 + threadIdx.x;
    BnDxCoef q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = bn_dx_coef(kap, save_mean, C, c0 + 16 * w);
    const uint64_t ctr = bn_dx_counter<true>(sr);
    const uint64_t g0 = sr.offset / 64u + blockIdx.x, groups_per_row = (uint64_t)C / 64u;
    for (int64_t r = (int64_t)blockIdx.y * kSrRows + threadIdx.y; r < rows; r += (int64_t)gridDim.y * kSrRows) {
        float3 v[4];
#pragma unroll
        for (int w = 0; w < 4; w++) v[w] = bn_dx_load(x, dy, mask, true, r * C + c0 + 16 * w);
        uint32_t o[4];
        qs_sr_block(sr.key, ctr, g0 + (uint64_t)r * groups_per_row, threadIdx.x, o);
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const int64_t i = r * C + c0 + 16 * w;
            bn_dx_store<true>(dx, i, bn_dx_elem(q[w], v[w], mask != nullptr, i, dres, dres_acc), false, o[w]);
        }
    }
}

qs_status bn_check(const char *what, int64_t rows, int64_t C, std::initializer_list<const void *> ptrs) {
    if (rows < 0 || C < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: rows=%lld C=%lld; need rows >= 0 and C >= 1", what, (long long)rows,
                       (long long)C);
    return args_check(what, rows * C, ptrs);
}


/* Launch k_bn_apply on x of dtype x_dt, res of res_dt (NULL: none) and y of dtype y_dt (each F32
 * or BF16). */
void bn_apply_launch(dim3 grid, cudaStream_t st, int64_t rows, int64_t C, const void *x, qs_dtype x_dt,
                     const float *mean, const float *stat, bool stat_is_var, float eps, const float *gamma,
                     const float *beta, const void *res, qs_dtype res_dt, void *y, qs_dtype y_dt, bool relu) {
    const dim3 blk(kTx, kTy);
    with_f32_or_bf16(x, x_dt, [&](auto xp) {
        with_f32_or_bf16(res, res_dt, [&](auto rp) {
            if (y_dt == QS_BF16)
                k_bn_apply<<<grid, blk, 0, st>>>(rows, C, xp, mean, stat, stat_is_var, eps, gamma, beta, rp,
                                                 static_cast<uint16_t *>(y), relu);
            else
                k_bn_apply<<<grid, blk, 0, st>>>(rows, C, xp, mean, stat, stat_is_var, eps, gamma, beta, rp,
                                                 static_cast<float *>(y), relu);
        });
    });
}

} // namespace

/* x (rows, C) in x_dt, y (rows, C) in y_dt (each F32 or BF16); save_mean, save_invstd,
 * running_mean, running_var, gamma, beta (C). gamma/beta NULL = 1/0; running_* NULL = no update;
 * residual (rows, C, residual_dt: F32 or BF16) NULL = none, else added before the ReLU. Needs
 * rows >= 2 (like PyTorch and the CPU). */
extern "C" qs_status qs_cuda_batchnorm_forward_train(qs_backend *be, qs_stream *s, int64_t rows, int64_t C,
                                                     const void *x, qs_dtype x_dt, const float *gamma,
                                                     const float *beta, void *y, qs_dtype y_dt, float *save_mean,
                                                     float *save_invstd, float *running_mean, float *running_var,
                                                     float momentum, float eps, bool relu, const void *residual,
                                                     qs_dtype residual_dt) {
    const char *what = "batchnorm_forward_train";
    QS_TRY(bn_check(what, rows, C, {x, y, save_mean, save_invstd}));
    QS_TRY(qs_batchnorm_forward_check(what, true, rows, x_dt, y_dt, residual_dt));
    cudaStream_t st = stream_of(be, s);
    const int64_t nch = bn_chunks(rows, C);
    const unsigned cb = (unsigned)((C + kTx - 1) / kTx);
    Scratch sc(st);
    QS_TRY(qs_cuda::scratch_alloc(sc, (size_t)(2 * nch) * (size_t)C * sizeof(double), what,
                                  "per-channel partial sums"));
    double *part = static_cast<double *>(sc.p);
    const dim3 blk(kTx, kTy);
    with_f32_or_bf16(x, x_dt, [&](auto xp) { k_bn_stats<<<dim3(cb, (unsigned)nch), blk, 0, st>>>(rows, C, xp, part); });
    QS_TRY(qs_cuda_check_launch("batchnorm_forward_train (sums kernel)"));
    with_f32_or_bf16(x, x_dt, [&](auto xp) {
        k_bn_var<<<cb, dim3(kTx, kFinLanes), 0, st>>>(rows, C, nch, part, xp, eps, momentum, save_mean, save_invstd,
                                                      running_mean, running_var);
    });
    QS_TRY(qs_cuda_check_launch("batchnorm_forward_train (variance kernel)"));
    bn_apply_launch(dim3(cb, bn_row_blocks(rows, C)), st, rows, C, x, x_dt, save_mean, save_invstd, false, eps, gamma,
                    beta, residual, residual_dt, y, y_dt, relu);
    return qs_cuda_check_launch("batchnorm_forward_train (normalise kernel)");
}

/* y = (x - running_mean)/sqrt(running_var + eps)·gamma + beta (+ residual when set; then ReLU
 * when relu). */
extern "C" qs_status qs_cuda_batchnorm_forward_eval(qs_backend *be, qs_stream *s, int64_t rows, int64_t C,
                                                    const void *x, qs_dtype x_dt, const float *gamma,
                                                    const float *beta, const float *running_mean,
                                                    const float *running_var, float eps, void *y, qs_dtype y_dt,
                                                    bool relu, const void *residual, qs_dtype residual_dt) {
    const char *what = "batchnorm_forward_eval";
    QS_TRY(bn_check(what, rows, C, {x, y, running_mean, running_var}));
    QS_TRY(qs_batchnorm_forward_check(what, false, rows, x_dt, y_dt, residual_dt));
    if (rows == 0) return QS_OK;
    const unsigned cb = (unsigned)((C + kTx - 1) / kTx);
    bn_apply_launch(dim3(cb, bn_row_blocks(rows, C)), stream_of(be, s), rows, C, x, x_dt, running_mean, running_var, true,
                    eps, gamma, beta, residual, residual_dt, y, y_dt, relu);
    return qs_cuda_check_launch("batchnorm_forward_eval (normalise kernel)");
}

/* dx (rows, C; NULL = not needed; overwritten or accumulated), dgamma, dbeta (C; NULL = not
 * needed; overwritten) from x (rows, C; F32 or BF16, x_dt), dy (rows, C; F32 or BF16, dy_dt) and the saved
 * statistics; y_relu (rows, C) masks dy for a forward with relu. dx_dt F32, or BF16: the FP32
 * value of each dx element rounded stochastically with dx_sr (host descriptor; element i takes
 * the word of global index dx_sr->offset + i, the counter read from dx_sr->counter_at in device
 * memory when set, by the kernel) or to nearest even (dx_sr NULL) — the bits of the F32 op
 * followed by quantize(dx → BF16, dx_sr). dx_sr is unused with an F32 dx. A BF16 dx cannot
 * accumulate (QS_ERR_INVALID_ARG); another dx_dt is QS_ERR_UNSUPPORTED (checked even when dx is
 * NULL). dresidual (rows, C; NULL = none; = or += with dresidual_accumulate): dy where y_relu > 0
 * (or dy without y_relu), written by the input-gradient kernel, also when dx is NULL. */
extern "C" qs_status qs_cuda_batchnorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C,
                                                const void *x, qs_dtype x_dt, const void *dy, qs_dtype dy_dt,
                                                const float *gamma,
                                                const float *save_mean, const float *save_invstd, void *dx,
                                                qs_dtype dx_dt, const qs_sr *dx_sr, bool accumulate, float *dgamma,
                                                float *dbeta, const void *y_relu, qs_dtype y_dt, float *dresidual, bool dresidual_accumulate) {
    const char *what = "batchnorm_backward";
    QS_TRY(bn_check(what, rows, C, {x, dy, save_mean, save_invstd}));
    QS_TRY(qs_batchnorm_dtype_check(what, x_dt, y_dt, dx_dt, accumulate));
    QS_TRY(qs_dy_dtype_check(what, dy_dt));
    const bool m16 = y_dt == QS_BF16;
    const float *m32 = m16 ? nullptr : static_cast<const float *>(y_relu);
    const uint16_t *mb = m16 ? static_cast<const uint16_t *>(y_relu) : nullptr;
    if (rows < 1) return QS_OK;
    if (!dx && !dgamma && !dbeta && !dresidual) return QS_OK;
    cudaStream_t st = stream_of(be, s);
    const int64_t nch = bn_chunks(rows, C);
    const unsigned cb = (unsigned)((C + kTx - 1) / kTx);
    Scratch sc(st);
    QS_TRY(qs_cuda::scratch_alloc(sc, (size_t)(2 * nch) * (size_t)C * sizeof(double) + (size_t)(3 * C) * sizeof(float),
                                  what, "per-channel partial sums"));
    double *part = static_cast<double *>(sc.p);
    float *kap = dx || dresidual ? reinterpret_cast<float *>(part + 2 * nch * C) : nullptr;
    const dim3 blk(kTx, kTy);
    with_f32_or_bf16(x, x_dt, [&](auto xp) {
        with_f32_or_bf16(dy, dy_dt, [&](auto gp) {
            if (m16) k_bn_bwd_stats<<<dim3(cb, (unsigned)nch), blk, 0, st>>>(rows, C, xp, gp, mb, save_mean, part);
            else k_bn_bwd_stats<<<dim3(cb, (unsigned)nch), blk, 0, st>>>(rows, C, xp, gp, m32, save_mean, part);
        });
    });
    QS_TRY(qs_cuda_check_launch("batchnorm_backward (reduction kernel)"));
    k_bn_bwd_final<<<cb, dim3(kTx, kFinLanes), 0, st>>>(rows, C, nch, part, save_invstd, gamma, kap, dgamma, dbeta);
    QS_TRY(qs_cuda_check_launch("batchnorm_backward (coefficient kernel)"));
    if (!dx && !dresidual) return QS_OK;
    const dim3 grid(cb, bn_row_blocks(rows, C));
    const bool bf16 = dx && dx_dt == QS_BF16, use_sr = bf16 && dx_sr;
    BnDxSr sr = {0u, 0u, 0u, nullptr};
    if (use_sr) sr = {dx_sr->key, dx_sr->counter, dx_sr->offset, dx_sr->counter_at};
    const bool sr64 = use_sr && C % 64 == 0 && dx_sr->offset % 64 == 0;
    const dim3 grid64((unsigned)(C / 64), bn_row_blocks_of(rows, C / 64, kSrRows)); /* used when sr64 */
    /* the kernel for x's, dy's and the mask's element types (xp, gp, mp) and dx's: F32, BF16 SR or
     * RNE */
    auto launch = [&](auto xp, auto gp, auto mp) {
        using X = std::remove_cv_t<std::remove_pointer_t<decltype(xp)>>;
        using G = std::remove_cv_t<std::remove_pointer_t<decltype(gp)>>;
        using M = std::remove_cv_t<std::remove_pointer_t<decltype(mp)>>;
        if (!bf16)
            k_bn_bwd_dx<X, G, M, float, false><<<grid, blk, 0, st>>>(rows, C, xp, gp, mp, save_mean, kap,
                                                                     static_cast<float *>(dx), accumulate, dresidual,
                                                                     dresidual_accumulate, sr);
        else if (sr64)
            k_bn_bwd_dx_sr64<<<grid64, dim3(kSrLanes, kSrRows), 0, st>>>(rows, C, xp, gp, mp, save_mean, kap,
                                                                        static_cast<uint16_t *>(dx), dresidual,
                                                                        dresidual_accumulate, sr);
        else if (use_sr)
            k_bn_bwd_dx<X, G, M, uint16_t, true><<<grid, blk, 0, st>>>(rows, C, xp, gp, mp, save_mean, kap,
                                                                       static_cast<uint16_t *>(dx), false, dresidual,
                                                                       dresidual_accumulate, sr);
        else
            k_bn_bwd_dx<X, G, M, uint16_t, false><<<grid, blk, 0, st>>>(rows, C, xp, gp, mp, save_mean, kap,
                                                                        static_cast<uint16_t *>(dx), false, dresidual,
                                                                        dresidual_accumulate, sr);
    };
    with_f32_or_bf16(x, x_dt, [&](auto xp) {
        with_f32_or_bf16(dy, dy_dt, [&](auto gp) {
            if (m16) launch(xp, gp, mb);
            else launch(xp, gp, m32);
        });
    });
    return qs_cuda_check_launch("batchnorm_backward (input-gradient kernel)");
}
