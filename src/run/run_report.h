/* src/run/run_report.h — defines: `qsync run`'s report (rank 0): the plan, every arm's runs
 * (per worker the measured median step against the plan's prediction, throughput, memory, test
 * accuracy, final loss), and the comparisons against the base arm (labelled by the base
 * precision, "fp32" on a CPU, "bf16" on a GPU: qs_run_arm_label): the gap closure
 * (T_base − T_qsync)/(T_base − T_ideal) from the median synchronized iterations, each arm's
 * test accuracy paired by seed against the base arm's, and each arm's loss curve against the
 * base arm's at the same steps (mean |Δloss| over the logged steps, paired by seed). Arms, files
 * and report keys carry the arms' labels. Format: docs/RUN.md. */
#ifndef QSYNC_RUN_RUN_REPORT_H
#define QSYNC_RUN_RUN_REPORT_H

#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>

#include "qsync/status.h"
#include "run/run_job.h"

/* One training run of one arm and seed. */
typedef struct qs_run_entry {
    qs_run_arm arm;
    uint64_t seed;
    char metrics[4200];     /* its metrics file (JSON lines) */
    double test_accuracy, test_loss, final_loss, images_per_s, train_s;
    double synchronized_ms; /* the largest median step time over the workers */
    cJSON *workers;         /* the trainer's per-worker report (owned) */
} qs_run_entry;

typedef struct qs_run_report {
    const qs_run_config *c;
    const cJSON *plan;      /* the plan document (borrowed; may be NULL before planning) */
    qs_run_entry *e;
    int n, cap;
} qs_run_report;

/* A run's logged training loss from the "step" records of its metrics file: step[i], loss[i],
 * train_s[i] (training time so far), n entries. */
typedef struct qs_run_curve {
    double *step, *loss, *train_s;
    int n;
} qs_run_curve;

qs_status qs_run_curve_read(const char *path, qs_run_curve *c);
void qs_run_curve_free(qs_run_curve *c);

void qs_run_report_init(qs_run_report *r, const qs_run_config *c, const cJSON *plan);
/* Record a finished run (copies what it needs from res; res->workers is duplicated). */
qs_status qs_run_report_add(qs_run_report *r, qs_run_arm arm, uint64_t seed, const char *metrics,
                            const qs_train_result *res);
/* The report document (format "qsync-run-report", version 1; caller deletes). Reads the runs'
 * metrics files for the loss-curve comparison. */
qs_status qs_run_report_finish(const qs_run_report *r, cJSON **doc);
void qs_run_report_free(qs_run_report *r);

/* The report as text: the plan per slower type, a table of the arms, the comparisons. */
void qs_run_report_print(const cJSON *doc, FILE *f);

/* Draw the training loss against training time (left) and against steps (right) of every
 * arm's first seed into png with gnuplot (its data and script beside the report). */
qs_status qs_run_plot(const qs_run_report *r, const char *png);

#endif
