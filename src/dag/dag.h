/* src/dag/dag.h — defines: what a model is, as data: the DAG of nodes (qs_node, qs_model), the
 * parameter/buffer tables (one contiguous buffer + offset table each), the per-op timing
 * and memory categories, the buffers a layer declares for a batch (qs_node_decl, with the
 * backend facts that size them and the arenas they go to: graph/memory_plan.h lays them out),
 * the layer vtable every node kind implements, and the accessors a
 * layer uses on its neighbours (tables, gradient targets, readers). No behaviour beyond
 * these accessors lives here: building, set-up and the passes are src/graph; the layers
 * (src/layers) implement qs_layer_impl against this header alone.
 *
 * Nodes are stored in topological order; node i names its inputs by index (< i). The same
 * array drives forward (ascending), backward (descending), the profiler, the planner and
 * checkpoint names (node->name is the PyTorch module path, e.g. "layer1.0.conv1").
 * Node 0 is always the INPUT node holding the batch (N,H,W,C) or (N,F). The last node is the
 * loss (softmax cross-entropy), whose input is the logits node. */
#ifndef QSYNC_DAG_DAG_H
#define QSYNC_DAG_DAG_H

#include <stdint.h>
#include <stdbool.h>
#include "qsync/status.h"
#include "qsync/dtype.h"
#include "qsync/tensor.h"
#include "qsync/log.h"
#include "core/backend.h"
#include "core/timer.h"

#define QS_MAX_INPUTS 2
#define QS_MAX_NODE_PARAMS 2    /* weight, bias (BN: weight, bias) */
#define QS_MAX_NODE_BUFFERS 3   /* BN: running_mean, running_var, num_batches_tracked */
#define QS_MAX_NODE_SAVED 3
#define QS_NAME_MAX 96

typedef enum qs_node_kind {
    QS_NODE_INPUT = 0,
    QS_NODE_LINEAR,
    QS_NODE_CONV2D,
    QS_NODE_BATCHNORM2D,
    QS_NODE_RELU,
    QS_NODE_MAXPOOL2D,
    QS_NODE_AVGPOOL2D,       /* global average pooling is an AVGPOOL2D with global=true */
    QS_NODE_FLATTEN,         /* (N,H,W,C) channels-last → (N, C·H·W) in PyTorch (C,H,W) order */
    QS_NODE_DROPOUT,
    QS_NODE_ADD,
    QS_NODE_CAST,
    QS_NODE_SOFTMAX_XENT,
    /* transformer layers (docs/MODELS.md "gpt", "bert"); sequences are (N, T, C) */
    QS_NODE_EMBEDDING,       /* token ids (N,1,1,T) as FP32 → (N,T,C) */
    QS_NODE_POS_EMBEDDING,   /* (N,T,C) + learned position rows → (N,T,C) */
    QS_NODE_LAYERNORM,       /* over the last dimension */
    QS_NODE_GELU,            /* tanh approximation */
    QS_NODE_TANH,
    QS_NODE_SPLIT_HEADS,     /* part s of (N,T,parts·H·D) → (N,H,T,D) */
    QS_NODE_MERGE_HEADS,     /* (N,H,T,D) → (N,T,H·D) */
    QS_NODE_MATMUL,          /* batched A·Bᵀ or A·B over (N,H): attention's QKᵀ and P·V */
    QS_NODE_SOFTMAX,         /* masked softmax over the last axis of (N,H,Tq,Tk) */
    QS_NODE_SELECT_TOKEN,    /* (N,T,C) → (N,C): the first position (BERT's [CLS]) */
    QS_NODE_SILU,            /* x·σ(x), elementwise over any shape */
    QS_NODE_KIND_COUNT
} qs_node_kind;

/* Categories in which every op's time and memory are accounted; the replayer predicts the
 * same ones. */
