/* src/cuda/cuda_conv.c — 2-D convolution through cuDNN 9, every CUDA precision but INT8.
 *
 * Layouts (backend.h): X (N,H,W,C) and Y (N,P,Q,K) NHWC; weights (K,C,R,S) OIHW, FP32 results
 * (at BF16, and for FP8's backward, the sums rounded once to BF16 and widened: below), except
 * that Y is in the plan's y_dt: FP32, or BF16 (the result rounded to nearest even; "Output
 * dtype" below).
 * cuDNN's NHWC convolutions want KRSC filters, so every forward / backward-data call first
 * transposes W into the workspace (qs_cuda_conv_weights_krsc, widening it on the way where the
 * path needs it), and backward-weights produces dW in KRSC and transposes it back — both
 * skipped when R·S == 1 or C == 1, where the two layouts coincide.
 *
 * Choosing by timing or not. By default every choice below is a pure function of the shapes,
 * the precision, the GPU and the cuDNN version (heuristic order, fixed path preference), so two
 * processes — a run and its resumption, a profile and the training it predicts — run the same
 * algorithms and round the same way. With QS_CUDNN_BENCHMARK=1 (cuda_conv.h) the algorithms,
 * graph engines and paths are measured and the fastest kept: faster, but near-ties may resolve
 * differently in another process, so a resumed run is then equal only up to rounding (measured:
 * the GPU resume test on the H200 differed at byte 1073 of the cnn model at BF16).
 *
 * Paths, chosen ONCE per direction at plan time (qs_cuda_conv_impl_name reports them):
 *   LEGACY  cudnnConvolutionForward / BackwardData / BackwardFilter on FP32 tensors; the
 *           algorithm comes from cudnnGet*Algorithm_v7's ranking (benchmark mode: measured
 *           once with cudnnFind*Algorithm, Get when Find fails, e.g. out of memory) and is
 *           cached. Deterministic algorithms are preferred;
 *           FFT and Winograd algorithms are never taken (they change the rounding of the sums,
 *           and FP32 is the reference precision). alpha = 1; beta = 1 implements accumulate.
 *   GRAPH   the graph (cudnnBackend*) API, like bench/cuda/bench_conv_cudnn.cu: one convolution
 *           operation with low-precision inputs and an FP32 output tensor, FP32 compute; engine
 *           configs from heuristics (modes A and FALLBACK), those noted down-converting,
 *           reduced-precision-reduction, FFT or Winograd skipped, deterministic ones preferred;
 *           the first acceptable config in heuristic order is kept (benchmark mode: up to 6
 *           finalized plans of distinct engines are timed once on scratch buffers, the fastest
 *           kept). Why the graph API: the legacy API only runs BF16/FP16
 *           inputs with an output of the same type (its PSEUDO_BFLOAT16 / PSEUDO_HALF
 *           configurations), and rounding Y, dX, dW to 16 bits would break the contract (outputs
 *           are the FP32 sums); the graph API writes the FP32 accumulator directly.
 * Per precision and direction:
 *   FP32   LEGACY, CUDNN_FMA_MATH (no TF32: plain FP32 FMA kernels).
 *   TF32   LEGACY, CUDNN_DEFAULT_MATH (TF32 tensor cores for FP32 data; never
 *          ALLOW_CONVERSION, which may down-convert to FP16).
 *   BF16, FP16, FP8: every path below that cuDNN can build is built and the first in order of
 *   preference runs (build_dir): BF16 the 16-bit-output graph (backward 2–3× faster than the
 *   others on ResNets, docs/BENCHMARKS.md; its forward was slower than the FP32-output graph
 *   for 1×1 stride-1 convolutions, which the layers now run as Linears through cuBLASLt:
 *   qs_backend.pointwise_conv_as_linear), then — forward — the FP32-output graph
 *   or — backward — the widened TF32 legacy path, 4× faster than that graph for wgrad
 *   (measurement below); FP16 the same without the 16-bit output; FP8 forward the E4M3
 *   graph, backward the 16-bit-output graph on BF16-widened operands, then the legacy path;
 *   benchmark mode times them end to end (conversions and epilogue included) on scratch buffers
 *   at plan time and keeps the fastest.
 *     GRAPH with a BF16 output tensor (QS_CUDNN_BF16_OUT=0 turns it off): the engines PyTorch's
 *       BF16 convolutions use; the FP32 sums are rounded once to BF16 in T and the epilogue
 *       widens them (with the FP8 scales, bias, accumulation). Not FP16: its range may not hold
 *       the sums. This rounding is the one difference from the paths below (test_cuda_ops
 *       budgets it: O = 2^-14/12 for a BF16 conv output). With a BF16 y, no FP8 scale and no
 *       bias, the forward writes its result straight into y instead (below).
 *   The others are numerically the same arithmetic — exact products of the stored values, FP32 sums:
 *     GRAPH on the stored dtype: bf16×bf16 / f16×f16 → f32; FP8 forward e4m3×e4m3 → f32 (the
 *       bench's "out_f32" graph; FP8 forward is the one direction where cuDNN's FP8 pays,
 *       docs/BENCHMARKS.md). Caveat: Hopper's FP8 MMA accumulates with fewer than 24 bits —
 *       measured on the H200 (engine 4): |error| ≈ 3e-5·Σ|x·w| against ≈ 1e-7 for the other
 *       paths; negligible next to E4M3's own 2^-4 rounding, but not bit-faithful FP32 sums.
 *     GRAPH on BF16-widened FP8 operands (FP8 backward-data: dY E5M2, W E4M3; backward-
 *       weights: dY E5M2, X E4M3; and forward as an alternative): every FP8 value is exactly a
 *       BF16 value, so this is numerically the FP8 convolution (exact products, FP32 sums), and
 *       BF16 dgrad/wgrad is 1.4–3× faster than cuDNN's own FP8 ones on the H200.
 *     LEGACY TF32 on operands widened to FP32: BF16, FP16 and FP8 values are exactly TF32
 *       values (≤ 11 significant bits, exponent in range), so the TF32 tensor cores compute the
 *       same exact products. This also covers shapes the graphs have no engine for (C = 1, 3).
 *   Why time across paths: with an FP32 output tensor cuDNN 9.14 offers one graph engine per
 *   direction for BF16/FP16 (71 fwd, 78 dgrad, 70 wgrad), sometimes slow. H200, N=256 56×56
 *   C=K=64 3×3, end to end: wgrad 4.0 ms on the bf16 graph against 0.94 ms for TF32 on widened
 *   operands (chosen); forward 0.37 ms on the graph (chosen) against 0.44 ms. (The bench's
 *   bf16-output engines run this forward in 0.14 ms: the FP32 output is what costs.)
 *   Per-tensor FP8 scales live in device memory and change every step, so they cannot be
 *   folded into cuDNN's host-side alpha without a synchronisation: the convolution runs on
 *   the unscaled codes and the epilogue kernel multiplies the FP32 result by s_a·s_b (one
 *   rounding, like the CPU's INT8 epilogue; identical to scaling the operands for the
 *   power-of-two scales that quantize chooses).
 *   Per-row (per-output-channel) weight scales and INT8: QS_ERR_UNSUPPORTED.
 * Output dtypes (qs_conv_desc.y_dt and dx_dt, checked at plan time: F32 or BF16). A BF16 Y is
 * what a following batch norm reads (ResNets at BF16), in half the bytes; a BF16 dX is that
 * batch norm's (or ReLU's) output gradient when this convolution is its only reader. When the
 * direction's cuDNN output is BF16 (cd->out_dt), the plan has no FP8 scale and (forward) no
 * bias, cuDNN writes Y or dX itself (`direct`: no staging, no epilogue; impl names it "bf16 y
 * written directly" / "bf16 dx ..."). Otherwise the result is staged in T (FP32, or a 16-bit
 * engine's BF16) and the epilogue kernel applies the scale and bias in FP32 and rounds to
 * nearest even into Y or dX (a 16-bit engine's result with a bias is thus rounded twice, the
 * same bits as that path's FP32 Y rounded). A BF16 dX is never accumulated. The path choice
 * does not depend on y_dt or dx_dt, except that benchmark mode times each path with the output
 * it will write.
 * Bias: forward adds b in the epilogue kernel (fused with the FP8 scale and a BF16 Y's
 * rounding). backward-weights: db (FP32 dY only; backend.h's NULL rule) = column sums of dY
 * (N·P·Q, K) with qs_cuda_column_sums, the same double-accumulated reduction the layers use for
 * low-precision biases.
 *
 * Workspace, per direction (regions 256-byte aligned; the plan reports the maximum):
 *   [A: first operand widened (x fwd / dY bwd), when the path widens it]
 *   [B: W transposed to KRSC / widened (fwd, bwd-data; unless 1x1 or C == 1 with W used as
 *       stored) | X widened (bwd-weights, when widened)]
 *   [T: staging: the BF16 result of a 16-bit-output path (Y unless direct, dX or dW); the FP32
 *       forward result for a BF16 Y (FP32-output paths); FP32 bwd-data dX
 *       (N·H·W·C) when accumulate cannot use beta (GRAPH or FP8), FP32 bwd-weights dW in KRSC
 *       (K·R·S·C) when it differs from OIHW]
 *   [cuDNN workspace of the chosen algorithm / plan]
 * T for backward-data is reserved even if the caller never accumulates (the plan cannot know).
 *
 * The cuDNN handle is qs_cuda_be(be)->dnn, created on first use; every call sets its stream. */
