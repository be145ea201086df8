/* src/cuda/cuda_conv.c — defines: the conv_* ops of the CUDA backend: 2-D convolution through
 * cuDNN 9, every CUDA precision but INT8 (INT8 and per-row weight scales: QS_ERR_UNSUPPORTED).
 *
 * Layouts (backend.h): X (N,H,W,C), Y (N,P,Q,K) NHWC; weights (K,C,R,S) OIHW; Y in the plan's y_dt
 * and dX in its dx_dt (F32 or BF16), dW FP32. cuDNN's NHWC convolutions want KRSC filters:
 * forward and backward-data transpose W into the workspace (widening it where the path needs it),
 * backward-weights produces dW in KRSC and transposes it back — both skipped when R·S == 1 or
 * C == 1, where the two layouts coincide. A plan chooses ONE path per direction at plan time
 * (cuda_conv_plan.c: LEGACY, cuda_conv_legacy.c, or GRAPH, cuda_conv_engines.c), which
 * cuda_conv_run.c executes.
 * Choosing by timing or not: by default every choice is a pure function of the shapes, the
 * precision, the GPU and the cuDNN version (heuristic order, fixed path preference), so two
 * processes — a run and its resumption, a profile and the training it predicts — run the same
 * algorithms and round the same way. With QS_CUDNN_BENCHMARK=1 (cuda_conv.h) algorithms, graph
 * engines and paths are measured and the fastest kept: faster, but near-ties may resolve
 * differently in another process, so a resumed run is then equal only up to rounding.
 * Bias: forward adds b in the epilogue (cuda_conv_run.c); backward-weights' db (FP32 dY only,
 * backend_ops.def's NULL rule) = column sums of dY (N·P·Q, K) with qs_cuda_column_sums, the reduction the
 * layers use for low-precision biases. The cuDNN handle is qs_cuda_be(be)->dnn, created on first
 * use; every call sets its stream. */
#include "cuda/cuda_conv_plan.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

/* Free a conv plan: every direction's cuDNN objects and the legacy descriptors (NULL: nothing). */
void qs_cuda_conv_plan_destroy(qs_backend *be, void *plan) {
    qs_cuda_conv_plan_t *cp = plan;
    if (!cp) return;
    for (int i = 0; i < QS_CONV_DIRS; i++) qs_cuda_conv_dir_clear(&cp->dir[i]);
    if (cp->xd) cudnnDestroyTensorDescriptor(cp->xd);
    if (cp->yd) cudnnDestroyTensorDescriptor(cp->yd);
    if (cp->wd) cudnnDestroyFilterDescriptor(cp->wd);
    free(cp);
}

/* Destroy the backend's cuDNN handle (at destroy). */
void qs_cuda_conv_release(qs_backend *be) {
    qs_cuda_backend *cb = qs_cuda_be(be);
    if (cb->dnn) cudnnDestroy((cudnnHandle_t)cb->dnn);
    cb->dnn = NULL;
}

/* Contract: cuda_conv.h. */
const char *qs_cuda_conv_impl_name(const void *plan, int dir) {
    const qs_cuda_conv_plan_t *cp = plan;
    if (!cp || cp->kind != QS_CUDA_PLAN_CONV || dir < 0 || dir >= QS_CONV_DIRS) return "";
    return cp->dir[dir].impl;
}

/* Validate the descriptor, make the handle, build every direction (cuda_conv_plan.c). */
qs_status qs_cuda_conv_plan(qs_backend *be, const qs_conv_desc *d, void **plan, size_t *workspace) {
    QS_TRY(qs_conv_plan_args(d, plan, workspace));
    qs_conv_desc dd = *d; /* finished: the same P,Q */
    if ((unsigned)dd.prec >= QS_PREC_COUNT)
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv_plan: unknown precision %d", (int)dd.prec);
    QS_TRY(qs_gemm_out_dtype_check("conv_plan", dd.y_dt, dd.dx_dt));
    if (dd.prec == QS_PREC_INT8)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "conv_plan: INT8 convolution is not available on the CUDA backend (cuDNN has no int8 "
                       "backward-data/backward-weights, and its int8 forward needs NCHW_VECT_C layouts); assign fp8 "
                       "or bf16 to this layer (N=%lld H=%lld W=%lld C=%lld K=%lld %lldx%lld)",
                       (long long)dd.N, (long long)dd.H, (long long)dd.W, (long long)dd.C, (long long)dd.K,
                       (long long)dd.R, (long long)dd.S);
    const int64_t dims[] = {dd.N, dd.H, dd.W, dd.C, dd.K, dd.R, dd.S, dd.P, dd.Q, dd.stride_h, dd.stride_w, dd.pad_h, dd.pad_w};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] > INT_MAX)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "conv_plan: dimension %lld exceeds cuDNN's int range",
                           (long long)dims[i]);
    cudnnHandle_t h;
    QS_TRY(qs_cuda_conv_handle(be, &h));
    cudaStream_t stream = qs_cuda_be(be)->stream.s;
    cudnnStatus_t sst = cudnnSetStream(h, stream);
    if (sst != CUDNN_STATUS_SUCCESS) return qs_cuda_conv_dnn_fail(&dd, QS_CONV_FWD, "cudnnSetStream", sst);

    qs_cuda_conv_plan_t *cp = calloc(1, sizeof *cp);
    if (!cp) return QS_FAIL(QS_ERR_OOM, "conv_plan: out of memory for the plan");
    cp->kind = QS_CUDA_PLAN_CONV;
    cp->d = dd;
    cp->fdt = qs_precision_operand_dtype(dd.prec, false);
    cp->gdt = qs_precision_operand_dtype(dd.prec, true);
    qs_status st = QS_OK;
    for (int dir = 0; dir < QS_CONV_DIRS && st == QS_OK; dir++) st = qs_cuda_conv_build_dir(be, cp, dir, h, stream);
    if (st != QS_OK) {
        qs_cuda_conv_plan_destroy(be, cp);
        return st;
    }
    for (int dir = 0; dir < QS_CONV_DIRS; dir++) cp->ws = cp->dir[dir].total > cp->ws ? cp->dir[dir].total : cp->ws;
    *plan = cp;
    *workspace = cp->ws;
    return QS_OK;
}

