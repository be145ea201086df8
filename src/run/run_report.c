/* src/run/run_report.c — defines: `qsync run`'s report (run_report.h): the runs recorded, their
 * metrics curves, and the report's figures. Its document: run_report_doc.c; its text and plot:
 * run_output.c. */
#include "run/run_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/stats.h"

void qs_run_report_init(qs_run_report *r, const qs_run_config *c) {
    memset(r, 0, sizeof *r);
    r->c = c;
}

void qs_run_report_set_plan(qs_run_report *r, qs_plan *plan) {
    if (r->has_plan) qs_plan_free(&r->plan);
    r->plan = *plan;
    r->has_plan = true;
    memset(plan, 0, sizeof *plan);
}

void qs_run_report_free(qs_run_report *r) {
    for (int i = 0; i < r->n; i++) {
        cJSON_Delete(r->e[i].workers);
        free(r->e[i].figures);
    }
    for (int a = 0; a < QS_ARM_COUNT; a++) free(r->arm[a].accuracy_diff);
    free(r->e);
    free(r->types);
    free(r->workers);
    if (r->has_plan) qs_plan_free(&r->plan);
    memset(r, 0, sizeof *r);
}

/* ---- the runs ---- */

/* The figures the report takes from a trainer's per-worker report (its one reader): each
 * worker's rank, median step and memory. */
static qs_status qs_run_read_workers(const cJSON *workers, qs_run_entry *e) {
    int n = cJSON_GetArraySize(workers);
    if (!(e->figures = calloc((size_t)n + 1, sizeof *e->figures))) return QS_FAIL(QS_ERR_OOM, "out of memory recording a run");
    const cJSON *w;
    cJSON_ArrayForEach(w, workers) {
        qs_run_worker_figures *f = &e->figures[e->n_figures++];
        f->rank = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(w, "rank"));
        f->median_step_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(w, "median_step_ms"));
        f->memory_bytes = cJSON_GetNumberValue(cJSON_GetObjectItem(w, "memory_bytes"));
    }
    return QS_OK;
}

/* The largest median step time over the workers of a run (0 without workers). */
static double qs_run_sync_ms(const qs_run_entry *e) {
    double worst = 0;
    for (int i = 0; i < e->n_figures; i++)
        if (e->figures[i].median_step_ms > worst) worst = e->figures[i].median_step_ms;
    return worst;
}

qs_status qs_run_report_add(qs_run_report *r, qs_run_arm arm, uint64_t seed, const char *metrics,
                            const qs_train_result *res) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        qs_run_entry *e = realloc(r->e, (size_t)cap * sizeof *e);
        if (!e) return QS_FAIL(QS_ERR_OOM, "out of memory recording a run");
        r->e = e;
        r->cap = cap;
    }
    qs_run_entry *e = &r->e[r->n];
    memset(e, 0, sizeof *e);
    e->arm = arm;
    e->seed = seed;
    snprintf(e->metrics, sizeof e->metrics, "%s", metrics);
    e->test_accuracy = res->test_accuracy;
    e->test_loss = res->test_loss;
    e->final_loss = res->final_loss;
    e->images_per_s = res->images_per_s;
    e->train_s = res->wall_s;
    e->workers = res->workers ? cJSON_Duplicate(res->workers, true) : NULL;
    r->n++; /* freed with the report from here on */
    if (res->workers && !e->workers) return QS_FAIL(QS_ERR_OOM, "out of memory recording a run");
    QS_TRY(qs_run_read_workers(e->workers, e));
    e->synchronized_ms = qs_run_sync_ms(e);
    return QS_OK;
}

/* The string value of o, or "" when o is not a string. */
static const char *qs_run_str(const cJSON *o) {
    const char *s = cJSON_GetStringValue(o);
    return s ? s : "";
}

void qs_run_curve_free(qs_run_curve *c) {
    free(c->step);
    free(c->loss);
    free(c->train_s);
    memset(c, 0, sizeof *c);
}

