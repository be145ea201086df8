/* src/cuda/cuda_attention.cu — defines: fused multi-head attention on tensor cores, the optional
 * attention ops of core/backend_ops.def (semantics: core/backend.h qs_attention_desc).
 *
 * Forward and backward are flash-attention style: the (T, T) scores never exist in memory.
 * Tiles of 64 queries × 64 keys are multiplied on tensor cores (mma.sync m16n8k16, BF16 or FP16
 * operands, FP32 accumulation); the forward keeps a running maximum and sum per query row and
 * saves the row's log-sum-exp; the backward recomputes the probabilities from it, in two
 * kernels — one per block of keys (dK, dV), one per block of queries (dQ) — so that every
 * gradient element is written once, in a fixed order: results are bitwise reproducible.
 * Supported: dtype BF16 or F16, head width D of 32 or 64, any T ≥ 1.
 *
 * Layout of the work: q, k, v are first packed from their token rows (FP32) into (N,H,T,D) in
 * the operand dtype E — the tensors the backward needs, kept in `saved` — then every kernel
 * runs one block of 4 warps per (sample·head, 64-row tile), each warp owning 16 rows. Tiles
 * of 64 rows live in shared memory with rows padded by 8 elements (conflict-free ldmatrix);
 * products are warp-level mma.sync m16n8k16 with FP32 accumulators, whose register layout
 * (PTX ISA, "Matrix Fragments for mma.m16n8k16") lets a 16×16 block of an accumulator become
 * the A operand of the next product without leaving registers: accumulator element c of n-tile
 * j in lane (g = lane/4, t = lane%4) is row g + 8·(c/2), column 8j + 2t + c%2.
 * Scores are kept in the log2 domain (scaled by alpha·log2 e) and exponentiated with exp2f. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_launch.cuh"

namespace {

using qs_cuda::args_check;
using qs_cuda::grid_for;
using qs_cuda::stream_of;

constexpr int kTile = 64;              /* rows of a tile: queries or keys */
constexpr int kWarps = 4;              /* 16 rows of the block's own tile each */
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;

/* The operand dtype: packing two floats into a register and the tensor-core product
 * c (16×8, FP32) += a (16×16) · b (16×8). One specialisation per 16-bit type: T the element,
 * T2 its pair, CVT the rounding conversion of two floats, PTX the type's name in mma. */
template <typename E> struct Elem;
#define QS_ATTN_ELEM(T, T2, CVT, PTX)                                                                          \
    template <> struct Elem<T> {                                                                               \
        static __device__ __forceinline__ uint32_t pack(float lo, float hi) {                                  \
            T2 v = CVT(lo, hi);                                                                                \
            return *reinterpret_cast<uint32_t *>(&v);                                                          \
        }                                                                                                      \
        static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX                                  \
                         ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                        \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                      \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                      \
        }                                                                                                      \
    };
QS_ATTN_ELEM(__nv_bfloat16, __nv_bfloat162, __floats2bfloat162_rn, "bf16")
QS_ATTN_ELEM(__half, __half2, __floats2half2_rn, "f16")
#undef QS_ATTN_ELEM

template <typename E, int D> struct Tile {
    static constexpr int LD = D + 8; /* 16-byte aligned rows that fall on distinct bank groups */
    E v[kTile][LD];
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* A operand: the 16×16 block of tile t at rows r0.., columns c0.. . */
template <typename E, int D>
__device__ __forceinline__ void frag_a(uint32_t a[4], const Tile<E, D> &t, int r0, int c0, int lane) {
    ldsm_x4(a, &t.v[r0 + (lane & 7) + ((lane >> 3) & 1) * 8][c0 + (lane >> 4) * 8]);
}

/* S (16 × 64) = A (16 × D, fragments af) · tᵀ, t's 64 rows being S's columns. */
template <typename E, int D>
__device__ __forceinline__ void mma_abt(float s[8][4], const uint32_t (&af)[D / 16][4], const Tile<E, D> &t, int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int c = 0; c < 4; c++) s[j][c] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; kc++)
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
            uint32_t b[4]; /* b[0..1]: columns 8j..8j+7, b[2..3]: the next 8 */
            ldsm_x4(b, &t.v[j * 8 + (lane & 7) + (lane >> 4) * 8][kc * 16 + ((lane >> 3) & 1) * 8]);
            Elem<E>::mma(s[j], af[kc], b[0], b[1]);
            Elem<E>::mma(s[j + 1], af[kc], b[2], b[3]);
        }
}

