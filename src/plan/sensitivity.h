/* src/plan/sensitivity.h — defines: the direct check of the indicator ω (indicator.h):
 * quantize one layer at a time, measure how far the loss and the gradient move from full
 * precision on fixed batches, and how well each indicator method ranks those deviations
 * (Spearman's rho). docs/INDICATOR.md, "Checking the indicator", has the definitions.
 *
 * For every precision-selectable layer l (Linear, Conv2d) and precision p the model is built
 * again exactly as training builds it (qs_models_build_config from the model's arch and config,
 * qs_model_fuse, qs_precision_setup with a plan listing only l at p — the quantizing casts are
 * the engine's own — then qs_model_setup with the model's seed), given the reference model's
 * weights and buffers, and run forward + backward of the mean loss on every batch, without
 * optimizer steps. Each build starts at step 0, so its stochastic gradient rounding draws with
 * the same keys and counters as every other build. The reference is the same run with every
 * layer at FP32. */
#ifndef QSYNC_PLAN_SENSITIVITY_H
#define QSYNC_PLAN_SENSITIVITY_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "graph/graph.h"
#include "plan/indicator.h"
#include "qsync/dtype.h"
#include "qsync/status.h"

#define QS_SENSITIVITY_FORMAT "qsync-sensitivity"
#define QS_SENSITIVITY_VERSION 1

/* The fixed batches every measurement runs on, one after another. */
typedef struct qs_sens_batches {
    int count;        /* ≥ 1 */
    int64_t batch;    /* samples per batch: the model's batch size */
    const float *x;   /* count·batch·in_h·in_w·in_c floats (NHWC), batch after batch */
    const int32_t *y; /* count·batch·label_len labels (the model's label_len) */
} qs_sens_batches;

/* Called after each layer's precisions were measured: layer index (0-based), the number of
 * layers, its name and the seconds since the measurement began. */
typedef void (*qs_sens_progress_fn)(void *ctx, int layer, int n_layers, const char *name, double elapsed_s);

typedef struct qs_sensitivity_options {
    const qs_precision *precisions; /* NULL (or n_precisions 0): every precision other than fp32
                                     * the backend runs natively, plus the emulated ones when
                                     * allow_emulated */
    int n_precisions;
    bool allow_emulated;            /* permit precisions the backend only emulates */
    double gamma;                   /* the indicator's forward weight (gvar, qsync) */
    uint64_t seed;                  /* the indicator's gradient-rounding draws, the random method */
    qs_sens_progress_fn progress;   /* may be NULL */
    void *progress_ctx;
} qs_sensitivity_options;

/* Defaults: the backend's native precisions, emulation refused, gamma 4, seed 1, no progress. */
void qs_sensitivity_options_default(qs_sensitivity_options *o);

/* One measurement: layer `layer` alone at `prec`. */
typedef struct qs_sens_point {
    int layer;              /* index into qs_sensitivity.ind.layers */
    qs_precision prec;
    double loss_dev;        /* mean over batches of |L_q − L_fp32| (L: the batch's mean loss) */
    double loss_dev_signed; /* mean over batches of L_q − L_fp32 */
    double grad_dev;        /* mean over batches of ‖g_q − g_fp32‖² / ‖g_fp32‖², g: every parameter's gradient */
    double omega[QS_IND_COUNT]; /* ω_layer(prec) by each indicator method */
} qs_sens_point;

/* Spearman's rho between ω and the measured deviations, per indicator method; NaN where it is
 * undefined (fewer than 2 points, or ω or the deviation constant over them). */
typedef struct qs_sens_corr {
    int points;
    double loss[QS_IND_COUNT]; /* ρ(ω, loss_dev) */
    double grad[QS_IND_COUNT]; /* ρ(ω, grad_dev) */
} qs_sens_corr;

typedef struct qs_sensitivity {
    qs_indicator ind;                 /* the indicator's statistics on the same batches and weights */
    qs_precision precs[QS_PREC_COUNT];
    int n_precs;
    qs_sens_point *points;            /* ind.n_layers × n_precs, layer-major: point l·n_precs + k is
                                       * layer l at precs[k] */
    int n_points;
    int batches;
    double ref_loss;                  /* mean over batches of the FP32 mean loss */
    double ref_grad_sq_norm;          /* mean over batches of ‖g_fp32‖² */
    bool grad_round_nearest;          /* the quantization options of the measured runs */
    bool weight_per_channel;
    double gamma;
    uint64_t seed;
    qs_sens_corr all;                 /* over every (layer, precision) point */
    qs_sens_corr per_prec[QS_PREC_COUNT]; /* [k]: across layers at precs[k] */
} qs_sensitivity;

/* Measure m's sensitivity on batches b (see the top of this file) and fill *out (free with
 * qs_sensitivity_free). m: a model of the zoo (models/models.h), set up on its backend with
 * batch size b->batch, every selectable layer at FP32 and no casts; its weights, buffers and
 * quantization options (grad_round_nearest, weight_per_channel) are what every run uses; m
 * itself is not changed. Precisions are checked against m's backend before anything runs
 * (QS_ERR_UNSUPPORTED for one it cannot run, or only emulates when !allow_emulated). fp32 may
 * be listed: its deviations are exactly 0. o NULL: qs_sensitivity_options_default. */
qs_status qs_sensitivity_measure(qs_model *m, const qs_sens_batches *b, const qs_sensitivity_options *o,
                                 qs_sensitivity *out);
void qs_sensitivity_free(qs_sensitivity *s);

/* Description of the run written into the document. */
typedef struct qs_sensitivity_meta {
    const char *model, *config, *data;
    const char *checkpoint; /* NULL: freshly initialised weights */
    uint64_t data_seed;     /* the seed that chose the batches */
} qs_sensitivity_meta;

/* The versioned JSON document ("qsync-sensitivity", version 1; docs/INDICATOR.md); undefined
 * correlations are null. NULL when out of memory. */
cJSON *qs_sensitivity_to_json(const qs_sensitivity *s, const qs_sensitivity_meta *meta);

#endif
