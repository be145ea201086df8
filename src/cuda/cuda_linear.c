/* src/cuda/cuda_linear.c — defines: the CUDA backend's GEMMs through one cuBLASLt wrapper for
 * every GEMM precision (FP32, TF32, BF16, FP16, FP8; INT8 is refused): the fully connected
 * layer (linear_*) and the strided batched matmul of attention (bmm_*).
 *
 * Products. Each plan holds up to three products ("directions"), each described in qsync's
 * row-major terms by the same rule. For every batch b < batch (matrices contiguous, one after
 * another, batch stride = the matrix size; a Linear has batch 1):
 *     D_b (n×m, row-major) = α · B_b · A_bᵀ [+ D_b],   i.e. D[j][i] = α·Σ_k B[j][k]·A[i][k],
 * A stored row-major (m, k), or (k, m) when a_tr; B stored (n, k), or (k, n) when b_tr.
 * cuBLASLt is column-major and computes D' (m×n) = α·op(A')·op(B') + β·C'; a row-major (R, C)
 * buffer is the column-major C×R matrix (its transpose), so D's buffer is D' = A·Bᵀ with
 *     A' = A's buffer: op T, ld k (stored (m, k))  |  op N, ld m (stored (k, m), a_tr)
 *     B' = B's buffer: op N, ld k (stored (n, k))  |  op T, ld n (stored (k, n), b_tr)
 *     D' ld m; batch strides m·k, n·k, m·n elements.
 * Linear (X (M,K), W (N,K), dY (M,N), Y (M,N), b (N)):
 *   forward          Y (M,N)  = X·Wᵀ      m=N n=M k=K   A = W (m,k)        B = X (n,k)
 *   backward-data    dX (M,K) = dY·W      m=K n=M k=N   A = W (k,m) a_tr   B = dY (n,k)
 *   backward-weights dW (N,K) = dYᵀ·X     m=K n=N k=M   A = X (k,m) a_tr   B = dY (k,n) b_tr
 * Batched matmul (qs_bmm_desc, a_b (M,K); b_b (N,K) with trans_b, else (K,N); dc_b (M,N)):
 *   trans_b  forward     c = α·a·bᵀ    m=N n=M k=K   A = b (m,k)        B = a (n,k)
 *            backward-a  da = α·dc·b   m=K n=M k=N   A = b (k,m) a_tr   B = dc (n,k)
 *            backward-b  db = α·dcᵀ·a  m=K n=N k=M   A = a (k,m) a_tr   B = dc (k,n) b_tr
 *   !trans_b forward     c = α·a·b     m=N n=M k=K   A = b (k,m) a_tr   B = a (n,k)
 *            backward-a  da = α·dc·bᵀ  m=K n=M k=N   A = b (m,k)        B = dc (n,k)
 *            backward-b  db = α·aᵀ·dc  m=N n=K k=M   A = dc (k,m) a_tr  B = a (k,n) b_tr
 * Element types: forward products take the forward dtype for both; a backward product takes
 * the gradient dtype for dY / dc and the forward dtype for the other operand. FP8 on Hopper
 * takes only "TN" (A' op T, B' op N, i.e. neither a_tr nor b_tr) and E4M3×E4M3 / E4M3×E5M2 /
 * E5M2×E4M3 (never E5M2×E5M2, which no product here needs: only dY / dc is E5M2). Per-tensor
 * dequantization scales (device memory) go to cuBLASLt as CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER
 * (one scale for the whole batched tensor); α is 1 for a Linear and the descriptor's alpha for a
 * bmm (cuBLASLt applies α on top of the operand scales). D and C are FP32 for every precision
 * (C = D: β = 1 accumulates), except a Linear forward's into a BF16 y (below).
 *
 * BF16 outputs (qs_linear_desc.y_dt and dx_dt, F32 or BF16, checked at plan time; a pointwise
 * conv run as a Linear that feeds a batch norm, or whose input gradient is a batch norm's or
 * ReLU's alone). Without FP8 and (forward) without a bias, the product is built with D (and C)
 * of type CUDA_R_16BF (gemm_dir.ddt): cuBLASLt rounds the FP32 accumulator to BF16 itself and
 * writes y or dx, no extra pass. Every other case — FP8, a bias, or no algorithm (or an input
 * type that cuBLASLt pairs with no BF16 D, e.g. FP16 or FP32) — computes the FP32 result as for
 * an FP32 output into a workspace region and rounds it to nearest even with the backend's cast
 * kernel (qs_cuda_cast). A BF16 dx is never accumulated into. bmm outputs stay FP32.
 *
 * FP8 padding. Every FP8 product is issued as "TN" with A' a row-major m×k byte matrix and B' a
 * row-major n×k one. cuBLASLt's FP8 kernels need 16-byte (= 16-element) leading dimensions for
 * A' and B', i.e. k a multiple of 16, so k is always issued as kp = k rounded up to 16, the
 * extra columns of A' and B' zero (a zero byte is +0 in E4M3 and E5M2: the padded terms add
 * exactly nothing). An operand is read straight from the caller's buffer when it already has
 * that layout (not transposed, k % 16 == 0); otherwise (a_tr / b_tr, or padding) it is copied,
 * batch by batch, into the workspace by cuda_linear_kernels.cu (transpose_u8 for a transposed
 * source, pad_u8 for a row-major one), zero-filled, every call — except that a Linear's
 * transposed operand is read in place from the caller's transposed copy (qs_operand.data_t,
 * which quantize writes in the same pass as the operand) when one is given and no padding is
 * needed (k % 16 == 0 and, for the padded-D plans, m or n already a multiple of 16). E.g. for a Linear (Mp, Np, Kp:
 * M, N, K rounded up to 16): forward reads W and X in place when K % 16 == 0; backward-data
 * always copies Wᵀ (K×Np), and dY when N % 16 != 0; backward-weights always copies Xᵀ (K×Mp) and
 * dYᵀ (N×Mp). For a bmm, the forward with trans_b (QKᵀ) and backward-a without (dc·Vᵀ) read both
 * operands in place when their k is a multiple of 16; the four other products transpose one or
 * both operands. D goes straight into the caller's output with its own leading dimension (m,
 * FP32) where cuBLASLt has an algorithm for that. Where it has none (the heuristic says
 * NOT_SUPPORTED, e.g. m or n not a multiple of 16, or a batch stride m·n·4 bytes that is not a
 * multiple of 16), the plan pads everything instead: m and n are issued as mp, np (rounded up to
 * 16, A' and B' copies with zero rows mp-m / np-n), D is an FP32 mp×np buffer per batch (ld mp)
 * in the workspace and unpad_f32 writes its top-left m×n block into the caller's output, adding
 * the old output (accumulate) and the bias (Linear forward) in the same order and with the same
 * roundings as β = 1 and bias_add. If even the fully padded product has no algorithm, plan
 * fails with the heuristic's status.
 *
 * Alignment. Each direction has two algorithms, chosen once per shape and types by the
 * heuristic: the primary one for pointers aligned to 16 bytes (every buffer from alloc() is
 * 256-aligned) and, where cuBLASLt has one, a fallback for pointers aligned only to their
 * element size (views into a buffer); each call picks by the pointers it gets. With batch > 1,
 * every matrix of a batch must be as aligned as the pointer the algorithm was chosen for, so a
 * matrix whose batch stride in bytes is not a multiple of 16 is declared (to the heuristic and
 * to the per-call choice) with the alignment its stride guarantees (the largest power of two
 * dividing it). A plan's descriptors are updated per call (operand scale and bias pointers), so
 * one plan must not be executed from two host threads at once.
 *
 * Bias (Linear only): forward uses CUBLASLT_EPILOGUE_BIAS with the FP32 bias where cuBLASLt has
 * an algorithm for it (FP32/TF32/BF16/FP16, FP32 output); FP8 with FP32 output wants a BF16 bias
 * vector, so the FP8 forward (and any precision whose epilogue finds no algorithm) adds b with a
 * kernel. db (only with an FP32 dY) is a deterministic double-accumulated column-sum kernel.
 *
 * Workspace: [scratch][cuBLASLt workspace], the scratch sized for the largest direction (the
 * directions run one at a time and share it). FP8, per direction, in this order and each
 * region starting and ending on 256 bytes: the A' copies (batch·mp·kp bytes) when A is copied,
 * the B' copies (batch·np·kp bytes) when B is copied, the padded D (batch·np·mp floats) when D
 * is padded; e.g. a Linear's backward-weights without D padding Xᵀ (K·Mp) then dYᵀ (N·Mp). An
 * FP8 bmm's scratch is therefore of the order of its operands' size (bytes per element of a, b,
 * dc). Linear with an FP32 bias gradient: partial sums (chunks·N doubles). Linear with a BF16 y
 * or dx not written by cuBLASLt: the FP32 Y (M·N floats) or dX (M·K), from a 256-byte boundary
 * after the forward's and backward-data's FP8 regions (the column sums, of another direction,
 * may share its bytes). The cuBLASLt part is
 * the largest workspace any chosen algorithm asked for (searched with at most 32 MiB). ws must
 * be 256-byte aligned (alloc() is). */
