/* src/run/run_report.c — `qsync run`'s report (run_report.h). */
#include "run/run_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/stats.h"

void qs_run_report_init(qs_run_report *r, const qs_run_config *c, const cJSON *plan) {
    memset(r, 0, sizeof *r);
    r->c = c;
    r->plan = plan;
}

void qs_run_report_free(qs_run_report *r) {
    for (int i = 0; i < r->n; i++) cJSON_Delete(r->e[i].workers);
    free(r->e);
    memset(r, 0, sizeof *r);
}

/* The largest median step time over the workers of a trainer's report (0 without one). */
static double qs_run_sync_ms(const cJSON *workers) {
    double worst = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, workers) {
        double ms = cJSON_GetNumberValue(cJSON_GetObjectItem(w, "median_step_ms"));
        if (ms > worst) worst = ms;
    }
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
    e->synchronized_ms = qs_run_sync_ms(e->workers);
    if (res->workers && !e->workers) return QS_FAIL(QS_ERR_OOM, "out of memory recording a run");
    r->n++;
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

/* The plan's predicted synchronized iteration of an arm (NAN where the plan predicts none):
 * qsync its replay, the base arm the largest all-base replay over the slower types, ideal T when
 * T is the fastest type's own time. */
static double qs_run_predicted_ms(const cJSON *plan, qs_run_arm arm) {
    const cJSON *pred = cJSON_GetObjectItem(plan, "predictions"), *t;
    if (arm == QS_ARM_QSYNC) return cJSON_GetNumberValue(cJSON_GetObjectItem(pred, "synchronized_ms"));
    if (arm == QS_ARM_IDEAL) {
        const char *src = cJSON_GetStringValue(cJSON_GetObjectItem(pred, "target_source"));
        return src && strncmp(src, "fastest", 7) == 0 ? cJSON_GetNumberValue(cJSON_GetObjectItem(pred, "target_ms")) : NAN;
    }
    if (arm != QS_ARM_BASE) return NAN;
    double worst = NAN;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(pred, "types")) {
        double ms = cJSON_GetNumberValue(cJSON_GetObjectItem(t, "base_synchronized_ms"));
        if (!isnan(ms) && !(worst >= ms)) worst = ms;
    }
    return worst;
}

/* Add x as a number, or null when it is not finite. */
static void qs_run_add_num(cJSON *o, const char *key, double x) {
    if (isfinite(x)) cJSON_AddNumberToObject(o, key, x);
    else cJSON_AddNullToObject(o, key);
}

/* Per device type the plan lists layers for: the layers at each precision and the share above
 * the baseline's low precision, with the solver and Σω when the plan was chosen here. */
static cJSON *qs_run_plan_summary(const qs_run_report *r) {
    cJSON *out = cJSON_CreateObject(), *sec;
    const cJSON *pred = cJSON_GetObjectItem(r->plan, "predictions");
    const char *low = qs_precision_name(r->c->low_precision);
    qs_run_add_num(out, "target_ms", cJSON_GetNumberValue(cJSON_GetObjectItem(pred, "target_ms")));
    cJSON_AddStringToObject(out, "fastest_type", qs_run_str(cJSON_GetObjectItem(pred, "fastest_type")));
    cJSON_AddBoolToObject(out, "target_met", cJSON_IsTrue(cJSON_GetObjectItem(pred, "target_met")));
    cJSON_AddBoolToObject(out, "given", r->c->plan_path != NULL);
    cJSON *types = cJSON_AddObjectToObject(out, "types");
    cJSON_ArrayForEach(sec, cJSON_GetObjectItem(r->plan, "device_types")) {
        const cJSON *precs = cJSON_GetObjectItem(sec, "precisions"), *l;
        if (!precs) continue; /* a type left at its default (the fastest) */
        const cJSON *ty = cJSON_GetObjectItem(cJSON_GetObjectItem(pred, "types"), sec->string);
        cJSON *o = cJSON_AddObjectToObject(types, sec->string), *counts = cJSON_AddObjectToObject(o, "layers_at");
        int n = 0, low_n = 0;
        cJSON_ArrayForEach(l, precs) {
            cJSON *k = cJSON_GetObjectItem(counts, l->valuestring);
            if (k) cJSON_SetNumberValue(k, k->valuedouble + 1);
            else cJSON_AddNumberToObject(counts, l->valuestring, 1);
            n++;
            low_n += strcmp(l->valuestring, low) == 0;
        }
        cJSON_AddNumberToObject(o, "layers", n);
        qs_run_add_num(o, "share_above_low_precision", n ? (double)(n - low_n) / n : NAN);
        cJSON_AddItemToObject(o, "precisions", cJSON_Duplicate(precs, true));
        qs_run_add_num(o, "omega", cJSON_GetNumberValue(cJSON_GetObjectItem(ty, "omega")));
        cJSON_AddStringToObject(o, "solver", ty ? qs_run_str(cJSON_GetObjectItem(ty, "solver")) : "given");
    }
    return out;
}

