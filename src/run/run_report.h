/* src/run/run_report.h — defines: `qsync run`'s report (rank 0): the plan, every arm's runs
 * (per worker the measured median step against the plan's prediction, throughput, memory, test
 * accuracy, final loss), and the comparisons against the base arm (labelled by the base
 * precision, "fp32" on a CPU, "bf16" on a GPU: qs_run_arm_label): the gap closure
 * (T_base − T_qsync)/(T_base − T_ideal) from the median synchronized iterations, each arm's
 * test accuracy paired by seed against the base arm's, and each arm's loss curve against the
 * base arm's at the same steps (mean |Δloss| over the logged steps, paired by seed). Arms, files
 * and report keys carry the arms' labels. Format: docs/RUN.md.
 *
 * Use: qs_run_report_init, qs_run_report_add per finished run, qs_run_report_finish (the
 * figures, from the runs and their metrics files), then qs_run_report_json (the document) and
 * qs_run_report_print (the text) read the same figures. */
#ifndef QSYNC_RUN_RUN_REPORT_H
#define QSYNC_RUN_RUN_REPORT_H

#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>

#include "io/plan_file.h"
#include "qsync/status.h"
#include "run/run_job.h"

/* What the report takes from one worker of a trainer's per-worker report. */
typedef struct qs_run_worker_figures {
    int rank;
    double median_step_ms, memory_bytes; /* NAN when not reported */
} qs_run_worker_figures;

/* One training run of one arm and seed. */
typedef struct qs_run_entry {
    qs_run_arm arm;
    uint64_t seed;
    char metrics[4200];     /* its metrics file (JSON lines) */
    double test_accuracy, test_loss, final_loss, images_per_s, train_s;
    double synchronized_ms; /* the largest median step time over the workers */
    cJSON *workers;         /* the trainer's per-worker report (owned), copied into the report document */
    qs_run_worker_figures *figures; /* read from it once (owned) */
    int n_figures;
} qs_run_entry;

/* One arm's figures (qs_run_report_finish). */
typedef struct qs_run_arm_figures {
    int runs;
    double synchronized_ms;    /* the median over its runs (NAN without runs) */
    double predicted_ms;       /* the plan's prediction (NAN where it has none) */
    double prediction_error;   /* predicted / measured − 1 (NAN without either) */
    double mean_test_accuracy, mean_images_per_s, mean_final_loss; /* NAN without runs */
    double gap_closure;        /* (T_base − T_arm)/(T_base − T_ideal) (NAN: not computable) */
    bool paired;               /* runs paired by seed with the base arm's */
    double *accuracy_diff;     /* per paired seed: its accuracy minus the base arm's (owned) */
    int n_paired;
    double accuracy_diff_mean;
    double curve_distance;     /* mean loss-curve distance to the base arm (NAN: no common steps) */
} qs_run_arm_figures;

/* A planned device type's summary (a plan section that lists precisions). */
typedef struct qs_run_type_figures {
    const qs_plan_section *section;   /* borrowed from the report's plan */
    qs_precision at[QS_PREC_COUNT];   /* the precisions its layers are at, in order of first appearance */
    int count[QS_PREC_COUNT];         /* layers at at[i] */
    int n_at;
    double share_above_low;           /* share of its layers above the low precision (NAN: none) */
    double omega;                     /* the plan's Σω (NAN: not predicted) */
    const char *solver;               /* the plan's solver, "" or "given" */
} qs_run_type_figures;

/* The plan's prediction for one worker beside the qsync arm's first measured run. */
typedef struct qs_run_worker_prediction {
    int rank;
    const char *type;                 /* borrowed from the plan ("" when not given) */
    double predicted_ms, measured_ms, error, predicted_bytes, measured_bytes;
} qs_run_worker_prediction;

typedef struct qs_run_report {
    const qs_run_config *c;
    qs_plan plan;           /* the plan trained (owned; qs_run_report_set_plan) */
    bool has_plan;
    qs_run_entry *e;
    int n, cap;
    /* qs_run_report_finish: */
    qs_run_arm_figures arm[QS_ARM_COUNT];
    qs_run_type_figures *types;
    int n_types;
    qs_run_worker_prediction *workers;
    int n_workers;
    bool has_spread;        /* the base arm against itself over consecutive seeds (≥ 2 seeds) */
    int spread_pairs;
    double spread_distance, spread_accuracy;
} qs_run_report;

/* A run's logged training loss from the "step" records of its metrics file: step[i], loss[i],
 * train_s[i] (training time so far), n entries. */
typedef struct qs_run_curve {
    double *step, *loss, *train_s;
    int n;
} qs_run_curve;

qs_status qs_run_curve_read(const char *path, qs_run_curve *c);
void qs_run_curve_free(qs_run_curve *c);

void qs_run_report_init(qs_run_report *r, const qs_run_config *c);
/* Give the report the plan the qsync arm trains (moved: *plan is zeroed). */
void qs_run_report_set_plan(qs_run_report *r, qs_plan *plan);
/* Record a finished run (copies what it needs from res; res->workers is duplicated and read). */
qs_status qs_run_report_add(qs_run_report *r, qs_run_arm arm, uint64_t seed, const char *metrics,
                            const qs_train_result *res);
/* The report's figures; reads the runs' metrics files for the loss-curve comparison. */
qs_status qs_run_report_finish(qs_run_report *r);
void qs_run_report_free(qs_run_report *r);

/* The report document (format "qsync-run-report", version 1; caller deletes; NULL when out of
 * memory) of a finished report. */
cJSON *qs_run_report_json(const qs_run_report *r);
/* The report as text: the plan per slower type, a table of the arms, the comparisons. */
void qs_run_report_print(const qs_run_report *r, FILE *f);

/* Draw the training loss against training time (left) and against steps (right) of every
 * arm's first seed into png with gnuplot (its data and script beside the report). */
qs_status qs_run_plot(const qs_run_report *r, const char *png);

#endif