#include "cuda/cuda_backend.h"

#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_linear_kernels.h"

#define LT_MAX_WORKSPACE ((uint64_t)32 << 20) /* heuristic search limit (Hopper guidance) */
#define LT_ALIGN 16u                          /* pointer alignment of the primary algorithms */
#define WS_ALIGN ((size_t)256)

enum { DIR_FWD = 0, DIR_BWD1, DIR_BWD2, DIR_COUNT }; /* BWD1: backward-data / -a; BWD2: -weights / -b */
static const char *const LINEAR_DIR_NAME[DIR_COUNT] = {"forward", "backward-data", "backward-weights"};
static const char *const BMM_DIR_NAME[DIR_COUNT] = {"forward", "backward-a", "backward-b"};

/* One product in row-major terms (file comment, "Products"). */
typedef struct gemm_dir {
    int64_t m, n, k;
    bool a_tr, b_tr;   /* A stored (k, m) / B stored (k, n) instead of (m, k) / (n, k) */
    qs_dtype adt, bdt; /* storage dtypes of A and B */
    qs_dtype ddt;      /* dtype of D (and C): F32, or BF16 (a Linear's BF16 y or dx; never FP8) */
    bool bias;         /* a bias epilogue is wanted (Linear forward) */
} gemm_dir;

/* One cuBLASLt product of the plan. */
typedef struct lt_gemm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld; /* C and D share ld (m×n, FP32 or BF16: d_elem) */
    cublasLtMatmulAlgo_t algo;         /* A, B, C/D aligned to align_a, align_b, align_d; bias to 16 */
    cublasLtMatmulAlgo_t algo_any;     /* element-aligned pointers; valid when has_any */
    bool has_any;
    uint32_t align_a, align_b, align_d; /* pointer alignment of algo (16, less for odd batch strides) */
    size_t ws_bytes;                   /* the larger workspace of the two algorithms */
    size_t a_elem, b_elem, d_elem;     /* element sizes of A, B and C/D (bytes) */
    bool scaled;                       /* FP8: A/B scale pointers */
    bool bias;                         /* CUBLASLT_EPILOGUE_BIAS */
} lt_gemm;

/* How one FP8 direction is issued (file comment, "FP8 padding"): per batch, D (mp×np,
 * col-major) = A'ᵀ·B' with A' col-major kp×mp (ld kp, op T) and B' col-major kp×np (ld kp, op N). */
typedef struct fp8_dir {
    bool a_copy, b_copy;        /* A' / B' is a (transposed and/or zero-padded) workspace copy */
    bool d_pad;                 /* D is an mp×np workspace buffer per batch, written back by unpad_f32 */
    int64_t mp, np, kp;         /* as issued: kp = k rounded up to 16; mp, np = m, n unless d_pad */
    size_t off_a, off_b, off_d; /* workspace offsets of the A' copies, B' copies and padded D */
    size_t bytes;               /* scratch the direction uses (256-byte multiple) */
} fp8_dir;

/* The cuBLASLt part of a plan: what Linear and bmm plans share. */
typedef struct lt_plan {
    char what[128];                  /* the problem, for messages: "linear M=.. N=.. K=.. at fp8" */
    const char *const *dir_name;
    qs_precision prec;
    bool fp8;
    int64_t batch;
    float alpha;
    gemm_dir dir[DIR_COUNT];
    fp8_dir f8[DIR_COUNT];           /* FP8 only */
    lt_gemm g[DIR_COUNT];
    size_t lt_off;                   /* offset of the cuBLASLt workspace */
    size_t lt_bytes;                 /* its size */
    size_t ws_bytes;                 /* total */
} lt_plan;

