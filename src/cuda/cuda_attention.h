/* src/cuda/cuda_attention.h — defines: the CUDA backend's fused multi-head attention
 * (cuda_attention.cu), the contract of core/backend.h's attention ops (qs_attention_desc).
 *
 * Forward and backward are flash-attention style: the (T, T) scores never exist in memory.
 * Tiles of 64 queries × 64 keys are multiplied on tensor cores (mma.sync m16n8k16, BF16 or FP16
 * operands, FP32 accumulation); the forward keeps a running maximum and sum per query row and
 * saves the row's log-sum-exp; the backward recomputes the probabilities from it, in two
 * kernels — one per block of keys (dK, dV), one per block of queries (dQ) — so that every
 * gradient element is written once, in a fixed order: results are bitwise reproducible.
 * Supported: dtype BF16 or F16, head width D of 32 or 64, any T ≥ 1. */
#ifndef QSYNC_CUDA_ATTENTION_H
#define QSYNC_CUDA_ATTENTION_H

#include <stdbool.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

bool qs_cuda_attention_supported(qs_backend *be, const qs_attention_desc *d);
qs_status qs_cuda_attention_forward(qs_backend *be, qs_stream *s, const qs_attention_desc *d, const qs_heads_ref *q,
                                    const qs_heads_ref *k, const qs_heads_ref *v, float *out, void *saved);
qs_status qs_cuda_attention_backward(qs_backend *be, qs_stream *s, const qs_attention_desc *d, const void *saved,
                                     const float *out, const float *dout, const qs_heads_ref *dq,
                                     const qs_heads_ref *dk, const qs_heads_ref *dv, void *workspace);

#ifdef __cplusplus
}
#endif

#endif
