/* src/cuda/cuda_gemm.h — defines: the cuBLASLt wrapper every GEMM of the CUDA backend goes through
 * (cuda_gemm.c; used by cuda_linear.c and cuda_bmm.c), for every GEMM precision (FP32, TF32, BF16,
 * FP16, FP8; INT8 is refused): a plan of up to three products ("directions") and their execution.
 *
 * Products. Each direction is described in qsync's row-major terms by one rule. For every batch
 * b < batch (matrices contiguous, batch stride = the matrix size; a Linear has batch 1):
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
 * Element types: forward products take the forward dtype for both operands; a backward product
 * the gradient dtype for dY / dc and the forward dtype for the other. Per-tensor FP8 scales
 * (device memory) go to cuBLASLt as its A/B scale pointers; α is 1 for a Linear and the
 * descriptor's alpha for a bmm. D and C are FP32 (C = D: β = 1 accumulates), except a Linear's
 * BF16 output where cuBLASLt can write it (qs_cuda_gemm_dir.ddt). */
#ifndef QSYNC_CUDA_GEMM_H
#define QSYNC_CUDA_GEMM_H

#include <cublasLt.h>
#include <stdbool.h>
#include <stdint.h>

#include "cuda/cuda_common.h"

#define QS_CUDA_GEMM_WS_ALIGN ((size_t)256) /* alignment of the workspace and of its regions */

/* The directions of a plan; BWD1: backward-data / backward-a, BWD2: backward-weights / backward-b. */
enum { QS_CUDA_GEMM_FWD = 0, QS_CUDA_GEMM_BWD1, QS_CUDA_GEMM_BWD2, QS_CUDA_GEMM_DIRS };

/* One product in row-major terms (cuda_gemm.h, "Products"). */
typedef struct qs_cuda_gemm_dir {
    int64_t m, n, k;
    bool a_tr, b_tr;   /* A stored (k, m) / B stored (k, n) instead of (m, k) / (n, k) */
    qs_dtype adt, bdt; /* storage dtypes of A and B */
    qs_dtype ddt;      /* dtype of D (and C): F32, or BF16 (a Linear's BF16 y or dx; never FP8) */
    bool bias;         /* a bias epilogue is wanted (Linear forward) */
} qs_cuda_gemm_dir;

/* One cuBLASLt product of the plan. */
typedef struct qs_cuda_lt_gemm {
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
} qs_cuda_lt_gemm;

/* How one FP8 direction is issued (cuda_gemm.c, "FP8 padding"): per batch, D (mp×np,
 * col-major) = A'ᵀ·B' with A' col-major kp×mp (ld kp, op T) and B' col-major kp×np (ld kp, op N). */
typedef struct qs_cuda_fp8_dir {
    bool a_copy, b_copy;        /* A' / B' is a (transposed and/or zero-padded) workspace copy */
    bool d_pad;                 /* D is an mp×np workspace buffer per batch, written back by unpad_f32 */
    int64_t mp, np, kp;         /* as issued: kp = k rounded up to 16; mp, np = m, n unless d_pad */
    size_t off_a, off_b, off_d; /* workspace offsets of the A' copies, B' copies and padded D */
    size_t bytes;               /* scratch the direction uses (256-byte multiple) */
} qs_cuda_fp8_dir;

/* The cuBLASLt part of a plan: what Linear and bmm plans share. */
typedef struct qs_cuda_gemm_plan {
    char what[128];                  /* the problem, for messages: "linear M=.. N=.. K=.. at fp8" */
    const char *const *dir_name;
    qs_precision prec;
    bool fp8;
    int64_t batch;
    float alpha;
    qs_cuda_gemm_dir dir[QS_CUDA_GEMM_DIRS];
    qs_cuda_fp8_dir f8[QS_CUDA_GEMM_DIRS];           /* FP8 only */
    qs_cuda_lt_gemm g[QS_CUDA_GEMM_DIRS];
    size_t lt_off;                   /* offset of the cuBLASLt workspace */
    size_t lt_bytes;                 /* its size */
    size_t ws_bytes;                 /* total */
} qs_cuda_gemm_plan;