typedef struct qs_cuda_linear_plan {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_LINEAR: first, for plan_destroy's dispatch */
    qs_linear_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes of X, W (forward) and dY (gradient) */
    int colsum_chunks;      /* FP32 dY with bias: row blocks of the db column sums */
    bool y_narrow;          /* BF16 y without a BF16-D product: FP32 Y at ws + narrow_off, then cast */
    bool dx_narrow;         /* the same for a BF16 dx (FP32 dX at ws + narrow_off) */
    size_t narrow_off;
    lt_plan lt;
} qs_cuda_linear_plan_t;

typedef struct qs_cuda_bmm_plan {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_BMM: first */
    qs_bmm_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes of a, b (forward) and dc (gradient) */
    lt_plan lt;
} qs_cuda_bmm_plan_t;

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
static qs_status lt_fail(const lt_plan *p, int dir, const char *call, cublasStatus_t st) {
    return QS_FAIL(QS_ERR_BACKEND, "%s failed for %s (%s): status %d (%s)", call, p->what, p->dir_name[dir], (int)st,
                   lt_name(st));
}

#define LT_TRY(call)                                                                                               \
    do {                                                                                                           \
        cublasStatus_t lt_st_ = (call);                                                                            \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS) return lt_fail(p, dir, #call, lt_st_);                               \
    } while (0)

/* What one product looks like to cuBLASLt (column-major; file comment, "Products"). */
typedef struct gemm_spec {
    cublasComputeType_t ct;
    cudaDataType_t at, bt, dt;   /* A', B' and C'/D' element types */
    size_t a_elem, b_elem, d_elem;
    cublasOperation_t ta, tb;
    int64_t m, n, k, lda, ldb, ldd;
    int64_t batch, stride_a, stride_b, stride_d; /* strides in elements (used when batch > 1) */
    bool scaled, bias;
} gemm_spec;

/* cuBLASLt element type and size of a GEMM operand dtype. */
static void lt_type(qs_dtype dt, cudaDataType_t *t, size_t *elem) {
    switch (dt) {
    case QS_BF16: *t = CUDA_R_16BF; *elem = 2; break;
    case QS_F16: *t = CUDA_R_16F; *elem = 2; break;
    case QS_F8E4M3: *t = CUDA_R_8F_E4M3; *elem = 1; break;
    case QS_F8E5M2: *t = CUDA_R_8F_E5M2; *elem = 1; break;
    default: *t = CUDA_R_32F; *elem = 4; break; /* F32 (FP32, TF32) */
    }
}

/* Pointer alignment (bytes) that every matrix of a batch keeps when the first one is 16-aligned:
 * 16, or the largest power of two dividing the batch stride in bytes when that is less. */
static uint32_t batch_align(int64_t batch, int64_t stride, size_t elem) {
    if (batch <= 1) return LT_ALIGN;
    const uint64_t bytes = (uint64_t)stride * elem;
    uint32_t a = LT_ALIGN;
    while (a > 1 && bytes % a) a >>= 1;
    return a;
}

/* One heuristic query with the given pointer alignments. *found = false when cuBLASLt has no
 * algorithm (CUBLAS_STATUS_NOT_SUPPORTED or zero results); other failures are errors. The first
 * answer is taken, never a timed choice, so every process picks the same algorithm (bitwise
 * resume); for FP32 at 8192³ on an H100 it is the kernel cublasGemmEx and PyTorch run
 * (bench/cuda/bench_lt_algos.cu, docs/BENCHMARKS.md). */
static qs_status lt_heuristic(const lt_plan *p, int dir, cublasLtHandle_t lt, lt_gemm *g, uint32_t align_a,
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
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(p, dir, call, st);
    if (dst != CUBLAS_STATUS_SUCCESS) return lt_fail(p, dir, "cublasLtMatmulPreferenceDestroy", dst);
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
    *g = (lt_gemm){0};
}

/* A layout of `rows`×`cols` (column-major, leading dimension ld) elements of type t, with
 * `batch` matrices `stride` elements apart when batch > 1. */
static qs_status layout_create(const lt_plan *p, int dir, cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows,
                               int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    LT_TRY(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        const int32_t count = (int32_t)batch;
        LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                sizeof stride));
    }
    return QS_OK;
}

/* Build direction dir from spec: descriptor, layouts, both algorithms. *no_algo is set (and
 * QS_OK returned) when cuBLASLt has no primary algorithm; the caller decides whether that is an
 * error. */
static qs_status gemm_build(lt_plan *p, int dir, cublasLtHandle_t lt, const gemm_spec *sp, bool *no_algo,
                            cublasStatus_t *why) {
    lt_gemm *g = &p->g[dir];
    *no_algo = false;
    g->a_elem = sp->a_elem;
    g->b_elem = sp->b_elem;
    g->d_elem = sp->d_elem;
    g->scaled = sp->scaled;
    g->bias = sp->bias;
    g->align_a = batch_align(sp->batch, sp->stride_a, sp->a_elem);
    g->align_b = batch_align(sp->batch, sp->stride_b, sp->b_elem);
    g->align_d = batch_align(sp->batch, sp->stride_d, sp->d_elem);
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
    QS_TRY(layout_create(p, dir, &g->la, sp->at, an ? sp->m : sp->k, an ? sp->k : sp->m, sp->lda, sp->batch,
                         sp->stride_a));
    QS_TRY(layout_create(p, dir, &g->lb, sp->bt, bn ? sp->k : sp->n, bn ? sp->n : sp->k, sp->ldb, sp->batch,
                         sp->stride_b));
    QS_TRY(layout_create(p, dir, &g->ld, sp->dt, sp->m, sp->n, sp->ldd, sp->batch, sp->stride_d));

    bool found = false;
    size_t ws = 0;
    QS_TRY(lt_heuristic(p, dir, lt, g, g->align_a, g->align_b, g->align_d, &g->algo, &ws, &found, why));
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
    QS_TRY(lt_heuristic(p, dir, lt, g, (uint32_t)sp->a_elem, (uint32_t)sp->b_elem, (uint32_t)sp->d_elem,
                        &g->algo_any, &ws, &g->has_any, &why_any));
    if (g->has_any) g->ws_bytes = max_sz(g->ws_bytes, ws);
    return QS_OK;
}

/* "no algorithm" as QS_ERR_BACKEND, with what usually causes it. */
static qs_status no_algo_fail(const lt_plan *p, int dir, cublasStatus_t why) {
    const char *hint = p->fp8 ? " (cuBLASLt's FP8 GEMMs need 16-byte leading dimensions and batch strides; even "
                                "the fully zero-padded product found none)"
                              : "";
    return QS_FAIL(QS_ERR_BACKEND, "cublasLtMatmulAlgoGetHeuristic failed for %s (%s): status %d (%s): no algorithm%s",
                   p->what, p->dir_name[dir], (int)why, lt_name(why), hint);
}

