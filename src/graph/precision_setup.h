/* src/graph/precision_setup.h — defines: applying a resolved precision assignment (which
 * precision each GEMM-like layer runs at, and the quantization options) to a model: its
 * validation against the model's layers and a backend, setting the nodes, inserting the
 * quantizing casts (graph/precision.h), and the report of a model's precisions. A plan file
 * (io/plan_file.h) or a uniform --precision resolve to a qs_precision_assignment; this module
 * knows nothing of files.
 *
 * Order of use: build → qs_model_finalize → qs_model_fuse → qs_precision_setup (or
 * qs_precision_assign + qs_model_insert_casts) → qs_model_setup.
 *
 * Errors (each message names the origin of the assignment and what to do):
 *   QS_ERR_NOT_FOUND    a layer the model does not have (a few valid names are listed)
 *   QS_ERR_INVALID_ARG  a layer whose precision cannot be chosen (e.g. a BatchNorm2d)
 *   QS_ERR_UNSUPPORTED  a precision the backend cannot run, or one it only emulates when
 *                       allow_emulated is false */
#ifndef QSYNC_GRAPH_PRECISION_SETUP_H
#define QSYNC_GRAPH_PRECISION_SETUP_H

#include <stdbool.h>
#include <cjson/cJSON.h>
#include "core/backend.h"
#include "graph/graph.h"

/* Gradient rounding and INT8 weight-scale granularity of low-precision GEMMs
 * (qs_model.grad_round_nearest / qs_model.weight_per_channel). UNSET: not given. */
typedef enum qs_grad_rounding { QS_GRAD_ROUND_UNSET = -1, QS_GRAD_ROUND_STOCHASTIC = 0, QS_GRAD_ROUND_NEAREST } qs_grad_rounding;
typedef enum qs_weight_scales { QS_WEIGHT_SCALES_UNSET = -1, QS_WEIGHT_SCALES_TENSOR = 0, QS_WEIGHT_SCALES_CHANNEL } qs_weight_scales;

/* "stochastic"/"nearest" and "tensor"/"channel"; false if unknown. */
bool qs_grad_rounding_parse(const char *s, qs_grad_rounding *out);
bool qs_weight_scales_parse(const char *s, qs_weight_scales *out);
const char *qs_grad_rounding_name(qs_grad_rounding r);   /* "stochastic", "nearest", "unset" */
const char *qs_weight_scales_name(qs_weight_scales w);   /* "tensor", "channel", "unset" */
/* FP8 scaling: "current" → 0, "delayed" → QS_FP8_AMAX_HISTORY_DEFAULT, "delayed:N" → N
 * (1..QS_FP8_AMAX_HISTORY_MAX) steps of amax history; false if malformed. */
#define QS_FP8_AMAX_HISTORY_DEFAULT 16
#define QS_FP8_AMAX_HISTORY_MAX 1024
bool qs_fp8_scaling_parse(const char *s, int *history);

/* One layer's precision: the node named `name`. */
typedef struct qs_layer_prec {
    char name[QS_NAME_MAX];
    qs_precision prec;
} qs_layer_prec;

/* What one model's selectable layers run at: layers[i] by name, every other selectable layer
 * at default_prec, and the options (UNSET: the defaults, stochastic and tensor). A view: the
 * strings and layers belong to whoever made it (a plan: qs_plan_assignment). */
typedef struct qs_precision_assignment {
    const char *origin;          /* for messages: a plan's path, or "--precision int8" */
    bool uniform;                /* a uniform precision: messages name the origin alone */
    qs_precision default_prec;
    const qs_layer_prec *layers;
    int n_layers;
    qs_grad_rounding grad_rounding;
    qs_weight_scales weight_scales;
} qs_precision_assignment;

/* The assignment putting every selectable layer at p; origin "--precision <p>" (held in
 * *buf, of at least 64 bytes). */
qs_precision_assignment qs_precision_uniform(qs_precision p, char *buf, size_t cap);

/* Check a against m's layer names (each must exist and be selectable) and, when be is not
 * NULL, against be's support of every precision some layer would get (emulated ones only
 * with allow_emulated). */
qs_status qs_precision_check(const qs_precision_assignment *a, const qs_model *m, qs_backend *be, bool allow_emulated);

/* qs_precision_check, then set node->prec of every selectable node and the options
 * (grad_round_nearest, weight_per_channel). m is unchanged on failure. Call before
 * qs_model_insert_casts / qs_model_setup. */
qs_status qs_precision_assign(const qs_precision_assignment *a, qs_model *m, qs_backend *be, bool allow_emulated);

/* ---- the precision set-up of a run (train, eval, profile, sensitivity, simulate) ---- */
typedef struct qs_precision_options {
    qs_precision uniform;            /* used when assignment is NULL */
    const qs_precision_assignment *assignment; /* NULL: uniform over every selectable layer */
    bool allow_emulated;
    qs_grad_rounding grad_rounding;  /* UNSET: the assignment's, else stochastic */
    qs_weight_scales weight_scales;  /* UNSET: the assignment's, else tensor */
    int fp8_amax_history;            /* qs_model.fp8_amax_history (0: current scaling) */
} qs_precision_options;

/* Defaults: uniform fp32, no assignment, emulation refused, options unset. */
void qs_precision_options_default(qs_precision_options *o);

/* Apply o to m for backend be (qs_precision_assign, a uniform precision included), set the
 * options, then insert the quantizing casts (qs_model_insert_casts). Call after qs_model_fuse
 * and before qs_model_setup. */
qs_status qs_precision_setup(qs_model *m, qs_backend *be, const qs_precision_options *o);

/* Summary of m's precisions on be: {"counts": {"fp32": 2, "int8": 2}, "support": {"int8":
 * "native", ...} (the precisions in use), "native": [...], "emulated": [...],
 * "grad_rounding", "weight_scales", "layers": {"conv1": "int8", ...}}. NULL on OOM. */
cJSON *qs_precision_report_json(const qs_model *m, qs_backend *be);
/* One line such as "int8 ×2 (native), fp32 ×2 (native); gradients stochastic, weight scales
 * per tensor" into buf. */
void qs_precision_report_line(const qs_model *m, qs_backend *be, char *buf, size_t cap);

#endif
