/* src/cuda/cuda_conv_legacy.c — defines: the LEGACY path of the CUDA convolution:
 * cudnnConvolutionForward / BackwardData / BackwardFilter on FP32 NHWC tensors and KRSC filters.
 * The algorithm comes from cudnnGet*Algorithm_v7's ranking (benchmark mode: measured once with
 * cudnnFind*Algorithm, Get when Find fails, e.g. out of memory) and is cached. Deterministic
 * algorithms are preferred; FFT and Winograd algorithms are never taken (they change the rounding
 * of the sums, and FP32 is the reference precision). FP32 runs CUDNN_FMA_MATH (plain FP32 FMA
 * kernels), TF32 CUDNN_DEFAULT_MATH (never ALLOW_CONVERSION, which may down-convert to FP16).
 * alpha = 1; beta = 1 implements accumulate. */
#include "cuda/cuda_conv_plan.h"

#include <stdio.h>

#define QS_CONV_MAX_ALGOS 16

/* FFT and Winograd algorithms change how the sums are rounded: never taken. */
static bool legacy_algo_allowed(int dir, int algo) {
    switch (dir) {
    case QS_CONV_FWD:
        return algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT && algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
               algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD && algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case QS_CONV_BWD_DATA:
        return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT && algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING &&
               algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD &&
               algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    default:
        return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT && algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING &&
               algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
    }
}

/* One candidate algorithm, whatever the direction. */
typedef struct algo_res {
    int algo;
    cudnnStatus_t status;
    bool deterministic;
    cudnnMathType_t math;
} algo_res;

/* Candidates of direction dir, measured (find) or from heuristics (!find). */
static cudnnStatus_t legacy_candidates(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudnnConvolutionDescriptor_t cv,
                                       bool find, algo_res *res, int *n) {
    int got = 0;
    cudnnStatus_t st;
    *n = 0;
    if (dir == QS_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[QS_CONV_MAX_ALGOS];
        st = find ? cudnnFindConvolutionForwardAlgorithm(h, cp->xd, cp->wd, cv, cp->yd, QS_CONV_MAX_ALGOS, &got, perf)
                  : cudnnGetConvolutionForwardAlgorithm_v7(h, cp->xd, cp->wd, cv, cp->yd, QS_CONV_MAX_ALGOS, &got, perf);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < got; i++)
            res[i] = (algo_res){(int)perf[i].algo, perf[i].status, perf[i].determinism == CUDNN_DETERMINISTIC,
                                perf[i].mathType};
    } else if (dir == QS_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[QS_CONV_MAX_ALGOS];
        st = find ? cudnnFindConvolutionBackwardDataAlgorithm(h, cp->wd, cp->yd, cv, cp->xd, QS_CONV_MAX_ALGOS, &got, perf)
                  : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, cp->wd, cp->yd, cv, cp->xd, QS_CONV_MAX_ALGOS, &got,
                                                                perf);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < got; i++)
            res[i] = (algo_res){(int)perf[i].algo, perf[i].status, perf[i].determinism == CUDNN_DETERMINISTIC,
                                perf[i].mathType};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[QS_CONV_MAX_ALGOS];
        st = find ? cudnnFindConvolutionBackwardFilterAlgorithm(h, cp->xd, cp->yd, cv, cp->wd, QS_CONV_MAX_ALGOS, &got,
                                                                perf)
                  : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, cp->xd, cp->yd, cv, cp->wd, QS_CONV_MAX_ALGOS, &got,
                                                                  perf);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < got; i++)
            res[i] = (algo_res){(int)perf[i].algo, perf[i].status, perf[i].determinism == CUDNN_DETERMINISTIC,
                                perf[i].mathType};
    }
    if (st == CUDNN_STATUS_SUCCESS) *n = got < 0 ? 0 : got > QS_CONV_MAX_ALGOS ? QS_CONV_MAX_ALGOS : got;
    return st;
}