static void lt_plan_release(lt_plan *p) {
    for (int i = 0; i < DIR_COUNT; i++) gemm_destroy(&p->g[i]);
}

void qs_cuda_linear_plan_destroy(qs_backend *be, void *plan) {
    qs_cuda_linear_plan_t *lp = plan;
    if (!lp) return;
    lt_plan_release(&lp->lt);
    lp->kind = 0;
    free(lp);
}

void qs_cuda_bmm_plan_destroy(qs_backend *be, void *plan) {
    qs_cuda_bmm_plan_t *bp = plan;
    if (!bp) return;
    lt_plan_release(&bp->lt);
    bp->kind = 0;
    free(bp);
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
    *out = NULL;
    if (!cb->lt) {
        QS_TRY(qs_cuda_make_current(cb));
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
static void fp8_layout(lt_plan *p, int dir, bool pad_d) {
    const gemm_dir *d = &p->dir[dir];
    fp8_dir *f = &p->f8[dir];
    *f = (fp8_dir){0};
    f->kp = round16(d->k);
    f->mp = pad_d ? round16(d->m) : d->m;
    f->np = pad_d ? round16(d->n) : d->n;
    f->d_pad = f->mp != d->m || f->np != d->n;
    f->a_copy = d->a_tr || f->kp != d->k || f->mp != d->m;
    f->b_copy = d->b_tr || f->kp != d->k || f->np != d->n;
    const size_t batch = (size_t)p->batch;
    size_t off = 0;
    if (f->a_copy) {
        f->off_a = off;
        off = align_up(off + batch * (size_t)f->mp * (size_t)f->kp, WS_ALIGN);
    }
    if (f->b_copy) {
        f->off_b = off;
        off = align_up(off + batch * (size_t)f->np * (size_t)f->kp, WS_ALIGN);
    }
    if (f->d_pad) {
        f->off_d = off;
        off = align_up(off + batch * (size_t)f->np * (size_t)f->mp * sizeof(float), WS_ALIGN);
    }
    f->bytes = off;
}

/* Spec of direction dir for the plan's precision (file comment, "Products"; FP8 from
 * p->f8[dir], set by fp8_layout first). want_bias: ask for the bias epilogue where the
 * direction wants one (never for FP8). */
static void make_spec(const lt_plan *p, int dir, bool want_bias, gemm_spec *sp) {
    const gemm_dir *d = &p->dir[dir];
    *sp = (gemm_spec){0};
    sp->ct = p->prec == QS_PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    lt_type(d->adt, &sp->at, &sp->a_elem);
    lt_type(d->bdt, &sp->bt, &sp->b_elem);
    lt_type(d->ddt, &sp->dt, &sp->d_elem);
    sp->batch = p->batch;
    sp->scaled = p->fp8;
    sp->bias = want_bias && d->bias && !p->fp8;
    /* FP8: A' (mp, kp) and B' (np, kp) as issued, never transposed; otherwise as stored */
    const fp8_dir *f = &p->f8[dir];
    const int64_t m = p->fp8 ? f->mp : d->m, n = p->fp8 ? f->np : d->n, k = p->fp8 ? f->kp : d->k;
    const bool a_tr = !p->fp8 && d->a_tr, b_tr = !p->fp8 && d->b_tr;
    sp->m = m;
    sp->n = n;
    sp->k = k;
    sp->ta = a_tr ? CUBLAS_OP_N : CUBLAS_OP_T;
    sp->lda = a_tr ? m : k;
    sp->tb = b_tr ? CUBLAS_OP_T : CUBLAS_OP_N;
    sp->ldb = b_tr ? n : k;
    sp->ldd = m;
    sp->stride_a = m * k;
    sp->stride_b = n * k;
    sp->stride_d = m * n;
}

/* Build every direction of p (p->dir, prec, batch, alpha, what and dir_name set), with the
 * fallbacks of the file comment: a bias epilogue without an algorithm becomes a bias kernel; a
 * BF16 D that cuBLASLt cannot write (no algorithm, or a type combination it refuses) becomes an
 * FP32 D (p->dir[dir].ddt is then F32: the front end narrows it); an FP8 product without an
 * algorithm for D in place is padded in m and n too. */
static qs_status lt_plan_dirs(lt_plan *p, cublasLtHandle_t lt) {
    qs_status st = QS_OK;
    for (int dir = 0; dir < DIR_COUNT && st == QS_OK; dir++) {
        if (p->fp8) fp8_layout(p, dir, false);
        gemm_spec sp;
        make_spec(p, dir, true, &sp);
        bool no_algo = false;
        cublasStatus_t why = CUBLAS_STATUS_SUCCESS;
        st = gemm_build(p, dir, lt, &sp, &no_algo, &why);
        if (st == QS_OK && no_algo && sp.bias) { /* no fused-bias algorithm: plain product + kernel */
            gemm_destroy(&p->g[dir]);
            make_spec(p, dir, false, &sp);
            st = gemm_build(p, dir, lt, &sp, &no_algo, &why);
        }
        if ((st != QS_OK || no_algo) && p->dir[dir].ddt != QS_F32) { /* no BF16 D: FP32 D, narrowed after */
            if (st != QS_OK) qs_error_clear();
            gemm_destroy(&p->g[dir]);
            p->dir[dir].ddt = QS_F32;
            make_spec(p, dir, true, &sp);
            st = gemm_build(p, dir, lt, &sp, &no_algo, &why);
            if (st == QS_OK && no_algo && sp.bias) {
                gemm_destroy(&p->g[dir]);
                make_spec(p, dir, false, &sp);
                st = gemm_build(p, dir, lt, &sp, &no_algo, &why);
            }
        }
        if (st == QS_OK && no_algo && p->fp8) { /* none with D in place: pad m and n too, D in ws */
            fp8_layout(p, dir, true);
            if (p->f8[dir].d_pad) {
                gemm_destroy(&p->g[dir]);
                make_spec(p, dir, true, &sp);
                st = gemm_build(p, dir, lt, &sp, &no_algo, &why);
            }
        }
        if (st == QS_OK && no_algo) st = no_algo_fail(p, dir, why);
    }
    return st;
}

/* Lay out the workspace of the built directions: `scratch` bytes the front end needs besides
 * the FP8 copies, then cuBLASLt's. */
static void lt_plan_layout(lt_plan *p, size_t scratch) {
    if (p->fp8)
        for (int i = 0; i < DIR_COUNT; i++) scratch = max_sz(scratch, p->f8[i].bytes);
    p->lt_off = align_up(scratch, WS_ALIGN);
    for (int i = 0; i < DIR_COUNT; i++) p->lt_bytes = max_sz(p->lt_bytes, p->g[i].ws_bytes);
    p->ws_bytes = p->lt_bytes ? p->lt_off + p->lt_bytes : scratch;
}

/* lt_plan_dirs, then lt_plan_layout. */
static qs_status lt_plan_build(lt_plan *p, cublasLtHandle_t lt, size_t scratch) {
    QS_TRY(lt_plan_dirs(p, lt));
    lt_plan_layout(p, scratch);
    return QS_OK;
}

/* The precision checks every GEMM plan of this backend starts with (`op` names it). */
static qs_status prec_check(const qs_cuda_backend *cb, qs_precision prec, const char *op) {
    if ((unsigned)prec >= QS_PREC_COUNT) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: unknown precision %d", op, (int)prec);
    const int cc = cb->props.major * 10 + cb->props.minor;
    if (prec == QS_PREC_INT8)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: int8 is not available for GEMMs on the CUDA backend (cuBLASLt's int8 GEMMs have int32 "
                       "outputs and other layout rules; not wired up); assign fp8, bf16, fp16, tf32 or fp32",
                       op);
    if (prec == QS_PREC_FP8 && cc < 89)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: fp8 GEMMs need compute capability 8.9 or newer; device %d is %d.%d (%s); assign bf16 or "
                       "fp16",
                       op, cb->device, cb->props.major, cb->props.minor, cb->props.name);
    if ((prec == QS_PREC_BF16 || prec == QS_PREC_TF32) && cc < 80)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: %s GEMMs need compute capability 8.0 or newer; device %d is %d.%d (%s); assign fp16 or "
                       "fp32",
                       op, qs_precision_name(prec), cb->device, cb->props.major, cb->props.minor, cb->props.name);
    return QS_OK;
}

