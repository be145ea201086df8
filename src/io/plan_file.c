/* src/io/plan_file.c — defines: precision plan files: parse, check against a model (see
 * plan_file.h and docs/PLANS.md). */
#include "io/plan_file.h"

#include "core/json_doc.h"
#include "io/json_fields.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/precision.h"
#include "graph/precision_setup.h"

/* ------------------------------------------------------------------ names */

/* "fp32, tf32, bf16, fp16, fp8, int8" */
static void qs_plan_all_precisions(char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int p = 0; p < QS_PREC_COUNT && len < cap; p++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", p ? ", " : "", qs_precision_name((qs_precision)p));
}

/* ------------------------------------------------------------------ parsing */

/* Room for a section's JSON path prefix: `device_types["<label>"].` */
#define QS_PLAN_PREFIX_MAX (QS_PLAN_TYPE_MAX + 24)

/* Free p's device-type sections (n_types = 0). */
static void qs_plan_free_types(qs_plan *p) {
    for (int i = 0; i < p->n_types; i++) free(p->types[i].layers);
    free(p->types);
    p->types = NULL;
    p->n_types = 0;
}

void qs_plan_free(qs_plan *p) {
    if (!p) return;
    free(p->layers);
    p->layers = NULL;
    p->n_layers = 0;
    qs_plan_free_types(p);
    qs_plan_predictions_free(&p->predictions);
}

static void qs_plan_init(qs_plan *p, const char *origin) {
    memset(p, 0, sizeof *p);
    snprintf(p->origin, sizeof p->origin, "%s", origin ? origin : "(plan)");
    p->default_prec = QS_PREC_FP32;
    p->grad_rounding = QS_GRAD_ROUND_UNSET;
    p->weight_scales = QS_WEIGHT_SCALES_UNSET;
    qs_plan_predictions_read(NULL, NULL, &p->predictions);
}

/* The JSON path of `key` under prefix, for messages: `"key"` at the top level (prefix ""),
 * `device_types["x"].key` in a section (prefix `device_types["x"].`). */
static void qs_plan_key_path(const char *prefix, const char *key, char *buf, size_t cap) {
    if (prefix[0]) snprintf(buf, cap, "%s%s", prefix, key);
    else snprintf(buf, cap, "\"%s\"", key);
}

/* The string value of top-level key `key` into buf (cap bytes); wrong type or too long →
 * QS_ERR_FORMAT. */
static qs_status qs_plan_get_string(const qs_plan *p, const cJSON *item, const char *key, char *buf, size_t cap) {
    if (!cJSON_IsString(item) || !item->valuestring)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"%s\" must be a string", p->origin, key);
    if (strlen(item->valuestring) >= cap)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"%s\" is longer than %zu characters", p->origin, key, cap - 1);
    snprintf(buf, cap, "%s", item->valuestring);
    return QS_OK;
}

/* A precision string at JSON path `path` (for messages). */
static qs_status qs_plan_get_precision(const qs_plan *p, const cJSON *item, const char *path, qs_precision *out) {
    char all[96];
    qs_plan_all_precisions(all, sizeof all);
    if (!cJSON_IsString(item) || !item->valuestring)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: %s must be a precision name string (one of %s)", p->origin, path,
                       all);
    if (!qs_precision_parse(item->valuestring, out))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: %s: unknown precision \"%s\"; expected one of %s", p->origin, path,
                       item->valuestring, all);
    return QS_OK;
}

/* The "precisions" object at JSON path prefix + "precisions" into *layers / *n_layers
 * (allocated here; the caller frees them, on failure too). */
static qs_status qs_plan_parse_precisions(const qs_plan *p, const cJSON *obj, const char *prefix,
                                          qs_layer_prec **layers, int *n_layers) {
    char where[QS_PLAN_PREFIX_MAX + 16];
    qs_plan_key_path(prefix, "precisions", where, sizeof where);
    if (!cJSON_IsObject(obj))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: %s must be an object mapping layer names to precisions, "
                       "e.g. {\"conv1\": \"int8\"}", p->origin, where);
    int n = cJSON_GetArraySize(obj);
    *layers = calloc((size_t)n + 1, sizeof **layers);
    if (!*layers) return QS_FAIL(QS_ERR_OOM, "plan %s: out of memory for %d layers", p->origin, n);
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        char path[QS_PLAN_PREFIX_MAX + QS_NAME_MAX + 32];
        snprintf(path, sizeof path, "%sprecisions[\"%.*s\"]", prefix, QS_NAME_MAX, item->string ? item->string : "");
        if (!item->string || !item->string[0])
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: %sprecisions has an empty layer name", p->origin, prefix);
        if (strlen(item->string) >= QS_NAME_MAX)
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: %s: layer name longer than %d characters", p->origin, path,
                           QS_NAME_MAX - 1);
        if (qs_jf_key_repeated(obj, item))
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: %s appears twice; give each layer one precision", p->origin, path);
        qs_layer_prec *l = &(*layers)[*n_layers];
        QS_TRY(qs_plan_get_precision(p, item, path, &l->prec));
        snprintf(l->name, sizeof l->name, "%s", item->string);
        (*n_layers)++;
    }
    return QS_OK;
}

