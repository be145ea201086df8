/* src/io/indicator_file.c — defines: the indicator reader (indicator_file.h). */
#include "io/indicator_file.h"

#include <stdlib.h>
#include <string.h>

#include "core/json_doc.h"
#include "io/json_fields.h"

#define QS_INDICATOR_MAX_BYTES ((size_t)64 << 20)
#define QS_IF_N(t) ((int)(sizeof t / sizeof t[0]))
/* A statistic: any finite number, or null. */
#define QS_IF_STAT(m) QS_JF_F(qs_indicator_file_stats, m, QS_JF_NUM_NULL, false, -INFINITY, INFINITY)

static const qs_jf_field qs_if_stats_fields[] = {
    QS_JF_COUNT(qs_indicator_file_stats, chain_depth, false),
    QS_JF_COUNT(qs_indicator_file_stats, bfs_depth, false),
    QS_JF_COUNT(qs_indicator_file_stats, n_x, false),
    QS_JF_COUNT(qs_indicator_file_stats, n_w, false),
    QS_JF_COUNT(qs_indicator_file_stats, n_y, false),
    QS_JF_COUNT(qs_indicator_file_stats, k_fwd, false),
    QS_JF_COUNT(qs_indicator_file_stats, k_bwd_data, false),
    QS_JF_COUNT(qs_indicator_file_stats, k_bwd_weights, false),
    QS_JF_F(qs_indicator_file_stats, has_dx, QS_JF_BOOL, false, 0, 0),
    QS_IF_STAT(ms_x), QS_IF_STAT(ms_w), QS_IF_STAT(ms_y), QS_IF_STAT(ms_dy), QS_IF_STAT(ms_dw),
    QS_IF_STAT(var_x), QS_IF_STAT(var_w), QS_IF_STAT(var_dy), QS_IF_STAT(var_dw),
    QS_IF_STAT(norm_x), QS_IF_STAT(norm_w),
    QS_IF_STAT(amax_x), QS_IF_STAT(amax_w), QS_IF_STAT(amax_dy),
    QS_IF_STAT(int8_scale_x), QS_IF_STAT(int8_scale_w), QS_IF_STAT(int8_scale_dy),
    QS_IF_STAT(espread_x), QS_IF_STAT(espread_w), QS_IF_STAT(espread_dy),
    QS_IF_STAT(grad_norm_mean), QS_IF_STAT(grad_amax_mean), QS_IF_STAT(grad_sq_norm),
    QS_JF_NESTED("qvar_x", QS_JF_OBJECT, false),
    QS_JF_NESTED("qvar_w", QS_JF_OBJECT, false),
    QS_JF_NESTED("qvar_dy", QS_JF_OBJECT, false),
};

static const qs_jf_field qs_if_layer_fields[] = {
    QS_JF_STR(qs_indicator_file_layer, kind, false),
    QS_JF_COUNT(qs_indicator_file_layer, depth, false),
    QS_JF_NESTED("stats", QS_JF_OBJECT, false),
    QS_JF_NESTED("vfwd", QS_JF_OBJECT, false),
    QS_JF_NESTED("vbwd", QS_JF_OBJECT, false),
    QS_JF_NESTED("omega", QS_JF_OBJECT, true),
};

static const qs_jf_field qs_if_top_fields[] = {
    QS_JF_NESTED("format", QS_JF_ANY, true),
    QS_JF_NESTED("version", QS_JF_ANY, true),
    QS_JF_STR(qs_indicator_file, model, true),
    QS_JF_STR(qs_indicator_file, config, true),
    QS_JF_F(qs_indicator_file, data, QS_JF_STRING, false, 0, 0),
    QS_JF_NESTED("checkpoint", QS_JF_ANY, false),
    QS_JF_F(qs_indicator_file, batch, QS_JF_WHOLE, false, 1, QS_JF_WHOLE_MAX),
    QS_JF_F(qs_indicator_file, batches, QS_JF_WHOLE, false, 1, QS_JF_WHOLE_MAX),
    QS_JF_STR(qs_indicator_file, method, false),
    QS_JF_MS(qs_indicator_file, gamma, false),
    QS_JF_MS(qs_indicator_file, seed, false),
    QS_JF_COUNT(qs_indicator_file, L, false),
    QS_JF_NESTED("layers", QS_JF_OBJECT, true),
};

/* The precision-keyed object obj[key], if present, into v (present: has, or NULL). */
static qs_status qs_if_map(qs_jf_ctx *ctx, const cJSON *obj, const char *key, double *v, bool *has, bool *given) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, key);
    bool present[QS_PREC_COUNT] = {false};
    for (int p = 0; p < QS_PREC_COUNT; p++) v[p] = NAN;
    if (given) *given = m != NULL;
    if (!m) return QS_OK;
    size_t at = qs_jf_enter_key(ctx, key);
    qs_status st = qs_jf_precision_map(ctx, m, true, v, present);
    qs_jf_leave(ctx, at);
    for (int p = 0; has && p < QS_PREC_COUNT; p++) has[p] = present[p] && !isnan(v[p]);
    return st;
}

static qs_status qs_if_stats(qs_jf_ctx *ctx, const cJSON *o, qs_indicator_file_stats *s) {
    const double nan = NAN;
    for (int i = 0; i < QS_IF_N(qs_if_stats_fields); i++) /* the statistics not recorded: NAN */
        if (qs_if_stats_fields[i].kind == QS_JF_NUM_NULL) memcpy((char *)s + qs_if_stats_fields[i].offset, &nan, sizeof nan);
    QS_TRY(qs_jf_read(ctx, o, qs_if_stats_fields, QS_IF_N(qs_if_stats_fields), s));
    QS_TRY(qs_if_map(ctx, o, "qvar_x", s->qvar_x, NULL, NULL));
    QS_TRY(qs_if_map(ctx, o, "qvar_w", s->qvar_w, NULL, NULL));
    return qs_if_map(ctx, o, "qvar_dy", s->qvar_dy, NULL, NULL);
}