/* O (16 × D) += P (16 × 64, an FP32 accumulator rounded to E) · t (64 × D). */
template <typename E, int D>
__device__ __forceinline__ void mma_pv(float o[D / 8][4], const float p[8][4], const Tile<E, D> &t, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const uint32_t a[4] = {Elem<E>::pack(p[2 * kk][0], p[2 * kk][1]), Elem<E>::pack(p[2 * kk][2], p[2 * kk][3]),
                               Elem<E>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                               Elem<E>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dt = 0; dt < D / 8; dt += 2) {
            uint32_t b[4]; /* b[0..1]: output columns 8dt.., b[2..3]: the next 8 */
            ldsm_x4_trans(b, &t.v[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][dt * 8 + (lane >> 4) * 8]);
            Elem<E>::mma(o[dt], a, b[0], b[1]);
            Elem<E>::mma(o[dt + 1], a, b[2], b[3]);
        }
    }
}

/* Rows r0..r0+63 of a packed (T, D) head into t; rows at or beyond T are zero. */
template <typename E, int D> __device__ __forceinline__ void load_tile(Tile<E, D> &t, const E *src, int T, int r0) {
    constexpr int kVecs = D / 8; /* 16-byte vectors per row */
    for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
        const int r = i / kVecs, c = (i % kVecs) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < T) v = *reinterpret_cast<const uint4 *>(src + (size_t)(r0 + r) * D + c);
        *reinterpret_cast<uint4 *>(&t.v[r][c]) = v;
    }
}

/* The same, asynchronously (cp.async, 16 bytes a copy; rows at or beyond T are zero-filled):
 * visible after cp_async_wait<n> and a __syncthreads. */
template <typename E, int D>
__device__ __forceinline__ void load_tile_async(Tile<E, D> &t, const E *src, int T, int r0) {
    constexpr int kVecs = D / 8;
    for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
        const int r = i / kVecs, c = (i % kVecs) * 8;
        const bool in = r0 + r < T;
        const E *g = src + (size_t)(in ? r0 + r : 0) * D + c;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(&t.v[r][c])), "l"(g),
                     "r"(in ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Wait until at most n of this thread's cp.async groups are still in flight. */
template <int n> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(n)); }

/* Whether key `key` of sample n takes part: inside the sequence and not padding. */
__device__ __forceinline__ bool key_kept(int key, int T, const float *ids, float pad_id, int64_t n) {
    return key < T && (!ids || ids[n * T + key] != pad_id);
}

/* One step of the key-tile pipeline of the forward and dQ kernels (iteration `it` of `ntiles`):
 * start loading the next key and value tiles and their kept flags into the other buffer
 * (released by the previous iteration's closing barrier), then wait for this iteration's. */
template <typename E, int D>
__device__ __forceinline__ void next_key_tiles(Tile<E, D> (&Ks)[2], Tile<E, D> (&Vs)[2], bool (&kept)[2][kTile],
                                               const E *K, const E *V, int T, int it, int ntiles, const float *ids,
                                               float pad_id, int64_t n) {
    const int nb = (it & 1) ^ 1, k1 = (it + 1) * kTile;
    if (it + 1 < ntiles) {
        load_tile_async(Ks[nb], K, T, k1);
        load_tile_async(Vs[nb], V, T, k1);
        if (threadIdx.x < kTile) kept[nb][threadIdx.x] = key_kept(k1 + threadIdx.x, T, ids, pad_id, n);
        cp_async_wait<2>();
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
}

/* Write a warp's 16 × D accumulator (times `scale`) to the token rows of a heads reference:
 * row0 + g (+8) are the rows (tokens) this lane holds. */
template <int D>
__device__ __forceinline__ void store_rows(const float acc[D / 8][4], float scale, float *ptr, int64_t ld, int64_t off,
                                           bool accumulate, int64_t n, int h, int T, int row0, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= T) continue;
        float *dst = ptr + (n * T + row) * ld + off + (int64_t)h * D + 2 * t4;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            const float a = acc[dt][2 * r] * scale, b = acc[dt][2 * r + 1] * scale;
            if (accumulate) {
                dst[dt * 8] += a;
                dst[dt * 8 + 1] += b;
            } else {
                dst[dt * 8] = a;
                dst[dt * 8 + 1] = b;
            }
        }
    }
}