qs_status qs_run_curve_read(const char *path, qs_run_curve *c) {
    memset(c, 0, sizeof *c);
    void *data = NULL;
    size_t size = 0;
    QS_TRY(qs_read_file(path, (size_t)1 << 30, &data, &size));
    int lines = 1;
    for (size_t i = 0; i < size; i++) lines += ((char *)data)[i] == '\n';
    c->step = calloc((size_t)lines, sizeof(double));
    c->loss = calloc((size_t)lines, sizeof(double));
    c->train_s = calloc((size_t)lines, sizeof(double));
    qs_status st = c->step && c->loss && c->train_s ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory reading %s", path);
    for (char *line = data, *next; st == QS_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        cJSON *rec = cJSON_Parse(line);
        if (!rec) {
            st = QS_FAIL(QS_ERR_FORMAT, "%s: a line is not JSON: %.60s", path, line);
            break;
        }
        if (strcmp(qs_run_str(cJSON_GetObjectItem(rec, "type")), "step") == 0) {
            c->step[c->n] = cJSON_GetNumberValue(cJSON_GetObjectItem(rec, "step"));
            c->loss[c->n] = cJSON_GetNumberValue(cJSON_GetObjectItem(rec, "loss"));
            c->train_s[c->n] = cJSON_GetNumberValue(cJSON_GetObjectItem(rec, "train_s"));
            c->n++;
        }
        cJSON_Delete(rec);
    }
    free(data);
    if (st != QS_OK) qs_run_curve_free(c);
    return st;
}

/* Mean |loss_a − loss_b| over the steps both curves logged (NAN when they share none). */
static double qs_run_curve_distance(const qs_run_curve *a, const qs_run_curve *b) {
    double sum = 0;
    int n = 0;
    for (int i = 0, j = 0; i < a->n && j < b->n;) {
        if (a->step[i] < b->step[j]) i++;
        else if (a->step[i] > b->step[j]) j++;
        else {
            sum += fabs(a->loss[i] - b->loss[j]);
            n++;
            i++;
            j++;
        }
    }
    return n ? sum / n : NAN;
}

/* *d = the loss-curve distance (qs_run_curve_distance) between the runs x and y, read from their
 * metrics files. */
static qs_status qs_run_entries_distance(const qs_run_entry *x, const qs_run_entry *y, double *d) {
    qs_run_curve cx, cy;
    QS_TRY(qs_run_curve_read(x->metrics, &cx));
    qs_status st = qs_run_curve_read(y->metrics, &cy);
    if (st == QS_OK) {
        *d = qs_run_curve_distance(&cx, &cy);
        qs_run_curve_free(&cy);
    }
    qs_run_curve_free(&cx);
    return st;
}

/* The entry of (arm, seed), or NULL. */
static const qs_run_entry *qs_run_find(const qs_run_report *r, qs_run_arm arm, uint64_t seed) {
    for (int i = 0; i < r->n; i++)
        if (r->e[i].arm == arm && r->e[i].seed == seed) return &r->e[i];
    return NULL;
}

/* ---- the figures ---- */

/* The plan's predicted synchronized iteration of an arm (NAN where the plan predicts none):
 * qsync its replay, the base arm the largest all-base replay over the slower types, ideal T when
 * T is the fastest type's own time. */
static double qs_run_predicted_ms(const qs_plan_predictions *pred, qs_run_arm arm) {
    if (arm == QS_ARM_QSYNC) return pred->synchronized_ms;
    if (arm == QS_ARM_IDEAL) return strncmp(pred->target_source, "fastest", 7) == 0 ? pred->target_ms : NAN;
    if (arm != QS_ARM_BASE) return NAN;
    double worst = NAN;
    for (int i = 0; i < pred->n_types; i++) {
        double ms = pred->types[i].base_synchronized_ms;
        if (!isnan(ms) && !(worst >= ms)) worst = ms;
    }
    return worst;
}

