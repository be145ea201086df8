/* src/cuda/cuda_backend.h — defines: the CUDA backend's handle and stream, its error-check
 * macros, and the prototypes of every op of its qs_backend_ops table (src/core/backend.h has
 * each op's contract; the CUDA versions keep it, asynchronously on the stream).
 *
 * Layout of the backend (one purpose per file):
 *   cuda_backend.c      handle, device memory (256-byte aligned, counted), streams, copies,
 *                       precision support, the ops table
 *   cuda_elementwise.cu ReLU, add, accumulate, dropout, scale, cast, NHWC<->NCHW, column sums,
 *                       sum of squares, SGD and AdamW steps
 *   cuda_quant.cu       quantize / dequantize (INT8, FP8 E4M3/E5M2, BF16, FP16; RNE and
 *                       stochastic rounding, bit-identical to the CPU's core/numfmt.h)
 *   cuda_norm.cu        batch norm, pooling, softmax + cross-entropy
 *   cuda_linear.c       Linear and the batched matmul through cuBLASLt (one wrapper for every
 *                       GEMM precision)
 *   cuda_linear_kernels.cu  the small kernels cuda_linear.c needs (FP8 transposes, bias sums)
 *   cuda_transformer.cu the transformer's memory-bound ops: layer norm, GELU, tanh, embedding,
 *                       position add, head permutes, masked softmax (cuda_transformer.h)
 *   cuda_conv.c         Conv2d through cuDNN
 *   cuda_ipc.c, cuda_ipc_sum.cu  the IPC all-reduce between ranks on one GPU (parallel/ipc_reduce.h)
 *   cuda_green.c        an SM partition through a green context (QS_CUDA_SM_PARTITION)
 *   cuda_graph.c        capture of queued ops into CUDA graphs, and their replay
 *   cuda_launch.cuh     what the kernel files share: the op's stream, grid caps, argument checks,
 *                       stream-ordered scratch
 * Host code is C (gcc); only kernels are CUDA C++ (nvcc), exported with C linkage.
 *
 * Errors inside kernels that the CPU backend reports at once (non-finite input to an INT8/FP8
 * quantize) are recorded in a device flag word (qs_cuda_backend.flags) and reported, with the
 * op named, by the next stream_sync. */
#ifndef QSYNC_CUDA_BACKEND_H
#define QSYNC_CUDA_BACKEND_H

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "cuda/cuda_green.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qs_stream {
    cudaStream_t s;
};

/* Bits of the device flag word (qs_cuda_backend.flags). */
enum { QS_CUDA_FLAG_NONFINITE_QUANTIZE = 1u };

typedef struct qs_cuda_backend {
    qs_backend base;              /* ops, num_threads (unused) */
    int device;                   /* CUDA device ordinal */
    struct cudaDeviceProp props;
    struct qs_stream stream;      /* the default stream (created non-blocking) */
    unsigned int *flags;          /* device word of QS_CUDA_FLAG_* bits, cleared by stream_sync */
    size_t in_use, peak;          /* bytes from alloc(), as requested */
    struct qs_cuda_alloc *allocs; /* live allocations (pointer → size), for free() accounting */
    void *lt;                     /* cublasLtHandle_t (cuda_linear.c) */
    void *dnn;                    /* cudnnHandle_t (cuda_conv.c), created on first use */
    qs_cuda_green green;          /* the SM partition all work runs on (QS_CUDA_SM_PARTITION), or none */
} qs_cuda_backend;

static inline qs_cuda_backend *qs_cuda_be(qs_backend *be) { return (qs_cuda_backend *)be; }

/* Check a CUDA runtime call; on failure record a message naming the call and return
 * QS_ERR_BACKEND from the enclosing function. */
#define QS_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t qs_cu_err_ = (call);                                                           \
        if (qs_cu_err_ != cudaSuccess) {                                                           \
            (void)cudaGetLastError(); /* not to be reported again by the next launch check */       \
            return QS_FAIL(QS_ERR_BACKEND, "%s failed: %s (%s)", #call, cudaGetErrorName(qs_cu_err_), \
                           cudaGetErrorString(qs_cu_err_));                                        \
        }                                                                                          \
    } while (0)

