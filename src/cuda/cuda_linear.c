/* src/cuda/cuda_linear.c — defines: the fully connected layer of the CUDA backend, one
 * cuBLASLt wrapper for every GEMM precision (FP32, TF32, BF16, FP16, FP8; INT8 is refused).
 *
 * Tensors are row-major as everywhere in qsync: X (M,K), W (N,K), dY (M,N), Y (M,N), b (N).
 * cuBLASLt is column-major and computes D (m×n) = α·op(A)·op(B) + β·C; a row-major R×C buffer
 * is the column-major C×R matrix (its transpose), so each product is issued transposed:
 *   forward          Yᵀ (N×M)  = op_T(W buffer: K×N, ld K) · op_N(X buffer: K×M, ld K)
 *                    m=N n=M k=K, "TN", D ld N                              (every precision)
 *   backward-data    dXᵀ (K×M) = op_N(W buffer: K×N, ld K) · op_N(dY buffer: N×M, ld N)
 *                    m=K n=M k=N, "NN", D ld K                              (non-FP8)
 *                    FP8: A = Wᵀ copy (row-major K×N = col-major N×K, ld N), op T:  "TN"
 *   backward-weights dWᵀ (K×N) = op_N(X buffer: K×M, ld K) · op_T(dY buffer: N×M, ld N)
 *                    m=K n=N k=M, "NT", D ld K                              (non-FP8)
 *                    FP8: A = Xᵀ copy (row-major K×Mp, ld Mp), op T; B = dYᵀ copy (row-major
 *                    N×Mp = col-major Mp×N, ld Mp), op N: "TN", k = Mp (M rounded up to 16,
 *                    the extra columns of both copies zero, so they add nothing).
 * FP8 on Hopper takes only "TN" (A transposed, B not) and E4M3×E4M3 / E4M3×E5M2 / E5M2×E4M3
 * (never E5M2×E5M2): forward is E4M3 W × E4M3 X, both backward products E4M3 (W or X) as A
 * × E5M2 dY as B. The transposed copies are written by cuda_linear_kernels.cu into the
 * workspace. Per-tensor dequantization scales (device memory) go to cuBLASLt as
 * CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER; α = 1 (BF16/FP16/F32 operands carry no scale).
 * Output D and C are FP32 for every precision (C = D: β = 1 accumulates backward-data).
 *
 * Plan: per direction a matmul descriptor, layouts and the heuristic's top algorithm, chosen
 * once for the shape and types. Each direction has two algorithms: one for pointers aligned to
 * 16 bytes (every buffer from alloc() is 256-aligned) and, where cuBLASLt has one, a fallback
 * for pointers aligned only to their element size (views into a buffer); each call picks by
 * the pointers it gets. A plan's descriptors are updated per call (operand scale and bias
 * pointers), so one plan must not be executed from two host threads at once.
 *
 * Bias: forward uses CUBLASLT_EPILOGUE_BIAS with the FP32 bias where cuBLASLt has an algorithm
 * for it (FP32/TF32/BF16/FP16, FP32 output); FP8 with FP32 output wants a BF16 bias vector, so
 * the FP8 forward (and any precision whose epilogue finds no algorithm) adds b with a kernel.
 * db (only with an FP32 dY) is a deterministic double-accumulated column-sum kernel.
 *
 * Workspace: [scratch][cuBLASLt workspace], the scratch (256-aligned pieces) sized for the
 * largest direction: FP8 backward-data Wᵀ (K·N bytes); FP8 backward-weights Xᵀ (K·Mp) and dYᵀ
 * (N·Mp); FP32 bias gradient partial sums (chunks·N doubles). The cuBLASLt part is the largest
 * workspace any chosen algorithm asked for (searched with at most 32 MiB). ws must be
 * 256-byte aligned (alloc() is). */
#include "cuda/cuda_backend.h"

#include <cublasLt.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/cuda_linear_kernels.h"

#define LT_MAX_WORKSPACE ((uint64_t)32 << 20) /* heuristic search limit (Hopper guidance) */
#define LT_ALIGN 16u                          /* pointer alignment of the primary algorithms */
#define WS_ALIGN ((size_t)256)

enum { DIR_FWD = 0, DIR_DGRAD, DIR_WGRAD, DIR_COUNT };
static const char *const DIR_NAME[DIR_COUNT] = {"forward", "backward-data", "backward-weights"};

