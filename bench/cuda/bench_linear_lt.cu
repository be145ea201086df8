/* bench_linear_lt.cu — a Linear layer's three GEMMs through cuBLASLt, per precision.
 *
 * Early de-risking for the CUDA backend (issue 7, deliverable 1, first part): a measurement,
 * not the backend. Standalone: C-style CUDA, no project headers. Prints one JSON document to
 * stdout; errors go to stderr with the failing call, file and line.
 *
 * Tensors are row-major, as in PyTorch and the CPU engine: X (M×K), W (N×K), dY (M×N).
 *   forward          Y  = X·Wᵀ   (M×N)
 *   backward-data    dX = dY·W   (M×K)
 *   backward-weights dW = dYᵀ·X  (N×K)
 * cuBLASLt is column-major, so each GEMM is issued on the transposed problem
 * (a row-major R×C matrix is a column-major C×R one):
 *   forward : Yᵀ (N×M)  = op(W)·Xᵀ,  W stored K×N col-major, op = T;  Xᵀ stored K×M, op = N  -> "TN"
 *   dgrad   : dXᵀ (K×M) = Wᵀ·dYᵀ,    both operands as stored                                 -> "NN"
 *   wgrad   : dWᵀ (K×N) = Xᵀ·dY,     dY stored N×M col-major, op = T                         -> "NT"
 * FP8 on Hopper accepts only "TN" (A transposed, B not), so the FP8 path uses transposed
 * copies: dgrad takes Wᵀ (row-major K×N) as A with op T, wgrad takes Xᵀ (row-major K×M) and
 * dYᵀ (row-major N×M). The quantization kernel writes both copies of each tensor in one pass.
 *
 * Precisions: fp32 (COMPUTE_32F), tf32 (COMPUTE_32F_FAST_TF32), bf16 (bf16 in, bf16 out, fp32
 * accumulation), fp8 (E4M3 X and W, E5M2 dY, per-tensor scales through
 * CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER, fp32 accumulation, bf16 out), fp8_f32out (same,
 * fp32 out), fp8_fastacc (bf16 out, CUBLASLT_MATMUL_DESC_FAST_ACCUM=1: reported, not used in
 * the ratios).
 *
 * Timed per iteration with cudaEvents, medians over --iters iterations after --warmup ones:
 *   prep from an fp32 source: fp8 = quantize X, W, dY (amax -> scale -> cast, both layouts);
 *                             bf16 = cast X, W, dY to bf16
 *   prep from a bf16 source:  fp8 = the same quantization reading bf16; bf16 = nothing
 *   fwd, dgrad, wgrad GEMMs.
 * (a) = the three GEMMs, (b) = the GEMMs + prep. The weights are re-quantized every
 * iteration (they change every optimizer step).
 *
 * Correctness: each output against the fp32 cuBLASLt output (relative Frobenius error), with
 * the expected magnitude from the formats' rounding; the fp32 output against double-precision
 * dot products on sampled entries (this also checks the layouts above).
 *
 * Build: bench/cuda/build.sh   Run: build-cuda/bench_linear_lt [--iters N] [--warmup N]
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cooperative_groups.h>
#include <cublasLt.h>
#include <cublas_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

namespace cg = cooperative_groups;

/* ------------------------------------------------------------------ error checks */

#include "cuda_check.h"

#define CKB(call)                                                                            \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s (%d): %s\n", __FILE__, __LINE__, #call,    \
                    cublasGetStatusName(s_), (int)s_, cublasGetStatusString(s_));            \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define CKK() CK(cudaGetLastError())

/* ------------------------------------------------------------------ kernels */

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Deterministic N(0, sigma²) fill (counter-based hash + Box–Muller). */
__global__ void fill_normal(float *p, size_t n, uint64_t seed, float sigma) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = mix64(seed * 0x100000001B3ull ^ i);
        float u1 = ((h >> 40) + 1) * (1.0f / 16777217.0f); /* (0,1] */
        float u2 = ((h >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
        p[i] = sigma * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
}

/* fp32 -> bf16 (RNE), 4 elements a thread-step; n % 4 == 0. */
__global__ void cast_bf16(const float *__restrict__ src, __nv_bfloat16 *__restrict__ dst, size_t n) {
    size_t n4 = n / 4;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = reinterpret_cast<const float4 *>(src)[i];
        __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y);
        __nv_bfloat162 b = __floats2bfloat162_rn(v.z, v.w);
        uint2 o;
        o.x = *reinterpret_cast<uint32_t *>(&a);
        o.y = *reinterpret_cast<uint32_t *>(&b);
        reinterpret_cast<uint2 *>(dst)[i] = o;
    }
}

