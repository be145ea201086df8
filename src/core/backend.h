/* src/core/backend.h — defines: the operation-level backend interface.
 *
 * Layers are written once against this table; each backend (CPU/oneDNN now, CUDA later)
 * owns its heavy operations, layouts and packed operands. Conventions:
 *  - Every call takes a qs_stream*. On the CPU a stream executes synchronously; on a GPU
 *    calls are asynchronous and stream_sync() waits. Callers never assume completion
 *    without stream_sync().
 *  - Device pointers come from alloc(); host<->device traffic only through copy_*.
 *  - GEMM-like ops are prepared once per shape and precision as a "plan" (primitive cache,
 *    packed weights, algorithm choice) and executed many times. A plan reports the
 *    workspace it needs; the caller passes a buffer of at least that size (may be NULL if 0).
 *  - Activations are channels-last. Linear: X (M,K), W (N,K) PyTorch layout, b (N), Y (M,N).
 *    Conv2d: X (N,H,W,C) NHWC, W (K,C,R,S) PyTorch OIHW layout, b (K), Y (N,P,Q,K) NHWC.
 *  - Backward ops overwrite their outputs unless an `accumulate` flag says otherwise.
 *  - GEMM-like ops read their quantizable operands (X, W, dY) as qs_operand: data in the
 *    storage dtype of the plan's precision (qs_precision_operand_dtype) plus dequantization
 *    scales. Outputs (Y, dX, dW, db) are always FP32: a low-precision GEMM emits FP32
 *    (int32 or FP32 accumulation, then scaled), so master weights, norms and the loss stay
 *    FP32. Quantization itself is a separate op (quantize), so layers decide what is kept
 *    for backward and at which precision. */
#ifndef QSYNC_CORE_BACKEND_H
#define QSYNC_CORE_BACKEND_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "qsync/status.h"
#include "qsync/dtype.h"
#include "core/numfmt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qs_backend qs_backend;
typedef struct qs_stream qs_stream;

/* A GEMM operand: value[i] = decode(data[i]) · scale (scale[row] when per_row).
 * dt: F32 / BF16 / F16 (scale NULL) or S8 / F8E4M3 / F8E5M2 (scale required: 1 entry, or
 * one per row when per_row — only weights, whose rows are output channels, may be per_row).
 * scale points to backend memory (host memory on the CPU).
 * data_t: NULL, or the same elements transposed — the operand's 2-D (rows, cols) matrix as a
 * (cols, rows) row-major one, in dt (what quantize's dst_t writes; 1-byte dtypes only). A
 * backend may read it where a product needs the operand transposed instead of making the
 * copy itself (the CUDA FP8 GEMMs, which take only the TN layout); the values are the same,
 * so results do not change. */
typedef struct qs_operand {
    const void *data;
    qs_dtype dt;
    const float *scale;
    bool per_row;
    const void *data_t;
} qs_operand;

/* An unscaled FP32 operand. */
static inline qs_operand qs_operand_f32(const void *data) {
    qs_operand o = {data, QS_F32, NULL, false, NULL};
    return o;
}

/* Storage dtype of a precision's GEMM operands: forward operands (X, W) when !gradient,
 * the output gradient dY when gradient. FP32/TF32 → F32, BF16 → BF16, FP16 → F16,
 * FP8 → E4M3 (forward) / E5M2 (gradients), INT8 → S8. */
qs_dtype qs_precision_operand_dtype(qs_precision p, bool gradient);

/* How a backend runs a precision: natively (its own low-precision kernels), emulated
 * (operands rounded to the format's values, arithmetic in FP32: numerically faithful,
 * not faster), or not at all. */
typedef enum qs_prec_support { QS_PREC_UNSUPPORTED = 0, QS_PREC_NATIVE, QS_PREC_EMULATED } qs_prec_support;
const char *qs_prec_support_name(qs_prec_support s);   /* "unsupported", "native", "emulated" */

/* The mask stream of a dropout: element i uses word i%4 of Philox(key, base + i/4), where
 * base = counter_base, or — when step_at is not NULL (backend memory, read when the op runs, as
 * a captured graph needs) — *step_at · step_stride. */
typedef struct qs_dropout_rng {
    uint64_t key, counter_base;
    const int64_t *step_at;
    uint64_t step_stride;
} qs_dropout_rng;

