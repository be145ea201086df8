/* src/plan/sensitivity.c — quantize one layer at a time and rank the indicator against the
 * measured loss and gradient deviations (see sensitivity.h and docs/INDICATOR.md). */
#include "plan/sensitivity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/timer.h"
#include "graph/precision.h"
#include "graph/tensor_access.h"
#include "models/models.h"
#include "io/plan_file.h"

void qs_sensitivity_options_default(qs_sensitivity_options *o) {
    memset(o, 0, sizeof *o);
    o->gamma = 4;
    o->seed = 1;
}

void qs_sensitivity_free(qs_sensitivity *s) {
    if (!s) return;
    qs_indicator_free(&s->ind);
    free(s->points);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------ checks */

/* m must be set up for b->batch, at FP32 everywhere, without casts, and b must be usable. */
static qs_status qs_sens_check_input(const qs_model *m, const qs_sens_batches *b) {
    if (!m || !m->be || !b || !b->x || !b->y || b->count < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "sensitivity: needs a set-up model and at least one batch (got %d)",
                       b ? b->count : 0);
    if (b->batch != m->batch)
        return QS_FAIL(QS_ERR_INVALID_ARG, "sensitivity: batches of %lld samples, but model %s is set up for %lld",
                       (long long)b->batch, m->arch, (long long)m->batch);
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        if (n->kind == QS_NODE_CAST)
            return QS_FAIL(QS_ERR_INVALID_ARG, "sensitivity: model %s has quantizing casts; give it at FP32", m->arch);
        if (qs_node_precision_selectable(n->kind) && n->prec != QS_PREC_FP32)
            return QS_FAIL(QS_ERR_INVALID_ARG, "sensitivity: layer %s of %s is at %s; the reference is all FP32",
                           n->name, m->arch, qs_precision_name(n->prec));
    }
    return QS_OK;
}

/* The precisions to measure into out->precs: o's list, or the backend's native ones (and the
 * emulated ones when allowed) other than fp32; each checked against the backend through the
 * plan machinery, so a refusal reads as `qsync train` would give it. */
static qs_status qs_sens_pick_precisions(qs_model *m, const qs_sensitivity_options *o, qs_sensitivity *out) {
    qs_backend *be = m->be;
    out->n_precs = 0;
    if (o->precisions && o->n_precisions > 0) {
        if (o->n_precisions > QS_PREC_COUNT)
            return QS_FAIL(QS_ERR_INVALID_ARG, "sensitivity: %d precisions listed, at most %d exist", o->n_precisions,
                           QS_PREC_COUNT);
        for (int k = 0; k < o->n_precisions; k++) out->precs[out->n_precs++] = o->precisions[k];
    } else {
        for (int p = QS_PREC_FP32 + 1; p < QS_PREC_COUNT; p++) {
            qs_prec_support s = be->ops->precision_support(be, (qs_precision)p);
            if (s == QS_PREC_NATIVE || (s == QS_PREC_EMULATED && o->allow_emulated))
                out->precs[out->n_precs++] = (qs_precision)p;
        }
        if (out->n_precs == 0)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "sensitivity: the %s backend runs no precision other than fp32%s",
                           be->ops->name, o->allow_emulated ? "" : " natively (allow emulated precisions)");
    }
    for (int k = 0; k < out->n_precs; k++) {
        if ((unsigned)out->precs[k] >= QS_PREC_COUNT)
            return QS_FAIL(QS_ERR_INVALID_ARG, "sensitivity: precision %d does not exist", (int)out->precs[k]);
        for (int j = 0; j < k; j++)
            if (out->precs[j] == out->precs[k])
                return QS_FAIL(QS_ERR_INVALID_ARG, "sensitivity: precision %s is listed twice",
                               qs_precision_name(out->precs[k]));
        char origin[64];
        snprintf(origin, sizeof origin, "sensitivity at %s", qs_precision_name(out->precs[k]));
        qs_plan u;
        qs_plan_uniform(m->arch, out->precs[k], origin, &u);
        qs_status st = qs_plan_validate(&u, m, be, o->allow_emulated);
        qs_plan_free(&u);
        QS_TRY(st);
    }
    return QS_OK;
}

