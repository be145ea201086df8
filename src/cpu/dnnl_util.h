/* src/cpu/dnnl_util.h — defines: the one module that talks to oneDNN (v2.6 C API).
 *
 * The rest of src/cpu describes tensors with qs_dnnl_tensor (dims, strides or a layout tag)
 * and builds primitives with the typed constructors below, so no dnnl_* call or v2-only type
 * (op descriptors, by-value memory descriptors) leaks out and the v2 → v3 API change touches
 * only dnnl_util.c. A qs_dnnl_prim bundles a primitive with memory objects for its arguments
 * (created once without a buffer; each execution only swaps data handles) and the size of
 * its user-managed scratchpad. A prim is not safe to execute from two threads at once. */
#ifndef QSYNC_CPU_DNNL_UTIL_H
#define QSYNC_CPU_DNNL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <oneapi/dnnl/dnnl.h>
#include "qsync/status.h"
#include "qsync/dtype.h"

#define QS_DNNL_MAX_ARGS 8

/* Engine and in-order stream of the CPU backend. */
typedef struct qs_dnnl_ctx {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
} qs_dnnl_ctx;

/* Create the CPU engine (index 0) and a stream on it; *ctx is zeroed on failure. */
qs_status qs_dnnl_ctx_create(qs_dnnl_ctx *ctx);
/* Destroy both (safe on a zeroed ctx). */
void qs_dnnl_ctx_destroy(qs_dnnl_ctx *ctx);

/* Map a oneDNN status to qs_status, recording "oneDNN <what> failed: <name>" on error.
 * dnnl_unimplemented maps to QS_ERR_UNSUPPORTED, out_of_memory to QS_ERR_OOM. */
qs_status qs_dnnl_check(dnnl_status_t st, const char *what);

/* A tensor as a primitive sees it (element type dt: f32 — the zero value — bf16, f16, s8,
 * u8 or s32). dims are in oneDNN's logical order: (rows, cols)
 * for matrices, (N, C, H, W) for activations, (O, I, H, W) for conv weights, (n) vectors. */
typedef enum qs_dnnl_layout {
    QS_DNNL_STRIDED = 0, /* explicit element strides */
    QS_DNNL_ANY,         /* let the primitive choose (weights of convolutions) */
    QS_DNNL_NHWC,        /* 4-D (N,C,H,W) stored channels-last */
    QS_DNNL_OIHW,        /* 4-D weights stored PyTorch style */
    QS_DNNL_VECTOR       /* 1-D dense */
} qs_dnnl_layout;

typedef struct qs_dnnl_tensor {
    int ndims;           /* 1..4 */
    int64_t dims[4];
    int64_t strides[4];  /* QS_DNNL_STRIDED only */
    qs_dnnl_layout layout;
    qs_dtype dt;
} qs_dnnl_tensor;

/* A primitive ready to execute. Execution handles are passed in the argument order its
 * constructor documents; DNNL_ARG_SCRATCHPAD follows internally when scratch_bytes > 0. */
typedef struct qs_dnnl_prim {
    dnnl_primitive_t prim;
    dnnl_primitive_desc_t pd;   /* owned, for queries and as a backward hint */
    int nargs;                  /* user arguments (scratchpad not counted) */
    dnnl_exec_arg_t args[QS_DNNL_MAX_ARGS + 1];
    size_t scratch_bytes;       /* user scratchpad the caller must pass to exec */
} qs_dnnl_prim;

/* C (m,n) = A (m,k) · B (k,n) [+ bias (1,n)] [+ C when accumulate] as a oneDNN matmul.
 * Arguments: A, B, [bias,] C. prefer (NULL: oneDNN's first choice) selects the first
 * implementation whose name contains it, e.g. "gemm"; falls back to the first choice. */
qs_status qs_dnnl_matmul_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const qs_dnnl_tensor *a,
                                const qs_dnnl_tensor *b, const qs_dnnl_tensor *bias, const qs_dnnl_tensor *c,
                                bool accumulate, const char *prefer, const char *what);

/* Whether oneDNN has an optimized (non-reference) matmul with A and B of dtype dt and an f32
 * result on this CPU (a 64×64×64 probe); *fast false also when it has none at all. */
qs_status qs_dnnl_matmul_probe(const qs_dnnl_ctx *ctx, qs_dtype dt, bool *fast);

/* 2-D convolution, direct algorithm, symmetric padding. Tensors: src (N,C,H,W),
 * weights (K,C,R,S), bias (K) or NULL, dst (N,K,P,Q).
 *   QS_DNNL_CONV_FWD:         arguments src, weights, [bias,] dst
 *   QS_DNNL_CONV_BWD_DATA:    arguments diff_dst, weights, diff_src          (hint: forward)
 *   QS_DNNL_CONV_BWD_WEIGHTS: arguments src, diff_dst, diff_weights, [diff_bias] (hint: forward) */
