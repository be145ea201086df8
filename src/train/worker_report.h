/* src/train/worker_report.h — defines: the end-of-run report of every worker (rank), gathered
 * from all ranks: its device type, emulated slowdown asked and measured (marked as emulation),
 * step times, local batch, wait for gradients and precisions. */
#ifndef QSYNC_TRAIN_WORKER_REPORT_H
#define QSYNC_TRAIN_WORKER_REPORT_H

#include <stdbool.h>
#include <cjson/cJSON.h>
#include "qsync/log.h"
#include "qsync/status.h"
#include "parallel/comm.h"
#include "qsync/dtype.h"

/* One rank's own figures. */
typedef struct qs_worker_figures {
    double slowdown_asked;        /* 1 = not emulated */
    double slowdown_measured;     /* train/emulator.h */
    bool calibrated;              /* measured against the calibration window (else the ops' account) */
    const char *emulation_method; /* "cgroup-quota", "duty-cycle", "mps", "green-context", "none" */
    double sm_percent;            /* a GPU worker's MPS SM share (0 = none) */
    double sm_count;              /* SMs of a GPU worker's green-context partition (0 = none) */
    double mean_step_ms, median_step_ms;
    double local_batch;
    double comm_wait_ms;          /* wait for the gradient all-reduce, mean per step */
    double memory_bytes;          /* what the backend has allocated for training */
    int precision_counts[QS_PREC_COUNT]; /* layers at each precision */
} qs_worker_figures;

/* Collective over the `world` ranks of comm (NULL for one process): gather every rank's
 * figures, return a JSON array with one object per rank (rank, type, emulated_slowdown,
 * emulated_slowdown_measured, emulation_method, mps_sm_percent under an MPS SM share, sm_count
 * on a green-context partition,
 * emulated_slowdown_basis when emulated,
 * step_ms, median_step_ms, local_batch, comm_wait_ms, precisions, * memory_bytes) and, when `log_lines`, log a line per rank (and one per emulated rank) at info
 * level. types: every rank's
 * device-type label (world entries) or NULL; own_type: this rank's, used when types is NULL. */
qs_status qs_worker_report_gather(qs_comm *comm, int rank, int world, double timeout_s, const qs_worker_figures *mine,
                                  const char *const *types, const char *own_type, const qs_logger *log, bool log_lines,
                                  cJSON **out);

#endif