/* Arm a's figures from its runs. */
static void qs_run_arm_figures_of(qs_run_report *r, qs_run_arm arm) {
    qs_run_arm_figures *f = &r->arm[arm];
    double sync[64], acc = 0, rate = 0, loss = 0;
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        const qs_run_entry *e = &r->e[i];
        if (e->arm != arm) continue;
        if (n < 64) sync[n] = e->synchronized_ms;
        acc += e->test_accuracy;
        rate += e->images_per_s;
        loss += e->final_loss;
        n++;
    }
    f->runs = n;
    f->synchronized_ms = n ? qs_median_inplace(sync, n < 64 ? n : 64) : NAN;
    f->predicted_ms = r->has_plan ? qs_run_predicted_ms(&r->plan.predictions, arm) : NAN;
    f->prediction_error = f->predicted_ms > 0 && n ? f->predicted_ms / f->synchronized_ms - 1 : NAN;
    f->mean_test_accuracy = n ? acc / n : NAN;
    f->mean_images_per_s = n ? rate / n : NAN;
    f->mean_final_loss = n ? loss / n : NAN;
}

/* Arm a paired by seed with the base arm: accuracy differences and the mean loss-curve distance. */
static qs_status qs_run_pair(qs_run_report *r, qs_run_arm a) {
    qs_run_arm_figures *f = &r->arm[a];
    const int seeds = r->c->seeds;
    if (!(f->accuracy_diff = calloc((size_t)seeds + 1, sizeof *f->accuracy_diff)))
        return QS_FAIL(QS_ERR_OOM, "out of memory comparing the arms");
    double sum = 0, dsum = 0;
    int dn = 0;
    for (int k = 0; k < seeds; k++) {
        uint64_t seed = r->c->train.seed + (uint64_t)k;
        const qs_run_entry *x = qs_run_find(r, a, seed), *b = qs_run_find(r, QS_ARM_BASE, seed);
        if (!x || !b) continue;
        f->accuracy_diff[f->n_paired++] = x->test_accuracy - b->test_accuracy;
        sum += x->test_accuracy - b->test_accuracy;
        double d;
        QS_TRY(qs_run_entries_distance(x, b, &d));
        if (!isnan(d)) {
            dsum += d;
            dn++;
        }
    }
    f->paired = f->n_paired > 0;
    f->accuracy_diff_mean = f->paired ? sum / f->n_paired : NAN;
    f->curve_distance = dn ? dsum / dn : NAN;
    return QS_OK;
}

/* The base arm against itself across seeds, the scale for the paired differences: over
 * consecutive seeds (k, k+1) the mean loss-curve distance and mean |test accuracy difference|
 * (only with ≥ 2 seeds of the base arm). */
static qs_status qs_run_seed_spread(qs_run_report *r) {
    double dsum = 0, asum = 0;
    int dn = 0, an = 0;
    for (int k = 0; k + 1 < r->c->seeds; k++) {
        uint64_t seed = r->c->train.seed + (uint64_t)k;
        const qs_run_entry *x = qs_run_find(r, QS_ARM_BASE, seed), *y = qs_run_find(r, QS_ARM_BASE, seed + 1);
        if (!x || !y) continue;
        asum += fabs(x->test_accuracy - y->test_accuracy);
        an++;
        double d;
        QS_TRY(qs_run_entries_distance(x, y, &d));
        if (!isnan(d)) {
            dsum += d;
            dn++;
        }
    }
    r->has_spread = an > 0;
    r->spread_pairs = an;
    r->spread_distance = dn ? dsum / dn : NAN;
    r->spread_accuracy = an ? asum / an : NAN;
    return QS_OK;
}

/* Per plan section that lists precisions: its layers at each precision, the share above the
 * low precision, and the plan's Σω and solver. */
