/* src/graph/tensor_access.h — defines: host access to a set-up model's tensors for the code
 * above graph/ (the planner, the profiler, checkpoints), which never touches backend memory or
 * backend ops itself: one node's tensor read as FP32 (qs_model_read_tensor, the taps below),
 * whole parameter / gradient / buffer tables read and written (qs_model_table_*), host
 * snapshots of the parameters and buffers (qs_model_snapshot_*), and scaling the gradient
 * table (qs_model_grads_scale).
 *
 * Every call works on the model's stream and waits for it (stream_sync) before returning: what
 * it read is on the host, and what it wrote has left the host memory it was given. */
#ifndef QSYNC_GRAPH_TENSOR_ACCESS_H
#define QSYNC_GRAPH_TENSOR_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "dag/dag.h"

/* What of a node to read. X: the output of its input 0 (the node's first operand). Y: its
 * output. DY: the gradient of the loss w.r.t. its output, as the last backward left it (the
 * sum over its readers). W: its weight, the parameter qs_node_weight_param names (a tied
 * Linear reads the parameter it is tied to). DW: that parameter's gradient (for a tied weight
 * the shared one: the sum of the tied node's and the owner's contributions). */
typedef enum qs_tap { QS_TAP_X = 0, QS_TAP_Y, QS_TAP_DY, QS_TAP_W, QS_TAP_DW, QS_TAP_COUNT } qs_tap;

/* "x", "y", "dy", "w", "dw" (NULL for another value). */
const char *qs_tap_name(qs_tap t);

/* Elements of tap t of node `node` of the set-up model m into *numel: X and Y (and DY) count
 * the tensor at the model's batch size, W and DW the parameter's numel. Refuses what
 * qs_model_read_tensor refuses, with the same message. */
qs_status qs_model_tensor_numel(const qs_model *m, int node, qs_tap t, int64_t *numel);

/* Read tap t of node `node` into host[0..*numel) as FP32 (cap: floats host holds; a smaller
 * cap is QS_ERR_INVALID_ARG naming both). F32 tensors are copied bit for bit; BF16 and F16 ones
 * (a BF16 output or gradient) are widened exactly. Where a node is fused into another
 * (alias_of: a ReLU into the BatchNorm or Add before it, an Add into a BatchNorm, a BF16 cast
 * into a BatchNorm), its Y and DY are the owner's buffers: they hold the fused chain's output
 * and gradient, which is then also what the owner's Y and DY read. Refused
 * (QS_ERR_UNSUPPORTED, naming node and tap): a node that is part of a fused attention
 * (fused_into: no buffers of its own); X of the input node (it has no input); DY where the node
 * has no gradient buffer (it needs none, it is the loss, or its gradient stays elsewhere: a BF16
 * convolution's in its reader's quantized copy, a BatchNorm's in the Add it feeds); W and DW of a node without a weight (a MatMul's operands are its
 * inputs' Y); a tensor stored quantized (S8, FP8: its value needs a scale). A model that is not
 * set up, or a node index out of range, is QS_ERR_INVALID_ARG. */
qs_status qs_model_read_tensor(qs_model *m, int node, qs_tap t, float *host, int64_t cap, int64_t *numel);

/* The tables of a model: parameters, their gradients (same layout) and buffers. */
typedef enum qs_model_table {
    QS_TABLE_PARAMS = 0,
    QS_TABLE_GRADS,
    QS_TABLE_BUFFERS
} qs_model_table;

/* The layout of table t (the gradients share the parameters'), NULL for another value. Its
 * bytes count the entries and the alignment padding between them. */
const qs_table *qs_model_table_layout(const qs_model *m, qs_model_table t);

/* Copy the whole of table t (the layout's bytes, laid out by its qs_table) into host. */
qs_status qs_model_table_read(qs_model *m, qs_model_table t, void *host);

/* A host copy of table t into *host (qs_host_alloc'ed, at least one byte; the caller frees it
 * with qs_host_free); *host is NULL on failure. */
qs_status qs_model_table_download(qs_model *m, qs_model_table t, void **host);

/* Write the whole of table t from host (the layout's bytes, laid out by its qs_table). */
qs_status qs_model_table_write(qs_model *m, qs_model_table t, const void *host);

/* Write entry `entry` of table t (numel elements of its dtype) from host. */
qs_status qs_model_table_write_entry(qs_model *m, qs_model_table t, int entry, const void *host);

/* Multiply every float of the gradient table (padding included, params.bytes / 4 of them) by
 * alpha on the backend. */
qs_status qs_model_grads_scale(qs_model *m, float alpha);

/* Host copies of a model's parameter and buffer tables (the bytes of each, padding included). */
typedef struct qs_model_snapshot {
    void *params, *buffers;    /* qs_host_alloc'ed */
    size_t param_bytes, buffer_bytes;
} qs_model_snapshot;

/* Take m's parameters and buffers into *s (free with qs_model_snapshot_free, also on failure). */
qs_status qs_model_snapshot_take(qs_model *m, qs_model_snapshot *s);

/* Write s back into m, whose tables must have s's sizes (QS_ERR_MISMATCH otherwise): m may be
 * another build of the same model. */
qs_status qs_model_snapshot_restore(qs_model *m, const qs_model_snapshot *s);

void qs_model_snapshot_free(qs_model_snapshot *s);

#endif
