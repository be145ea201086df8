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
 *   backward-weights dWᵀ (K×N) = op_N(X buffer: K×M, ld K) · op_T(dY buffer: N×M, ld N)
 *                    m=K n=N k=M, "NT", D ld K                              (non-FP8)
 * FP8 on Hopper takes only "TN" (A transposed, B not) and E4M3×E4M3 / E4M3×E5M2 / E5M2×E4M3
 * (never E5M2×E5M2): forward is E4M3 W × E4M3 X, both backward products E4M3 (W or X) as A
 * × E5M2 dY as B. Per-tensor dequantization scales (device memory) go to cuBLASLt as
 * CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER; α = 1 (BF16/FP16/F32 operands carry no scale).
 * Output D and C are FP32 for every precision (C = D: β = 1 accumulates backward-data).
 *
 * FP8 padding. Every FP8 product is D (m×n, col-major = row-major n×m) = Aᵀ·B with A a
 * row-major m×k byte matrix (col-major k×m, op T) and B a row-major n×k one (col-major k×n,
 * op N). cuBLASLt's FP8 kernels need 16-byte (= 16-element) leading dimensions for A and B,
 * i.e. k a multiple of 16, so k is always issued as kp = k rounded up to 16, the extra
 * columns of A and B zero (a zero byte is +0 in E4M3 and E5M2: the padded terms add exactly
 * nothing). An operand is read straight from the caller's buffer when it already has that
 * layout; otherwise (transposed source, or padding) it is copied into the workspace by
 * cuda_linear_kernels.cu (transpose_u8 for a transposed source, pad_u8 for a row-major one),
 * zero-filled, every call. Per direction (Mp, Np, Kp: M, N, K rounded up to 16):
 *   forward          m=N n=M k=K    A = W (N×K), B = X (M×K), D = Y (M×N, ld N)
 *                    K % 16 == 0: both read in place (zero-copy); else copies W (N×Kp),
 *                    X (M×Kp). Bias: bias_add after the product (or unpad_f32, below).
 *   backward-data    m=K n=M k=N    A = Wᵀ (K×N, transposed from W), B = dY (M×N), D = dX
 *                    (M×K, ld K, β = 1 with accumulate). A is always copied (K×Np);
 *                    N % 16 == 0: dY read in place; else copied (M×Np).
 *   backward-weights m=K n=N k=M    A = Xᵀ (K×Mp, from X), B = dYᵀ (N×Mp, from dY), D = dW
 *                    (N×K, ld K). Both always copied; M needs no alignment.
 * D goes straight into the caller's output with its own leading dimension (m, FP32) where
 * cuBLASLt has an algorithm for that. Where it has none (the heuristic says NOT_SUPPORTED and
 * m or n is not a multiple of 16), the plan pads everything instead: m and n are issued as
 * mp, np (rounded up to 16, A and B copies with zero rows mp-m / np-n), D is an FP32 mp×np
 * buffer (ld mp) in the workspace and unpad_f32 writes its top-left m×n block into the
 * caller's output, adding the old output (backward-data accumulate) and the bias (forward)
 * in the same order and with the same roundings as β = 1 and bias_add. Aligned shapes
 * (K, N multiples of 16) keep the zero-copy path of forward and backward-data. If even the
 * fully padded product has no algorithm, plan fails with the heuristic's status.
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
 * Workspace: [scratch][cuBLASLt workspace], the scratch sized for the largest direction (the
 * directions run one at a time and share it). FP8, per direction, in this order and each
 * region starting and ending on 256 bytes: the A copy (mp·kp bytes) when A is copied, the B
 * copy (np·kp bytes) when B is copied, the padded D (np·mp floats) when D is padded; e.g.
 * backward-weights without D padding Xᵀ (K·Mp) then dYᵀ (N·Mp). FP32 bias gradient: partial
 * sums (chunks·N doubles). The cuBLASLt part is the largest workspace any chosen algorithm
 * asked for (searched with at most 32 MiB). ws must be 256-byte aligned (alloc() is). */
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

/* How one FP8 direction is issued (file comment, "FP8 padding"): D (mp×np, col-major) = Aᵀ·B
 * with A col-major kp×mp (ld kp, op T) and B col-major kp×np (ld kp, op N). */
typedef struct fp8_dir {
    bool a_tr, b_tr;            /* the caller's buffer holds A / B transposed (row-major k×m / k×n) */
    bool a_copy, b_copy;        /* A / B is a (transposed and/or zero-padded) workspace copy */
    bool d_pad;                 /* D is an mp×np workspace buffer, written back by unpad_f32 */
    int64_t m, n, k;            /* the product's true dimensions */
    int64_t mp, np, kp;         /* as issued: kp = k rounded up to 16; mp, np = m, n unless d_pad */
    size_t off_a, off_b, off_d; /* workspace offsets of the A copy, B copy and padded D */
    size_t bytes;               /* scratch the direction uses (256-byte multiple) */
} fp8_dir;

