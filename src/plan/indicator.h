/* src/plan/indicator.h — defines: the per-layer, per-precision degradation indicator ω_l(b)
 * that the allocator minimises (BRIEF section 4; docs/INDICATOR.md has the formulas and their
 * derivation).
 *
 * Two steps:
 *  1. qs_indicator_collect: over `batches` mini-batches at full precision (FP32 training-mode
 *     forward + backward of the mean loss, no optimizer step: the weights stay fixed), gather
 *     per precision-selectable layer (Linear, Conv2d) the statistics of its input X, weight W,
 *     output Y, output gradient dY and weight gradient dW, and the mean squared rounding error
 *     each precision's quantizer (the project's own: RNE for X and W, stochastic rounding for
 *     dY) actually makes on those tensors.
 *  2. qs_indicator_omega: ω_l(b) for one method (GVAR, QSync's exact form, WVAR, HESS-proxy,
 *     random) from those statistics; ω_l(fp32) = 0 for every method.
 * qs_indicator_to_json writes the versioned document ("qsync-indicator", version 1). */
#ifndef QSYNC_PLAN_INDICATOR_H
#define QSYNC_PLAN_INDICATOR_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "graph/graph.h"
#include "qsync/dtype.h"
#include "qsync/status.h"

#include "io/indicator_file.h" /* QS_INDICATOR_FORMAT, QS_INDICATOR_VERSION */

typedef enum qs_indicator_method {
    QS_IND_GVAR = 0, /* BRIEF's bi-directional gradient-variance form (default) */
    QS_IND_QSYNC,    /* QSync's exact formula (reference notes section 3.2) */
    QS_IND_WVAR,     /* ablation: relative weight quantization noise only */
    QS_IND_HESS,     /* ablation: Fisher-trace proxy × weight perturbation variance */
    QS_IND_RANDOM,   /* ablation: seeded random, monotone in precision */
    QS_IND_COUNT
} qs_indicator_method;

/* "gvar", "qsync", "wvar", "hess", "random" (NULL for a value out of range). */
const char *qs_indicator_method_name(qs_indicator_method m);
/* Parse one of the names above; false (out untouched) for anything else. */
bool qs_indicator_method_parse(const char *s, qs_indicator_method *out);

/* Statistics of one precision-selectable layer. Element counts are per batch (the batch
 * dimension included); mean squares, variances and norms are means over the batches; amax
 * values are maxima over the batches. */
typedef struct qs_layer_stats {
    int node; /* index in the model */
    char name[QS_NAME_MAX];
    const char *kind;      /* "Linear" / "Conv2d" */
    int depth;             /* d_l: position on the longest path of selectable layers from the input, 1..L-1 */
    int bfs_depth;         /* QSync's depth: BFS level of the node from the input node */
    int64_t n_x, n_w, n_y; /* element counts of X, W, Y (= dY) */
    int64_t k_fwd;         /* reduction length of one output: Linear in_features, Conv2d Cin·k·k */
    int64_t k_bwd_data;    /* terms per dX element: Linear out_features, Conv2d Cout·k²/stride² */
    int64_t k_bwd_weights; /* terms per dW element: Linear batch, Conv2d batch·Hout·Wout */
    bool has_dx;           /* the layer's backward computes dX (its input needs a gradient) */
    double ex2, ew2, ey2, edy2, edw2;        /* mean squares E[T²] */
    double var_x, var_w, var_dy, var_dw;     /* variances E[T²] − E[T]² */
    double norm_x, norm_w;                   /* Frobenius norms ‖X‖, ‖W‖ (not squared) */
    double amax_x, amax_w, amax_dy;          /* max |T| */
    double amax_x_mean, amax_w_mean;         /* mean over batches of max |T| (QSync's S·127) */
    double espread_x, espread_w, espread_dy; /* exponent spread log2(amax / rms) */
    double grad_norm_mean;                   /* ‖mean over batches of dW‖ (QSync's n_G) */
    double grad_amax_mean;                   /* max |mean dW| (QSync's e_G source) */
    double grad_sq_norm;                     /* mean over batches of ‖dW‖² (empirical Fisher trace of W) */
    /* measured mean squared rounding error per element, per precision (0 for fp32):
     * X and W with the forward rounding (RNE), dY with the gradient rounding (SR) */
    double qvar_x[QS_PREC_COUNT], qvar_w[QS_PREC_COUNT], qvar_dy[QS_PREC_COUNT];
} qs_layer_stats;

typedef struct qs_indicator {
    qs_layer_stats *layers; /* in topological order */
    int n_layers;
    int L;     /* 1 + max depth (the loss head is stage L) */
    int L_bfs; /* QSync's L: max BFS depth over selectable layers */
    int batches;
    int64_t batch;
} qs_indicator;

/* Supplies the next batch: x gets batch·in_h·in_w·in_c floats (NHWC), y batch·label_len labels. */
typedef qs_status (*qs_indicator_batch_fn)(void *ctx, float *x, int32_t *y);

/* Run `batches` (≥ 1) FP32 training-mode forward+backward passes of the set-up model m (every
 * selectable node must be at FP32: the statistics are those of full precision) on batches from
 * next(ctx), without optimizer steps, and fill *out (caller frees with qs_indicator_free). The
 * model's parameters are not changed; its BatchNorm running statistics and step count are.
 * seed keys the stochastic rounding used to measure gradient rounding errors. */
qs_status qs_indicator_collect(qs_model *m, int batches, qs_indicator_batch_fn next, void *ctx, uint64_t seed,
                               qs_indicator *out);
void qs_indicator_free(qs_indicator *ind);

/* ω of layer `li` of ind for every precision (omega[p], p < QS_PREC_COUNT; omega[FP32] = 0)
 * by `method`; gamma weighs the forward term (GVAR, QSync), seed the random method. vfwd/vbwd
 * (may be NULL) receive the forward/backward variance proxies the method used (0 where it has
 * none). */
void qs_indicator_omega(const qs_indicator *ind, int li, qs_indicator_method method, double gamma, uint64_t seed,
                        double omega[QS_PREC_COUNT], double vfwd[QS_PREC_COUNT], double vbwd[QS_PREC_COUNT]);

/* Description of the run written into the document. */
typedef struct qs_indicator_meta {
    const char *model, *config, *data;
    int64_t batch;
    int batches;
    qs_indicator_method method;
    double gamma;
    uint64_t seed;
    const char *checkpoint; /* NULL: freshly initialised weights */
} qs_indicator_meta;

/* The keys an analysis document (this one, plan/sensitivity.h's) starts with: format, version,
 * model, config and data ("" for NULL), checkpoint (null for NULL: fresh weights). */
void qs_analysis_doc_head(cJSON *doc, const char *format, double version, const char *model, const char *config,
                          const char *data, const char *checkpoint);

/* The versioned JSON document (docs/INDICATOR.md); NULL when out of memory. */
cJSON *qs_indicator_to_json(const qs_indicator *ind, const qs_indicator_meta *meta);

#endif