/* A gemm_dir from its fields (row-major terms, file comment "Products"). */
static gemm_dir gemm_dir_of(int64_t m, int64_t n, int64_t k, bool a_tr, bool b_tr, qs_dtype adt, qs_dtype bdt) {
    return (gemm_dir){.m = m, .n = n, .k = k, .a_tr = a_tr, .b_tr = b_tr, .adt = adt, .bdt = bdt, .ddt = QS_F32,
                      .bias = false};
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
    qs_cuda_backend *cb = qs_cuda_be(be);
    QS_TRY(prec_check(cb, d->prec, "linear_plan"));
    QS_TRY(qs_gemm_out_dtype_check("linear_plan", d->y_dt, d->dx_dt));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));

    qs_cuda_linear_plan_t *lp = calloc(1, sizeof *lp);
    if (!lp) return QS_FAIL(QS_ERR_OOM, "linear_plan: out of memory for the plan");
    lp->kind = QS_CUDA_PLAN_LINEAR;
    lp->d = *d;
    lp->fdt = qs_precision_operand_dtype(d->prec, false);
    lp->gdt = qs_precision_operand_dtype(d->prec, true);
    lt_plan *p = &lp->lt;
    snprintf(p->what, sizeof p->what, "linear M=%lld N=%lld K=%lld at %s", (long long)d->M, (long long)d->N,
             (long long)d->K, qs_precision_name(d->prec));
    p->dir_name = LINEAR_DIR_NAME;
    p->prec = d->prec;
    p->fp8 = d->prec == QS_PREC_FP8;
    p->batch = 1;
    p->alpha = 1.0f;
    const int64_t M = d->M, N = d->N, K = d->K;
    p->dir[DIR_FWD] = gemm_dir_of(N, M, K, false, false, lp->fdt, lp->fdt);  /* A = W, B = X */
    p->dir[DIR_FWD].bias = d->has_bias;
    const bool y16 = d->y_dt == QS_BF16;
    if (y16 && !p->fp8 && !d->has_bias) p->dir[DIR_FWD].ddt = QS_BF16; /* cuBLASLt writes y (if it can) */
    p->dir[DIR_BWD1] = gemm_dir_of(K, M, N, true, false, lp->fdt, lp->gdt);  /* A = W (k,m), B = dY */
    const bool dx16 = d->dx_dt == QS_BF16;
    if (dx16 && !p->fp8) p->dir[DIR_BWD1].ddt = QS_BF16; /* cuBLASLt writes dx (if it can) */
    p->dir[DIR_BWD2] = gemm_dir_of(K, N, M, true, true, lp->fdt, lp->gdt);   /* A = X (k,m), B = dY (k,n) */
    size_t scratch = 0;
    if (d->has_bias && lp->gdt == QS_F32) {
        lp->colsum_chunks = qs_cuda_linear_column_sum_chunks(M, N, cb->props.multiProcessorCount);
        scratch = qs_cuda_linear_column_sum_bytes(N, lp->colsum_chunks);
    }
    qs_status st = lt_plan_dirs(p, lt);
    if (st != QS_OK) {
        qs_cuda_linear_plan_destroy(be, lp);
        return st;
    }
    /* a BF16 y (dx) that the forward (backward-data) product does not write itself: FP32 Y (dX)
     * in the scratch, after that direction's FP8 copies (the column sums belong to
     * backward-weights: they may overlap it) */
    lp->y_narrow = y16 && p->dir[DIR_FWD].ddt != QS_BF16;
    lp->dx_narrow = dx16 && p->dir[DIR_BWD1].ddt != QS_BF16;
    if (lp->y_narrow || lp->dx_narrow) {
        const size_t f8 = p->fp8 ? max_sz(p->f8[DIR_FWD].bytes, p->f8[DIR_BWD1].bytes) : 0;
        const size_t cols = max_sz(lp->y_narrow ? (size_t)N : 0, lp->dx_narrow ? (size_t)K : 0);
        lp->narrow_off = align_up(f8, WS_ALIGN);
        scratch = max_sz(scratch, lp->narrow_off + align_up((size_t)M * cols * sizeof(float), WS_ALIGN));
    }
    lt_plan_layout(p, scratch);
    *plan = lp;
    *workspace = p->ws_bytes;
    return QS_OK;
}

