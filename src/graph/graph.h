/* src/graph/graph.h — defines: what is done with a model (src/dag/dag.h): building it node by
 * node, the fusion passes, set-up for a batch on a backend, forward and backward with every op
 * timed in its category, captured passes, memory reports and the GPU-busy meter. */
#ifndef QSYNC_GRAPH_GRAPH_H
#define QSYNC_GRAPH_GRAPH_H

#include "dag/dag.h"
#include "layers/registry.h"

/* Account op_ms of real work and sleep off the accumulated debt; returns the time slept. */
double qs_emulate_slowdown(qs_emulation *e, double op_ms);
/* The slowdown actually applied so far (1 when none is emulated or nothing ran yet). */
double qs_emulation_measured(const qs_emulation *e);

/* ---- building ---- */
qs_status qs_model_create(const char *arch, int64_t in_h, int64_t in_w, int64_t in_c,
                          int64_t num_classes, qs_model **out);
void qs_model_free(qs_model *m);
/* Append a node; returns its index via idx_out. Shapes are inferred immediately, so inputs
 * must already exist. `name` is the PyTorch module path ("" for parameter-less nodes is
 * allowed; a unique name is then generated). */
qs_status qs_model_add(qs_model *m, qs_node_kind kind, const char *name, const int *inputs,
                       int n_inputs, const qs_node_cfg *cfg, int *idx_out);
/* Finish building: the last added node must be SOFTMAX_XENT; sets logits_node. */
qs_status qs_model_finalize(qs_model *m);

/* Fuse a ReLU into the BatchNorm or Add that feeds it (when the ReLU is its only consumer):
 * the producer computes max(·, 0) and masks its backward, the ReLU node becomes an alias of the
 * producer's buffers. Then fuse each Add (with its ReLU) into a BatchNorm it alone reads (a
 * residual block's last one, placed after the Add's other input): the BatchNorm adds the other
 * input before its ReLU and writes the Add's gradient for it in its backward (cfg.bn.add); the
 * Add and the ReLU become aliases of the BatchNorm. Results are bitwise those of the unfused
 * graph (for finite gradients). Call after qs_model_finalize and before qs_model_setup; returns
 * the number of fused pairs (a BatchNorm taking an Add counts once). */
int qs_model_fuse(qs_model *m);

/* Fuse every straight-through BF16 cast whose input is a BatchNorm (or the ReLU fused into
 * one) with no other consumer: the BatchNorm writes its output in BF16 itself (rounded to
 * nearest even, as the cast did), the cast becomes an alias of its buffers and runs nothing, and
 * the FP32 gradient of the cast (straight-through) is the BatchNorm's. Results are bitwise those
 * of the unfused graph, except where an output lies below 2^-134, which BF16 rounds to 0 and
 * the fused ReLU's backward then masks. Called by qs_model_insert_casts when qs_model_fuse ran
 * (qs_model.fuse_casts); returns the number of fused casts. */
int qs_model_fuse_casts(qs_model *m);

/* ---- captured passes (graph/capture.c) ----
 * With m->capture.on, a training pass (forward or backward) runs as a backend graph when
 * qs_capture_blocker finds nothing against it and the step is neither timed nor GPU-busy
 * metered: the first pass of each kind after the buffers are laid out runs eagerly (lazy
 * library set-up happens there), the second is captured, later ones replay the capture. A
 * backward captured at one loss scale is captured again when the scale changes. Results are
 * bitwise those of eager passes. */

/* Why m's training passes cannot be captured (a sentence), or NULL when they can. */
const char *qs_capture_blocker(const qs_model *m);
/* Run one training pass: `eager` (the op-by-op pass) directly, or captured and replayed as
 * described above. A capture that fails is logged, and the pass and every later one run
 * eagerly. */
qs_status qs_capture_run(qs_model *m, qs_pass pass, qs_status (*eager)(qs_model *m));
/* Free the captured graphs (they hold the buffers' addresses): called when buffers are
 * released; the next passes warm up and capture again. */
void qs_capture_release(qs_model *m);

/* Fuse every attention whose two MatMuls share one 16-bit precision (BF16 or FP16) and which
 * has no dropout on its probabilities into its MergeHeads node (qs_node_cfg.merge), when
 * `supported` accepts its descriptor (shapes with N = m->batch, ids NULL). Called by
 * qs_model_setup before buffers are laid out, on backends that have fused attention (and
 * have it switched on: qs_backend.fused_attention); returns the number of fused attentions. */
typedef bool (*qs_attention_supported_fn)(void *ctx, const qs_attention_desc *d);
int qs_model_fuse_attention(qs_model *m, qs_attention_supported_fn supported, void *ctx);

/* ---- runtime ---- */
/* Allocate everything for `batch` on backend `be` (the tables; the backend plans; then the
 * memory plan's arenas, every node's buffers in them), initialise parameters from `seed`. */
qs_status qs_model_setup(qs_model *m, qs_backend *be, int64_t batch, uint64_t seed);
/* Change the batch size of a set-up model: the per-batch memory (activations, gradients,
 * saved tensors, plans, workspace, labels) is released and set up again for `batch`;
 * parameters, gradients, buffers and the step count are kept. Call between steps; on
 * failure the model must be freed. */
qs_status qs_model_set_batch(qs_model *m, int64_t batch);
/* Run forward on a host batch x (batch·in_h·in_w·in_c floats, NHWC) and labels (batch·label_len); computes
 * the per-sample losses (in the loss node's y). training selects BN/dropout behaviour. */
qs_status qs_model_forward(qs_model *m, const float *x_host, const int32_t *labels_host,
                           bool training);
/* Backward of the mean loss over the batch: fills model grads. Call after a training
 * forward. `loss_scale` multiplies the loss gradient (1 for the plain mean). */
qs_status qs_model_backward(qs_model *m, float loss_scale);
/* Mean loss per label and number of correct argmax predictions over the labels of the first
 * `valid` samples of the last forward (host results): valid·label_len labels in all (a language
 * model's correct count is of tokens). */
qs_status qs_model_loss_accuracy(qs_model *m, int64_t valid, double *mean_loss, int64_t *correct);
/* Copy logits (batch, classes) to the host. */
qs_status qs_model_logits(qs_model *m, float *host_out);

/* The model's memory by category: its tables, and after setup its memory plan's arenas
 * (graph/memory_plan.h; optimizer state is the optimizer's, 0 here). */
void qs_model_memory(const qs_model *m, qs_memory_report *r);
/* One node's share of the report: its output, its output gradient (0 where it shares its
 * input's) and the tensors it saves for backward, each as the bytes it takes in its arena
 * (all 0 for a fused-away node and before setup). */
void qs_node_memory(const qs_model *m, const qs_node *n, size_t *out, size_t *grad, size_t *saved);
/* Reset every op timer. */
void qs_model_reset_times(qs_model *m);

/* GPU-busy measurement of a set-up model (graph/busy.c). start: from now on every op records an
 * event before and after itself on the model's stream (QS_ERR_UNSUPPORTED on a backend without
 * events: the CPU's ops run synchronously, every step is all busy). mark: record one event —
 * callers bracket their own backend work (the optimizer) with two. collect: wait for the
 * stream and add the elapsed time of every pair since the last collect to *busy_ms. stop: no
 * more events; the events are freed with the model. */
qs_status qs_model_busy_start(qs_model *m);
qs_status qs_model_busy_mark(qs_model *m);
qs_status qs_model_busy_collect(qs_model *m, double *busy_ms);
void qs_model_busy_stop(qs_model *m);
void qs_model_busy_free(qs_model *m);

#endif
