/* src/cuda/cuda_gemm.c — defines: the cuBLASLt wrapper of cuda_gemm.h (products, element types
 * and the per-direction rule are described there).
 *
 * FP8 padding. Every FP8 product is issued as "TN" (Hopper's FP8 GEMMs take only that layout,
 * E4M3×E4M3 / E4M3×E5M2 / E5M2×E4M3) with A' a row-major m×k byte matrix and B' a row-major n×k
 * one. cuBLASLt's FP8 kernels need 16-byte leading dimensions, so k is issued as kp = k rounded up
 * to 16, the extra columns zero (a zero byte is +0 in E4M3 and E5M2: padded terms add nothing). An
 * operand is read in place when it has that layout (not transposed, k % 16 == 0), or from the
 * caller's transposed copy (qs_operand.data_t) when one is given and no padding is needed;
 * otherwise it is copied into the workspace every call (cuda_linear_kernels.cu: transpose_u8,
 * pad_u8). D goes straight into the caller's output where cuBLASLt has an algorithm for it;
 * where it has none (m or n not a multiple of 16, or a batch stride that is not), m and n are
 * padded too (mp, np), D is an FP32 mp×np buffer per batch in the workspace, and unpad_f32
 * writes its m×n block back, adding the old output (accumulate) and the bias in the order and
 * roundings of β = 1 and bias_add. If even the fully padded product has no algorithm, plan fails.
 *
 * Alignment. Each direction has two algorithms, chosen once per shape and types: the primary one
 * for 16-byte aligned pointers (alloc() gives 256) and, where cuBLASLt has one, a fallback for
 * element-aligned pointers (views); each call picks by its pointers. With batch > 1 a matrix whose
 * batch stride is not a multiple of 16 bytes is declared with the alignment the stride
 * guarantees. Descriptors are updated per call (scale and bias pointers): one plan must not run
 * from two host threads at once.
 *
 * Bias: CUBLASLT_EPILOGUE_BIAS with the FP32 bias where cuBLASLt has an algorithm for it; FP8
 * (which wants a BF16 bias vector) and any precision whose epilogue finds none add b with a kernel.
 *
 * Workspace: [scratch][cuBLASLt workspace], the scratch sized for the largest direction (the
 * directions run one at a time and share it). FP8, per direction, each region on 256 bytes: the
 * A' copies (batch·mp·kp bytes), the B' copies (batch·np·kp), the padded D (batch·np·mp floats),
 * each only when used. The cuBLASLt part is the largest workspace a chosen algorithm asked for
 * (searched with at most 32 MiB). ws must be 256-byte aligned. */
#include "cuda/cuda_gemm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_linear_kernels.h"

#define LT_MAX_WORKSPACE ((uint64_t)32 << 20) /* heuristic search limit (Hopper guidance) */
#define LT_ALIGN 16u                          /* pointer alignment of the primary algorithms */

/* v rounded up to a multiple of 16. */
static int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }

/* Placeholder device addresses for pointer attributes that the heuristic inspects only for
 * their alignment (never dereferenced; the real pointers are set before each cublasLtMatmul). */
#define LT_PLACEHOLDER_16 ((const void *)(uintptr_t)0x10010u) /* 16-aligned, not 32 */
#define LT_PLACEHOLDER_4 ((const void *)(uintptr_t)0x10004u)  /* 4-aligned, not 8 */

/* cuBLASLt's name of a status. */
static const char *lt_name(cublasStatus_t st) {
    const char *n = cublasLtGetStatusName(st);
    return n ? n : "?";
}

/* QS_ERR_BACKEND naming the failing call, the problem and the direction. */
static qs_status lt_fail(const qs_cuda_gemm_plan *p, int dir, const char *call, cublasStatus_t st) {
    return QS_FAIL(QS_ERR_BACKEND, "%s failed for %s (%s): status %d (%s)", call, p->what, p->dir_name[dir], (int)st,
                   lt_name(st));
}

