/* src/core/backend_desc.c — output-shape completion and validation of conv/pool
 * descriptors (backend independent; PyTorch floor-mode arithmetic), and the argument rules
 * that every backend's ops share (core/backend.h). */
#include "core/backend.h"

/* Output extent of a window sliding over `in` with kernel k, stride st and symmetric padding
 * pad (floor mode); 0 or less when nothing fits. */
static int64_t qs_window_out(int64_t in, int64_t k, int64_t st, int64_t pad) {
    int64_t span = in + 2 * pad - k;
    return span < 0 ? 0 : span / st + 1;
}

/* Shared checks of the window geometry; `what` is "conv" or "pool". */
static qs_status qs_window_check(const char *what, int64_t N, int64_t H, int64_t W, int64_t C, int64_t R,
                                 int64_t S, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
    if (N < 1 || H < 1 || W < 1 || C < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s descriptor: input (N,H,W,C) = (%lld,%lld,%lld,%lld) must be positive in every dimension",
                       what, (long long)N, (long long)H, (long long)W, (long long)C);
    if (R < 1 || S < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s descriptor: kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld; kernel and "
                       "stride must be >= 1 and padding >= 0",
                       what, (long long)R, (long long)S, (long long)sh, (long long)sw, (long long)ph, (long long)pw);
    return QS_OK;
}

/* *P, *Q: the output extent of the window over H×W; QS_ERR_INVALID_ARG naming `remedy` when
 * it is empty. `what` is "conv" or "pool". */
static qs_status qs_window_pq(const char *what, int64_t H, int64_t W, int64_t R, int64_t S, int64_t sh, int64_t sw,
                              int64_t ph, int64_t pw, const char *remedy, int64_t *P, int64_t *Q) {
    *P = qs_window_out(H, R, sh, ph);
    *Q = qs_window_out(W, S, sw, pw);
    if (*P < 1 || *Q < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s descriptor: kernel %lldx%lld with padding %lldx%lld does not fit the %lldx%lld input "
                       "(empty output); %s",
                       what, (long long)R, (long long)S, (long long)ph, (long long)pw, (long long)H, (long long)W,
                       remedy);
    return QS_OK;
}

qs_status qs_conv_desc_finish(qs_conv_desc *d) {
    QS_TRY(qs_window_check("conv", d->N, d->H, d->W, d->C, d->R, d->S, d->stride_h, d->stride_w, d->pad_h, d->pad_w));
    if (d->K < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv descriptor: %lld output channels; need at least 1", (long long)d->K);
    return qs_window_pq("conv", d->H, d->W, d->R, d->S, d->stride_h, d->stride_w, d->pad_h, d->pad_w,
                        "enlarge the input or padding, or shrink the kernel", &d->P, &d->Q);
}

qs_status qs_pool_desc_finish(qs_pool_desc *d) {
    if (d->kind != QS_POOL_MAX && d->kind != QS_POOL_AVG)
        return QS_FAIL(QS_ERR_INVALID_ARG, "pool descriptor: unknown kind %d; use QS_POOL_MAX or QS_POOL_AVG",
                       (int)d->kind);
    QS_TRY(qs_window_check("pool", d->N, d->H, d->W, d->C, d->R, d->S, d->stride_h, d->stride_w, d->pad_h, d->pad_w));
    if (2 * d->pad_h > d->R || 2 * d->pad_w > d->S)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "pool descriptor: padding %lldx%lld exceeds half the %lldx%lld kernel (PyTorch rejects this "
                       "too: windows could lie entirely in the padding); reduce the padding",
                       (long long)d->pad_h, (long long)d->pad_w, (long long)d->R, (long long)d->S);
    return qs_window_pq("pool", d->H, d->W, d->R, d->S, d->stride_h, d->stride_w, d->pad_h, d->pad_w,
                        "enlarge the input or shrink the kernel", &d->P, &d->Q);
}