#include "cuda/cuda_conv.h"

#include <cudnn.h>

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DIR_FWD = 0, DIR_BWD_DATA, DIR_BWD_WEIGHTS, DIR_N };
static const char *const dir_names[DIR_N] = {"forward", "backward-data", "backward-weights"};

typedef enum conv_engine { ENG_NONE = 0, ENG_LEGACY, ENG_GRAPH } conv_engine;

enum { UID_X = 1, UID_W = 2, UID_Y = 3 }; /* graph tensor ids, by role in the forward op */

#define CONV_WS_ALIGN ((size_t)256)
#define CONV_ALGO_WS_CAP ((size_t)1 << 31) /* largest cuDNN workspace an algorithm may ask */
#define CONV_MAX_KEEP 16                    /* backend descriptors kept per direction */
#define CONV_TUNE_PLANS 6                   /* graph plans timed at plan time */
#define CONV_MAX_ALGOS 16

/* Whether QS_CUDNN_BENCHMARK=1: choose algorithms, engines and paths by timing (read once). */
static bool conv_benchmark(void) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv(QS_CUDNN_BENCHMARK_ENV);
        on = v && strcmp(v, "1") == 0;
    }
    return on == 1;
}

/* Whether 16-bit-output engines may be used (QS_CUDNN_BF16_OUT unset or not "0"; read once). */
static bool conv_bf16_out(void) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv(QS_CUDNN_BF16_OUT_ENV);
        on = !(v && strcmp(v, "0") == 0);
    }
    return on == 1;
}

typedef struct conv_dir {
    conv_engine eng;
    qs_dtype run_a, run_b; /* dtypes cuDNN reads for the two inputs (after widening) */
    qs_dtype out_dt;       /* dtype cuDNN writes: F32, or BF16 (staged in T, widened by the epilogue,
                              unless `direct`) */
    bool cvt_a, cvt_b;     /* operand A / B goes through the workspace */
    bool scaled;           /* FP8: the result is multiplied by s_a·s_b */
    bool direct;           /* forward, BF16 y: cuDNN writes its BF16 result straight into y */
    bool use_t;            /* staging region T: the BF16 result, or FP32 (see the header comment) */
    /* LEGACY */
    cudnnConvolutionDescriptor_t conv;
    int algo;
    cudnnMathType_t math;
    /* GRAPH */
    cudnnBackendDescriptor_t gplan;
    cudnnBackendDescriptor_t keep[CONV_MAX_KEEP];
    int nkeep;
    size_t dnn_ws;
    size_t off_a, off_b, off_t, off_dnn, total;
    char impl[192];
} conv_dir;

typedef struct qs_cuda_conv_plan_t {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_CONV (first member: plan_destroy dispatches on it) */
    qs_conv_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes: forward operands (X, W), gradient (dY) */
    cudnnTensorDescriptor_t xd, yd; /* LEGACY: FP32 NHWC X and Y */
    cudnnFilterDescriptor_t wd;     /* LEGACY: FP32 KRSC W */
    conv_dir dir[DIR_N];
    size_t ws;
} qs_cuda_conv_plan_t;

/* ------------------------------------------------------------------ helpers */

static size_t align_up(size_t n) { return (n + CONV_WS_ALIGN - 1) / CONV_WS_ALIGN * CONV_WS_ALIGN; }

static cudaStream_t stream_of(qs_backend *be, qs_stream *s) { return s ? s->s : qs_cuda_be(be)->stream.s; }

static bool is_fp8(qs_dtype dt) { return dt == QS_F8E4M3 || dt == QS_F8E5M2; }