/* ------------------------------------------------------------------ one build of the model */

/* Whether two models lay out their parameter and buffer tables identically. */
static bool qs_sens_same_tables(const qs_model *a, const qs_model *b) {
    if (a->params.count != b->params.count || a->params.bytes != b->params.bytes ||
        a->buffers.count != b->buffers.count || a->buffers.bytes != b->buffers.bytes)
        return false;
    for (int i = 0; i < a->params.count; i++)
        if (strcmp(a->params.entries[i].name, b->params.entries[i].name) != 0 ||
            a->params.entries[i].offset != b->params.entries[i].offset)
            return false;
    return true;
}

/* Build ref's model again as training would (zoo build, fuse, precisions through a plan that
 * lists only `layer` at `prec` — none when layer is NULL — casts, setup with ref's seed), on
 * ref's backend, holding the weights w. On failure *out is NULL. */
static qs_status qs_sens_build(const qs_model *ref, const qs_model_snapshot *w, const char *layer, qs_precision prec,
                               qs_model **out) {
    *out = NULL;
    qs_model *m = NULL;
    QS_TRY(qs_models_build_config(ref->arch, ref->config, &m));
    qs_model_fuse(m);
    char origin[QS_NAME_MAX + 48];
    snprintf(origin, sizeof origin, "sensitivity: %s at %s", layer ? layer : "every layer", qs_precision_name(prec));
    qs_plan plan;
    qs_plan_uniform(ref->arch, QS_PREC_FP32, origin, &plan);
    plan.uniform = false;
    snprintf(plan.config, sizeof plan.config, "%s", ref->config);
    plan.grad_rounding = ref->grad_round_nearest ? QS_GRAD_ROUND_NEAREST : QS_GRAD_ROUND_STOCHASTIC;
    plan.weight_scales = ref->weight_per_channel ? QS_WEIGHT_SCALES_CHANNEL : QS_WEIGHT_SCALES_TENSOR;
    qs_status st = QS_OK;
    if (layer) {
        plan.layers = calloc(1, sizeof *plan.layers);
        if (!plan.layers) st = QS_FAIL(QS_ERR_OOM, "out of memory for a plan");
        else {
            snprintf(plan.layers[0].name, sizeof plan.layers[0].name, "%s", layer);
            plan.layers[0].prec = prec;
            plan.n_layers = 1;
        }
    }
    qs_precision_options po;
    qs_precision_options_default(&po);
    po.allow_emulated = true; /* the precisions were checked against the caller's choice already */
    if (st == QS_OK) st = qs_plan_precision_setup(&plan, m, ref->be, &po);
    qs_plan_free(&plan);
    if (st == QS_OK) st = qs_model_setup(m, ref->be, ref->batch, ref->seed);
    if (st == QS_OK && !qs_sens_same_tables(ref, m))
        st = QS_FAIL(QS_ERR_INTERNAL, "sensitivity: %s rebuilt from its config has other parameters", ref->arch);
    if (st == QS_OK) st = qs_model_snapshot_restore(m, w);
    if (st != QS_OK) {
        qs_model_free(m);
        return st;
    }
    *out = m;
    return QS_OK;
}

/* ------------------------------------------------------------------ running the batches */

/* What the FP32 reference produced on each batch. */
typedef struct qs_sens_ref {
    double *loss;    /* [batch] mean loss */
    double *grad_sq; /* [batch] ‖g‖² */
    float *grads;    /* [batch][grad_floats]: the gradient table as laid out on the backend */
    size_t grad_floats;
} qs_sens_ref;