/* One arm: its runs and their summary over seeds. *sync_median receives the median of the
 * runs' synchronized iterations (NAN without runs). */
static cJSON *qs_run_arm_json(const qs_run_report *r, qs_run_arm arm, double *sync_median) {
    cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs");
    double sync[64], acc = 0, rate = 0;
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        const qs_run_entry *e = &r->e[i];
        if (e->arm != arm) continue;
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "seed", (double)e->seed);
        cJSON_AddNumberToObject(x, "test_accuracy", e->test_accuracy);
        cJSON_AddNumberToObject(x, "test_loss", e->test_loss);
        cJSON_AddNumberToObject(x, "final_train_loss", e->final_loss);
        cJSON_AddNumberToObject(x, "images_per_s", e->images_per_s);
        cJSON_AddNumberToObject(x, "train_s", e->train_s);
        cJSON_AddNumberToObject(x, "synchronized_ms", e->synchronized_ms);
        cJSON_AddStringToObject(x, "metrics", e->metrics);
        if (e->workers) cJSON_AddItemToObject(x, "workers", cJSON_Duplicate(e->workers, true));
        cJSON_AddItemToArray(runs, x);
        if (n < 64) sync[n] = e->synchronized_ms;
        acc += e->test_accuracy;
        rate += e->images_per_s;
        n++;
    }
    *sync_median = n ? qs_median_inplace(sync, n < 64 ? n : 64) : NAN;
    qs_run_add_num(o, "synchronized_ms", *sync_median);
    double pred = r->plan ? qs_run_predicted_ms(r->plan, arm) : NAN;
    qs_run_add_num(o, "predicted_synchronized_ms", pred);
    qs_run_add_num(o, "prediction_error", pred > 0 && n ? pred / *sync_median - 1 : NAN);
    qs_run_add_num(o, "mean_test_accuracy", n ? acc / n : NAN);
    qs_run_add_num(o, "mean_images_per_s", n ? rate / n : NAN);
    return o;
}