static qs_status qs_run_plan_types(qs_run_report *r) {
    const qs_plan *p = &r->plan;
    if (!r->has_plan || p->n_types == 0) return QS_OK;
    if (!(r->types = calloc((size_t)p->n_types, sizeof *r->types))) return QS_FAIL(QS_ERR_OOM, "out of memory");
    for (int i = 0; i < p->n_types; i++) {
        const qs_plan_section *s = &p->types[i];
        if (!s->has_precisions) continue; /* a type left at its default (the fastest) */
        qs_run_type_figures *t = &r->types[r->n_types++];
        const qs_plan_type_prediction *ty = qs_plan_predictions_type(&p->predictions, s->type);
        int low_n = 0;
        t->section = s;
        for (int l = 0; l < s->n_layers; l++) {
            int k = 0;
            while (k < t->n_at && t->at[k] != s->layers[l].prec) k++;
            if (k == t->n_at) t->at[t->n_at++] = s->layers[l].prec;
            t->count[k]++;
            low_n += s->layers[l].prec == r->c->low_precision;
        }
        t->share_above_low = s->n_layers ? (double)(s->n_layers - low_n) / s->n_layers : NAN;
        t->omega = ty ? ty->omega : NAN;
        t->solver = ty ? ty->solver : "given";
    }
    return QS_OK;
}

/* The plan's per-worker predictions beside the qsync arm's measured median steps (first seed). */
static qs_status qs_run_worker_predictions(qs_run_report *r) {
    const qs_plan_predictions *pred = &r->plan.predictions;
    if (!r->has_plan || pred->n_workers == 0) return QS_OK;
    if (!(r->workers = calloc((size_t)pred->n_workers, sizeof *r->workers))) return QS_FAIL(QS_ERR_OOM, "out of memory");
    const qs_run_entry *first = NULL;
    for (int i = 0; i < r->n && !first; i++) first = r->e[i].arm == QS_ARM_QSYNC ? &r->e[i] : NULL;
    for (int i = 0; i < pred->n_workers; i++) {
        const qs_plan_worker_prediction *pw = &pred->workers[i];
        qs_run_worker_prediction *o = &r->workers[r->n_workers++];
        *o = (qs_run_worker_prediction){.rank = (int)pw->rank, .type = pw->type, .predicted_ms = pw->iteration_ms,
                                        .measured_ms = NAN, .predicted_bytes = pw->memory_bytes, .measured_bytes = NAN};
        for (int k = 0; first && k < first->n_figures; k++)
            if (first->figures[k].rank == o->rank) {
                o->measured_ms = first->figures[k].median_step_ms;
                o->measured_bytes = first->figures[k].memory_bytes;
            }
        o->error = o->predicted_ms / o->measured_ms - 1;
    }
    return QS_OK;
}

qs_status qs_run_report_finish(qs_run_report *r) {
    const qs_run_config *c = r->c;
    double sync[QS_ARM_COUNT];
    for (int a = 0; a < QS_ARM_COUNT; a++) {
        qs_run_arm_figures_of(r, (qs_run_arm)a);
        sync[a] = c->arms[a] ? r->arm[a].synchronized_ms : NAN;
    }
    if (!c->arms[QS_ARM_IDEAL] && c->ideal_ms > 0) sync[QS_ARM_IDEAL] = c->ideal_ms; /* measured outside (--ideal-ms) */
    for (int a = 0; a < QS_ARM_COUNT; a++)
        r->arm[a].gap_closure = (sync[QS_ARM_BASE] - sync[a]) / (sync[QS_ARM_BASE] - sync[QS_ARM_IDEAL]);
    QS_TRY(qs_run_plan_types(r));
    QS_TRY(qs_run_worker_predictions(r));
    for (int a = 0; a < QS_ARM_COUNT; a++)
        if (a != QS_ARM_BASE && c->arms[a]) QS_TRY(qs_run_pair(r, (qs_run_arm)a));
    return qs_run_seed_spread(r);
}
