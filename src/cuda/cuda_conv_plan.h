/* src/cuda/cuda_conv_plan.h — defines: what the files of the CUDA convolution share (cuda_conv.c
 * the ops, cuda_conv_plan.c the choice of a path per direction, cuda_conv_run.c its execution,
 * cuda_conv_legacy.c and cuda_conv_engines.c the two cuDNN paths, cuda_conv_common.c the rest):
 * the plan, its directions and the helpers they all use. The design: cuda_conv.c's comment. */
#ifndef QSYNC_CUDA_CONV_PLAN_H
#define QSYNC_CUDA_CONV_PLAN_H

#include <cudnn.h>

#include "cuda/cuda_conv.h"

/* The directions of a plan. */
enum { QS_CONV_FWD = 0, QS_CONV_BWD_DATA, QS_CONV_BWD_WEIGHTS, QS_CONV_DIRS };
/* "forward", "backward-data", "backward-weights" (messages, impl names). */
extern const char *const qs_cuda_conv_dir_names[QS_CONV_DIRS];

/* The two cuDNN paths: the legacy API on FP32 tensors, the graph (cudnnBackend*) API. */
typedef enum qs_cuda_conv_engine { QS_CONV_ENG_NONE = 0, QS_CONV_ENG_LEGACY, QS_CONV_ENG_GRAPH } qs_cuda_conv_engine;

enum { QS_CONV_UID_X = 1, QS_CONV_UID_W = 2, QS_CONV_UID_Y = 3 }; /* graph tensor ids, by role in the forward op */

#define QS_CONV_WS_ALIGN ((size_t)256)
#define QS_CONV_ALGO_WS_CAP ((size_t)1 << 31) /* largest cuDNN workspace an algorithm may ask */
#define QS_CONV_MAX_KEEP 16                    /* backend descriptors kept per direction */
#define QS_CONV_TUNE_PLANS 6                   /* graph plans timed at plan time */

/* One direction of a plan: the path chosen, how its operands and result travel, and the cuDNN
 * objects it runs. */
typedef struct qs_cuda_conv_dir {
    qs_cuda_conv_engine eng;
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
    cudnnBackendDescriptor_t keep[QS_CONV_MAX_KEEP];
    int nkeep;
    size_t dnn_ws;
    size_t off_a, off_b, off_t, off_dnn, total;
    char impl[192];
} qs_cuda_conv_dir;

typedef struct qs_cuda_conv_plan_t {
    qs_cuda_plan_kind kind; /* QS_CUDA_PLAN_CONV (first member: plan_destroy dispatches on it) */
    qs_conv_desc d;
    qs_dtype fdt, gdt;      /* storage dtypes: forward operands (X, W), gradient (dY) */
    cudnnTensorDescriptor_t xd, yd; /* LEGACY: FP32 NHWC X and Y */
    cudnnFilterDescriptor_t wd;     /* LEGACY: FP32 KRSC W */
    qs_cuda_conv_dir dir[QS_CONV_DIRS];
    size_t ws;
} qs_cuda_conv_plan_t;


/* Element counts of X, Y, W of d; of the output of direction dir (Y, dX or dW); of its operand A
 * (x in forward, dY otherwise) and B (W, or X in backward-weights). */
static inline int64_t qs_cuda_conv_numel_x(const qs_conv_desc *d) { return d->N * d->H * d->W * d->C; }
static inline int64_t qs_cuda_conv_numel_y(const qs_conv_desc *d) { return d->N * d->P * d->Q * d->K; }
static inline int64_t qs_cuda_conv_numel_w(const qs_conv_desc *d) { return d->K * d->C * d->R * d->S; }
static inline int64_t qs_cuda_conv_numel_out(const qs_conv_desc *d, int dir) {
    return dir == QS_CONV_FWD ? qs_cuda_conv_numel_y(d)
           : dir == QS_CONV_BWD_DATA ? qs_cuda_conv_numel_x(d)
                                     : qs_cuda_conv_numel_w(d);
}
static inline int64_t qs_cuda_conv_numel_a(const qs_conv_desc *d, int dir) {
    return dir == QS_CONV_FWD ? qs_cuda_conv_numel_x(d) : qs_cuda_conv_numel_y(d);
}
static inline int64_t qs_cuda_conv_numel_b(const qs_conv_desc *d, int dir) {
    return dir == QS_CONV_BWD_WEIGHTS ? qs_cuda_conv_numel_x(d) : qs_cuda_conv_numel_w(d);
}
/* The dtype a call's output of direction dir is in: Y in y_dt, dX in dx_dt, dW FP32. */
static inline qs_dtype qs_cuda_conv_out_dtype(const qs_conv_desc *d, int dir) {
    return dir == QS_CONV_FWD ? d->y_dt : dir == QS_CONV_BWD_DATA ? d->dx_dt : QS_F32;
}
/* Whether dt is an FP8 format. */
static inline bool qs_cuda_conv_is_fp8(qs_dtype dt) { return dt == QS_F8E4M3 || dt == QS_F8E5M2; }