/* The three operands' heads (token rows) packed to (N,H,T,D) in E, rounded to nearest even:
 * one launch, one thread per 4 consecutive elements of one operand. */
struct PackArgs {
    const float *src[3];
    int64_t ld[3], off[3];
    void *dst[3];
};
template <typename E>
__global__ void k_attn_pack(PackArgs a, int T, int H, int D, int64_t quads) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < 3 * quads; i += (int64_t)gridDim.x * blockDim.x) {
        const int which = (int)(i / quads);
        const int64_t e = 4 * (i % quads), d = e % D, t = (e / D) % T, bh = e / ((int64_t)D * T);
        const float *p = a.src[which] + ((bh / H) * T + t) * a.ld[which] + a.off[which] + (bh % H) * D + d;
        const uint2 v = make_uint2(Elem<E>::pack(p[0], p[1]), Elem<E>::pack(p[2], p[3]));
        *reinterpret_cast<uint2 *>(static_cast<E *>(a.dst[which]) + e) = v;
    }
}

/* Forward: grid (N·H, ⌈T/64⌉), the query tiles of a causal mask's longest rows first. Key and
 * value tiles are double-buffered: the next pair loads (cp.async) while this one is used. */
template <typename E, int D>
__global__ void __launch_bounds__(kThreads)
    k_attn_fwd(const E *Q, const E *K, const E *V, int T, int H, float sl2, bool causal, const float *ids,
               float pad_id, float *out, float *lse) {
    __shared__ __align__(16) Tile<E, D> Qs, Ks[2], Vs[2];
    __shared__ bool kept[2][kTile];
    const int bh = blockIdx.x, h = bh % H, q0 = (gridDim.y - 1 - blockIdx.y) * kTile;
    const int64_t n = bh / H;
    const size_t base = (size_t)bh * T * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int kend = causal ? min(T, q0 + kTile) : T, ntiles = (kend + kTile - 1) / kTile;
    load_tile_async(Qs, Q + base, T, q0);
    load_tile_async(Ks[0], K + base, T, 0);
    load_tile_async(Vs[0], V + base, T, 0);
    if (threadIdx.x < kTile) kept[0][threadIdx.x] = key_kept(threadIdx.x, T, ids, pad_id, n);
    cp_async_wait<2>(); /* Q is in */
    __syncthreads();
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kc = 0; kc < D / 16; kc++) frag_a(qf[kc], Qs, warp * 16, kc * 16, lane);
    float o[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    for (int it = 0; it < ntiles; it++) {
        const int k0 = it * kTile, b = it & 1;
        next_key_tiles(Ks, Vs, kept, K + base, V + base, T, it, ntiles, ids, pad_id, n);
        float s[8][4];
        mma_abt<E, D>(s, qf, Ks[b], lane);
        float mx[2] = {-INFINITY, -INFINITY};
        const bool masked = (causal && k0 + kTile > q0) || ids || k0 + kTile > T; /* else every key is kept */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int kl = j * 8 + 2 * t4 + (c & 1), r = c >> 1;
                const bool keep = !masked || (kept[b][kl] && (!causal || k0 + kl <= row[r]));
                s[j][c] = keep ? s[j][c] * sl2 : -INFINITY;
                mx[r] = fmaxf(mx[r], s[j][c]);
            }
        float mu[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mnew = fmaxf(mrow[r], mx[r]);
            mu[r] = mnew == -INFINITY ? 0.0f : mnew; /* nothing kept yet: every exp is 0 */
            const float corr = exp2f(mrow[r] - mu[r]);
            mrow[r] = mnew;
            lrow[r] *= corr;
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++) {
                o[dt][2 * r] *= corr;
                o[dt][2 * r + 1] *= corr;
            }
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                s[j][c] = exp2f(s[j][c] - mu[c >> 1]);
                lrow[c >> 1] += s[j][c];
            }
        mma_pv<E, D>(o, s, Vs[b], lane);
        __syncthreads(); /* buffer b is free for the load two iterations on */
    }
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
        if (t4 == 0 && row[r] < T) lse[(size_t)bh * T + row[r]] = l > 0.0f ? mrow[r] + log2f(l) : INFINITY;
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
        for (int c = 0; c < 4; c++) o[dt][c] *= inv[c >> 1];
    store_rows<D>(o, 1.0f, out, (int64_t)H * D, 0, false, n, h, T, q0 + warp * 16, lane);
}

