/* src/cuda/cuda_conv_run.c — defines: the execution of one direction of a CUDA convolution plan:
 * operand widening and W's KRSC transpose into the workspace, the cuDNN call, the epilogue kernel.
 * Staging (region T): when the direction's cuDNN output is BF16, the plan has no FP8 scale and
 * (forward) no bias, cuDNN writes a BF16 Y or dX itself ("direct"). Otherwise the result is staged
 * in T (FP32, or a 16-bit engine's BF16) and the epilogue kernel applies the FP8 scales and the bias
 * in FP32 and rounds to nearest even into a BF16 Y or dX (a 16-bit result with a bias is thus
 * rounded twice: the bits of that path's FP32 Y rounded). T also holds an FP32 dX accumulated where
 * beta cannot be (GRAPH or FP8) and a dW in KRSC. A BF16 dX is never accumulated.
 * FP8 scales live in device memory and change every step, so they cannot go into cuDNN's host-side
 * alpha without a synchronisation: the convolution runs on the unscaled codes and the epilogue
 * multiplies the FP32 result by s_a·s_b (one rounding, like the CPU's INT8 epilogue; identical to
 * scaling the operands for the power-of-two scales quantize chooses). */
#include "cuda/cuda_conv_plan.h"

#include <stdint.h>

/* Contract: cuda_conv_plan.h. Run direction dir: a = x (forward) or dY, b = W or X (backward-weights), out = Y (in the plan's
 * y_dt), dX (in its dx_dt) or dW (FP32). */
qs_status qs_cuda_conv_run(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, qs_stream *s, const qs_operand *a,
                          const qs_operand *b, const float *bias, void *out, bool accumulate, void *ws) {
    const qs_conv_desc *d = &cp->d;
    const qs_cuda_conv_dir *cd = &cp->dir[dir];
    if (cd->total && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv %s: the plan needs %zu bytes of workspace but ws is NULL",
                       qs_cuda_conv_dir_names[dir], cp->ws);
    if (cd->eng == QS_CONV_ENG_GRAPH) { /* graph tensors were declared 16-byte aligned */
        const void *p[4] = {cd->cvt_a ? NULL : a->data, cd->cvt_b ? NULL : b->data, out, ws};
        for (int i = 0; i < 4; i++)
            if (((uintptr_t)p[i] & 15u) != 0)
                return QS_FAIL(QS_ERR_INVALID_ARG,
                               "conv %s: buffer %p is not 16-byte aligned (cuDNN graph tensors need it); pass "
                               "buffers from the backend's alloc",
                               qs_cuda_conv_dir_names[dir], p[i]);
    }
    cudnnHandle_t h;
    QS_TRY(qs_cuda_conv_handle(be, &h));
    cudaStream_t st = qs_cuda_stream_of(be, s);
    DNN_TRY(cudnnSetStream(h, st));
    char *w8 = ws;

    const void *pa = a->data, *pb = b->data;
    if (cd->cvt_a) {
        QS_TRY(qs_cuda_conv_widen(st, qs_cuda_conv_numel_a(d, dir), a->data, a->dt, w8 + cd->off_a, cd->run_a));
        pa = w8 + cd->off_a;
    }
    if (dir != QS_CONV_BWD_WEIGHTS && cd->cvt_b) {
        QS_TRY(qs_cuda_conv_weights_krsc(st, d->K, d->C, d->R, d->S, b->data, b->dt, w8 + cd->off_b, cd->run_b));
        pb = w8 + cd->off_b;
    } else if (cd->cvt_b) {
        QS_TRY(qs_cuda_conv_widen(st, qs_cuda_conv_numel_b(d, dir), b->data, b->dt, w8 + cd->off_b, cd->run_b));
        pb = w8 + cd->off_b;
    }

    /* staged in T: a 16-bit result (unless written straight into a BF16 y or dX), any result
     * bound for a BF16 y or dX that is not, an accumulating backward-data that cannot use beta, a
     * KRSC weight gradient */
    const bool out16 = cd->out_dt != QS_F32;
    const qs_dtype call_dt = qs_cuda_conv_out_dtype(d, dir);
    float beta = 0.0f;
    bool staged = dir == QS_CONV_FWD || call_dt == QS_BF16 ? cd->use_t : out16;
    if (dir == QS_CONV_BWD_DATA && accumulate) {
        if (cd->use_t)
            staged = true;
        else
            beta = 1.0f; /* LEGACY FP32/TF32: cuDNN accumulates */
    }
    if (dir == QS_CONV_BWD_WEIGHTS && cd->use_t) staged = true;
    void *target = staged ? (void *)(w8 + cd->off_t) : (void *)out;
    void *dnn_ws = cd->dnn_ws ? w8 + cd->off_dnn : NULL;

    if (cd->eng == QS_CONV_ENG_LEGACY)
        QS_TRY(qs_cuda_conv_legacy_exec(cp, dir, h, pa, pb, target, beta, dnn_ws));
    else
        QS_TRY(qs_cuda_conv_graph_exec(cp, dir, h, pa, pb, target, dnn_ws));

    const float *sa = cd->scaled ? a->scale : NULL, *sb = cd->scaled ? b->scale : NULL;
    const qs_dtype tdt = cd->out_dt;
    if (dir == QS_CONV_FWD) {
        /* direct: cuDNN wrote y, nothing left to do (not staged, no scale, no bias) */
        if (staged || sa || bias)
            QS_TRY(qs_cuda_conv_epilogue(st, d->N * d->P * d->Q, d->K, target, tdt, out, d->y_dt, sa, sb, bias, false));
    } else if (dir == QS_CONV_BWD_DATA) {
        if (staged || sa)
            QS_TRY(qs_cuda_conv_epilogue(st, d->N * d->H * d->W, d->C, target, tdt, out, call_dt, sa, sb, NULL,
                                         staged && accumulate));
    } else {
        const bool krsc = d->R * d->S > 1 && d->C > 1; /* dW came out KRSC */
        if (staged && krsc)
            QS_TRY(qs_cuda_conv_dw_to_oihw(st, d->K, d->C, d->R, d->S, target, tdt, out, sa, sb));
        else if (staged || sa)
            QS_TRY(qs_cuda_conv_epilogue(st, d->K, d->C * d->R * d->S, target, tdt, out, QS_F32, sa, sb, NULL, false));
    }
    return QS_OK;
}