#define LT_TRY(call)                                                                                               \
    do {                                                                                                           \
        cublasStatus_t lt_st_ = (call);                                                                            \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS) return lt_fail(p, dir, #call, lt_st_);                               \
    } while (0)

/* What one product looks like to cuBLASLt (column-major; cuda_gemm.h, "Products"). */
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
 * resume). */
static qs_status lt_heuristic(const qs_cuda_gemm_plan *p, int dir, cublasLtHandle_t lt, qs_cuda_lt_gemm *g, uint32_t align_a,
                              uint32_t align_b, uint32_t align_cd, cublasLtMatmulAlgo_t *algo, size_t *ws,
                              bool *found, cublasStatus_t *why) {
    *found = false;
    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t max_ws = LT_MAX_WORKSPACE;
    /* the preferences in this order; `call` names the last one tried */
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        const void *value;
        size_t size;
        const char *call;
    } prefs[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws,
         "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a,
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b,
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof align_cd,
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof align_cd,
         "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)"},
    };
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const char *call = prefs[0].call;
    for (size_t i = 0; st == CUBLAS_STATUS_SUCCESS && i < sizeof prefs / sizeof prefs[0]; i++) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, prefs[i].attr, prefs[i].value, prefs[i].size);
        call = prefs[i].call;
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

/* Destroy a product's descriptors and clear it. */
static void gemm_destroy(qs_cuda_lt_gemm *g) {
    if (g->la) cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb) cublasLtMatrixLayoutDestroy(g->lb);
    if (g->ld) cublasLtMatrixLayoutDestroy(g->ld);
    if (g->desc) cublasLtMatmulDescDestroy(g->desc);
    *g = (qs_cuda_lt_gemm){0};
}

/* A layout of `rows`×`cols` (column-major, leading dimension ld) elements of type t, with
 * `batch` matrices `stride` elements apart when batch > 1. */
