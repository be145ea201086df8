/* src/predict/calibrate.c — the calibrated replay (calibrate.h). */
#include "predict/calibrate.h"

#include <stdlib.h>
#include <string.h>

#include "graph/precision.h"

/* A device type of the cluster and the share of its layers' replayed time at each precision
 * (the mean over its workers). */
typedef struct qs_cal_type {
    const char *name;
    double share[QS_PREC_COUNT];
    int workers;
} qs_cal_type;

static const cJSON *qs_cal_get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* Worker w's share of its Conv2d/Linear/MatMul time (qs_sim_node_charges) at each precision
 * into share (QS_PREC_COUNT entries, summing to 1, or all 0 when it has none). */
static qs_status qs_cal_worker_shares(const qs_sim_worker *w, double *share) {
    const qs_model *m = w->m;
    qs_sim_charge *ch = calloc((size_t)m->n_nodes, sizeof *ch);
    if (!ch) return QS_FAIL(QS_ERR_OOM, "out of memory calibrating the replay");
    qs_status st = qs_sim_node_charges(w, ch);
    double total = 0;
    for (int i = 1; i < m->n_nodes && st == QS_OK; i++) {
        const qs_node *n = &m->nodes[i];
        if (!qs_node_precision_selectable(n->kind)) continue;
        share[n->prec] += ch[i].ms;
        total += ch[i].ms;
    }
    for (int p = 0; p < QS_PREC_COUNT && total > 0; p++) share[p] /= total;
    free(ch);
    return st;
}

/* The cluster's device types with their shares into t (QS_CAL_MAX_TYPES entries), their count
 * into *nt and each worker's type index into of[]; NULL *why when every worker is replayed from
 * its own type's profile, else why not. */
static qs_status qs_cal_types(const qs_sim_worker *w, int n, qs_cal_type *t, int *nt, int *of, const char **why) {
    *nt = 0;
    *why = NULL;
    for (int r = 0; r < n && !*why; r++) {
        const cJSON *own = qs_cal_get(qs_cal_get(w[r].profile, "device"), "type");
        if (!w[r].type || !cJSON_IsString(own) || strcmp(own->valuestring, w[r].type) != 0) {
            *why = "a worker is replayed from a profile of another device type (or of none)";
            break;
        }
        int k = 0;
        while (k < *nt && strcmp(t[k].name, w[r].type) != 0) k++;
        if (k == QS_CAL_MAX_TYPES) {
            *why = "more device types than the calibration takes";
            break;
        }
        if (k == *nt) {
            memset(&t[k], 0, sizeof t[k]);
            t[k].name = w[r].type;
            (*nt)++;
        }
        double share[QS_PREC_COUNT] = {0};
        QS_TRY(qs_cal_worker_shares(&w[r], share));
        for (int p = 0; p < QS_PREC_COUNT; p++) t[k].share[p] += share[p];
        t[k].workers++;
        of[r] = k;
    }
    for (int k = 0; k < *nt; k++)
        for (int p = 0; p < QS_PREC_COUNT; p++) t[k].share[p] /= t[k].workers;
    return QS_OK;
}

/* Whether the mixed run entry e was taken at assignment a (a[k] for type t[k]). */
static bool qs_cal_entry_is(const cJSON *e, const qs_cal_type *t, int nt, const qs_precision *a) {
    const cJSON *as = qs_cal_get(e, "precisions");
    if (cJSON_GetArraySize(as) != nt) return false;
    for (int k = 0; k < nt; k++) {
        const cJSON *p = qs_cal_get(as, t[k].name);
        if (!cJSON_IsString(p) || strcmp(p->valuestring, qs_precision_name(a[k])) != 0) return false;
    }
    return true;
}

/* The synchronized step measured in place at assignment a between n ranks with nb buckets of
 * o's size and overlap, from the first worker's profile that has it; < 0 when none has. */
static double qs_cal_measured(const qs_sim_worker *w, int n, const qs_cal_type *t, int nt, const qs_precision *a, int nb,
                              const qs_sim_options *o) {
    bool uniform = true;
    for (int k = 1; k < nt; k++) uniform &= a[k] == a[0];
    for (int r = 0; r < n; r++) {
        const cJSON *gs = NULL, *e, *mixed = uniform ? NULL : qs_cal_get(w[r].profile, "mixed_runs");
        if (uniform) gs = qs_cal_get(qs_cal_get(qs_cal_get(w[r].profile, "runs"), qs_precision_name(a[0])), "grad_sync");
        cJSON_ArrayForEach(e, mixed)
            if (!gs && qs_cal_entry_is(e, t, nt, a)) gs = qs_cal_get(e, "grad_sync");
        const cJSON *ms = qs_cal_get(gs, o->overlap ? "overlap_step_ms" : "no_overlap_step_ms");
        if (cJSON_IsNumber(ms) && cJSON_GetNumberValue(qs_cal_get(gs, "ranks")) == n &&
            cJSON_GetNumberValue(qs_cal_get(gs, "buckets")) == nb &&
            cJSON_GetNumberValue(qs_cal_get(gs, "bucket_bytes")) == (double)o->bucket_bytes)
            return ms->valuedouble;
    }
    return -1;
}

/* The replay of assignment a: every worker as its profile's run at its type's precision
 * measured it (qs_sim_worker.as_run); its synchronized iteration into *ms. */
