/* src/cpu/cpu_backend.c — the CPU backend handle: construction, host memory, the
 * synchronous stream, plan dispatch and the qs_backend_ops table. */
#include "cpu/cpu_backend.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "qsync/tensor.h"

qs_status qs_cpu_plan_check(const void *plan, qs_cpu_plan_kind kind, const char *what) {
    if (!plan) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: plan is NULL; create it with the matching *_plan call", what);
    const qs_cpu_plan *h = plan;
    if (h->kind != kind)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan passed is of another operator kind; pass the plan made for it",
                       what);
    return QS_OK;
}

qs_status qs_cpu_prec_check(qs_backend *be, qs_precision prec, const char *what) {
    if (qs_cpu_precision_support(be, prec) != QS_PREC_UNSUPPORTED) return QS_OK;
    const char *name = ((unsigned)prec < QS_PREC_COUNT) ? qs_precision_name(prec) : "unknown";
    return QS_FAIL(QS_ERR_UNSUPPORTED,
                   "%s: precision %s is not available on the CPU backend (fp32, bf16, int8 run natively or "
                   "emulated, fp16 and fp8 emulated; tf32 exists only on GPUs); assign another precision",
                   what, name);
}

qs_status qs_cpu_args_check(const char *what, int64_t n, int nptrs, const void *const *ptrs) {
    if (n < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative element count %lld", what, (long long)n);
    if (n == 0) return QS_OK;
    for (int i = 0; i < nptrs; i++)
        if (!ptrs[i])
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s: pointer argument %d is NULL for %lld elements; pass a buffer", what,
                           i + 1, (long long)n);
    return QS_OK;
}

static void cpu_destroy(qs_backend *be) {
    if (!be) return;
    qs_cpu_backend *cb = qs_cpu_be(be);
    qs_dnnl_ctx_destroy(&cb->dnnl);
    free(cb->scratch);
    free(cb);
}

/* Zeroed, 64-byte aligned host memory. A 64-byte header before the block records its size,
 * so the backend can account the bytes in use (memory_stats) exactly. */
#define QS_CPU_ALLOC_HEADER 64
static qs_status cpu_alloc(qs_backend *be, size_t bytes, void **out) {
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

static void cpu_free(qs_backend *be, void *p) {
    if (!p) return;
    char *h = (char *)p - QS_CPU_ALLOC_HEADER;
    size_t bytes;
    memcpy(&bytes, h, sizeof bytes);
    qs_cpu_be(be)->bytes_in_use -= bytes;
    qs_host_free(h);
}

static void cpu_memory_stats(qs_backend *be, size_t *in_use, size_t *peak) {
    if (in_use) *in_use = qs_cpu_be(be)->bytes_in_use;
    if (peak) *peak = qs_cpu_be(be)->peak_bytes;
}

static qs_status cpu_memset_zero(qs_backend *be, qs_stream *s, void *p, size_t bytes) {
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
static qs_status cpu_copy_h2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cpu_copy("copy_h2d", dst, src, bytes);
}
static qs_status cpu_copy_d2h(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cpu_copy("copy_d2h", dst, src, bytes);
}
static qs_status cpu_copy_d2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cpu_copy("copy_d2d", dst, src, bytes);
}

/* Every CPU op completes before returning, so there is nothing to wait for. */
static qs_status cpu_stream_sync(qs_backend *be, qs_stream *s) { return QS_OK; }

static qs_stream *cpu_default_stream(qs_backend *be) { return (qs_stream *)&qs_cpu_be(be)->stream; }

static void cpu_plan_destroy(qs_backend *be, void *plan) {
    if (!plan) return;
    switch (((qs_cpu_plan *)plan)->kind) {
    case QS_CPU_PLAN_LINEAR: qs_cpu_linear_plan_destroy(plan); break;
    case QS_CPU_PLAN_CONV: qs_cpu_conv_plan_destroy(plan); break;
    case QS_CPU_PLAN_POOL: qs_cpu_pool_plan_destroy(plan); break;
    case QS_CPU_PLAN_BMM: qs_cpu_bmm_plan_destroy(plan); break;
    }
}

