/* src/cuda/cuda_linear.c — defines: the fully connected layer of the CUDA backend (linear_*),
 * three products through the cuBLASLt wrapper (cuda_gemm.h, whose "Products" gives the Linear's
 * rows), every GEMM precision but INT8.
 *
 * BF16 outputs (qs_linear_desc.y_dt and dx_dt, F32 or BF16, checked at plan time): without FP8
 * and (forward) without a bias, the product is built with a BF16 D, which cuBLASLt rounds from
 * its FP32 accumulator itself. Every other case — FP8, a bias, or no algorithm for a BF16 D —
 * computes the FP32 result into the workspace and rounds it to nearest even with the cast kernel
 * (qs_cuda_cast). A BF16 dx is never accumulated into.
 * Bias gradient: db (only with an FP32 dY) is a deterministic double-accumulated column-sum
 * kernel (cuda_linear_kernels.cu).
 * Workspace: the wrapper's (cuda_gemm.c), whose scratch also holds, with an FP32 bias gradient,
 * the column-sum partials (chunks·N doubles), and with a BF16 y or dx not written by cuBLASLt the
 * FP32 Y (M·N floats) or dX (M·K), from a 256-byte boundary after the forward's and
 * backward-data's FP8 regions (the column sums, of another direction, may share its bytes). */
#include "cuda/cuda_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_gemm.h"
#include "cuda/cuda_linear_kernels.h"

static const char *const LINEAR_DIR_NAME[QS_CUDA_GEMM_DIRS] = {"forward", "backward-data", "backward-weights"};

typedef struct qs_cuda_linear_plan {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_LINEAR: first, for plan_destroy's dispatch */
    qs_linear_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes of X, W (forward) and dY (gradient) */
    int colsum_chunks;      /* FP32 dY with bias: row blocks of the db column sums */
    bool y_narrow;          /* BF16 y without a BF16-D product: FP32 Y at ws + narrow_off, then cast */
    bool dx_narrow;         /* the same for a BF16 dx (FP32 dX at ws + narrow_off) */
    size_t narrow_off;
    qs_cuda_gemm_plan lt;
} qs_cuda_linear_plan_t;

/* Free a linear plan and its cuBLASLt descriptors (NULL: nothing). */
void qs_cuda_linear_plan_destroy(qs_backend *be, void *plan) {
    qs_cuda_linear_plan_t *lp = plan;
    if (!lp) return;
    qs_cuda_gemm_plan_release(&lp->lt);
    lp->kind = 0;
    free(lp);
}