typedef enum qs_dnnl_conv_dir { QS_DNNL_CONV_FWD = 0, QS_DNNL_CONV_BWD_DATA, QS_DNNL_CONV_BWD_WEIGHTS } qs_dnnl_conv_dir;
qs_status qs_dnnl_conv_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, qs_dnnl_conv_dir dir,
                              const qs_dnnl_tensor *src, const qs_dnnl_tensor *weights, const qs_dnnl_tensor *bias,
                              const qs_dnnl_tensor *dst, const int64_t strides[2], const int64_t pads[2],
                              const qs_dnnl_prim *hint, const char *what);

/* Geometry of a forward convolution or deconvolution with explicit dilation (0 = dense, as
 * in oneDNN) and separate left/right padding, for the recipes that reinterpret a
 * convolution's backward pass as a forward one (cpu_conv_plan.c). */
typedef struct qs_dnnl_conv_geom {
    int64_t strides[2], dilates[2], pad_l[2], pad_r[2];
} qs_dnnl_conv_geom;

/* Forward (inference) convolution, or deconvolution when `deconv`, with geometry g. Tensors:
 * src (N,C,H,W), weights (O,I,R,S) — for a deconvolution O is its output channels —, bias (O)
 * or NULL, dst (N,O,P,Q). Optional post-ops on an f32 dst, with per-output-channel f32
 * vectors given at execution: dst = dst·mul[o] (po_mul) and then + add[o] (po_add) — a
 * runtime dequantization scale that, unlike oneDNN 2.6's runtime output scales, keeps the
 * brgemm/AMX kernels. Arguments src, weights, [bias,] dst, [mul,] [add]. */
qs_status qs_dnnl_conv_fwd_create_ex(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, bool deconv, const qs_dnnl_tensor *src,
                                     const qs_dnnl_tensor *weights, const qs_dnnl_tensor *bias,
                                     const qs_dnnl_tensor *dst, const qs_dnnl_conv_geom *g, bool po_mul,
                                     bool po_add, const char *what);

/* A reorder between two descriptions (layout, dtype) of the same logical tensor; arguments
 * from, to. */
qs_status qs_dnnl_reorder_create_t(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const qs_dnnl_tensor *from,
                                   const qs_dnnl_tensor *to, const char *what);

/* Whether oneDNN's int8 kernels on this CPU sum s8·s8 products exactly in int32: true when
 * the ISA it runs has VNNI (AVX-512 or AVX2) or AMX. Older ISAs go through saturating 16-bit
 * pair sums or halve s8 weights to 7 bits (inexact with ±127 operands: docs/BENCHMARKS.md,
 * "Convolution at every CPU precision"), so exact INT8 results cannot be promised there. */
bool qs_dnnl_int8_exact(void);

/* For a primitive's weights-like argument `arg` (0 = weights, 1 = diff_weights) whose layout
 * it chose itself: *needed tells whether it differs from `user`; if so a reorder user →
 * chosen (to_prim) or chosen → user is created in *reorder (arguments from, to) and
 * *bytes is the size of the chosen layout. */
qs_status qs_dnnl_weights_reorder(qs_dnnl_prim *reorder, const qs_dnnl_ctx *ctx, const qs_dnnl_prim *p, int arg,
                                  const qs_dnnl_tensor *user, bool to_prim, bool *needed, size_t *bytes);

/* Run the primitive synchronously: handles[i] is the buffer of argument i in the documented
 * order; scratch has ≥ scratch_bytes bytes (may be NULL when that is 0). */
qs_status qs_dnnl_prim_exec(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, void *const *handles, void *scratch,
                            const char *what);
/* Release everything (safe on a zeroed struct). */
void qs_dnnl_prim_destroy(qs_dnnl_prim *p);
/* Implementation name chosen for a primitive (e.g. "jit:avx512_core"), for logs/benches. */
const char *qs_dnnl_prim_impl(const qs_dnnl_prim *p);

/* Low level (v2 API; for benchmarks of other primitive kinds, not for library code): build a
 * primitive from a oneDNN operation descriptor with the given argument ids. */
qs_status qs_dnnl_prim_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const void *op_desc,
                              const_dnnl_post_ops_t post_ops, const_dnnl_primitive_desc_t hint,
                              const char *prefer_impl, const int *arg_ids, int nargs, const char *what);
/* Low level: a oneDNN memory descriptor for a qs_dnnl_tensor. */
qs_status qs_dnnl_md(dnnl_memory_desc_t *md, const qs_dnnl_tensor *t);

#endif
