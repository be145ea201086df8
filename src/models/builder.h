/* src/models/builder.h — defines: qs_mbuild, a model under construction with a sticky status,
 * and one helper per layer kind. After the first failure every helper does nothing and returns
 * -1, so architecture code reads as a plain list of layers and checks b->st once at the end.
 * Helpers take the input node index and a printf-style node name (the PyTorch module path), and
 * return the new node's index. Internal to src/models/. */
#ifndef QSYNC_MODELS_BUILDER_H
#define QSYNC_MODELS_BUILDER_H

#include <stdint.h>
#include "graph/graph.h"
#include "models/models.h"

typedef struct qs_mbuild {
    qs_model *m;
    qs_status st;      /* first failure; QS_OK while building */
} qs_mbuild;

#define QS_MB_PRINTF(fmt_idx) __attribute__((format(printf, fmt_idx, fmt_idx + 1)))

/* Create the model for `arch` and `o`'s input; returns the INPUT node's index (0). */
int qs_mb_begin(qs_mbuild *b, const char *arch, const qs_model_options *o);
/* Append the SOFTMAX_XENT node "loss" on `logits`, finalize and check that the logits are
 * (N, classes). Returns b->st; on failure the model is freed and b->m is NULL. */
qs_status qs_mb_finish(qs_mbuild *b, int logits);

/* Linear with bias. */
int qs_mb_linear(qs_mbuild *b, int x, int64_t out_features, const char *fmt, ...) QS_MB_PRINTF(4);
/* Square Conv2d: kernel k, stride s, padding p on both sides. */
int qs_mb_conv(qs_mbuild *b, int x, int64_t out_channels, int64_t k, int64_t s, int64_t p,
               bool bias, const char *fmt, ...) QS_MB_PRINTF(8);
/* BatchNorm2d with PyTorch's eps 1e-5 and momentum 0.1. */
int qs_mb_bn(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
int qs_mb_relu(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
/* Max-pool, square window k, stride s, padding p (padding never wins the max). */
int qs_mb_maxpool(qs_mbuild *b, int x, int64_t k, int64_t s, int64_t p, const char *fmt, ...)
    QS_MB_PRINTF(6);
/* Global average pool (PyTorch AdaptiveAvgPool2d(1)). */
int qs_mb_gap(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
/* Flatten to (N, C·H·W) in PyTorch order; returns x itself when it is already 2-D. */
int qs_mb_flatten(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
/* Dropout with probability p; returns x itself (no node) when p == 0. */
int qs_mb_dropout(qs_mbuild *b, int x, float p, const char *fmt, ...) QS_MB_PRINTF(4);
/* Elementwise sum of two nodes of the same shape. */
int qs_mb_add(qs_mbuild *b, int x, int y, const char *fmt, ...) QS_MB_PRINTF(4);

/* ---- transformer layers (sequences (N, T, C)) ---- */
/* Token embedding of a (V=rows, dim) table over the ids in node x. */
int qs_mb_embedding(qs_mbuild *b, int x, int64_t rows, int64_t dim, const char *fmt, ...) QS_MB_PRINTF(5);
/* x + learned position rows (a (positions, C) table, positions ≥ T). */
int qs_mb_pos_embedding(qs_mbuild *b, int x, int64_t positions, const char *fmt, ...) QS_MB_PRINTF(4);
int qs_mb_layernorm(qs_mbuild *b, int x, float eps, const char *fmt, ...) QS_MB_PRINTF(4);
int qs_mb_gelu(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
int qs_mb_tanh(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
/* SiLU, x·σ(x) (PyTorch nn.SiLU), elementwise over any shape. */
int qs_mb_silu(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
/* Part `part` of `parts` column blocks of x (N, T, parts·C) as `heads` heads (N, H, T, C/H). */
int qs_mb_split_heads(qs_mbuild *b, int x, int64_t heads, int64_t part, int64_t parts, const char *fmt, ...)
    QS_MB_PRINTF(6);
int qs_mb_merge_heads(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
/* alpha · a · bᵀ (trans_b) or alpha · a · b over the (N, H) batch. */
int qs_mb_matmul(qs_mbuild *b, int a, int bb, bool trans_b, float alpha, const char *fmt, ...) QS_MB_PRINTF(6);
/* Softmax over the last axis of scores x; causal mask; ids ≥ 0: mask keys whose id is pad_id. */
int qs_mb_softmax(qs_mbuild *b, int x, bool causal, int ids, float pad_id, const char *fmt, ...) QS_MB_PRINTF(6);
/* The first position of a sequence: (N, T, C) → (N, C). */
int qs_mb_select_token(qs_mbuild *b, int x, const char *fmt, ...) QS_MB_PRINTF(3);
/* Linear without bias whose weight is parameter `param` (tied). */
int qs_mb_linear_tied(qs_mbuild *b, int x, int64_t out_features, int param, const char *fmt, ...) QS_MB_PRINTF(5);

/* Dimension `axis` of node x's output (batch included: NHWC or NF); 0 after a failure. */
int64_t qs_mb_dim(const qs_mbuild *b, int x, int axis);

#endif