static void qs_sens_ref_free(qs_sens_ref *r) {
    free(r->loss);
    free(r->grad_sq);
    free(r->grads);
    memset(r, 0, sizeof *r);
}

/* Σ over m's parameters of (a − b)² (b NULL: of a²), over the table entries only (not the
 * alignment padding between them). */
static double qs_sens_sq_dist(const qs_model *m, const float *a, const float *b) {
    double s = 0;
    for (int e = 0; e < m->params.count; e++) {
        const qs_table_entry *t = &m->params.entries[e];
        const float *pa = a + t->offset / sizeof(float), *pb = b ? b + t->offset / sizeof(float) : NULL;
        for (int64_t i = 0; i < t->numel; i++) {
            double d = (double)pa[i] - (pb ? (double)pb[i] : 0.0);
            s += d * d;
        }
    }
    return s;
}

/* Forward + backward of batch k on m; its mean loss into *loss and its gradient table into
 * grads (grad_floats floats). */
static qs_status qs_sens_step(qs_model *m, const qs_sens_batches *b, int k, double *loss, float *grads) {
    const int64_t per = m->in_h * m->in_w * m->in_c;
    QS_TRY(qs_model_forward(m, b->x + (size_t)k * (size_t)(b->batch * per),
                            b->y + (size_t)k * (size_t)(b->batch * m->label_len), true));
    QS_TRY(qs_model_backward(m, 1.0f));
    QS_TRY(qs_model_loss_accuracy(m, m->batch, loss, NULL));
    return qs_model_table_read(m, QS_TABLE_GRADS, grads);
}

/* The reference run: every batch on the all-FP32 model m, kept in *r. */
static qs_status qs_sens_reference(qs_model *m, const qs_sens_batches *b, qs_sens_ref *r) {
    memset(r, 0, sizeof *r);
    r->grad_floats = m->params.bytes / sizeof(float);
    r->loss = calloc((size_t)b->count, sizeof *r->loss);
    r->grad_sq = calloc((size_t)b->count, sizeof *r->grad_sq);
    r->grads = malloc((size_t)b->count * r->grad_floats * sizeof(float) + 1);
    if (!r->loss || !r->grad_sq || !r->grads)
        return QS_FAIL(QS_ERR_OOM, "out of memory for %d reference gradients of %s", b->count, m->arch);
    for (int k = 0; k < b->count; k++) {
        float *g = r->grads + (size_t)k * r->grad_floats;
        QS_TRY(qs_sens_step(m, b, k, &r->loss[k], g));
        r->grad_sq[k] = qs_sens_sq_dist(m, g, NULL);
    }
    return QS_OK;
}

/* Every batch on the model m with one quantized layer: the deviations from r into *pt. */
static qs_status qs_sens_measure_point(qs_model *m, const qs_sens_batches *b, const qs_sens_ref *r, float *grads,
                                       qs_sens_point *pt) {
    double abs_sum = 0, signed_sum = 0, grad_sum = 0;
    for (int k = 0; k < b->count; k++) {
        double loss;
        QS_TRY(qs_sens_step(m, b, k, &loss, grads));
        abs_sum += fabs(loss - r->loss[k]);
        signed_sum += loss - r->loss[k];
        double d2 = qs_sens_sq_dist(m, grads, r->grads + (size_t)k * r->grad_floats);
        grad_sum += r->grad_sq[k] > 0 ? d2 / r->grad_sq[k] : d2 > 0 ? INFINITY : 0;
    }
    pt->loss_dev = abs_sum / b->count;
    pt->loss_dev_signed = signed_sum / b->count;
    pt->grad_dev = grad_sum / b->count;
    return QS_OK;
}

/* ------------------------------------------------------------------ the indicator */

/* Replays the fixed batches for qs_indicator_collect. */
typedef struct qs_sens_replay {
    const qs_sens_batches *b;
    int64_t per;       /* floats per sample */
    int64_t label_len; /* labels per sample */
    int next;
} qs_sens_replay;