/* One cuBLASLt product of the plan. */
typedef struct lt_gemm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld; /* C and D share ld (FP32, m×n) */
    cublasLtMatmulAlgo_t algo;         /* A, B, C/D (and bias) 16-byte aligned */
    cublasLtMatmulAlgo_t algo_any;     /* element-aligned pointers; valid when has_any */
    bool has_any;
    size_t ws_bytes;                   /* the larger workspace of the two algorithms */
    size_t a_elem, b_elem;             /* element sizes of A and B (bytes) */
    bool scaled;                       /* FP8: A/B scale pointers */
    bool bias;                         /* CUBLASLT_EPILOGUE_BIAS */
} lt_gemm;

typedef struct qs_cuda_linear_plan {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_LINEAR: first, for plan_destroy's dispatch */
    qs_linear_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes of X, W (forward) and dY (gradient) */
    bool fp8;
    int64_t Mp;             /* FP8 backward-weights reduction length: M rounded up to 16 */
    lt_gemm g[DIR_COUNT];
    bool bias_kernel;       /* forward adds b with a kernel (no epilogue) */
    int colsum_chunks;      /* FP32 dY with bias: row blocks of the db column sums */
    size_t off_t2;          /* FP8 backward-weights: offset of dYᵀ in the workspace */
    size_t lt_off;          /* offset of the cuBLASLt workspace */
    size_t lt_bytes;        /* its size */
    size_t ws_bytes;        /* total */
} qs_cuda_linear_plan_t;

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Placeholder device addresses for pointer attributes that the heuristic inspects only for
 * their alignment (never dereferenced; the real pointers are set before each cublasLtMatmul). */
#define LT_PLACEHOLDER_16 ((const void *)(uintptr_t)0x10010u) /* 16-aligned, not 32 */
#define LT_PLACEHOLDER_4 ((const void *)(uintptr_t)0x10004u)  /* 4-aligned, not 8 */

static const char *lt_name(cublasStatus_t st) {
    const char *n = cublasLtGetStatusName(st);
    return n ? n : "?";
}

/* QS_ERR_BACKEND naming the failing call, the problem and the direction. */
static qs_status lt_fail(const qs_cuda_linear_plan_t *lp, int dir, const char *call, cublasStatus_t st) {
    return QS_FAIL(QS_ERR_BACKEND, "%s failed for linear M=%lld N=%lld K=%lld at %s (%s): status %d (%s)", call,
                   (long long)lp->d.M, (long long)lp->d.N, (long long)lp->d.K, qs_precision_name(lp->d.prec),
                   DIR_NAME[dir], (int)st, lt_name(st));
}

#define LT_TRY(call)                                                                                               \
    do {                                                                                                           \
        cublasStatus_t lt_st_ = (call);                                                                            \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS) return lt_fail(lp, dir, #call, lt_st_);                              \
    } while (0)

/* What one product looks like to cuBLASLt (column-major). */
typedef struct gemm_spec {
    cublasComputeType_t ct;
    cudaDataType_t at, bt;       /* A and B element types */
    size_t a_elem, b_elem;
    cublasOperation_t ta, tb;
    int64_t m, n, k, lda, ldb, ldd;
    bool scaled, bias;
} gemm_spec;

/* One heuristic query with the given pointer alignments. *found = false when cuBLASLt has no
 * algorithm (CUBLAS_STATUS_NOT_SUPPORTED or zero results); other failures are errors. */
static qs_status lt_heuristic(qs_cuda_linear_plan_t *lp, int dir, cublasLtHandle_t lt, lt_gemm *g, uint32_t align_a,
                              uint32_t align_b, uint32_t align_cd, cublasLtMatmulAlgo_t *algo, size_t *ws,
                              bool *found, cublasStatus_t *why) {
    *found = false;
    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t max_ws = LT_MAX_WORKSPACE;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                             sizeof max_ws);
    const char *call = "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)";
    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                  sizeof align_a);
        call = "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)";
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                  sizeof align_b);
        call = "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)";
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd,
                                                  sizeof align_cd);
        call = "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)";
    }
    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd,
                                                  sizeof align_cd);
        call = "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)";
    }
    cublasLtMatmulHeuristicResult_t res = {0};
    int got = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulAlgoGetHeuristic(lt, g->desc, g->la, g->lb, g->ld, g->ld, pref, 1, &res, &got);
        call = "cublasLtMatmulAlgoGetHeuristic";
        const bool none = st == CUBLAS_STATUS_NOT_SUPPORTED ||
                          (st == CUBLAS_STATUS_SUCCESS && (got < 1 || res.state != CUBLAS_STATUS_SUCCESS));
        if (none) {
            *why = st == CUBLAS_STATUS_SUCCESS && got >= 1 ? res.state : CUBLAS_STATUS_NOT_SUPPORTED;
            cublasLtMatmulPreferenceDestroy(pref);
            return QS_OK;
        }
    }
    cublasStatus_t dst = cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(lp, dir, call, st);
    if (dst != CUBLAS_STATUS_SUCCESS) return lt_fail(lp, dir, "cublasLtMatmulPreferenceDestroy", dst);
    *algo = res.algo;
    *ws = res.workspaceSize;
    *found = true;
    return QS_OK;
}