/* Contract (backend.h bmm_plan): for b < batch, c_b (M,N) = alpha·a_b (M,K)·op(b_b) at precision
 * d->prec; *plan receives a plan for forward, backward-a and backward-b, *workspace the bytes of
 * ws they need (FP8: operand copies of the order of the operands' size). */
qs_status qs_cuda_bmm_plan(qs_backend *be, const qs_bmm_desc *d, void **plan, size_t *workspace) {
    if (!be || !d || !plan || !workspace)
        return QS_FAIL(QS_ERR_INVALID_ARG, "bmm_plan: NULL backend, descriptor or output");
    *plan = NULL;
    *workspace = 0;
    if (d->batch < 1 || d->M < 1 || d->N < 1 || d->K < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "bmm_plan: batch=%lld M=%lld N=%lld K=%lld must all be >= 1",
                       (long long)d->batch, (long long)d->M, (long long)d->N, (long long)d->K);
    if (d->batch > INT32_MAX || d->M > INT32_MAX || d->N > INT32_MAX || d->K > INT32_MAX)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "bmm_plan: batch=%lld M=%lld N=%lld K=%lld: cuBLASLt takes 32-bit counts",
                       (long long)d->batch, (long long)d->M, (long long)d->N, (long long)d->K);
    if (!isfinite(d->alpha))
        return QS_FAIL(QS_ERR_INVALID_ARG, "bmm_plan: alpha = %g; it must be finite", (double)d->alpha);
    QS_TRY(prec_check(qs_cuda_be(be), d->prec, "bmm_plan"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));

    qs_cuda_bmm_plan_t *bp = calloc(1, sizeof *bp);
    if (!bp) return QS_FAIL(QS_ERR_OOM, "bmm_plan: out of memory for the plan");
    bp->kind = QS_CUDA_PLAN_BMM;
    bp->d = *d;
    bp->fdt = qs_precision_operand_dtype(d->prec, false);
    bp->gdt = qs_precision_operand_dtype(d->prec, true);
    lt_plan *p = &bp->lt;
    snprintf(p->what, sizeof p->what, "bmm batch=%lld M=%lld N=%lld K=%lld%s at %s", (long long)d->batch,
             (long long)d->M, (long long)d->N, (long long)d->K, d->trans_b ? " trans_b" : "",
             qs_precision_name(d->prec));
    p->dir_name = BMM_DIR_NAME;
    p->prec = d->prec;
    p->fp8 = d->prec == QS_PREC_FP8;
    p->batch = d->batch;
    p->alpha = d->alpha;
    const int64_t M = d->M, N = d->N, K = d->K;
    const qs_dtype f = bp->fdt, g = bp->gdt;
    if (d->trans_b) {
        p->dir[DIR_FWD] = gemm_dir_of(N, M, K, false, false, f, f);  /* A = b (N,K), B = a (M,K) */
        p->dir[DIR_BWD1] = gemm_dir_of(K, M, N, true, false, f, g);  /* A = b (N,K) = (k,m), B = dc */
        p->dir[DIR_BWD2] = gemm_dir_of(K, N, M, true, true, f, g);   /* A = a (M,K) = (k,m), B = dc (k,n) */
    } else {
        p->dir[DIR_FWD] = gemm_dir_of(N, M, K, true, false, f, f);   /* A = b (K,N) = (k,m), B = a */
        p->dir[DIR_BWD1] = gemm_dir_of(K, M, N, false, false, f, g); /* A = b (K,N) = (m,k), B = dc */
        p->dir[DIR_BWD2] = gemm_dir_of(N, K, M, true, true, g, f);   /* A = dc (M,N) = (k,m), B = a (k,n) */
    }
    qs_status st = lt_plan_build(p, lt, 0);
    if (st != QS_OK) {
        qs_cuda_bmm_plan_destroy(be, bp);
        return st;
    }
    *plan = bp;
    *workspace = p->ws_bytes;
    return QS_OK;
}

/* ---- execution ---- */

static qs_status plan_check(const void *plan, qs_cuda_plan_kind kind, const char *what) {
    const char *maker = kind == QS_CUDA_PLAN_LINEAR ? "linear_plan" : "bmm_plan";
    if (!plan) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: plan is NULL; create it with %s", what, maker);
    if (*(const qs_cuda_plan_kind *)plan != kind)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan passed is of another operator kind; pass a plan from %s", what,
                       maker);
    return QS_OK;
}

/* An operand of storage dtype `expect` with the scale its dtype needs, per tensor. per_row:
 * QS_ERR_UNSUPPORTED (the interface allows it for a Linear's weight) or, where the contract
 * forbids it (bmm), QS_ERR_INVALID_ARG. */
static qs_status operand_check(const qs_operand *op, qs_dtype expect, bool per_row_allowed, const char *what) {
    if (!op || !op->data) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL operand", what);
    if (op->dt != expect)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: operand is %s but the plan's precision stores %s", what,
                       qs_dtype_name(op->dt), qs_dtype_name(expect));
    const bool scaled = expect == QS_F8E4M3 || expect == QS_F8E5M2 || expect == QS_S8;
    if (scaled && !op->scale)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %s operand without a scale", what, qs_dtype_name(expect));
    if (op->per_row && !scaled)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: per-row scales on an unscaled %s operand", what, qs_dtype_name(expect));
    if (op->per_row && !per_row_allowed)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: per-row scales; batched matmul operands take one scale per tensor",
                       what);
    if (op->per_row)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: per-row scales are not supported by the CUDA Linear (cuBLASLt takes one scale per "
                       "tensor); quantize with per-tensor scales",
                       what);
    return QS_OK;
}

static qs_status ws_check(const lt_plan *p, const void *ws, const char *what) {
    if (p->ws_bytes && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan needs %zu bytes of workspace but ws is NULL", what,
                       p->ws_bytes);
    if (p->ws_bytes && (uintptr_t)ws % WS_ALIGN)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: ws must be 256-byte aligned (as alloc() returns)", what);
    return QS_OK;
}

static cudaStream_t stream_of(qs_backend *be, qs_stream *s) { return s ? s->s : qs_cuda_be(be)->stream.s; }

static bool aligned(const void *p, size_t a) { return (uintptr_t)p % a == 0; }

/* D = α·A'·B' (+ beta·D) for direction dir as built; sa, sb: FP8 scale pointers; bias:
 * epilogue bias (only when the product was built with one). */
