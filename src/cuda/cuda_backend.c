/* src/cuda/cuda_backend.c — defines: the CUDA backend handle: construction on a device, counted
 * device memory, the (non-blocking) stream, events, copies, stream_sync with the report of errors
 * that kernels record in the device flag word, precision support, plan dispatch and the
 * qs_backend_ops table (expanded from core/backend_ops.def). Host code only (C11). */
#include "cuda/cuda_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Live allocations of alloc(): pointer → size as requested, so free() can subtract the
 * bytes from in_use. Allocations happen at set-up (parameters, activations, saved tensors),
 * a few hundred to a few thousand per model, so a flat array searched from the newest entry
 * is enough. */
struct qs_cuda_alloc_entry {
    void *p;
    size_t bytes;
};
struct qs_cuda_alloc {
    struct qs_cuda_alloc_entry *e;
    size_t count, cap;
};

/* Temporaries of single ops (reduction partials) come from the device's stream-ordered pool
 * (cudaMallocAsync); the pool keeps up to this many bytes reserved across stream syncs
 * instead of returning them to the driver at every sync. */
#define QS_CUDA_POOL_KEEP ((uint64_t)64 << 20)

static cudaStream_t cuda_stream_of(qs_cuda_backend *cb, qs_stream *s) { return s ? s->s : cb->stream.s; }

/* Wait for the stream, free every allocation still live, release the cuBLASLt / cuDNN
 * handles (cuda_gemm.c, cuda_conv_common.c), the flag word, the stream and the handle. Errors
 * are ignored: nothing can be done about them while tearing down. */
void qs_cuda_destroy(qs_backend *be) {
    if (!be) return;
    qs_cuda_backend *cb = qs_cuda_be(be);
    (void)qs_cuda_make_current(cb);
    if (cb->stream.s) (void)cudaStreamSynchronize(cb->stream.s);
    qs_cuda_gemm_release(be);
    qs_cuda_conv_release(be);
    if (cb->allocs) {
        for (size_t i = 0; i < cb->allocs->count; i++) (void)cudaFree(cb->allocs->e[i].p);
        free(cb->allocs->e);
        free(cb->allocs);
    }
    if (cb->flags) (void)cudaFree(cb->flags);
    if (cb->stream.s) (void)cudaStreamDestroy(cb->stream.s);
    qs_cuda_green_destroy(&cb->green);
    (void)cudaGetLastError(); /* leave no stale error for the next CUDA user of this thread */
    free(cb);
}

/* Zeroed device memory of `bytes` (cudaMalloc: 256-byte aligned; 0 bytes still gives a
 * distinct pointer). Zeroed on the backend's stream, which is then synchronised, so the
 * memory reads as zero from any stream or copy once alloc returns. Counted as requested. */
qs_status qs_cuda_alloc(qs_backend *be, size_t bytes, void **out) {
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "cuda alloc: out is NULL");
    *out = NULL;
    qs_cuda_backend *cb = qs_cuda_be(be);
    struct qs_cuda_alloc *t = cb->allocs;
    if (t->count == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        struct qs_cuda_alloc_entry *e = realloc(t->e, cap * sizeof *e);
        if (!e)
            return QS_FAIL(QS_ERR_OOM, "cuda alloc: out of host memory for the table of %zu device allocations",
                           t->count + 1);
        t->e = e;
        t->cap = cap;
    }
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* an out-of-memory error is not sticky: clear it for later checks */
        return QS_FAIL(err == cudaErrorMemoryAllocation ? QS_ERR_OOM : QS_ERR_BACKEND,
                       "cuda alloc: cudaMalloc of %zu bytes on cuda:%d failed: %s (%s); %zu bytes are allocated "
                       "through qsync (peak %zu)",
                       bytes, cb->device, cudaGetErrorName(err), cudaGetErrorString(err), cb->in_use, cb->peak);
    }
    err = bytes ? cudaMemsetAsync(p, 0, bytes, cb->stream.s) : cudaSuccess;
    if (err == cudaSuccess) err = cudaStreamSynchronize(cb->stream.s);
    if (err != cudaSuccess) {
        (void)cudaFree(p);
        return QS_FAIL(QS_ERR_BACKEND, "cuda alloc: zeroing %zu new bytes on cuda:%d failed: %s (%s)", bytes,
                       cb->device, cudaGetErrorName(err), cudaGetErrorString(err));
    }
    t->e[t->count].p = p;
    t->e[t->count].bytes = bytes;
    t->count++;
    cb->in_use += bytes;
    if (cb->in_use > cb->peak) cb->peak = cb->in_use;
    *out = p;
    return QS_OK;
}