/* The "options" object at JSON path prefix + "options" into *gr / *ws. */
static qs_status qs_plan_parse_options(const qs_plan *p, const cJSON *obj, const char *prefix, qs_grad_rounding *gr,
                                       qs_weight_scales *ws) {
    char where[QS_PLAN_PREFIX_MAX + 16];
    qs_plan_key_path(prefix, "options", where, sizeof where);
    if (!cJSON_IsObject(obj))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: %s must be an object, e.g. {\"grad_rounding\": "
                       "\"stochastic\", \"weight_scales\": \"tensor\"}", p->origin, where);
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        const char *k = item->string ? item->string : "";
        if (qs_jf_key_repeated(obj, item))
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: %soptions.%s appears twice", p->origin, prefix, k);
        const char *v = cJSON_IsString(item) ? item->valuestring : NULL;
        if (strcmp(k, "grad_rounding") == 0) {
            if (!qs_grad_rounding_parse(v, gr))
                return QS_FAIL(QS_ERR_FORMAT, "plan %s: %soptions.grad_rounding must be \"stochastic\" or \"nearest\"%s%s%s",
                               p->origin, prefix, v ? " (got \"" : "", v ? v : "", v ? "\")" : "");
        } else if (strcmp(k, "weight_scales") == 0) {
            if (!qs_weight_scales_parse(v, ws))
                return QS_FAIL(QS_ERR_FORMAT, "plan %s: %soptions.weight_scales must be \"tensor\" or \"channel\"%s%s%s",
                               p->origin, prefix, v ? " (got \"" : "", v ? v : "", v ? "\")" : "");
        } else {
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: %soptions.%s is not a plan option (options are grad_rounding "
                           "and weight_scales)", p->origin, prefix, k);
        }
    }
    return QS_OK;
}

/* The label of "device_types" entry `item` checked (non-empty, not too long, not repeated) and
 * copied into s->type. */
static qs_status qs_plan_section_label(const qs_plan *p, const cJSON *types, const cJSON *item, qs_plan_section *s) {
    const char *t = item->string ? item->string : "";
    if (!t[0])
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: device_types has an empty device-type label; use the \"type\" of "
                       "a cluster file's worker", p->origin);
    if (strlen(t) >= sizeof s->type)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: device_types[\"%.*s...\"]: device-type label longer than %d "
                       "characters", p->origin, 24, t, (int)sizeof s->type - 1);
    if (qs_jf_key_repeated(types, item))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: device_types[\"%s\"] appears twice; give each device type one "
                       "section", p->origin, t);
    snprintf(s->type, sizeof s->type, "%s", t);
    return QS_OK;
}

/* The keys of a device-type section. */
static const char *const qs_plan_section_keys[] = {"default", "precisions", "options", NULL};

/* Section `item` of device type s->type is an object whose keys are known and given once. */
static qs_status qs_plan_check_section_keys(const qs_plan *p, const cJSON *item, const qs_plan_section *s) {
    if (!cJSON_IsObject(item))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: device_types[\"%s\"] must be an object with optional \"default\", "
                       "\"precisions\" and \"options\" (e.g. {\"default\": \"int8\"})", p->origin, s->type);
    const cJSON *c;
    cJSON_ArrayForEach(c, item) {
        const char *k = c->string ? c->string : "";
        bool known = false;
        for (const char *const *q = qs_plan_section_keys; *q && !known; q++) known = strcmp(*q, k) == 0;
        if (!known)
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: device_types[\"%s\"]: unknown key \"%s\" (a device-type section "
                           "has default, precisions, options)", p->origin, s->type, k);
        if (qs_jf_key_repeated(item, c))
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: device_types[\"%s\"].%s appears twice", p->origin, s->type, k);
    }
    return QS_OK;
}

