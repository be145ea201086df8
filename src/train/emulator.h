/* src/train/emulator.h — defines: a worker's emulated slowdown over a training run (an
 * emulated weaker device, BRIEF section 8), and the slowdown actually measured.
 *
 * Enforcement: a cgroup CPU quota on the whole process (parallel/cpu_quota.h; method "cgroup", or
 * "auto" where the cgroup file system is writable), else a duty cycle over the model's ops
 * (graph.h, qs_emulation; method "duty-cycle", or "auto" as the fallback).
 *
 * Measurement: the run starts unslowed. After QS_EMULATOR_WARMUP steps, `calibration_steps`
 * steps record this rank's compute time per sample (step time minus the wait for gradients,
 * over its local batch); then the emulation is switched on and, after another warm-up, the
 * same figure is recorded for the rest of the run. The measured slowdown is the ratio of the
 * two medians: what the emulation really cost the rank's compute, whatever the method.
 * Without a calibration window (calibration_steps 0, or a run too short for both windows)
 * the emulation is on from the first step and the measurement falls back to the ops' own
 * account (qs_emulation_measured: (op + sleep) / op for the duty cycle; op wall time ×
 * threads / CPU time under a quota, a lower bound: throttling outside the timed ops is not
 * seen). */
#ifndef QSYNC_TRAIN_EMULATOR_H
#define QSYNC_TRAIN_EMULATOR_H

#include <stdbool.h>
#include <stdint.h>
#include "qsync/log.h"
#include "qsync/status.h"
#include "core/stats.h"
#include "parallel/cpu_quota.h"
#include "graph/graph.h"

#define QS_EMULATOR_WARMUP 2          /* steps left out before each measured window */
#define QS_EMULATOR_MIN_EMULATED 10   /* emulated steps a calibrated measurement needs */

typedef struct qs_emulator {
    double slowdown;          /* asked; ≤ 1: no emulation (the emulator does nothing) */
    char method[16];          /* asked: "auto", "cgroup", "duty-cycle" */
    int threads;              /* compute threads the quota covers */
    int rank;                 /* for messages */
    int64_t on_after;         /* switched on after this many steps of the run (0: from the start) */
    bool on;
    const char *how;          /* "cgroup-quota", "duty-cycle", or "none" while off */
    qs_cpu_quota quota;
    qs_samples before, after; /* per-sample compute ms: calibration window, emulated steps */
} qs_emulator;

/* Prepare the emulation of one rank for a run of `steps` steps. Switches it on at once (see
 * qs_emulator_start) unless a calibration window fits: calibration_steps > 0 and steps ≥
 * 2·QS_EMULATOR_WARMUP + calibration_steps + QS_EMULATOR_MIN_EMULATED. */
qs_status qs_emulator_init(qs_emulator *e, double slowdown, const char *method, int threads, int rank,
                           int64_t calibration_steps, int64_t steps, qs_model *m, const qs_logger *log);
/* After the run's step `step_in_run` (1-based): record its compute time per sample, and at
 * the end of the calibration window switch the emulation on. */
qs_status qs_emulator_record(qs_emulator *e, int64_t step_in_run, double compute_ms, int64_t local_batch, qs_model *m,
                             const qs_logger *log);
/* The slowdown actually measured so far (see above; 1 when none is emulated). *calibrated
 * (may be NULL) tells whether it is the calibrated ratio. */
double qs_emulator_measured(qs_emulator *e, const qs_model *m, bool *calibrated);
/* Release the quota (if any) and the samples. */
void qs_emulator_free(qs_emulator *e);

#endif
