/* src/layers/layer_util.h — small helpers shared by the layer implementations: input
 * access, parameter declaration, PyTorch-default initialisation. */
#ifndef QSYNC_LAYERS_LAYER_UTIL_H
#define QSYNC_LAYERS_LAYER_UTIL_H

#include "dag/dag.h"
#include "layers/registry.h"

/* The node feeding input slot k of n. */
static inline qs_node *qs_layer_input(const qs_model *m, const qs_node *n, int k) { return &m->nodes[n->inputs[k]]; }

/* Declare parameter "<node name>.<suffix>" (f32, PyTorch shape) and record it in n->param. */
qs_status qs_layer_declare_param(qs_model *m, qs_node *n, const char *suffix, int ndim, const int64_t *shape);
/* Declare buffer "<node name>.<suffix>" of dtype dt and record it in n->buffer. */
qs_status qs_layer_declare_buffer(qs_model *m, qs_node *n, const char *suffix, qs_dtype dt, int ndim,
                                  const int64_t *shape);
/* Require the node's input 0 to have `ndim` dims (with the batch); message names the layer. */
qs_status qs_layer_expect_ndim(qs_model *m, const qs_node *n, int ndim);

/* Fill p[0..count) with U(-bound, bound) from Philox keyed by (seed, "init", param offset). */
void qs_layer_init_uniform(float *p, int64_t count, float bound, uint64_t seed, uint64_t stream);
void qs_layer_init_const(float *p, int64_t count, float value);
/* Fill p[0..count) with N(0, std²) from Philox keyed like qs_layer_init_uniform. */
void qs_layer_init_normal(float *p, int64_t count, float std, uint64_t seed, uint64_t stream);
/* Last dimension of node x's output, and its rows per sample (all other dimensions but the batch). */
static inline int64_t qs_layer_last_dim(const qs_node *x) { return x->out_shape[x->out_ndim - 1]; }
int64_t qs_layer_rows_per_sample(const qs_node *x);
/* Copy the shape of node `from` (batch 1) into n's output shape. */
void qs_layer_same_shape(qs_node *n, const qs_node *from);

/* Host pointer of parameter slot k of n inside a host copy of the parameter buffer. */
float *qs_layer_host_param(qs_model *m, const qs_node *n, int k, float *host_params);

/* Set a 4-d channels-last output shape (batch 1 while building). */
void qs_layer_set_out_nhwc(qs_node *n, int64_t h, int64_t w, int64_t c);

/* Per-sample element count of a node's output. */
int64_t qs_layer_out_numel_per_sample(const qs_node *n);

/* In a model fused by qs_model_fuse: the Add that is the only reader of BatchNorm n (n
 * without a fused ReLU or Add), else NULL. n's backward then reads that Add's dy, masked by the
 * Add's output when a ReLU is fused into it (both in the buffers of the BatchNorm the Add may
 * be fused into), instead of a dy of its own, which n then does not have (batchnorm.c declares
 * none); the Add (or the BatchNorm owning it) writes no gradient for n. The same values as the
 * Add writing n's dy first, one pass over the activation less. */
qs_node *qs_bn_grad_from_add(const qs_model *m, const qs_node *n);

#endif