/* "device_types" entry `item` (an object under `types`) into s. */
static qs_status qs_plan_parse_section(const qs_plan *p, const cJSON *types, const cJSON *item, qs_plan_section *s) {
    s->default_prec = QS_PREC_FP32;
    s->grad_rounding = QS_GRAD_ROUND_UNSET;
    s->weight_scales = QS_WEIGHT_SCALES_UNSET;
    QS_TRY(qs_plan_section_label(p, types, item, s));
    QS_TRY(qs_plan_check_section_keys(p, item, s));
    const cJSON *c;
    char prefix[QS_PLAN_PREFIX_MAX], path[QS_PLAN_PREFIX_MAX + 16];
    snprintf(prefix, sizeof prefix, "device_types[\"%s\"].", s->type);
    if ((c = cJSON_GetObjectItemCaseSensitive(item, "default"))) {
        qs_plan_key_path(prefix, "default", path, sizeof path);
        QS_TRY(qs_plan_get_precision(p, c, path, &s->default_prec));
        s->has_default = true;
    }
    if ((c = cJSON_GetObjectItemCaseSensitive(item, "precisions"))) {
        s->has_precisions = true;
        QS_TRY(qs_plan_parse_precisions(p, c, prefix, &s->layers, &s->n_layers));
    }
    if ((c = cJSON_GetObjectItemCaseSensitive(item, "options")))
        QS_TRY(qs_plan_parse_options(p, c, prefix, &s->grad_rounding, &s->weight_scales));
    return QS_OK;
}

/* The "device_types" object (version 2) into p->types. */
static qs_status qs_plan_parse_types(qs_plan *p, const cJSON *obj) {
    if (!cJSON_IsObject(obj))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"device_types\" must be an object mapping device-type labels (a "
                       "cluster file worker's \"type\") to sections, e.g. {\"cpu-slow\": {\"default\": \"int8\"}}",
                       p->origin);
    int n = cJSON_GetArraySize(obj);
    if (n == 0)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"device_types\" is empty: give a section per device type, or "
                       "remove it", p->origin);
    p->types = calloc((size_t)n, sizeof *p->types);
    if (!p->types) return QS_FAIL(QS_ERR_OOM, "plan %s: out of memory for %d device types", p->origin, n);
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) QS_TRY(qs_plan_parse_section(p, obj, item, &p->types[p->n_types++]));
    return QS_OK;
}

/* The top-level keys of a plan ("device_types": version 2 only). */
static const char *const qs_plan_keys[] = {"format", "version", "model", "config", "backend", "device_type",
                                           "default", "precisions", "options", "device_types", "comment",
                                           "predictions", NULL};

/* Every top-level key of root known and given once. */
static qs_status qs_plan_check_keys(const qs_plan *p, const cJSON *root) {
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        const char *k = item->string ? item->string : "";
        bool known = false;
        for (const char *const *q = qs_plan_keys; *q && !known; q++) known = strcmp(*q, k) == 0;
        if (!known)
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: unknown key \"%s\" (a plan has format, version, model, config, "
                           "backend, device_type, default, precisions, options, comment, predictions, and from "
                           "version 2 device_types)", p->origin, k);
        if (qs_jf_key_repeated(root, item))
            return QS_FAIL(QS_ERR_FORMAT, "plan %s: key \"%s\" appears twice", p->origin, k);
    }
    return QS_OK;
}

/* "format" and "version" of root; the version into *version. */
static qs_status qs_plan_check_header(const qs_plan *p, const cJSON *root, int *version) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, QS_PLAN_FORMAT) != 0)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"format\" must be \"%s\" (got %s%s%s): this is not a qsync plan file",
                       p->origin, QS_PLAN_FORMAT, cJSON_IsString(fmt) ? "\"" : "",
                       cJSON_IsString(fmt) ? fmt->valuestring : fmt ? "a non-string" : "nothing",
                       cJSON_IsString(fmt) ? "\"" : "");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != floor(ver->valuedouble))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"version\" must be an integer, %d or %d", p->origin,
                       QS_PLAN_VERSION_MIN, QS_PLAN_VERSION);
    if (ver->valuedouble < QS_PLAN_VERSION_MIN || ver->valuedouble > QS_PLAN_VERSION)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s has version %g; this qsync reads plan version %d to %d", p->origin,
                       ver->valuedouble, QS_PLAN_VERSION_MIN, QS_PLAN_VERSION);
    *version = (int)ver->valuedouble;
    return QS_OK;
}

