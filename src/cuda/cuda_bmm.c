/* src/cuda/cuda_bmm.c — defines: the strided batched matmul of the CUDA backend (bmm_*, attention's
 * QKᵀ and P·V), three products through the cuBLASLt wrapper (cuda_gemm.h, whose "Products" gives
 * the bmm's rows for either layout of b), every GEMM precision but INT8. Outputs stay FP32; an FP8
 * bmm's workspace holds operand copies of the order of its operands' size. */
#include "cuda/cuda_backend.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_gemm.h"

static const char *const BMM_DIR_NAME[QS_CUDA_GEMM_DIRS] = {"forward", "backward-a", "backward-b"};

typedef struct qs_cuda_bmm_plan {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_BMM: first */
    qs_bmm_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes of a, b (forward) and dc (gradient) */
    qs_cuda_gemm_plan lt;
} qs_cuda_bmm_plan_t;

/* Free a bmm plan and its cuBLASLt descriptors (NULL: nothing). */
void qs_cuda_bmm_plan_destroy(qs_backend *be, void *plan) {
    qs_cuda_bmm_plan_t *bp = plan;
    if (!bp) return;
    qs_cuda_gemm_plan_release(&bp->lt);
    bp->kind = 0;
    free(bp);
}

/* Contract (backend_ops.def bmm_plan): for b < batch, c_b (M,N) = alpha·a_b (M,K)·op(b_b) at precision
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
    QS_TRY(qs_cuda_gemm_prec_check(qs_cuda_be(be), d->prec, "bmm_plan"));
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));

    qs_cuda_bmm_plan_t *bp = calloc(1, sizeof *bp);
    if (!bp) return QS_FAIL(QS_ERR_OOM, "bmm_plan: out of memory for the plan");
    bp->kind = QS_CUDA_PLAN_BMM;
    bp->d = *d;
    bp->fdt = qs_precision_operand_dtype(d->prec, false);
    bp->gdt = qs_precision_operand_dtype(d->prec, true);
    qs_cuda_gemm_plan *p = &bp->lt;
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
        p->dir[QS_CUDA_GEMM_FWD] = qs_cuda_gemm_dir_of(N, M, K, false, false, f, f);  /* A = b (N,K), B = a (M,K) */
        p->dir[QS_CUDA_GEMM_BWD1] = qs_cuda_gemm_dir_of(K, M, N, true, false, f, g);  /* A = b (N,K) = (k,m), B = dc */
        p->dir[QS_CUDA_GEMM_BWD2] = qs_cuda_gemm_dir_of(K, N, M, true, true, f, g);   /* A = a (M,K) = (k,m), B = dc (k,n) */
    } else {
        p->dir[QS_CUDA_GEMM_FWD] = qs_cuda_gemm_dir_of(N, M, K, true, false, f, f);   /* A = b (K,N) = (k,m), B = a */
        p->dir[QS_CUDA_GEMM_BWD1] = qs_cuda_gemm_dir_of(K, M, N, false, false, f, g); /* A = b (K,N) = (m,k), B = dc */
        p->dir[QS_CUDA_GEMM_BWD2] = qs_cuda_gemm_dir_of(N, K, M, true, true, g, f);   /* A = dc (M,N) = (k,m), B = a (k,n) */
    }
    qs_status st = qs_cuda_gemm_plan_build(p, lt, 0);
    if (st != QS_OK) {
        qs_cuda_bmm_plan_destroy(be, bp);
        return st;
    }
    *plan = bp;
    *workspace = p->ws_bytes;
    return QS_OK;
}

/* The checks every bmm execution starts with: plan kind, two operands of the given storage
 * dtypes (per-tensor scales), the output and the workspace. */
static qs_status bmm_args(void *plan, const qs_operand *u, bool u_grad, const char *u_name, const qs_operand *v,
                          const char *v_name, const float *out, const void *ws, const char *what) {
    QS_TRY(qs_cuda_gemm_plan_check(plan, QS_CUDA_PLAN_BMM, what));
    const qs_cuda_bmm_plan_t *bp = plan;
    char label[64];
    snprintf(label, sizeof label, "%s %s", what, u_name);
    QS_TRY(qs_cuda_gemm_operand_check(u, u_grad ? bp->gdt : bp->fdt, false, label));
    snprintf(label, sizeof label, "%s %s", what, v_name);
    QS_TRY(qs_cuda_gemm_operand_check(v, bp->fdt, false, label));
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL output", what);
    return qs_cuda_gemm_ws_check(&bp->lt, ws, what);
}

/* Contract (backend_ops.def bmm_forward): c_b (M,N) = alpha · a_b (M,K) · op(b_b), overwritten; a, b in
 * the forward dtype with per-tensor scales. */
qs_status qs_cuda_bmm_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *a, const qs_operand *b,
                              float *c, void *ws) {
    QS_TRY(bmm_args(plan, a, false, "a", b, "b", c, ws, "bmm_forward"));
    qs_cuda_bmm_plan_t *bp = plan;
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));
    /* A = b, B = a in either layout (cuda_gemm.h, "Products") */
    return qs_cuda_gemm_run(&bp->lt, QS_CUDA_GEMM_FWD, lt, qs_cuda_stream_of(be, s), b->data, a->data, NULL, NULL, b->scale, a->scale, c, false, NULL, ws);
}

/* Contract (backend_ops.def bmm_backward_a): da_b (M,K) (+)= alpha · dc_b (M,N) · op(b_b)ᵀ; dc in the
 * gradient dtype, b in the forward dtype. */
qs_status qs_cuda_bmm_backward_a(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *b,
                                 float *da, bool accumulate, void *ws) {
    QS_TRY(bmm_args(plan, dc, true, "dc", b, "b", da, ws, "bmm_backward_a"));
    qs_cuda_bmm_plan_t *bp = plan;
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));
    /* A = b, B = dc in either layout */
    return qs_cuda_gemm_run(&bp->lt, QS_CUDA_GEMM_BWD1, lt, qs_cuda_stream_of(be, s), b->data, dc->data, NULL, NULL, b->scale, dc->scale, da, accumulate,
                  NULL, ws);
}

/* Contract (backend_ops.def bmm_backward_b): db_b (+)= alpha · dc_bᵀ · a_b (N,K) with trans_b, else
 * alpha · a_bᵀ · dc_b (K,N); dc in the gradient dtype, a in the forward dtype. */
qs_status qs_cuda_bmm_backward_b(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *a,
                                 float *db, bool accumulate, void *ws) {
    QS_TRY(bmm_args(plan, dc, true, "dc", a, "a", db, ws, "bmm_backward_b"));
    qs_cuda_bmm_plan_t *bp = plan;
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));
    const cudaStream_t st = qs_cuda_stream_of(be, s);
    if (bp->d.trans_b) /* A = a (k,m), B = dc (k,n) */
        return qs_cuda_gemm_run(&bp->lt, QS_CUDA_GEMM_BWD2, lt, st, a->data, dc->data, NULL, NULL, a->scale, dc->scale, db, accumulate, NULL, ws);
    /* A = dc (k,m), B = a (k,n) */
    return qs_cuda_gemm_run(&bp->lt, QS_CUDA_GEMM_BWD2, lt, st, dc->data, a->data, NULL, NULL, dc->scale, a->scale, db, accumulate, NULL, ws);
}