static void gemm_destroy(lt_gemm *g) {
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
    if (g->ld) cublasLtMatrixLayoutDestroy(g->ld);
    if (g->desc) cublasLtMatmulDescDestroy(g->desc);
    g->la = g->lb = g->ld = NULL;
    g->desc = NULL;
}

/* Build direction dir from spec: descriptor, layouts, both algorithms. *no_algo is set (and
 * QS_OK returned) when cuBLASLt has no algorithm for 16-byte-aligned pointers; the caller
 * decides whether that is an error. */
static qs_status gemm_build(qs_cuda_linear_plan_t *lp, int dir, cublasLtHandle_t lt, const gemm_spec *sp,
                            bool *no_algo, cublasStatus_t *why) {
    lt_gemm *g = &lp->g[dir];
    *no_algo = false;
    g->a_elem = sp->a_elem;
    g->b_elem = sp->b_elem;
    g->scaled = sp->scaled;
    g->bias = sp->bias;
    LT_TRY(cublasLtMatmulDescCreate(&g->desc, sp->ct, CUDA_R_32F));
    const int32_t ta = (int32_t)sp->ta, tb = (int32_t)sp->tb;
    LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const void *ph = LT_PLACEHOLDER_16;
    if (sp->scaled) {
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ph, sizeof ph));
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ph, sizeof ph));
    }
    if (sp->bias) {
        const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ph, sizeof ph));
    }
    const bool an = sp->ta == CUBLAS_OP_N, bn = sp->tb == CUBLAS_OP_N;
    LT_TRY(cublasLtMatrixLayoutCreate(&g->la, sp->at, (uint64_t)(an ? sp->m : sp->k), (uint64_t)(an ? sp->k : sp->m),
                                      sp->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&g->lb, sp->bt, (uint64_t)(bn ? sp->k : sp->n), (uint64_t)(bn ? sp->n : sp->k),
                                      sp->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&g->ld, CUDA_R_32F, (uint64_t)sp->m, (uint64_t)sp->n, sp->ldd));

    bool found = false;
    size_t ws = 0;
    QS_TRY(lt_heuristic(lp, dir, lt, g, LT_ALIGN, LT_ALIGN, LT_ALIGN, &g->algo, &ws, &found, why));
    if (!found) {
        *no_algo = true;
        return QS_OK;
    }
    g->ws_bytes = ws;
    /* fallback for element-aligned pointers (FP8 usually has none: it needs 16 bytes) */
    if (sp->bias) {
        const void *ph4 = LT_PLACEHOLDER_4;
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ph4, sizeof ph4));
    }
    cublasStatus_t why_any = CUBLAS_STATUS_SUCCESS;
    QS_TRY(lt_heuristic(lp, dir, lt, g, (uint32_t)sp->a_elem, (uint32_t)sp->b_elem, (uint32_t)sizeof(float),
                        &g->algo_any, &ws, &g->has_any, &why_any));
    if (g->has_any) g->ws_bytes = max_sz(g->ws_bytes, ws);
    return QS_OK;
}

/* "no algorithm" as QS_ERR_BACKEND, with what usually causes it. */
static qs_status no_algo_fail(const qs_cuda_linear_plan_t *lp, int dir, cublasStatus_t why) {
    const char *hint = lp->fp8 ? " (cuBLASLt's FP8 GEMMs need 16-byte leading dimensions: K and N multiples of 16)"
                               : "";
    return QS_FAIL(QS_ERR_BACKEND,
                   "cublasLtMatmulAlgoGetHeuristic failed for linear M=%lld N=%lld K=%lld at %s (%s): status %d (%s): "
                   "no algorithm%s",
                   (long long)lp->d.M, (long long)lp->d.N, (long long)lp->d.K, qs_precision_name(lp->d.prec),
                   DIR_NAME[dir], (int)why, lt_name(why), hint);
}

