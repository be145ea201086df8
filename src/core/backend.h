/* src/core/backend.h — defines: the operation-level backend interface: the ops table
 * qs_backend_ops (expanded from core/backend_ops.def, where every op and its contract is listed
 * once), the backend handle header, and the descriptors and checks the ops share. Backends are
 * opened through src/backends/backends.h.
 *
 * Layers are written once against this table; each backend (src/cpu: oneDNN; src/cuda) owns its
 * heavy operations, layouts and packed operands. Conventions:
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

/* The rules of batchnorm_forward_train (train) and batchnorm_forward_eval after their pointer
 * checks: x_dt, y_dt and residual_dt F32 or BF16 (QS_ERR_UNSUPPORTED), and in training at least
 * 2 rows (QS_ERR_INVALID_ARG). */
qs_status qs_batchnorm_forward_check(const char *what, bool train, int64_t rows, qs_dtype x_dt, qs_dtype y_dt,
                                     qs_dtype residual_dt);

/* The scalar rules of the optimizer ops (core/backend_ops.def), after their pointer checks
 * (QS_ERR_INVALID_ARG): sgd_step needs buf when momentum != 0 and n > 0, and Nesterov momentum
 * needs momentum > 0 and dampening 0; adamw_step counts steps from 1. */
qs_status qs_sgd_step_check(int64_t n, const float *buf, float momentum, float dampening, bool nesterov);
qs_status qs_adamw_step_check(int64_t step);

/* The operation table of a backend: `name` ("cpu", "cuda"), then one function pointer per op of
 * core/backend_ops.def (contracts there), in its order; optional ops may be NULL. */
typedef struct qs_backend_ops {
    const char *name;
#define QS_OP(family, ret, op, params) ret(*op) params;
#define QS_OP_OPTIONAL(family, ret, op, params) ret(*op) params;
#include "core/backend_ops.def"
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

/* The environment variable that confines every CUDA backend of the process to SMs
 * [offset, offset+count) of its GPU: "<offset>:<count>" (src/cuda/cuda_green.h; set per rank by
 * the cluster launcher, src/parallel/mps.c). Opening a backend: src/backends/backends.h. */
#define QS_CUDA_SM_PARTITION_ENV "QS_CUDA_SM_PARTITION"

#ifdef __cplusplus
}
#endif
#endif
