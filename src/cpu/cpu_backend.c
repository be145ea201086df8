/* src/cpu/cpu_backend.c — defines: the CPU backend handle: construction (with the probe of its
 * precision support), host memory, the synchronous stream, plan dispatch and the qs_backend_ops
 * table, expanded from core/backend_ops.def. */
#include "cpu/cpu_backend.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "qsync/tensor.h"

/* Free the oneDNN context, the scratch and the handle (NULL: nothing). */
void qs_cpu_destroy(qs_backend *be) {
    if (!be) return;
    qs_cpu_backend *cb = qs_cpu_be(be);
    qs_dnnl_ctx_destroy(&cb->dnnl);
    free(cb->scratch);
    free(cb);
}

/* Zeroed, 64-byte aligned host memory. A 64-byte header before the block records its size,
 * so the backend can account the bytes in use (memory_stats) exactly. */
#define QS_CPU_ALLOC_HEADER 64
qs_status qs_cpu_alloc(qs_backend *be, size_t bytes, void **out) {
    char *p = qs_host_alloc(bytes + QS_CPU_ALLOC_HEADER);
    if (!p) {
        *out = NULL;
        return qs_error_wrap(QS_ERR_OOM, "cpu backend alloc: ");
    }
    memcpy(p, &bytes, sizeof bytes);
    qs_cpu_backend *cb = qs_cpu_be(be);
    cb->bytes_in_use += bytes;
    if (cb->bytes_in_use > cb->peak_bytes) cb->peak_bytes = cb->bytes_in_use;
    *out = p + QS_CPU_ALLOC_HEADER;
    return QS_OK;
}

/* Free a block of qs_cpu_alloc (NULL: nothing), subtracting its bytes from the count. */
void qs_cpu_free(qs_backend *be, void *p) {
    if (!p) return;
    char *h = (char *)p - QS_CPU_ALLOC_HEADER;
    size_t bytes;
    memcpy(&bytes, h, sizeof bytes);
    qs_cpu_be(be)->bytes_in_use -= bytes;
    qs_host_free(h);
}

/* Bytes in use and the peak since creation (either pointer may be NULL). */
void qs_cpu_memory_stats(qs_backend *be, size_t *in_use, size_t *peak) {
    if (in_use) *in_use = qs_cpu_be(be)->bytes_in_use;
    if (peak) *peak = qs_cpu_be(be)->peak_bytes;
}

/* p[0..bytes) = 0, at once. */
qs_status qs_cpu_memset_zero(qs_backend *be, qs_stream *s, void *p, size_t bytes) {
    if (bytes && !p) return QS_FAIL(QS_ERR_INVALID_ARG, "memset_zero: NULL pointer for %zu bytes", bytes);
    if (bytes) memset(p, 0, bytes);
    return QS_OK;
}

/* Host "device" copies: all three directions are a memcpy (regions must not overlap). */
static qs_status cpu_copy(const char *what, void *dst, const void *src, size_t bytes) {
    if (bytes && (!dst || !src)) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL pointer for %zu bytes", what, bytes);
    if (bytes && dst != src) memcpy(dst, src, bytes);
    return QS_OK;
}
/* The three copy directions: a memcpy each. */
qs_status qs_cpu_copy_h2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cpu_copy("copy_h2d", dst, src, bytes);
}
qs_status qs_cpu_copy_d2h(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cpu_copy("copy_d2h", dst, src, bytes);
}
qs_status qs_cpu_copy_d2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cpu_copy("copy_d2d", dst, src, bytes);
}

/* Every CPU op completes before returning, so there is nothing to wait for. */
qs_status qs_cpu_stream_sync(qs_backend *be, qs_stream *s) { return QS_OK; }

qs_stream *qs_cpu_default_stream(qs_backend *be) { return (qs_stream *)&qs_cpu_be(be)->stream; }