void qs_cuda_linear_plan_destroy(qs_backend *be, void *plan) {
    qs_cuda_linear_plan_t *lp = plan;
    if (!lp) return;
    for (int i = 0; i < DIR_COUNT; i++) gemm_destroy(&lp->g[i]);
    lp->kind = 0;
    free(lp);
}

void qs_cuda_linear_release(qs_backend *be) {
    if (!be) return;
    qs_cuda_backend *cb = qs_cuda_be(be);
    if (cb->lt) cublasLtDestroy((cublasLtHandle_t)cb->lt);
    cb->lt = NULL;
}

/* The backend's cuBLASLt handle, created on first use (on the backend's device). */
static qs_status lt_handle(qs_backend *be, cublasLtHandle_t *out) {
    qs_cuda_backend *cb = qs_cuda_be(be);
    if (!cb->lt) {
        QS_CUDA_TRY(cudaSetDevice(cb->device));
        cublasLtHandle_t h = NULL;
        cublasStatus_t st = cublasLtCreate(&h);
        if (st != CUBLAS_STATUS_SUCCESS)
            return QS_FAIL(QS_ERR_BACKEND, "cublasLtCreate failed on device %d: status %d (%s)", cb->device, (int)st,
                           lt_name(st));
        cb->lt = h;
    }
    *out = (cublasLtHandle_t)cb->lt;
    return QS_OK;
}

/* Specs of the three products for the plan's precision (layouts in the file comment). */
static void make_specs(const qs_cuda_linear_plan_t *lp, gemm_spec sp[DIR_COUNT]) {
    const int64_t M = lp->d.M, N = lp->d.N, K = lp->d.K;
    cublasComputeType_t ct = lp->d.prec == QS_PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t ft, gt;
    size_t fe, ge;
    switch (lp->d.prec) {
    case QS_PREC_BF16: ft = gt = CUDA_R_16BF; fe = ge = 2; break;
    case QS_PREC_FP16: ft = gt = CUDA_R_16F; fe = ge = 2; break;
    case QS_PREC_FP8: ft = CUDA_R_8F_E4M3; gt = CUDA_R_8F_E5M2; fe = ge = 1; break;
    default: ft = gt = CUDA_R_32F; fe = ge = 4; break; /* FP32, TF32 */
    }
    const cublasOperation_t T = CUBLAS_OP_T, Nn = CUBLAS_OP_N;
    /* forward: A = W buffer (K×N col-major, ld K) op T; B = X buffer (K×M, ld K) op N; D N×M ld N */
    sp[DIR_FWD] = (gemm_spec){ct, ft, ft, fe, fe, T, Nn, N, M, K, K, K, N, lp->fp8, lp->d.has_bias && !lp->fp8};
    if (!lp->fp8) {
        /* backward-data: A = W buffer (K×N, ld K) op N; B = dY buffer (N×M, ld N) op N; D K×M ld K */
        sp[DIR_DGRAD] = (gemm_spec){ct, ft, gt, fe, ge, Nn, Nn, K, M, N, K, N, K, false, false};
        /* backward-weights: A = X buffer (K×M, ld K) op N; B = dY buffer (N×M, ld N) op T; D K×N ld K */
        sp[DIR_WGRAD] = (gemm_spec){ct, ft, gt, fe, ge, Nn, T, K, N, M, K, N, K, false, false};
    } else {
        /* backward-data: A = Wᵀ copy (row-major K×N = col-major N×K, ld N) op T; B = dY (N×M, ld N) op N */
        sp[DIR_DGRAD] = (gemm_spec){ct, ft, gt, fe, ge, T, Nn, K, M, N, N, N, K, true, false};
        /* backward-weights: A = Xᵀ copy (row-major K×Mp = col-major Mp×K, ld Mp) op T;
         * B = dYᵀ copy (row-major N×Mp = col-major Mp×N, ld Mp) op N; k = Mp */
        sp[DIR_WGRAD] = (gemm_spec){ct, ft, gt, fe, ge, T, Nn, K, N, lp->Mp, lp->Mp, lp->Mp, K, true, false};
    }
}