typedef enum qs_cost_cat {
    QS_CAT_FORWARD = 0,
    QS_CAT_BACKWARD_DATA,
    QS_CAT_BACKWARD_WEIGHTS,
    QS_CAT_CAST,
    QS_CAT_OPTIMIZER,
    QS_CAT_COMM_WAIT,
    QS_CAT_COUNT
} qs_cost_cat;
const char *qs_cost_cat_name(qs_cost_cat c);

/* Accumulated timings of one op in one category. */
typedef struct qs_op_time {
    double total_ms;
    double last_ms;
    int64_t calls;
} qs_op_time;

/* ---- parameter / buffer tables: one allocation, offsets aligned to QS_DEVICE_ALIGN ---- */
typedef struct qs_table_entry {
    char name[QS_NAME_MAX];  /* full PyTorch state_dict name, e.g. "layer1.0.bn1.weight" */
    qs_dtype dtype;
    int ndim;
    int64_t shape[4];        /* PyTorch layout (conv weights OIHW) */
    int64_t numel;
    size_t offset;           /* bytes from the table's base pointer */
    int node;                /* owning node index */
} qs_table_entry;

typedef struct qs_table {
    qs_table_entry *entries;
    int count, cap;
    size_t bytes;            /* total, including alignment padding */
} qs_table;

/* Append an entry; its offset is the current end rounded up to QS_DEVICE_ALIGN. */
qs_status qs_table_add(qs_table *t, const char *name, qs_dtype dt, int ndim, const int64_t *shape,
                       int node, int *index_out);
/* Index of the entry named `name`, or -1. */
int qs_table_find(const qs_table *t, const char *name);
void qs_table_free(qs_table *t);

/* Node configuration (which union member is valid depends on kind). */
typedef union qs_node_cfg {
    /* tied: the weight is parameter tie_param of an earlier node (its shape must be
     * (out_features, in)); no bias then. */
    struct { int64_t out_features; bool bias; bool tied; int tie_param; } linear;
    struct { int64_t out_channels, kernel, stride, pad; bool bias; } conv;
    /* relu, add: set by qs_model_fuse. add: the Add that is this BatchNorm's only reader is
     * fused into it (the Add's alias_of); y = [relu](BN(x) + the Add's other input). */
    struct { float eps, momentum; bool relu, add; } bn;
    struct { int64_t kernel, stride, pad; bool global; } pool;
    struct { float p; } dropout;
    struct { bool relu; /* set by qs_model_fuse */ } add;
    /* to: output dtype. straight_through: a quantizing cast inserted in front of a
     * low-precision GEMM (qs_model_insert_casts): it may produce S8/FP8 with a per-tensor
     * scale, and its gradient passes through unchanged in FP32 (the usual straight-through
     * estimator of quantization), instead of being cast back. */
    struct { qs_dtype to; bool straight_through; } cast;
    /* Embedding / position embedding: table rows (vocabulary or positions) and width. */
    struct { int64_t rows, dim; } embed;
    struct { float eps; } ln;
    /* Split heads: part `part` of `parts` equal column blocks, each of `heads` heads. */
    struct { int64_t heads, part, parts; } heads;
    /* MatMul: C = alpha · A · op(B), op(B) = Bᵀ when trans_b. */
    struct { bool trans_b; float alpha; } matmul;
    /* Softmax: causal mask; pad_id ≥ 0: keys whose token id (input 1, the model input) equals
     * pad_id are masked. */
    struct { bool causal; float pad_id; } softmax;
    /* MergeHeads: fused (set at setup by qs_model_fuse_attention) — this node runs the whole
     * attention that feeds it: the q, k, v SplitHeads nodes, the scores MatMul, the Softmax,
     * the context MatMul and their casts (node indices below), which then run nothing. */
    struct { bool fused; int q, k, v, scores, softmax; } merge;
} qs_node_cfg;