/* y_dt of the GEMM-like descriptors: the dtype of the forward output y — F32 (0, the
 * default), or BF16: the FP32 result (bias included) rounded to nearest even, as a
 * straight-through BF16 cast of it would. A backend may round its sums to BF16 directly (a
 * 16-bit-output GEMM or convolution engine) instead of rounding a separately computed FP32
 * result; the two differ only where the FP32 sums do. dx_dt: the same for backward-data's dx
 * (a BF16 dx is never accumulated into). The weight gradient stays FP32. */
typedef struct qs_linear_desc {
    int64_t M, N, K;      /* Y(M,N) = X(M,K) · W(N,K)^T + b(N) */
    bool has_bias;
    qs_precision prec;
    qs_dtype y_dt;        /* F32 or BF16 (above) */
    qs_dtype dx_dt;       /* F32 or BF16 (above) */
} qs_linear_desc;

typedef struct qs_conv_desc {
    int64_t N, H, W, C;   /* input (N,H,W,C) */
    int64_t K, R, S;      /* output channels, kernel height, kernel width */
    int64_t stride_h, stride_w, pad_h, pad_w;
    int64_t P, Q;         /* output height/width: set by qs_conv_desc_finish() */
    bool has_bias;
    qs_precision prec;
    qs_dtype y_dt;        /* F32 or BF16 (see qs_linear_desc) */
    qs_dtype dx_dt;       /* F32 or BF16 (see qs_linear_desc) */
} qs_conv_desc;

/* Batched matrix product over `batch` independent, contiguous row-major matrices:
 *   C_b (M,N) = alpha · A_b (M,K) · op(B_b),  op(B) = Bᵀ with B_b (N,K) when trans_b, else B_b (K,N).
 * Batch strides are the matrix sizes (M·K, N·K, M·N). Attention's QKᵀ (trans_b, alpha = 1/√d)
 * and P·V are the two uses; batch = samples × heads. */
typedef struct qs_bmm_desc {
    int64_t batch, M, N, K;
    bool trans_b;
    float alpha;
    qs_precision prec;
} qs_bmm_desc;

/* Pooling over NHWC input; kind is max or average (avg counts padding, like PyTorch's
 * count_include_pad=True). Global average pooling is kernel = H×W, stride 1, pad 0. */
typedef enum qs_pool_kind { QS_POOL_MAX = 0, QS_POOL_AVG } qs_pool_kind;
typedef struct qs_pool_desc {
    qs_pool_kind kind;
    int64_t N, H, W, C;
    int64_t R, S, stride_h, stride_w, pad_h, pad_w;
    int64_t P, Q;         /* set by qs_pool_desc_finish() */
} qs_pool_desc;

/* Fill P,Q from the other fields; fails with a message when the output would be empty. */
qs_status qs_conv_desc_finish(qs_conv_desc *d);
qs_status qs_pool_desc_finish(qs_pool_desc *d);

/* Argument checks every backend's conv_plan / pool_plan start with: non-NULL arguments
 * (then *plan = NULL, *workspace = 0) and a finished descriptor (its P,Q as
 * qs_*_desc_finish computes them); pooling also needs H·W within int32 argmax indices. */
qs_status qs_conv_plan_args(const qs_conv_desc *d, void **plan, size_t *workspace);
qs_status qs_pool_plan_args(const qs_pool_desc *d, void **plan, size_t *workspace);

/* Fused multi-head self-attention: for every sample n and head h,
 *   out[n,t,h·D:(h+1)·D] = softmax(alpha · q_h k_hᵀ + mask) v_h,
 * with the operands of both products rounded to `dtype` (BF16 or F16, nearest even), FP32
 * accumulation and an FP32 softmax; the probabilities enter the second product in `dtype`.
 * mask: causal (key j > query i), and keys whose id key_ids[n·T + j] equals pad_id (key_ids
 * NULL: none); a query with every key masked gets a zero row. Heads are read from token rows:
 * head h of token t of sample n of an operand is ptr[(n·T + t)·ld + off + h·D + d]. */
typedef struct qs_attention_desc {
    int64_t N, T, H, D;
    float alpha;
    bool causal;
    const float *key_ids; /* (N, T) token ids on the backend, or NULL */
    float pad_id;
    qs_dtype dtype;       /* QS_BF16 or QS_F16 */
} qs_attention_desc;

/* One operand's (or gradient's) heads inside token rows of ld floats, from column off.
 * accumulate: a gradient is added to what is there instead of overwriting it. */
typedef struct qs_heads_ref {
    float *ptr;
    int64_t ld, off;
    bool accumulate;
} qs_heads_ref;

