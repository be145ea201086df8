/* src/graph/memory_plan.h — defines: the one memory plan of a model at a batch size
 * (qs_memory_plan): every per-batch buffer — node outputs, output gradients, saved tensors,
 * workspace, labels — with its arena, offset, bytes, dtype and lifetime, and the arena sizes.
 * qs_model_setup / qs_model_set_batch allocate one block per arena and point every node into
 * it; the replayer's memory prediction (predict/sim_memory.h) calls the same function, so the
 * predicted bytes are the allocated ones by construction.
 *
 * Inputs: the model's graph as it runs (precisions assigned, casts inserted, fused; fused
 * attention applied where the backend fuses it, graph.h qs_model_fuse_attention), the batch,
 * the backend facts that change sizes (qs_mem_facts) and each node's workspace (set by the
 * layers' setup from the backend plans; a prediction takes the profile's). Each running node
 * declares its buffers through qs_layer_impl.declare; a node fused into another
 * (alias_of) uses its owner's output and gradient, a node inside a fused attention (fused_into)
 * has none. A straight-through cast with QS_GRAD_SHARE_INPUT shares its input's gradient.
 *
 * Layout: within an arena, buffers follow one another in node order (y; dy; saved[0..2]) at
 * offsets that are multiples of QS_DEVICE_ALIGN, each taking its footprint (bytes rounded up
 * to QS_DEVICE_ALIGN); the arena's size is the sum of its footprints. The workspace arena holds
 * one op's scratch at a time: every node's workspace starts at offset 0 and the arena is the
 * largest footprint. Lifetimes are recorded as step positions (qs_mem_position: forward of
 * node i at i, its backward at 2·n_nodes - 1 - i); today every node buffer is live for the
 * whole step and no two of them share bytes. A later layout may let buffers whose lifetimes
 * do not intersect share bytes, except persistent ones (their contents are carried from step
 * to step) — and must then zero again what a layer expects zeroed (arenas start zeroed). */
#ifndef QSYNC_GRAPH_MEMORY_PLAN_H
#define QSYNC_GRAPH_MEMORY_PLAN_H

#include "dag/dag.h"

/* What a planned buffer holds. */
typedef enum qs_mem_role {
    QS_MEM_Y = 0,           /* a node's output */
    QS_MEM_DY,              /* a node's output gradient */
    QS_MEM_SAVED_TENSOR,    /* saved[slot] of a node */
    QS_MEM_SCRATCH,         /* a node's workspace */
    QS_MEM_LABEL_IDS,       /* the batch's labels (batch·label_len int32) */
    QS_MEM_PREDICTIONS,     /* their argmax predictions (batch·label_len int32) */
} qs_mem_role;

typedef struct qs_mem_buffer {
    int node;               /* owning node, -1 for labels and predictions */
    qs_mem_role role;
    int slot;               /* saved slot for QS_MEM_SAVED_TENSOR, else -1 */
    qs_mem_arena arena;
    size_t bytes;           /* as declared */
    size_t offset;          /* from the arena's base; a multiple of QS_DEVICE_ALIGN */
    qs_dtype dtype;
    bool persistent;        /* contents carried from step to step */
    int first, last;        /* live over step positions [first, last] (qs_mem_position) */
} qs_mem_buffer;

/* One node's buffers: indices into qs_memory_plan.buf, -1 where it has none. */
typedef struct qs_mem_node {
    int y, dy, saved[QS_MAX_NODE_SAVED];
    bool dy_shared;         /* dy is its input's (QS_GRAD_SHARE_INPUT), not its own */
} qs_mem_node;

typedef struct qs_memory_plan {
    int64_t batch;
    qs_mem_facts facts;
    qs_mem_buffer *buf;
    int n_buf, cap_buf;
    qs_mem_node *node;      /* [n_nodes] */
    int n_nodes;
    size_t arena_bytes[QS_MEM_ARENA_COUNT];
} qs_memory_plan;

/* The step position of node i's forward (backward false) or backward op in a model of n nodes. */
static inline int qs_mem_position(int n_nodes, int i, bool backward) { return backward ? 2 * n_nodes - 1 - i : i; }

/* Bytes a buffer of `bytes` takes in its arena: rounded up to QS_DEVICE_ALIGN. */
static inline size_t qs_mem_footprint(size_t bytes) {
    return (bytes + QS_DEVICE_ALIGN - 1) / QS_DEVICE_ALIGN * QS_DEVICE_ALIGN;
}

/* Plan model m's per-batch memory for `batch` on a backend with facts f. workspace: [m->n_nodes]
 * each node's workspace bytes at this batch, or NULL (none). m is read only (the plan works on
 * a copy of its nodes shaped for the batch, with the gradients marked as qs_model_mark_grads
 * does). Fails on an unfinalized model, a batch < 1 or out of memory; *out is then empty.
 * Free with qs_memory_plan_free. */
qs_status qs_model_memory_plan(const qs_model *m, int64_t batch, const qs_mem_facts *f, const size_t *workspace,
                               qs_memory_plan *out);
void qs_memory_plan_free(qs_memory_plan *p);

/* "activations", "activation_grads", "saved", "workspace", "labels" (qs_memory_report's names). */
const char *qs_mem_arena_name(qs_mem_arena a);

/* The sum of the arena sizes. */
size_t qs_memory_plan_bytes(const qs_memory_plan *p);

/* Node i's footprints in the plan: its own output, its own output gradient (0 where shared
 * or an owner's) and its saved tensors (all 0 for a node without buffers of its own). */
void qs_memory_plan_node(const qs_memory_plan *p, int i, size_t *out, size_t *grad, size_t *saved);

/* Mark which nodes need the gradient of their output (qs_node.needs_grad): those with
 * parameters and those fed by one that needs it; node 0 where m->want_input_grad. */
void qs_model_mark_grads(qs_model *m);

#endif
