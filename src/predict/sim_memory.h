/* src/predict/sim_memory.h — defines: the replayer's memory prediction for one worker, made by
 * the memory plan that allocation uses (graph/memory_plan.h), so that the predicted per-batch
 * memory is the set-up model's arena sizes by construction; and which attentions a profile
 * recorded as fused (docs/PROFILE.md "fused_into").
 *
 * Predicted peak = the plan's arenas (activations, activation gradients, saved tensors,
 * workspace, labels) + parameters + gradients + optimizer state + buffers (with the device step
 * counter): every byte a training step allocates through the backend. */
#ifndef QSYNC_PREDICT_SIM_MEMORY_H
#define QSYNC_PREDICT_SIM_MEMORY_H

#include "graph/graph.h"
#include "io/profile_file.h"
#include "optim/optim.h"

typedef struct qs_sim_memory_input {
    const qs_model *m;          /* the worker's model: its plan's precisions, casts inserted, fused by
                                 * qs_model_fuse; not set up */
    int64_t batch;              /* its local batch */
    qs_mem_facts facts;         /* the backend's (a profile run's memory_facts) */
    const size_t *workspace;    /* [m->n_nodes]: each node's workspace at this batch and its precision
                                 * (the profile's "workspace_bytes"), or NULL: none */
    /* with facts.fused_attention: which attentions the backend fuses (graph.h
     * qs_model_fuse_attention; qs_sim_profile_attention_fused answers from a profile); NULL:
     * every attention of the fusable pattern */
    qs_attention_supported_fn attention_supported;
    void *attention_ctx;
    const qs_optim_config *optimizer; /* the optimizer stepped (its state counts), or NULL: none */
} qs_sim_memory_input;

/* The worker's predicted memory: *r in qs_model_memory's categories (optimizer included) and
 * *peak their sum; with node_bytes ([m->n_nodes], or NULL) each node's own buffers in the plan
 * (output, output gradient unless shared with its input's, saved tensors; footprints, so that
 * they add up to the activation, gradient and saved arenas; 0 for a fused alias and for a node
 * inside a fused attention). Errors: those of qs_model_memory_plan (an unfinalized model, a
 * batch < 1, out of memory). */
qs_status qs_sim_memory(const qs_sim_memory_input *in, qs_memory_report *r, size_t *peak, size_t *node_bytes);

/* An attention_supported for a prediction from a profile (ctx: the const qs_profile *): whether
 * the profile's run at the descriptor's 16-bit precision ran an attention fused (an op there
 * is "fused_into" an op of kind MergeHeads). The profile is taken at the worker's batch and
 * model, so its shapes are the descriptor's. */
bool qs_sim_profile_attention_fused(void *ctx, const qs_attention_desc *d);

#endif
