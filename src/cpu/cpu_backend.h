/* src/cpu/cpu_backend.h — defines: the CPU backend handle, the common plan header and the
 * internal entry points of the src/cpu modules (each implements part of qs_backend_ops; the
 * table itself is assembled in cpu_backend.c). Contracts are those of src/core/backend.h. */
#ifndef QSYNC_CPU_CPU_BACKEND_H
#define QSYNC_CPU_CPU_BACKEND_H

#include "core/backend.h"
#include "core/numfmt.h"
#include "cpu/dnnl_util.h"

/* The CPU "stream": execution is synchronous, so it only points back at its backend. */
typedef struct qs_cpu_stream {
    struct qs_cpu_backend *be;
} qs_cpu_stream;

typedef struct qs_cpu_backend {
    struct qs_backend base;   /* must stay first: qs_backend* <-> qs_cpu_backend* */
    qs_dnnl_ctx dnnl;         /* engine + stream, owned */
    qs_cpu_stream stream;     /* the default (and only) stream */
    qs_prec_support prec_support[QS_PREC_COUNT]; /* probed at creation (cpu_quant.c) */
    size_t bytes_in_use, peak_bytes; /* of alloc()/free(), bytes as requested */
    void *scratch;            /* grow-only temporary of single ops (never held across ops) */
    size_t scratch_bytes;
} qs_cpu_backend;

static inline qs_cpu_backend *qs_cpu_be(qs_backend *be) { return (qs_cpu_backend *)be; }

/* Every plan starts with this header so plan_destroy can dispatch and ops can check that
 * they were handed a plan of their own kind. `prec` selects the per-precision path. */
typedef enum qs_cpu_plan_kind {
    QS_CPU_PLAN_LINEAR = 0x4c494e,
    QS_CPU_PLAN_CONV = 0x434f4e,
    QS_CPU_PLAN_POOL = 0x504f4f,
    QS_CPU_PLAN_BMM = 0x424d4d
} qs_cpu_plan_kind;
typedef struct qs_cpu_plan {
    qs_cpu_plan_kind kind;
    qs_precision prec;
} qs_cpu_plan;

/* Check that `plan` is non-NULL and of kind `kind`; `what` names the calling op. */
qs_status qs_cpu_plan_check(const void *plan, qs_cpu_plan_kind kind, const char *what);
/* Fail with QS_ERR_UNSUPPORTED unless the backend runs prec (natively or emulated). */
qs_status qs_cpu_prec_check(qs_backend *be, qs_precision prec, const char *what);

/* Validate a memory-bound op's arguments: n >= 0 and, when n > 0, none of the nptrs
 * pointers is NULL. `what` names the op. Use with a compound literal:
 * qs_cpu_args_check("relu_forward", n, 2, (const void *[]){x, y}). */
qs_status qs_cpu_args_check(const char *what, int64_t n, int nptrs, const void *const *ptrs);

/* Workspace layout helper: round a byte count up to the 64-byte host alignment. */
static inline size_t qs_cpu_align(size_t bytes) { return (bytes + 63u) & ~(size_t)63u; }
/* The larger of two byte counts (workspace sizing). */
static inline size_t qs_cpu_max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Longest reduction whose s8·s8 products oneDNN's int32 accumulation sums exactly:
 * floor(2^31 / 127^2). (cpu_linear.c and cpu_conv.c still carry their own copy.) */
#define QS_CPU_INT8_EXACT_TERMS 133144

/* ---- cpu_linear.c ---- */
qs_status qs_cpu_linear_plan(qs_backend *be, const qs_linear_desc *d, void **plan, size_t *workspace);
qs_status qs_cpu_linear_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x,
                                const qs_operand *w, const float *b, void *y, void *ws);
qs_status qs_cpu_linear_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                      const qs_operand *w, void *dx, bool accumulate, void *ws);
qs_status qs_cpu_linear_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                         const qs_operand *x, float *dw, float *db, void *ws);
void qs_cpu_linear_plan_destroy(void *plan);
/* oneDNN implementation name of a linear plan's primitive: dir 0 forward, 1 backward-data,
 * 2 backward-weights (for logs and benchmarks). */
const char *qs_cpu_linear_impl_name(const void *plan, int dir);

/* ---- cpu_bmm.c: batched matmul (qs_bmm_desc) ---- */
qs_status qs_cpu_bmm_plan(qs_backend *be, const qs_bmm_desc *d, void **plan, size_t *workspace);
qs_status qs_cpu_bmm_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *a, const qs_operand *b,
                             float *c, void *ws);
qs_status qs_cpu_bmm_backward_a(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *b,
                                float *da, bool accumulate, void *ws);
qs_status qs_cpu_bmm_backward_b(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc, const qs_operand *a,
                                float *db, bool accumulate, void *ws);
void qs_cpu_bmm_plan_destroy(void *plan);
/* oneDNN implementation name of a bmm plan's primitive: dir 0 forward, 1 backward_a,
 * 2 backward_b (for logs and benchmarks). */
const char *qs_cpu_bmm_impl_name(const void *plan, int dir);