typedef struct qs_node {
    qs_node_kind kind;
    char name[QS_NAME_MAX];
    int inputs[QS_MAX_INPUTS];
    int n_inputs;
    int n_consumers;           /* how many nodes read this node's output */
    qs_node_cfg cfg;
    qs_precision prec;         /* compute precision of GEMM-like nodes (FP32 otherwise) */

    /* shape of the output including the batch dimension: (N,H,W,C) or (N,F) or (N). While
     * building, N is 1; qs_model_setup sets it to the batch size. */
    int out_ndim;
    int64_t out_shape[4];
    qs_dtype out_dtype;
    qs_dtype grad_dtype;       /* dtype of dy: F32, or BF16 where one BF16 GEMM alone writes it
                                * (qs_model_bf16_input_grads); a plain cast's follows out_dtype */

    /* parameters (index into model->params) and buffers (model->buffers); -1 if absent */
    int param[QS_MAX_NODE_PARAMS];
    int n_params;
    int buffer[QS_MAX_NODE_BUFFERS];
    int n_buffers;
    /* ≥ 0: a Linear whose weight is that parameter of an earlier node (a language model's
     * output projection tied to the token embedding). Not counted in n_params: the owner's
     * gradient hook and optimizer entry cover it; this node overwrites its gradient first in
     * backward, the owner accumulates. -1 otherwise. */
    int tied_param;

    /* runtime memory: pointers into the model's arenas (graph/memory_plan.h), NULL where empty */
    void *y;                   /* output */
    void *dy;                  /* gradient w.r.t. the output (NULL where none is needed) */
    bool dy_alias;             /* dy is the input's dy (a straight-through cast, QS_GRAD_SHARE_INPUT) */
    bool needs_grad;           /* some ancestor has parameters: dX must be computed into it */
    int grads_received;        /* consumers that have written dy during this backward */
    int alias_of;              /* ≥ 0: fused into that node (qs_model_fuse); y and dy are its
                                * buffers and this node runs no op of its own. -1 otherwise */
    int fused_into;            /* ≥ 0: part of the fused attention that node (a MergeHeads) runs:
                                * this node has no buffers and runs nothing. -1 otherwise */
    void *saved[QS_MAX_NODE_SAVED];      /* extra tensors kept for backward (idx, mask, stats) */
    size_t saved_bytes[QS_MAX_NODE_SAVED]; /* as declared (qs_layer_impl.declare) */
    void *plan;                /* backend plan for GEMM-like and pooling nodes */
    int64_t quant_step;        /* GEMM nodes: model step at which dY was last quantized */
    bool keeps_transposed;     /* GEMM nodes: FP8 copies of W and dY carry transposed copies
                                  (layers/gemm_quant.h; decided at setup) */
    size_t workspace;

    /* planner metadata, per sample, filled by the layer's infer() */
    double flops_fwd;
    double flops_bwd_data;
    double flops_bwd_weights;
    int64_t param_count;
    size_t bytes_saved_for_backward;   /* every tensor this node's backward reads, at its dtype */

    qs_op_time time[QS_CAT_COUNT];
} qs_node;

struct qs_model;
struct qs_memory_plan;

/* ---- the buffers a node declares for a batch (laid out by graph/memory_plan.h) ---- */

/* The backend facts that change buffer sizes (qs_backend's flags of the same names), given as
 * data so that memory can be planned without a backend. */
typedef struct qs_mem_facts {
    bool fp8_wants_transposed;     /* FP8 GEMM operands keep transposed copies (layers/gemm_quant.h) */
    bool pointwise_conv_as_linear; /* 1×1, stride-1, unpadded Conv2d runs as a Linear (layers/conv2d.c) */
    bool fused_attention;          /* attention is fused into its MergeHeads where the backend can */
} qs_mem_facts;

static inline qs_mem_facts qs_mem_facts_of(const qs_backend *be) {
    return (qs_mem_facts){.fp8_wants_transposed = be->fp8_wants_transposed,
                          .pointwise_conv_as_linear = be->pointwise_conv_as_linear,
                          .fused_attention = be->fused_attention};
}