/* Free a pointer from alloc() (NULL: nothing). A pointer that alloc() did not return is left
 * alone (freeing it would corrupt the accounting or memory qsync does not own). cudaFree
 * waits for the device, so work still queued on the memory completes first. */
void qs_cuda_free(qs_backend *be, void *p) {
    if (!p) return;
    qs_cuda_backend *cb = qs_cuda_be(be);
    struct qs_cuda_alloc *t = cb->allocs;
    for (size_t i = t->count; i-- > 0;) {
        if (t->e[i].p != p) continue;
        cb->in_use -= t->e[i].bytes;
        t->e[i] = t->e[t->count - 1];
        t->count--;
        (void)cudaFree(p);
        return;
    }
}

/* Events: cudaEvent_t behind the void pointer, recorded on the op's stream. */
qs_status qs_cuda_event_create(qs_backend *be, void **event) {
    (void)be;
    cudaEvent_t e;
    QS_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDefault));
    *event = (void *)e;
    return QS_OK;
}

void qs_cuda_event_destroy(qs_backend *be, void *event) {
    (void)be;
    if (event) (void)cudaEventDestroy((cudaEvent_t)event);
}

qs_status qs_cuda_event_record(qs_backend *be, qs_stream *s, void *event) {
    QS_CUDA_TRY(cudaEventRecord((cudaEvent_t)event, cuda_stream_of(qs_cuda_be(be), s)));
    return QS_OK;
}

qs_status qs_cuda_event_elapsed_ms(qs_backend *be, void *start, void *end, float *ms) {
    (void)be;
    QS_CUDA_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return QS_OK;
}

/* Bytes in use and the peak since creation (either pointer may be NULL). */
void qs_cuda_memory_stats(qs_backend *be, size_t *in_use, size_t *peak) {
    if (in_use) *in_use = qs_cuda_be(be)->in_use;
    if (peak) *peak = qs_cuda_be(be)->peak;
}

/* p[0..bytes) = 0, queued on the stream. */
qs_status qs_cuda_memset_zero(qs_backend *be, qs_stream *s, void *p, size_t bytes) {
    if (!bytes) return QS_OK;
    if (!p) return QS_FAIL(QS_ERR_INVALID_ARG, "memset_zero: NULL pointer for %zu bytes", bytes);
    QS_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, cuda_stream_of(qs_cuda_be(be), s)));
    return QS_OK;
}

/* Copies queued on the stream (regions must not overlap; dst == src is a no-op). The caller
 * synchronises before reading a copy_d2h destination or reusing a pinned copy_h2d source
 * (from pageable host memory, CUDA stages the source before returning, and a copy to
 * pageable memory returns once complete). */
static qs_status cuda_copy(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes,
                           enum cudaMemcpyKind kind, const char *what) {
    if (!bytes || dst == src) return QS_OK;
    if (!dst || !src) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL pointer for %zu bytes", what, bytes);
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, cuda_stream_of(qs_cuda_be(be), s));
    if (err != cudaSuccess)
        return QS_FAIL(QS_ERR_BACKEND, "%s of %zu bytes on cuda:%d: cudaMemcpyAsync failed: %s (%s)", what, bytes,
                       qs_cuda_be(be)->device, cudaGetErrorName(err), cudaGetErrorString(err));
    return QS_OK;
}
qs_status qs_cuda_copy_h2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cuda_copy(be, s, dst, src, bytes, cudaMemcpyHostToDevice, "copy_h2d");
}
qs_status qs_cuda_copy_d2h(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cuda_copy(be, s, dst, src, bytes, cudaMemcpyDeviceToHost, "copy_d2h");
}
qs_status qs_cuda_copy_d2d(qs_backend *be, qs_stream *s, void *dst, const void *src, size_t bytes) {
    return cuda_copy(be, s, dst, src, bytes, cudaMemcpyDeviceToDevice, "copy_d2d");
}

/* Wait for everything queued on the stream, then report what kernels recorded in the flag
 * word since the last sync (and clear it): a non-finite input to an INT8/FP8 quantize fails
 * here as QS_ERR_INVALID_ARG with "non-finite", as the CPU's quantize does at once. */
