/* src/predict/profile_comm.c — all-reduce cost between the job's ranks (profile_comm.h). */
#include "predict/profile_comm.h"

#include <stdlib.h>

#include "core/stats.h"
#include "core/timer.h"
#include "qsync/tensor.h"

#define QS_PROF_AR_SIZES 6
#define QS_PROF_AR_TIMEOUT_S 300.0

qs_status qs_profile_allreduce(qs_comm *comm, int reps, cJSON **out) {
    *out = NULL;
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    if (world < 2) return QS_FAIL(QS_ERR_INVALID_ARG, "the all-reduce profile needs several ranks (run under mpirun)");
    if (reps < 3) return QS_FAIL(QS_ERR_INVALID_ARG, "the all-reduce profile needs at least 3 repetitions");
    static const double sizes[QS_PROF_AR_SIZES] = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 25 << 20};
    const int64_t max_floats = (int64_t)sizes[QS_PROF_AR_SIZES - 1] / (int64_t)sizeof(float);
    float *buf = qs_host_alloc((size_t)max_floats * sizeof(float));
    double *t = calloc((size_t)reps, sizeof *t), *slowest = calloc((size_t)world * QS_PROF_AR_SIZES, sizeof *slowest);
    qs_status st = buf && t && slowest ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for the all-reduce profile");
    for (int64_t i = 0; st == QS_OK && i < max_floats; i++) buf[i] = 1e-3f;
    for (int s = 0; s < QS_PROF_AR_SIZES && st == QS_OK; s++) {
        int64_t n = (int64_t)sizes[s] / (int64_t)sizeof(float);
        for (int k = -1; k < reps && st == QS_OK; k++) { /* k = -1: warm-up */
            uint64_t lo, hi;
            st = qs_comm_allreduce_minmax_u64(comm, (uint64_t)k + 1, &lo, &hi, QS_PROF_AR_TIMEOUT_S);
            int req = -1;
            double t0 = qs_now_ms();
            if (st == QS_OK) st = qs_comm_iallreduce_sum_f32(comm, buf, n, &req);
            if (st == QS_OK) st = qs_comm_wait(comm, req, QS_PROF_AR_TIMEOUT_S);
            if (k >= 0) t[k] = qs_now_ms() - t0;
        }
        if (st == QS_OK) slowest[(size_t)rank * QS_PROF_AR_SIZES + s] = qs_median_inplace(t, reps);
    }
    if (st == QS_OK) st = qs_comm_allreduce_sum_f64(comm, slowest, world * QS_PROF_AR_SIZES, QS_PROF_AR_TIMEOUT_S);
    if (st == QS_OK) {
        double ms[QS_PROF_AR_SIZES], alpha, beta;
        for (int s = 0; s < QS_PROF_AR_SIZES; s++) {
            ms[s] = 0;
            for (int r = 0; r < world; r++)
                if (slowest[(size_t)r * QS_PROF_AR_SIZES + s] > ms[s]) ms[s] = slowest[(size_t)r * QS_PROF_AR_SIZES + s];
        }
        qs_linear_fit(sizes, ms, QS_PROF_AR_SIZES, &alpha, &beta);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "ranks", world);
        cJSON_AddNumberToObject(o, "reps", reps);
        cJSON_AddNumberToObject(o, "alpha_ms", alpha);
        cJSON_AddNumberToObject(o, "beta_ms_per_byte", beta);
        cJSON *pts = cJSON_AddArrayToObject(o, "points");
        for (int s = 0; s < QS_PROF_AR_SIZES; s++) {
            cJSON *pt = cJSON_CreateArray();
            cJSON_AddItemToArray(pt, cJSON_CreateNumber(sizes[s]));
            cJSON_AddItemToArray(pt, cJSON_CreateNumber(ms[s]));
            cJSON_AddItemToArray(pts, pt);
        }
        *out = o;
    }
    qs_host_free(buf);
    free(t);
    free(slowest);
    return st;
}