typedef struct qs_cuda_linear_plan {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_LINEAR: first, for plan_destroy's dispatch */
    qs_linear_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes of X, W (forward) and dY (gradient) */
    bool fp8;
    fp8_dir f8[DIR_COUNT];  /* FP8 only */
    lt_gemm g[DIR_COUNT];
    bool bias_kernel;       /* forward adds b with a kernel (no epilogue) */
    int colsum_chunks;      /* FP32 dY with bias: row blocks of the db column sums */
    size_t lt_off;          /* offset of the cuBLASLt workspace */
    size_t lt_bytes;        /* its size */
    size_t ws_bytes;        /* total */
} qs_cuda_linear_plan_t;

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }
static int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }

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

/* The FP8 layout of direction dir (file comment, "FP8 padding"); pad_d: issue m and n rounded
 * up to 16 with D in the workspace (a no-op when both already are multiples of 16). */
static void fp8_layout(qs_cuda_linear_plan_t *lp, int dir, bool pad_d) {
    const int64_t M = lp->d.M, N = lp->d.N, K = lp->d.K;
    fp8_dir *f = &lp->f8[dir];
    *f = (fp8_dir){0};
    switch (dir) {
    case DIR_FWD: f->m = N; f->n = M; f->k = K; break;                           /* A = W, B = X */
    case DIR_DGRAD: f->m = K; f->n = M; f->k = N; f->a_tr = true; break;         /* A = Wᵀ, B = dY */
    default: f->m = K; f->n = N; f->k = M; f->a_tr = f->b_tr = true; break;      /* A = Xᵀ, B = dYᵀ */
    }
    f->kp = round16(f->k);
    f->mp = pad_d ? round16(f->m) : f->m;
    f->np = pad_d ? round16(f->n) : f->n;
    f->d_pad = f->mp != f->m || f->np != f->n;
    f->a_copy = f->a_tr || f->kp != f->k || f->mp != f->m;
    f->b_copy = f->b_tr || f->kp != f->k || f->np != f->n;
    size_t off = 0;
    if (f->a_copy) {
        f->off_a = off;
        off = align_up(off + (size_t)f->mp * (size_t)f->kp, WS_ALIGN);
    }
    if (f->b_copy) {
        f->off_b = off;
        off = align_up(off + (size_t)f->np * (size_t)f->kp, WS_ALIGN);
    }
    if (f->d_pad) {
        f->off_d = off;
        off = align_up(off + (size_t)f->np * (size_t)f->mp * sizeof(float), WS_ALIGN);
    }
    f->bytes = off;
}

/* Spec of direction dir for the plan's precision (layouts in the file comment; FP8 from
 * lp->f8[dir], set by fp8_layout first). */
