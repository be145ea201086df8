/* src/cpu/dnnl_util.h — defines: the one module that talks to oneDNN (v2.6 C API).
 *
 * Everything else in src/cpu uses these helpers instead of calling dnnl_* directly, so the
 * v2 → v3 API change touches only dnnl_util.c. A qs_dnnl_prim bundles a primitive with the
 * memory objects of its arguments (created once without a buffer; each execution only
 * swaps data handles) and the size of its user-managed scratchpad. */
#ifndef QSYNC_CPU_DNNL_UTIL_H
#define QSYNC_CPU_DNNL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <oneapi/dnnl/dnnl.h>
#include "qsync/status.h"

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

/* Plain f32 memory descriptor with the given dims and element strides (ndims ≤ 6). */
qs_status qs_dnnl_md_strided(dnnl_memory_desc_t *md, int ndims, const int64_t *dims,
                             const int64_t *strides);
/* f32 memory descriptor by format tag (dnnl_format_tag_any allowed where primitives accept it). */
qs_status qs_dnnl_md_tag(dnnl_memory_desc_t *md, int ndims, const int64_t *dims,
                         dnnl_format_tag_t tag);
/* Bytes a descriptor spans (0 for a zero descriptor). */
size_t qs_dnnl_md_bytes(const dnnl_memory_desc_t *md);
/* True when the two descriptors describe the same layout. */
bool qs_dnnl_md_equal(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b);

/* A primitive ready to execute: args[i].arg are the argument ids given at creation, in that
 * order, followed by DNNL_ARG_SCRATCHPAD when scratch_bytes > 0. */
typedef struct qs_dnnl_prim {
    dnnl_primitive_t prim;
    dnnl_primitive_desc_t pd;   /* owned copy, for queries */
    int nargs;                  /* user arguments (scratchpad not counted) */
    dnnl_exec_arg_t args[QS_DNNL_MAX_ARGS + 1];
    size_t scratch_bytes;       /* user scratchpad the caller must pass to exec */
} qs_dnnl_prim;

/* Build a primitive from an operation descriptor (convolution, matmul, inner product, ...),
 * optional post-ops (NULL for none) and, for backward ops, the forward primitive descriptor
 * hint (NULL otherwise). The scratchpad is user-managed. arg_ids lists the nargs (≤ 8)
 * execution arguments; each gets the memory descriptor the implementation chose.
 * `what` names the operation in error messages. On failure *p is zeroed. */
qs_status qs_dnnl_prim_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, const void *op_desc,
                              const_dnnl_post_ops_t post_ops, const_dnnl_primitive_desc_t hint,
                              const int *arg_ids, int nargs, const char *what);
/* A reorder from one layout to another (arguments FROM, TO). */
qs_status qs_dnnl_reorder_create(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx,
                                 const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to);
/* The memory descriptor the primitive uses for argument `arg` (zero md if unused). */
const dnnl_memory_desc_t *qs_dnnl_prim_arg_md(const qs_dnnl_prim *p, int arg);
/* Run the primitive synchronously: handles[i] is the buffer of args[i] (NULL allowed for
 * arguments whose descriptor is zero); scratch has ≥ scratch_bytes bytes. */
qs_status qs_dnnl_prim_exec(qs_dnnl_prim *p, const qs_dnnl_ctx *ctx, void *const *handles,
                            void *scratch, const char *what);
/* Release everything (safe on a zeroed struct). */
void qs_dnnl_prim_destroy(qs_dnnl_prim *p);

/* Post-ops list holding one `sum` (dst = op(...) + dst) — used for accumulate flags.
 * Destroy with qs_dnnl_post_ops_destroy. */
qs_status qs_dnnl_post_ops_sum(dnnl_post_ops_t *out);
void qs_dnnl_post_ops_destroy(dnnl_post_ops_t po);

/* Implementation name chosen for a primitive (e.g. "jit:avx512_core"), for logs/benches. */
const char *qs_dnnl_prim_impl(const qs_dnnl_prim *p);

#endif