/* Contract (backend.h linear_plan): Y(M,N) = X(M,K)·W(N,K)ᵀ + b at precision d->prec; *plan
 * receives a plan for the three directions and *workspace the bytes of ws they need. */
qs_status qs_cuda_linear_plan(qs_backend *be, const qs_linear_desc *d, void **plan, size_t *workspace) {
    if (!be || !d || !plan || !workspace)
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_plan: NULL backend, descriptor or output");
    *plan = NULL;
    *workspace = 0;
    if (d->M < 1 || d->N < 1 || d->K < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_plan: M=%lld N=%lld K=%lld must all be >= 1", (long long)d->M,
                       (long long)d->N, (long long)d->K);
    if ((unsigned)d->prec >= QS_PREC_COUNT)
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_plan: unknown precision %d", (int)d->prec);
    qs_cuda_backend *cb = qs_cuda_be(be);
    const int cc = cb->props.major * 10 + cb->props.minor;
    if (d->prec == QS_PREC_INT8)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "linear_plan: int8 is not available for Linear on the CUDA backend (cuBLASLt's int8 GEMMs "
                       "have int32 outputs and other layout rules; not wired up); assign fp8, bf16, fp16, tf32 or "
                       "fp32");
    if (d->prec == QS_PREC_FP8 && cc < 89)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "linear_plan: fp8 GEMMs need compute capability 8.9 or newer; device %d is %d.%d (%s); assign "
                       "bf16 or fp16",
                       cb->device, cb->props.major, cb->props.minor, cb->props.name);
    if ((d->prec == QS_PREC_BF16 || d->prec == QS_PREC_TF32) && cc < 80)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "linear_plan: %s GEMMs need compute capability 8.0 or newer; device %d is %d.%d (%s); assign "
                       "fp16 or fp32",
                       qs_precision_name(d->prec), cb->device, cb->props.major, cb->props.minor, cb->props.name);
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));

    qs_cuda_linear_plan_t *lp = calloc(1, sizeof *lp);
    if (!lp) return QS_FAIL(QS_ERR_OOM, "linear_plan: out of memory for the plan");
    lp->kind = QS_CUDA_PLAN_LINEAR;
    lp->d = *d;
    lp->fdt = qs_precision_operand_dtype(d->prec, false);
    lp->gdt = qs_precision_operand_dtype(d->prec, true);
    lp->fp8 = d->prec == QS_PREC_FP8;
    lp->Mp = lp->fp8 ? (d->M + 15) / 16 * 16 : d->M;

    gemm_spec sp[DIR_COUNT];
    make_specs(lp, sp);
    qs_status st = QS_OK;
    for (int dir = 0; dir < DIR_COUNT && st == QS_OK; dir++) {
        bool no_algo = false;
        cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
        st = gemm_build(lp, dir, lt, &sp[dir], &no_algo, &why);
        if (st == QS_OK && no_algo && sp[dir].bias) { /* no fused-bias algorithm: plain product + kernel */
            gemm_destroy(&lp->g[dir]);
            lp->g[dir] = (lt_gemm){0};
            sp[dir].bias = false;
            lp->bias_kernel = true;
            st = gemm_build(lp, dir, lt, &sp[dir], &no_algo, &why);
        }
        if (st == QS_OK && no_algo) st = no_algo_fail(lp, dir, why);
    }
    if (st != QS_OK) {
        qs_cuda_linear_plan_destroy(be, lp);
        return st;
    }
    if (d->has_bias && lp->fp8) lp->bias_kernel = true;

    /* workspace: scratch of the largest direction, then the cuBLASLt workspace */
    const size_t N = (size_t)d->N, K = (size_t)d->K, Mp = (size_t)lp->Mp;
    size_t scratch = 0;
    if (lp->fp8) {
        lp->off_t2 = align_up(K * Mp, WS_ALIGN);
        scratch = max_sz(K * N, lp->off_t2 + N * Mp);
    }
    if (d->has_bias && lp->gdt == QS_F32) {
        lp->colsum_chunks = qs_cuda_linear_column_sum_chunks(d->M, d->N, cb->props.multiProcessorCount);
        scratch = max_sz(scratch, qs_cuda_linear_column_sum_bytes(d->N, lp->colsum_chunks));
    }
    lp->lt_off = align_up(scratch, WS_ALIGN);
    for (int i = 0; i < DIR_COUNT; i++) lp->lt_bytes = max_sz(lp->lt_bytes, lp->g[i].ws_bytes);
    lp->ws_bytes = lp->lt_bytes ? lp->lt_off + lp->lt_bytes : scratch;
    *plan = lp;
    *workspace = lp->ws_bytes;
    return QS_OK;
}