/* "device_types" of a version-`version` root, if present, into p->types. */
static qs_status qs_plan_root_types(qs_plan *p, const cJSON *root, int version) {
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "device_types");
    if (!types) return QS_OK;
    if (version < 2)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: per-device-type sections (\"device_types\") need plan version 2: set "
                       "\"version\": 2 (or give one plan per device type)", p->origin);
    if (cJSON_GetObjectItemCaseSensitive(root, "device_type"))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"device_type\" (the one device type a plan was made for) and "
                       "\"device_types\" (sections for several) exclude each other: remove \"device_type\"",
                       p->origin);
    return qs_plan_parse_types(p, types);
}

static qs_status qs_plan_parse_root(qs_plan *p, const cJSON *root) {
    if (!cJSON_IsObject(root))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: the document must be a JSON object {\"format\": \"%s\", ...}",
                       p->origin, QS_PLAN_FORMAT);
    int version = 0;
    QS_TRY(qs_plan_check_keys(p, root));
    QS_TRY(qs_plan_check_header(p, root, &version));
    QS_TRY(qs_plan_root_types(p, root, version));
    const cJSON *item;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model)
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"model\" is missing (the model the plan is for, e.g. \"cnn\")",
                       p->origin);
    QS_TRY(qs_plan_get_string(p, model, "model", p->model, sizeof p->model));
    if (!p->model[0]) return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"model\" is empty", p->origin);
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "config")))
        QS_TRY(qs_plan_get_string(p, item, "config", p->config, sizeof p->config));
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "backend")))
        QS_TRY(qs_plan_get_string(p, item, "backend", p->backend, sizeof p->backend));
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "device_type")))
        QS_TRY(qs_plan_get_string(p, item, "device_type", p->device_type, sizeof p->device_type));
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "comment")) && !cJSON_IsString(item))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"comment\" must be a string", p->origin);
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "predictions")) && !cJSON_IsObject(item))
        return QS_FAIL(QS_ERR_FORMAT, "plan %s: \"predictions\" must be an object", p->origin);
    if (item) QS_TRY(qs_plan_predictions_read(item, p->origin, &p->predictions));
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "default")))
        QS_TRY(qs_plan_get_precision(p, item, "\"default\"", &p->default_prec));
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "precisions")))
        QS_TRY(qs_plan_parse_precisions(p, item, "", &p->layers, &p->n_layers));
    if ((item = cJSON_GetObjectItemCaseSensitive(root, "options")))
        QS_TRY(qs_plan_parse_options(p, item, "", &p->grad_rounding, &p->weight_scales));
    return QS_OK;
}

qs_status qs_plan_parse(const char *text, const char *origin, qs_plan *out) {
    qs_plan_init(out, origin);
    cJSON *root = NULL;
    qs_status st = qs_json_parse(text, "plan", out->origin, &root);
    if (st != QS_OK) return st;
    st = qs_plan_parse_root(out, root);
    cJSON_Delete(root);
    if (st != QS_OK) {
        qs_plan_free(out);
        qs_plan_init(out, origin);
    }
    return st;
}

qs_status qs_plan_read(const char *path, qs_plan *out) {
    qs_plan_init(out, path);
    cJSON *root = NULL;
    qs_status st = qs_json_read(path, QS_PLAN_MAX_BYTES, "plan", &root);
    if (st != QS_OK) return st;
    st = qs_plan_parse_root(out, root);
    cJSON_Delete(root);
    if (st != QS_OK) {
        qs_plan_free(out);
        qs_plan_init(out, path);
    }
    return st;
}

/* ------------------------------------------------------------------ device-type sections */

bool qs_plan_has_device_types(const qs_plan *p) { return p && p->n_types > 0; }

int qs_plan_device_type_count(const qs_plan *p) { return p ? p->n_types : 0; }

const char *qs_plan_device_type_at(const qs_plan *p, int i) {
    return p && i >= 0 && i < p->n_types ? p->types[i].type : NULL;
}

/* The section of p for device type t, or NULL. */
static const qs_plan_section *qs_plan_find_type(const qs_plan *p, const char *t) {
    for (int i = 0; i < p->n_types; i++)
        if (strcmp(p->types[i].type, t) == 0) return &p->types[i];
    return NULL;
}