__device__ __forceinline__ void load4(const float *p, float v[4]) {
    float4 t = *reinterpret_cast<const float4 *>(p);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void load4(const __nv_bfloat16 *p, float v[4]) {
    uint2 t = *reinterpret_cast<const uint2 *>(p);
    float2 a = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&t.x));
    float2 b = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&t.y));
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
/* abs-max of 8 consecutive elements (16 B of bf16 or 2×16 B of fp32) */
__device__ __forceinline__ float amax8(const float *p) {
    float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    return fmaxf(fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))),
                 fmaxf(fmaxf(fabsf(b.x), fabsf(b.y)), fmaxf(fabsf(b.z), fabsf(b.w))));
}
__device__ __forceinline__ float amax8(const __nv_bfloat16 *p) {
    uint4 t = *reinterpret_cast<const uint4 *>(p);
    __nv_bfloat162 m = __habs2(*reinterpret_cast<__nv_bfloat162 *>(&t.x));
    m = __hmax2(m, __habs2(*reinterpret_cast<__nv_bfloat162 *>(&t.y)));
    m = __hmax2(m, __habs2(*reinterpret_cast<__nv_bfloat162 *>(&t.z)));
    m = __hmax2(m, __habs2(*reinterpret_cast<__nv_bfloat162 *>(&t.w)));
    float2 f = __bfloat1622float2(m);
    return fmaxf(f.x, f.y);
}

template <int E5M2>
__device__ __forceinline__ uint32_t cvt4_fp8(const float v[4], float s) {
    const __nv_fp8_interpretation_t fmt = E5M2 ? __NV_E5M2 : __NV_E4M3;
    uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v[0] * s, v[1] * s), __NV_SATFINITE, fmt);
    uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v[2] * s, v[3] * s), __NV_SATFINITE, fmt);
    return lo | (hi << 16);
}

#define QT 64        /* tile edge */
#define QTHREADS 256 /* 16 threads × 4 elements per tile row, 16 rows per pass */

/* Fused per-tensor FP8 quantization, one cooperative launch:
 *   phase 1: amax over the tensor (per-block partials), grid sync;
 *   phase 2: every block reduces the partials, scale = fmax / amax, and casts 64×64 tiles,
 *            writing q (rows×cols, row-major) and qT (cols×rows, row-major) through shared
 *            memory. Block 0 writes scale_inv = amax / fmax, the dequantization factor that
 *            cuBLASLt's A/B_SCALE_POINTER expects.
 * rows % 64 == 0, cols % 64 == 0. Round-to-nearest-even with saturation. */
template <typename Tin, int E5M2>
__global__ void __launch_bounds__(QTHREADS)
quant_fp8(const Tin *__restrict__ src, int rows, int cols, uint8_t *__restrict__ q,
          uint8_t *__restrict__ qT, float *__restrict__ partial, float *__restrict__ scale_inv) {
    cg::grid_group grid = cg::this_grid();
    __shared__ float red[QTHREADS / 32];
    __shared__ float s_scale;
    __shared__ uint32_t tile[QT][QT / 4 + 1]; /* 4 fp8 per word; +1 word of padding */

    const size_t n = (size_t)rows * cols;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* phase 1 */
    float m = 0.f;
    for (size_t i = (blockIdx.x * (size_t)QTHREADS + tid) * 8; i < n; i += (size_t)gridDim.x * QTHREADS * 8)
        m = fmaxf(m, amax8(src + i));
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (tid == 0) {
        float b = 0.f;
        for (int w = 0; w < QTHREADS / 32; w++) b = fmaxf(b, red[w]);
        partial[blockIdx.x] = b;
    }
    grid.sync();

    /* phase 2: scale */
    m = 0.f;
    for (int i = tid; i < (int)gridDim.x; i += QTHREADS) m = fmaxf(m, partial[i]);
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (tid == 0) {
        float a = 0.f;
        for (int w = 0; w < QTHREADS / 32; w++) a = fmaxf(a, red[w]);
        const float fmax = E5M2 ? 57344.f : 448.f;
        float s = a > 0.f ? fmax / a : 1.f;
        s_scale = s;
        if (blockIdx.x == 0) *scale_inv = 1.f / s;
    }
    __syncthreads();
    const float s = s_scale;

    /* phase 2: cast, both layouts */
    const int tr = tid >> 4, tc = (tid & 15) * 4; /* row in pass, column in tile */
    const int tiles_c = cols / QT, ntiles = (rows / QT) * tiles_c;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int r0 = (t / tiles_c) * QT, c0 = (t % tiles_c) * QT;
#pragma unroll
        for (int p = 0; p < QT / 16; p++) {
            const int r = p * 16 + tr;
            float v[4];
            load4(src + (size_t)(r0 + r) * cols + c0 + tc, v);
            uint32_t w = cvt4_fp8<E5M2>(v, s);
            *reinterpret_cast<uint32_t *>(q + (size_t)(r0 + r) * cols + c0 + tc) = w;
            tile[r][tc / 4] = w;
        }
        __syncthreads();
        /* qT row = source column c0+cc, 4 consecutive source rows rr..rr+3 per thread */
#pragma unroll
        for (int p = 0; p < QT / 16; p++) {
            const int cc = p * 16 + tr, rr = tc;
            const int wsel = cc >> 2, sh = (cc & 3) * 8;
            uint32_t b0 = (tile[rr + 0][wsel] >> sh) & 0xff, b1 = (tile[rr + 1][wsel] >> sh) & 0xff;
            uint32_t b2 = (tile[rr + 2][wsel] >> sh) & 0xff, b3 = (tile[rr + 3][wsel] >> sh) & 0xff;
            *reinterpret_cast<uint32_t *>(qT + (size_t)(c0 + cc) * rows + r0 + rr) =
                b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
        }
        __syncthreads();
    }
}