/* ---- cuda_conv_common.c ---- */
/* Whether QS_CUDNN_BENCHMARK=1 (choose by timing) / 16-bit-output engines are allowed
 * (QS_CUDNN_BF16_OUT not "0"); each read once. */
bool qs_cuda_conv_benchmark(void);
bool qs_cuda_conv_bf16_out(void);
/* A failed cuDNN call: QS_ERR_BACKEND naming the call, the convolution, precision and direction,
 * with cuDNN's status and its last error message. */
qs_status qs_cuda_conv_dnn_fail(const qs_conv_desc *d, int dir, const char *call, cudnnStatus_t st);
/* Check a cuDNN call inside a function that has `d` (const qs_conv_desc *) and `dir` in scope. */
#define DNN_TRY(call)                                                                                   \
    do {                                                                                                \
        cudnnStatus_t dnn_st_ = (call);                                                                 \
        if (dnn_st_ != CUDNN_STATUS_SUCCESS) return qs_cuda_conv_dnn_fail(d, dir, #call, dnn_st_);      \
    } while (0)
/* The backend's cuDNN handle into *out, created on first use on the backend's device. */
qs_status qs_cuda_conv_handle(qs_backend *be, cudnnHandle_t *out);
/* Destroy a direction's cuDNN objects and clear it. */
void qs_cuda_conv_dir_clear(qs_cuda_conv_dir *cd);

/* Scratch for timing the candidates of a direction (QS_CUDNN_BENCHMARK): operands a and b
 * (zeroed on the stream), the output o, optional per-tensor scales and workspace w, and two
 * events. open allocates them all, in that order (false as soon as one fails); close, after
 * either, waits for the stream, frees what was allocated and clears the CUDA error that a
 * failed allocation left (it is not the caller's). */
typedef struct qs_cuda_conv_scratch {
    void *a, *b, *o, *scale, *w;
    cudaEvent_t e0, e1;
} qs_cuda_conv_scratch;
bool qs_cuda_conv_scratch_open(qs_cuda_conv_scratch *sc, size_t a_bytes, size_t b_bytes, size_t out_bytes,
                               size_t scale_bytes, size_t ws_bytes, cudaStream_t st);
void qs_cuda_conv_scratch_close(qs_cuda_conv_scratch *sc, cudaStream_t st);

/* ---- cuda_conv_legacy.c: the LEGACY path ---- */
/* Choose a legacy algorithm for direction dir on FP32 data into cd; tf32 selects the math. */
qs_status qs_cuda_conv_legacy_build(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, bool tf32, qs_cuda_conv_dir *cd);
/* out (+)= the direction's result (beta 1: accumulate) from a, b (FP32), cuDNN workspace ws. */
qs_status qs_cuda_conv_legacy_exec(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, const void *a, const void *b,
                                   float *out, float beta, void *ws);

/* ---- cuda_conv_engines.c: the GRAPH path ---- */
/* Build a graph convolution of direction dir into cd with inputs A (a_dt) and B (b_dt) and an
 * output of out_dt (F32, or BF16: the sums rounded once). */
qs_status qs_cuda_conv_graph_build(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudaStream_t stream,
                                   qs_dtype a_dt, qs_dtype b_dt, qs_dtype out_dt, qs_cuda_conv_dir *cd);
/* out = the direction's result from a, b with cuDNN workspace ws. */
qs_status qs_cuda_conv_graph_exec(qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, const void *a, const void *b,
                                  void *out, void *ws);

/* ---- cuda_conv_plan.c ---- */
/* Build every path of direction dir that cuDNN supports, time them when benchmarking, keep one
 * in cp->dir[dir]. */
qs_status qs_cuda_conv_build_dir(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, cudnnHandle_t h, cudaStream_t stream);

/* ---- cuda_conv_run.c ---- */
/* Run direction dir: a = x (forward) or dY, b = W or X (backward-weights), out = Y (in the plan's
 * y_dt), dX (in its dx_dt) or dW (FP32). */
qs_status qs_cuda_conv_run(qs_backend *be, qs_cuda_conv_plan_t *cp, int dir, qs_stream *s, const qs_operand *a,
                           const qs_operand *b, const float *bias, void *out, bool accumulate, void *ws);

#endif