qs_status qs_cuda_stream_sync(qs_backend *be, qs_stream *s) {
    qs_cuda_backend *cb = qs_cuda_be(be);
    cudaStream_t st = cuda_stream_of(cb, s);
    unsigned int flags = 0;
    QS_CUDA_TRY(cudaMemcpyAsync(&flags, cb->flags, sizeof flags, cudaMemcpyDeviceToHost, st));
    QS_CUDA_TRY(cudaStreamSynchronize(st));
    if (flags & QS_CUDA_FLAG_NONFINITE_QUANTIZE) {
        /* stream-ordered: every kernel queued after this sees the cleared word */
        QS_CUDA_TRY(cudaMemsetAsync(cb->flags, 0, sizeof *cb->flags, st));
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "quantize to s8/fp8 on cuda:%d: non-finite amax (the tensor holds NaN or Inf; found by the "
                       "quantize kernel, reported at the next stream_sync)",
                       cb->device);
    }
    return QS_OK;
}

qs_stream *qs_cuda_default_stream(qs_backend *be) { return &qs_cuda_be(be)->stream; }

/* INT8 GEMMs: not run yet. Change this one line (to QS_PREC_NATIVE) once cuda_gemm.c and
 * cuda_conv_*.c execute S8 operands. */
#define QS_CUDA_INT8_SUPPORT QS_PREC_UNSUPPORTED

/* FP32 and FP16 run natively everywhere; TF32 and BF16 need Ampere (8.0), FP8 Ada/Hopper
 * (8.9). Nothing is emulated on the GPU. */
qs_prec_support qs_cuda_precision_support(qs_backend *be, qs_precision p) {
    const struct cudaDeviceProp *pr = &qs_cuda_be(be)->props;
    const int cc = pr->major * 10 + pr->minor;
    switch (p) {
    case QS_PREC_FP32: return QS_PREC_NATIVE;
    case QS_PREC_FP16: return QS_PREC_NATIVE;
    case QS_PREC_TF32:
    case QS_PREC_BF16: return cc >= 80 ? QS_PREC_NATIVE : QS_PREC_UNSUPPORTED;
    case QS_PREC_FP8: return cc >= 89 ? QS_PREC_NATIVE : QS_PREC_UNSUPPORTED;
    case QS_PREC_INT8: return QS_CUDA_INT8_SUPPORT;
    case QS_PREC_COUNT: break;
    }
    return QS_PREC_UNSUPPORTED;
}

/* Every plan starts with its qs_cuda_plan_kind tag; the owning module frees it. An unknown
 * tag (not a plan of this backend) is left alone. */
void qs_cuda_plan_destroy(qs_backend *be, void *plan) {
    if (!plan) return;
    qs_cuda_plan_kind kind;
    memcpy(&kind, plan, sizeof kind);
    switch (kind) {
    case QS_CUDA_PLAN_LINEAR: qs_cuda_linear_plan_destroy(be, plan); break;
    case QS_CUDA_PLAN_CONV: qs_cuda_conv_plan_destroy(be, plan); break;
    case QS_CUDA_PLAN_POOL: qs_cuda_pool_plan_destroy(be, plan); break;
    case QS_CUDA_PLAN_BMM: qs_cuda_bmm_plan_destroy(be, plan); break;
    }
}

/* The ops table: qs_cuda_<op> for every op of core/backend_ops.def. */
static const qs_backend_ops qs_cuda_ops = {
    .name = "cuda",
#define QS_OP(family, ret, op, params) .op = qs_cuda_##op,
#define QS_OP_OPTIONAL(family, ret, op, params) .op = qs_cuda_##op,
#include "core/backend_ops.def"
};

/* On failure inside qs_backend_cuda_create: record the message, then tear down. */
#define QS_CUDA_CREATE_TRY(call)                                                                       \
    do {                                                                                               \
        cudaError_t qs_cc_err_ = (call);                                                               \
        if (qs_cc_err_ != cudaSuccess) {                                                               \
            st = QS_FAIL(QS_ERR_BACKEND, "qs_backend_cuda_create(cuda:%d): %s failed: %s (%s)", device, #call, \
                         cudaGetErrorName(qs_cc_err_), cudaGetErrorString(qs_cc_err_));                \
            goto fail;                                                                                 \
        }                                                                                              \
    } while (0)

/* The name, SM count (the partition's when on one), memory and compute capability of the GPU. */
qs_status qs_backend_cuda_facts(qs_backend *be, qs_gpu_facts *out) {
    memset(out, 0, sizeof *out);
    if (!be || strcmp(be->ops->name, "cuda") != 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "GPU facts asked of the %s backend", be ? be->ops->name : "(no)");
    const qs_cuda_backend *cb = qs_cuda_be(be);
    snprintf(out->name, sizeof out->name, "%s", cb->props.name);
    out->sms = cb->green.green ? cb->green.sm_count : cb->props.multiProcessorCount;
    out->memory_bytes = cb->props.totalGlobalMem;
    out->cc_major = cb->props.major;
    out->cc_minor = cb->props.minor;
    return QS_OK;
}