/* What the forward saves for the backward: q, k, v in dtype as (N,H,T,D) each and the
 * log-sum-exp of every query row (N,H,T) floats; and the backward's workspace: dO in dtype
 * (N,H,T,D) and the (N,H,T) row dot products dO·O. */
static inline size_t qs_attention_saved_bytes(const qs_attention_desc *d) {
    const size_t heads = (size_t)(d->N * d->H * d->T);
    return 3 * heads * (size_t)d->D * 2 + heads * sizeof(float);
}
static inline size_t qs_attention_workspace_bytes(const qs_attention_desc *d) {
    const size_t heads = (size_t)(d->N * d->H * d->T);
    return heads * (size_t)d->D * 2 + heads * sizeof(float);
}

/* Delayed scaling of an FP8 quantize (F8E4M3 / F8E5M2, per tensor): the scale is chosen from
 * the largest amax of the history amax[0..len) — what earlier calls recorded — instead of
 * from this tensor's own amax, which saves the pass over the tensor that finds it; values
 * beyond the range that scale gives saturate to the format's largest finite value. An
 * all-zero history (nothing recorded yet) falls back to this tensor's amax. With record,
 * this tensor's amax (of src·col_scale) is then written to amax[slot]. amax: backend memory,
 * len + 1 floats, zero before the first use; amax[len] is the call's working word.
 * 1 <= len, 0 <= slot < len. With step_at (backend memory, read when the op runs, as a captured
 * graph needs) the slot is instead *step_at mod len. Non-finite input fails as without it. */
typedef struct qs_quant_delayed {
    float *amax;
    int len, slot;
    bool record;
    const int64_t *step_at;
} qs_quant_delayed;

/* quantize's rule for dst_t (NULL, or a 1-byte dtype with per-tensor scales); QS_ERR_INVALID_ARG
 * naming the case otherwise. */
qs_status qs_quantize_dst_t_check(qs_dtype dt, bool per_row, const void *dst_t);
/* quantize's rule for delayed (NULL, or an FP8 dtype with a well-formed history). */
qs_status qs_quantize_delayed_check(qs_dtype dt, const qs_quant_delayed *delayed);
/* The bias-gradient rule of backward_weights (see linear_plan's comment below): with an F32
 * dY, db is required exactly when the plan has a bias; with a low-precision dY it must be
 * NULL. `what` names the op in the message. */
qs_status qs_bias_grad_check(qs_dtype dy_dt, const float *db, bool has_bias, const char *what);

/* The output dtypes of a GEMM-like plan (qs_linear_desc / qs_conv_desc y_dt and dx_dt): F32
 * or BF16, else QS_ERR_UNSUPPORTED naming which. */
qs_status qs_gemm_out_dtype_check(const char *what, qs_dtype y_dt, qs_dtype dx_dt);
/* The output-gradient dtype of batchnorm_backward and relu_backward: F32 or BF16 (a BF16
 * GEMM's dx_dt), else QS_ERR_UNSUPPORTED. */
qs_status qs_dy_dtype_check(const char *what, qs_dtype dy_dt);
/* An operand dtype that may be F32 or BF16 (a residual, an Add input), else QS_ERR_UNSUPPORTED
 * naming the argument (`role`). */
qs_status qs_f32_or_bf16_check(const char *what, const char *role, qs_dtype dt);
/* No accumulating into a BF16 dx (QS_ERR_INVALID_ARG): a rounded gradient is never a sum. */
qs_status qs_dx_accumulate_check(const char *what, qs_dtype dx_dt, bool accumulate);

/* The dtype rules of the batch-norm ops (their comments below): x_dt, y_dt and dx_dt F32 or BF16
 * (QS_ERR_UNSUPPORTED naming which), and no accumulating into a BF16 dx (QS_ERR_INVALID_ARG).
 * Forward ops pass dx_dt F32 and accumulate false. `what` names the op in the message. */
qs_status qs_batchnorm_dtype_check(const char *what, qs_dtype x_dt, qs_dtype y_dt, qs_dtype dx_dt, bool accumulate);

