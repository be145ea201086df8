/* src/run/run_report_doc.c — defines: `qsync run`'s report as its JSON document
 * (qs_run_report_json, run_report.h; format docs/RUN.md). */
#include "run/run_report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Add x as a number, or null when it is not finite. */
static void qs_run_add_num(cJSON *o, const char *key, double x) {
    if (isfinite(x)) cJSON_AddNumberToObject(o, key, x);
    else cJSON_AddNullToObject(o, key);
}

/* "plan": T, the fastest type, whether T was met, and per planned type its layers at each
 * precision, the share above the low precision, its precisions, Σω and solver. */
static cJSON *qs_run_plan_json(const qs_run_report *r) {
    cJSON *out = cJSON_CreateObject();
    const qs_plan_predictions *pred = r->has_plan ? &r->plan.predictions : NULL;
    qs_run_add_num(out, "target_ms", pred ? pred->target_ms : NAN);
    cJSON_AddStringToObject(out, "fastest_type", pred ? pred->fastest_type : "");
    cJSON_AddBoolToObject(out, "target_met", pred && pred->target_met);
    cJSON_AddBoolToObject(out, "given", r->c->plan_path != NULL);
    cJSON *types = cJSON_AddObjectToObject(out, "types");
    for (int i = 0; i < r->n_types; i++) {
        const qs_run_type_figures *t = &r->types[i];
        const qs_plan_section *s = t->section;
        cJSON *o = cJSON_AddObjectToObject(types, s->type), *counts = cJSON_AddObjectToObject(o, "layers_at");
        for (int k = 0; k < t->n_at; k++) cJSON_AddNumberToObject(counts, qs_precision_name(t->at[k]), t->count[k]);
        cJSON_AddNumberToObject(o, "layers", s->n_layers);
        qs_run_add_num(o, "share_above_low_precision", t->share_above_low);
        cJSON *precs = cJSON_AddObjectToObject(o, "precisions");
        for (int l = 0; l < s->n_layers; l++)
            cJSON_AddStringToObject(precs, s->layers[l].name, qs_precision_name(s->layers[l].prec));
        qs_run_add_num(o, "omega", t->omega);
        cJSON_AddStringToObject(o, "solver", t->solver);
    }
    return out;
}

/* One arm: its runs and their summary over seeds. */
static cJSON *qs_run_arm_json(const qs_run_report *r, qs_run_arm arm) {
    const qs_run_arm_figures *f = &r->arm[arm];
    cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs");
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
    }
    qs_run_add_num(o, "synchronized_ms", f->synchronized_ms);
    qs_run_add_num(o, "predicted_synchronized_ms", f->predicted_ms);
    qs_run_add_num(o, "prediction_error", f->prediction_error);
    qs_run_add_num(o, "mean_test_accuracy", f->mean_test_accuracy);
    qs_run_add_num(o, "mean_images_per_s", f->mean_images_per_s);
    return o;
}

/* "qsync_workers": the plan's per-worker predictions beside the qsync arm's first run. */
static cJSON *qs_run_workers_json(const qs_run_report *r) {
    cJSON *out = cJSON_CreateArray();
    for (int i = 0; i < r->n_workers; i++) {
        const qs_run_worker_prediction *w = &r->workers[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", w->rank);
        cJSON_AddStringToObject(o, "type", w->type);
        cJSON_AddNumberToObject(o, "predicted_iteration_ms", w->predicted_ms);
        qs_run_add_num(o, "measured_median_step_ms", w->measured_ms);
        qs_run_add_num(o, "iteration_error", w->error);
        cJSON_AddNumberToObject(o, "predicted_memory_bytes", w->predicted_bytes);
        qs_run_add_num(o, "measured_memory_bytes", w->measured_bytes);
        cJSON_AddItemToArray(out, o);
    }
    return out;
}

/* "comparison": the gap closure, and per arm other than the base arm, paired by seed with it,
 * the accuracy differences ("test_accuracy_minus_<base>") and the mean loss-curve distance
 * ("loss_curve_distance_to_<base>"); the base arm's own spread over seeds ("seed_spread_<base>"). */
static cJSON *qs_run_comparison_json(const qs_run_report *r) {
    const qs_run_config *c = r->c;
    const char *base = qs_run_arm_label(c, QS_ARM_BASE);
    char key[64];
    cJSON *cmp = cJSON_CreateObject(), *gap = cJSON_AddObjectToObject(cmp, "gap_closure");
    for (int a = 0; a < QS_ARM_COUNT; a++)
        if (a != QS_ARM_BASE && a != QS_ARM_IDEAL && c->arms[a])
            qs_run_add_num(gap, qs_run_arm_label(c, (qs_run_arm)a), r->arm[a].gap_closure);
    snprintf(key, sizeof key, "test_accuracy_minus_%s", base);
    cJSON *acc = cJSON_AddObjectToObject(cmp, key);
    snprintf(key, sizeof key, "loss_curve_distance_to_%s", base);
    cJSON *dist = cJSON_AddObjectToObject(cmp, key);
    for (int a = 0; a < QS_ARM_COUNT; a++) {
        const qs_run_arm_figures *f = &r->arm[a];
        if (a == QS_ARM_BASE || !c->arms[a] || !f->paired) continue;
        cJSON *o = cJSON_AddObjectToObject(acc, qs_run_arm_label(c, (qs_run_arm)a));
        cJSON_AddNumberToObject(o, "mean", f->accuracy_diff_mean);
        cJSON *diffs = cJSON_AddArrayToObject(o, "per_seed");
        for (int k = 0; k < f->n_paired; k++) cJSON_AddItemToArray(diffs, cJSON_CreateNumber(f->accuracy_diff[k]));
        qs_run_add_num(dist, qs_run_arm_label(c, (qs_run_arm)a), f->curve_distance);
    }
    if (!r->has_spread) return cmp;
    snprintf(key, sizeof key, "seed_spread_%s", base);
    cJSON *o = cJSON_AddObjectToObject(cmp, key);
    cJSON_AddNumberToObject(o, "seed_pairs", r->spread_pairs);
    qs_run_add_num(o, "loss_curve_distance", r->spread_distance);
    cJSON_AddNumberToObject(o, "test_accuracy_abs_diff", r->spread_accuracy);
    return cmp;
}

/* The run's settings at the head of the report. */
static void qs_run_settings_json(const qs_run_config *c, cJSON *d) {
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
}

cJSON *qs_run_report_json(const qs_run_report *r) {
    const qs_run_config *c = r->c;
    cJSON *d = cJSON_CreateObject();
    if (!d) return NULL;
    qs_run_settings_json(c, d);
    cJSON_AddItemToObject(d, "plan", qs_run_plan_json(r));
    cJSON *arms = cJSON_AddObjectToObject(d, "arms");
    for (int a = 0; a < QS_ARM_COUNT; a++)
        if (c->arms[a]) cJSON_AddItemToObject(arms, qs_run_arm_label(c, (qs_run_arm)a), qs_run_arm_json(r, (qs_run_arm)a));
    if (!c->arms[QS_ARM_IDEAL] && c->ideal_ms > 0) cJSON_AddNumberToObject(d, "ideal_ms_given", c->ideal_ms);
    cJSON_AddItemToObject(d, "qsync_workers", qs_run_workers_json(r));
    cJSON_AddItemToObject(d, "comparison", qs_run_comparison_json(r));
    return d;
}
