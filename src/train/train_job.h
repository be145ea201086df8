/* src/train/train_job.h — defines: the training job of `qsync train` as its files share it (not
 * part of the train interface, train/trainer.h): everything the loop owns, and the steps of a run
 * by file — building the job (train_setup.c), splitting the batch (train_split.c), checkpoints
 * (train_checkpoints.c), between steps (train_schedule.c), records (train_records.c) and
 * measurements (train_measure.c); the loop itself is trainer.c. */
#ifndef QSYNC_TRAIN_TRAIN_JOB_H
#define QSYNC_TRAIN_TRAIN_JOB_H

#include "core/stats.h"
#include "data/dataset.h"
#include "optim/loss_scale.h"
#include "parallel/batch_balance.h"
#include "parallel/grad_sync.h"
#include "train/emulator.h"
#include "train/metrics.h"
#include "train/trainer.h"

/* Everything the loop owns, so that one cleanup path frees it. */
typedef struct qs_train_job {
    qs_dataset train, test;
    qs_backend *be;
    qs_model *m;
    qs_optimizer opt;
    bool opt_ready;
    qs_loader loader;
    bool loader_ready;
    qs_metrics metrics;
    qs_loss_scaler scaler;
    qs_plan plan;               /* the --plan file, if any */
    qs_grad_sync sync;          /* gradient averaging over the ranks */
    int rank, world;
    int64_t local_batch;
    int64_t *split;             /* every rank's local batch (world entries) */
    bool dynamic;               /* dynamic batching: split re-measured by `balance` */
    qs_batch_balance balance;
    int64_t rebalances;         /* splits changed by dynamic batching */
    qs_emulator emu;            /* this worker's emulated slowdown (train/emulator.h) */
    qs_samples step_ms;         /* this run's step times, for the medians of the report */
    float *x;
    int32_t *y;
} qs_train_job;

/* Training-loss window between two step records. */
typedef struct qs_train_window {
    int64_t n, correct;
    double loss, t0;
} qs_train_window;

/* trainer.c: the learning-rate warm-up of a run of `total` steps (the loop's schedule and the
 * configuration log line). */
int64_t qs_train_warmup_steps(const qs_train_config *c, int64_t total);

/* train_setup.c: free what j holds (a zeroed or partly built job too); load both data splits
 * (subsets keep the first N samples); build the model, backend, precisions, batch split,
 * optimizer, gradient sync and loader into j (*mo: the model's resolved options). */
void qs_train_job_free(qs_train_job *j);
qs_status qs_train_load_data(const qs_train_config *c, qs_train_job *j);
qs_status qs_train_build(const qs_train_config *c, qs_train_job *j, qs_model_options *mo);

/* train_split.c: the starting split of c->batch over the ranks (j->split, j->local_batch); the
 * memory cap against the backend's allocation; applying a split (world entries) to the model,
 * loader, gradient weight and host buffers; dynamic batching's re-split after a step. */
qs_status qs_train_initial_split(const qs_train_config *c, qs_train_job *j);
qs_status qs_train_check_memory_cap(const qs_train_config *c, qs_train_job *j);
qs_status qs_train_apply_split(const qs_train_config *c, qs_train_job *j, const int64_t *split);
qs_status qs_train_rebalance(const qs_train_config *c, qs_train_job *j, double step_ms, int64_t step);

/* train_checkpoints.c: write the checkpoint after `step` to c->checkpoint_dir (none: nothing);
 * resume from c->resume (*step: its step). */
qs_status qs_train_checkpoint(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
                              int64_t step);
qs_status qs_train_resume(const qs_train_config *c, qs_train_job *j, int64_t *step);

/* train_schedule.c: after `step` of `total` (spe per epoch): evaluation, checkpoints, the
 * replica check and the stop (*stop) at --stop-at or on a signal. */
qs_status qs_train_after_step(const qs_train_config *c, qs_train_job *j, const qs_model_options *mo,
                              int64_t step, int64_t total, int64_t spe, bool tty, bool *stop,
                              qs_train_result *res);

/* train_records.c: the configuration log lines; the metrics header (first: the first step of
 * this run); a step record for window w (then reset); the results and summary record of a
 * finished run. */
void qs_train_log_config(const qs_train_config *c, const qs_train_job *j, int64_t total, int64_t spe);
qs_status qs_train_write_header(const qs_train_config *c, qs_train_job *j, int64_t total, int64_t first);
qs_status qs_train_log_step(const qs_train_config *c, qs_train_job *j, qs_train_window *w, int64_t step,
                            int64_t total, int64_t spe, float lr, double train_ms, bool tty,
                            qs_train_result *res);
qs_status qs_train_summary(const qs_train_config *c, qs_train_job *j, qs_train_result *res);

/* train_measure.c: the profiling and GPU-busy windows from step `begin` (called before and
 * after each step); the worker report and the captured-graph counts at the end of the run. */
void qs_train_profile_begin(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin);
qs_status qs_train_busy_begin(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin);
qs_status qs_train_busy_after(const qs_train_config *c, qs_train_job *j, double step_ms, qs_train_result *res);
void qs_train_profile_end(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin,
                          qs_train_result *res);
qs_status qs_train_worker_report(const qs_train_config *c, qs_train_job *j, qs_train_result *res);
void qs_train_graph_report(const qs_train_config *c, qs_train_job *j, qs_train_result *res);

#endif