/* p's device types for messages: `"cpu-fast", "cpu-slow"`. */
static void qs_plan_type_list(const qs_plan *p, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n_types && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s\"%s\"", i ? ", " : "", p->types[i].type);
}

/* Index of layer `name` in layers[0..n), or -1. */
static int qs_plan_find_layer(const qs_layer_prec *layers, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(layers[i].name, name) == 0) return i;
    return -1;
}

/* p's precisions with s's merged in (a layer in both takes s's; s's other layers appended, in
 * order) into a new array *out of *n_out entries. */
static qs_status qs_plan_merge_layers(const qs_plan *p, const qs_plan_section *s, qs_layer_prec **out, int *n_out) {
    qs_layer_prec *m = calloc((size_t)p->n_layers + (size_t)s->n_layers + 1, sizeof *m);
    if (!m) return QS_FAIL(QS_ERR_OOM, "plan %s: out of memory selecting device type %s", p->origin, s->type);
    int n = 0;
    for (int i = 0; i < p->n_layers; i++) {
        int k = qs_plan_find_layer(s->layers, s->n_layers, p->layers[i].name);
        m[n] = p->layers[i];
        if (k >= 0) m[n].prec = s->layers[k].prec;
        n++;
    }
    for (int i = 0; i < s->n_layers; i++)
        if (qs_plan_find_layer(p->layers, p->n_layers, s->layers[i].name) < 0) m[n++] = s->layers[i];
    *out = m;
    *n_out = n;
    return QS_OK;
}

/* The error for a device type p has no section for (type NULL: none given). */
static qs_status qs_plan_type_missing(const qs_plan *p, const char *type) {
    char list[1024];
    qs_plan_type_list(p, list, sizeof list);
    if (!type)
        return QS_FAIL(QS_ERR_NOT_FOUND, "plan %s has per-device-type sections (device_types %s) but this run has no "
                       "device type: run with a cluster file (--cluster) whose workers' types the plan names",
                       p->origin, list);
    return QS_FAIL(QS_ERR_NOT_FOUND, "plan %s has no section for device type \"%s\" (its device_types are %s): a plan "
                   "that names device types must name every type it runs on; add device_types[\"%s\"] (an empty "
                   "section {} keeps the top-level precisions) or correct the worker's \"type\"", p->origin, type,
                   list, type);
}

qs_status qs_plan_select_device_type(qs_plan *p, const char *type) {
    if (!p) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_plan_select_device_type: a plan is required");
    if (p->n_types == 0) return QS_OK;
    const qs_plan_section *s = type ? qs_plan_find_type(p, type) : NULL;
    if (!s) return qs_plan_type_missing(p, type);
    qs_layer_prec *layers = NULL;
    int n = 0;
    QS_TRY(qs_plan_merge_layers(p, s, &layers, &n));
    free(p->layers);
    p->layers = layers;
    p->n_layers = n;
    if (s->has_default) p->default_prec = s->default_prec;
    if (s->grad_rounding != QS_GRAD_ROUND_UNSET) p->grad_rounding = s->grad_rounding;
    if (s->weight_scales != QS_WEIGHT_SCALES_UNSET) p->weight_scales = s->weight_scales;
    snprintf(p->device_type, sizeof p->device_type, "%s", s->type);
    qs_plan_free_types(p);
    return QS_OK;
}

void qs_plan_uniform(const char *arch, qs_precision p, const char *origin, qs_plan *out) {
    char buf[64];
    if (!origin) {
        snprintf(buf, sizeof buf, "--precision %s", qs_precision_name(p));
        origin = buf;
    }
    qs_plan_init(out, origin);
    snprintf(out->model, sizeof out->model, "%s", arch ? arch : "");
    out->default_prec = p;
    out->uniform = true;
}

/* ------------------------------------------------------------------ validation */

qs_precision_assignment qs_plan_assignment(const qs_plan *p) {
    return (qs_precision_assignment){.origin = p->origin, .uniform = p->uniform, .default_prec = p->default_prec,
                                     .layers = p->layers, .n_layers = p->n_layers, .grad_rounding = p->grad_rounding,
                                     .weight_scales = p->weight_scales};
}

