/* src/optim/optim.h — defines: SGD and AdamW over a parameter table (qs_table: one
 * contiguous buffer, FP32 entries at aligned offsets), written only against the backend ops
 * sgd_step / adamw_step / sum_squares / scale so they run on every backend, plus global-norm
 * gradient clipping and the host copy of the optimizer state for checkpoints.
 *
 * Semantics follow PyTorch (torch.optim.SGD, torch.optim.AdamW, clip_grad_norm_):
 *  - weight decay applies to every parameter, biases and norm weights included (PyTorch's
 *    default with a single parameter group);
 *  - SGD: g' = g + wd·p; buf = g' on the first step, else momentum·buf + (1-dampening)·g';
 *    update = nesterov ? g' + momentum·buf : buf; p -= lr·update. No state when momentum = 0.
 *  - AdamW: p *= 1 - lr·wd, then Adam with bias correction (steps count from 1);
 *  - clipping: norm = sqrt(Σ g²) over all entries; coef = clip/(norm + 1e-6); gradients are
 *    scaled in place by coef when coef < 1.
 * State tensor names are PyTorch's: "<param>.momentum_buffer", ".exp_avg", ".exp_avg_sq". */
#ifndef QSYNC_OPTIM_OPTIM_H
#define QSYNC_OPTIM_OPTIM_H

#include <stdbool.h>
#include <stdint.h>
#include "qsync/status.h"
#include "qsync/tensor.h"
#include "core/backend.h"
#include "graph/graph.h"

typedef enum qs_optim_kind { QS_OPTIM_SGD = 0, QS_OPTIM_ADAMW } qs_optim_kind;

typedef struct qs_optim_config {
    qs_optim_kind kind;
    float lr;             /* base learning rate (the schedule's base; step() takes the current one) */
    float momentum;       /* SGD */
    float dampening;      /* SGD */
    float weight_decay;   /* both; AdamW: decoupled */
    bool nesterov;        /* SGD; needs momentum > 0 and dampening = 0 */
    double beta1, beta2;   /* AdamW (double, as PyTorch keeps them) */
    float eps;            /* AdamW */
    float clip_norm;      /* max global L2 norm of the gradients; 0 = off */
} qs_optim_config;

typedef struct qs_optimizer {
    qs_optim_config cfg;
    const qs_table *params;  /* borrowed; must outlive the optimizer */
    void *state[2];          /* backend memory, params->bytes each, same layout as params:
                              * SGD: momentum_buffer (NULL when momentum = 0);
                              * AdamW: exp_avg, exp_avg_sq */
    int n_state;             /* how many of state[] are used: 0, 1 or 2 */
    int64_t step;            /* updates applied so far */
} qs_optimizer;

#define QS_OPTIM_NAME_MAX (QS_NAME_MAX + 32)

/* PyTorch's defaults for `kind` with learning rate lr: SGD momentum 0, dampening 0,
 * weight_decay 0; AdamW betas (0.9, 0.999), eps 1e-8, weight_decay 0.01. No clipping. */
qs_optim_config qs_optim_config_default(qs_optim_kind kind, float lr);

/* "sgd" / "adamw" (case-sensitive); QS_ERR_INVALID_ARG listing the choices otherwise. */
qs_status qs_optim_kind_parse(const char *s, qs_optim_kind *out);
const char *qs_optim_kind_name(qs_optim_kind k);

/* How many state tensors of the parameters' layout the optimizer cfg keeps (0, 1 or 2), and
 * the backend bytes they take in all (each one allocation of params->bytes, at least 1). */
int qs_optim_state_count(const qs_optim_config *cfg);
size_t qs_optim_state_bytes(const qs_optim_config *cfg, const qs_table *params);

/* Check cfg (PyTorch's rules: lr, momentum, weight_decay, eps >= 0; betas in [0, 1);
 * nesterov needs momentum > 0 and dampening = 0; clip_norm >= 0), check that every entry of
 * params is F32, and allocate zeroed state on `be`. On failure o is left freed. */
qs_status qs_optimizer_init(qs_optimizer *o, qs_backend *be, const qs_table *params,
                            const qs_optim_config *cfg);

/* Global L2 norm of the gradients (grads has the layout of the parameter table), summed in
 * double over all entries. */
qs_status qs_optimizer_grad_norm(const qs_optimizer *o, qs_backend *be, qs_stream *s,
                                 const void *grads, double *norm_out);

/* One update with learning rate lr: optional clipping (which scales `grads` in place), then
 * the update of every entry, as one op over the whole buffers (params, grads and the state
 * have the table's layout; the alignment gaps between entries must be zero in params and
 * grads, as the model's zeroed allocations keep them); step increments. *grad_norm_out (may be NULL) receives the
 * global norm before clipping (computed when clipping is on or grad_norm_out is given).
 * With clipping on and a non-finite norm nothing is updated and the step is not counted
 * (PyTorch would multiply every gradient by NaN); the caller sees the norm and can report
 * the skipped step. */
qs_status qs_optimizer_step(qs_optimizer *o, qs_backend *be, qs_stream *s, void *params,
                            void *grads, float lr, double *grad_norm_out);

/* Release the state memory. Safe on a zeroed or already freed optimizer. */
void qs_optimizer_free(qs_optimizer *o, qs_backend *be);

/* PyTorch suffix of state slot i (0 <= i < o->n_state): "momentum_buffer", "exp_avg",
 * "exp_avg_sq". */
const char *qs_optimizer_state_suffix(const qs_optimizer *o, int slot);

/* Host copy of the optimizer state for checkpoints: count = n_state × params->count tensors
 * named "<param name>.<suffix>" (slot-major: all momentum buffers / exp_avg first), F32 with
 * the parameter's shape, views into one owned host buffer. */
typedef struct qs_optim_state {
    int count;
    char (*names)[QS_OPTIM_NAME_MAX];
    qs_tensor *tensors;
    void *data;
    int64_t step;
} qs_optim_state;

/* Copy the state from the backend (waits for the copies to finish). Free with
 * qs_optim_state_free. */
qs_status qs_optimizer_state_save(const qs_optimizer *o, qs_backend *be, qs_stream *s,
                                  qs_optim_state *out);
void qs_optim_state_free(qs_optim_state *st);

/* A source of named host tensors: fill *out for `name` (host data, read-only), or return
 * QS_ERR_NOT_FOUND. qs_safetensors_lookup (io/safetensors.h) is one. */
typedef qs_status (*qs_tensor_lookup_fn)(void *ctx, const char *name, qs_tensor *out);

/* Load every state tensor by name through get(ctx, ...) and set the step counter. All
 * tensors are validated first (present: QS_ERR_NOT_FOUND; F32 with the parameter's shape:
 * QS_ERR_MISMATCH naming the tensor and both shapes), so a failed load changes nothing.
 * The tensors' data may be unaligned. Waits for the copies to finish. */
qs_status qs_optimizer_state_load(qs_optimizer *o, qs_backend *be, qs_stream *s, int64_t step,
                                  qs_tensor_lookup_fn get, void *ctx);

#endif
