/* src/plan/rounding_mse.h — defines: the mean squared rounding error that one precision's
 * quantizer makes on a tensor (the σ² of the indicator, docs/INDICATOR.md). */
#ifndef QSYNC_PLAN_ROUNDING_MSE_H
#define QSYNC_PLAN_ROUNDING_MSE_H

#include <stdint.h>

#include "core/quant_sr.h"
#include "graph/precision.h"
#include "qsync/status.h"

/* Host buffers reused across calls (zero-initialise; release with qs_rounding_scratch_free). */
typedef struct qs_rounding_scratch {
    int64_t cap;
    float *y; /* the dequantized copy */
    void *q;           /* 2 bytes per element: bf16/fp16 codes, int8/fp8 codes */
} qs_rounding_scratch;

void qs_rounding_scratch_free(qs_rounding_scratch *s);

/* *mse = mean over elements of (dequantize(quantize(x)) − x)² for precision p on x[0..n):
 * the forward rounding (RNE) when sr is NULL, the gradient rounding (stochastic, drawn with sr)
 * otherwise. INT8 uses the per-tensor scale amax/127, FP8 (E4M3 forward, E5M2 gradients) the
 * per-tensor scale from amax, FP16 gradients the power of two that puts amax in [2^14, 2^15);
 * BF16 and TF32 need no scale. amax must be max|x| over the n elements (the caller has it).
 * FP32 and n == 0 give 0. */
qs_status qs_rounding_mse(qs_precision p, const qs_sr *sr, const float *x, int64_t n, double amax,
                          qs_rounding_scratch *s, double *mse);

#endif