/* The plan's per-worker predictions beside the qsync arm's measured median steps (first seed). */
static cJSON *qs_run_worker_predictions(const qs_run_report *r) {
    cJSON *out = cJSON_CreateArray();
    const cJSON *pw, *mw;
    const qs_run_entry *first = NULL;
    for (int i = 0; i < r->n && !first; i++) first = r->e[i].arm == QS_ARM_QSYNC ? &r->e[i] : NULL;
    cJSON_ArrayForEach(pw, cJSON_GetObjectItem(cJSON_GetObjectItem(r->plan, "predictions"), "workers")) {
        int rank = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(pw, "rank"));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", rank);
        cJSON_AddStringToObject(o, "type", qs_run_str(cJSON_GetObjectItem(pw, "type")));
        double p_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(pw, "iteration_ms"));
        double p_mem = cJSON_GetNumberValue(cJSON_GetObjectItem(pw, "memory_bytes"));
        double m_ms = NAN, m_mem = NAN;
        const cJSON *measured = first ? first->workers : NULL;
        cJSON_ArrayForEach(mw, measured)
            if ((int)cJSON_GetNumberValue(cJSON_GetObjectItem(mw, "rank")) == rank) {
                m_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(mw, "median_step_ms"));
                m_mem = cJSON_GetNumberValue(cJSON_GetObjectItem(mw, "memory_bytes"));
            }
        cJSON_AddNumberToObject(o, "predicted_iteration_ms", p_ms);
        qs_run_add_num(o, "measured_median_step_ms", m_ms);
        qs_run_add_num(o, "iteration_error", p_ms / m_ms - 1);
        cJSON_AddNumberToObject(o, "predicted_memory_bytes", p_mem);
        qs_run_add_num(o, "measured_memory_bytes", m_mem);
        cJSON_AddItemToArray(out, o);
    }
    return out;
}

/* Per arm other than the base arm, paired by seed with it: accuracy differences
 * ("test_accuracy_minus_<base>") and the mean loss-curve distance ("loss_curve_distance_to_<base>"),
 * <base> the base arm's label ("fp32"). */
static qs_status qs_run_paired(const qs_run_report *r, cJSON *cmp) {
    char key[64];
    const char *base = qs_run_arm_label(r->c, QS_ARM_BASE);
    snprintf(key, sizeof key, "test_accuracy_minus_%s", base);
    cJSON *acc = cJSON_AddObjectToObject(cmp, key);
    snprintf(key, sizeof key, "loss_curve_distance_to_%s", base);
    cJSON *dist = cJSON_AddObjectToObject(cmp, key);
    for (int a = 0; a < QS_ARM_COUNT; a++) {
        if (a == QS_ARM_BASE || !r->c->arms[a]) continue;
        cJSON *diffs = cJSON_CreateArray();
        double sum = 0, dsum = 0;
        int n = 0, dn = 0;
        for (int k = 0; k < r->c->seeds; k++) {
            uint64_t seed = r->c->train.seed + (uint64_t)k;
            const qs_run_entry *x = qs_run_find(r, (qs_run_arm)a, seed), *f = qs_run_find(r, QS_ARM_BASE, seed);
            if (!x || !f) continue;
            cJSON_AddItemToArray(diffs, cJSON_CreateNumber(x->test_accuracy - f->test_accuracy));
            sum += x->test_accuracy - f->test_accuracy;
            n++;
            double d;
            QS_TRY(qs_run_entries_distance(x, f, &d));
            if (!isnan(d)) {
                dsum += d;
                dn++;
            }
        }
        if (n == 0) {
            cJSON_Delete(diffs);
            continue;
        }
        cJSON *o = cJSON_AddObjectToObject(acc, qs_run_arm_label(r->c, (qs_run_arm)a));
        cJSON_AddNumberToObject(o, "mean", sum / n);
        cJSON_AddItemToObject(o, "per_seed", diffs);
        qs_run_add_num(dist, qs_run_arm_label(r->c, (qs_run_arm)a), dn ? dsum / dn : NAN);
    }
    return QS_OK;
}

/* The base arm against itself across seeds, the scale for the paired differences above: over
 * consecutive seeds (k, k+1) the mean loss-curve distance and mean |test accuracy difference|
 * ("seed_spread_<base>"; only with ≥ 2 seeds of the base arm). */
static qs_status qs_run_seed_spread(const qs_run_report *r, cJSON *cmp) {
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
    if (an == 0) return QS_OK;
    char key[64];
    snprintf(key, sizeof key, "seed_spread_%s", qs_run_arm_label(r->c, QS_ARM_BASE));
    cJSON *o = cJSON_AddObjectToObject(cmp, key);
    cJSON_AddNumberToObject(o, "seed_pairs", an);
    qs_run_add_num(o, "loss_curve_distance", dn ? dsum / dn : NAN);
    cJSON_AddNumberToObject(o, "test_accuracy_abs_diff", asum / an);
    return QS_OK;
}