/* Σ(a−ref)² and Σref² in double. */
__device__ __forceinline__ float ld_as_float(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld_as_float(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }

template <typename T>
__global__ void fro_err(const T *__restrict__ a, const float *__restrict__ ref, size_t n, double *acc) {
    double e = 0, r = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double x = ld_as_float(a, i), y = ref[i];
        e += (x - y) * (x - y);
        r += y * y;
    }
    __shared__ double se[256], sr[256];
    se[threadIdx.x] = e; sr[threadIdx.x] = r;
    __syncthreads();
    for (int o = blockDim.x / 2; o; o >>= 1) {
        if ((int)threadIdx.x < o) { se[threadIdx.x] += se[threadIdx.x + o]; sr[threadIdx.x] += sr[threadIdx.x + o]; }
        __syncthreads();
    }
    if (threadIdx.x == 0) { atomicAdd(&acc[0], se[0]); atomicAdd(&acc[1], sr[0]); }
}

/* Sampled double-precision check of the fp32 outputs, straight from the row-major
 * definitions. One block a sample. mode 0: Y[i][j]; 1: dX[i][k]; 2: dW[n][k]. */
__global__ void sample_check(int mode, const float *X, const float *W, const float *dY, const float *out,
                             int M, int N, int K, uint64_t seed, double *acc) {
    uint64_t h = mix64(seed ^ (blockIdx.x * 0x9E3779B97F4A7C15ull));
    int R = mode == 0 ? M : (mode == 1 ? M : N);
    int C = mode == 0 ? N : K;
    int L = mode == 0 ? K : (mode == 1 ? N : M);
    int i = (int)((h >> 32) % (uint64_t)R), j = (int)((h & 0xffffffffu) % (uint64_t)C);
    double s = 0;
    for (int l = threadIdx.x; l < L; l += blockDim.x) {
        double a, b;
        if (mode == 0) { a = X[(size_t)i * K + l]; b = W[(size_t)j * K + l]; }
        else if (mode == 1) { a = dY[(size_t)i * N + l]; b = W[(size_t)l * K + j]; }
        else { a = dY[(size_t)l * N + i]; b = X[(size_t)l * K + j]; }
        s += a * b;
    }
    __shared__ double sh[256];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double got = out[(size_t)i * C + j], d = got - sh[0];
        atomicAdd(&acc[0], d * d);
        atomicAdd(&acc[1], sh[0] * sh[0]);
    }
}

/* ------------------------------------------------------------------ host helpers */

static int g_warmup = 10, g_iters = 30;
static const size_t WS_BYTES = 32u << 20;
static cublasLtHandle_t g_lt;
static void *g_ws;
static cudaStream_t g_st;
static int g_sms, g_quant_grid[4]; /* cooperative grid per quant instantiation */

typedef struct {
    int ok;
    char err[256];
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t heur;
    const void *A, *B;
    void *D;
    char layout[3];
} Plan;

/* cuBLAS column-major problem D(m×n) = op(A)·op(B), D's ld = m.
 * A stored (ta==N ? m×k : k×m) with ld lda; B stored (tb==N ? k×n : n×k) with ld ldb. */
static void plan_make(Plan *p, cublasComputeType_t ct, cudaDataType_t at, cudaDataType_t bt, cudaDataType_t dt,
                      cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
                      const void *A, const void *B, void *D, const float *sa, const float *sb, int fast_accum) {
    memset(p, 0, sizeof *p);
    p->A = A; p->B = B; p->D = D;
    p->layout[0] = ta == CUBLAS_OP_T ? 'T' : 'N';
    p->layout[1] = tb == CUBLAS_OP_T ? 'T' : 'N';
    cublasStatus_t s;
#define TRY(call)                                                                                     \
    do {                                                                                              \
        s = (call);                                                                                   \
        if (s != CUBLAS_STATUS_SUCCESS) {                                                             \
            snprintf(p->err, sizeof p->err, "%s: %s (%d)", #call, cublasGetStatusName(s), (int)s);   \
            fprintf(stderr, "bench_linear_lt: %s:%d: %s\n", __FILE__, __LINE__, p->err);            \
            return;                                                                                   \
        }                                                                                             \
    } while (0)
    TRY(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
    int32_t opa = ta, opb = tb;
    TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (sa) TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
    if (sb) TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    if (at == CUDA_R_8F_E4M3 || at == CUDA_R_8F_E5M2) {
        int8_t fa = (int8_t)fast_accum;
        TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa));
    }
    TRY(cublasLtMatrixLayoutCreate(&p->la, at, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda));
    TRY(cublasLtMatrixLayoutCreate(&p->lb, bt, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb));
    TRY(cublasLtMatrixLayoutCreate(&p->lc, dt, m, n, m));
    cublasLtMatmulPreference_t pref;
    TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = WS_BYTES;
    TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    int got = 0;
    s = cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &p->heur, &got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(p->err, sizeof p->err, "cublasLtMatmulAlgoGetHeuristic: %s (%d)", cublasGetStatusName(s), (int)s);
        return;
    }
    if (got < 1) {
        snprintf(p->err, sizeof p->err, "cublasLtMatmulAlgoGetHeuristic: no algorithm returned");
        return;
    }
    p->ok = 1;
#undef TRY
}

static void plan_free(Plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
}

static void plan_run(Plan *p) {
    const float one = 1.f, zero = 0.f;
    CKB(cublasLtMatmul(g_lt, p->desc, &one, p->A, p->la, p->B, p->lb, &zero, p->D, p->lc, p->D, p->lc,
                       &p->heur.algo, g_ws, WS_BYTES, g_st));
}