/* dvec[r] = Σ_d dO·O of row r = (n·H + h)·T + t, and dO packed to (N,H,T,D) in E; one warp
 * per row, the sum in a fixed lane order. */
template <typename E, int D>
__global__ void k_attn_bwd_rows(const float *out, const float *dout, int T, int H, int64_t rows, E *dop,
                                float *dvec) {
    const int lane = threadIdx.x & 31;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; r < rows;
         r += (int64_t)gridDim.x * blockDim.x / 32) {
        const int64_t bh = r / T, t = r % T;
        const int64_t at = ((bh / H) * T + t) * (int64_t)H * D + (bh % H) * D;
        float sum = 0.0f;
#pragma unroll
        for (int d = 2 * lane; d < D; d += 64) {
            const float g0 = dout[at + d], g1 = dout[at + d + 1];
            sum += g0 * out[at + d] + g1 * out[at + d + 1];
            *reinterpret_cast<uint32_t *>(dop + r * D + d) = Elem<E>::pack(g0, g1);
        }
#pragma unroll
        for (int w = 16; w > 0; w >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, w);
        if (lane == 0) dvec[r] = sum;
    }
}

/* A warp's A fragments of its 16 rows of two staged tiles (the backward kernels' own keys and
 * values, or own queries and output gradients), then a barrier: the staging tiles are free. */
template <typename E, int D>
__device__ __forceinline__ void own_fragments(uint32_t (&fa)[D / 16][4], uint32_t (&fb)[D / 16][4],
                                              const Tile<E, D> &ta, const Tile<E, D> &tb, int warp, int lane) {
#pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {
        frag_a(fa[kc], ta, warp * 16, kc * 16, lane);
        frag_a(fb[kc], tb, warp * 16, kc * 16, lane);
    }
    __syncthreads();
}

/* Row statistics of query tile q0 (lse, dvec; +inf and 0 beyond T) into shared memory. */
__device__ __forceinline__ void load_row_stats(float *lse_s, float *dvec_s, const float *lse, const float *dvec,
                                               size_t at, int T, int q0) {
    if (threadIdx.x < kTile) {
        const int q = q0 + threadIdx.x;
        lse_s[threadIdx.x] = q < T ? lse[at + q] : INFINITY;
        dvec_s[threadIdx.x] = q < T ? dvec[at + q] : 0.0f;
    }
}

/* dK and dV of one 64-key tile: grid (N·H, ⌈T/64⌉); each warp accumulates its 16 keys over
 * every query tile that sees them (Pᵀ and dSᵀ computed with keys as rows). Query and dO tiles
 * are double-buffered. */
