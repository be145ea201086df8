/* src/io/plan_predictions.h — defines: the "predictions" of a plan file, what `qsync plan`
 * predicted for its plan (docs/PLANS.md "The output"), read with the plan (qs_plan.predictions).
 *
 * "predictions" is free-form for a plan written by hand: keys other than those below are left
 * alone. The keys qsync plan writes are typed when present (QS_ERR_FORMAT naming the plan, the
 * JSON path, e.g. `predictions.types["slow"].omega`, and the value): numbers finite (times,
 * Σω and bytes >= 0), counts whole, strings strings, target_met and the flags booleans; "types"
 * an object of objects, "workers" an array of objects, "calibration" an object (not read). */
#ifndef QSYNC_IO_PLAN_PREDICTIONS_H
#define QSYNC_IO_PLAN_PREDICTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "qsync/status.h"

#define QS_PLAN_PRED_LABEL_MAX 64 /* device-type labels (as QS_PLAN_TYPE_MAX) */

/* One device type's entry ("predictions.types.<type>"); NAN / -1 / "" where not given. */
typedef struct qs_plan_type_prediction {
    char type[QS_PLAN_PRED_LABEL_MAX];
    double omega;                   /* Σω of its plan */
    int64_t quantized_layers;       /* layers below the base */
    char solver[16];                /* "greedy", "exact"; "" for the fastest type */
    double model_ms, model_target_ms, base_synchronized_ms, greedy_omega, exact_omega, greedy_gap;
    double memory_cap_bytes;
    int64_t tightened;
    bool exact_optimal, best_effort;
} qs_plan_type_prediction;

/* One worker's entry ("predictions.workers[i]"). */
typedef struct qs_plan_worker_prediction {
    int64_t rank;                   /* -1 when not given */
    char type[QS_PLAN_PRED_LABEL_MAX]; /* "" when not given */
    double iteration_ms, memory_bytes; /* NAN when not given */
} qs_plan_worker_prediction;

typedef struct qs_plan_predictions {
    bool present;                   /* the plan has "predictions" */
    double target_ms, target_asked_ms, synchronized_ms, replayed_ms; /* NAN when not given */
    char target_source[128], base_precision[16];
    char fastest_type[QS_PLAN_PRED_LABEL_MAX];
    bool has_fastest_type;
    bool target_met;                /* false when not given */
    int64_t rounds;                 /* -1 when not given */
    qs_plan_type_prediction *types; /* in file order (owned) */
    int n_types;
    qs_plan_worker_prediction *workers; /* owned */
    int n_workers;
} qs_plan_predictions;

/* The "predictions" object obj of plan `origin` (NULL: the plan has none) into *out (free with
 * qs_plan_predictions_free; zeroed on failure). */
qs_status qs_plan_predictions_read(const cJSON *obj, const char *origin, qs_plan_predictions *out);
void qs_plan_predictions_free(qs_plan_predictions *p);
/* The entry of device type `type`, or NULL. */
const qs_plan_type_prediction *qs_plan_predictions_type(const qs_plan_predictions *p, const char *type);

#endif