/* ---- cpu_conv.c ---- */
qs_status qs_cpu_conv_plan(qs_backend *be, const qs_conv_desc *d, void **plan, size_t *workspace);
qs_status qs_cpu_conv_forward(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x,
                              const qs_operand *w, const float *b, void *y, void *ws);
qs_status qs_cpu_conv_backward_data(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                    const qs_operand *w, void *dx, bool accumulate, void *ws);
qs_status qs_cpu_conv_backward_weights(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                       const qs_operand *x, float *dw, float *db, void *ws);
void qs_cpu_conv_plan_destroy(void *plan);
/* oneDNN implementation name of a conv plan's primitive: dir 0 forward, 1 backward-data,
 * 2 backward-weights (for logs and benchmarks). */
const char *qs_cpu_conv_impl_name(const void *plan, int dir);

/* ---- cpu_pool.c ---- */
qs_status qs_cpu_pool_plan(qs_backend *be, const qs_pool_desc *d, void **plan, size_t *workspace);
qs_status qs_cpu_pool_forward(qs_backend *be, void *plan, qs_stream *s, const void *x, void *y, int32_t *idx,
                              void *ws);
qs_status qs_cpu_pool_backward(qs_backend *be, void *plan, qs_stream *s, const void *dy, const int32_t *idx,
                               void *dx, bool accumulate, void *ws);
void qs_cpu_pool_plan_destroy(void *plan);

/* ---- cpu_quant.c: quantization ops and what every low-precision GEMM path shares ---- */
qs_prec_support qs_cpu_precision_support(qs_backend *be, qs_precision p);
/* Fill cb->prec_support: FP32 native, FP16/FP8 emulated, BF16/INT8 native when oneDNN has an
 * optimized matmul for them on this CPU (else emulated). */
qs_status qs_cpu_probe_precisions(qs_cpu_backend *cb);
qs_status qs_cpu_quantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *src,
                          const float *col_scale, qs_dtype dt, void *dst, float *scales, bool per_row,
                          const qs_sr *sr, void *dst_t, const qs_quant_delayed *delayed);
qs_status qs_cpu_dequantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const qs_operand *src,
                            float *dst);
qs_status qs_cpu_argmax_rows(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x, int32_t *idx);
qs_status qs_cpu_column_sums(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x,
                             float *sums);
/* Whether a storage dtype carries dequantization scales (S8, FP8). */
static inline bool qs_cpu_dtype_scaled(qs_dtype dt) { return dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2; }
/* Check an operand against the plan's storage dtype (non-NULL data, scales present when the
 * dtype has them, per_row only where allow_per_row). `what` names the op. */
qs_status qs_cpu_operand_check(const qs_operand *op, qs_dtype expect, bool allow_per_row, const char *what);
/* The per-tensor dequantization scale of an operand (1 for unscaled dtypes). */
float qs_cpu_operand_tensor_scale(const qs_operand *op);
/* out[r,c] = (or += when accumulate) acc[r,c]·alpha·col_scale[c] + bias[c] over (rows, cols);
 * col_scale and bias may be NULL (1 and 0); acc may alias out when !accumulate. The FP32
 * epilogue of INT8 GEMMs, whose oneDNN primitives run without output scales (2.6 picks a slow
 * implementation for runtime scales). */
void qs_cpu_epilogue(int64_t rows, int64_t cols, const float *acc, float alpha, const float *col_scale,
                     const float *bias, float *out, bool accumulate);
/* A backend-owned temporary of ≥ bytes (grow-only, 64 B aligned); valid until the next call
 * from any op, so ops must not hold it across calls into other ops. */
qs_status qs_cpu_scratch(qs_cpu_backend *cb, size_t bytes, void **out);
/* An FP32 view of a (rows, cols) operand for emulated precisions: the operand's own data
 * when it is F32, else dequantized into dst (rows·cols floats) — *out says which. */
qs_status qs_cpu_widen(qs_backend *be, int64_t rows, int64_t cols, const qs_operand *op, float **out, float *dst);

/* dst (cols, rows) = transpose of the row-major int8 matrix src (rows, cols). */
void qs_cpu_transpose_s8(int64_t rows, int64_t cols, const void *src, void *dst);

/* ---- cpu_reduce.c: deterministic per-channel sums over (rows, C) data ---- */
/* sum1[c] = Σ_r a[r,c]                         (skipped when sum1 is NULL)
 * With `mask` (rows, C) not NULL, a[r,c] counts as 0 wherever !(mask[r,c] > 0) (a ReLU's
 * output masking its input gradient).
 * sum2[c] = Σ_r (a[r,c]-sa[c])·(b[r,c]-sb[c])  (skipped when sum2 is NULL; sa/sb NULL mean 0;
 *                                                b NULL means the square Σ (a[r,c]-sa[c])²)
 * Accumulated in double over a fixed row-chunk split (independent of the thread count), so
 * results are bitwise reproducible. Fails only with QS_ERR_OOM. */
qs_status qs_cpu_colsums(int64_t rows, int64_t C, const float *a, const float *mask, const float *b,
                         const double *sa, const double *sb, double *sum1, double *sum2);