/* Layer `o`, keyed by its name (a qs_jf_item_fn). */
static qs_status qs_if_layer(qs_jf_ctx *ctx, const cJSON *o, void *out) {
    qs_indicator_file_layer *l = out;
    const char *name = o->string ? o->string : "";
    if (!name[0] || strlen(name) >= QS_NAME_MAX)
        return qs_jf_fail(ctx, NULL, "must be a layer name of 1 to %d characters", QS_NAME_MAX - 1);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->depth = -1;
    QS_TRY(qs_jf_read(ctx, o, qs_if_layer_fields, QS_IF_N(qs_if_layer_fields), l));
    const cJSON *stats = cJSON_GetObjectItemCaseSensitive(o, "stats");
    l->has_stats = stats != NULL;
    if (stats) {
        size_t at = qs_jf_enter_key(ctx, "stats");
        qs_status st = qs_if_stats(ctx, stats, &l->stats);
        qs_jf_leave(ctx, at);
        QS_TRY(st);
    }
    QS_TRY(qs_if_map(ctx, o, "vfwd", l->vfwd, NULL, &l->has_vfwd));
    QS_TRY(qs_if_map(ctx, o, "vbwd", l->vbwd, NULL, &l->has_vbwd));
    return qs_if_map(ctx, o, "omega", l->omega, l->has_omega, NULL);
}

/* "layers": layer name → layer. */
static qs_status qs_if_layers(qs_jf_ctx *ctx, const cJSON *o, qs_indicator_file *f) {
    void *layers = NULL;
    qs_status st = qs_jf_items(ctx, o, true, sizeof *f->layers, qs_if_layer, &layers, &f->n_layers);
    f->layers = layers;
    return st;
}

/* "format" and "version" first, then the keys; "checkpoint" a string or null. */
static qs_status qs_if_document(qs_jf_ctx *ctx, const cJSON *doc, qs_indicator_file *f) {
    if (!cJSON_IsObject(doc)) return qs_jf_fail(ctx, NULL, "the document must be a JSON object (a qsync indicator)");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(doc, "format"), *ver = cJSON_GetObjectItemCaseSensitive(doc, "version");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, QS_INDICATOR_FORMAT) != 0) {
        snprintf(ctx->path, sizeof ctx->path, "format");
        return qs_jf_fail(ctx, fmt, "must be \"%s\": this is not a qsync indicator (make one with qsync indicate)",
                          QS_INDICATOR_FORMAT);
    }
    if (!cJSON_IsNumber(ver) || ver->valuedouble != QS_INDICATOR_VERSION) {
        snprintf(ctx->path, sizeof ctx->path, "version");
        return qs_jf_fail(ctx, ver, "must be %d, the indicator version this qsync reads", QS_INDICATOR_VERSION);
    }
    f->gamma = f->seed = NAN;
    QS_TRY(qs_jf_read(ctx, doc, qs_if_top_fields, QS_IF_N(qs_if_top_fields), f));
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(doc, "checkpoint");
    if (ck && !cJSON_IsNull(ck)) {
        size_t at = qs_jf_enter_key(ctx, "checkpoint");
        qs_status st = cJSON_IsString(ck) && strlen(ck->valuestring) < sizeof f->checkpoint
                           ? QS_OK : qs_jf_fail(ctx, ck, "must be the checkpoint's path (a string) or null");
        qs_jf_leave(ctx, at);
        QS_TRY(st);
        snprintf(f->checkpoint, sizeof f->checkpoint, "%s", ck->valuestring);
    }
    size_t at = qs_jf_enter_key(ctx, "layers");
    qs_status st = qs_if_layers(ctx, cJSON_GetObjectItemCaseSensitive(doc, "layers"), f);
    qs_jf_leave(ctx, at);
    return st;
}

static void qs_indicator_file_init(qs_indicator_file *f, const char *origin) {
    memset(f, 0, sizeof *f);
    snprintf(f->origin, sizeof f->origin, "%s", origin ? origin : "(indicator)");
}

qs_status qs_indicator_file_from_json(const cJSON *doc, const char *origin, qs_indicator_file *out) {
    qs_indicator_file_init(out, origin);
    qs_jf_ctx ctx = {.what = "indicator", .origin = out->origin};
    qs_status st = qs_if_document(&ctx, doc, out);
    if (st != QS_OK) {
        qs_indicator_file_free(out);
        qs_indicator_file_init(out, origin);
    }
    return st;
}

qs_status qs_indicator_file_read(const char *path, qs_indicator_file *out) {
    cJSON *doc = NULL;
    qs_indicator_file_init(out, path);
    QS_TRY(qs_json_read(path, QS_INDICATOR_MAX_BYTES, "indicator", &doc));
    qs_status st = qs_indicator_file_from_json(doc, path, out);
    cJSON_Delete(doc);
    return st;
}

void qs_indicator_file_free(qs_indicator_file *f) {
    free(f->layers);
    f->layers = NULL;
    f->n_layers = 0;
}

const qs_indicator_file_layer *qs_indicator_file_layer_of(const qs_indicator_file *f, const char *name) {
    for (int i = 0; i < f->n_layers; i++)
        if (strcmp(f->layers[i].name, name) == 0) return &f->layers[i];
    return NULL;
}