static int grid_for(size_t n) {
    size_t b = (n / 4 + 255) / 256;
    if (b > (size_t)g_sms * 16) b = (size_t)g_sms * 16;
    return (int)(b ? b : 1);
}

static float *g_partial; /* quant partials, ≥ max cooperative grid */

template <typename Tin, int E5M2>
static void quant(const Tin *src, int rows, int cols, uint8_t *q, uint8_t *qT, float *scale_inv) {
    void *fn = (void *)quant_fp8<Tin, E5M2>;
    int idx = (sizeof(Tin) == 2) * 2 + E5M2;
    void *args[] = {(void *)&src, (void *)&rows, (void *)&cols, (void *)&q, (void *)&qT, (void *)&g_partial,
                    (void *)&scale_inv};
    CK(cudaLaunchCooperativeKernel(fn, dim3(g_quant_grid[idx]), dim3(QTHREADS), args, 0, g_st));
}

template <typename Tin, int E5M2>
static void quant_setup(void) {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, quant_fp8<Tin, E5M2>, QTHREADS, 0));
    if (per_sm < 1) { fprintf(stderr, "quant_fp8: occupancy 0\n"); exit(1); }
    g_quant_grid[(sizeof(Tin) == 2) * 2 + E5M2] = per_sm * g_sms;
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}
static double median(float *v, int n) {
    float *t = (float *)malloc(n * sizeof *t);
    memcpy(t, v, n * sizeof *t);
    qsort(t, n, sizeof *t, cmp_f);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

/* JSON number or null */
static void jnum(const char *fmt, double v) {
    if (isfinite(v)) printf(fmt, v); else printf("null");
}

/* ------------------------------------------------------------------ one shape */

enum { P_FP32, P_TF32, P_BF16, P_FP8, P_FP8_F32OUT, P_FP8_FASTACC, NPREC };
static const char *PNAME[NPREC] = {"fp32", "tf32", "bf16", "fp8", "fp8_f32out", "fp8_fastacc"};
/* components timed per iteration */
enum { C_P16X, C_P16W, C_P16D, C_P32X, C_P32W, C_P32D, C_FWD, C_DGRAD, C_WGRAD, NCOMP };
static const char *CNAME[NCOMP] = {"prep_bf16src_X", "prep_bf16src_W", "prep_bf16src_dY", "prep_fp32src_X",
                                   "prep_fp32src_W", "prep_fp32src_dY", "fwd", "dgrad", "wgrad"};
static const char *GNAME[3] = {"fwd", "dgrad", "wgrad"};

/* relative rounding error (RMS, magnitude-weighted) of RNE to t explicit mantissa bits,
 * for data with a log-uniform mantissa: 2^-t / sqrt(12 · E[m²]), E[m²] = 1.5/ln 2 */
static double eps_bits(int t) { return ldexp(1.0, -t) / sqrt(12.0 * 1.5 / log(2.0)); }

typedef struct {
    int M, N, K;
    const char *name;
    float *X, *W, *dY;                 /* fp32 sources */
    __nv_bfloat16 *Xh, *Wh, *dYh;       /* bf16 sources / bf16 operands */
    uint8_t *Xq, *XqT, *Wq, *WqT, *dYq, *dYqT;
    float *sX, *sW, *sdY;               /* dequant scales (device) */
    float *ref[3];                      /* fp32 outputs Y, dX, dW */
    float *out[3];                      /* per-precision outputs (fp32-sized) */
    double *acc;                        /* 2 doubles */
} Shape;

static double rel_err(const void *a, int is_bf16, const float *ref, size_t n, Shape *s) {
    CK(cudaMemsetAsync(s->acc, 0, 2 * sizeof(double), g_st));
    if (is_bf16) fro_err<__nv_bfloat16><<<g_sms * 4, 256, 0, g_st>>>((const __nv_bfloat16 *)a, ref, n, s->acc);
    else fro_err<float><<<g_sms * 4, 256, 0, g_st>>>((const float *)a, ref, n, s->acc);
    CKK();
    double h[2];
    CK(cudaMemcpyAsync(h, s->acc, sizeof h, cudaMemcpyDeviceToHost, g_st));
    CK(cudaStreamSynchronize(g_st));
    return sqrt(h[0] / h[1]);
}

static int g_first_shape = 1;

static void run_shape(int M, int N, int K, const char *name) {
    Shape S;
    memset(&S, 0, sizeof S);
    S.M = M; S.N = N; S.K = K; S.name = name;
    size_t nX = (size_t)M * K, nW = (size_t)N * K, nD = (size_t)M * N;
    size_t nOut[3] = {nD, nX, nW};
    CK(cudaMalloc(&S.X, nX * 4)); CK(cudaMalloc(&S.W, nW * 4)); CK(cudaMalloc(&S.dY, nD * 4));
    CK(cudaMalloc(&S.Xh, nX * 2)); CK(cudaMalloc(&S.Wh, nW * 2)); CK(cudaMalloc(&S.dYh, nD * 2));
    CK(cudaMalloc(&S.Xq, nX)); CK(cudaMalloc(&S.XqT, nX)); CK(cudaMalloc(&S.Wq, nW));
    CK(cudaMalloc(&S.WqT, nW)); CK(cudaMalloc(&S.dYq, nD)); CK(cudaMalloc(&S.dYqT, nD));
    CK(cudaMalloc(&S.sX, 4)); CK(cudaMalloc(&S.sW, 4)); CK(cudaMalloc(&S.sdY, 4));
    for (int g = 0; g < 3; g++) { CK(cudaMalloc(&S.ref[g], nOut[g] * 4)); CK(cudaMalloc(&S.out[g], nOut[g] * 4)); }
    CK(cudaMalloc(&S.acc, 2 * sizeof(double)));

    /* X ~ N(0,1), W ~ N(0, 0.02²), dY ~ N(0, 1e-3²) (GPT-2-like magnitudes) */
    fill_normal<<<g_sms * 8, 256, 0, g_st>>>(S.X, nX, 1, 1.0f); CKK();
    fill_normal<<<g_sms * 8, 256, 0, g_st>>>(S.W, nW, 2, 0.02f); CKK();
    fill_normal<<<g_sms * 8, 256, 0, g_st>>>(S.dY, nD, 3, 1e-3f); CKK();
    cast_bf16<<<grid_for(nX), 256, 0, g_st>>>(S.X, S.Xh, nX); CKK();
    cast_bf16<<<grid_for(nW), 256, 0, g_st>>>(S.W, S.Wh, nW); CKK();
    cast_bf16<<<grid_for(nD), 256, 0, g_st>>>(S.dY, S.dYh, nD); CKK();
    CK(cudaStreamSynchronize(g_st));

    /* fp32 reference outputs and the sampled double-precision check */
    Plan ref[3];
    {
        cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
        cudaDataType_t f = CUDA_R_32F;
        plan_make(&ref[0], ct, f, f, f, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, K, K, S.W, S.X, S.ref[0], 0, 0, 0);
        plan_make(&ref[1], ct, f, f, f, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, K, N, S.W, S.dY, S.ref[1], 0, 0, 0);
        plan_make(&ref[2], ct, f, f, f, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, K, N, S.X, S.dY, S.ref[2], 0, 0, 0);
        for (int g = 0; g < 3; g++) {
            if (!ref[g].ok) { fprintf(stderr, "fp32 reference plan failed: %s\n", ref[g].err); exit(1); }
            plan_run(&ref[g]);
        }
        CK(cudaStreamSynchronize(g_st));
    }
    double sample_err[3];
    const int NSAMP = 2048;
    for (int g = 0; g < 3; g++) {
        CK(cudaMemsetAsync(S.acc, 0, 2 * sizeof(double), g_st));
        sample_check<<<NSAMP, 256, 0, g_st>>>(g, S.X, S.W, S.dY, S.ref[g], M, N, K, 77 + g, S.acc); CKK();
        double h[2];
        CK(cudaMemcpyAsync(h, S.acc, sizeof h, cudaMemcpyDeviceToHost, g_st));
        CK(cudaStreamSynchronize(g_st));
        sample_err[g] = sqrt(h[0] / h[1]);
    }

    if (!g_first_shape) printf(",\n");
    g_first_shape = 0;
    printf("    {\"name\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"gflop_per_gemm\": %.3f,\n", name, M, N, K,
           2.0 * M * N * K / 1e9);
    printf("     \"fp32_vs_double_sampled\": {\"samples_per_gemm\": %d", NSAMP);
    for (int g = 0; g < 3; g++) { printf(", \"%s\": ", GNAME[g]); jnum("%.3e", sample_err[g]); }
    printf(", \"expected\": \"~1e-7..1e-6 (fp32 accumulation over K terms)\"},\n");
    printf("     \"precisions\": [\n");

    const int NIT = g_iters, NEV = NCOMP + 1;
    cudaEvent_t *ev = (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * NIT * NEV);
    for (int i = 0; i < NIT * NEV; i++) CK(cudaEventCreate(&ev[i]));
    float *tm = (float *)malloc(sizeof(float) * NIT * NCOMP);
    double med_a[NPREC], med_b32[NPREC], med_b16[NPREC], med_g[NPREC][3];
    int prec_ok[NPREC];
    const double flop = 2.0 * M * N * K;

    for (int p = 0; p < NPREC; p++) {
        Plan pl[3];
        int fp8 = p >= P_FP8, bf16out = (p == P_BF16 || p == P_FP8 || p == P_FP8_FASTACC);
        cudaDataType_t dt = bf16out ? CUDA_R_16BF : CUDA_R_32F;
        if (p == P_FP32 || p == P_TF32) {
            cublasComputeType_t ct = p == P_FP32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
            cudaDataType_t f = CUDA_R_32F;
            plan_make(&pl[0], ct, f, f, f, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, K, K, S.W, S.X, S.out[0], 0, 0, 0);
            plan_make(&pl[1], ct, f, f, f, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, K, N, S.W, S.dY, S.out[1], 0, 0, 0);
            plan_make(&pl[2], ct, f, f, f, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, K, N, S.X, S.dY, S.out[2], 0, 0, 0);
        } else if (p == P_BF16) {
            cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
            cudaDataType_t h = CUDA_R_16BF;
            plan_make(&pl[0], ct, h, h, h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, K, K, S.Wh, S.Xh, S.out[0], 0, 0, 0);
            plan_make(&pl[1], ct, h, h, h, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, K, N, S.Wh, S.dYh, S.out[1], 0, 0, 0);
            plan_make(&pl[2], ct, h, h, h, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, K, N, S.Xh, S.dYh, S.out[2], 0, 0, 0);
        } else {
            cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
            cudaDataType_t e4 = CUDA_R_8F_E4M3, e5 = CUDA_R_8F_E5M2;
            int fa = p == P_FP8_FASTACC;
            /* all TN: fwd A=W (N×K row-major), B=X; dgrad A=Wᵀ (K×N row-major), B=dY;
               wgrad A=Xᵀ (K×M row-major), B=dYᵀ (N×M row-major) */
            plan_make(&pl[0], ct, e4, e4, dt, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, K, K, S.Wq, S.Xq, S.out[0], S.sW, S.sX, fa);
            plan_make(&pl[1], ct, e4, e5, dt, CUBLAS_OP_T, CUBLAS_OP_N, K, M, N, N, N, S.WqT, S.dYq, S.out[1], S.sW, S.sdY, fa);
            plan_make(&pl[2], ct, e4, e5, dt, CUBLAS_OP_T, CUBLAS_OP_N, K, N, M, M, M, S.XqT, S.dYqT, S.out[2], S.sX, S.sdY, fa);
        }
        prec_ok[p] = pl[0].ok && pl[1].ok && pl[2].ok;
        if (p) printf(",\n");
        printf("      {\"precision\": \"%s\", \"inputs\": \"%s\", \"output\": \"%s\", \"accumulation\": \"%s\"", PNAME[p],
               p <= P_TF32 ? "fp32" : (p == P_BF16 ? "bf16" : "e4m3 X,W; e5m2 dY"), bf16out ? "bf16" : "fp32",
               p == P_TF32 ? "fp32 (tf32 inputs)" : (p == P_FP8_FASTACC ? "fast-accum" : "fp32"));
        if (!prec_ok[p]) {
            printf(", \"error\": \"");
            for (int g = 0; g < 3; g++) if (!pl[g].ok) printf("%s: %s; ", GNAME[g], pl[g].err);
            printf("\"}");
            for (int g = 0; g < 3; g++) plan_free(&pl[g]);
            med_a[p] = med_b32[p] = med_b16[p] = NAN;
            continue;
        }
        for (int it = -g_warmup; it < NIT; it++) {
            cudaEvent_t *e = it >= 0 ? ev + it * NEV : NULL;
#define MARK(c) do { if (e) CK(cudaEventRecord(e[c], g_st)); } while (0)
            MARK(0);
            if (fp8) {
                quant<__nv_bfloat16, 0>(S.Xh, M, K, S.Xq, S.XqT, S.sX); MARK(1);
                quant<__nv_bfloat16, 0>(S.Wh, N, K, S.Wq, S.WqT, S.sW); MARK(2);
                quant<__nv_bfloat16, 1>(S.dYh, M, N, S.dYq, S.dYqT, S.sdY); MARK(3);
                quant<float, 0>(S.X, M, K, S.Xq, S.XqT, S.sX); MARK(4);
                quant<float, 0>(S.W, N, K, S.Wq, S.WqT, S.sW); MARK(5);
                quant<float, 1>(S.dY, M, N, S.dYq, S.dYqT, S.sdY); MARK(6);
            } else if (p == P_BF16) {
                MARK(1); MARK(2); MARK(3);
                cast_bf16<<<grid_for(nX), 256, 0, g_st>>>(S.X, S.Xh, nX); CKK(); MARK(4);
                cast_bf16<<<grid_for(nW), 256, 0, g_st>>>(S.W, S.Wh, nW); CKK(); MARK(5);
                cast_bf16<<<grid_for(nD), 256, 0, g_st>>>(S.dY, S.dYh, nD); CKK(); MARK(6);
            } else {
                for (int c = 1; c <= 6; c++) MARK(c);
            }
            plan_run(&pl[0]); MARK(7);
            plan_run(&pl[1]); MARK(8);
            plan_run(&pl[2]); MARK(9);
#undef MARK
        }
        CK(cudaStreamSynchronize(g_st));
        for (int it = 0; it < NIT; it++)
            for (int c = 0; c < NCOMP; c++)
                CK(cudaEventElapsedTime(&tm[c * NIT + it], ev[it * NEV + c], ev[it * NEV + c + 1]));
        float *sa = (float *)malloc(sizeof(float) * NIT * 3);
        for (int it = 0; it < NIT; it++) {
            float g = tm[C_FWD * NIT + it] + tm[C_DGRAD * NIT + it] + tm[C_WGRAD * NIT + it];
            sa[it] = g;
            sa[NIT + it] = g + tm[C_P32X * NIT + it] + tm[C_P32W * NIT + it] + tm[C_P32D * NIT + it];
            sa[2 * NIT + it] = g + tm[C_P16X * NIT + it] + tm[C_P16W * NIT + it] + tm[C_P16D * NIT + it];
        }
        med_a[p] = median(sa, NIT);
        med_b32[p] = median(sa + NIT, NIT);
        med_b16[p] = median(sa + 2 * NIT, NIT);
        free(sa);

        printf(",\n       \"gemms\": {");
        for (int g = 0; g < 3; g++) {
            double ms = median(tm + (C_FWD + g) * NIT, NIT);
            med_g[p][g] = ms;
            printf("%s\"%s\": {\"ms\": %.4f, \"tflops\": %.1f, \"layout\": \"%s\", \"algo_workspace_bytes\": %zu}",
                   g ? ", " : "", GNAME[g], ms, flop / (ms * 1e-3) / 1e12, pl[g].layout, pl[g].heur.workspaceSize);
        }
        printf("},\n       \"prep_ms\": {");
        for (int c = C_P16X; c <= C_P32D; c++)
            printf("%s\"%s\": %.4f", c ? ", " : "", CNAME[c] + 5, median(tm + c * NIT, NIT));
        printf("},\n       \"a_gemms_ms\": %.4f, \"a_tflops\": %.1f, \"b_fp32src_ms\": %.4f, \"b_fp32src_tflops\": %.1f,"
               " \"b_bf16src_ms\": %.4f, \"b_bf16src_tflops\": %.1f",
               med_a[p], 3 * flop / (med_a[p] * 1e-3) / 1e12, med_b32[p], 3 * flop / (med_b32[p] * 1e-3) / 1e12,
               med_b16[p], 3 * flop / (med_b16[p] * 1e-3) / 1e12);
        if (fp8) {
            /* nominal bytes of one quantization: source read twice (amax, cast) + two fp8 copies written */
            double b32 = (double)(nX + nW + nD) * (2 * 4 + 2), b16 = (double)(nX + nW + nD) * (2 * 2 + 2);
            double t32 = median(tm + C_P32X * NIT, NIT) + median(tm + C_P32W * NIT, NIT) + median(tm + C_P32D * NIT, NIT);
            double t16 = median(tm + C_P16X * NIT, NIT) + median(tm + C_P16W * NIT, NIT) + median(tm + C_P16D * NIT, NIT);
            printf(", \"quant_nominal_GBps\": {\"fp32src\": %.0f, \"bf16src\": %.0f}", b32 / (t32 * 1e-3) / 1e9,
                   b16 / (t16 * 1e-3) / 1e9);
        }

        /* errors (outputs of the last iteration; fp8 ones quantized from the fp32 source) */
        double expct[3];
        {
            double eo = bf16out ? eps_bits(7) : 0;
            for (int g = 0; g < 3; g++) {
                double ea, eb;
                if (p == P_FP32) ea = eb = 0;
                else if (p == P_TF32) ea = eb = eps_bits(10);
                else if (p == P_BF16) ea = eb = eps_bits(7);
                else { ea = eps_bits(3); eb = g == 0 ? eps_bits(3) : eps_bits(2); }
                expct[g] = sqrt(ea * ea + eb * eb + eo * eo);
            }
        }
        printf(",\n       \"rel_fro_err_vs_fp32\": {");
        int pass = 1;
        for (int g = 0; g < 3; g++) {
            double e = rel_err(S.out[g], bf16out, S.ref[g], nOut[g], &S);
            /* tf32: cuBLAS may truncate rather than round to tf32 (twice the RNE error) */
            double hi = p == P_FP32 ? 1e-6 : (p == P_TF32 ? 2.0 : 1.0) * expct[g] * 1.5;
            double lo = p == P_FP32 ? -1 : expct[g] * 0.5;
            if (!(e <= hi && e >= lo)) pass = 0;
            printf("%s\"%s\": %.3e", g ? ", " : "", GNAME[g], e);
        }
        printf("}, \"expected_rel_fro_err\": {");
        for (int g = 0; g < 3; g++) printf("%s\"%s\": %.3e", g ? ", " : "", GNAME[g], expct[g]);
        printf("}, \"err_within_expected\": %s}", pass ? "true" : "false");
        fflush(stdout);
        for (int g = 0; g < 3; g++) plan_free(&pl[g]);
    }
    printf("\n     ],\n     \"ratios_fp8_over_bf16_speed\": {");
    if (prec_ok[P_FP8] && prec_ok[P_BF16]) {
        printf("\"a_gemms_only\": %.3f, \"b_gemms_plus_prep_fp32src\": %.3f, \"b_gemms_plus_prep_bf16src\": %.3f",
               med_a[P_BF16] / med_a[P_FP8], med_b32[P_BF16] / med_b32[P_FP8], med_b16[P_BF16] / med_b16[P_FP8]);
        for (int g = 0; g < 3; g++) printf(", \"%s\": %.3f", GNAME[g], med_g[P_BF16][g] / med_g[P_FP8][g]);
        if (prec_ok[P_FP8_F32OUT]) printf(", \"a_gemms_only_fp8_f32out\": %.3f", med_a[P_BF16] / med_a[P_FP8_F32OUT]);
        if (prec_ok[P_FP8_FASTACC]) printf(", \"a_gemms_only_fp8_fastacc\": %.3f", med_a[P_BF16] / med_a[P_FP8_FASTACC]);
    }
    printf("}}");
    fflush(stdout);

    for (int i = 0; i < NIT * NEV; i++) CK(cudaEventDestroy(ev[i]));
    free(ev); free(tm);
    for (int g = 0; g < 3; g++) { plan_free(&ref[g]); CK(cudaFree(S.ref[g])); CK(cudaFree(S.out[g])); }
    void *bufs[] = {S.X, S.W, S.dY, S.Xh, S.Wh, S.dYh, S.Xq, S.XqT, S.Wq, S.WqT, S.dYq, S.dYqT, S.sX, S.sW, S.sdY, S.acc};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) CK(cudaFree(bufs[i]));
}

