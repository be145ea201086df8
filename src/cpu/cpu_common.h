/* src/cpu/cpu_common.h — defines: what every src/cpu op file shares (cpu_common.c): the CPU
 * backend handle and its stream, the common plan header, argument and operand checks, the
 * backend's grow-only scratch, the FP32 epilogue of low-precision GEMMs and small copies.
 * Contracts of the ops themselves: core/backend_ops.def. */
#ifndef QSYNC_CPU_CPU_COMMON_H
#define QSYNC_CPU_CPU_COMMON_H

#include <math.h>

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
    qs_prec_support prec_support[QS_PREC_COUNT]; /* probed at creation (cpu_backend.c) */
    size_t bytes_in_use, peak_bytes; /* of alloc()/free(), bytes as requested */
    void *scratch;            /* grow-only temporary of single ops (never held across ops) */
    size_t scratch_bytes;
} qs_cpu_backend;

static inline qs_cpu_backend *qs_cpu_be(qs_backend *be) { return (qs_cpu_backend *)be; }

/* How the backend runs precision p (its probed table; an unknown p is unsupported). */
static inline qs_prec_support qs_cpu_prec_of(qs_backend *be, qs_precision p) {
    if ((unsigned)p >= QS_PREC_COUNT) return QS_PREC_UNSUPPORTED;
    return qs_cpu_be(be)->prec_support[p];
}

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
 * floor(2^31 / 127^2). */
#define QS_CPU_INT8_EXACT_TERMS 133144

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

/* dst (cols, rows) = transpose of the row-major int8 matrix src (rows, cols). */
void qs_cpu_transpose_s8(int64_t rows, int64_t cols, const void *src, void *dst);
/* dst = src (accumulate false) or dst += src over n floats, OpenMP-parallel. */
void qs_cpu_copy_or_add(int64_t n, const float *src, float *dst, bool accumulate);

/* The logistic σ(z) = 1/(1 + e), e = exp(−z), and its complement 1 − σ = e·σ, which keeps its
 * relative accuracy where σ → 1 (1.0f − σ would not). Below z = −80, 1 − σ is 1 in FP32 and is
 * taken as 1: further down e·σ would lose bits (σ subnormal below −87.3) and then be ∞·0 once e
 * overflows (z < −88.7).
 * GELU's σ(2z) and SiLU's σ(x). On CUDA, `logistic` (cuda_map.cuh) makes the same FP32
 * operations (GELU's kernels, in cuda_transformer.cu beside their own map launcher, still spell
 * them out). */
static inline float qs_cpu_logistic(float z, float *one_minus) {
    const float e = expf(-z), sg = 1.0f / (1.0f + e);
    *one_minus = z < -80.0f ? 1.0f : e * sg;
    return sg;
}

#endif
