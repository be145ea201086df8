/* src/train/emulator.c — a worker's emulated slowdown, switched on after a calibration window
 * and measured against it (see emulator.h). */
#include "train/emulator.h"

#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

/* Switch the emulation on: the quota where asked or available, else the duty cycle. */
static qs_status qs_emulator_start(qs_emulator *e, qs_model *m, const qs_logger *log) {
    e->on = true;
    if (strcmp(e->method, "duty-cycle") != 0) {
        qs_status st = qs_cpu_quota_apply(e->slowdown, e->threads, &e->quota);
        if (st == QS_OK) {
            m->emulation.cpu_threads = e->threads;
            e->how = "cgroup-quota";
            qs_log_info(log, "rank %d: emulated slowdown %.2fx by a cgroup CPU quota of %ld us per %ld us", e->rank,
                        e->slowdown, e->quota.quota_us, e->quota.period_us);
            return QS_OK;
        }
        if (strcmp(e->method, "cgroup") == 0 || st != QS_ERR_UNSUPPORTED)
            return qs_error_wrap(st, "rank %d: emulation method cgroup: ", e->rank);
        qs_log_info(log, "rank %d: no cgroup CPU quota (%s); emulating the slowdown by a duty cycle", e->rank,
                    qs_last_error());
    }
    m->emulation.slowdown = e->slowdown;
    e->how = "duty-cycle";
    return QS_OK;
}

qs_status qs_emulator_init(qs_emulator *e, double slowdown, const char *method, int threads, int rank,
                           int64_t calibration_steps, int64_t steps, qs_model *m, const qs_logger *log) {
    memset(e, 0, sizeof *e);
    e->slowdown = slowdown;
    e->how = "none";
    if (!(slowdown > 1)) return QS_OK;
    snprintf(e->method, sizeof e->method, "%s", method ? method : "auto");
    e->threads = threads > 0 ? threads : 1;
    e->rank = rank;
    int64_t needed = 2 * QS_EMULATOR_WARMUP + calibration_steps + QS_EMULATOR_MIN_EMULATED;
    if (calibration_steps > 0 && steps >= needed) {
        e->on_after = QS_EMULATOR_WARMUP + calibration_steps;
        qs_log_info(log, "rank %d: emulated slowdown %.2fx from step %lld on (the %lld steps before it calibrate the "
                    "measurement)", rank, slowdown, (long long)e->on_after + 1, (long long)calibration_steps);
        return QS_OK;
    }
    return qs_emulator_start(e, m, log);
}

qs_status qs_emulator_record(qs_emulator *e, int64_t step_in_run, double compute_ms, int64_t local_batch, qs_model *m,
                             const qs_logger *log) {
    if (!(e->slowdown > 1) || e->on_after == 0 || local_batch < 1) return QS_OK;
    double per_sample = compute_ms / (double)local_batch;
    if (!e->on) {
        if (step_in_run > QS_EMULATOR_WARMUP) QS_TRY(qs_samples_push(&e->before, per_sample, "the calibration steps"));
        return step_in_run == e->on_after ? qs_emulator_start(e, m, log) : QS_OK;
    }
    if (step_in_run <= e->on_after + QS_EMULATOR_WARMUP) return QS_OK;
    return qs_samples_push(&e->after, per_sample, "the emulated steps");
}

double qs_emulator_measured(qs_emulator *e, const qs_model *m, bool *calibrated) {
    if (calibrated) *calibrated = false;
    if (!(e->slowdown > 1)) return 1;
    if (e->on_after > 0 && e->before.n > 0 && e->after.n >= 3) {
        double base = qs_median_inplace(e->before.v, e->before.n), slow = qs_median_inplace(e->after.v, e->after.n);
        if (base > 0) {
            if (calibrated) *calibrated = true;
            return slow / base;
        }
    }
    return qs_emulation_measured(&m->emulation);
}

void qs_emulator_free(qs_emulator *e) {
    qs_cpu_quota_release(&e->quota);
    qs_samples_free(&e->before);
    qs_samples_free(&e->after);
}