/* The arenas of a model's per-batch memory, one backend allocation each. */
typedef enum qs_mem_arena {
    QS_MEM_ACTIVATIONS = 0,  /* node outputs y */
    QS_MEM_ACTIVATION_GRADS, /* output gradients dy */
    QS_MEM_SAVED,            /* tensors kept for backward (and carried state: FP8 amax histories) */
    QS_MEM_WORKSPACE,        /* one op's scratch (the backend plans' workspace) */
    QS_MEM_LABELS,           /* the batch's labels and argmax predictions */
    QS_MEM_ARENA_COUNT
} qs_mem_arena;

/* One buffer a node declares: bytes (0: none), the element type of its data (of the leading
 * data where the block also holds scales), and whether its contents are carried from one step
 * to the next (persistent: it never shares bytes with another buffer) or only live within a step. */
typedef struct qs_buffer_decl {
    size_t bytes;
    qs_dtype dtype;
    bool persistent;
} qs_buffer_decl;

/* Where a node's output gradient lives. */
typedef enum qs_grad_rule {
    QS_GRAD_NONE = 0,    /* no dy of its own: none is needed, or its reader writes it elsewhere */
    QS_GRAD_OWN,         /* a dy buffer of its own, of dy.bytes */
    QS_GRAD_SHARE_INPUT, /* its input's dy where the input has one (its backward is the identity in place,
                          * dy_alias), else one of its own of dy.bytes */
} qs_grad_rule;

/* What a node needs for one batch (qs_layer_impl.declare). Buffers start zeroed. */
typedef struct qs_node_decl {
    qs_buffer_decl out;                     /* y */
    qs_grad_rule grad;
    qs_buffer_decl dy;
    qs_buffer_decl saved[QS_MAX_NODE_SAVED];
} qs_node_decl;

/* What each node kind implements. Every function gets the model and the node index. */
typedef struct qs_layer_impl {
    const char *kind_name;     /* "Linear", "Conv2d", ... (PyTorch class names) */
    /* From the input nodes' shapes: set out_shape/out_ndim, declare params and buffers, fill
     * flops/param_count/bytes_saved_for_backward. Runs once at model build. */
    qs_status (*infer)(struct qs_model *m, qs_node *n);
    /* Initialise this node's parameters and buffers in host memory (PyTorch defaults). */
    void (*init)(struct qs_model *m, qs_node *n, float *host_params, void *host_buffers,
                 uint64_t seed);
    /* The buffers the node needs at batch m->batch (out_shape[0] = m->batch) on a backend with
     * facts f, without allocating anything: d arrives with the defaults (the output at
     * out_dtype; where the node needs a gradient, a dy of its own at grad_dtype; no saved
     * tensors); the layer declares its saved tensors and, where its gradient rule differs, sets
     * d->grad and d->dy. NULL: the defaults. */
    void (*declare)(const struct qs_model *m, const qs_node *n, const qs_mem_facts *f, qs_node_decl *d);
    /* Create the backend plans for the model's batch size and set n->workspace; no buffer is
     * bound yet (y, dy and saved are laid out after every node's setup). */
    qs_status (*setup)(struct qs_model *m, qs_node *n);
    /* After the buffers are bound (y, dy, saved[] point into the zeroed arenas): initialise
     * what the node keeps in them from the start (a unit scale). NULL: nothing. */
    qs_status (*bind)(struct qs_model *m, qs_node *n);
    qs_status (*forward)(struct qs_model *m, qs_node *n);
    /* Gradient w.r.t. inputs, into the input nodes' dy (see qs_model_grad_target). May be
     * NULL when the node has no differentiable input. */
    qs_status (*backward_data)(struct qs_model *m, qs_node *n);
    /* Gradient w.r.t. parameters into model->grads. NULL when the node has none. */
    qs_status (*backward_weights)(struct qs_model *m, qs_node *n);
    void (*teardown)(struct qs_model *m, qs_node *n);
} qs_layer_impl;

