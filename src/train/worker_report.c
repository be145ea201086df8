/* src/train/worker_report.c — every rank's figures gathered and reported (worker_report.h). */
#include "train/worker_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Layout of one rank's row in the gathered vector. */
enum {
    QS_WR_ASKED,
    QS_WR_MEASURED,
    QS_WR_MEAN_MS,
    QS_WR_MEDIAN_MS,
    QS_WR_BATCH,
    QS_WR_WAIT_MS,
    QS_WR_METHOD,     /* 0 none, 1 duty cycle, 2 cgroup quota, 3 MPS SM share, 4 green context */
    QS_WR_CALIBRATED,
    QS_WR_MEMORY,
    QS_WR_SM_PERCENT, /* the MPS SM share, 0 = none */
    QS_WR_SM_COUNT,   /* SMs of the green-context partition, 0 = none */
    QS_WR_PREC,       /* QS_PREC_COUNT counts follow */
    QS_WR_FIELDS = QS_WR_PREC + QS_PREC_COUNT
};

static const char *const qs_wr_methods[] = {"none", "duty-cycle", "cgroup-quota", "mps", "green-context"};

static void qs_wr_pack(const qs_worker_figures *f, double *x) {
    x[QS_WR_ASKED] = f->slowdown_asked;
    x[QS_WR_MEASURED] = f->slowdown_measured;
    x[QS_WR_MEAN_MS] = f->mean_step_ms;
    x[QS_WR_MEDIAN_MS] = f->median_step_ms;
    x[QS_WR_BATCH] = f->local_batch;
    x[QS_WR_WAIT_MS] = f->comm_wait_ms;
    x[QS_WR_METHOD] = 0;
    for (int k = 1; k < (int)(sizeof qs_wr_methods / sizeof *qs_wr_methods); k++)
        if (f->emulation_method && strcmp(f->emulation_method, qs_wr_methods[k]) == 0) x[QS_WR_METHOD] = k;
    x[QS_WR_CALIBRATED] = f->calibrated;
    x[QS_WR_MEMORY] = f->memory_bytes;
    x[QS_WR_SM_PERCENT] = f->sm_percent;
    x[QS_WR_SM_COUNT] = f->sm_count;
    for (int p = 0; p < QS_PREC_COUNT; p++) x[QS_WR_PREC + p] = f->precision_counts[p];
}

/* One rank's JSON object and log lines from its gathered row. */
static cJSON *qs_wr_rank(int r, const double *x, const char *type, const qs_logger *log, bool log_lines) {
    cJSON *w = cJSON_CreateObject();
    cJSON_AddNumberToObject(w, "rank", r);
    if (type) cJSON_AddStringToObject(w, "type", type);
    cJSON_AddNumberToObject(w, "emulated_slowdown", x[QS_WR_ASKED]);
    cJSON_AddNumberToObject(w, "emulated_slowdown_measured", x[QS_WR_MEASURED]);
    const char *how = qs_wr_methods[(int)x[QS_WR_METHOD]];
    bool emulated = x[QS_WR_ASKED] > 1, calibrated = x[QS_WR_CALIBRATED] > 0;
    cJSON_AddStringToObject(w, "emulation_method", how);
    if (x[QS_WR_SM_PERCENT] > 0) cJSON_AddNumberToObject(w, "mps_sm_percent", x[QS_WR_SM_PERCENT]);
    if (x[QS_WR_SM_COUNT] > 0) cJSON_AddNumberToObject(w, "sm_count", x[QS_WR_SM_COUNT]);
    if (emulated) cJSON_AddStringToObject(w, "emulated_slowdown_basis", calibrated ? "calibrated" : "ops");
    cJSON_AddNumberToObject(w, "step_ms", x[QS_WR_MEAN_MS]);
    cJSON_AddNumberToObject(w, "median_step_ms", x[QS_WR_MEDIAN_MS]);
    cJSON_AddNumberToObject(w, "local_batch", x[QS_WR_BATCH]);
    cJSON_AddNumberToObject(w, "comm_wait_ms", x[QS_WR_WAIT_MS]);
    cJSON_AddNumberToObject(w, "memory_bytes", x[QS_WR_MEMORY]);
    cJSON *pc = cJSON_AddObjectToObject(w, "precisions");
    char line[160] = "";
    size_t n = 0;
    for (int p = 0; p < QS_PREC_COUNT; p++) {
        double k = x[QS_WR_PREC + p];
        if (k <= 0) continue;
        cJSON_AddNumberToObject(pc, qs_precision_name((qs_precision)p), k);
        if (n < sizeof line)
            n += (size_t)snprintf(line + n, sizeof line - n, "%s%s x%.0f", n ? ", " : "",
                                  qs_precision_name((qs_precision)p), k);
    }
    if (!log_lines) return w;
    qs_log_info(log, "rank %d%s%s%s: %s; local batch %.0f, median step %.1f ms (mean %.1f), waited %.1f ms/step for "
                "gradients", r, type ? " (" : "", type ? type : "", type ? ")" : "", line, x[QS_WR_BATCH],
                x[QS_WR_MEDIAN_MS], x[QS_WR_MEAN_MS], x[QS_WR_WAIT_MS]);
    if (emulated)
        qs_log_info(log, "rank %d: emulated slowdown %.2fx asked, %.3fx measured (%s; %s; emulation)", r,
                    x[QS_WR_ASKED], x[QS_WR_MEASURED],
                    calibrated ? "compute time per sample against the calibration window" : "the ops' own account", how);
    return w;
}

qs_status qs_worker_report_gather(qs_comm *comm, int rank, int world, double timeout_s, const qs_worker_figures *mine,
                                  const char *const *types, const char *own_type, const qs_logger *log, bool log_lines,
                                  cJSON **out) {
    *out = NULL;
    double *v = calloc((size_t)world * QS_WR_FIELDS, sizeof *v);
    if (!v) return QS_FAIL(QS_ERR_OOM, "out of memory for the worker report");
    qs_wr_pack(mine, v + (size_t)QS_WR_FIELDS * rank);
    qs_status st = world > 1 ? qs_comm_allreduce_sum_f64(comm, v, QS_WR_FIELDS * world, timeout_s) : QS_OK;
    if (st == QS_OK) {
        *out = cJSON_CreateArray();
        for (int r = 0; r < world; r++) {
            const char *type = types ? types[r] : r == rank ? own_type : NULL;
            cJSON_AddItemToArray(*out, qs_wr_rank(r, v + (size_t)QS_WR_FIELDS * r, type, log, log_lines));
        }
    }
    free(v);
    return st;
}