static cudnnDataType_t dnn_dtype(qs_dtype dt) {
    switch (dt) {
    case QS_BF16: return CUDNN_DATA_BFLOAT16;
    case QS_F16: return CUDNN_DATA_HALF;
    case QS_F8E4M3: return CUDNN_DATA_FP8_E4M3;
    case QS_F8E5M2: return CUDNN_DATA_FP8_E5M2;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* A failed cuDNN call: QS_ERR_BACKEND naming the call, the convolution, precision and direction,
 * with cuDNN's status and its last error message. */
static qs_status dnn_fail(const qs_conv_desc *d, int dir, const char *call, cudnnStatus_t st) {
    char msg[384];
    msg[0] = 0;
    cudnnGetLastErrorString(msg, sizeof msg);
    return QS_FAIL(QS_ERR_BACKEND,
                   "%s failed for conv N=%lld H=%lld W=%lld C=%lld K=%lld %lldx%lld (stride %lldx%lld, pad %lldx%lld) "
                   "at %s (%s): %s%s%s",
                   call, (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K,
                   (long long)d->R, (long long)d->S, (long long)d->stride_h, (long long)d->stride_w,
                   (long long)d->pad_h, (long long)d->pad_w, qs_precision_name(d->prec), dir_names[dir],
                   cudnnGetErrorString(st), msg[0] ? " — " : "", msg);
}

/* Check a cuDNN call inside a function that has `d` (const qs_conv_desc *) and `dir` in scope. */
#define DNN_TRY(call)                                                                                   \
    do {                                                                                                \
        cudnnStatus_t dnn_st_ = (call);                                                                 \
        if (dnn_st_ != CUDNN_STATUS_SUCCESS) return dnn_fail(d, dir, #call, dnn_st_);                   \
    } while (0)

/* The backend's cuDNN handle, created on first use on the backend's device. */
static qs_status dnn_handle(qs_backend *be, cudnnHandle_t *out) {
    qs_cuda_backend *cb = qs_cuda_be(be);
    if (!cb->dnn) {
        size_t v = cudnnGetVersion();
        if (v < 90000)
            return QS_FAIL(QS_ERR_UNSUPPORTED,
                           "cuDNN %zu.%zu is loaded but the CUDA backend needs cuDNN 9 (built against %d.%d); "
                           "install cuDNN 9 or fix LD_LIBRARY_PATH",
                           v / 10000, v / 100 % 100, CUDNN_MAJOR, CUDNN_MINOR);
        QS_TRY(qs_cuda_make_current(cb));
        cudnnHandle_t h = NULL;
        cudnnStatus_t st = cudnnCreate(&h);
        if (st != CUDNN_STATUS_SUCCESS)
            return QS_FAIL(QS_ERR_BACKEND, "cudnnCreate failed on cuda:%d: %s", cb->device, cudnnGetErrorString(st));
        cb->dnn = h;
    }
    *out = (cudnnHandle_t)cb->dnn;
    return QS_OK;
}

static int64_t numel_x(const qs_conv_desc *d) { return d->N * d->H * d->W * d->C; }
static int64_t numel_y(const qs_conv_desc *d) { return d->N * d->P * d->Q * d->K; }
static int64_t numel_w(const qs_conv_desc *d) { return d->K * d->C * d->R * d->S; }

/* Elements of the output of direction dir: Y, dX or dW. */
static int64_t numel_out(const qs_conv_desc *d, int dir) {
    return dir == DIR_FWD ? numel_y(d) : dir == DIR_BWD_DATA ? numel_x(d) : numel_w(d);
}

/* The dtype a call's output of direction dir is in: Y in y_dt, dX in dx_dt, dW FP32. */
static qs_dtype out_dtype(const qs_conv_desc *d, int dir) {
    return dir == DIR_FWD ? d->y_dt : dir == DIR_BWD_DATA ? d->dx_dt : QS_F32;
}

/* Elements of operand A (x in forward, dY otherwise) and B (W, or X in backward-weights). */
static int64_t numel_a(const qs_conv_desc *d, int dir) { return dir == DIR_FWD ? numel_x(d) : numel_y(d); }
static int64_t numel_b(const qs_conv_desc *d, int dir) { return dir == DIR_BWD_WEIGHTS ? numel_x(d) : numel_w(d); }

/* Graph tensor ids → pointers, given the two inputs and the output of direction dir. */
static void dir_ptrs(int dir, void *a, void *b, void *out, void *ptrs[3]) {
    if (dir == DIR_FWD) {
        ptrs[0] = a, ptrs[1] = b, ptrs[2] = out;    /* X, W, Y */
    } else if (dir == DIR_BWD_DATA) {
        ptrs[0] = out, ptrs[1] = b, ptrs[2] = a;    /* dX, W, dY */
    } else {
        ptrs[0] = b, ptrs[1] = out, ptrs[2] = a;    /* X, dW, dY */
    }
}

/* ------------------------------------------------------------------ plan cleanup */

static void dir_clear(conv_dir *cd) {
    if (cd->conv) cudnnDestroyConvolutionDescriptor(cd->conv);
    if (cd->gplan) cudnnBackendDestroyDescriptor(cd->gplan);
    for (int i = cd->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(cd->keep[i]);
    memset(cd, 0, sizeof *cd);
}

void qs_cuda_conv_plan_destroy(qs_backend *be, void *plan) {
    qs_cuda_conv_plan_t *cp = plan;
    if (!cp) return;
    for (int i = 0; i < DIR_N; i++) dir_clear(&cp->dir[i]);
    if (cp->xd) cudnnDestroyTensorDescriptor(cp->xd);
    if (cp->yd) cudnnDestroyTensorDescriptor(cp->yd);
    if (cp->wd) cudnnDestroyFilterDescriptor(cp->wd);
    free(cp);
}

void qs_cuda_conv_release(qs_backend *be) {
    qs_cuda_backend *cb = qs_cuda_be(be);
    if (cb->dnn) cudnnDestroy((cudnnHandle_t)cb->dnn);
    cb->dnn = NULL;
}

const char *qs_cuda_conv_impl_name(const void *plan, int dir) {
    const qs_cuda_conv_plan_t *cp = plan;
    if (!cp || cp->kind != QS_CUDA_PLAN_CONV || dir < 0 || dir >= DIR_N) return "";
    return cp->dir[dir].impl;
}

/* ------------------------------------------------------------------ LEGACY path */

/* FFT and Winograd algorithms change how the sums are rounded: never taken. */
static bool legacy_algo_allowed(int dir, int algo) {
    switch (dir) {
    case DIR_FWD:
        return algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT && algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
               algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD && algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case DIR_BWD_DATA:
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
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CONV_MAX_ALGOS];
        st = find ? cudnnFindConvolutionForwardAlgorithm(h, cp->xd, cp->wd, cv, cp->yd, CONV_MAX_ALGOS, &got, perf)
                  : cudnnGetConvolutionForwardAlgorithm_v7(h, cp->xd, cp->wd, cv, cp->yd, CONV_MAX_ALGOS, &got, perf);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < got; i++)
            res[i] = (algo_res){(int)perf[i].algo, perf[i].status, perf[i].determinism == CUDNN_DETERMINISTIC,
                                perf[i].mathType};
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CONV_MAX_ALGOS];
        st = find ? cudnnFindConvolutionBackwardDataAlgorithm(h, cp->wd, cp->yd, cv, cp->xd, CONV_MAX_ALGOS, &got, perf)
                  : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, cp->wd, cp->yd, cv, cp->xd, CONV_MAX_ALGOS, &got,
                                                                perf);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < got; i++)
            res[i] = (algo_res){(int)perf[i].algo, perf[i].status, perf[i].determinism == CUDNN_DETERMINISTIC,
                                perf[i].mathType};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CONV_MAX_ALGOS];
        st = find ? cudnnFindConvolutionBackwardFilterAlgorithm(h, cp->xd, cp->yd, cv, cp->wd, CONV_MAX_ALGOS, &got,
                                                                perf)
                  : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, cp->xd, cp->yd, cv, cp->wd, CONV_MAX_ALGOS, &got,
                                                                  perf);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < got; i++)
            res[i] = (algo_res){(int)perf[i].algo, perf[i].status, perf[i].determinism == CUDNN_DETERMINISTIC,
                                perf[i].mathType};
    }
    if (st == CUDNN_STATUS_SUCCESS) *n = got < 0 ? 0 : got > CONV_MAX_ALGOS ? CONV_MAX_ALGOS : got;
    return st;
}