/* ---- execution ---- */

static qs_status plan_check(const void *plan, const char *what) {
    if (!plan) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: plan is NULL; create it with linear_plan", what);
    if (*(const qs_cuda_plan_kind *)plan != QS_CUDA_PLAN_LINEAR)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan passed is of another operator kind; pass the linear plan",
                       what);
    return QS_OK;
}

static qs_status operand_check(const qs_operand *op, qs_dtype expect, const char *what) {
    if (!op || !op->data) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL operand", what);
    if (op->dt != expect)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: operand is %s but the plan's precision stores %s", what,
                       qs_dtype_name(op->dt), qs_dtype_name(expect));
    const bool scaled = expect == QS_F8E4M3 || expect == QS_F8E5M2 || expect == QS_S8;
    if (scaled && !op->scale)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %s operand without a scale", what, qs_dtype_name(expect));
    if (op->per_row && !scaled)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: per-row scales on an unscaled %s operand", what, qs_dtype_name(expect));
    if (op->per_row)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: per-row scales are not supported by the CUDA Linear (cuBLASLt takes one scale per "
                       "tensor); quantize with per-tensor scales",
                       what);
    return QS_OK;
}

static qs_status ws_check(const qs_cuda_linear_plan_t *lp, const void *ws, const char *what) {
    if (lp->ws_bytes && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan needs %zu bytes of workspace but ws is NULL", what,
                       lp->ws_bytes);
    if (lp->ws_bytes && (uintptr_t)ws % WS_ALIGN)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: ws must be 256-byte aligned (as alloc() returns)", what);
    return QS_OK;
}

static cudaStream_t stream_of(qs_backend *be, qs_stream *s) { return s ? s->s : qs_cuda_be(be)->stream.s; }

static bool aligned(const void *p, size_t a) { return (uintptr_t)p % a == 0; }

/* D = A·B (+ beta·D) for direction dir; sa, sb: FP8 scale pointers; bias: epilogue bias. */
static qs_status gemm_run(qs_cuda_linear_plan_t *lp, int dir, cublasLtHandle_t lt, cudaStream_t stream,
                          const void *A, const void *B, float *D, float beta, const float *sa, const float *sb,
                          const float *bias, void *ws) {
    lt_gemm *g = &lp->g[dir];
    if (g->scaled) {
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    }
    if (g->bias) LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const cublasLtMatmulAlgo_t *algo = NULL;
    if (aligned(A, LT_ALIGN) && aligned(B, LT_ALIGN) && aligned(D, LT_ALIGN) && (!g->bias || aligned(bias, LT_ALIGN)))
        algo = &g->algo;
    else if (g->has_any && aligned(A, g->a_elem) && aligned(B, g->b_elem) && aligned(D, sizeof(float)) &&
             (!g->bias || aligned(bias, sizeof(float))))
        algo = &g->algo_any;
    else
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "linear %s (M=%lld N=%lld K=%lld, %s): operand or output pointers are not aligned enough "
                       "for cuBLASLt (%s); pass buffers from alloc() or 16-byte-aligned views",
                       DIR_NAME[dir], (long long)lp->d.M, (long long)lp->d.N, (long long)lp->d.K,
                       qs_precision_name(lp->d.prec),
                       lp->fp8 ? "FP8 needs 16 bytes" : "not even aligned to the element size");
    const float alpha = 1.0f;
    void *lt_ws = lp->lt_bytes ? (char *)ws + lp->lt_off : NULL;
    LT_TRY(cublasLtMatmul(lt, g->desc, &alpha, A, g->la, B, g->lb, &beta, D, g->ld, D, g->ld, algo, lt_ws,
                          lp->lt_bytes, stream));
    return QS_OK;
}

/* Contract (backend.h linear_forward): y (M,N) = x (M,K) · w (N,K)ᵀ + b (N); x, w in the plan's
 * forward dtype (FP8: per-tensor scales in device memory), b FP32 (required with a bias). */