static qs_status qs_sens_replay_next(void *ctx, float *x, int32_t *y) {
    qs_sens_replay *r = ctx;
    const int k = r->next++ % r->b->count;
    memcpy(x, r->b->x + (size_t)k * (size_t)(r->b->batch * r->per), (size_t)(r->b->batch * r->per) * sizeof(float));
    const int64_t labels = r->b->batch * r->label_len;
    memcpy(y, r->b->y + (size_t)k * (size_t)labels, (size_t)labels * sizeof(int32_t));
    return QS_OK;
}

/* The indicator's statistics on a fresh all-FP32 build holding w, over the same batches. */
static qs_status qs_sens_indicator(const qs_model *ref, const qs_model_snapshot *w, const qs_sens_batches *b,
                                   uint64_t seed, qs_indicator *ind) {
    qs_model *m = NULL;
    QS_TRY(qs_sens_build(ref, w, NULL, QS_PREC_FP32, &m));
    qs_sens_replay rp = {.b = b, .per = m->in_h * m->in_w * m->in_c, .label_len = m->label_len, .next = 0};
    qs_status st = qs_indicator_collect(m, b->count, qs_sens_replay_next, &rp, seed, ind);
    qs_model_free(m);
    return st;
}

/* ------------------------------------------------------------------ correlations */

/* Spearman's rho of ω (every method) against both deviations over the points pts[i·stride],
 * i < n, into *c. */
static qs_status qs_sens_correlate(const qs_sens_point *pts, int n, int stride, qs_sens_corr *c) {
    c->points = n;
    const size_t cap = (size_t)(n > 0 ? n : 1);
    double *om = malloc(cap * sizeof *om), *ld = malloc(cap * sizeof *ld), *gd = malloc(cap * sizeof *gd);
    qs_status st = om && ld && gd ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for the correlations");
    for (int i = 0; st == QS_OK && i < n; i++) {
        ld[i] = pts[(size_t)i * (size_t)stride].loss_dev;
        gd[i] = pts[(size_t)i * (size_t)stride].grad_dev;
    }
    for (int meth = 0; st == QS_OK && meth < QS_IND_COUNT; meth++) {
        for (int i = 0; i < n; i++) om[i] = pts[(size_t)i * (size_t)stride].omega[meth];
        st = qs_spearman(om, ld, n, &c->loss[meth]);
        if (st == QS_OK) st = qs_spearman(om, gd, n, &c->grad[meth]);
    }
    free(om);
    free(ld);
    free(gd);
    return st;
}

/* ω of every point by every method, then the correlations over all points and per precision. */
static qs_status qs_sens_rank(qs_sensitivity *s) {
    for (int i = 0; i < s->n_points; i++) {
        qs_sens_point *pt = &s->points[i];
        for (int meth = 0; meth < QS_IND_COUNT; meth++) {
            double om[QS_PREC_COUNT];
            qs_indicator_omega(&s->ind, pt->layer, (qs_indicator_method)meth, s->gamma, s->seed, om, NULL, NULL);
            pt->omega[meth] = om[pt->prec];
        }
    }
    QS_TRY(qs_sens_correlate(s->points, s->n_points, 1, &s->all));
    for (int k = 0; k < s->n_precs; k++)
        QS_TRY(qs_sens_correlate(s->points + k, s->ind.n_layers, s->n_precs, &s->per_prec[k]));
    return QS_OK;
}

/* ------------------------------------------------------------------ the measurement */

