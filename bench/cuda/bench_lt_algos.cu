/* bench_lt_algos.cu — every algorithm cuBLASLt's heuristic offers for one FP32 or TF32 GEMM,
 * each timed, beside the legacy cuBLAS entry point (cublasGemmEx) on the same operands.
 *
 * A measurement to choose how the backend picks its FP32 algorithm (src/cuda/cuda_gemm.c
 * takes the heuristic's first answer): standalone, C-style CUDA, no project headers. Prints one
 * JSON document to stdout; errors go to stderr with the failing call.
 *
 * The product is the Linear forward of the backend and of tools/torch_gemm_bench.py
 * (torch.mm(x, w.t())): row-major Y (M×N) = X (M×K)·Wᵀ, W (N×K); to the column-major libraries
 * Yᵀ = op(W)·Xᵀ with op = T on W (K×N col-major) and N on Xᵀ (K×M): "TN". Inputs N(0, 1).
 *
 * Per algorithm (heuristic order, --count at most, workspace 32 MiB as the backend's search):
 * its configuration (algo id, tile, stages, split-k, swizzle, reduction scheme, workspace), then
 * --warmup untimed runs and the median of --reps runs timed with cudaEvents, in TFLOP/s
 * (2·M·N·K per run). cublasGemmEx (CUBLAS_GEMM_DEFAULT, compute 32F or 32F_FAST_TF32, the
 * handle's default workspace) runs in the same way. Each result's max |difference| from
 * cublasGemmEx's result is reported (a different algorithm sums in another order).
 *
 * Build: bench/cuda/build.sh   Run: build-cuda/bench_lt_algos [--size 8192] [--tf32] [--count 16]
 *                                                            [--reps 7] [--warmup 2]
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"

#define CKB(call)                                                                                                \
    do {                                                                                                         \
        cublasStatus_t s_ = (call);                                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                       \
            fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_), \
                    (int)s_);                                                                                    \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)

/* p[i] = a deterministic value in [-1, 1) from (seed, i). */
__global__ void fill_uniform(float *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
        p[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
}

/* max |a[i] - b[i]| over n elements (copied to the host; bench sizes only). */
static double max_abs_diff(const float *a, const float *b, size_t n) {
    float *ha = (float *)malloc(n * sizeof(float)), *hb = (float *)malloc(n * sizeof(float));
    if (!ha || !hb) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    CK(cudaMemcpy(ha, a, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, n * sizeof(float), cudaMemcpyDeviceToHost));
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)ha[i] - (double)hb[i]));
    free(ha);
    free(hb);
    return m;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of one run of `run(ctx)` over reps runs after warmup untimed ones. */
typedef void (*run_fn)(void *ctx);
static float median_ms(run_fn run, void *ctx, int warmup, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < warmup; i++) run(ctx);
    float t[64];
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, 0));
        run(ctx);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

struct Problem {
    int64_t m, n, k; /* row-major: Y (m×n) = X (m×k)·Wᵀ, W (n×k) */
    const float *x, *w;
    float *y;
};

struct LtRun {
    const Problem *p;
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    const cublasLtMatmulAlgo_t *algo;
    void *ws;
    size_t ws_size;
};
static void lt_run(void *ctx) {
    const LtRun *r = (const LtRun *)ctx;
    const float one = 1.0f, zero = 0.0f;
    CKB(cublasLtMatmul(r->lt, r->desc, &one, r->p->w, r->la, r->p->x, r->lb, &zero, r->p->y, r->ld, r->p->y, r->ld,
                       r->algo, r->ws, r->ws_size, 0));
}

struct ExRun {
    const Problem *p;
    cublasHandle_t h;
    cublasComputeType_t ct;
};
static void ex_run(void *ctx) {
    const ExRun *r = (const ExRun *)ctx;
    const float one = 1.0f, zero = 0.0f;
    const Problem *p = r->p;
    CKB(cublasGemmEx(r->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)p->n, (int)p->m, (int)p->k, &one, p->w, CUDA_R_32F,
                     (int)p->k, p->x, CUDA_R_32F, (int)p->k, &zero, p->y, CUDA_R_32F, (int)p->n, r->ct,
                     CUBLAS_GEMM_DEFAULT));
}

static int config_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t attr) {
    int v = -1;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, attr, &v, sizeof v, &got) != CUBLAS_STATUS_SUCCESS) return -1;
    return v;
}

static long arg(int argc, char **argv, const char *name, long def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return strtol(argv[i + 1], NULL, 10);
    return def;
}