qs_status qs_cuda_linear_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x, const qs_operand *w,
                                 const float *b, float *y, void *ws) {
    QS_TRY(plan_check(plan, "linear_forward"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(operand_check(x, lp->fdt, "linear_forward x"));
    QS_TRY(operand_check(w, lp->fdt, "linear_forward w"));
    if (!y || (lp->d.has_bias && !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_forward: NULL y or (planned with bias) b");
    QS_TRY(ws_check(lp, ws, "linear_forward"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    const cudaStream_t st = stream_of(be, s);
    const int dir = DIR_FWD;
    QS_TRY(gemm_run(lp, dir, lt, st, w->data, x->data, y, 0.0f, w->scale, x->scale, lp->d.has_bias ? b : NULL, ws));
    if (lp->d.has_bias && lp->bias_kernel) QS_TRY(qs_cuda_linear_bias_add(st, lp->d.M, lp->d.N, b, y));
    return QS_OK;
}

/* Contract (backend.h linear_backward_data): dx (M,K) = dy (M,N) · w (N,K), or dx += that with
 * accumulate; dy in the gradient dtype, w in the forward dtype, both per-tensor. */
qs_status qs_cuda_linear_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                       const qs_operand *w, float *dx, bool accumulate, void *ws) {
    QS_TRY(plan_check(plan, "linear_backward_data"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(operand_check(dy, lp->gdt, "linear_backward_data dy"));
    QS_TRY(operand_check(w, lp->fdt, "linear_backward_data w"));
    if (!dx) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_data: NULL dx");
    QS_TRY(ws_check(lp, ws, "linear_backward_data"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    const cudaStream_t st = stream_of(be, s);
    const int dir = DIR_DGRAD;
    const void *A = w->data;
    if (lp->fp8) { /* Wᵀ (K×N row-major) into the workspace scratch */
        QS_TRY(qs_cuda_linear_transpose_u8(st, w->data, lp->d.N, lp->d.K, ws, lp->d.N));
        A = ws;
    }
    return gemm_run(lp, dir, lt, st, A, dy->data, dx, accumulate ? 1.0f : 0.0f, w->scale, dy->scale, NULL, ws);
}

/* Contract (backend.h linear_backward_weights): dw (N,K) = dy (M,N)ᵀ · x (M,K) (overwritten);
 * db (N) = Σ_rows dy, given exactly when dy is F32 and the plan has a bias, else NULL. */
qs_status qs_cuda_linear_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                          const qs_operand *x, float *dw, float *db, void *ws) {
    QS_TRY(plan_check(plan, "linear_backward_weights"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(operand_check(dy, lp->gdt, "linear_backward_weights dy"));
    QS_TRY(operand_check(x, lp->fdt, "linear_backward_weights x"));
    if (!dw) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_weights: NULL dw");
    if (dy->dt == QS_F32 && db && !lp->d.has_bias)
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_weights: db given but the plan has no bias; pass NULL");
    if (dy->dt == QS_F32 && !db && lp->d.has_bias)
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_weights: the plan has a bias but db is NULL");
    if (dy->dt != QS_F32 && db)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "linear_backward_weights: db with a %s dy; compute it with column_sums from the FP32 gradient",
                       qs_dtype_name(dy->dt));
    QS_TRY(ws_check(lp, ws, "linear_backward_weights"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    const cudaStream_t st = stream_of(be, s);
    const int dir = DIR_WGRAD;
    const void *A = x->data, *B = dy->data;
    if (lp->fp8) { /* Xᵀ (K×Mp) and dYᵀ (N×Mp), zero beyond column M */
        char *t2 = (char *)ws + lp->off_t2;
        QS_TRY(qs_cuda_linear_transpose_u8(st, x->data, lp->d.M, lp->d.K, ws, lp->Mp));
        QS_TRY(qs_cuda_linear_transpose_u8(st, dy->data, lp->d.M, lp->d.N, t2, lp->Mp));
        A = ws;
        B = t2;
    }
    QS_TRY(gemm_run(lp, dir, lt, st, A, B, dw, 0.0f, x->scale, dy->scale, NULL, ws));
    if (!db) return QS_OK;
    return qs_cuda_linear_column_sums(st, lp->d.M, lp->d.N, dy->data, lp->colsum_chunks,
                                      lp->colsum_chunks > 1 ? (double *)ws : NULL, db);
}
