/* src/predict/profile_mixed.c — the mixed-precision lockstep runs (profile_mixed.h). */
#include "predict/profile_mixed.h"

#include <stdio.h>
#include <string.h>

#include "core/timer.h"

/* The distinct device types of ranks 0..world-1 in order of first rank into types (world
 * entries); their count. *own: the index of rank's type. */
static int qs_pm_types(const qs_cluster *cl, int rank, int world, const char **types, int *own) {
    int n = 0;
    for (int r = 0; r < world; r++) {
        int k = 0;
        while (k < n && strcmp(types[k], cl->workers[r].type) != 0) k++;
        if (k == n) types[n++] = cl->workers[r].type;
        if (r == rank) *own = k;
    }
    return n;
}

/* Assignment `index` (base n_precs digits, the first type the most significant) into digit[]
 * (n_types entries); whether it gives every type the same precision. */
static bool qs_pm_digits(long index, int n_types, int n_precs, int *digit) {
    for (int t = n_types - 1; t >= 0; t--) {
        digit[t] = (int)(index % n_precs);
        index /= n_precs;
    }
    bool uniform = true;
    for (int t = 1; t < n_types; t++) uniform &= digit[t] == digit[0];
    return uniform;
}

/* The entry of one mixed run: the assignment and what this rank's run measured (run is
 * consumed). */
static cJSON *qs_pm_entry(const char *const *types, const int *digit, int n_types, const qs_profile_options *o,
                          qs_precision mine, cJSON *run) {
    cJSON *e = cJSON_CreateObject(), *as = cJSON_AddObjectToObject(e, "precisions");
    for (int t = 0; t < n_types; t++) cJSON_AddStringToObject(as, types[t], qs_precision_name(o->precs[digit[t]]));
    cJSON_AddStringToObject(e, "precision", qs_precision_name(mine));
    static const char *const keys[] = {"step_ms", "optimizer_ms", "grad_average_ms", "grad_sync"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(run, keys[k]);
        if (v) cJSON_AddItemToObject(e, keys[k], v);
    }
    cJSON_Delete(run);
    return e;
}

/* The progress line of mixed run `done` of `count` (entry e, taken in secs). */
static void qs_pm_log(const qs_profile_options *o, const char *const *types, const int *digit, int n_types, long done,
                      long count, const cJSON *e, double secs) {
    if (!o->log) return;
    char as[256];
    size_t at = 0;
    for (int t = 0; t < n_types && at < sizeof as; t++)
        at += (size_t)snprintf(as + at, sizeof as - at, "%s%s %s", t ? ", " : "", types[t],
                               qs_precision_name(o->precs[digit[t]]));
    qs_log_info(o->log, "profiled %s, mixed run %ld of %ld (%s): step %.2f ms here, synchronized in place %.2f ms, "
                "%.1f s", o->model, done, count, as, cJSON_GetNumberValue(cJSON_GetObjectItem(e, "step_ms")),
                cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "grad_sync"), "overlap_step_ms")), secs);
}

qs_status qs_profile_mixed_runs(const qs_profile_options *o, const qs_cluster *cl, int rank, int world, cJSON *doc) {
    if (world > cl->n_workers)
        return QS_FAIL(QS_ERR_INVALID_ARG, "mixed profile runs: %d ranks but %d workers in the cluster", world,
                       cl->n_workers);
    if (world > 64) return QS_OK; /* no cluster this large shares one GPU */
    const char *types[64];
    int own = 0, digit[64];
    const int n_types = qs_pm_types(cl, rank, world, types, &own), n_precs = o->n_precs;
    if (n_types < 2 || n_precs < 2) return QS_OK;
    long total = 1;
    for (int t = 0; t < n_types && total <= QS_PROFILE_MAX_MIXED + n_precs; t++) total *= n_precs;
    if (total - n_precs > QS_PROFILE_MAX_MIXED) {
        if (o->log)
            qs_log_warn(o->log, "%d device types at %d precisions make more than %d mixed runs: none taken (the "
                        "replay is calibrated for uniform plans only)", n_types, n_precs, QS_PROFILE_MAX_MIXED);
        return QS_OK;
    }
    cJSON *list = cJSON_AddArrayToObject(doc, "mixed_runs");
    qs_status st = QS_OK;
    long done = 0;
    for (long i = 0; i < total && st == QS_OK; i++) {
        if (qs_pm_digits(i, n_types, n_precs, digit)) continue;
        done++;
        const qs_precision mine = o->precs[digit[own]];
        const double t0 = qs_now_ms();
        cJSON *run = NULL;
        st = qs_profile_run(o, mine, &run);
        if (st != QS_OK) break;
        cJSON *e = qs_pm_entry(types, digit, n_types, o, mine, run);
        qs_pm_log(o, types, digit, n_types, done, total - n_precs, e, (qs_now_ms() - t0) / 1e3);
        cJSON_AddItemToArray(list, e);
    }
    return st;
}