static qs_status gemm_run(lt_plan *p, int dir, cublasLtHandle_t lt, cudaStream_t stream, const void *A,
                          const void *B, void *D, float beta, const float *sa, const float *sb, const float *bias,
                          void *ws) {
    lt_gemm *g = &p->g[dir];
    if (g->scaled) {
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
        LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    }
    if (g->bias) LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const cublasLtMatmulAlgo_t *algo = NULL;
    if (aligned(A, g->align_a) && aligned(B, g->align_b) && aligned(D, g->align_d) &&
        (!g->bias || aligned(bias, LT_ALIGN)))
        algo = &g->algo;
    else if (g->has_any && aligned(A, g->a_elem) && aligned(B, g->b_elem) && aligned(D, g->d_elem) &&
             (!g->bias || aligned(bias, sizeof(float))))
        algo = &g->algo_any;
    else
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s (%s): operand or output pointers are not aligned enough for cuBLASLt (%s); pass buffers "
                       "from alloc() or 16-byte-aligned views",
                       p->what, p->dir_name[dir], p->fp8 ? "FP8 needs 16 bytes" : "not even aligned to the element size");
    const float alpha = p->alpha;
    void *lt_ws = p->lt_bytes ? (char *)ws + p->lt_off : NULL;
    LT_TRY(cublasLtMatmul(lt, g->desc, &alpha, A, g->la, B, g->lb, &beta, D, g->ld, D, g->ld, algo, lt_ws, p->lt_bytes,
                          stream));
    return QS_OK;
}

/* An FP8 operand into its issued layout: dst row-major rp×kp per batch (col-major kp×rp, ld
 * kp), zero beyond (r, k); src row-major r×k per batch, or k×r when tr. */
static qs_status fp8_operand(cudaStream_t stream, int64_t batch, const void *src, bool tr, int64_t r, int64_t k,
                             int64_t rp, int64_t kp, void *dst) {
    if (tr) return qs_cuda_linear_transpose_u8(stream, batch, src, k, r, dst, kp, rp);
    return qs_cuda_linear_pad_u8(stream, batch, src, r, k, dst, rp, kp);
}

/* Direction dir of p: out (+)= α · B·Aᵀ per batch (file comment, "Products"), then + bias (a
 * Linear forward's b, or NULL). a_src, b_src: the caller's A and B buffers (as stored, per
 * gemm_dir); a_t, b_t: NULL or their transposed copies (qs_operand.data_t, batch 1 only),
 * which an FP8 direction reads in place of making its own when it needs no padding; sa, sb: their FP8 scales (ignored otherwise); out: the caller's output (n×m per
 * batch) in the direction's ddt (FP32, or BF16 for a non-FP8 product without a bias kernel);
 * accumulate: out += instead of out =. FP8 operands go through their workspace copies
 * and a padded D is written back, as fp8_layout decided. */
static qs_status lt_run(lt_plan *p, int dir, cublasLtHandle_t lt, cudaStream_t stream, const void *a_src,
                        const void *b_src, const void *a_t, const void *b_t, const float *sa, const float *sb,
                        void *out, bool accumulate, const float *bias, void *ws) {
    const gemm_dir *d = &p->dir[dir];
    const float beta = accumulate ? 1.0f : 0.0f;
    if (!p->fp8) {
        const bool fused = bias && p->g[dir].bias;
        QS_TRY(gemm_run(p, dir, lt, stream, a_src, b_src, out, beta, sa, sb, fused ? bias : NULL, ws));
        /* a bias kernel only with an FP32 D (a BF16 D is planned only without a bias) */
        return bias && !fused ? qs_cuda_linear_bias_add(stream, d->n, d->m, bias, (float *)out) : QS_OK;
    }
    const fp8_dir *f = &p->f8[dir];
    const void *A = a_src, *B = b_src;
    if (f->a_copy && d->a_tr && a_t && f->kp == d->k && f->mp == d->m) {
        A = a_t; /* the caller's transposed copy is the issued layout */
    } else if (f->a_copy) {
        void *a = (char *)ws + f->off_a;
        QS_TRY(fp8_operand(stream, p->batch, a_src, d->a_tr, d->m, d->k, f->mp, f->kp, a));
        A = a;
    }
    if (f->b_copy && d->b_tr && b_t && f->kp == d->k && f->np == d->n) {
        B = b_t;
    } else if (f->b_copy) {
        void *b = (char *)ws + f->off_b;
        QS_TRY(fp8_operand(stream, p->batch, b_src, d->b_tr, d->n, d->k, f->np, f->kp, b));
        B = b;
    }
    if (!f->d_pad) {
        QS_TRY(gemm_run(p, dir, lt, stream, A, B, out, beta, sa, sb, NULL, ws));
        return bias ? qs_cuda_linear_bias_add(stream, d->n, d->m, bias, (float *)out) : QS_OK; /* FP8: D is FP32 */
    }
    float *dp = (float *)(void *)((char *)ws + f->off_d);
    QS_TRY(gemm_run(p, dir, lt, stream, A, B, dp, 0.0f, sa, sb, NULL, ws));
    return qs_cuda_linear_unpad_f32(stream, p->batch, d->n, d->m, dp, f->mp, f->np * f->mp, bias, accumulate,
                                    (float *)out);
}

/* Contract (backend.h linear_forward): y (M,N) = x (M,K) · w (N,K)ᵀ + b (N); x, w in the plan's
 * forward dtype (FP8: per-tensor scales in device memory), b FP32 (required with a bias), y in
 * the plan's y_dt: FP32, or BF16 (written by cuBLASLt, or the FP32 Y rounded by the cast kernel). */