/* Free a plan by its kind tag (NULL: nothing). */
void qs_cpu_plan_destroy(qs_backend *be, void *plan) {
    if (!plan) return;
    switch (((qs_cpu_plan *)plan)->kind) {
    case QS_CPU_PLAN_LINEAR: qs_cpu_linear_plan_destroy(plan); break;
    case QS_CPU_PLAN_CONV: qs_cpu_conv_plan_destroy(plan); break;
    case QS_CPU_PLAN_POOL: qs_cpu_pool_plan_destroy(plan); break;
    case QS_CPU_PLAN_BMM: qs_cpu_bmm_plan_destroy(plan); break;
    }
}

/* The probed table (qs_cpu_prec_of). */
qs_prec_support qs_cpu_precision_support(qs_backend *be, qs_precision p) { return qs_cpu_prec_of(be, p); }

/* A precision runs natively when oneDNN builds a matmul for its operand types with an
 * optimized (non-reference) implementation on this CPU — for INT8 also exact int32
 * accumulation (VNNI or AMX) — otherwise it is emulated. */
static qs_status cpu_probe_precisions(qs_cpu_backend *cb) {
    qs_prec_support *t = cb->prec_support;
    for (int p = 0; p < QS_PREC_COUNT; p++) t[p] = QS_PREC_UNSUPPORTED;
    t[QS_PREC_FP32] = QS_PREC_NATIVE;
    t[QS_PREC_FP16] = QS_PREC_EMULATED; /* oneDNN 2.6 has no f16 matmul/convolution */
    t[QS_PREC_FP8] = QS_PREC_EMULATED;  /* no FP8 arithmetic on CPUs */
    const qs_dtype probe[2] = {QS_BF16, QS_S8};
    const qs_precision prec[2] = {QS_PREC_BF16, QS_PREC_INT8};
    for (int i = 0; i < 2; i++) {
        bool fast = false;
        QS_TRY(qs_dnnl_matmul_probe(&cb->dnnl, probe[i], &fast));
        /* without VNNI/AMX, oneDNN 2.6's s8 kernels saturate intermediate u8·s8 pair sums
         * (inexact: qs_dnnl_int8_exact): INT8 is then emulated */
        if (prec[i] == QS_PREC_INT8 && !qs_dnnl_int8_exact()) fast = false;
        t[prec[i]] = fast ? QS_PREC_NATIVE : QS_PREC_EMULATED;
    }
    return QS_OK;
}

/* The ops table: qs_cpu_<op> for every op; the optional ones (events, capture, fused
 * attention) are NULL, callers test for them. */
static const qs_backend_ops qs_cpu_ops = {
    .name = "cpu",
#define QS_OP(family, ret, op, params) .op = qs_cpu_##op,
#define QS_OP_OPTIONAL(family, ret, op, params) .op = NULL,
#include "core/backend_ops.def"
};

/* The handle, its oneDNN context and probed precision table, the ops table; num_threads > 0 sets
 * OpenMP's thread count. */
qs_status qs_backend_cpu_create(int num_threads, qs_backend **out) {
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_backend_cpu_create: out is NULL");
    *out = NULL;
    if (num_threads < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_backend_cpu_create: num_threads = %d; use 0 (OpenMP default) or more",
                       num_threads);
    qs_cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return QS_FAIL(QS_ERR_OOM, "qs_backend_cpu_create: out of memory for the backend handle");
    if (num_threads > 0) omp_set_num_threads(num_threads);
    cb->base.ops = &qs_cpu_ops;
    cb->base.num_threads = num_threads;
    cb->stream.be = cb;
    qs_status st = qs_dnnl_ctx_create(&cb->dnnl);
    if (st == QS_OK) st = cpu_probe_precisions(cb);
    if (st != QS_OK) {
        qs_dnnl_ctx_destroy(&cb->dnnl);
        free(cb);
        return qs_error_wrap(st, "qs_backend_cpu_create: ");
    }
    *out = &cb->base;
    return QS_OK;
}