template <typename E, int D>
__global__ void __launch_bounds__(kThreads)
    k_attn_bwd_dkdv(const E *Q, const E *K, const E *V, const E *dO, const float *lse, const float *dvec, int T,
                    int H, float sl2, float alpha, bool causal, const float *ids, float pad_id, qs_heads_ref dk,
                    qs_heads_ref dv) {
    __shared__ __align__(16) Tile<E, D> Qs[2], dOs[2];
    __shared__ float lse_s[2][kTile], dvec_s[2][kTile];
    const int bh = blockIdx.x, h = bh % H, k0 = blockIdx.y * kTile;
    const int64_t n = bh / H;
    const size_t base = (size_t)bh * T * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int qstart = causal ? k0 : 0, ntiles = (T - qstart + kTile - 1) / kTile;
    load_tile_async(Qs[1], K + base, T, k0); /* this block's keys and values, staged for fragments */
    load_tile_async(dOs[1], V + base, T, k0);
    load_tile_async(Qs[0], Q + base, T, qstart);
    load_tile_async(dOs[0], dO + base, T, qstart);
    load_row_stats(lse_s[0], dvec_s[0], lse, dvec, (size_t)bh * T, T, qstart);
    cp_async_wait<2>();
    __syncthreads();
    uint32_t kf[D / 16][4], vf[D / 16][4];
    own_fragments(kf, vf, Qs[1], dOs[1], warp, lane);
    const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    const bool kept[2] = {key_kept(key[0], T, ids, pad_id, n), key_kept(key[1], T, ids, pad_id, n)};
    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
        for (int c = 0; c < 4; c++) dka[dt][c] = dva[dt][c] = 0.0f;
    for (int it = 0; it < ntiles; it++) {
        const int q0 = qstart + it * kTile, b = it & 1;
        if (it + 1 < ntiles) {
            load_tile_async(Qs[b ^ 1], Q + base, T, q0 + kTile);
            load_tile_async(dOs[b ^ 1], dO + base, T, q0 + kTile);
            load_row_stats(lse_s[b ^ 1], dvec_s[b ^ 1], lse, dvec, (size_t)bh * T, T, q0 + kTile);
            cp_async_wait<2>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        float p[8][4], dp[8][4];
        mma_abt<E, D>(p, kf, Qs[b], lane); /* scoresᵀ: keys × queries */
        const bool masked = (causal && q0 < k0 + kTile) || ids || k0 + kTile > T; /* queries past T: lse +inf */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int ql = j * 8 + 2 * t4 + (c & 1), r = c >> 1;
                const bool keep = !masked || (kept[r] && (!causal || key[r] <= q0 + ql));
                p[j][c] = keep ? exp2f(p[j][c] * sl2 - lse_s[b][ql]) : 0.0f;
            }
        mma_pv<E, D>(dva, p, dOs[b], lane); /* dV += Pᵀ·dO */
        mma_abt<E, D>(dp, vf, dOs[b], lane); /* dPᵀ = V·dOᵀ */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) dp[j][c] = p[j][c] * (dp[j][c] - dvec_s[b][j * 8 + 2 * t4 + (c & 1)]);
        mma_pv<E, D>(dka, dp, Qs[b], lane); /* dK += dSᵀ·Q (alpha applied at the end) */
        __syncthreads();
    }
    if (dk.ptr) store_rows<D>(dka, alpha, dk.ptr, dk.ld, dk.off, dk.accumulate, n, h, T, k0 + warp * 16, lane);
    if (dv.ptr) store_rows<D>(dva, 1.0f, dv.ptr, dv.ld, dv.off, dv.accumulate, n, h, T, k0 + warp * 16, lane);
}

/* dQ of one 64-query tile: grid (N·H, ⌈T/64⌉), the longest causal rows first; key and value
 * tiles double-buffered. */
template <typename E, int D>
__global__ void __launch_bounds__(kThreads)
    k_attn_bwd_dq(const E *Q, const E *K, const E *V, const E *dO, const float *lse, const float *dvec, int T, int H,
                  float sl2, float alpha, bool causal, const float *ids, float pad_id, qs_heads_ref dq) {
    __shared__ __align__(16) Tile<E, D> Ks[2], Vs[2];
    __shared__ bool kept[2][kTile];
    const int bh = blockIdx.x, h = bh % H, q0 = (gridDim.y - 1 - blockIdx.y) * kTile;
    const int64_t n = bh / H;
    const size_t base = (size_t)bh * T * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int kend = causal ? min(T, q0 + kTile) : T, ntiles = (kend + kTile - 1) / kTile;
    load_tile_async(Ks[1], Q + base, T, q0); /* this block's queries and output gradients, staged */
    load_tile_async(Vs[1], dO + base, T, q0);
    load_tile_async(Ks[0], K + base, T, 0);
    load_tile_async(Vs[0], V + base, T, 0);
    if (threadIdx.x < kTile) kept[0][threadIdx.x] = key_kept(threadIdx.x, T, ids, pad_id, n);
    cp_async_wait<2>();
    __syncthreads();
    uint32_t qf[D / 16][4], gf[D / 16][4];
    own_fragments(qf, gf, Ks[1], Vs[1], warp, lane);
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float lr[2], dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lr[r] = row[r] < T ? lse[(size_t)bh * T + row[r]] : INFINITY;
        dr[r] = row[r] < T ? dvec[(size_t)bh * T + row[r]] : 0.0f;
    }
    float dqa[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) dqa[dt][0] = dqa[dt][1] = dqa[dt][2] = dqa[dt][3] = 0.0f;
    for (int it = 0; it < ntiles; it++) {
        const int k0 = it * kTile, b = it & 1;
        next_key_tiles(Ks, Vs, kept, K + base, V + base, T, it, ntiles, ids, pad_id, n);
        float p[8][4], dp[8][4];
        mma_abt<E, D>(p, qf, Ks[b], lane);
        const bool masked = (causal && k0 + kTile > q0) || ids || k0 + kTile > T;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int kl = j * 8 + 2 * t4 + (c & 1), r = c >> 1;
                const bool keep = !masked || (kept[b][kl] && (!causal || k0 + kl <= row[r]));
                p[j][c] = keep ? exp2f(p[j][c] * sl2 - lr[r]) : 0.0f;
            }
        mma_abt<E, D>(dp, gf, Vs[b], lane); /* dP = dO·Vᵀ */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) dp[j][c] = p[j][c] * (dp[j][c] - dr[c >> 1]);
        mma_pv<E, D>(dqa, dp, Ks[b], lane); /* dQ += dS·K */
        __syncthreads();
    }
    store_rows<D>(dqa, alpha, dq.ptr, dq.ld, dq.off, dq.accumulate, n, h, T, q0 + warp * 16, lane);
}