static void make_spec(const qs_cuda_linear_plan_t *lp, int dir, gemm_spec *sp) {
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
    if (lp->fp8) {
        /* A (col-major kp×mp, ld kp) op T: W (forward, E4M3) or the Wᵀ / Xᵀ copy (E4M3);
         * B (col-major kp×np, ld kp) op N: X (forward, E4M3) or dY / the dYᵀ copy (E5M2);
         * D mp×np, ld mp: the caller's output (mp = m) or the padded workspace buffer */
        const fp8_dir *f = &lp->f8[dir];
        const bool fwd = dir == DIR_FWD;
        *sp = (gemm_spec){ct, ft, fwd ? ft : gt, fe, fwd ? fe : ge, T, Nn, f->mp, f->np, f->kp, f->kp, f->kp, f->mp,
                          true, false};
        return;
    }
    switch (dir) {
    case DIR_FWD: /* A = W buffer (K×N col-major, ld K) op T; B = X buffer (K×M, ld K) op N; D N×M ld N */
        *sp = (gemm_spec){ct, ft, ft, fe, fe, T, Nn, N, M, K, K, K, N, false, lp->d.has_bias};
        break;
    case DIR_DGRAD: /* A = W buffer (K×N, ld K) op N; B = dY buffer (N×M, ld N) op N; D K×M ld K */
        *sp = (gemm_spec){ct, ft, gt, fe, ge, Nn, Nn, K, M, N, K, N, K, false, false};
        break;
    default: /* backward-weights: A = X buffer (K×M, ld K) op N; B = dY buffer (N×M, ld N) op T; D K×N ld K */
        *sp = (gemm_spec){ct, ft, gt, fe, ge, Nn, T, K, N, M, K, N, K, false, false};
        break;
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

    qs_status st = QS_OK;
    for (int dir = 0; dir < DIR_COUNT && st == QS_OK; dir++) {
        if (lp->fp8) fp8_layout(lp, dir, false);
        gemm_spec sp;
        make_spec(lp, dir, &sp);
        bool no_algo = false;
        cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
        st = gemm_build(lp, dir, lt, &sp, &no_algo, &why);
        if (st == QS_OK && no_algo && sp.bias) { /* no fused-bias algorithm: plain product + kernel */
            gemm_destroy(&lp->g[dir]);
            lp->g[dir] = (lt_gemm){0};
            sp.bias = false;
            lp->bias_kernel = true;
            st = gemm_build(lp, dir, lt, &sp, &no_algo, &why);
        }
        if (st == QS_OK && no_algo && lp->fp8) { /* none with D in place: pad m and n too, D in ws */
            fp8_layout(lp, dir, true);
            if (lp->f8[dir].d_pad) {
                gemm_destroy(&lp->g[dir]);
                lp->g[dir] = (lt_gemm){0};
                make_spec(lp, dir, &sp);
                st = gemm_build(lp, dir, lt, &sp, &no_algo, &why);
            }
        }
        if (st == QS_OK && no_algo) st = no_algo_fail(lp, dir, why);
    }
    if (st != QS_OK) {
        qs_cuda_linear_plan_destroy(be, lp);
        return st;
    }
    if (d->has_bias && lp->fp8) lp->bias_kernel = true;

    /* workspace: scratch of the largest direction, then the cuBLASLt workspace */
    size_t scratch = 0;
    if (lp->fp8)
        for (int i = 0; i < DIR_COUNT; i++) scratch = max_sz(scratch, lp->f8[i].bytes);
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

/* FP8 direction dir: operands into their issued layout (copies in ws where fp8_layout says),
 * the product, then the padded D back into out. a_src/b_src: the caller's buffers (W or X; X
 * or dY); out: the caller's FP32 output; accumulate: out += (backward-data); bias: forward b or
 * NULL. */
static qs_status fp8_operand(cudaStream_t stream, const void *src, bool tr, int64_t r, int64_t k, int64_t rp,
                             int64_t kp, void *dst) {
    /* dst: row-major rp×kp (col-major kp×rp, ld kp), zero beyond (r, k) */
    if (tr) return qs_cuda_linear_transpose_u8(stream, src, k, r, dst, kp, rp); /* src row-major k×r */
    return qs_cuda_linear_pad_u8(stream, src, r, k, dst, rp, kp);                /* src row-major r×k */
}

static qs_status fp8_run(qs_cuda_linear_plan_t *lp, int dir, cublasLtHandle_t lt, cudaStream_t stream,
                         const void *a_src, const void *b_src, const float *sa, const float *sb, float *out,
                         bool accumulate, const float *bias, void *ws) {
    const fp8_dir *f = &lp->f8[dir];
    const void *A = a_src, *B = b_src;
    if (f->a_copy) {
        void *a = (char *)ws + f->off_a;
        QS_TRY(fp8_operand(stream, a_src, f->a_tr, f->m, f->k, f->mp, f->kp, a));
        A = a;
    }
    if (f->b_copy) {
        void *b = (char *)ws + f->off_b;
        QS_TRY(fp8_operand(stream, b_src, f->b_tr, f->n, f->k, f->np, f->kp, b));
        B = b;
    }
    if (!f->d_pad) {
        QS_TRY(gemm_run(lp, dir, lt, stream, A, B, out, accumulate ? 1.0f : 0.0f, sa, sb, NULL, ws));
        return bias ? qs_cuda_linear_bias_add(stream, f->n, f->m, bias, out) : QS_OK;
    }
    float *dp = (float *)(void *)((char *)ws + f->off_d);
    QS_TRY(gemm_run(lp, dir, lt, stream, A, B, dp, 0.0f, sa, sb, NULL, ws));
    return qs_cuda_linear_unpad_f32(stream, f->n, f->m, dp, f->mp, bias, accumulate, out);
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
    if (lp->fp8)
        return fp8_run(lp, dir, lt, st, w->data, x->data, w->scale, x->scale, y, false, lp->d.has_bias ? b : NULL, ws);
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
    if (lp->fp8) return fp8_run(lp, dir, lt, st, w->data, dy->data, w->scale, dy->scale, dx, accumulate, NULL, ws);
    return gemm_run(lp, dir, lt, st, w->data, dy->data, dx, accumulate ? 1.0f : 0.0f, w->scale, dy->scale, NULL, ws);
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
    QS_TRY(qs_bias_grad_check(dy->dt, db, lp->d.has_bias, "linear_backward_weights"));
    QS_TRY(ws_check(lp, ws, "linear_backward_weights"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    const cudaStream_t st = stream_of(be, s);
    const int dir = DIR_WGRAD;
    if (lp->fp8) /* Xᵀ (K×Mp) and dYᵀ (N×Mp) copies, zero beyond column M */
        QS_TRY(fp8_run(lp, dir, lt, st, x->data, dy->data, x->scale, dy->scale, dw, false, NULL, ws));
    else
        QS_TRY(gemm_run(lp, dir, lt, st, x->data, dy->data, dw, 0.0f, x->scale, dy->scale, NULL, ws));
    if (!db) return QS_OK;
    return qs_cuda_linear_column_sums(st, lp->d.M, lp->d.N, dy->data, lp->colsum_chunks,
                                      lp->colsum_chunks > 1 ? (double *)ws : NULL, db);
}