/* After a kernel launch: a launch error (bad configuration) as QS_ERR_BACKEND naming `what`. */
qs_status qs_cuda_check_launch(const char *what);

/* ---- cuda_backend.c ---- */
/* Make the backend's context current for the calling thread: its green context when it runs
 * on an SM partition, else the device's primary context (cudaSetDevice). Call it before
 * creating anything that belongs to a context (streams, events, library handles). */
qs_status qs_cuda_make_current(qs_cuda_backend *cb);
void qs_cuda_destroy(qs_backend *be);
qs_status qs_cuda_alloc(qs_backend *be, size_t bytes, void **out);
void qs_cuda_free(qs_backend *be, void *p);
void qs_cuda_memory_stats(qs_backend *be, size_t *in_use, size_t *peak);
qs_status qs_cuda_memset_zero(qs_backend *be, qs_stream *s, void *p, size_t bytes);
qs_status qs_cuda_copy_h2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes);
qs_status qs_cuda_copy_d2h(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes);
qs_status qs_cuda_copy_d2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes);
qs_status qs_cuda_stream_sync(qs_backend *be, qs_stream *s);
qs_stream *qs_cuda_default_stream(qs_backend *be);
qs_prec_support qs_cuda_precision_support(qs_backend *be, qs_precision p);
void qs_cuda_plan_destroy(qs_backend *be, void *plan); /* dispatches on the plan's kind tag */

/* ---- cuda_graph.c ---- */
qs_status qs_cuda_capture_begin(qs_backend *be, qs_stream *s);
qs_status qs_cuda_capture_end(qs_backend *be, qs_stream *s, void **graph);
qs_status qs_cuda_graph_launch(qs_backend *be, qs_stream *s, void *graph);
void qs_cuda_graph_destroy(qs_backend *be, void *graph);

/* Every plan (linear, conv, pool, bmm) starts with this tag so plan_destroy can dispatch. */
typedef enum qs_cuda_plan_kind {
    QS_CUDA_PLAN_LINEAR = 0x4c494e31,
    QS_CUDA_PLAN_CONV,
    QS_CUDA_PLAN_POOL,
    QS_CUDA_PLAN_BMM
} qs_cuda_plan_kind;

/* ---- cuda_linear.c ---- */
qs_status qs_cuda_linear_plan(qs_backend *be, const qs_linear_desc *d, void **plan, size_t *workspace);
qs_status qs_cuda_linear_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x, const qs_operand *w,
                                 const float *b, void *y, void *ws);
qs_status qs_cuda_linear_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                       const qs_operand *w, void *dx, bool accumulate, void *ws);
qs_status qs_cuda_linear_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                          const qs_operand *x, float *dw, float *db, void *ws);
void qs_cuda_linear_plan_destroy(qs_backend *be, void *plan);
void qs_cuda_linear_release(qs_backend *be); /* the cuBLASLt handle, at destroy */
qs_status qs_cuda_bmm_plan(qs_backend *be, const qs_bmm_desc *d, void **plan, size_t *workspace);
qs_status qs_cuda_bmm_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *a, const qs_operand *b,
                              float *c, void *ws);
qs_status qs_cuda_bmm_backward_a(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *b,
                                 float *da, bool accumulate, void *ws);
qs_status qs_cuda_bmm_backward_b(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *a,
                                 float *db, bool accumulate, void *ws);
void qs_cuda_bmm_plan_destroy(qs_backend *be, void *plan);

/* ---- cuda_conv.c ---- */
qs_status qs_cuda_conv_plan(qs_backend *be, const qs_conv_desc *d, void **plan, size_t *workspace);
qs_status qs_cuda_conv_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x, const qs_operand *w,
                               const float *b, void *y, void *ws);
qs_status qs_cuda_conv_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                     const qs_operand *w, void *dx, bool accumulate, void *ws);
qs_status qs_cuda_conv_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                        const qs_operand *x, float *dw, float *db, void *ws);
void qs_cuda_conv_plan_destroy(qs_backend *be, void *plan);
void qs_cuda_conv_release(qs_backend *be); /* the cuDNN handle, at destroy */