/* The packed tensors inside `saved` (qs_attention_saved_bytes). */
template <typename E> struct Saved {
    E *q, *k, *v;
    float *lse;
    Saved(void *p, size_t heads_elems) {
        q = static_cast<E *>(p);
        k = q + heads_elems;
        v = k + heads_elems;
        lse = reinterpret_cast<float *>(v + heads_elems);
    }
};

qs_status check_desc(const char *what, const qs_attention_desc *d) {
    if (!d) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL descriptor", what);
    if (!qs_cuda_attention_supported(nullptr, d))
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: no fused kernel for N=%lld T=%lld H=%lld D=%lld in %s (needs BF16 or F16, D of 32 or 64, "
                       "T < 2^24, N·H < 2^31); run attention unfused",
                       what, (long long)d->N, (long long)d->T, (long long)d->H, (long long)d->D,
                       qs_dtype_name(d->dtype));
    return QS_OK;
}

qs_status check_ref(const char *what, const char *name, const qs_heads_ref *r, const qs_attention_desc *d,
                    bool required) {
    if (!r || !r->ptr) {
        if (required) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %s is NULL", what, name);
        return QS_OK;
    }
    if (r->off < 0 || r->ld < r->off + d->H * d->D)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %s's token rows of ld=%lld floats cannot hold off=%lld + H·D=%lld", what,
                       name, (long long)r->ld, (long long)r->off, (long long)(d->H * d->D));
    return QS_OK;
}

template <typename E, int D>
qs_status forward_as(qs_backend *be, cudaStream_t st, const qs_attention_desc *d, const qs_heads_ref *const ops[3],
                     float *out, void *saved) {
    const size_t elems = (size_t)(d->N * d->H * d->T) * D;
    Saved<E> sv(saved, elems);
    PackArgs pa;
    void *dst[3] = {sv.q, sv.k, sv.v};
    for (int i = 0; i < 3; i++) {
        pa.src[i] = ops[i]->ptr;
        pa.ld[i] = ops[i]->ld;
        pa.off[i] = ops[i]->off;
        pa.dst[i] = dst[i];
    }
    const int64_t quads = (int64_t)elems / 4;
    k_attn_pack<E><<<grid_for(be, 3 * quads, 256), 256, 0, st>>>(pa, (int)d->T, (int)d->H, D, quads);
    const dim3 grid((unsigned)(d->N * d->H), (unsigned)((d->T + kTile - 1) / kTile));
    k_attn_fwd<E, D><<<grid, kThreads, 0, st>>>(sv.q, sv.k, sv.v, (int)d->T, (int)d->H, d->alpha * kLog2e, d->causal,
                                                 d->key_ids, d->pad_id, out, sv.lse);
    return qs_cuda_check_launch("attention_forward");
}

