/* src/graph/precision.h — defines: assigning compute precisions to the GEMM-like nodes of a
 * model and inserting the quantizing casts that feed them.
 *
 * Order of use: build → qs_model_finalize → [qs_model_fuse] → set precisions
 * (qs_model_set_uniform_precision or node->prec per node, e.g. from a plan file) →
 * qs_model_insert_casts → qs_model_setup. */
#ifndef QSYNC_GRAPH_PRECISION_H
#define QSYNC_GRAPH_PRECISION_H

#include "graph/graph.h"

/* Whether a node kind's precision can be chosen (Linear, Conv2d). */
bool qs_node_precision_selectable(qs_node_kind kind);

/* Set every selectable node to p. */
void qs_model_set_uniform_precision(qs_model *m, qs_precision p);

/* Number of selectable nodes at each precision (counts[QS_PREC_COUNT]). */
void qs_model_precision_counts(const qs_model *m, int counts[QS_PREC_COUNT]);

/* For every selectable node whose precision stores its operands in another dtype than its
 * input's (qs_precision_operand_dtype), feed it through a straight-through quantizing cast
 * node placed right after the input; consumers of one input at the same dtype share one cast
 * (so it is computed and counted once). Node indices after the insertion point shift. Call
 * once, before qs_model_setup; fails after setup. Returns the number of casts inserted in
 * *inserted (may be NULL). When qs_model_fuse ran, BF16 casts of BatchNorm outputs are then
 * fused into those BatchNorms (qs_model_fuse_casts; still counted as inserted) — after
 * qs_model_bf16_residuals, so that a block output read by a BF16 GEMM and a residual Add is
 * written in BF16 once. Last, it runs qs_model_bf16_conv_outputs and qs_model_bf16_input_grads. */
qs_status qs_model_insert_casts(qs_model *m, int *inserted);

/* Part of the BF16 precision's semantics: a BF16 convolution without bias whose only reader is
 * a BatchNorm writes its output in BF16 (out_dtype; the FP32 sums rounded to nearest even, the
 * plans' y_dt), which the BatchNorm reads — as PyTorch's autocast keeps BF16 convolution
 * outputs. It halves the bytes of that activation and of the batch norm's reads of it; the
 * gradient stays FP32. Before qs_model_setup only (returns 0 after); returns how many
 * convolutions write BF16. */
int qs_model_bf16_conv_outputs(qs_model *m);

/* Part of the BF16 precision's semantics, for residual streams: an Add input that a BF16 GEMM
 * also reads (through its straight-through BF16 cast) is read by the Add from that cast — the
 * value rounded to nearest even, as PyTorch's autocast keeps a residual block's output in BF16
 * for both its readers. Its gradient is unchanged (FP32, passed through the cast). With
 * qs_model_fuse the cast is then fused into the BatchNorm that computes the block output: it
 * writes BF16 only (half the bytes of that activation, of its residual read and of the ReLU
 * mask read in backward, and no separate cast). Called by qs_model_insert_casts, before
 * qs_model_setup only (returns 0 after); returns how many Add inputs now read a BF16 value. */
int qs_model_bf16_residuals(qs_model *m);

/* Part of the BF16 precision's semantics, for gradients: a BatchNorm or ReLU (not fused into
 * another node) whose output gradient one BF16 Conv2d or Linear alone writes — its only reader,
 * directly or through quantizing casts — receives that gradient in BF16 (grad_dtype; the
 * GEMM's plan gets it as dx_dt): the FP32 dX rounded to nearest even, which the BF16
 * convolution engines on the GPU produce anyway; the BatchNorm or ReLU widens it exactly. It
 * halves the bytes of that gradient, of its write and of the backward's reads of it, as
 * PyTorch's autocast keeps BF16 activation gradients. Before qs_model_setup only (returns 0
 * after); returns how many nodes receive a BF16 gradient. */
int qs_model_bf16_input_grads(qs_model *m);

#endif