/* The parameter index of a GEMM node's weight: its own param[0], or the tied parameter. */
static inline int qs_node_weight_param(const qs_node *n) { return n->tied_param >= 0 ? n->tied_param : n->param[0]; }
/* Whether a node computes parameter gradients (owned or tied). */
static inline bool qs_node_has_weights(const qs_node *n) { return n->n_params > 0 || n->tied_param >= 0; }

/* Memory accounting categories (bytes), reported by qs_model_memory(). */
typedef struct qs_memory_report {
    size_t params, grads, optimizer, buffers, activations, activation_grads, saved, workspace;
    size_t labels;             /* the batch's labels and predictions on the backend */
    /* buffers: BN running statistics, and after setup also the step counter (qs_model.step_dev) */
} qs_memory_report;

/* An emulated slower device. Duty cycle (slowdown > 1): after every op the worker sleeps so
 * that its ops take `slowdown` times as long as they really do (sleeps of ≥ 1 ms; the
 * remainder carries over); slept_ms / op_ms give the slowdown applied. OS quota (cpu_threads >
 * 0, a cgroup CPU quota applied by the caller, slowdown then ≤ 1): the ops' wall time and the
 * process CPU time they used are recorded, and the slowdown applied is
 * op_ms × cpu_threads / cpu_ms (exact for a rank with one compute thread). */
typedef struct qs_emulation {
    double slowdown;           /* duty cycle; ≤ 1: off */
    double op_ms, slept_ms, debt_ms;
    int cpu_threads;           /* > 0: an OS quota is in force over this many compute threads */
    double cpu_ms;
} qs_emulation;


/* The GPU-busy meter (graph/busy.c): while on, an event pair brackets every op the model runs
 * (and what callers bracket with qs_model_busy_mark), so that the sum of the pairs' elapsed
 * times is the GPU time of the step's ops, gaps between ops excluded. */
typedef struct qs_busy_meter {
    void **ev;                 /* backend events, recorded in pairs */
    int cap, used;
    bool on;
} qs_busy_meter;

/* Replay of a model's training passes as captured backend graphs (graph/capture.c). */
typedef enum qs_pass { QS_PASS_FORWARD = 0, QS_PASS_BACKWARD = 1 } qs_pass;
typedef struct qs_capture {
    bool on;                   /* wanted (set before training): capture where possible */
    bool failed;               /* a capture failed (logged): every pass runs eagerly from then on */
    char failure[256];         /* then: which pass, and the backend's reason */
    void *graph[2];            /* per qs_pass: the captured training pass, or NULL */
    float loss_scale;          /* the loss scale graph[QS_PASS_BACKWARD] was captured with */
    bool warm[2];              /* per qs_pass: one ran op by op since the buffers were laid out */
    int64_t eager[2];          /* passes run op by op */
    int64_t replays[2];        /* passes run as a graph (the capturing pass included) */
} qs_capture;