/* The cuDNN workspace bytes of algorithm algo of direction dir. */
static cudnnStatus_t legacy_ws_size(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudnnConvolutionDescriptor_t cv,
                                    int algo, size_t *bytes) {
    if (dir == QS_CONV_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(h, cp->xd, cp->wd, cv, cp->yd, (cudnnConvolutionFwdAlgo_t)algo,
                                                       bytes);
    if (dir == QS_CONV_BWD_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, cp->wd, cp->yd, cv, cp->xd,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, cp->xd, cp->yd, cv, cp->wd,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* FP32 NHWC tensor and KRSC filter descriptors of the plan (shared by the directions). */
static qs_status legacy_descs(qs_cuda_conv_plan_t *cp, int dir) {
    const qs_conv_desc *d = &cp->d;
    if (cp->xd) return QS_OK;
    DNN_TRY(cudnnCreateTensorDescriptor(&cp->xd));
    DNN_TRY(cudnnCreateTensorDescriptor(&cp->yd));
    DNN_TRY(cudnnCreateFilterDescriptor(&cp->wd));
    DNN_TRY(cudnnSetTensor4dDescriptor(cp->xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)d->N, (int)d->C, (int)d->H,
                                       (int)d->W));
    DNN_TRY(cudnnSetTensor4dDescriptor(cp->yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)d->N, (int)d->K, (int)d->P,
                                       (int)d->Q));
    DNN_TRY(cudnnSetFilter4dDescriptor(cp->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, (int)d->K, (int)d->C, (int)d->R,
                                       (int)d->S));
    return QS_OK;
}

/* Choose a legacy algorithm for direction dir on FP32 data; tf32 selects the math. */
qs_status qs_cuda_conv_legacy_build(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, bool tf32, qs_cuda_conv_dir *cd) {
    const qs_conv_desc *d = &cp->d;
    QS_TRY(legacy_descs(cp, dir));
    cd->eng = QS_CONV_ENG_LEGACY;
    DNN_TRY(cudnnCreateConvolutionDescriptor(&cd->conv));
    DNN_TRY(cudnnSetConvolution2dDescriptor(cd->conv, (int)d->pad_h, (int)d->pad_w, (int)d->stride_h,
                                            (int)d->stride_w, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    const cudnnMathType_t want = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    DNN_TRY(cudnnSetConvolutionMathType(cd->conv, want));
    int on = 0, oc = 0, oh = 0, ow = 0;
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(cd->conv, cp->xd, cp->wd, &on, &oc, &oh, &ow));
    if (on != d->N || oc != d->K || oh != d->P || ow != d->Q)
        return QS_FAIL(QS_ERR_INTERNAL, "conv_plan: cuDNN computes output %dx%dx%dx%d, the descriptor says %lldx%lldx%lldx%lld",
                       on, oh, ow, oc, (long long)d->N, (long long)d->P, (long long)d->Q, (long long)d->K);

    algo_res res[QS_CONV_MAX_ALGOS];
    int n = 0;
    const bool find = qs_cuda_conv_benchmark();
    const char *how = find ? "measured" : "heuristic";
    cudnnStatus_t st = legacy_candidates(cp, dir, h, cd->conv, find, res, &n);
    if (st != CUDNN_STATUS_SUCCESS && find) { /* e.g. Find could not allocate its buffers: heuristics */
        how = "heuristic";
        st = legacy_candidates(cp, dir, h, cd->conv, false, res, &n);
    }
    if (st != CUDNN_STATUS_SUCCESS) return qs_cuda_conv_dnn_fail(d, dir, "cudnnGetConvolution*Algorithm_v7", st);
    /* results come fastest (or best ranked) first: the first deterministic acceptable one, else
     * the first one */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const algo_res *r = &res[i];
            if (r->status != CUDNN_STATUS_SUCCESS || !legacy_algo_allowed(dir, r->algo)) continue;
            if (pass == 0 && !r->deterministic) continue;
            if (r->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
            if (!tf32 && r->math != CUDNN_FMA_MATH && r->math != CUDNN_DEFAULT_MATH) continue;
            /* FP32 keeps FMA math whatever the result says; TF32 takes the measured math */
            cudnnMathType_t m = tf32 ? r->math : CUDNN_FMA_MATH;
            if (cudnnSetConvolutionMathType(cd->conv, m) != CUDNN_STATUS_SUCCESS) continue;
            size_t ws = 0;
            if (legacy_ws_size(cp, dir, h, cd->conv, r->algo, &ws) != CUDNN_STATUS_SUCCESS || ws > QS_CONV_ALGO_WS_CAP)
                continue;
            cd->algo = r->algo;
            cd->math = m;
            cd->dnn_ws = ws;
            snprintf(cd->impl, sizeof cd->impl, "legacy %s algo %d (%s%s), cudnn ws %zu B",
                     m == CUDNN_FMA_MATH ? "fp32 fma" : "fp32 data, tf32 math", r->algo, how,
                     r->deterministic ? "" : ", nondeterministic", ws);
            return QS_OK;
        }
    cudnnSetConvolutionMathType(cd->conv, want);
    return QS_FAIL(QS_ERR_BACKEND,
                   "cudnn%sConvolution%sAlgorithm found no usable algorithm (of %d; FFT/Winograd excluded) for conv "
                   "N=%lld H=%lld W=%lld C=%lld K=%lld %lldx%lld at %s (%s)",
                   how[0] == 'm' ? "Find" : "Get", dir == QS_CONV_FWD ? "Forward" : dir == QS_CONV_BWD_DATA ? "BackwardData" : "BackwardFilter",
                   n, (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K,
                   (long long)d->R, (long long)d->S, qs_precision_name(d->prec), qs_cuda_conv_dir_names[dir]);
}

/* Contract: cuda_conv_plan.h (alpha 1; beta 1 accumulates). */
qs_status qs_cuda_conv_legacy_exec(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, const void *a, const void *b,
                             float *out, float beta, void *ws) {
    const qs_conv_desc *d = &cp->d;
    const qs_cuda_conv_dir *cd = &cp->dir[dir];
    const float alpha = 1.0f;
    if (dir == QS_CONV_FWD)
        DNN_TRY(cudnnConvolutionForward(h, &alpha, cp->xd, a, cp->wd, b, cd->conv, (cudnnConvolutionFwdAlgo_t)cd->algo,
                                        ws, cd->dnn_ws, &beta, cp->yd, out));
    else if (dir == QS_CONV_BWD_DATA)
        DNN_TRY(cudnnConvolutionBackwardData(h, &alpha, cp->wd, b, cp->yd, a, cd->conv,
                                             (cudnnConvolutionBwdDataAlgo_t)cd->algo, ws, cd->dnn_ws, &beta, cp->xd,
                                             out));
    else
        DNN_TRY(cudnnConvolutionBackwardFilter(h, &alpha, cp->xd, b, cp->yd, a, cd->conv,
                                               (cudnnConvolutionBwdFilterAlgo_t)cd->algo, ws, cd->dnn_ws, &beta,
                                               cp->wd, out));
    return QS_OK;
}

