/* src/cpu/cpu_backend.h — defines: the prototypes of the CPU backend's ops, qs_cpu_<op> for every
 * non-optional op of core/backend_ops.def (expanded from the list; contracts there), each
 * defined in cpu_<family>.c, and what op files export to the dispatcher (cpu_backend.c) and to
 * one another. What they all share: cpu_common.h. */
#ifndef QSYNC_CPU_CPU_BACKEND_H
#define QSYNC_CPU_CPU_BACKEND_H

#include "cpu/cpu_common.h"
#include "cpu/cpu_open.h"

/* The CPU runs synchronously and has no optional op (events, capture, fused attention): those
 * slots of its table are NULL (cpu_backend.c). */
#define QS_OP(family, ret, op, params) ret qs_cpu_##op params;
#define QS_OP_OPTIONAL(family, ret, op, params)
#include "core/backend_ops.def"

/* ---- cpu_linear.c, cpu_conv_plan.c, cpu_bmm.c, cpu_pool.c: plan destroyers (plan_destroy
 * dispatches on the plan kind) and the oneDNN implementation name of a plan's primitive per
 * direction (dir 0 forward, 1 backward-data / backward_a, 2 backward-weights / backward_b; for
 * logs and benchmarks) ---- */
void qs_cpu_linear_plan_destroy(void *plan);
const char *qs_cpu_linear_impl_name(const void *plan, int dir);
void qs_cpu_conv_plan_destroy(void *plan);
const char *qs_cpu_conv_impl_name(const void *plan, int dir);
void qs_cpu_bmm_plan_destroy(void *plan);
const char *qs_cpu_bmm_impl_name(const void *plan, int dir);
void qs_cpu_pool_plan_destroy(void *plan);

/* ---- cpu_quant.c ---- */
/* An FP32 view of a (rows, cols) operand for emulated precisions: the operand's own data
 * when it is F32, else dequantized into dst (rows·cols floats) — *out says which. */
qs_status qs_cpu_widen(qs_backend *be, int64_t rows, int64_t cols, const qs_operand *op, float **out, float *dst);

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

#endif