/* Contract (backend_ops.def linear_plan): Y(M,N) = X(M,K)·W(N,K)ᵀ + b at precision d->prec; *plan
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
    QS_TRY(qs_cuda_gemm_prec_check(cb, d->prec, "linear_plan"));
    QS_TRY(qs_gemm_out_dtype_check("linear_plan", d->y_dt, d->dx_dt));
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));

    qs_cuda_linear_plan_t *lp = calloc(1, sizeof *lp);
    if (!lp) return QS_FAIL(QS_ERR_OOM, "linear_plan: out of memory for the plan");
    lp->kind = QS_CUDA_PLAN_LINEAR;
    lp->d = *d;
    lp->fdt = qs_precision_operand_dtype(d->prec, false);
    lp->gdt = qs_precision_operand_dtype(d->prec, true);
    qs_cuda_gemm_plan *p = &lp->lt;
    snprintf(p->what, sizeof p->what, "linear M=%lld N=%lld K=%lld at %s", (long long)d->M, (long long)d->N,
             (long long)d->K, qs_precision_name(d->prec));
    p->dir_name = LINEAR_DIR_NAME;
    p->prec = d->prec;
    p->fp8 = d->prec == QS_PREC_FP8;
    p->batch = 1;
    p->alpha = 1.0f;
    const int64_t M = d->M, N = d->N, K = d->K;
    p->dir[QS_CUDA_GEMM_FWD] = qs_cuda_gemm_dir_of(N, M, K, false, false, lp->fdt, lp->fdt);  /* A = W, B = X */
    p->dir[QS_CUDA_GEMM_FWD].bias = d->has_bias;
    const bool y16 = d->y_dt == QS_BF16;
    if (y16 && !p->fp8 && !d->has_bias) p->dir[QS_CUDA_GEMM_FWD].ddt = QS_BF16; /* cuBLASLt writes y (if it can) */
    p->dir[QS_CUDA_GEMM_BWD1] = qs_cuda_gemm_dir_of(K, M, N, true, false, lp->fdt, lp->gdt);  /* A = W (k,m), B = dY */
    const bool dx16 = d->dx_dt == QS_BF16;
    if (dx16 && !p->fp8) p->dir[QS_CUDA_GEMM_BWD1].ddt = QS_BF16; /* cuBLASLt writes dx (if it can) */
    p->dir[QS_CUDA_GEMM_BWD2] = qs_cuda_gemm_dir_of(K, N, M, true, true, lp->fdt, lp->gdt);   /* A = X (k,m), B = dY (k,n) */
    size_t scratch = 0;
    if (d->has_bias && lp->gdt == QS_F32) {
        lp->colsum_chunks = qs_cuda_linear_column_sum_chunks(M, N, cb->props.multiProcessorCount);
        scratch = qs_cuda_linear_column_sum_bytes(N, lp->colsum_chunks);
    }
    qs_status st = qs_cuda_gemm_plan_dirs(p, lt);
    if (st != QS_OK) {
        qs_cuda_linear_plan_destroy(be, lp);
        return st;
    }
    /* a BF16 y (dx) that the forward (backward-data) product does not write itself: FP32 Y (dX)
     * in the scratch, after that direction's FP8 copies (the column sums belong to
     * backward-weights: they may overlap it) */
    lp->y_narrow = y16 && p->dir[QS_CUDA_GEMM_FWD].ddt != QS_BF16;
    lp->dx_narrow = dx16 && p->dir[QS_CUDA_GEMM_BWD1].ddt != QS_BF16;
    if (lp->y_narrow || lp->dx_narrow) {
        const size_t f8 = p->fp8 ? qs_cuda_gemm_max(p->f8[QS_CUDA_GEMM_FWD].bytes, p->f8[QS_CUDA_GEMM_BWD1].bytes) : 0;
        const size_t cols = qs_cuda_gemm_max(lp->y_narrow ? (size_t)N : 0, lp->dx_narrow ? (size_t)K : 0);
        lp->narrow_off = qs_cuda_gemm_align_up(f8, QS_CUDA_GEMM_WS_ALIGN);
        scratch = qs_cuda_gemm_max(scratch, lp->narrow_off + qs_cuda_gemm_align_up((size_t)M * cols * sizeof(float), QS_CUDA_GEMM_WS_ALIGN));
    }
    qs_cuda_gemm_plan_layout(p, scratch);
    *plan = lp;
    *workspace = p->ws_bytes;
    return QS_OK;
}

/* Contract (backend_ops.def linear_forward): y (M,N) = x (M,K) · w (N,K)ᵀ + b (N); x, w in the plan's
 * forward dtype (FP8: per-tensor scales in device memory), b FP32 (required with a bias), y in
 * the plan's y_dt: FP32, or BF16 (written by cuBLASLt, or the FP32 Y rounded by the cast kernel). */
