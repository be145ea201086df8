/* src/train/train_measure.c — defines: what a training job measures beyond the loss
 * (train/train_job.h): the per-op profiling and GPU-busy windows, and the end-of-run worker and
 * captured-graph reports. */
#include "train/train_job.h"

#include <stdio.h>

#include "graph/precision.h"
#include "train/op_report.h"
#include "train/worker_report.h"

/* The profiling window: before step `begin`, reset the op timers and time every op... */
void qs_train_profile_begin(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin) {
    if (c->profile_steps > 0 && step == begin) {
        qs_model_reset_times(j->m);
        j->m->timing = true;
    }
}

/* The GPU-busy window: from step `begin` for gpu_busy_steps steps, events around every op... */
qs_status qs_train_busy_begin(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin) {
    return c->gpu_busy_steps > 0 && step == begin ? qs_model_busy_start(j->m) : QS_OK;
}

/* ...after each step of it, their GPU time and the step's wall time added up; at its end, the
 * per-step means in res and a log line. */
qs_status qs_train_busy_after(const qs_train_config *c, qs_train_job *j, double step_ms,
                              qs_train_result *res) {
    if (!j->m->busy.on) return QS_OK;
    QS_TRY(qs_model_busy_collect(j->m, &res->gpu_busy_ms));
    res->gpu_busy_step_ms += step_ms;
    if (++res->gpu_busy_steps < c->gpu_busy_steps) return QS_OK;
    qs_model_busy_stop(j->m);
    res->gpu_busy_ms /= (double)res->gpu_busy_steps;
    res->gpu_busy_step_ms /= (double)res->gpu_busy_steps;
    qs_log_info(c->log, "GPU busy %.1f%% of the step: %.3f of %.3f ms per step in the model's ops and the optimizer "
                "(%lld steps, events around every op)", 100.0 * res->gpu_busy_ms / res->gpu_busy_step_ms,
                res->gpu_busy_ms, res->gpu_busy_step_ms, (long long)res->gpu_busy_steps);
    return QS_OK;
}

/* ...and after profile_steps steps, stop timing and report (res->profile, and on stderr). */
void qs_train_profile_end(const qs_train_config *c, qs_train_job *j, int64_t step, int64_t begin,
                          qs_train_result *res) {
    if (!j->m->timing || step != begin + c->profile_steps) return;
    j->m->timing = false;
    size_t opt_bytes = (size_t)j->opt.n_state * j->m->params.bytes;
    res->profile = qs_op_report_json(j->m, c->profile_steps, opt_bytes);
    if (c->log->level <= QS_LOG_INFO) qs_op_report_print(j->m, c->profile_steps, opt_bytes, stderr);
}

/* Median of this run's step times after the first `skip` (all of them when there are fewer). */
static double qs_train_median_step_ms(qs_train_job *j, int64_t skip) {
    if (j->step_ms.n <= skip) skip = 0;
    return qs_median_inplace(j->step_ms.v + skip, j->step_ms.n - skip);
}

/* This rank's figures for the worker report (train/worker_report.h); gathered on every rank,
 * reported by rank 0 (logged only for several ranks or an emulated one; always in the JSON). The median step leaves out 5 warm-up steps and every rank's unslowed
 * calibration window (train/emulator.h). */
qs_status qs_train_worker_report(const qs_train_config *c, qs_train_job *j, qs_train_result *res) {
    uint64_t skip = 5, lo, hi;
    if (j->emu.on_after > 0 && (uint64_t)(j->emu.on_after + QS_EMULATOR_WARMUP) > skip)
        skip = (uint64_t)(j->emu.on_after + QS_EMULATOR_WARMUP);
    if (j->world > 1) {
        QS_TRY(qs_comm_allreduce_minmax_u64(c->comm, skip, &lo, &hi, c->collective_timeout_s));
        skip = hi;
    }
    double steps = j->step_ms.n > 0 ? (double)j->step_ms.n : 1, total = 0;
    for (int64_t i = 0; i < j->step_ms.n; i++) total += j->step_ms.v[i];
    qs_worker_figures f = {.slowdown_asked = c->slowdown > 1 ? c->slowdown : 1,
                           .emulation_method = c->mps_sm_percent > 0       ? "mps"
                                               : c->sm_partition_count > 0 ? "green-context"
                                                                           : j->emu.how,
                           .sm_percent = c->mps_sm_percent,
                           .sm_count = c->sm_partition_count,
                           .mean_step_ms = total / steps,
                           .median_step_ms = qs_train_median_step_ms(j, (int64_t)skip),
                           .local_batch = (double)j->local_batch,
                           .comm_wait_ms = j->m->comm_wait_time.total_ms / steps};
    f.slowdown_measured = qs_emulator_measured(&j->emu, j->m, &f.calibrated);
    size_t in_use = 0;
    j->be->ops->memory_stats(j->be, &in_use, NULL);
    f.memory_bytes = (double)in_use;
    qs_model_precision_counts(j->m, f.precision_counts);
    return qs_worker_report_gather(c->comm, j->rank, j->world, c->collective_timeout_s, &f, c->worker_types,
                                   c->device_type, c->log, j->world > 1 || c->slowdown > 1, &res->workers);
}

/* How many training passes ran as captured graphs and op by op, and why the latter where no
 * pass could be captured (logged on a GPU, where capture is the default). */
void qs_train_graph_report(const qs_train_config *c, qs_train_job *j, qs_train_result *res) {
    const qs_capture *cap = &j->m->capture;
    res->graph_passes = cap->replays[QS_PASS_FORWARD] + cap->replays[QS_PASS_BACKWARD];
    res->eager_passes = cap->eager[QS_PASS_FORWARD] + cap->eager[QS_PASS_BACKWARD];
    const char *why = c->no_graphs ? "--no-graphs" : cap->failed ? cap->failure
                                                                   : qs_capture_blocker(j->m);
    res->eager_reason[0] = '\0';
    if ((res->graph_passes == 0 || cap->failed) && why) snprintf(res->eager_reason, sizeof res->eager_reason, "%s", why);
    if (c->cuda)
        qs_log_info(c->log, "training passes: %lld replayed as CUDA graphs, %lld op by op%s%s",
                    (long long)res->graph_passes, (long long)res->eager_passes, res->eager_reason[0] ? ": " : "",
                    res->eager_reason);
}