/* ---- cuda_norm.cu ---- */
qs_status qs_cuda_pool_plan(qs_backend *be, const qs_pool_desc *d, void **plan, size_t *workspace);
qs_status qs_cuda_pool_forward(qs_backend *be, void *plan, qs_stream *s, const void *x, void *y, int32_t *idx,
                               void *ws);
qs_status qs_cuda_pool_backward(qs_backend *be, void *plan, qs_stream *s, const void *dy, const int32_t *idx,
                                void *dx, bool accumulate, void *ws);
void qs_cuda_pool_plan_destroy(qs_backend *be, void *plan);
qs_status qs_cuda_batchnorm_forward_train(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x, qs_dtype x_dt,
                                          const float *gamma, const float *beta, void *y, qs_dtype y_dt, float *save_mean,
                                          float *save_invstd, float *running_mean, float *running_var,
                                          float momentum, float eps, bool relu, const void *residual,
                                          qs_dtype residual_dt);
qs_status qs_cuda_batchnorm_forward_eval(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x, qs_dtype x_dt,
                                         const float *gamma, const float *beta, const float *running_mean,
                                         const float *running_var, float eps, void *y, qs_dtype y_dt, bool relu,
                                         const void *residual, qs_dtype residual_dt);
qs_status qs_cuda_batchnorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x, qs_dtype x_dt,
                                     const void *dy, qs_dtype dy_dt, const float *gamma, const float *save_mean,
                                     const float *save_invstd, void *dx, qs_dtype dx_dt, const qs_sr *dx_sr, bool accumulate, float *dgamma,
                                     float *dbeta, const void *y_relu, qs_dtype y_dt, float *dresidual, bool dresidual_accumulate);
qs_status qs_cuda_softmax_xent_forward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                       const float *logits, const int32_t *labels, float *loss, float *probs);
qs_status qs_cuda_softmax_xent_backward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                        const float *probs, const int32_t *labels, float scale, float *dlogits);

/* ---- cuda_elementwise.cu ---- */
qs_status qs_cuda_relu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
qs_status qs_cuda_relu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const void *dy, qs_dtype dy_dt, float *dx,
                                bool accumulate);
qs_status qs_cuda_add_forward(qs_backend *be, qs_stream *s, int64_t n, const void *a, qs_dtype a_dt, const void *b,
                              qs_dtype b_dt, float *y, bool relu);
qs_status qs_cuda_accumulate(qs_backend *be, qs_stream *s, int64_t n, const float *src, float *dst, bool accumulate);
qs_status qs_cuda_dropout_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y, uint8_t *mask,
                                  float p, const qs_dropout_rng *rng);
qs_status qs_cuda_dropout_backward(qs_backend *be, qs_stream *s, int64_t n, const float *dy, const uint8_t *mask,
                                   float p, float *dx, bool accumulate);
qs_status qs_cuda_nhwc_to_nchw(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                               const float *x, float *y);
qs_status qs_cuda_nchw_to_nhwc(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                               const float *x, float *y, bool accumulate);
qs_status qs_cuda_cast(qs_backend *be, qs_stream *s, int64_t n, const void *src, qs_dtype src_dt, void *dst,
                       qs_dtype dst_dt);
qs_status qs_cuda_argmax_rows(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x, int32_t *idx);
qs_status qs_cuda_column_sums(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x,
                              float *sums);
qs_status qs_cuda_sgd_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *buf, float lr,
                           float momentum, float dampening, float wd, bool nesterov, bool first_step);
qs_status qs_cuda_adamw_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *m, float *v,
                             float lr, double beta1, double beta2, float eps, float wd, int64_t step);
qs_status qs_cuda_sum_squares(qs_backend *be, qs_stream *s, int64_t n, const float *x, double *out);
qs_status qs_cuda_scale(qs_backend *be, qs_stream *s, int64_t n, float *x, float alpha);

/* ---- cuda_quant.cu ---- */
qs_status qs_cuda_quantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *src,
                           const float *col_scale, qs_dtype dt, void *dst, float *scales, bool per_row,
                           const qs_sr *sr, void *dst_t, const qs_quant_delayed *delayed);
qs_status qs_cuda_dequantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const qs_operand *src,
                             float *dst);

#ifdef __cplusplus
}
#endif
#endif