qs_status qs_cuda_linear_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x, const qs_operand *w,
                                 const float *b, void *y, void *ws) {
    QS_TRY(qs_cuda_gemm_plan_check(plan, QS_CUDA_PLAN_LINEAR, "linear_forward"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(qs_cuda_gemm_operand_check(x, lp->fdt, true, "linear_forward x"));
    QS_TRY(qs_cuda_gemm_operand_check(w, lp->fdt, true, "linear_forward w"));
    if (!y || (lp->d.has_bias && !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "linear_forward: NULL y or (planned with bias) b");
    QS_TRY(qs_cuda_gemm_ws_check(&lp->lt, ws, "linear_forward"));
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));
    void *out = lp->y_narrow ? (char *)ws + lp->narrow_off : y; /* ws is non-NULL: the plan reserved it */
    QS_TRY(qs_cuda_gemm_run(&lp->lt, QS_CUDA_GEMM_FWD, lt, qs_cuda_stream_of(be, s), w->data, x->data, NULL, NULL, w->scale, x->scale, out, false,
                  lp->d.has_bias ? b : NULL, ws));
    if (!lp->y_narrow) return QS_OK;
    return qs_cuda_cast(be, s, lp->d.M * lp->d.N, out, QS_F32, y, QS_BF16); /* RNE, core/numfmt.h */
}

/* Contract (backend_ops.def linear_backward_data): dx (M,K) = dy (M,N) · w (N,K), or (F32 dx) dx += that
 * with accumulate; dy in the gradient dtype, w in the forward dtype, both per-tensor; dx in the
 * plan's dx_dt (BF16: written by cuBLASLt, or the FP32 dX rounded by the cast kernel). */
qs_status qs_cuda_linear_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                       const qs_operand *w, void *dx, bool accumulate, void *ws) {
    QS_TRY(qs_cuda_gemm_plan_check(plan, QS_CUDA_PLAN_LINEAR, "linear_backward_data"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(qs_cuda_gemm_operand_check(dy, lp->gdt, true, "linear_backward_data dy"));
    QS_TRY(qs_cuda_gemm_operand_check(w, lp->fdt, true, "linear_backward_data w"));
    if (!dx) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_data: NULL dx");
    QS_TRY(qs_dx_accumulate_check("linear_backward_data", lp->d.dx_dt, accumulate));
    QS_TRY(qs_cuda_gemm_ws_check(&lp->lt, ws, "linear_backward_data"));
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));
    void *out = lp->dx_narrow ? (char *)ws + lp->narrow_off : dx;
    QS_TRY(qs_cuda_gemm_run(&lp->lt, QS_CUDA_GEMM_BWD1, lt, qs_cuda_stream_of(be, s), w->data, dy->data, w->data_t, NULL, w->scale, dy->scale,
                  out, accumulate, NULL, ws));
    if (!lp->dx_narrow) return QS_OK;
    return qs_cuda_cast(be, s, lp->d.M * lp->d.K, out, QS_F32, dx, QS_BF16); /* RNE, core/numfmt.h */
}

/* Contract (backend_ops.def linear_backward_weights): dw (N,K) = dy (M,N)ᵀ · x (M,K) (overwritten);
 * db (N) = Σ_rows dy, given exactly when dy is F32 and the plan has a bias, else NULL. */
qs_status qs_cuda_linear_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                          const qs_operand *x, float *dw, float *db, void *ws) {
    QS_TRY(qs_cuda_gemm_plan_check(plan, QS_CUDA_PLAN_LINEAR, "linear_backward_weights"));
    qs_cuda_linear_plan_t *lp = plan;
    QS_TRY(qs_cuda_gemm_operand_check(dy, lp->gdt, true, "linear_backward_weights dy"));
    QS_TRY(qs_cuda_gemm_operand_check(x, lp->fdt, true, "linear_backward_weights x"));
    if (!dw) return QS_FAIL(QS_ERR_INVALID_ARG, "linear_backward_weights: NULL dw");
    QS_TRY(qs_bias_grad_check(dy->dt, db, lp->d.has_bias, "linear_backward_weights"));
    QS_TRY(qs_cuda_gemm_ws_check(&lp->lt, ws, "linear_backward_weights"));
    cublasLtHandle_t lt;
    QS_TRY(qs_cuda_gemm_handle(be, &lt));
    const cudaStream_t st = qs_cuda_stream_of(be, s);
    QS_TRY(qs_cuda_gemm_run(&lp->lt, QS_CUDA_GEMM_BWD2, lt, st, x->data, dy->data, x->data_t, dy->data_t, x->scale, dy->scale, dw, false, NULL, ws));
    if (!db) return QS_OK;
    return qs_cuda_linear_column_sums(st, lp->d.M, lp->d.N, dy->data, lp->colsum_chunks,
                                      lp->colsum_chunks > 1 ? (double *)ws : NULL, db);
}

