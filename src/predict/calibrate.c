/* src/predict/calibrate.c — defines: the calibrated replay (calibrate.h). */
#include "predict/calibrate.h"

#include <math.h>
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
        const char *own = w[r].profile->device.type; /* "": none */
        if (!w[r].type || !own[0] || strcmp(own, w[r].type) != 0) {
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

/* Whether the mixed run e was taken at assignment a (a[k] for type t[k]). */
static bool qs_cal_entry_is(const qs_profile_mixed_run *e, const qs_cal_type *t, int nt, const qs_precision *a) {
    if (e->n_types != nt) return false;
    for (int k = 0; k < nt; k++) {
        int i = 0;
        while (i < e->n_types && strcmp(e->types[i], t[k].name) != 0) i++;
        if (i == e->n_types || e->precs[i] != a[k]) return false;
    }
    return true;
}

/* The in-place sync record of assignment a in profile p: the uniform run's, else the first mixed
 * run of a that has one; NULL when there is none. */
static const qs_profile_sync *qs_cal_sync_of(const qs_profile *p, const qs_cal_type *t, int nt, const qs_precision *a) {
    bool uniform = true;
    for (int k = 1; k < nt; k++) uniform &= a[k] == a[0];
    if (uniform) {
        const qs_profile_prec_run *run = qs_profile_run_at(p, a[0]);
        return run && run->has_sync ? &run->sync : NULL;
    }
    for (int i = 0; i < p->n_mixed; i++)
        if (p->mixed[i].has_sync && qs_cal_entry_is(&p->mixed[i], t, nt, a)) return &p->mixed[i].sync;
    return NULL;
}

/* The synchronized step measured in place at assignment a between n ranks with nb buckets of
 * o's size and overlap, from the first worker's profile that has it; < 0 when none has. */
static double qs_cal_measured(const qs_sim_worker *w, int n, const qs_cal_type *t, int nt, const qs_precision *a, int nb,
                              const qs_sim_options *o) {
    for (int r = 0; r < n; r++) {
        const qs_profile_sync *gs = qs_cal_sync_of(w[r].profile, t, nt, a);
        double ms = gs ? (o->overlap ? gs->overlap_step_ms : gs->no_overlap_step_ms) : NAN;
        if (!isnan(ms) && (double)gs->ranks == n && (double)gs->buckets == nb &&
            (double)gs->bucket_bytes == (double)o->bucket_bytes)
            return ms;
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
        x[r].as_run = qs_profile_run_at(w[r].profile, a[of[r]]);
        if (!x[r].as_run)
            st = QS_FAIL(QS_ERR_MISMATCH, "%s has no run at %s to calibrate against", w[r].profile->origin,
                         qs_precision_name(a[of[r]]));
    }
    qs_sim_result res;
    memset(&res, 0, sizeof res);
    if (st == QS_OK) st = qs_sim_replay(x, n, o, NULL, &res);
    if (st == QS_OK) *ms = res.iteration_ms;
    qs_sim_result_free(&res);
    free(x);
    return st;
}

/* Append assignment a's entry to c->assignments. */
static qs_status qs_cal_entry(qs_sim_calibration *c, const qs_cal_type *t, int nt, const qs_precision *a, double weight,
                              double measured, double replayed) {
    qs_sim_assignment *l = realloc(c->assignments, (size_t)(c->n_assignments + 1) * sizeof *l);
    if (!l) return QS_FAIL(QS_ERR_OOM, "out of memory calibrating the replay");
    c->assignments = l;
    qs_sim_assignment *e = &l[c->n_assignments++];
    memset(e, 0, sizeof *e);
    for (int k = 0; k < nt; k++) {
        e->types[k] = t[k].name;
        e->precs[k] = a[k];
    }
    e->n_types = nt;
    e->weight = weight;
    e->measured_ms = measured;
    e->replayed_ms = replayed;
    return QS_OK;
}

/* Σ_a w_a·r_a over the assignments of positive weight into c->residual_ms, their entries into
 * c->assignments; c->reason (NULL when it could) says why it could not. */
static qs_status qs_cal_residual(const qs_sim_worker *w, int n, const qs_sim_options *o, const qs_cal_type *t, int nt,
                                 const int *of, int nb, qs_sim_calibration *c) {
    int digit[QS_CAL_MAX_TYPES] = {0};
    qs_precision a[QS_CAL_MAX_TYPES];
    c->residual_ms = 0;
    for (;;) { /* every assignment, the last type's precision fastest */
        double weight = 1;
        for (int k = 0; k < nt; k++) {
            a[k] = (qs_precision)digit[k];
            weight *= t[k].share[digit[k]];
        }
        if (weight > 1e-12) {
            double measured = qs_cal_measured(w, n, t, nt, a, nb, o), replayed = 0;
            if (measured < 0) {
                c->reason = "an assignment of the plan's precisions to the device types has no synchronized step "
                            "measured in place (profile under mpirun with this cluster, buckets and overlap)";
                return QS_OK;
            }
            QS_TRY(qs_cal_replayed(w, n, o, of, a, &replayed));
            c->residual_ms += weight * (measured - replayed);
            QS_TRY(qs_cal_entry(c, t, nt, a, weight, measured, replayed));
        }
        int k = nt - 1;
        while (k >= 0 && ++digit[k] == QS_PREC_COUNT) digit[k--] = 0;
        if (k < 0) return QS_OK;
    }
}

qs_status qs_simulate(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, qs_sim_result *out) {
    QS_TRY(qs_sim_replay(w, n, o, trace, out));
    qs_sim_calibration *c = &out->calibration;
    qs_cal_type t[QS_CAL_MAX_TYPES];
    int nt = 0, *of = calloc((size_t)n, sizeof *of);
    qs_status st = of ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory calibrating the replay");
    if (n < 2) c->reason = "one worker";
    else if (strcmp(out->comm_model, "concurrent") != 0)
        c->reason = "the communication is replayed serially, from the sync measured in place";
    if (st == QS_OK && !c->reason) st = qs_cal_types(w, n, t, &nt, of, &c->reason);
    if (st == QS_OK && !c->reason) st = qs_cal_residual(w, n, o, t, nt, of, out->buckets, c);
    free(of);
    if (st != QS_OK) {
        qs_sim_result_free(out);
        return st;
    }
    out->calibrated = true;
    c->applied = !c->reason;
    if (!c->applied) {
        free(c->assignments); /* the entries of an incomplete sum are not reported */
        c->assignments = NULL;
        c->n_assignments = 0;
        c->residual_ms = 0;
        return QS_OK;
    }
    c->replayed_ms = out->iteration_ms;
    out->iteration_ms += c->residual_ms;
    out->iteration_mean_ms += c->residual_ms;
    for (int r = 0; r < out->n_workers; r++) out->workers[r].iteration_ms += c->residual_ms;
    return QS_OK;
}