/* ---- cpu_norm.c ---- */
qs_status qs_cpu_batchnorm_forward_train(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x, qs_dtype x_dt,
                                         const float *gamma, const float *beta, void *y, qs_dtype y_dt, float *save_mean,
                                         float *save_invstd, float *running_mean, float *running_var,
                                         float momentum, float eps, bool relu, const void *residual,
                                         qs_dtype residual_dt);
qs_status qs_cpu_batchnorm_forward_eval(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x, qs_dtype x_dt,
                                        const float *gamma, const float *beta, const float *running_mean,
                                        const float *running_var, float eps, void *y, qs_dtype y_dt, bool relu,
                                        const void *residual, qs_dtype residual_dt);
qs_status qs_cpu_batchnorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const void *x, qs_dtype x_dt,
                                    const void *dy, qs_dtype dy_dt, const float *gamma, const float *save_mean,
                                    const float *save_invstd, void *dx, qs_dtype dx_dt, const qs_sr *dx_sr, bool accumulate, float *dgamma,
                                    float *dbeta, const void *y_relu, qs_dtype y_dt, float *dresidual, bool dresidual_accumulate);

/* ---- cpu_eltwise.c ---- */
qs_status qs_cpu_relu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
qs_status qs_cpu_relu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const void *dy, qs_dtype dy_dt,
                               float *dx, bool accumulate);
qs_status qs_cpu_add_forward(qs_backend *be, qs_stream *s, int64_t n, const void *a, qs_dtype a_dt, const void *b,
                             qs_dtype b_dt, float *y, bool relu);
qs_status qs_cpu_accumulate(qs_backend *be, qs_stream *s, int64_t n, const float *src, float *dst,
                            bool accumulate);
qs_status qs_cpu_scale(qs_backend *be, qs_stream *s, int64_t n, float *x, float alpha);
/* dst = src (accumulate false) or dst += src, OpenMP-parallel; shared by the modules. */
void qs_cpu_copy_or_add(int64_t n, const float *src, float *dst, bool accumulate);

/* ---- cpu_dropout.c ---- */
qs_status qs_cpu_dropout_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y,
                                 uint8_t *mask, float p, const qs_dropout_rng *rng);
qs_status qs_cpu_dropout_backward(qs_backend *be, qs_stream *s, int64_t n, const float *dy, const uint8_t *mask,
                                  float p, float *dx, bool accumulate);

/* ---- cpu_softmax.c ---- */
qs_status qs_cpu_softmax_xent_forward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                      const float *logits, const int32_t *labels, float *loss, float *probs);
qs_status qs_cpu_softmax_xent_backward(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                       const float *probs, const int32_t *labels, float scale, float *dlogits);

/* ---- cpu_transformer.c: memory-bound transformer ops (FP32, rows × C, C innermost) ---- */
qs_status qs_cpu_layernorm_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                   const float *gamma, const float *beta, float eps, float *y, float *save_mean,
                                   float *save_rstd);
qs_status qs_cpu_layernorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_rstd, float *dx, bool accumulate, float *dgamma, float *dbeta);
qs_status qs_cpu_gelu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
qs_status qs_cpu_gelu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *x, const float *dy, float *dx,
                               bool accumulate);
qs_status qs_cpu_embedding_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                   const float *ids, const float *table, float *y);
qs_status qs_cpu_embedding_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                    const float *ids, const float *dy, float *dtable, bool accumulate);
qs_status qs_cpu_add_broadcast(qs_backend *be, qs_stream *s, int64_t outer, int64_t inner, const float *x,
                               const float *v, float *y);
qs_status qs_cpu_permute_heads(qs_backend *be, qs_stream *s, int64_t N, int64_t T, int64_t H, int64_t D, int64_t ld,
                               int64_t off, const float *src, float *dst, bool to_heads, bool accumulate);
qs_status qs_cpu_softmax_forward(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t Tq, int64_t Tk,
                                 const float *x, float *y, bool causal, const float *key_ids, float pad_id);
qs_status qs_cpu_softmax_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx, bool accumulate);
qs_status qs_cpu_tanh_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
qs_status qs_cpu_tanh_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const float *dy, float *dx,
                               bool accumulate);

/* ---- cpu_layout.c ---- */
qs_status qs_cpu_nhwc_to_nchw(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                              const float *x, float *y);
qs_status qs_cpu_nchw_to_nhwc(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                              const float *x, float *y, bool accumulate);

/* ---- cpu_cast.c ---- */
qs_status qs_cpu_cast(qs_backend *be, qs_stream *s, int64_t n, const void *src, qs_dtype src_dt, void *dst,
                      qs_dtype dst_dt);

/* ---- cpu_optim.c ---- */
qs_status qs_cpu_sgd_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *buf,
                          float lr, float momentum, float dampening, float wd, bool nesterov, bool first_step);
qs_status qs_cpu_adamw_step(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g, float *m,
                            float *v, float lr, double beta1, double beta2, float eps, float wd, int64_t step);
qs_status qs_cpu_sum_squares(qs_backend *be, qs_stream *s, int64_t n, const float *x, double *out);

#endif