static const qs_backend_ops qs_cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memory_stats = cpu_memory_stats,
    .memset_zero = cpu_memset_zero,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .copy_d2d = cpu_copy_d2d,
    .stream_sync = cpu_stream_sync,
    .default_stream = cpu_default_stream,
    .linear_plan = qs_cpu_linear_plan,
    .linear_forward = qs_cpu_linear_forward,
    .linear_backward_data = qs_cpu_linear_backward_data,
    .linear_backward_weights = qs_cpu_linear_backward_weights,
    .conv_plan = qs_cpu_conv_plan,
    .conv_forward = qs_cpu_conv_forward,
    .conv_backward_data = qs_cpu_conv_backward_data,
    .conv_backward_weights = qs_cpu_conv_backward_weights,
    .pool_plan = qs_cpu_pool_plan,
    .pool_forward = qs_cpu_pool_forward,
    .pool_backward = qs_cpu_pool_backward,
    .plan_destroy = cpu_plan_destroy,
    .bmm_plan = qs_cpu_bmm_plan,
    .bmm_forward = qs_cpu_bmm_forward,
    .bmm_backward_a = qs_cpu_bmm_backward_a,
    .bmm_backward_b = qs_cpu_bmm_backward_b,
    .precision_support = qs_cpu_precision_support,
    .quantize = qs_cpu_quantize,
    .dequantize = qs_cpu_dequantize,
    .column_sums = qs_cpu_column_sums,
    .argmax_rows = qs_cpu_argmax_rows,
    .batchnorm_forward_train = qs_cpu_batchnorm_forward_train,
    .batchnorm_forward_eval = qs_cpu_batchnorm_forward_eval,
    .batchnorm_backward = qs_cpu_batchnorm_backward,
    .relu_forward = qs_cpu_relu_forward,
    .relu_backward = qs_cpu_relu_backward,
    .add_forward = qs_cpu_add_forward,
    .accumulate = qs_cpu_accumulate,
    .dropout_forward = qs_cpu_dropout_forward,
    .dropout_backward = qs_cpu_dropout_backward,
    .softmax_xent_forward = qs_cpu_softmax_xent_forward,
    .softmax_xent_backward = qs_cpu_softmax_xent_backward,
    .layernorm_forward = qs_cpu_layernorm_forward,
    .layernorm_backward = qs_cpu_layernorm_backward,
    .gelu_forward = qs_cpu_gelu_forward,
    .gelu_backward = qs_cpu_gelu_backward,
    .embedding_forward = qs_cpu_embedding_forward,
    .embedding_backward = qs_cpu_embedding_backward,
    .add_broadcast = qs_cpu_add_broadcast,
    .permute_heads = qs_cpu_permute_heads,
    .softmax_forward = qs_cpu_softmax_forward,
    .softmax_backward = qs_cpu_softmax_backward,
    .tanh_forward = qs_cpu_tanh_forward,
    .tanh_backward = qs_cpu_tanh_backward,
    .nhwc_to_nchw = qs_cpu_nhwc_to_nchw,
    .nchw_to_nhwc = qs_cpu_nchw_to_nhwc,
    .cast = qs_cpu_cast,
    .sgd_step = qs_cpu_sgd_step,
    .adamw_step = qs_cpu_adamw_step,
    .sum_squares = qs_cpu_sum_squares,
    .scale = qs_cpu_scale,
};

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
    if (st == QS_OK) st = qs_cpu_probe_precisions(cb);
    if (st != QS_OK) {
        qs_dnnl_ctx_destroy(&cb->dnnl);
        free(cb);
        return qs_error_wrap(st, "qs_backend_cpu_create: ");
    }
    *out = &cb->base;
    return QS_OK;
}
