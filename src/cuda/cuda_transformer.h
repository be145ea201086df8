/* src/cuda/cuda_transformer.h — defines: the CUDA backend's transformer operators that are not
 * GEMMs (cuda_transformer.cu; the batched matmul is in cuda_linear.c): layer norm, GELU (tanh
 * approximation), tanh, embedding lookup and its deterministic gradient, the broadcast add of
 * position embeddings, the attention-head permutes, and the masked softmax with its backward.
 *
 * Contracts are those of src/core/backend.h (qs_backend_ops), kept asynchronously: every op is
 * queued on the stream (NULL: the backend's default stream) and returns at once; argument errors
 * (negative sizes, NULL pointers where elements are to be touched) are reported at once, launch
 * errors as QS_ERR_BACKEND. All tensors are FP32, row-major, in device memory; "rows × C" means C
 * innermost. Ops that need temporaries (layer-norm parameter gradients, embedding gradients)
 * take them from the stream-ordered pool (cudaMallocAsync) and free them stream-ordered. Every
 * reduction has a fixed order that depends only on the shapes: results are bitwise reproducible
 * from run to run (no floating-point atomics anywhere). */
#ifndef QSYNC_CUDA_TRANSFORMER_H
#define QSYNC_CUDA_TRANSFORMER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x, y (rows, C); gamma, beta (C) (NULL: 1 / 0); save_mean, save_rstd (rows). Per row, in double:
 * mean, then the biased variance around it (two passes); rstd = 1/sqrt(var + eps) rounded once
 * to float; y = (x − mean)·rstd·gamma + beta in float. One warp per row. */
qs_status qs_cuda_layernorm_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                    const float *gamma, const float *beta, float eps, float *y, float *save_mean,
                                    float *save_rstd);
/* x, dy, dx (rows, C); gamma (C) (NULL: 1); save_mean, save_rstd (rows) from the forward.
 * dx (NULL: not needed) = rstd·(g − mean_C(g) − x̂·mean_C(g·x̂)), g = dy·gamma, x̂ = (x − mean)·rstd,
 * overwritten or accumulated; one warp per row, the row means in double. dgamma = Σ_rows dy·x̂,
 * dbeta = Σ_rows dy (C each; NULL: not needed; overwritten): blocks of 32 channels × 8 row lanes
 * sum fixed row chunks in double into partials, which a second kernel adds in chunk order. */
qs_status qs_cuda_layernorm_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, const float *x,
                                     const float *dy, const float *gamma, const float *save_mean,
                                     const float *save_rstd, float *dx, bool accumulate, float *dgamma, float *dbeta);

/* y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) over n elements (y may alias x), computed in
 * the equivalent logistic form x·σ(2z) (no cancellation where x ≪ 0; see the .cu). */
qs_status qs_cuda_gelu_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
/* dx (=, or += with accumulate) dy·GELU'(x), x the forward's input (n elements). */
qs_status qs_cuda_gelu_backward(qs_backend *be, qs_stream *s, int64_t n, const float *x, const float *dy, float *dx,
                                bool accumulate);
/* y = tanh(x) over n elements (y may alias x). */
qs_status qs_cuda_tanh_forward(qs_backend *be, qs_stream *s, int64_t n, const float *x, float *y);
/* dx (=, or +=) dy·(1 − y²), y the forward's output (n elements). */
qs_status qs_cuda_tanh_backward(qs_backend *be, qs_stream *s, int64_t n, const float *y, const float *dy, float *dx,
                                bool accumulate);

/* y (rows, C) row r = table (V, C) row ids[r]; ids (rows) are FP32 token ids. An id that is not
 * in [0, V) (negative, too large, NaN) gives a zero row: a GPU cannot fail mid-stream, and the
 * loaders check ids. A fractional id is truncated towards zero (loaders never produce one). */
qs_status qs_cuda_embedding_forward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                    const float *ids, const float *table, float *y);
/* dtable (V, C) row v (+)= Σ_{r: ids[r] = v} dy[r, :], the sum taken in increasing r in double
 * and rounded once, then stored (or added to the old value with accumulate); overwrite zeroes the
 * whole table first. Rows whose id is outside [0, V) are ignored. Deterministic without atomics:
 * the rows are sorted by id with a stable radix sort (CUB; row order kept within an id), then one
 * warp per (id, 32 channels) walks that id's rows in order. Cost: the sort (O(rows): a few
 * passes over 8 bytes a row, on the bits that V needs) plus one read of dy and one write (or
 * read-modify-write) of every touched table row, plus the zeroing of the whole table when
 * overwriting; the time of the slowest warp grows with the count of the most frequent id (its
 * rows are summed sequentially, 32 channels a warp). rows ≤ 2^31 − 1. Needs 16·rows bytes plus
 * CUB's temporary storage from the pool. */
qs_status qs_cuda_embedding_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t C, int64_t V,
                                     const float *ids, const float *dy, float *dtable, bool accumulate);

/* y[o·inner + i] = x[o·inner + i] + v[i] for o < outer, i < inner (y may alias x). */
qs_status qs_cuda_add_broadcast(qs_backend *be, qs_stream *s, int64_t outer, int64_t inner, const float *x,
                                const float *v, float *y);

/* to_heads: dst (N,H,T,D)[n,h,t,d] (=, or +=) src[(n·T + t)·ld + off + h·D + d];
 * !to_heads: dst[(n·T + t)·ld + off + h·D + d] (=, or +=) src (N,H,T,D)[n,h,t,d], only that
 * slice of dst touched. ld ≥ off + H·D. src and dst must not overlap. */
qs_status qs_cuda_permute_heads(qs_backend *be, qs_stream *s, int64_t N, int64_t T, int64_t H, int64_t D, int64_t ld,
                                int64_t off, const float *src, float *dst, bool to_heads, bool accumulate);

/* y (N,H,Tq,Tk) = softmax over the last axis of x, FP32, one warp per row (n, h, i): key j is
 * masked when causal and j > i, or when key_ids (N,Tk; may be NULL) holds pad_id at [n, j];
 * masked entries are 0, a row whose keys are all masked is all 0. The row maximum over the
 * unmasked keys is subtracted before expf, the exponentials are summed in double and multiplied
 * by the FP32 reciprocal of the sum; a NaN among the unmasked keys makes them all NaN. */
qs_status qs_cuda_softmax_forward(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t Tq, int64_t Tk,
                                  const float *x, float *y, bool causal, const float *key_ids, float pad_id);
/* dx (rows, cols) (=, or +=) y ⊙ (dy − Σ_j dy·y) per row; one warp per row, the dot product in
 * double (lane partials in column order, then a fixed butterfly), rounded once. */
qs_status qs_cuda_softmax_backward(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *y,
                                   const float *dy, float *dx, bool accumulate);

#ifdef __cplusplus
}
#endif
#endif