int main(int argc, char **argv) {
    const int64_t size = arg(argc, argv, "--size", 8192);
    const int count = (int)arg(argc, argv, "--count", 16), warmup = (int)arg(argc, argv, "--warmup", 2);
    int reps = (int)arg(argc, argv, "--reps", 7);
    bool tf32 = false;
    for (int i = 1; i < argc; i++) tf32 |= !strcmp(argv[i], "--tf32");
    if (size < 1 || count < 1 || count > 64 || reps < 1 || warmup < 0) {
        fprintf(stderr, "usage: bench_lt_algos [--size N>=1] [--tf32] [--count 1..64] [--reps 1..64] [--warmup N]\n");
        return 2;
    }
    if (reps > 64) reps = 64;
    const cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    Problem p = {size, size, size, NULL, NULL, NULL};
    const size_t nx = (size_t)(p.m * p.k), nw = (size_t)(p.n * p.k), ny = (size_t)(p.m * p.n);
    float *x, *w, *y, *yref;
    CK(cudaMalloc(&x, nx * 4));
    CK(cudaMalloc(&w, nw * 4));
    CK(cudaMalloc(&y, ny * 4));
    CK(cudaMalloc(&yref, ny * 4));
    fill_uniform<<<1024, 256>>>(x, nx, 1u);
    fill_uniform<<<1024, 256>>>(w, nw, 2u);
    CK(cudaGetLastError());
    p.x = x, p.w = w, p.y = yref;
    const double flop = 2.0 * (double)p.m * (double)p.n * (double)p.k;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));

    cublasHandle_t h;
    CKB(cublasCreate(&h));
    ExRun ex = {&p, h, ct};
    const float ex_ms = median_ms(ex_run, &ex, warmup, reps);
    CK(cudaDeviceSynchronize());
    printf("{\"device\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"compute\": \"%s\", \"layout\": \"TN\",\n",
           prop.name, (long long)p.m, (long long)p.n, (long long)p.k, tf32 ? "32F_FAST_TF32" : "32F");
    printf(" \"gemm_ex\": {\"median_ms\": %.4f, \"tflops\": %.2f},\n \"lt\": [\n", ex_ms, flop / ex_ms / 1e9);

    cublasLtHandle_t lt;
    CKB(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t desc;
    CKB(cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKB(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, ld;
    CKB(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, (uint64_t)p.k, (uint64_t)p.n, p.k));
    CKB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, (uint64_t)p.k, (uint64_t)p.m, p.k));
    CKB(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)p.n, (uint64_t)p.m, p.n));
    cublasLtMatmulPreference_t pref;
    CKB(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t max_ws = (uint64_t)32 << 20;
    CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
    cublasLtMatmulHeuristicResult_t res[64];
    int got = 0;
    CKB(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, count, res, &got));
    void *ws;
    CK(cudaMalloc(&ws, max_ws));
    p.y = y;
    for (int i = 0; i < got; i++) {
        const cublasLtMatmulAlgo_t *a = &res[i].algo;
        LtRun r = {&p, lt, desc, la, lb, ld, a, ws, res[i].workspaceSize};
        const float ms = median_ms(lt_run, &r, warmup, reps);
        CK(cudaDeviceSynchronize());
        printf("  {\"rank\": %d, \"algo_id\": %d, \"tile\": %d, \"stages\": %d, \"splitk\": %d, \"swizzle\": %d, "
               "\"reduction\": %d, \"workspace\": %zu, \"waves\": %.3f, \"median_ms\": %.4f, \"tflops\": %.2f, "
               "\"max_abs_diff_vs_gemm_ex\": %.3g}%s\n",
               i, config_attr(a, CUBLASLT_ALGO_CONFIG_ID), config_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
               config_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), config_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
               config_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), config_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
               res[i].workspaceSize, res[i].wavesCount, ms, flop / ms / 1e9, max_abs_diff(y, yref, ny),
               i + 1 < got ? "," : "");
        fflush(stdout);
    }
    printf(" ]\n}\n");
    CKB(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {la, lb, ld}) CKB(cublasLtMatrixLayoutDestroy(l));
    CKB(cublasLtMatmulDescDestroy(desc));
    CKB(cublasLtDestroy(lt));
    CKB(cublasDestroy(h));
    for (void *q : {ws, (void *)x, (void *)w, (void *)y, (void *)yref}) CK(cudaFree(q));
    return 0;
}