/* Every (layer, precision) point of s, each on its own build holding w, against r. */
static qs_status qs_sens_sweep(const qs_model *ref, const qs_model_snapshot *w, const qs_sens_batches *b,
                               const qs_sens_ref *r, const qs_sensitivity_options *o, qs_sensitivity *s) {
    const double t0 = qs_now_ms();
    float *grads = malloc(r->grad_floats * sizeof(float) + 1);
    if (!grads) return QS_FAIL(QS_ERR_OOM, "out of memory for a gradient of %s", ref->arch);
    qs_status st = QS_OK;
    for (int li = 0; st == QS_OK && li < s->ind.n_layers; li++) {
        const char *name = s->ind.layers[li].name;
        for (int k = 0; st == QS_OK && k < s->n_precs; k++) {
            qs_sens_point *pt = &s->points[li * s->n_precs + k];
            pt->layer = li;
            pt->prec = s->precs[k];
            qs_model *m = NULL;
            st = qs_sens_build(ref, w, name, pt->prec, &m);
            if (st == QS_OK) st = qs_sens_measure_point(m, b, r, grads, pt);
            qs_model_free(m);
            if (st != QS_OK) st = qs_error_wrap(st, "sensitivity of %s at %s: ", name, qs_precision_name(pt->prec));
        }
        if (st == QS_OK && o->progress)
            o->progress(o->progress_ctx, li, s->ind.n_layers, name, (qs_now_ms() - t0) / 1e3);
    }
    free(grads);
    return st;
}

qs_status qs_sensitivity_measure(qs_model *m, const qs_sens_batches *b, const qs_sensitivity_options *o,
                                 qs_sensitivity *out) {
    memset(out, 0, sizeof *out);
    qs_sensitivity_options defaults;
    if (!o) {
        qs_sensitivity_options_default(&defaults);
        o = &defaults;
    }
    QS_TRY(qs_sens_check_input(m, b));
    out->batches = b->count;
    out->gamma = o->gamma;
    out->seed = o->seed;
    out->grad_round_nearest = m->grad_round_nearest;
    out->weight_per_channel = m->weight_per_channel;
    qs_status st = qs_sens_pick_precisions(m, o, out);
    qs_model_snapshot w = {0};
    qs_sens_ref r = {0};
    qs_model *ref = NULL;
    if (st == QS_OK) st = qs_model_snapshot_take(m, &w);
    if (st == QS_OK) st = qs_sens_indicator(m, &w, b, o->seed, &out->ind);
    if (st == QS_OK) {
        out->n_points = out->ind.n_layers * out->n_precs;
        out->points = calloc((size_t)out->n_points, sizeof *out->points);
        if (!out->points) st = QS_FAIL(QS_ERR_OOM, "out of memory for %d measurements", out->n_points);
    }
    if (st == QS_OK) st = qs_sens_build(m, &w, NULL, QS_PREC_FP32, &ref);
    if (st == QS_OK) st = qs_sens_reference(ref, b, &r);
    if (st == QS_OK) {
        double loss = 0, gsq = 0;
        for (int k = 0; k < b->count; k++) loss += r.loss[k], gsq += r.grad_sq[k];
        out->ref_loss = loss / b->count;
        out->ref_grad_sq_norm = gsq / b->count;
    }
    qs_model_free(ref);
    if (st == QS_OK) st = qs_sens_sweep(m, &w, b, &r, o, out);
    if (st == QS_OK) st = qs_sens_rank(out);
    qs_sens_ref_free(&r);
    qs_model_snapshot_free(&w);
    if (st != QS_OK) qs_sensitivity_free(out);
    return st;
}

/* ------------------------------------------------------------------ the document */

/* obj[key] = v, or null when v is not finite (JSON has no NaN). */
static void qs_sens_num(cJSON *obj, const char *key, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(obj, key, v);
    else cJSON_AddNullToObject(obj, key);
}

/* {method: v[method]} for every indicator method. */
static cJSON *qs_sens_methods_obj(const double v[QS_IND_COUNT]) {
    cJSON *o = cJSON_CreateObject();
    for (int meth = 0; o && meth < QS_IND_COUNT; meth++)
        qs_sens_num(o, qs_indicator_method_name((qs_indicator_method)meth), v[meth]);
    return o;
}

