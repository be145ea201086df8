/* src/io/plan_write.c — defines: writing plan files: a model's current precisions as a plan,
 * a plan as JSON, saved atomically (plan_file.h; format docs/PLANS.md). */
#include "io/plan_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "graph/precision.h"

qs_status qs_plan_from_model(const qs_model *m, qs_plan *out) {
    qs_plan_uniform(m->arch, QS_PREC_FP32, m->arch, out); /* default fp32, the model's arch */
    out->uniform = false;
    snprintf(out->config, sizeof out->config, "%s", m->config);
    out->grad_rounding = m->grad_round_nearest ? QS_GRAD_ROUND_NEAREST : QS_GRAD_ROUND_STOCHASTIC;
    out->weight_scales = m->weight_per_channel ? QS_WEIGHT_SCALES_CHANNEL : QS_WEIGHT_SCALES_TENSOR;
    out->layers = calloc((size_t)m->n_nodes + 1, sizeof *out->layers);
    if (!out->layers) return QS_FAIL(QS_ERR_OOM, "plan of model %s: out of memory", m->arch);
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *nd = &m->nodes[i];
        if (!qs_node_precision_selectable(nd->kind)) continue;
        qs_layer_prec *l = &out->layers[out->n_layers++];
        snprintf(l->name, sizeof l->name, "%s", nd->name);
        l->prec = nd->prec;
    }
    return QS_OK;
}

/* Add "precisions": {name: precision, ...} to o. */
static bool qs_plan_add_layers(cJSON *o, const qs_layer_prec *layers, int n) {
    cJSON *prec = cJSON_AddObjectToObject(o, "precisions");
    bool ok = prec != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = cJSON_AddStringToObject(prec, layers[i].name, qs_precision_name(layers[i].prec)) != NULL;
    return ok;
}

/* Add "options" to o when either option is set. */
static bool qs_plan_add_options(cJSON *o, qs_grad_rounding gr, qs_weight_scales ws) {
    if (gr == QS_GRAD_ROUND_UNSET && ws == QS_WEIGHT_SCALES_UNSET) return true;
    cJSON *opt = cJSON_AddObjectToObject(o, "options");
    bool ok = opt != NULL;
    if (ok && gr != QS_GRAD_ROUND_UNSET) ok = cJSON_AddStringToObject(opt, "grad_rounding", qs_grad_rounding_name(gr)) != NULL;
    if (ok && ws != QS_WEIGHT_SCALES_UNSET) ok = cJSON_AddStringToObject(opt, "weight_scales", qs_weight_scales_name(ws)) != NULL;
    return ok;
}

/* Add "device_types" (p's sections) to o. */
static bool qs_plan_add_types(cJSON *o, const qs_plan *p) {
    cJSON *types = cJSON_AddObjectToObject(o, "device_types");
    bool ok = types != NULL;
    for (int i = 0; ok && i < p->n_types; i++) {
        const qs_plan_section *s = &p->types[i];
        cJSON *so = cJSON_AddObjectToObject(types, s->type);
        ok = so != NULL;
        if (ok && s->has_default) ok = cJSON_AddStringToObject(so, "default", qs_precision_name(s->default_prec)) != NULL;
        if (ok && s->n_layers) ok = qs_plan_add_layers(so, s->layers, s->n_layers);
        if (ok) ok = qs_plan_add_options(so, s->grad_rounding, s->weight_scales);
    }
    return ok;
}

cJSON *qs_plan_to_json(const qs_plan *p) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    int version = p->n_types ? QS_PLAN_VERSION : QS_PLAN_VERSION_MIN;
    bool ok = cJSON_AddStringToObject(o, "format", QS_PLAN_FORMAT) && cJSON_AddNumberToObject(o, "version", version) &&
              cJSON_AddStringToObject(o, "model", p->model);
    if (ok && p->config[0]) ok = cJSON_AddStringToObject(o, "config", p->config) != NULL;
    if (ok && p->backend[0]) ok = cJSON_AddStringToObject(o, "backend", p->backend) != NULL;
    if (ok && p->device_type[0]) ok = cJSON_AddStringToObject(o, "device_type", p->device_type) != NULL;
    if (ok) ok = cJSON_AddStringToObject(o, "default", qs_precision_name(p->default_prec)) != NULL;
    if (ok) ok = qs_plan_add_layers(o, p->layers, p->n_layers);
    if (ok) ok = qs_plan_add_options(o, p->grad_rounding, p->weight_scales);
    if (ok && p->n_types) ok = qs_plan_add_types(o, p);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

qs_status qs_plan_save(const qs_plan *p, const char *path) {
    cJSON *o = qs_plan_to_json(p);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return QS_FAIL(QS_ERR_OOM, "writing plan %s: out of memory", path);
    size_t n = strlen(text);
    char *buf = realloc(text, n + 2);
    if (!buf) {
        free(text);
        return QS_FAIL(QS_ERR_OOM, "writing plan %s: out of memory", path);
    }
    buf[n] = '\n';
    buf[n + 1] = '\0';
    qs_status st = qs_write_file_atomic(path, buf, n + 1);
    free(buf);
    if (st != QS_OK) return qs_error_wrap(st, "writing plan %s: ", path);
    return QS_OK;
}

qs_status qs_plan_write(const qs_model *m, const char *path) {
    qs_plan p;
    QS_TRY(qs_plan_from_model(m, &p));
    qs_status st = qs_plan_save(&p, path);
    qs_plan_free(&p);
    return st;
}

char *qs_plan_model_json(const qs_model *m) {
    qs_plan p;
    if (qs_plan_from_model(m, &p) != QS_OK) return NULL;
    cJSON *o = qs_plan_to_json(&p);
    qs_plan_free(&p);
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}