/* v rounded up to a multiple of a; the larger of two sizes. */
static inline size_t qs_cuda_gemm_align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
static inline size_t qs_cuda_gemm_max(size_t a, size_t b) { return a > b ? a : b; }

/* A direction from its fields (row-major terms, "Products"); D FP32, no bias. */
qs_cuda_gemm_dir qs_cuda_gemm_dir_of(int64_t m, int64_t n, int64_t k, bool a_tr, bool b_tr, qs_dtype adt, qs_dtype bdt);

/* Build every direction of p (p->dir, prec, fp8, batch, alpha, what and dir_name set), with the
 * fallbacks of cuda_gemm.c: a bias epilogue without an algorithm becomes a bias kernel; a BF16 D
 * that cuBLASLt cannot write becomes an FP32 D (p->dir[dir].ddt is then F32: the caller narrows
 * it); an FP8 product without an algorithm for D in place is padded in m and n too. */
qs_status qs_cuda_gemm_plan_dirs(qs_cuda_gemm_plan *p, cublasLtHandle_t lt);
/* Lay out the workspace of the built directions: `scratch` bytes the caller needs besides the
 * FP8 copies, then cuBLASLt's (p->lt_off, lt_bytes, ws_bytes). */
void qs_cuda_gemm_plan_layout(qs_cuda_gemm_plan *p, size_t scratch);
/* qs_cuda_gemm_plan_dirs, then qs_cuda_gemm_plan_layout. */
qs_status qs_cuda_gemm_plan_build(qs_cuda_gemm_plan *p, cublasLtHandle_t lt, size_t scratch);
/* Destroy the cuBLASLt descriptors of every direction. */
void qs_cuda_gemm_plan_release(qs_cuda_gemm_plan *p);

/* The backend's cuBLASLt handle into *out, created on first use (on the backend's device). */
qs_status qs_cuda_gemm_handle(qs_backend *be, cublasLtHandle_t *out);

/* The precision checks every GEMM plan of this backend starts with (`op` names it): known, not
 * INT8, and FP8 / BF16 / TF32 only where the device's compute capability has them. */
qs_status qs_cuda_gemm_prec_check(const qs_cuda_backend *cb, qs_precision prec, const char *op);
/* plan is a plan of kind `kind` (linear or bmm); `what` names the op. */
qs_status qs_cuda_gemm_plan_check(const void *plan, qs_cuda_plan_kind kind, const char *what);
/* An operand of storage dtype `expect` with the scale its dtype needs, per tensor. per_row:
 * QS_ERR_UNSUPPORTED (the interface allows it for a Linear's weight) or, where the contract
 * forbids it (bmm), QS_ERR_INVALID_ARG. */
qs_status qs_cuda_gemm_operand_check(const qs_operand *op, qs_dtype expect, bool per_row_allowed, const char *what);
/* ws holds the plan's workspace: non-NULL when it needs one, 256-byte aligned. */
qs_status qs_cuda_gemm_ws_check(const qs_cuda_gemm_plan *p, const void *ws, const char *what);

/* Direction dir of p: out (+)= α · B·Aᵀ per batch ("Products"), then + bias (a Linear forward's
 * b, or NULL). a_src, b_src: the caller's A and B buffers (as stored); a_t, b_t: NULL or their
 * transposed copies (qs_operand.data_t, batch 1 only), which an FP8 direction reads instead of
 * making its own when it needs no padding; sa, sb: their FP8 scales (ignored otherwise); out: the
 * caller's output (n×m per batch) in the direction's ddt; accumulate: out += instead of out =. */
qs_status qs_cuda_gemm_run(qs_cuda_gemm_plan *p, int dir, cublasLtHandle_t lt, cudaStream_t stream, const void *a_src,
                           const void *b_src, const void *a_t, const void *b_t, const float *sa, const float *sb,
                           void *out, bool accumulate, const float *bias, void *ws);

#endif