/* {"points": n, "loss_dev": {method: ρ}, "grad_dev": {method: ρ}}. */
static cJSON *qs_sens_corr_obj(const qs_sens_corr *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "points", c->points);
    cJSON_AddItemToObject(o, "loss_dev", qs_sens_methods_obj(c->loss));
    cJSON_AddItemToObject(o, "grad_dev", qs_sens_methods_obj(c->grad));
    return o;
}

/* layers.<name>: kind, depth and per precision the deviations and ω by every method. */
static void qs_sens_layers_json(cJSON *layers, const qs_sensitivity *s) {
    for (int li = 0; layers && li < s->ind.n_layers; li++) {
        const qs_layer_stats *l = &s->ind.layers[li];
        cJSON *o = cJSON_AddObjectToObject(layers, l->name);
        if (!o) return;
        cJSON_AddStringToObject(o, "kind", l->kind);
        cJSON_AddNumberToObject(o, "depth", l->depth);
        cJSON *precs = cJSON_AddObjectToObject(o, "precisions");
        for (int k = 0; precs && k < s->n_precs; k++) {
            const qs_sens_point *pt = &s->points[li * s->n_precs + k];
            cJSON *p = cJSON_AddObjectToObject(precs, qs_precision_name(pt->prec));
            if (!p) return;
            qs_sens_num(p, "loss_dev", pt->loss_dev);
            qs_sens_num(p, "loss_dev_signed", pt->loss_dev_signed);
            qs_sens_num(p, "grad_dev", pt->grad_dev);
            cJSON_AddItemToObject(p, "omega", qs_sens_methods_obj(pt->omega));
        }
    }
}

cJSON *qs_sensitivity_to_json(const qs_sensitivity *s, const qs_sensitivity_meta *meta) {
    cJSON *doc = cJSON_CreateObject();
    if (!doc) return NULL;
    qs_analysis_doc_head(doc, QS_SENSITIVITY_FORMAT, QS_SENSITIVITY_VERSION, meta->model, meta->config, meta->data,
                         meta->checkpoint);
    cJSON_AddNumberToObject(doc, "batch", (double)s->ind.batch);
    cJSON_AddNumberToObject(doc, "batches", s->batches);
    cJSON_AddNumberToObject(doc, "seed", (double)meta->data_seed);
    cJSON_AddNumberToObject(doc, "gamma", s->gamma);
    cJSON_AddNumberToObject(doc, "indicator_seed", (double)s->seed);
    cJSON_AddStringToObject(doc, "grad_rounding", s->grad_round_nearest ? "nearest" : "stochastic");
    cJSON_AddStringToObject(doc, "weight_scales", s->weight_per_channel ? "channel" : "tensor");
    cJSON *precs = cJSON_AddArrayToObject(doc, "precisions");
    for (int k = 0; precs && k < s->n_precs; k++)
        cJSON_AddItemToArray(precs, cJSON_CreateString(qs_precision_name(s->precs[k])));
    cJSON *ref = cJSON_AddObjectToObject(doc, "reference");
    if (ref) {
        qs_sens_num(ref, "loss", s->ref_loss);
        qs_sens_num(ref, "grad_sq_norm", s->ref_grad_sq_norm);
    }
    qs_sens_layers_json(cJSON_AddObjectToObject(doc, "layers"), s);
    cJSON *corr = cJSON_AddObjectToObject(doc, "correlations");
    if (corr) {
        cJSON_AddItemToObject(corr, "all", qs_sens_corr_obj(&s->all));
        cJSON *per = cJSON_AddObjectToObject(corr, "per_precision");
        for (int k = 0; per && k < s->n_precs; k++)
            cJSON_AddItemToObject(per, qs_precision_name(s->precs[k]), qs_sens_corr_obj(&s->per_prec[k]));
    }
    return doc;
}