/* plan is a conv plan; `what` names the op. */
static qs_status plan_check(void *plan, const char *what) {
    if (!plan) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: plan is NULL; create it with conv_plan", what);
    if (((const qs_cuda_conv_plan_t *)plan)->kind != QS_CUDA_PLAN_CONV)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan passed is of another operator kind; pass the conv plan", what);
    return QS_OK;
}

/* An operand of the plan's storage dtype; FP8 needs its (device) scale; per-row scales are not
 * supported (weights, allow_per_row) or not allowed (every other operand). */
static qs_status operand_check(const qs_operand *op, qs_dtype expect, bool allow_per_row, const char *what) {
    if (!op || !op->data) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL operand", what);
    if (op->dt != expect)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: operand is %s but the plan's precision stores %s", what,
                       qs_dtype_name(op->dt), qs_dtype_name(expect));
    if (qs_cuda_conv_is_fp8(expect) && !op->scale)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %s operand without a scale", what, qs_dtype_name(expect));
    if (op->per_row && allow_per_row)
        return QS_FAIL(QS_ERR_UNSUPPORTED,
                       "%s: per-row (per-output-channel) weight scales are not supported by the CUDA convolution; "
                       "quantize the weights with one per-tensor scale",
                       what);
    if (op->per_row)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: per-row scales are not allowed for this operand", what);
    return QS_OK;
}

/* y (N,P,Q,K) = conv(x (N,H,W,C), w (K,C,R,S)) + b: x, w in the plan's forward dtype, y in its
 * y_dt (F32, or BF16 rounded to nearest even). */
qs_status qs_cuda_conv_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x, const qs_operand *w,
                               const float *b, void *y, void *ws) {
    QS_TRY(plan_check(plan, "conv_forward"));
    qs_cuda_conv_plan_t *cp = plan;
    QS_TRY(operand_check(x, cp->fdt, false, "conv_forward x"));
    QS_TRY(operand_check(w, cp->fdt, true, "conv_forward w"));
    if (!y || (cp->d.has_bias && !b))
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv_forward: NULL y or (planned with bias) b");
    return qs_cuda_conv_run(be, cp, QS_CONV_FWD, s, x, w, cp->d.has_bias ? b : NULL, y, false, ws);
}

/* dx (N,H,W,C) in the plan's dx_dt = conv_backward_data(dy (N,P,Q,K), w), or (F32 dx) dx += ...
 * with accumulate. */
qs_status qs_cuda_conv_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                     const qs_operand *w, void *dx, bool accumulate, void *ws) {
    QS_TRY(plan_check(plan, "conv_backward_data"));
    qs_cuda_conv_plan_t *cp = plan;
    QS_TRY(operand_check(dy, cp->gdt, false, "conv_backward_data dy"));
    QS_TRY(operand_check(w, cp->fdt, false, "conv_backward_data w"));
    if (!dx) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_data: NULL dx");
    QS_TRY(qs_dx_accumulate_check("conv_backward_data", cp->d.dx_dt, accumulate));
    return qs_cuda_conv_run(be, cp, QS_CONV_BWD_DATA, s, dy, w, NULL, dx, accumulate, ws);
}

/* dw (K,C,R,S) = Σ_{n,p,q} dy ⊗ x windows (overwritten); db (K) = Σ_{n,p,q} dy for an F32 dy. */
qs_status qs_cuda_conv_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                        const qs_operand *x, float *dw, float *db, void *ws) {
    QS_TRY(plan_check(plan, "conv_backward_weights"));
    qs_cuda_conv_plan_t *cp = plan;
    const qs_conv_desc *d = &cp->d;
    QS_TRY(operand_check(dy, cp->gdt, false, "conv_backward_weights dy"));
    QS_TRY(operand_check(x, cp->fdt, false, "conv_backward_weights x"));
    if (!dw) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_backward_weights: NULL dw");
    QS_TRY(qs_bias_grad_check(dy->dt, db, d->has_bias, "conv_backward_weights"));
    QS_TRY(qs_cuda_conv_run(be, cp, QS_CONV_BWD_WEIGHTS, s, dy, x, NULL, dw, false, ws));
    if (db) QS_TRY(qs_cuda_column_sums(be, s, d->N * d->P * d->Q, d->K, dy->data, db));
    return QS_OK;
}