qs_status qs_cuda_linear_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x, const qs_operand *w,
                                 const float *b, void *y, void *ws) {
    QS_TRY(plan_check(plan, QS_CUDA_PLAN_LINEAR, "linear_forward"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(operand_check(x, lp->fdt, true, "linear_forward x"));
    QS_TRY(operand_check(w, lp->fdt, true, "linear_forward w"));
    if (!y || (lp->d.has_bias && !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_forward: NULL y or (planned with bias) b");
    QS_TRY(ws_check(&lp->lt, ws, "linear_forward"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    void *out = lp->y_narrow ? (char *)ws + lp->narrow_off : y; /* ws is non-NULL: the plan reserved it */
    QS_TRY(lt_run(&lp->lt, DIR_FWD, lt, stream_of(be, s), w->data, x->data, NULL, NULL, w->scale, x->scale, out, false,
                  lp->d.has_bias ? b : NULL, ws));
    if (!lp->y_narrow) return QS_OK;
    return qs_cuda_cast(be, s, lp->d.M * lp->d.N, out, QS_F32, y, QS_BF16); /* RNE, core/numfmt.h */
}

/* Contract (backend.h linear_backward_data): dx (M,K) = dy (M,N) · w (N,K), or (F32 dx) dx += that
 * with accumulate; dy in the gradient dtype, w in the forward dtype, both per-tensor; dx in the
 * plan's dx_dt (BF16: written by cuBLASLt, or the FP32 dX rounded by the cast kernel). */
qs_status qs_cuda_linear_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                       const qs_operand *w, void *dx, bool accumulate, void *ws) {
    QS_TRY(plan_check(plan, QS_CUDA_PLAN_LINEAR, "linear_backward_data"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(operand_check(dy, lp->gdt, true, "linear_backward_data dy"));
    QS_TRY(operand_check(w, lp->fdt, true, "linear_backward_data w"));
    if (!dx) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_data: NULL dx");
    QS_TRY(qs_dx_accumulate_check("linear_backward_data", lp->d.dx_dt, accumulate));
    QS_TRY(ws_check(&lp->lt, ws, "linear_backward_data"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    void *out = lp->dx_narrow ? (char *)ws + lp->narrow_off : dx;
    QS_TRY(lt_run(&lp->lt, DIR_BWD1, lt, stream_of(be, s), w->data, dy->data, w->data_t, NULL, w->scale, dy->scale,
                  out, accumulate, NULL, ws));
    if (!lp->dx_narrow) return QS_OK;
    return qs_cuda_cast(be, s, lp->d.M * lp->d.K, out, QS_F32, dx, QS_BF16); /* RNE, core/numfmt.h */
}

/* Contract (backend.h linear_backward_weights): dw (N,K) = dy (M,N)ᵀ · x (M,K) (overwritten);
 * db (N) = Σ_rows dy, given exactly when dy is F32 and the plan has a bias, else NULL. */
qs_status qs_cuda_linear_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                          const qs_operand *x, float *dw, float *db, void *ws) {
    QS_TRY(plan_check(plan, QS_CUDA_PLAN_LINEAR, "linear_backward_weights"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(operand_check(dy, lp->gdt, true, "linear_backward_weights dy"));
    QS_TRY(operand_check(x, lp->fdt, true, "linear_backward_weights x"));
    if (!dw) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_weights: NULL dw");
    QS_TRY(qs_bias_grad_check(dy->dt, db, lp->d.has_bias, "linear_backward_weights"));
    QS_TRY(ws_check(&lp->lt, ws, "linear_backward_weights"));
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    const cudaStream_t st = stream_of(be, s);
    QS_TRY(lt_run(&lp->lt, DIR_BWD2, lt, st, x->data, dy->data, x->data_t, dy->data_t, x->scale, dy->scale, dw, false, NULL, ws));
    if (!db) return QS_OK;
    return qs_cuda_linear_column_sums(st, lp->d.M, lp->d.N, dy->data, lp->colsum_chunks,
                                      lp->colsum_chunks > 1 ? (double *)ws : NULL, db);
}

/* The checks every bmm execution starts with: plan kind, two operands of the given storage
 * dtypes (per-tensor scales), the output and the workspace. */
static qs_status bmm_args(void *plan, const qs_operand *u, bool u_grad, const char *u_name, const qs_operand *v,
                          const char *v_name, const float *out, const void *ws, const char *what) {
    QS_TRY(plan_check(plan, QS_CUDA_PLAN_BMM, what));
    const qs_cuda_bmm_plan_t *bp = plan;
    char label[64];
    snprintf(label, sizeof label, "%s %s", what, u_name);
    QS_TRY(operand_check(u, u_grad ? bp->gdt : bp->fdt, false, label));
    snprintf(label, sizeof label, "%s %s", what, v_name);
    QS_TRY(operand_check(v, bp->fdt, false, label));
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL output", what);
    return ws_check(&bp->lt, ws, what);
}

/* Contract (backend.h bmm_forward): c_b (M,N) = alpha · a_b (M,K) · op(b_b), overwritten; a, b in
 * the forward dtype with per-tensor scales. */
qs_status qs_cuda_bmm_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *a, const qs_operand *b,
                              float *c, void *ws) {
    QS_TRY(bmm_args(plan, a, false, "a", b, "b", c, ws, "bmm_forward"));
    qs_cuda_bmm_plan_t *bp = plan;
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    /* A = b, B = a in either layout (file comment, "Products") */
    return lt_run(&bp->lt, DIR_FWD, lt, stream_of(be, s), b->data, a->data, NULL, NULL, b->scale, a->scale, c, false, NULL, ws);
}

/* Contract (backend.h bmm_backward_a): da_b (M,K) (+)= alpha · dc_b (M,N) · op(b_b)ᵀ; dc in the
 * gradient dtype, b in the forward dtype. */
qs_status qs_cuda_bmm_backward_a(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *b,
                                 float *da, bool accumulate, void *ws) {
    QS_TRY(bmm_args(plan, dc, true, "dc", b, "b", da, ws, "bmm_backward_a"));
    qs_cuda_bmm_plan_t *bp = plan;
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    /* A = b, B = dc in either layout */
    return lt_run(&bp->lt, DIR_BWD1, lt, stream_of(be, s), b->data, dc->data, NULL, NULL, b->scale, dc->scale, da, accumulate,
                  NULL, ws);
}

/* Contract (backend.h bmm_backward_b): db_b (+)= alpha · dc_bᵀ · a_b (N,K) with trans_b, else
 * alpha · a_bᵀ · dc_b (K,N); dc in the gradient dtype, a in the forward dtype. */
qs_status qs_cuda_bmm_backward_b(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *a,
                                 float *db, bool accumulate, void *ws) {
    QS_TRY(bmm_args(plan, dc, true, "dc", a, "a", db, ws, "bmm_backward_b"));
    qs_cuda_bmm_plan_t *bp = plan;
    cublasLtHandle_t lt;
    QS_TRY(lt_handle(be, &lt));
    const cudaStream_t st = stream_of(be, s);
    if (bp->d.trans_b) /* A = a (k,m), B = dc (k,n) */
        return lt_run(&bp->lt, DIR_BWD2, lt, st, a->data, dc->data, NULL, NULL, a->scale, dc->scale, db, accumulate, NULL, ws);
    /* A = dc (k,m), B = a (k,n) */
    return lt_run(&bp->lt, DIR_BWD2, lt, st, dc->data, a->data, NULL, NULL, dc->scale, a->scale, db, accumulate, NULL, ws);
}