typedef struct qs_backend_ops {
    const char *name;     /* "cpu", "cuda" */

    /* ---- lifetime, memory, streams ---- */
    void (*destroy)(qs_backend *be);
    qs_status (*alloc)(qs_backend *be, size_t bytes, void **out);   /* zeroed, aligned */
    void (*free)(qs_backend *be, void *p);
    /* Bytes currently allocated through alloc() and not freed, and the peak since creation
     * (sizes as requested; the measured counterpart of qs_model_memory). Either may be NULL. */
    void (*memory_stats)(qs_backend *be, size_t *in_use, size_t *peak);
    /* GPU time of queued work (optional: NULL on backends that run ops synchronously): an
     * event recorded on a stream completes when the work queued before it has; the time
     * between two completed events (ms, ~0.5 µs resolution) is read after a stream_sync. */
    qs_status (*event_create)(qs_backend *be, void **event);
    void (*event_destroy)(qs_backend *be, void *event);
    qs_status (*event_record)(qs_backend *be, qs_stream *s, void *event);
    qs_status (*event_elapsed_ms)(qs_backend *be, void *start, void *end, float *ms);
    qs_status (*memset_zero)(qs_backend *be, qs_stream *s, void *p, size_t bytes);
    qs_status (*copy_h2d)(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes);
    qs_status (*copy_d2h)(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes);
    qs_status (*copy_d2d)(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes);
    qs_status (*stream_sync)(qs_backend *be, qs_stream *s);
    qs_stream *(*default_stream)(qs_backend *be);
    /* Capture (optional: NULL on backends without it; then all four are NULL). Ops queued on s
     * between capture_begin and capture_end are recorded, not run, into a graph that
     * graph_launch queues again on s as often as asked, with the pointers and scalar arguments
     * the ops were queued with (values that change between runs must be read from backend
     * memory, e.g. qs_sr.counter_at). No op between begin and end may synchronise with the
     * host or allocate through alloc(). capture_end always ends the capture; it fails, returning
     * no graph, when the recorded work cannot be replayed (an op refused capture). */
    qs_status (*capture_begin)(qs_backend *be, qs_stream *s);
    qs_status (*capture_end)(qs_backend *be, qs_stream *s, void **graph);
    qs_status (*graph_launch)(qs_backend *be, qs_stream *s, void *graph);
    void (*graph_destroy)(qs_backend *be, void *graph);

    /* Whether and how this backend runs GEMM-like ops at precision p. */
    qs_prec_support (*precision_support)(qs_backend *be, qs_precision p);

    /* ---- GEMM-like operators (plans) ----
     * Operand dtypes must be those of the plan's precision (qs_precision_operand_dtype):
     * x, w in the forward dtype, dy in the gradient dtype. w may be per_row only in forward
     * and backward_weights' x never is; backward_data needs a per-tensor w (fold per-channel
     * weight scales into dy when quantizing it: quantize's col_scale). Bias and bias
     * gradients are FP32. db: with an F32 dy, required exactly when the plan has a bias;
     * with a low-precision dy it must be NULL (compute it with column_sums from the FP32
     * gradient instead). */
    qs_status (*linear_plan)(qs_backend *be, const qs_linear_desc *d, void **plan, size_t *workspace);
    /* y = x·wᵀ + b, y in the plan's y_dt */
    qs_status (*linear_forward)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x,
                                const qs_operand *w, const float *b, void *y, void *ws);
    /* dx = dy·w (accumulate: dx += ..., F32 dx only), dx in the plan's dx_dt */
    qs_status (*linear_backward_data)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                      const qs_operand *w, void *dx, bool accumulate, void *ws);
    /* dw = dyᵀ·x, db = Σ_rows dy */
    qs_status (*linear_backward_weights)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                         const qs_operand *x, float *dw, float *db, void *ws);

    /* Conv2d, as Linear with X as image patches; a backend may round its BF16 results once to
     * BF16 before returning them in FP32 (the CUDA backend does: docs/PRECISION.md). */
    qs_status (*conv_plan)(qs_backend *be, const qs_conv_desc *d, void **plan, size_t *workspace);
    qs_status (*conv_forward)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x,
                              const qs_operand *w, const float *b, void *y, void *ws);  /* y in y_dt */
    qs_status (*conv_backward_data)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                    const qs_operand *w, void *dx, bool accumulate, void *ws);  /* dx in dx_dt */
    qs_status (*conv_backward_weights)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                       const qs_operand *x, float *dw, float *db, void *ws);

    qs_status (*pool_plan)(qs_backend *be, const qs_pool_desc *d, void **plan, size_t *workspace);
    /* Max pooling writes the argmax index (int32, within the input image, h*W+w) of every
     * output element into `idx` (N,P,Q,C); average pooling ignores idx. */
    qs_status (*pool_forward)(qs_backend *be, void *plan, qs_stream *s, const void *x, void *y,
                              int32_t *idx, void *ws);
    qs_status (*pool_backward)(qs_backend *be, void *plan, qs_stream *s, const void *dy,
                               const int32_t *idx, void *dx, bool accumulate, void *ws);

    void (*plan_destroy)(qs_backend *be, void *plan);

    /* Batched matmul (qs_bmm_desc): operands a, b in the plan precision's forward dtype, dc in
     * its gradient dtype, per-tensor scales only (never per_row). Outputs FP32.
     *   forward:    c  = alpha · a · op(b)
     *   backward_a: da = alpha · dc · op(b)ᵀ            (M,K)
     *   backward_b: db = alpha · dcᵀ · a  (N,K) when trans_b, else alpha · aᵀ · dc (K,N)
     * accumulate: add into da / db instead of overwriting. */
    qs_status (*bmm_plan)(qs_backend *be, const qs_bmm_desc *d, void **plan, size_t *workspace);
    qs_status (*bmm_forward)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *a,
                             const qs_operand *b, float *c, void *ws);
    qs_status (*bmm_backward_a)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc,
                                const qs_operand *b, float *da, bool accumulate, void *ws);
    qs_status (*bmm_backward_b)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dc,
                                const qs_operand *a, float *db, bool accumulate, void *ws);

    /* ---- memory-bound operators; x is viewed as (rows, C), C innermost ---- */
    /* Training-mode batch norm over rows: saves mean and 1/sqrt(var+eps) per channel and
     * updates running stats with the unbiased variance (PyTorch semantics). `relu` fuses a
     * following ReLU: y = max(BN(x), 0). y_dt: F32, or BF16 — y rounded to nearest even, as
     * the straight-through BF16 cast a BatchNorm may absorb (qs_model_fuse_casts) would.
     * x_dt: F32, or BF16 (a convolution's BF16 output, qs_model_fuse_casts): the values are
     * widened exactly, so every result equals the F32 op's on the widened x, bit for bit.
     * residual: NULL, or a (rows, C) tensor of residual_dt (F32, or BF16 widened exactly: a block
     * output kept in BF16, qs_model_bf16_residuals) added before the ReLU — y = [max](BN(x) +
     * residual, 0), the bits of BN, then add_forward — a residual block's last batch norm with
     * the block's Add fused in (qs_model_fuse). */
    qs_status (*batchnorm_forward_train)(qs_backend *be, qs_stream *s, int64_t rows, int64_t C,
                                         const void *x, qs_dtype x_dt, const float *gamma, const float *beta,
                                         void *y, qs_dtype y_dt, float *save_mean, float *save_invstd,
                                         float *running_mean, float *running_var,
                                         float momentum, float eps, bool relu, const void *residual,
                                         qs_dtype residual_dt);
    qs_status (*batchnorm_forward_eval)(qs_backend *be, qs_stream *s, int64_t rows, int64_t C,
                                        const void *x, qs_dtype x_dt, const float *gamma, const float *beta,
                                        const float *running_mean, const float *running_var,
                                        float eps, void *y, qs_dtype y_dt, bool relu, const void *residual,
                                        qs_dtype residual_dt);
    /* dx (overwritten or accumulated; may be NULL when no input gradient is needed),
     * dgamma, dbeta (overwritten); x in x_dt as in forward; dy F32, or BF16 (dy_dt: the BF16
     * dX of the convolution reading this batch norm alone, widened exactly). y_relu: NULL, or the output (dtype
     * y_dt) of a forward with `relu`, in which case dy is the gradient w.r.t. that output and
     * counts as 0 where y_relu <= 0. dx_dt: F32, or BF16 — the FP32 dx rounded to BF16
     * stochastically with dx_sr (element i of the (rows, C) matrix takes the word of global
     * index dx_sr->offset + i, as quantize does: the same bits as quantize(F32 dx, BF16, dx_sr))
     * or to nearest even when dx_sr is NULL; a BF16 dx cannot accumulate. This is how a
     * BatchNorm writes the quantized gradient of the BF16 convolution before it
     * (qs_gemm_dy_from_reader), skipping that convolution's FP32 dY and its quantizing pass.
     * dresidual: NULL, or the gradient (rows, C, FP32; overwritten, or accumulated with
     * dresidual_accumulate) of the residual a forward added: dy where y_relu > 0 (with
     * y_relu), else 0 — relu_backward's bits; written even when dx is NULL. */
    qs_status (*batchnorm_backward)(qs_backend *be, qs_stream *s, int64_t rows, int64_t C,
                                    const void *x, qs_dtype x_dt, const void *dy, qs_dtype dy_dt, const float *gamma,
                                    const float *save_mean, const float *save_invstd,
                                    void *dx, qs_dtype dx_dt, const qs_sr *dx_sr, bool accumulate,
                                    float *dgamma, float *dbeta, const void *y_relu, qs_dtype y_dt, float *dresidual,
                                    bool dresidual_accumulate);

    /* y = max(x, 0) (y may alias x) */
    qs_status (*relu_forward)(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
    /* dx = dy·[y > 0]; dy F32, or BF16 (dy_dt: widened exactly, the bits of the F32 op on it) */
    qs_status (*relu_backward)(qs_backend *be, qs_stream *s, int64_t n, const float *y,
                               const void *dy, qs_dtype dy_dt, float *dx, bool accumulate);
    /* y = a + b, or max(a + b, 0) with `relu` (Add→ReLU fused); a and b F32, or BF16 (a_dt,
     * b_dt: widened exactly — a block output kept in BF16, qs_model_bf16_residuals); y F32 */
    qs_status (*add_forward)(qs_backend *be, qs_stream *s, int64_t n, const void *a, qs_dtype a_dt,
                             const void *b, qs_dtype b_dt, float *y, bool relu);
    /* dst = src (accumulate=false) or dst += src */
    qs_status (*accumulate)(qs_backend *be, qs_stream *s, int64_t n, const float *src, float *dst,
                            bool accumulate);
    /* Inverted dropout: keep with probability 1-p, scale kept values by 1/(1-p). The mask
     * (uint8, one per element) comes from the stream rng (qs_dropout_rng). */
    qs_status (*dropout_forward)(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y,
                                 uint8_t *mask, float p, const qs_dropout_rng *rng);
    qs_status (*dropout_backward)(qs_backend *be, qs_stream *s, int64_t n, const float *dy,
                                  const uint8_t *mask, float p, float *dx, bool accumulate);
    /* Fused softmax + cross-entropy over logits (B, classes), labels int32 in [0,classes).
     * Writes per-sample loss (B) and probs (B, classes). */
    qs_status (*softmax_xent_forward)(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                      const float *logits, const int32_t *labels, float *loss,
                                      float *probs);
    /* dlogits = (probs - onehot(labels)) · scale  (scale = 1/B for a mean loss) */
    qs_status (*softmax_xent_backward)(qs_backend *be, qs_stream *s, int64_t B, int64_t classes,
                                       const float *probs, const int32_t *labels, float scale,
                                       float *dlogits);
    /* ---- transformer operators (FP32; rows × C with C innermost) ---- */
    /* LayerNorm over the last dimension: y = (x − mean)·rstd·gamma + beta, rstd =
     * 1/sqrt(var + eps) with the biased variance (PyTorch). Saves mean and rstd per row. */
    qs_status (*layernorm_forward)(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                   const float *gamma, const float *beta, float eps, float *y,
                                   float *save_mean, float *save_rstd);
    /* dx (overwritten or accumulated; may be NULL), dgamma and dbeta (overwritten; FP32,
     * reduced over rows in double or a fixed-order tree, identical for any thread count). */
    qs_status (*layernorm_backward)(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_rstd, float *dx, bool accumulate, float *dgamma,
                                    float *dbeta);
    /* GELU, tanh approximation (GPT-2, PyTorch approximate='tanh'):
     * y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). backward reads the forward's input x. */
    qs_status (*gelu_forward)(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
    qs_status (*gelu_backward)(qs_backend *be, qs_stream *s, int64_t n, const float *x, const float *dy,
                               float *dx, bool accumulate);
    /* Embedding lookup: y[r,:] = table[ids[r],:] for r < rows; ids are token ids stored as
     * FP32 integers (exact below 2^24), table (V,C). An id outside [0,V) fails on the CPU
     * and yields a zero row on a GPU (which cannot fail mid-stream; loaders check ids). */
    qs_status (*embedding_forward)(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                   const float *ids, const float *table, float *y);
    /* dtable[v,:] (+)= Σ_{r: ids[r]=v} dy[r,:], summed in row order for every v (deterministic
     * for any thread count); overwrite zeroes the whole (V,C) table first. */
    qs_status (*embedding_backward)(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                    const float *ids, const float *dy, float *dtable, bool accumulate);
    /* y[o·inner + i] = x[o·inner + i] + v[i] for o < outer, i < inner (position embeddings:
     * outer = samples, inner = T·C). y may alias x. */
    qs_status (*add_broadcast)(qs_backend *be, qs_stream *s, int64_t outer, int64_t inner, const float *x,
                               const float *v, float *y);
    /* Attention heads ⇄ tokens. to_heads: dst (N,H,T,D)[n,h,t,d] = src[n,t,off + h·D + d], src
     * rows of ld floats (ld ≥ off + H·D). !to_heads: dst[n,t,off + h·D + d] = src (N,H,T,D)
     * [n,h,t,d], dst rows of ld floats; only that slice of dst is written. accumulate adds
     * into dst instead of overwriting. */
    qs_status (*permute_heads)(qs_backend *be, qs_stream *s, int64_t N, int64_t T, int64_t H, int64_t D,
                               int64_t ld, int64_t off, const float *src, float *dst, bool to_heads,
                               bool accumulate);
    /* Masked softmax over the last axis of scores x (N,H,Tq,Tk) into y (same shape), in FP32.
     * causal: key j > query i is masked; key_ids (N,Tk) non-NULL: key j of sample n is masked
     * where key_ids[n·Tk + j] == pad_id. Masked entries get probability 0; a row with every
     * key masked is all 0. */
    qs_status (*softmax_forward)(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t Tq, int64_t Tk,
                                 const float *x, float *y, bool causal, const float *key_ids, float pad_id);
    /* dx = y ⊙ (dy − Σ_j dy·y) per row of `cols` (rows = N·H·Tq); accumulate adds into dx. */
    qs_status (*softmax_backward)(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *y,
                                  const float *dy, float *dx, bool accumulate);
    /* Fused attention (qs_attention_desc); optional: NULL where the backend has none, and then
     * attention runs as its separate nodes. attention_supported says whether a shape and dtype
     * can run fused. forward writes out (token rows of H·D floats) and `saved`
     * (qs_attention_saved_bytes); backward reads them, dout (like out) and writes dq, dk, dv
     * (where ptr is non-NULL), using `workspace` (qs_attention_workspace_bytes). Deterministic:
     * no floating-point atomics. */
    bool (*attention_supported)(qs_backend *be, const qs_attention_desc *d);
    qs_status (*attention_forward)(qs_backend *be, qs_stream *s, const qs_attention_desc *d, const qs_heads_ref *q,
                                   const qs_heads_ref *k, const qs_heads_ref *v, float *out, void *saved);
    qs_status (*attention_backward)(qs_backend *be, qs_stream *s, const qs_attention_desc *d, const void *saved,
                                    const float *out, const float *dout, const qs_heads_ref *dq,
                                    const qs_heads_ref *dk, const qs_heads_ref *dv, void *workspace);
    /* y = tanh(x) (BERT's pooler); backward dx = dy·(1 − y²) from the forward's output. */
    qs_status (*tanh_forward)(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
    qs_status (*tanh_backward)(qs_backend *be, qs_stream *s, int64_t n, const float *y, const float *dy,
                               float *dx, bool accumulate);
    /* idx[r] = the first column holding row r's largest value of x (rows, cols), as a scan that
     * replaces the best on `>`; a row with a NaN gives an unspecified column. Predictions for
     * accuracy: the logits stay on the device, only one index per row travels. */
    qs_status (*argmax_rows)(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x, int32_t *idx);
    /* (N,H,W,C) → (N,C,H,W) and back (the inverse may accumulate into its destination). */
    qs_status (*nhwc_to_nchw)(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W,
                              int64_t C, const float *x, float *y);
    qs_status (*nchw_to_nhwc)(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W,
                              int64_t C, const float *x, float *y, bool accumulate);
    /* Element-type conversion with round-to-nearest-even; dst and src dtypes may be any of
     * f32/bf16/f16. */
    qs_status (*cast)(qs_backend *be, qs_stream *s, int64_t n, const void *src, qs_dtype src_dt,
                      void *dst, qs_dtype dst_dt);

    /* ---- quantization ---- */
    /* Quantize an FP32 (rows, cols) row-major matrix into storage dtype dt at dst:
     *  S8: symmetric INT8 (core/quant_int8.h), scales chosen from amax — one per tensor
     *      (scales[0]) or one per row (scales[rows]) when per_row;
     *  F8E4M3 / F8E5M2: saturating FP8 with a per-tensor power-of-two scale chosen so that
     *      amax maps at or below the format's max; scales[0] = the dequantization multiplier;
     *  BF16 / F16: plain conversion, scales unused (may be NULL); F32: copy.
     * col_scale (NULL or cols entries) quantizes src[r,c]·col_scale[c] instead of src (how a
     * per-output-channel weight scale is folded into dY for backward-data). sr NULL: round to
     * nearest even; else stochastic rounding with that stream (element index r·cols + c).
     * Non-finite input fails (QS_ERR_INVALID_ARG, "non-finite") for S8/FP8 — loss scaling
     * must see overflow rather than silently clamped values.
     * dst_t: NULL, or a second output (cols, rows) row-major receiving the same quantized
     * elements transposed (dst_t[c·rows + r] = dst[r·cols + c]), written in the same pass on
     * the GPU; only for the 1-byte dtypes S8 (per-tensor) and F8E4M3 / F8E5M2.
     * delayed: NULL (the scale from this tensor's amax), or FP8 delayed scaling
     * (qs_quant_delayed). */
    qs_status (*quantize)(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *src,
                          const float *col_scale, qs_dtype dt, void *dst, float *scales, bool per_row,
                          const qs_sr *sr, void *dst_t, const qs_quant_delayed *delayed);
    /* dst (rows, cols) FP32 = value of operand src (see qs_operand). */
    qs_status (*dequantize)(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const qs_operand *src,
                            float *dst);
    /* sums[c] = Σ_r x[r,c] (FP32 result, accumulated in double; bias gradients). */
    qs_status (*column_sums)(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x,
                             float *sums);

    /* ---- optimizer and reductions (FP32 master weights) ---- */
    /* PyTorch SGD: g' = g + wd·p; buf = momentum·buf + (1-dampening)·g' (buf = g' on the first
     * step, signalled by first_step); step = nesterov ? g' + momentum·buf : buf; p -= lr·step.
     * momentum == 0 means plain SGD and buf may be NULL. */
    qs_status (*sgd_step)(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g,
                          float *buf, float lr, float momentum, float dampening, float wd,
                          bool nesterov, bool first_step);
    /* PyTorch AdamW (decoupled weight decay); step counts from 1. */
    qs_status (*adamw_step)(qs_backend *be, qs_stream *s, int64_t n, float *p, const float *g,
                            float *m, float *v, float lr, double beta1, double beta2, float eps,
                            float wd, int64_t step);
    /* *out = Σ x_i² accumulated in double (result on the host). */
    qs_status (*sum_squares)(qs_backend *be, qs_stream *s, int64_t n, const float *x, double *out);
    /* x *= alpha */
    qs_status (*scale)(qs_backend *be, qs_stream *s, int64_t n, float *x, float alpha);
} qs_backend_ops;

/* Every backend's handle starts with this header. */
struct qs_backend {
    const qs_backend_ops *ops;
    int num_threads;      /* CPU compute threads (0 = library default) */
    bool fp8_wants_transposed; /* FP8 products read qs_operand.data_t (layers then keep the
                                  transposed copies quantize can write); false: never read */
    bool fused_attention; /* models run attention through attention_forward/backward where
                             the shapes allow (graph/graph.h qs_model_fuse_attention) */
    bool pointwise_conv_as_linear; /* 1×1, stride-1, unpadded Conv2d layers run the linear_* ops
                                      on their (N·H·W, C) rows instead of conv_* (layers/conv2d.c) */
};

/* Create the CPU backend (oneDNN). num_threads 0 keeps the OpenMP default. */
qs_status qs_backend_cpu_create(int num_threads, qs_backend **out);

/* Create the CUDA backend on device `device` (src/cuda). Fails with QS_ERR_UNSUPPORTED in a
 * build without CUDA, QS_ERR_BACKEND when there is no such device or the driver refuses. */
qs_status qs_backend_cuda_create(int device, qs_backend **out);
/* The environment variable that confines every CUDA backend of the process to SMs
 * [offset, offset+count) of its GPU: "<offset>:<count>" (src/cuda/cuda_green.h; set per rank by
 * the cluster launcher, src/parallel/mps.c). */
#define QS_CUDA_SM_PARTITION_ENV "QS_CUDA_SM_PARTITION"

/* The CUDA backend on cuda:device when `cuda`, else the CPU backend with num_threads. */
qs_status qs_backend_open(bool cuda, int device, int num_threads, qs_backend **out);

/* What a CUDA backend runs on: the GPU's name, its SMs as this process sees them (under an MPS
 * SM share, possibly fewer) and its memory. QS_ERR_INVALID_ARG for another backend (and in a
 * build without CUDA). */
typedef struct qs_gpu_facts {
    char name[256];
    int sms;
    size_t memory_bytes;
    int cc_major, cc_minor;
} qs_gpu_facts;
qs_status qs_backend_cuda_facts(qs_backend *be, qs_gpu_facts *out);

#ifdef __cplusplus
}
#endif
#endif