qs_dtype qs_precision_operand_dtype(qs_precision p, bool gradient) {
    switch (p) {
    case QS_PREC_BF16: return QS_BF16;
    case QS_PREC_FP16: return QS_F16;
    case QS_PREC_FP8: return gradient ? QS_F8E5M2 : QS_F8E4M3;
    case QS_PREC_INT8: return QS_S8;
    default: return QS_F32;
    }
}

const char *qs_prec_support_name(qs_prec_support s) {
    return s == QS_PREC_NATIVE ? "native" : s == QS_PREC_EMULATED ? "emulated" : "unsupported";
}

qs_status qs_bias_grad_check(qs_dtype dy_dt, const float *db, bool has_bias, const char *what) {
    if (dy_dt == QS_F32 && db && !has_bias)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: db given but the plan has no bias; pass NULL", what);
    if (dy_dt == QS_F32 && !db && has_bias)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan has a bias but db is NULL", what);
    if (dy_dt != QS_F32 && db)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: db with a %s dy; compute it with column_sums from the FP32 gradient",
                       what, qs_dtype_name(dy_dt));
    return QS_OK;
}

qs_status qs_quantize_dst_t_check(qs_dtype dt, bool per_row, const void *dst_t) {
    if (!dst_t) return QS_OK;
    if (dt != QS_S8 && dt != QS_F8E4M3 && dt != QS_F8E5M2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "quantize to %s: a transposed copy (dst_t) exists only for s8 and fp8",
                       qs_dtype_name(dt));
    if (per_row) return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: a transposed copy (dst_t) with per-row scales");
    return QS_OK;
}

qs_status qs_quantize_delayed_check(qs_dtype dt, const qs_quant_delayed *delayed) {
    if (!delayed) return QS_OK;
    if (dt != QS_F8E4M3 && dt != QS_F8E5M2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "quantize to %s: delayed scaling exists only for fp8", qs_dtype_name(dt));
    if (!delayed->amax || delayed->len < 1 || delayed->slot < 0 || delayed->slot >= delayed->len)
        return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: delayed scaling needs an amax history (len %d >= 1, slot %d in [0, len))",
                       delayed->len, delayed->slot);
    return QS_OK;
}

/* P,Q given against P,Q computed: the descriptor must have been finished. */
static qs_status qs_plan_pq_check(int64_t P, int64_t Q, int64_t P2, int64_t Q2, const char *what, const char *finish) {
    if (P2 != P || Q2 != Q)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: descriptor has P,Q = %lld,%lld but the geometry gives %lld,%lld; call "
                       "%s() first", what, (long long)P, (long long)Q, (long long)P2, (long long)Q2, finish);
    return QS_OK;
}

qs_status qs_conv_plan_args(const qs_conv_desc *d, void **plan, size_t *workspace) {
    if (!d || !plan || !workspace) return QS_FAIL(QS_ERR_INVALID_ARG, "conv_plan: NULL descriptor or output");
    *plan = NULL;
    *workspace = 0;
    qs_conv_desc dd = *d;
    QS_TRY(qs_conv_desc_finish(&dd));
    return qs_plan_pq_check(d->P, d->Q, dd.P, dd.Q, "conv_plan", "qs_conv_desc_finish");
}

qs_status qs_pool_plan_args(const qs_pool_desc *d, void **plan, size_t *workspace) {
    if (!d || !plan || !workspace) return QS_FAIL(QS_ERR_INVALID_ARG, "pool_plan: NULL descriptor or output");
    *plan = NULL;
    *workspace = 0;
    qs_pool_desc dd = *d;
    QS_TRY(qs_pool_desc_finish(&dd));
    QS_TRY(qs_plan_pq_check(d->P, d->Q, dd.P, dd.Q, "pool_plan", "qs_pool_desc_finish"));
    if (dd.H * dd.W > INT32_MAX)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "pool_plan: %lldx%lld input is too large for int32 argmax indices",
                       (long long)dd.H, (long long)dd.W);
    return QS_OK;
}

