/* src/layers/gemm_quant.h — defines: what Linear and Conv2d share at low precision: the
 * operands they hand to the backend's GEMM-like ops, and the per-node quantized copies.
 *
 * A GEMM node at precision p reads its input X already in p's storage dtype (a
 * straight-through quantizing cast node feeds it, see graph/precision.h; that cast's output
 * is the low-precision copy of X that backward reuses). The node itself owns:
 *   saved[0]  W quantized from the FP32 master weight at every training forward (round to
 *             nearest), [data | data_t | scales (1, or one per output channel) | 1.0f] — kept
 *             for backward-data;
 *   saved[1]  dY quantized once per step (stochastic rounding unless the model asks for
 *             round-to-nearest gradients), [data | data_t | scale], shared by both backward ops;
 * data_t, only where the node keeps_transposed (and only FP8 data): the transposed copy quantize writes in the same
 * pass (qs_operand.data_t), which the CUDA FP8 products read instead of transposing per call;
 * it is counted in saved_bytes like the rest. The input cast keeps Xᵀ the same way (reshape.c). 
 *   saved[2]  per-output-channel weights only: dY·s_w[n] quantized for backward-data (the
 *             channel scale varies along that product's reduction axis, so it is folded
 *             into dY and W is used with unit scale); FP8 with delayed scaling
 *             (qs_model.fp8_amax_history = N): the amax histories of W and dY, N + 1 floats
 *             each (qs_quant_delayed), zero at setup and carried from step to step.
 * The layers declare these through qs_gemm_quant_declare (graph/memory_plan.h lays them out).
 * FP32 nodes own none of these and pass their FP32 tensors straight through.
 * Stochastic rounding stream of node i: key qs_rng_key(seed, "sr", 4·i + role) with role 0
 * for dY and 1 for the folded dY, counter = the model's step. */
#ifndef QSYNC_LAYERS_GEMM_QUANT_H
#define QSYNC_LAYERS_GEMM_QUANT_H

#include "layers/layer_util.h"

/* Shapes of a GEMM node as 2-D matrices: weight (w_rows = output channels, w_cols) and
 * output gradient (dy_rows, dy_cols = output channels), batch included. */
typedef struct qs_gemm_shape {
    int64_t w_rows, w_cols, dy_rows, dy_cols;
    bool transposable; /* a plain 2-D product (Linear, pointwise Conv2d): at setup, the node keeps transposed
                          copies of its FP8 W and dY when the backend reads them
                          (fp8_wants_transposed), recorded in qs_node.keeps_transposed */
} qs_gemm_shape;

/* Whether n is a pointwise Conv2d (1×1 kernel, stride 1, no padding) that runs as a Linear over
 * its (N·H·W, C) input rows on a backend with facts f (conv2d.c); qs_conv_runs_as_linear: on a
 * set-up model (its backend's facts). */
bool qs_conv_as_linear(const qs_node *n, const qs_mem_facts *f);
bool qs_conv_runs_as_linear(const qs_model *m, const qs_node *n);

/* Declare the node's quantized copies (saved[0..2] above) for its precision and the batch in
 * sh, on a backend with facts f (nothing at FP32). */
void qs_gemm_quant_declare(const qs_model *m, const qs_node *n, qs_gemm_shape sh, const qs_mem_facts *f,
                           qs_node_decl *d);
/* Only the quantized dY (saved[1]) of a (rows, cols) output gradient, and its FP8 histories:
 * GEMM nodes without a weight (MatMul), whose operands all come through casts. */
void qs_gemm_dy_declare(const qs_model *m, const qs_node *n, int64_t rows, int64_t cols, const qs_mem_facts *f,
                        qs_node_decl *d);
/* At setup: no dY quantized yet this step, and whether the node keeps transposed FP8 copies
 * (qs_node.keeps_transposed, from the model's facts). */
void qs_gemm_quant_setup(qs_model *m, qs_node *n, qs_gemm_shape sh);
/* Once its buffers are bound: the unit scale after the weight's scales (low precision only). */
qs_status qs_gemm_quant_bind(qs_model *m, qs_node *n, qs_gemm_shape sh);

/* FP8 delayed scaling: bytes of one amax history (qs_quant_delayed: len + 1 floats). */
size_t qs_fp8_history_bytes(const qs_model *m);
/* The qs_quant_delayed of a quantization through the history at hist, in *buf: NULL (current
 * scaling) when hist is NULL; the slot of the model's step; recorded only in training. */
const qs_quant_delayed *qs_fp8_delayed(const qs_model *m, float *hist, qs_quant_delayed *buf);

/* Input `slot` as an operand: the quantizing cast's output with its scale, or the FP32 input. */
qs_operand qs_gemm_input_operand(qs_model *m, const qs_node *n, int slot);
/* The node's output gradient (rows, cols) as an operand, quantized once per step (stochastic
 * rounding unless the model asks for nearest) at a low precision, FP32 otherwise. */
qs_status qs_gemm_quantized_dy(qs_model *m, qs_node *n, int64_t rows, int64_t cols, qs_operand *dy);

/* Whether the only reader of GEMM node n (a BatchNorm, qs_model_bf16_conv_outputs) writes n's
 * quantized dY itself, so that n has no FP32 dY at all (conv2d.c declares none): a BF16 Conv2d
 * without bias whose output is BF16, in a model fused by qs_model_fuse. */
bool qs_gemm_dy_written_by_reader(const qs_model *m, const qs_node *n);
/* For such a node (set up): true, with *dst where the BF16 dY goes (saved[1]) and *sr its
 * stochastic rounding stream (buf holds it; NULL: round to nearest) — the bits
 * qs_gemm_quantized_dy would make from an FP32 dY; false for any other node. The reader calls
 * qs_gemm_dy_mark_quantized(m, n) after writing it, before n's backward runs. */
bool qs_gemm_dy_from_reader(qs_model *m, qs_node *n, void **dst, const qs_sr **sr, qs_sr *buf);
void qs_gemm_dy_mark_quantized(qs_model *m, qs_node *n);

/* The dtype of node n's input gradient (its plans' dx_dt): the grad_dtype of the node that
 * owns the gradient buffer of input 0 (qs_model_grad_owner; BF16 only where
 * qs_model_bf16_input_grads found n its only writer). */
qs_dtype qs_gemm_dx_dtype(const qs_model *m, const qs_node *n);

/* The three backend ops of a GEMM-like kind (linear_* or conv_*, which share signatures). */
typedef qs_status (*qs_gemm_forward_fn)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *x,
                                        const qs_operand *w, const float *b, void *y, void *ws);
typedef qs_status (*qs_gemm_backward_data_fn)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                              const qs_operand *w, void *dx, bool accumulate, void *ws);
typedef qs_status (*qs_gemm_backward_weights_fn)(qs_backend *be, void *plan, qs_stream *s, const qs_operand *dy,
                                                 const qs_operand *x, float *dw, float *db, void *ws);

/* The layer ops of a GEMM node with parameters weight [, bias], through the backend op given:
 * forward (quantizing W), backward-data into the input's gradient (when it needs one) and
 * backward-weights (bias gradient from the FP32 dY when dY is quantized). */
qs_status qs_gemm_forward(qs_model *m, qs_node *n, qs_gemm_shape sh, qs_gemm_forward_fn op);
qs_status qs_gemm_backward_data(qs_model *m, qs_node *n, qs_gemm_shape sh, qs_gemm_backward_data_fn op);
qs_status qs_gemm_backward_weights(qs_model *m, qs_node *n, qs_gemm_shape sh, qs_gemm_backward_weights_fn op);

#endif