qs_status qs_run_report_finish(const qs_run_report *r, cJSON **doc) {
    const qs_run_config *c = r->c;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "format", "qsync-run-report");
    cJSON_AddNumberToObject(d, "version", 1);
    cJSON_AddStringToObject(d, "model", c->train.model);
    cJSON_AddNumberToObject(d, "width", (double)c->train.model_opt.width);
    cJSON_AddStringToObject(d, "data", c->train.data);
    cJSON_AddStringToObject(d, "cluster", c->cluster->origin);
    cJSON_AddNumberToObject(d, "global_batch", (double)c->train.batch);
    cJSON_AddNumberToObject(d, "steps", (double)c->train.steps);
    cJSON_AddNumberToObject(d, "epochs", (double)(c->train.steps > 0 ? 0 : c->train.epochs));
    cJSON_AddNumberToObject(d, "train_subset", (double)c->train.train_subset);
    cJSON_AddNumberToObject(d, "eval_subset", (double)c->train.eval_subset);
    cJSON_AddNumberToObject(d, "seeds", c->seeds);
    cJSON_AddStringToObject(d, "base_precision", qs_precision_name(c->base_precision));
    cJSON_AddStringToObject(d, "low_precision", qs_precision_name(c->low_precision));
    cJSON_AddStringToObject(d, "grad_rounding", c->train.grad_rounding == QS_GRAD_ROUND_UNSET ? "stochastic"
                                                : qs_grad_rounding_name(c->train.grad_rounding));
    cJSON_AddStringToObject(d, "weight_scales", c->train.weight_scales == QS_WEIGHT_SCALES_UNSET ? "tensor"
                                                : qs_weight_scales_name(c->train.weight_scales));
    cJSON_AddNumberToObject(d, "fp8_amax_history", c->train.fp8_amax_history);
    cJSON_AddStringToObject(d, "indicator", c->plan_path ? "none (plan given)" : qs_indicator_method_name(c->method));
    if (c->plan_path) cJSON_AddStringToObject(d, "plan_file", c->plan_path);
    cJSON_AddItemToObject(d, "plan", qs_run_plan_summary(r));
    cJSON *arms = cJSON_AddObjectToObject(d, "arms");
    double sync[QS_ARM_COUNT];
    for (int a = 0; a < QS_ARM_COUNT; a++) {
        sync[a] = NAN;
        if (c->arms[a])
            cJSON_AddItemToObject(arms, qs_run_arm_label(c, (qs_run_arm)a), qs_run_arm_json(r, (qs_run_arm)a, &sync[a]));
    }
    if (!c->arms[QS_ARM_IDEAL] && c->ideal_ms > 0) { /* measured outside this job (--ideal-ms) */
        sync[QS_ARM_IDEAL] = c->ideal_ms;
        cJSON_AddNumberToObject(d, "ideal_ms_given", c->ideal_ms);
    }
    cJSON_AddItemToObject(d, "qsync_workers", qs_run_worker_predictions(r));
    cJSON *cmp = cJSON_AddObjectToObject(d, "comparison");
    cJSON *gap = cJSON_AddObjectToObject(cmp, "gap_closure");
    for (int a = 0; a < QS_ARM_COUNT; a++)
        if (a != QS_ARM_BASE && a != QS_ARM_IDEAL && c->arms[a])
            qs_run_add_num(gap, qs_run_arm_label(c, (qs_run_arm)a), (sync[QS_ARM_BASE] - sync[a]) /
                                                                     (sync[QS_ARM_BASE] - sync[QS_ARM_IDEAL]));
    qs_status st = qs_run_paired(r, cmp);
    if (st == QS_OK) st = qs_run_seed_spread(r, cmp);
    if (st != QS_OK) {
        cJSON_Delete(d);
        return st;
    }
    *doc = d;
    return QS_OK;
}