static cudnnStatus_t legacy_ws_size(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudnnConvolutionDescriptor_t cv,
                                    int algo, size_t *bytes) {
    if (dir == DIR_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(h, cp->xd, cp->wd, cv, cp->yd, (cudnnConvolutionFwdAlgo_t)algo,
                                                       bytes);
    if (dir == DIR_BWD_DATA)
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
static qs_status legacy_build(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, bool tf32, conv_dir *cd) {
    const qs_conv_desc *d = &cp->d;
    QS_TRY(legacy_descs(cp, dir));
    cd->eng = ENG_LEGACY;
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

    algo_res res[CONV_MAX_ALGOS];
    int n = 0;
    const bool find = conv_benchmark();
    const char *how = find ? "measured" : "heuristic";
    cudnnStatus_t st = legacy_candidates(cp, dir, h, cd->conv, find, res, &n);
    if (st != CUDNN_STATUS_SUCCESS && find) { /* e.g. Find could not allocate its buffers: heuristics */
        how = "heuristic";
        st = legacy_candidates(cp, dir, h, cd->conv, false, res, &n);
    }
    if (st != CUDNN_STATUS_SUCCESS) return dnn_fail(d, dir, "cudnnGetConvolution*Algorithm_v7", st);
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
            if (legacy_ws_size(cp, dir, h, cd->conv, r->algo, &ws) != CUDNN_STATUS_SUCCESS || ws > CONV_ALGO_WS_CAP)
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
                   how[0] == 'm' ? "Find" : "Get", dir == DIR_FWD ? "Forward" : dir == DIR_BWD_DATA ? "BackwardData" : "BackwardFilter",
                   n, (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K,
                   (long long)d->R, (long long)d->S, qs_precision_name(d->prec), dir_names[dir]);
}

static qs_status legacy_exec(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, const void *a, const void *b,
                             float *out, float beta, void *ws) {
    const qs_conv_desc *d = &cp->d;
    const conv_dir *cd = &cp->dir[dir];
    const float alpha = 1.0f;
    if (dir == DIR_FWD)
        DNN_TRY(cudnnConvolutionForward(h, &alpha, cp->xd, a, cp->wd, b, cd->conv, (cudnnConvolutionFwdAlgo_t)cd->algo,
                                        ws, cd->dnn_ws, &beta, cp->yd, out));
    else if (dir == DIR_BWD_DATA)
        DNN_TRY(cudnnConvolutionBackwardData(h, &alpha, cp->wd, b, cp->yd, a, cd->conv,
                                             (cudnnConvolutionBwdDataAlgo_t)cd->algo, ws, cd->dnn_ws, &beta, cp->xd,
                                             out));
    else
        DNN_TRY(cudnnConvolutionBackwardFilter(h, &alpha, cp->xd, b, cp->yd, a, cd->conv,
                                               (cudnnConvolutionBwdFilterAlgo_t)cd->algo, ws, cd->dnn_ws, &beta,
                                               cp->wd, out));
    return QS_OK;
}

/* ------------------------------------------------------------------ GRAPH path */

/* Create a backend descriptor owned by cd (destroyed with the plan). */
static qs_status g_new(const qs_conv_desc *d, int dir, conv_dir *cd, cudnnBackendDescriptorType_t t,
                       cudnnBackendDescriptor_t *out) {
    if (cd->nkeep >= CONV_MAX_KEEP) return QS_FAIL(QS_ERR_INTERNAL, "conv_plan: too many cuDNN graph descriptors");
    DNN_TRY(cudnnBackendCreateDescriptor(t, out));
    cd->keep[cd->nkeep++] = *out;
    return QS_OK;
}

/* 4-d tensor, dims in N,C,H,W order with NHWC strides (filters: K,C,R,S with KRSC strides). */
static qs_status g_tensor(const qs_conv_desc *d, int dir, conv_dir *cd, int64_t uid, qs_dtype dt, int64_t n, int64_t c,
                          int64_t hh, int64_t ww, cudnnBackendDescriptor_t *t) {
    cudnnDataType_t cdt = dnn_dtype(dt);
    int64_t dims[4] = {n, c, hh, ww};
    int64_t str[4] = {hh * ww * c, 1, ww * c, c};
    int64_t align = 16;
    QS_TRY(g_new(d, dir, cd, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
    DNN_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &cdt));
    DNN_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    DNN_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    DNN_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    DNN_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    DNN_TRY(cudnnBackendFinalize(*t));
    return QS_OK;
}

/* Run a finalized graph plan on pointers (X, W, Y order) and a workspace. */
static cudnnStatus_t g_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, void *ptrs[3], void *ws) {
    cudnnBackendDescriptor_t vp = NULL;
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(h, plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return st;
}

/* Whether an engine config is acceptable: not down-converting, reduced-precision-reducing, FFT
 * or Winograd; *nondet says whether it is nondeterministic; *index its engine's global index. */
static bool g_cfg_ok(cudnnBackendDescriptor_t cfg, bool *nondet, int64_t *index) {
    cudnnBackendDescriptor_t eng = NULL;
    bool ok = false;
    *nondet = false;
    *index = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return false;
    int64_t cnt = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng) ==
        CUDNN_STATUS_SUCCESS) {
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 4];
        int64_t nn = 0;
        ok = true;
        if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     (int64_t)(sizeof notes / sizeof notes[0]), &nn, notes) == CUDNN_STATUS_SUCCESS) {
            for (int64_t i = 0; i < nn && i < (int64_t)(sizeof notes / sizeof notes[0]); i++) {
                switch (notes[i]) {
                case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
                case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
                case CUDNN_NUMERICAL_NOTE_FFT:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
                case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: ok = false; break;
                case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: *nondet = true; break;
                default: break;
                }
            }
        }
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, index);
    }
    cudnnBackendDestroyDescriptor(eng);
    return ok;
}

/* Time finalized plans once on scratch buffers (zeros) and return the index of the fastest;
 * 0 when there is only one or the scratch cannot be allocated. */