/* Which FP8 combinations cuBLASLt accepts at all (heuristic query only, no data). */
static void probes(void) {
    struct { const char *what; cudaDataType_t a, b, d; cublasOperation_t ta, tb; } pr[] = {
        {"e4m3 x e4m3 TN -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N},
        {"e4m3 x e4m3 NN -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_N},
        {"e4m3 x e4m3 NT -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_T},
        {"e4m3 x e4m3 TT -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_T},
        {"e4m3 x e5m2 TN -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N},
        {"e5m2 x e4m3 TN -> bf16", CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N},
        {"e5m2 x e5m2 TN -> bf16", CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N},
        {"e4m3 x e5m2 TN -> fp32", CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N},
        {"e4m3 x e5m2 NN -> bf16", CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_N},
    };
    const int m = 4096, n = 4096, k = 4096;
    float *dummy;
    CK(cudaMalloc(&dummy, 4));
    printf("  \"fp8_probes_heuristic\": [");
    for (size_t i = 0; i < sizeof pr / sizeof *pr; i++) {
        Plan p;
        int lda = pr[i].ta == CUBLAS_OP_N ? m : k, ldb = pr[i].tb == CUBLAS_OP_N ? k : n;
        plan_make(&p, CUBLAS_COMPUTE_32F, pr[i].a, pr[i].b, pr[i].d, pr[i].ta, pr[i].tb, m, n, k, lda, ldb, dummy,
                  dummy, dummy, dummy, dummy, 0);
        printf("%s\n    {\"combination\": \"%s\", \"supported\": %s, \"status\": \"%s\"}", i ? "," : "", pr[i].what,
               p.ok ? "true" : "false", p.ok ? "ok" : p.err);
        plan_free(&p);
    }
    printf("\n  ],\n");
    CK(cudaFree(dummy));
}

int main(int argc, char **argv) {
    int only_small = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) g_iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) g_warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--small")) only_small = 1; /* 1024-sized shapes, for a quick check */
        else {
            fprintf(stderr, "usage: %s [--iters N (>=10)] [--warmup N] [--small]\n", argv[0]);
            return 2;
        }
    }
    if (g_iters < 10) { fprintf(stderr, "--iters must be >= 10\n"); return 2; }

    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    g_sms = prop.multiProcessorCount;
    if (prop.major < 9) fprintf(stderr, "warning: compute capability %d.%d: FP8 cuBLASLt needs >= 8.9\n", prop.major, prop.minor);
    int coop = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop) { fprintf(stderr, "device lacks cooperative launch\n"); return 1; }
    CK(cudaStreamCreateWithFlags(&g_st, cudaStreamNonBlocking));
    CKB(cublasLtCreate(&g_lt));
    CK(cudaMalloc(&g_ws, WS_BYTES));
    quant_setup<float, 0>(); quant_setup<float, 1>(); quant_setup<__nv_bfloat16, 0>(); quant_setup<__nv_bfloat16, 1>();
    int maxg = 0;
    for (int i = 0; i < 4; i++) maxg = g_quant_grid[i] > maxg ? g_quant_grid[i] : maxg;
    CK(cudaMalloc(&g_partial, maxg * sizeof(float)));

    int rt = 0, drv = 0;
    CK(cudaRuntimeGetVersion(&rt));
    CK(cudaDriverGetVersion(&drv));
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));

    printf("{\n  \"bench\": \"bench_linear_lt\", \"date\": \"%s\",\n", date);
    printf("  \"device\": {\"name\": \"%s\", \"cc\": \"%d.%d\", \"sms\": %d, \"l2_mib\": %.0f, \"mem_gib\": %.1f},\n",
           prop.name, prop.major, prop.minor, g_sms, prop.l2CacheSize / 1048576.0, prop.totalGlobalMem / 1073741824.0);
    printf("  \"versions\": {\"cuda_runtime\": %d, \"cuda_driver\": %d, \"cublasLt\": %zu},\n", rt, drv, cublasLtGetVersion());
    printf("  \"config\": {\"warmup\": %d, \"iters\": %d, \"statistic\": \"median\", \"workspace_mib\": %zu,"
           " \"algo\": \"cublasLtMatmulAlgoGetHeuristic top-1\", \"quant_grid_blocks\": %d,"
           " \"data\": \"X~N(0,1), W~N(0,0.02^2), dY~N(0,1e-3^2)\"},\n",
           g_warmup, g_iters, WS_BYTES >> 20, g_quant_grid[0]);
    probes();
    printf("  \"shapes\": [\n");
    if (only_small) {
        run_shape(1024, 1024, 1024, "1024^3");
        run_shape(1024, 3072, 768, "small-gpt2");
    } else {
        run_shape(8192, 8192, 8192, "8192^3");
        run_shape(8192, 3072, 768, "gpt2-mlp-up (M=8192 tokens, K=768, N=3072)");
        run_shape(8192, 768, 3072, "gpt2-mlp-down (M=8192 tokens, K=3072, N=768)");
    }
    printf("\n  ]\n}\n");

    CK(cudaFree(g_partial));
    CK(cudaFree(g_ws));
    CKB(cublasLtDestroy(g_lt));
    CK(cudaStreamDestroy(g_st));
    return 0;
}