/* Select `device` for this host thread (every later call of the backend must come from a
 * thread with this device current: one device per process), read its properties, create the
 * non-blocking stream and the zeroed flag word. The cuBLASLt and cuDNN handles (lt, dnn) are
 * created on first use by cuda_gemm.c / cuda_conv_common.c. */
qs_status qs_backend_cuda_create(int device, qs_backend **out) {
    if (!out) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_backend_cuda_create: out is NULL");
    *out = NULL;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return QS_FAIL(QS_ERR_BACKEND,
                       "cuda:%d asked, but CUDA finds no usable device: cudaGetDeviceCount failed: %s (%s); check the "
                       "NVIDIA driver and CUDA_VISIBLE_DEVICES",
                       device, cudaGetErrorName(err), cudaGetErrorString(err));
    }
    if (device < 0 || device >= count)
        return QS_FAIL(QS_ERR_BACKEND, "cuda:%d: no such device (this process sees %d CUDA device%s, numbered from 0)",
                       device, count, count == 1 ? "" : "s");

    qs_status st = QS_OK;
    qs_cuda_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return QS_FAIL(QS_ERR_OOM, "qs_backend_cuda_create: out of host memory for the backend handle");
    cb->allocs = calloc(1, sizeof *cb->allocs);
    if (!cb->allocs) {
        free(cb);
        return QS_FAIL(QS_ERR_OOM, "qs_backend_cuda_create: out of host memory for the allocation table");
    }
    cb->base.ops = &qs_cuda_ops;
    cb->base.num_threads = 0;
    /* FP8 products read the layers' transposed copies (core/backend.h); QS_CUDA_FP8_TRANSPOSED=0
     * makes every product transpose its operands itself (same results: tests and benchmarks
     * compare the two) */
    const char *tr = getenv("QS_CUDA_FP8_TRANSPOSED");
    cb->base.fp8_wants_transposed = !(tr && strcmp(tr, "0") == 0);
    /* pointwise convolutions run as Linears (layers/conv2d.c); QS_CUDA_POINTWISE_LINEAR=0 keeps
     * them on cuDNN (for comparisons) */
    const char *pl = getenv("QS_CUDA_POINTWISE_LINEAR");
    cb->base.pointwise_conv_as_linear = !(pl && strcmp(pl, "0") == 0);
    /* attention runs fused where it can; QS_CUDA_FUSED_ATTENTION=0 runs its separate nodes
     * (for comparisons: tests and benchmarks) */
    const char *fa = getenv("QS_CUDA_FUSED_ATTENTION");
    cb->base.fused_attention = !(fa && strcmp(fa, "0") == 0);
    cb->device = device;
    cb->lt = NULL;
    cb->dnn = NULL;
    QS_CUDA_CREATE_TRY(cudaSetDevice(device));
    QS_CUDA_CREATE_TRY(cudaGetDeviceProperties(&cb->props, device));
    const char *part = getenv(QS_CUDA_SM_PARTITION_ENV);
    if (part && part[0]) { /* before the stream: it belongs to the context current when made */
        int sm_first = 0, sm_n = 0;
        st = qs_cuda_green_parse(part, &sm_first, &sm_n);
        if (st == QS_OK) st = qs_cuda_green_enter(device, sm_first, sm_n, &cb->green);
        if (st != QS_OK) goto fail;
    }
    QS_CUDA_CREATE_TRY(cudaStreamCreateWithFlags(&cb->stream.s, cudaStreamNonBlocking));
    QS_CUDA_CREATE_TRY(cudaMalloc((void **)&cb->flags, sizeof *cb->flags));
    QS_CUDA_CREATE_TRY(cudaMemsetAsync(cb->flags, 0, sizeof *cb->flags, cb->stream.s));
    QS_CUDA_CREATE_TRY(cudaStreamSynchronize(cb->stream.s));
    {   /* keep the op temporaries' pool warm across syncs (best effort: pools are an optimisation) */
        cudaMemPool_t pool;
        if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
            uint64_t keep = QS_CUDA_POOL_KEEP;
            (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
        }
        (void)cudaGetLastError();
    }
    *out = &cb->base;
    return QS_OK;

fail:
    if (cb->flags) (void)cudaFree(cb->flags);
    if (cb->stream.s) (void)cudaStreamDestroy(cb->stream.s);
    qs_cuda_green_destroy(&cb->green);
    (void)cudaGetLastError();
    free(cb->allocs);
    free(cb);
    return st;
}