static qs_status qs_cal_replayed(const qs_sim_worker *w, int n, const qs_sim_options *o, const int *of,
                                 const qs_precision *a, double *ms) {
    qs_sim_worker *x = malloc((size_t)n * sizeof *x);
    if (!x) return QS_FAIL(QS_ERR_OOM, "out of memory calibrating the replay");
    qs_status st = QS_OK;
    for (int r = 0; r < n && st == QS_OK; r++) {
        x[r] = w[r];
        x[r].as_run = qs_cal_get(qs_cal_get(w[r].profile, "runs"), qs_precision_name(a[of[r]]));
        if (!x[r].as_run)
            st = QS_FAIL(QS_ERR_MISMATCH, "%s has no run at %s to calibrate against", w[r].profile_path,
                         qs_precision_name(a[of[r]]));
    }
    cJSON *doc = NULL;
    if (st == QS_OK) st = qs_sim_replay(x, n, o, NULL, &doc);
    if (st == QS_OK) *ms = cJSON_GetNumberValue(qs_cal_get(doc, "iteration_ms"));
    cJSON_Delete(doc);
    free(x);
    return st;
}

/* The assignment's entry in "calibration"."assignments". */
static cJSON *qs_cal_entry(const qs_cal_type *t, int nt, const qs_precision *a, double weight, double measured,
                           double replayed) {
    cJSON *e = cJSON_CreateObject(), *as = cJSON_AddObjectToObject(e, "precisions");
    for (int k = 0; k < nt; k++) cJSON_AddStringToObject(as, t[k].name, qs_precision_name(a[k]));
    cJSON_AddNumberToObject(e, "weight", weight);
    cJSON_AddNumberToObject(e, "measured_ms", measured);
    cJSON_AddNumberToObject(e, "replayed_ms", replayed);
    return e;
}

/* Σ_a w_a·r_a over the assignments of positive weight into *residual, their entries into list;
 * *why (NULL when it could) says why it could not. */
static qs_status qs_cal_residual(const qs_sim_worker *w, int n, const qs_sim_options *o, const qs_cal_type *t, int nt,
                                 const int *of, int nb, cJSON *list, double *residual, const char **why) {
    int digit[QS_CAL_MAX_TYPES] = {0};
    qs_precision a[QS_CAL_MAX_TYPES];
    *residual = 0;
    for (;;) { /* every assignment, the last type's precision fastest */
        double weight = 1;
        for (int k = 0; k < nt; k++) {
            a[k] = (qs_precision)digit[k];
            weight *= t[k].share[digit[k]];
        }
        if (weight > 1e-12) {
            double measured = qs_cal_measured(w, n, t, nt, a, nb, o), replayed = 0;
            if (measured < 0) {
                *why = "an assignment of the plan's precisions to the device types has no synchronized step "
                       "measured in place (profile under mpirun with this cluster, buckets and overlap)";
                return QS_OK;
            }
            QS_TRY(qs_cal_replayed(w, n, o, of, a, &replayed));
            *residual += weight * (measured - replayed);
            cJSON_AddItemToArray(list, qs_cal_entry(t, nt, a, weight, measured, replayed));
        }
        int k = nt - 1;
        while (k >= 0 && ++digit[k] == QS_PREC_COUNT) digit[k--] = 0;
        if (k < 0) return QS_OK;
    }
}

/* Add ms to the number doc[key]. */
static void qs_cal_add(cJSON *doc, const char *key, double ms) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    if (cJSON_IsNumber(v)) cJSON_SetNumberValue(v, v->valuedouble + ms);
}

qs_status qs_simulate(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, cJSON **out) {
    QS_TRY(qs_sim_replay(w, n, o, trace, out));
    const cJSON *comm = qs_cal_get(*out, "comm"), *model = qs_cal_get(comm, "model");
    cJSON *cal = cJSON_AddObjectToObject(*out, "calibration"), *list = cJSON_CreateArray();
    const char *why = NULL;
    qs_cal_type t[QS_CAL_MAX_TYPES];
    int nt = 0, *of = calloc((size_t)n, sizeof *of);
    double residual = 0;
    qs_status st = of ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory calibrating the replay");
    if (n < 2) why = "one worker";
    else if (!cJSON_IsString(model) || strcmp(model->valuestring, "concurrent") != 0)
        why = "the communication is replayed serially, from the sync measured in place";
    if (st == QS_OK && !why) st = qs_cal_types(w, n, t, &nt, of, &why);
    if (st == QS_OK && !why)
        st = qs_cal_residual(w, n, o, t, nt, of, (int)cJSON_GetNumberValue(qs_cal_get(comm, "buckets")), list,
                             &residual, &why);
    free(of);
    if (st != QS_OK) {
        cJSON_Delete(list);
        cJSON_Delete(*out);
        *out = NULL;
        return st;
    }
    cJSON_AddBoolToObject(cal, "applied", !why);
    if (why) {
        cJSON_AddStringToObject(cal, "reason", why);
        cJSON_Delete(list);
        return QS_OK;
    }
    cJSON_AddNumberToObject(cal, "replayed_ms", cJSON_GetNumberValue(qs_cal_get(*out, "iteration_ms")));
    cJSON_AddNumberToObject(cal, "residual_ms", residual);
    cJSON_AddItemToObject(cal, "assignments", list);
    qs_cal_add(*out, "iteration_ms", residual);
    qs_cal_add(*out, "iteration_mean_ms", residual);
    cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(*out, "workers")) qs_cal_add(x, "iteration_ms", residual);
    return QS_OK;
}