template <typename E, int D>
qs_status backward_as(qs_backend *be, cudaStream_t st, const qs_attention_desc *d, const void *saved,
                      const float *out, const float *dout, const qs_heads_ref *dq, const qs_heads_ref *dk,
                      const qs_heads_ref *dv, void *workspace) {
    const int64_t rows = d->N * d->H * d->T;
    const size_t elems = (size_t)rows * D;
    Saved<E> sv(const_cast<void *>(saved), elems);
    E *dop = static_cast<E *>(workspace);
    float *dvec = reinterpret_cast<float *>(dop + elems);
    k_attn_bwd_rows<E, D><<<grid_for(be, rows * 32, 256), 256, 0, st>>>(out, dout, (int)d->T, (int)d->H, rows, dop,
                                                                        dvec);
    const dim3 grid((unsigned)(d->N * d->H), (unsigned)((d->T + kTile - 1) / kTile));
    const float sl2 = d->alpha * kLog2e;
    const qs_heads_ref none = {nullptr, 0, 0, false};
    if ((dk && dk->ptr) || (dv && dv->ptr))
        k_attn_bwd_dkdv<E, D><<<grid, kThreads, 0, st>>>(sv.q, sv.k, sv.v, dop, sv.lse, dvec, (int)d->T, (int)d->H,
                                                          sl2, d->alpha, d->causal, d->key_ids, d->pad_id,
                                                          dk ? *dk : none, dv ? *dv : none);
    if (dq && dq->ptr)
        k_attn_bwd_dq<E, D><<<grid, kThreads, 0, st>>>(sv.q, sv.k, sv.v, dop, sv.lse, dvec, (int)d->T, (int)d->H, sl2,
                                                        d->alpha, d->causal, d->key_ids, d->pad_id, *dq);
    return qs_cuda_check_launch("attention_backward");
}

} // namespace

/* BF16 or F16, D 32 or 64, T < 2^24 and N·H within int32 (the file comment's limits). */
extern "C" bool qs_cuda_attention_supported(qs_backend *be, const qs_attention_desc *d) {
    (void)be;
    return d && (d->dtype == QS_BF16 || d->dtype == QS_F16) && (d->D == 32 || d->D == 64) && d->N >= 1 &&
           d->H >= 1 && d->T >= 1 && d->T < (1 << 24) && d->N * d->H < INT32_MAX;
}

/* Contract: core/backend_ops.def attention_forward; checks, then forward_as for the dtype and D. */
extern "C" qs_status qs_cuda_attention_forward(qs_backend *be, qs_stream *s, const qs_attention_desc *d,
                                               const qs_heads_ref *q, const qs_heads_ref *k, const qs_heads_ref *v,
                                               float *out, void *saved) {
    const char *what = "attention_forward";
    QS_TRY(check_desc(what, d));
    QS_TRY(check_ref(what, "q", q, d, true));
    QS_TRY(check_ref(what, "k", k, d, true));
    QS_TRY(check_ref(what, "v", v, d, true));
    QS_TRY(args_check(what, d->N * d->T * d->H * d->D, {out, saved}));
    const qs_heads_ref *ops[3] = {q, k, v};
    const cudaStream_t st = stream_of(be, s);
    const bool bf = d->dtype == QS_BF16;
    if (d->D == 32) return bf ? forward_as<__nv_bfloat16, 32>(be, st, d, ops, out, saved)
                              : forward_as<__half, 32>(be, st, d, ops, out, saved);
    return bf ? forward_as<__nv_bfloat16, 64>(be, st, d, ops, out, saved)
              : forward_as<__half, 64>(be, st, d, ops, out, saved);
}

/* Contract: core/backend_ops.def attention_backward; checks, then backward_as for the dtype and D. */
extern "C" qs_status qs_cuda_attention_backward(qs_backend *be, qs_stream *s, const qs_attention_desc *d,
                                                const void *saved, const float *out, const float *dout,
                                                const qs_heads_ref *dq, const qs_heads_ref *dk,
                                                const qs_heads_ref *dv, void *workspace) {
    const char *what = "attention_backward";
    QS_TRY(check_desc(what, d));
    QS_TRY(check_ref(what, "dq", dq, d, false));
    QS_TRY(check_ref(what, "dk", dk, d, false));
    QS_TRY(check_ref(what, "dv", dv, d, false));
    QS_TRY(args_check(what, d->N * d->T * d->H * d->D, {saved, out, dout, workspace}));
    const cudaStream_t st = stream_of(be, s);
    const bool bf = d->dtype == QS_BF16;
    if (d->D == 32) return bf ? backward_as<__nv_bfloat16, 32>(be, st, d, saved, out, dout, dq, dk, dv, workspace)
                              : backward_as<__half, 32>(be, st, d, saved, out, dout, dq, dk, dv, workspace);
    return bf ? backward_as<__nv_bfloat16, 64>(be, st, d, saved, out, dout, dq, dk, dv, workspace)
              : backward_as<__half, 64>(be, st, d, saved, out, dout, dq, dk, dv, workspace);
}