/* An F32-or-BF16 dtype of a batch-norm op (`role` names the argument). */
static qs_status bn_dtype(const char *what, const char *role, qs_dtype dt) {
    if (dt == QS_F32 || dt == QS_BF16) return QS_OK;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: %s %s; batch norm takes f32 or bf16 there", what, role, qs_dtype_name(dt));
}

qs_status qs_f32_or_bf16_check(const char *what, const char *role, qs_dtype dt) {
    if (dt == QS_F32 || dt == QS_BF16) return QS_OK;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: %s %s; it must be f32 or bf16", what, role, qs_dtype_name(dt));
}

qs_status qs_dx_accumulate_check(const char *what, qs_dtype dx_dt, bool accumulate) {
    if (dx_dt == QS_BF16 && accumulate)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s: accumulate with a bf16 dx; a rounded gradient cannot be accumulated (accumulate into an f32 "
                       "dx and quantize the sum)",
                       what);
    return QS_OK;
}

qs_status qs_batchnorm_dtype_check(const char *what, qs_dtype x_dt, qs_dtype y_dt, qs_dtype dx_dt, bool accumulate) {
    QS_TRY(bn_dtype(what, "input dtype (x_dt)", x_dt));
    QS_TRY(bn_dtype(what, "output dtype (y_dt)", y_dt));
    QS_TRY(bn_dtype(what, "input-gradient dtype (dx_dt)", dx_dt));
    return qs_dx_accumulate_check(what, dx_dt, accumulate);
}

qs_status qs_batchnorm_forward_check(const char *what, bool train, int64_t rows, qs_dtype x_dt, qs_dtype y_dt,
                                     qs_dtype residual_dt) {
    QS_TRY(qs_batchnorm_dtype_check(what, x_dt, y_dt, QS_F32, false));
    QS_TRY(qs_f32_or_bf16_check(what, "residual dtype (residual_dt)", residual_dt));
    if (train && rows < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s: %lld value(s) per channel; training-mode batch norm needs at least 2 (like PyTorch)", what,
                       (long long)rows);
    return QS_OK;
}

qs_status qs_sgd_step_check(int64_t n, const float *buf, float momentum, float dampening, bool nesterov) {
    const bool use_buf = momentum != 0.0f;
    if (use_buf && n > 0 && !buf)
        return QS_FAIL(QS_ERR_INVALID_ARG, "sgd_step: momentum %g needs a momentum buffer but buf is NULL",
                       (double)momentum);
    if (nesterov && (!use_buf || dampening != 0.0f))
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "sgd_step: Nesterov momentum requires momentum > 0 and dampening = 0 (PyTorch rule)");
    return QS_OK;
}

qs_status qs_adamw_step_check(int64_t step) {
    if (step < 1) return QS_FAIL(QS_ERR_INVALID_ARG, "adamw_step: step %lld; steps count from 1", (long long)step);
    return QS_OK;
}

qs_status qs_dy_dtype_check(const char *what, qs_dtype dy_dt) {
    if (dy_dt == QS_F32 || dy_dt == QS_BF16) return QS_OK;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: output-gradient dtype (dy_dt) %s; it must be f32 or bf16", what,
                   qs_dtype_name(dy_dt));
}

qs_status qs_gemm_out_dtype_check(const char *what, qs_dtype y_dt, qs_dtype dx_dt) {
    const qs_dtype dts[2] = {y_dt, dx_dt};
    const char *const roles[2] = {"forward output dtype (y_dt)", "backward-data output dtype (dx_dt)"};
    for (int i = 0; i < 2; i++)
        if (dts[i] != QS_F32 && dts[i] != QS_BF16)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "%s: %s %s; it must be f32 or bf16", what, roles[i],
                           qs_dtype_name(dts[i]));
    return QS_OK;
}