typedef struct qs_model {
    char arch[32];             /* "cnn", "resnet18", ... */
    char config[256];          /* the build options, as "key=value ..." for checkpoints */
    qs_node *nodes;
    int n_nodes, cap_nodes;
    int logits_node;           /* node whose output is (N, classes) */
    int64_t num_classes;
    int64_t in_h, in_w, in_c;  /* per-sample input; in_h = in_w = 1 for flat inputs */
    int64_t label_len;         /* labels per sample: 1 for classifiers, T for language models
                                * (one next-token label per position); set by the builder */

    qs_table params;           /* trainable: weights, biases */
    qs_table buffers;          /* non-trainable state: BN running stats */

    /* runtime (after qs_model_setup) */
    qs_backend *be;
    qs_stream *stream;
    int64_t batch;
    void *param_data;          /* backend memory, params.bytes */
    void *grad_data;           /* same layout as param_data */
    void *buffer_data;         /* buffers.bytes */
    void *workspace;           /* the workspace arena: one op's scratch at a time */
    size_t workspace_bytes;
    qs_mem_facts facts;        /* of be, taken at qs_model_setup (the plan's and the layers' view) */
    struct qs_memory_plan *mem; /* the per-batch buffers' layout (graph/memory_plan.h), after setup */
    void *arena[QS_MEM_ARENA_COUNT]; /* its arenas on the backend (NULL where empty) */
    int32_t *labels;           /* (batch·label_len) on the backend */
    int32_t *predictions;      /* (batch·label_len) argmax of the logits, on the backend (accuracy) */
    void *grad_scratch;        /* per-op scratch for fan-in accumulation */
    bool training;
    uint64_t seed;
    int64_t step;              /* increments per training forward; feeds dropout and SR counters and
                                * the FP8 amax-history slot */
    int64_t *step_dev;         /* backend memory: `step`, written by each training forward (the
                                * counter captured graphs read: qs_sr.counter_at) */
    qs_capture capture;
    float loss_scale;          /* set by qs_model_backward: dlogits = (p - onehot)·loss_scale/batch */
    /* Quantization options of low-precision GEMM nodes (set before qs_model_setup):
     * grad_round_nearest rounds gradients to nearest instead of stochastically (harsher:
     * biased, to make accuracy differences between plans visible); weight_per_channel gives
     * INT8 weights one scale per output channel instead of one per tensor. */
    bool grad_round_nearest;
    bool weight_per_channel;
    /* FP8 scaling: 0 = each tensor's own amax (current scaling); N >= 1 = delayed scaling
     * from an amax history of N steps per FP8 tensor (core/backend.h qs_quant_delayed; the
     * histories are node memory, zero at setup, saved in checkpoints by
     * train/checkpoint_fp8.c). */
    int fp8_amax_history;
    bool fuse_casts;           /* set by qs_model_fuse: qs_model_insert_casts then fuses BF16 casts
                                * into the BatchNorms that feed them (qs_model_fuse_casts) */
    bool timing;               /* sync + time every op into node->time */
    qs_busy_meter busy;        /* GPU-busy events (qs_model_busy_start) */
    bool want_input_grad;      /* also compute d loss / d input into nodes[0].dy (tests) */
    /* Gradient hooks (data parallelism, src/parallel/grad_sync.c); NULL = none. grads_ready runs
     * after every node's backward (its parameter gradients are final); grads_done at the end
     * of qs_model_backward, which returns only after it. */
    qs_emulation emulation;    /* emulated slower device (set before training; off by default) */
    qs_status (*grads_ready)(void *ctx, int node);
    qs_status (*grads_done)(void *ctx);
    void *grads_ctx;
    qs_op_time optimizer_time;
    qs_op_time comm_wait_time;
    qs_logger *log;
} qs_model;

/* ---- accessors (src/dag/dag.c) ---- */
/* Where node `n` must write the gradient for its input slot `slot`: returns a pointer and
 * whether to accumulate (the input has several consumers and another one wrote first), or
 * NULL when the input needs no gradient. Backward visits consumers in descending order; the
 * first consumer of an input to run overwrites, the others accumulate. For a straight-through
 * cast that shares its input's gradient (dy_alias), the input is the target and is counted. */
void *qs_model_grad_target(qs_model *m, qs_node *n, int slot, bool *accumulate);

/* The node that reads node i's output, when exactly one input slot of one node does, else NULL. */
qs_node *qs_model_only_reader(const qs_model *m, int i);

/* The index of the node whose gradient buffer a reader of node i writes into: i, or — past
 * unfused straight-through casts (which share their input's gradient once set up) and fused
 * nodes (whose buffers are their owner's, alias_of) — the node that owns it. Valid before and
 * after qs_model_setup. */
int qs_model_grad_owner(const qs_model *m, int i);

/* Pointers into the tables. */
void *qs_model_param_ptr(qs_model *m, int param_index);
void *qs_model_grad_ptr(qs_model *m, int param_index);
void *qs_model_buffer_ptr(qs_model *m, int buffer_index);

/* Whether node n runs ops and owns buffers of its own (not fused into another node). */
static inline bool qs_node_runs(const qs_node *n) { return n->alias_of < 0 && n->fused_into < 0; }

#endif