static qs_status layout_create(const qs_cuda_gemm_plan *p, int dir, cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows,
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
static qs_status gemm_build(qs_cuda_gemm_plan *p, int dir, cublasLtHandle_t lt, const gemm_spec *sp, bool *no_algo,
                            cublasStatus_t *why) {
    qs_cuda_lt_gemm *g = &p->g[dir];
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
    if (g->has_any) g->ws_bytes = qs_cuda_gemm_max(g->ws_bytes, ws);
    return QS_OK;
}

/* "no algorithm" as QS_ERR_BACKEND, with what usually causes it. */
static qs_status no_algo_fail(const qs_cuda_gemm_plan *p, int dir, cublasStatus_t why) {
    const char *hint = p->fp8 ? " (cuBLASLt's FP8 GEMMs need 16-byte leading dimensions and batch strides; even "
                                "the fully zero-padded product found none)"
                              : "";
    return QS_FAIL(QS_ERR_BACKEND, "cublasLtMatmulAlgoGetHeuristic failed for %s (%s): status %d (%s): no algorithm%s",
                   p->what, p->dir_name[dir], (int)why, lt_name(why), hint);
}

/* Contract: cuda_gemm.h. */
void qs_cuda_gemm_plan_release(qs_cuda_gemm_plan *p) {
    for (int i = 0; i < QS_CUDA_GEMM_DIRS; i++) gemm_destroy(&p->g[i]);
}

/* Destroy the backend's cuBLASLt handle (at destroy; NULL backend: nothing). */
void qs_cuda_gemm_release(qs_backend *be) {
    if (!be) return;
    qs_cuda_backend *cb = qs_cuda_be(be);
    if (cb->lt) cublasLtDestroy((cublasLtHandle_t)cb->lt);
    cb->lt = NULL;
}

/* The backend's cuBLASLt handle, created on first use (on the backend's device). */
qs_status qs_cuda_gemm_handle(qs_backend *be, cublasLtHandle_t *out) {
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

/* The FP8 layout of direction dir (cuda_gemm.c, "FP8 padding"); pad_d: issue m and n rounded
 * up to 16 with D in the workspace (a no-op when both already are multiples of 16). */
static void fp8_layout(qs_cuda_gemm_plan *p, int dir, bool pad_d) {
    const qs_cuda_gemm_dir *d = &p->dir[dir];
    qs_cuda_fp8_dir *f = &p->f8[dir];
    *f = (qs_cuda_fp8_dir){0};
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
        off = qs_cuda_gemm_align_up(off + batch * (size_t)f->mp * (size_t)f->kp, QS_CUDA_GEMM_WS_ALIGN);
    }
    if (f->b_copy) {
        f->off_b = off;
        off = qs_cuda_gemm_align_up(off + batch * (size_t)f->np * (size_t)f->kp, QS_CUDA_GEMM_WS_ALIGN);
    }
    if (f->d_pad) {
        f->off_d = off;
        off = qs_cuda_gemm_align_up(off + batch * (size_t)f->np * (size_t)f->mp * sizeof(float), QS_CUDA_GEMM_WS_ALIGN);
    }
    f->bytes = off;
}

/* Spec of direction dir for the plan's precision (cuda_gemm.h, "Products"; FP8 from
 * p->f8[dir], set by fp8_layout first). want_bias: ask for the bias epilogue where the
 * direction wants one (never for FP8). */
static void make_spec(const qs_cuda_gemm_plan *p, int dir, bool want_bias, gemm_spec *sp) {
    const qs_cuda_gemm_dir *d = &p->dir[dir];
    *sp = (gemm_spec){0};
    sp->ct = p->prec == QS_PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    lt_type(d->adt, &sp->at, &sp->a_elem);
    lt_type(d->bdt, &sp->bt, &sp->b_elem);
    lt_type(d->ddt, &sp->dt, &sp->d_elem);
    sp->batch = p->batch;
    sp->scaled = p->fp8;
    sp->bias = want_bias && d->bias && !p->fp8;
    /* FP8: A' (mp, kp) and B' (np, kp) as issued, never transposed; otherwise as stored */
    const qs_cuda_fp8_dir *f = &p->f8[dir];
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

/* Contract: cuda_gemm.h. Per direction: the spec as planned, then without the bias epilogue,
 * then with an FP32 D, then (FP8) padded in m and n, until one has an algorithm. */
qs_status qs_cuda_gemm_plan_dirs(qs_cuda_gemm_plan *p, cublasLtHandle_t lt) {
    qs_status st = QS_OK;
    for (int dir = 0; dir < QS_CUDA_GEMM_DIRS && st == QS_OK; dir++) {
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

/* Contract: cuda_gemm.h. */
void qs_cuda_gemm_plan_layout(qs_cuda_gemm_plan *p, size_t scratch) {
    if (p->fp8)
        for (int i = 0; i < QS_CUDA_GEMM_DIRS; i++) scratch = qs_cuda_gemm_max(scratch, p->f8[i].bytes);
    p->lt_off = qs_cuda_gemm_align_up(scratch, QS_CUDA_GEMM_WS_ALIGN);
    for (int i = 0; i < QS_CUDA_GEMM_DIRS; i++) p->lt_bytes = qs_cuda_gemm_max(p->lt_bytes, p->g[i].ws_bytes);
    p->ws_bytes = p->lt_bytes ? p->lt_off + p->lt_bytes : scratch;
}

/* qs_cuda_gemm_plan_dirs, then qs_cuda_gemm_plan_layout. */
qs_status qs_cuda_gemm_plan_build(qs_cuda_gemm_plan *p, cublasLtHandle_t lt, size_t scratch) {
    QS_TRY(qs_cuda_gemm_plan_dirs(p, lt));
    qs_cuda_gemm_plan_layout(p, scratch);
    return QS_OK;
}

/* Contract: cuda_gemm.h. */
qs_status qs_cuda_gemm_prec_check(const qs_cuda_backend *cb, qs_precision prec, const char *op) {
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

/* A qs_cuda_gemm_dir from its fields (row-major terms, cuda_gemm.h, "Products"). */
qs_cuda_gemm_dir qs_cuda_gemm_dir_of(int64_t m, int64_t n, int64_t k, bool a_tr, bool b_tr, qs_dtype adt, qs_dtype bdt) {
    return (qs_cuda_gemm_dir){.m = m, .n = n, .k = k, .a_tr = a_tr, .b_tr = b_tr, .adt = adt, .bdt = bdt, .ddt = QS_F32,
                      .bias = false};
}

/* Contract: cuda_gemm.h. */
qs_status qs_cuda_gemm_plan_check(const void *plan, qs_cuda_plan_kind kind, const char *what) {
    const char *maker = kind == QS_CUDA_PLAN_LINEAR ? "linear_plan" : "bmm_plan";
    if (!plan) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: plan is NULL; create it with %s", what, maker);
    if (*(const qs_cuda_plan_kind *)plan != kind)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan passed is of another operator kind; pass a plan from %s", what,
                       maker);
    return QS_OK;
}

/* Contract: cuda_gemm.h. */
qs_status qs_cuda_gemm_operand_check(const qs_operand *op, qs_dtype expect, bool per_row_allowed, const char *what) {
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

/* Contract: cuda_gemm.h. */
qs_status qs_cuda_gemm_ws_check(const qs_cuda_gemm_plan *p, const void *ws, const char *what) {
    if (p->ws_bytes && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan needs %zu bytes of workspace but ws is NULL", what,
                       p->ws_bytes);
    if (p->ws_bytes && (uintptr_t)ws % QS_CUDA_GEMM_WS_ALIGN)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: ws must be 256-byte aligned (as alloc() returns)", what);
    return QS_OK;
}

/* Whether p is a multiple of a bytes. */
static bool aligned(const void *p, size_t a) { return (uintptr_t)p % a == 0; }

/* D = α·A'·B' (+ beta·D) for direction dir as built; sa, sb: FP8 scale pointers; bias:
 * epilogue bias (only when the product was built with one). */
static qs_status lt_matmul(qs_cuda_gemm_plan *p, int dir, cublasLtHandle_t lt, cudaStream_t stream, const void *A,
                          const void *B, void *D, float beta, const float *sa, const float *sb, const float *bias,
                          void *ws) {
    qs_cuda_lt_gemm *g = &p->g[dir];
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

/* Contract: cuda_gemm.h. FP8 operands go through their workspace copies and a padded D is
 * written back, as fp8_layout decided. */
qs_status qs_cuda_gemm_run(qs_cuda_gemm_plan *p, int dir, cublasLtHandle_t lt, cudaStream_t stream, const void *a_src,
                        const void *b_src, const void *a_t, const void *b_t, const float *sa, const float *sb,
                        void *out, bool accumulate, const float *bias, void *ws) {
    const qs_cuda_gemm_dir *d = &p->dir[dir];
    const float beta = accumulate ? 1.0f : 0.0f;
    if (!p->fp8) {
        const bool fused = bias && p->g[dir].bias;
        QS_TRY(lt_matmul(p, dir, lt, stream, a_src, b_src, out, beta, sa, sb, fused ? bias : NULL, ws));
        /* a bias kernel only with an FP32 D (a BF16 D is planned only without a bias) */
        return bias && !fused ? qs_cuda_linear_bias_add(stream, d->n, d->m, bias, (float *)out) : QS_OK;
    }
    const qs_cuda_fp8_dir *f = &p->f8[dir];
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
        QS_TRY(lt_matmul(p, dir, lt, stream, A, B, out, beta, sa, sb, NULL, ws));
        return bias ? qs_cuda_linear_bias_add(stream, d->n, d->m, bias, (float *)out) : QS_OK; /* FP8: D is FP32 */
    }
    float *dp = (float *)(void *)((char *)ws + f->off_d);
    QS_TRY(lt_matmul(p, dir, lt, stream, A, B, dp, 0.0f, sa, sb, NULL, ws));
    return qs_cuda_linear_unpad_f32(stream, p->batch, d->n, d->m, dp, f->mp, f->np * f->mp, bias, accumulate,
                                    (float *)out);
}