qs_status qs_plan_check_model(const qs_plan *p, const qs_model *m, qs_backend *be) {
    if (!p || !m) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_plan_check_model: plan and model are required");
    if (p->n_types > 0) {
        char list[1024];
        qs_plan_type_list(p, list, sizeof list);
        return QS_FAIL(QS_ERR_INVALID_ARG, "plan %s has per-device-type sections (device_types %s): select this "
                       "rank's device type first; run with a cluster file (--cluster) whose workers' types the plan "
                       "names", p->origin, list);
    }
    if (strcmp(p->model, m->arch) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "plan %s is for model %s, but this run's model is %s: write a plan for %s "
                       "(qsync models %s lists its layers)", p->origin, p->model, m->arch, m->arch, m->arch);
    if (p->config[0] && strcmp(p->config, m->config) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "plan %s is for %s built with \"%s\", but this run builds \"%s\": use a plan "
                       "made for these model options (or remove \"config\" from it to apply it to any)", p->origin,
                       p->model, p->config, m->config);
    if (be && p->backend[0] && strcmp(p->backend, be->ops->name) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "plan %s is for the %s backend, but this run uses %s: use a plan written for "
                       "%s (or remove \"backend\" from it)", p->origin, p->backend, be->ops->name, be->ops->name);
    return QS_OK;
}

qs_status qs_plan_validate(const qs_plan *p, const qs_model *m, qs_backend *be, bool allow_emulated) {
    QS_TRY(qs_plan_check_model(p, m, be));
    qs_precision_assignment a = qs_plan_assignment(p);
    return qs_precision_check(&a, m, be, allow_emulated);
}

qs_status qs_plan_precision_setup(const qs_plan *p, qs_model *m, qs_backend *be, const qs_precision_options *o) {
    qs_precision_options po = *o;
    qs_precision_assignment a;
    if (p) {
        QS_TRY(qs_plan_check_model(p, m, be));
        a = qs_plan_assignment(p);
        po.assignment = &a;
    }
    return qs_precision_setup(m, be, &po);
}

qs_status qs_plan_apply(const qs_plan *p, qs_model *m, qs_backend *be, bool allow_emulated) {
    QS_TRY(qs_plan_check_model(p, m, be));
    qs_precision_assignment a = qs_plan_assignment(p);
    return qs_precision_assign(&a, m, be, allow_emulated);
}

/* Differences collected by qs_plan_compare: the first few, then a count. */
typedef struct qs_plan_diff {
    char text[768];
    size_t len;
    int n;
} qs_plan_diff;

__attribute__((format(printf, 2, 3))) static void qs_plan_diff_add(qs_plan_diff *d, const char *fmt, ...) {
    if (d->n++ >= 4 || d->len >= sizeof d->text) return;
    if (d->n > 1) d->len += (size_t)snprintf(d->text + d->len, sizeof d->text - d->len, "; ");
    if (d->len >= sizeof d->text) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(d->text + d->len, sizeof d->text - d->len, fmt, ap);
    va_end(ap);
    if (k > 0) d->len += (size_t)k;
}

qs_status qs_plan_compare(const qs_plan *saved, const qs_model *m, const char *what) {
    qs_plan_diff d;
    memset(&d, 0, sizeof d);
    if (strcmp(saved->model, m->arch) != 0) qs_plan_diff_add(&d, "model %s (this run: %s)", saved->model, m->arch);
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *nd = &m->nodes[i];
        if (!qs_node_precision_selectable(nd->kind)) continue;
        qs_precision want = saved->default_prec;
        for (int k = 0; k < saved->n_layers; k++)
            if (strcmp(saved->layers[k].name, nd->name) == 0) want = saved->layers[k].prec;
        if (want != nd->prec)
            qs_plan_diff_add(&d, "%s at %s (this run: %s)", nd->name, qs_precision_name(want), qs_precision_name(nd->prec));
    }
    bool nearest = saved->grad_rounding == QS_GRAD_ROUND_NEAREST;
    bool channel = saved->weight_scales == QS_WEIGHT_SCALES_CHANNEL;
    if (nearest != m->grad_round_nearest)
        qs_plan_diff_add(&d, "gradients rounded %s (this run: %s)", nearest ? "to nearest" : "stochastically",
                         m->grad_round_nearest ? "to nearest" : "stochastically");
    if (channel != m->weight_per_channel)
        qs_plan_diff_add(&d, "weight scales per %s (this run: per %s)", channel ? "channel" : "tensor",
                         m->weight_per_channel ? "channel" : "tensor");
    if (d.n == 0) return QS_OK;
    return QS_FAIL(QS_ERR_MISMATCH, "%s other precisions: %s%s", what, d.text, d.n > 4 ? "; ..." : "");
}