static int g_tune(const qs_conv_desc *d, int dir, cudnnHandle_t h, cudaStream_t st, cudnnBackendDescriptor_t *plans,
                  const size_t *wss, int n, qs_dtype a_dt, qs_dtype b_dt, int *timed) {
    *timed = 0;
    if (n <= 1) return 0;
    size_t wmax = 0;
    for (int i = 0; i < n; i++) wmax = wss[i] > wmax ? wss[i] : wmax;
    const size_t sa = (size_t)numel_a(d, dir) * qs_dtype_size(a_dt), sb = (size_t)numel_b(d, dir) * qs_dtype_size(b_dt);
    const size_t so = (size_t)numel_out(d, dir) * sizeof(float); /* at least what any graph output needs */
    void *a = NULL, *b = NULL, *o = NULL, *w = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int best = 0;
    float best_ms = 0.0f;
    if (cudaMalloc(&a, sa) != cudaSuccess || cudaMalloc(&b, sb) != cudaSuccess || cudaMalloc(&o, so) != cudaSuccess ||
        (wmax && cudaMalloc(&w, wmax) != cudaSuccess) || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
        goto done;
    if (cudaMemsetAsync(a, 0, sa, st) != cudaSuccess || cudaMemsetAsync(b, 0, sb, st) != cudaSuccess) goto done;
    void *ptrs[3];
    dir_ptrs(dir, a, b, o, ptrs);
    for (int i = 0; i < n; i++) {
        if (g_execute(h, plans[i], ptrs, w) != CUDNN_STATUS_SUCCESS) continue; /* warm-up */
        bool ok = cudaEventRecord(e0, st) == cudaSuccess;
        for (int r = 0; ok && r < 3; r++) ok = g_execute(h, plans[i], ptrs, w) == CUDNN_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(e1, st) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess;
        float ms = 0.0f;
        if (!ok || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) continue;
        if (*timed == 0 || ms < best_ms) best = i, best_ms = ms;
        (*timed)++;
    }
done:
    cudaStreamSynchronize(st);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(o);
    cudaFree(w);
    cudaGetLastError(); /* an allocation that failed here is not the caller's error */
    return best;
}

/* Build a graph convolution of direction dir with inputs A (a_dt) and B (b_dt) and an output
 * of out_dt (F32, or BF16: the sums rounded once). */
static qs_status graph_build(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudaStream_t stream, qs_dtype a_dt,
                             qs_dtype b_dt, qs_dtype out_dt, conv_dir *cd) {
    const qs_conv_desc *d = &cp->d;
    cd->eng = ENG_GRAPH;
    cd->out_dt = out_dt;
    const qs_dtype x_dt = dir == DIR_FWD ? a_dt : dir == DIR_BWD_DATA ? out_dt : b_dt;
    const qs_dtype w_dt = dir == DIR_BWD_WEIGHTS ? out_dt : b_dt;
    const qs_dtype y_dt = dir == DIR_FWD ? out_dt : a_dt;
    cudnnBackendDescriptor_t tx = NULL, tw = NULL, ty = NULL, conv = NULL, op = NULL, graph = NULL;
    QS_TRY(g_tensor(d, dir, cd, UID_X, x_dt, d->N, d->C, d->H, d->W, &tx));
    QS_TRY(g_tensor(d, dir, cd, UID_W, w_dt, d->K, d->C, d->R, d->S, &tw));
    QS_TRY(g_tensor(d, dir, cd, UID_Y, y_dt, d->N, d->K, d->P, d->Q, &ty));

    {
        cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
        int64_t nd = 2, dil[2] = {1, 1}, str[2] = {d->stride_h, d->stride_w}, pad[2] = {d->pad_h, d->pad_w};
        QS_TRY(g_new(d, dir, cd, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
        DNN_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
        DNN_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
        DNN_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd));
        DNN_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
        DNN_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
        DNN_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
        DNN_TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
        DNN_TRY(cudnnBackendFinalize(conv));
    }

    /* the operation: per direction, its type and the attributes of x, w, y, conv, alpha, beta */
    static const struct {
        cudnnBackendDescriptorType_t type;
        cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
    } ops[DIR_N] = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
    };
    const float alpha = 1.0f, beta = 0.0f;
    QS_TRY(g_new(d, dir, cd, ops[dir].type, &op));
    DNN_TRY(cudnnBackendSetAttribute(op, ops[dir].x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
    DNN_TRY(cudnnBackendSetAttribute(op, ops[dir].w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
    DNN_TRY(cudnnBackendSetAttribute(op, ops[dir].y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
    DNN_TRY(cudnnBackendSetAttribute(op, ops[dir].conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    DNN_TRY(cudnnBackendSetAttribute(op, ops[dir].alpha, CUDNN_TYPE_FLOAT, 1, &alpha));
    DNN_TRY(cudnnBackendSetAttribute(op, ops[dir].beta, CUDNN_TYPE_FLOAT, 1, &beta));
    DNN_TRY(cudnnBackendFinalize(op));

    QS_TRY(g_new(d, dir, cd, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    DNN_TRY(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    DNN_TRY(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    DNN_TRY(cudnnBackendFinalize(graph));

    /* engine configs: heuristics mode A followed by mode FALLBACK (A often offers a single
     * engine for an FP32 output; the timing below picks among all of them) */
    cudnnBackendDescriptor_t *cfgs = NULL;
    int64_t ncfg = 0;
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t heur = NULL;
        if (cd->nkeep >= CONV_MAX_KEEP ||
            cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS)
            continue;
        cd->keep[cd->nkeep++] = heur;
        if (cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &graph) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS)
            continue;
        int64_t cnt = 0;
        if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &cnt,
                                     NULL) != CUDNN_STATUS_SUCCESS ||
            cnt <= 0)
            continue;
        cudnnBackendDescriptor_t *grown = realloc(cfgs, (size_t)(ncfg + cnt) * sizeof *cfgs);
        if (!grown) {
            for (int64_t i = 0; i < ncfg; i++) cudnnBackendDestroyDescriptor(cfgs[i]);
            free(cfgs);
            return QS_FAIL(QS_ERR_OOM, "conv_plan: out of memory for %lld engine configs", (long long)(ncfg + cnt));
        }
        cfgs = grown;
        cudnnBackendDescriptor_t *fresh = cfgs + ncfg;
        int64_t made = 0;
        for (; made < cnt; made++)
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &fresh[made]) != CUDNN_STATUS_SUCCESS)
                break;
        int64_t got = 0;
        if (made == cnt &&
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, cnt, &got,
                                     fresh) == CUDNN_STATUS_SUCCESS) {
            if (got > cnt) got = cnt;
        } else {
            got = 0;
        }
        for (int64_t i = got; i < made; i++) cudnnBackendDestroyDescriptor(fresh[i]);
        ncfg += got;
    }
    if (ncfg == 0) {
        free(cfgs);
        return QS_FAIL(QS_ERR_BACKEND,
                       "cudnn engine heuristics (modes A and fallback) offered no engine for conv N=%lld H=%lld W=%lld "
                       "C=%lld K=%lld %lldx%lld at %s (%s, %s x %s -> %s)",
                       (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K,
                       (long long)d->R, (long long)d->S, qs_precision_name(d->prec), dir_names[dir],
                       qs_dtype_name(a_dt), qs_dtype_name(b_dt), qs_dtype_name(out_dt));
    }

    /* finalize up to CONV_TUNE_PLANS acceptable configs, deterministic ones first */
    cudnnBackendDescriptor_t plans[CONV_TUNE_PLANS] = {0};
    size_t wss[CONV_TUNE_PLANS] = {0};
    int64_t pcfg[CONV_TUNE_PLANS] = {0}, pidx[CONV_TUNE_PLANS] = {0};
    bool pnondet[CONV_TUNE_PLANS] = {0};
    int np = 0;
    const int want_plans = conv_benchmark() ? CONV_TUNE_PLANS : 1; /* else the first in heuristic order */
    cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
    for (int pass = 0; pass < 2 && np == 0; pass++)
        for (int64_t i = 0; i < ncfg && np < want_plans; i++) {
            bool nondet;
            int64_t index;
            if (!g_cfg_ok(cfgs[i], &nondet, &index) || (pass == 0 && nondet)) continue;
            bool dup = false; /* the same engine from both heuristics modes */
            for (int j = 0; j < np; j++) dup = dup || pidx[j] == index;
            if (dup) continue;
            cudnnBackendDescriptor_t p = NULL;
            cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              1, &cfgs[i]);
            if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(p);
            int64_t ws = 0, cnt = 0;
            if (st == CUDNN_STATUS_SUCCESS)
                st = cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt,
                                              &ws);
            if (st != CUDNN_STATUS_SUCCESS || ws < 0 || (uint64_t)ws > CONV_ALGO_WS_CAP) {
                if (st != CUDNN_STATUS_SUCCESS) last = st;
                if (p) cudnnBackendDestroyDescriptor(p);
                continue;
            }
            plans[np] = p;
            wss[np] = (size_t)ws;
            pcfg[np] = i;
            pidx[np] = index;
            pnondet[np] = nondet;
            np++;
        }
    qs_status rs = QS_OK;
    if (np == 0) {
        rs = last != CUDNN_STATUS_SUCCESS ? dnn_fail(d, dir, "cudnnBackendFinalize(execution plan) for every engine config", last)
                                          : QS_FAIL(QS_ERR_BACKEND,
                                                    "cudnn: none of the %lld engine configs for conv N=%lld H=%lld "
                                                    "W=%lld C=%lld K=%lld %lldx%lld at %s (%s) keeps FP32 sums without "
                                                    "FFT/Winograd within the workspace cap",
                                                    (long long)ncfg, (long long)d->N, (long long)d->H, (long long)d->W,
                                                    (long long)d->C, (long long)d->K, (long long)d->R, (long long)d->S,
                                                    qs_precision_name(d->prec), dir_names[dir]);
    } else {
        int timed = 0;
        int best = g_tune(d, dir, h, stream, plans, wss, np, a_dt, b_dt, &timed);
        cd->gplan = plans[best];
        cd->dnn_ws = wss[best];
        /* keep the chosen config alive with the plan */
        if (cd->nkeep < CONV_MAX_KEEP) {
            cd->keep[cd->nkeep++] = cfgs[pcfg[best]];
            cfgs[pcfg[best]] = NULL;
        }
        for (int i = 0; i < np; i++)
            if (i != best) cudnnBackendDestroyDescriptor(plans[i]);
        snprintf(cd->impl, sizeof cd->impl, "graph %s x %s -> %s, engine %lld%s (%d plan%s timed of %lld configs), cudnn ws %zu B",
                 qs_dtype_name(a_dt), qs_dtype_name(b_dt), qs_dtype_name(out_dt), (long long)pidx[best],
                 pnondet[best] ? ", nondeterministic" : "",
                 timed, timed == 1 ? "" : "s", (long long)ncfg, cd->dnn_ws);
    }
    for (int64_t i = 0; i < ncfg; i++)
        if (cfgs[i]) cudnnBackendDestroyDescriptor(cfgs[i]);
    free(cfgs);
    return rs;
}

static qs_status graph_exec(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, const void *a, const void *b, void *out,
                            void *ws) {
    const qs_conv_desc *d = &cp->d;
    void *ptrs[3];
    dir_ptrs(dir, (void *)a, (void *)b, out, ptrs);
    DNN_TRY(g_execute(h, cp->dir[dir].gplan, ptrs, ws));
    return QS_OK;
}

/* ------------------------------------------------------------------ planning */

typedef struct conv_cand {
    conv_engine eng;
    qs_dtype a, b; /* dtypes cuDNN reads */
    bool tf32;     /* LEGACY: TF32 math */
    qs_dtype out;  /* GRAPH: dtype cuDNN writes (F32 or BF16) */
} conv_cand;

/* Lay out the workspace regions of a built direction. */
static void dir_layout(const qs_cuda_conv_plan_t *cp, int dir, conv_dir *cd) {
    const qs_conv_desc *d = &cp->d;
    size_t sz_a = cd->cvt_a ? (size_t)numel_a(d, dir) * qs_dtype_size(cd->run_a) : 0;
    size_t sz_b = cd->cvt_b ? (size_t)numel_b(d, dir) * qs_dtype_size(cd->run_b) : 0;
    const size_t sz_t = cd->use_t ? (size_t)numel_out(d, dir) * qs_dtype_size(cd->out_dt) : 0;
    cd->off_a = 0;
    cd->off_b = cd->off_a + align_up(sz_a);
    cd->off_t = cd->off_b + align_up(sz_b);
    cd->off_dnn = cd->off_t + align_up(sz_t);
    cd->total = cd->off_dnn + align_up(cd->dnn_ws);
}

static qs_status conv_run(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, qs_stream *s, const qs_operand *a,
                          const qs_operand *b, const float *bias, void *out, bool accumulate, void *ws);

/* Operand handling, staging and workspace layout of a built path with inputs c->a, c->b. */
static void dir_finish(const qs_cuda_conv_plan_t *cp, int dir, conv_dir *cd, const conv_cand *c) {
    const qs_conv_desc *d = &cp->d;
    const qs_dtype a_store = dir == DIR_FWD ? cp->fdt : cp->gdt, b_store = cp->fdt;
    cd->run_a = c->a;
    cd->run_b = c->b;
    cd->cvt_a = cd->run_a != a_store;
    /* W is transposed unless KRSC and OIHW coincide (1x1 kernels, or C == 1) */
    const bool w_same = d->R * d->S == 1 || d->C == 1;
    cd->cvt_b = cd->run_b != b_store || (dir != DIR_BWD_WEIGHTS && !w_same);
    cd->scaled = is_fp8(a_store) || is_fp8(b_store);
    if (cd->eng == ENG_LEGACY) cd->out_dt = QS_F32;
    /* a BF16 y or dX takes a BF16 result as it is when nothing is left to apply (no FP8 scale, no
     * bias); anything else is staged: a 16-bit result is widened (F32 output) or re-rounded after
     * the bias (BF16 y), an FP32 result bound for a BF16 output is narrowed by the epilogue. An
     * F32 dX keeps T for accumulating where beta cannot (a BF16 dX never accumulates). */
    const bool n16 = out_dtype(d, dir) == QS_BF16;
    cd->direct = n16 && cd->out_dt == QS_BF16 && !cd->scaled && !(dir == DIR_FWD && d->has_bias);
    cd->use_t = (cd->out_dt != QS_F32 || n16) && !cd->direct;
    if (dir == DIR_BWD_DATA && !n16) cd->use_t = cd->use_t || cd->eng == ENG_GRAPH || cd->scaled;
    if (dir == DIR_BWD_WEIGHTS) cd->use_t = cd->use_t || (d->R * d->S > 1 && d->C > 1);
    if (n16) {
        const size_t L = strlen(cd->impl);
        snprintf(cd->impl + L, sizeof cd->impl - L, "; bf16 %s %s", dir == DIR_FWD ? "y" : "dx",
                 cd->direct ? "written directly" : "from the epilogue");
    }
    dir_layout(cp, dir, cd);
}

/* Time the built paths of direction dir end to end (operand conversion, cuDNN, epilogue, as
 * a call runs them) on zeroed scratch operands: 1 warm-up + 3 runs each. Returns the index of
 * the fastest (0 when nothing could be timed); ms[i] is its time per call, or -1. */
static int time_paths(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, conv_dir *paths, int n, cudaStream_t st,
                      float *ms) {
    const qs_conv_desc *d = &cp->d;
    const qs_dtype a_dt = dir == DIR_FWD ? cp->fdt : cp->gdt, b_dt = cp->fdt;
    size_t wmax = 0;
    for (int i = 0; i < n; i++) {
        ms[i] = -1.0f;
        wmax = paths[i].total > wmax ? paths[i].total : wmax;
    }
    const size_t sa = (size_t)numel_a(d, dir) * qs_dtype_size(a_dt), sb = (size_t)numel_b(d, dir) * qs_dtype_size(b_dt);
    /* the output as a call gets it: Y in the plan's y_dt, dX in its dx_dt, dW in FP32 */
    const size_t so = (size_t)numel_out(d, dir) * qs_dtype_size(out_dtype(d, dir));
    static const float ones[2] = {1.0f, 1.0f};
    void *a = NULL, *b = NULL, *o = NULL, *w = NULL, *sc = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int best = 0;
    const conv_dir saved = cp->dir[dir];
    if (cudaMalloc(&a, sa) != cudaSuccess || cudaMalloc(&b, sb) != cudaSuccess || cudaMalloc(&o, so) != cudaSuccess ||
        cudaMalloc(&sc, sizeof ones) != cudaSuccess || (wmax && cudaMalloc(&w, wmax) != cudaSuccess) ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        goto done;
    if (cudaMemsetAsync(a, 0, sa, st) != cudaSuccess || cudaMemsetAsync(b, 0, sb, st) != cudaSuccess ||
        cudaMemcpyAsync(sc, ones, sizeof ones, cudaMemcpyHostToDevice, st) != cudaSuccess)
        goto done;
    const qs_operand oa = {a, a_dt, (const float *)sc, false, NULL}, ob = {b, b_dt, (const float *)sc + 1, false, NULL};
    for (int i = 0; i < n; i++) {
        cp->dir[dir] = paths[i];
        if (conv_run(be, cp, dir, NULL, &oa, &ob, NULL, o, false, w) != QS_OK) { /* warm-up */
            qs_error_clear();
            continue;
        }
        bool ok = cudaEventRecord(e0, st) == cudaSuccess;
        for (int r = 0; ok && r < 3; r++) ok = conv_run(be, cp, dir, NULL, &oa, &ob, NULL, o, false, w) == QS_OK;
        if (!ok) qs_error_clear();
        ok = ok && cudaEventRecord(e1, st) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess;
        float t = 0.0f;
        if (!ok || cudaEventElapsedTime(&t, e0, e1) != cudaSuccess) continue;
        ms[i] = t / 3.0f;
        if (ms[best] < 0.0f || ms[i] < ms[best]) best = i;
    }
done:
    cp->dir[dir] = saved;
    cudaStreamSynchronize(st);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(o);
    cudaFree(w);
    cudaFree(sc);
    cudaGetLastError(); /* a scratch allocation that failed here is not the caller's error */
    return best;
}

/* Build every path of direction dir that cuDNN supports (FP32/TF32: the one legacy path; BF16,
 * FP16, FP8: the graph path(s) and the widened TF32 legacy path — numerically the same
 * arithmetic), time them when there are several, and keep the fastest. */
static qs_status build_dir(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudaStream_t stream) {
    const qs_conv_desc *d = &cp->d;
    const qs_dtype a_store = dir == DIR_FWD ? cp->fdt : cp->gdt, b_store = cp->fdt;
    /* candidates in order of preference (the first that builds runs unless benchmarking) */
    const conv_cand legacy_tf32 = {ENG_LEGACY, QS_F32, QS_F32, true, QS_F32};
    const bool b16 = conv_bf16_out();
    conv_cand c[4];
    int nc = 0;
    switch (d->prec) {
    case QS_PREC_FP32: c[nc++] = (conv_cand){ENG_LEGACY, QS_F32, QS_F32, false, QS_F32}; break;
    case QS_PREC_TF32: c[nc++] = legacy_tf32; break;
    case QS_PREC_BF16:
    case QS_PREC_FP16: /* FP16 keeps FP32 outputs: its sums may exceed FP16's range */
        if (b16 && d->prec == QS_PREC_BF16) c[nc++] = (conv_cand){ENG_GRAPH, a_store, b_store, false, QS_BF16};
        if (dir != DIR_FWD) c[nc++] = legacy_tf32;
        c[nc++] = (conv_cand){ENG_GRAPH, a_store, b_store, false, QS_F32};
        if (dir == DIR_FWD) c[nc++] = legacy_tf32;
        break;
    case QS_PREC_FP8:
        if (dir == DIR_FWD) c[nc++] = (conv_cand){ENG_GRAPH, QS_F8E4M3, QS_F8E4M3, false, QS_F32};
        if (b16) c[nc++] = (conv_cand){ENG_GRAPH, QS_BF16, QS_BF16, false, QS_BF16};
        if (dir != DIR_FWD) c[nc++] = legacy_tf32;
        c[nc++] = (conv_cand){ENG_GRAPH, QS_BF16, QS_BF16, false, QS_F32};
        if (dir == DIR_FWD) c[nc++] = legacy_tf32;
        break;
    default:
        return QS_FAIL(QS_ERR_INTERNAL, "conv_plan: no cuDNN path for precision %s", qs_precision_name(d->prec));
    }
    conv_dir built[4];
    memset(built, 0, sizeof built);
    int nb = 0;
    char why[768];
    why[0] = 0;
    qs_status st = QS_ERR_INTERNAL;
    for (int i = 0; i < nc; i++) {
        conv_dir *cd = &built[nb];
        st = c[i].eng == ENG_LEGACY ? legacy_build(cp, dir, h, c[i].tf32, cd)
                                    : graph_build(cp, dir, h, stream, c[i].a, c[i].b, c[i].out, cd);
        if (st == QS_OK) {
            dir_finish(cp, dir, cd, &c[i]);
            nb++;
            continue;
        }
        /* remember why, and go on with the other (numerically equivalent) paths */
        snprintf(why, sizeof why, "%s", qs_last_error());
        qs_error_clear();
        dir_clear(cd);
    }
    if (nb == 0) return QS_FAIL(st, "%s", why);
    int best = 0; /* fixed preference: the first path built */
    if (nb > 1 && conv_benchmark()) {
        float ms[4];
        best = time_paths(be, cp, dir, built, nb, stream, ms);
        char tail[96];
        int len = snprintf(tail, sizeof tail, "; %.4f ms, fastest of %d paths (others", (double)ms[best], nb);
        for (int i = 0; i < nb && len > 0 && (size_t)len < sizeof tail; i++)
            if (i != best) len += snprintf(tail + len, sizeof tail - (size_t)len, " %.4f", (double)ms[i]);
        if (len > 0 && (size_t)len < sizeof tail - 1) snprintf(tail + len, sizeof tail - (size_t)len, ")");
        conv_dir *cd = &built[best];
        size_t L = strlen(cd->impl), T = strlen(tail);
        if (L + T >= sizeof cd->impl) T = sizeof cd->impl - 1 - L;
        memcpy(cd->impl + L, tail, T);
        cd->impl[L + T] = 0;
    }
    cp->dir[dir] = built[best];
    for (int i = 0; i < nb; i++)
        if (i != best) dir_clear(&built[i]);
    return QS_OK;
}

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
    QS_TRY(dnn_handle(be, &h));
    cudaStream_t stream = qs_cuda_be(be)->stream.s;
    cudnnStatus_t sst = cudnnSetStream(h, stream);
    if (sst != CUDNN_STATUS_SUCCESS) return dnn_fail(&dd, DIR_FWD, "cudnnSetStream", sst);

    qs_cuda_conv_plan_t *cp = calloc(1, sizeof *cp);
    if (!cp) return QS_FAIL(QS_ERR_OOM, "conv_plan: out of memory for the plan");
    cp->kind = QS_CUDA_PLAN_CONV;
    cp->d = dd;
    cp->fdt = qs_precision_operand_dtype(dd.prec, false);
    cp->gdt = qs_precision_operand_dtype(dd.prec, true);
    qs_status st = QS_OK;
    for (int dir = 0; dir < DIR_N && st == QS_OK; dir++) st = build_dir(be, cp, dir, h, stream);
    if (st != QS_OK) {
        qs_cuda_conv_plan_destroy(be, cp);
        return st;
    }
    for (int dir = 0; dir < DIR_N; dir++) cp->ws = cp->dir[dir].total > cp->ws ? cp->dir[dir].total : cp->ws;
    *plan = cp;
    *workspace = cp->ws;
    return QS_OK;
}

/* ------------------------------------------------------------------ execution */

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
    if (is_fp8(expect) && !op->scale)
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

/* Run direction dir: a = x (forward) or dY, b = W or X (backward-weights), out = Y (in the plan's
 * y_dt), dX (in its dx_dt) or dW (FP32). */
static qs_status conv_run(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, qs_stream *s, const qs_operand *a,
                          const qs_operand *b, const float *bias, void *out, bool accumulate, void *ws) {
    const qs_conv_desc *d = &cp->d;
    const conv_dir *cd = &cp->dir[dir];
    if (cd->total && !ws)
        return QS_FAIL(QS_ERR_INVALID_ARG, "conv %s: the plan needs %zu bytes of workspace but ws is NULL",
                       dir_names[dir], cp->ws);
    if (cd->eng == ENG_GRAPH) { /* graph tensors were declared 16-byte aligned */
        const void *p[4] = {cd->cvt_a ? NULL : a->data, cd->cvt_b ? NULL : b->data, out, ws};
        for (int i = 0; i < 4; i++)
            if (((uintptr_t)p[i] & 15u) != 0)
                return QS_FAIL(QS_ERR_INVALID_ARG,
                               "conv %s: buffer %p is not 16-byte aligned (cuDNN graph tensors need it); pass "
                               "buffers from the backend's alloc",
                               dir_names[dir], p[i]);
    }
    cudnnHandle_t h;
    QS_TRY(dnn_handle(be, &h));
    cudaStream_t st = stream_of(be, s);
    DNN_TRY(cudnnSetStream(h, st));
    char *w8 = ws;

    const void *pa = a->data, *pb = b->data;
    if (cd->cvt_a) {
        QS_TRY(qs_cuda_conv_widen(st, numel_a(d, dir), a->data, a->dt, w8 + cd->off_a, cd->run_a));
        pa = w8 + cd->off_a;
    }
    if (dir != DIR_BWD_WEIGHTS && cd->cvt_b) {
        QS_TRY(qs_cuda_conv_weights_krsc(st, d->K, d->C, d->R, d->S, b->data, b->dt, w8 + cd->off_b, cd->run_b));
        pb = w8 + cd->off_b;
    } else if (cd->cvt_b) {
        QS_TRY(qs_cuda_conv_widen(st, numel_b(d, dir), b->data, b->dt, w8 + cd->off_b, cd->run_b));
        pb = w8 + cd->off_b;
    }

    /* staged in T: a 16-bit result (unless written straight into a BF16 y or dX), any result
     * bound for a BF16 y or dX that is not, an accumulating backward-data that cannot use beta, a
     * KRSC weight gradient */
    const bool out16 = cd->out_dt != QS_F32;
    const qs_dtype call_dt = out_dtype(d, dir);
    float beta = 0.0f;
    bool staged = dir == DIR_FWD || call_dt == QS_BF16 ? cd->use_t : out16;
    if (dir == DIR_BWD_DATA && accumulate) {
        if (cd->use_t)
            staged = true;
        else
            beta = 1.0f; /* LEGACY FP32/TF32: cuDNN accumulates */
    }
    if (dir == DIR_BWD_WEIGHTS && cd->use_t) staged = true;
    void *target = staged ? (void *)(w8 + cd->off_t) : (void *)out;
    void *dnn_ws = cd->dnn_ws ? w8 + cd->off_dnn : NULL;

    if (cd->eng == ENG_LEGACY)
        QS_TRY(legacy_exec(cp, dir, h, pa, pb, target, beta, dnn_ws));
    else
        QS_TRY(graph_exec(cp, dir, h, pa, pb, target, dnn_ws));

    const float *sa = cd->scaled ? a->scale : NULL, *sb = cd->scaled ? b->scale : NULL;
    const qs_dtype tdt = cd->out_dt;
    if (dir == DIR_FWD) {
        /* direct: cuDNN wrote y, nothing left to do (not staged, no scale, no bias) */
        if (staged || sa || bias)
            QS_TRY(qs_cuda_conv_epilogue(st, d->N * d->P * d->Q, d->K, target, tdt, out, d->y_dt, sa, sb, bias, false));
    } else if (dir == DIR_BWD_DATA) {
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
    return conv_run(be, cp, DIR_FWD, s, x, w, cp->d.has_bias ? b : NULL, y, false, ws);
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
    return conv_run(be, cp, DIR_BWD_DATA, s, dy, w, NULL, dx, accumulate, ws);
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
    QS_TRY(conv_run(be, cp, DIR_BWD_WEIGHTS, s, dy, x, NULL, dw, false, ws));
    if (db) QS_TRY(qs_cuda_column_sums(be, s, d->N * d->P * d->Q, d->K, dy->data, db));
    return QS_OK;
}
