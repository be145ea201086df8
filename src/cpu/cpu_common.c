/* src/cpu/cpu_common.c — defines: the helpers every src/cpu op file shares (cpu_common.h):
 * plan, precision, argument and operand checks, the grow-only scratch, the FP32 epilogue of
 * low-precision GEMMs, the int8 transpose and the copy-or-add loop. */
#include "cpu/cpu_common.h"

#include <stdlib.h>

/* QS_ERR_INVALID_ARG unless plan is a plan of kind `kind`. */
qs_status qs_cpu_plan_check(const void *plan, qs_cpu_plan_kind kind, const char *what) {
    if (!plan) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: plan is NULL; create it with the matching *_plan call", what);
    const qs_cpu_plan *h = plan;
    if (h->kind != kind)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: the plan passed is of another operator kind; pass the plan made for it",
                       what);
    return QS_OK;
}

/* QS_ERR_UNSUPPORTED naming the op unless the backend runs prec. */
qs_status qs_cpu_prec_check(qs_backend *be, qs_precision prec, const char *what) {
    if (qs_cpu_prec_of(be, prec) != QS_PREC_UNSUPPORTED) return QS_OK;
    const char *name = ((unsigned)prec < QS_PREC_COUNT) ? qs_precision_name(prec) : "unknown";
    return QS_FAIL(QS_ERR_UNSUPPORTED,
                   "%s: precision %s is not available on the CPU backend (fp32, bf16, int8 run natively or "
                   "emulated, fp16 and fp8 emulated; tf32 exists only on GPUs); assign another precision",
                   what, name);
}

/* n >= 0 and no NULL among the nptrs pointers when n > 0. */
qs_status qs_cpu_args_check(const char *what, int64_t n, int nptrs, const void *const *ptrs) {
    if (n < 0) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative element count %lld", what, (long long)n);
    if (n == 0) return QS_OK;
    for (int i = 0; i < nptrs; i++)
        if (!ptrs[i])
            return QS_FAIL(QS_ERR_INVALID_ARG, "%s: pointer argument %d is NULL for %lld elements; pass a buffer", what,
                           i + 1, (long long)n);
    return QS_OK;
}

/* The operand's dtype, scale and per_row against the plan's (cpu_common.h). */
qs_status qs_cpu_operand_check(const qs_operand *op, qs_dtype expect, bool allow_per_row, const char *what) {
    if (!op || !op->data) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: NULL operand", what);
    if (op->dt != expect)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: operand is %s but the plan's precision stores %s", what,
                       qs_dtype_name(op->dt), qs_dtype_name(expect));
    bool scaled = qs_cpu_dtype_scaled(expect);
    if (scaled && !op->scale) return QS_FAIL(QS_ERR_INVALID_ARG, "%s: %s operand without a scale", what, qs_dtype_name(expect));
    if (op->per_row && !(scaled && allow_per_row))
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "%s: per-row scales are not allowed for this operand (fold them into the gradient)", what);
    return QS_OK;
}

/* scale[0] of a scaled dtype, else 1. */
float qs_cpu_operand_tensor_scale(const qs_operand *op) {
    return qs_cpu_dtype_scaled(op->dt) ? op->scale[0] : 1.0f;
}

/* out (rows, cols) (+)= acc·alpha·col_scale + bias, row-parallel. */
void qs_cpu_epilogue(int64_t rows, int64_t cols, const float *acc, float alpha, const float *col_scale,
                     const float *bias, float *out, bool accumulate) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *a = acc + r * cols;
        float *o = out + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            float v = a[c] * (col_scale ? alpha * col_scale[c] : alpha) + (bias ? bias[c] : 0.0f);
            o[c] = accumulate ? o[c] + v : v;
        }
    }
}

/* The backend's scratch, grown (never shrunk) to at least `bytes`. */
qs_status qs_cpu_scratch(qs_cpu_backend *cb, size_t bytes, void **out) {
    if (bytes > cb->scratch_bytes) {
        free(cb->scratch);
        cb->scratch = NULL;
        cb->scratch_bytes = 0;
        size_t sz = qs_cpu_align(bytes);
        cb->scratch = aligned_alloc(64, sz);
        if (!cb->scratch) return QS_FAIL(QS_ERR_OOM, "CPU backend: out of memory for %zu bytes of scratch", sz);
        cb->scratch_bytes = sz;
    }
    *out = cb->scratch;
    return QS_OK;
}

/* dst = src or dst += src (n floats; nothing when copying onto itself). */
void qs_cpu_copy_or_add(int64_t n, const float *src, float *dst, bool accumulate) {
    if (accumulate) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    } else if (src != dst) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dst[i] = src[i];
    }
}

/* dst (cols, rows) = srcᵀ for int8 (rows, cols), in 64×64 tiles. */
void qs_cpu_transpose_s8(int64_t rows, int64_t cols, const void *src, void *dst) {
    const int8_t *a = src;
    int8_t *t = dst;
    enum { TB = 64 };
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += TB)
        for (int64_t c0 = 0; c0 < cols; c0 += TB)
            for (int64_t c = c0; c < c0 + TB && c < cols; c++)
                for (int64_t r = r0; r < r0 + TB && r < rows; r++) t[c * rows + r] = a[r * cols + c];
}
