/* src/io/plan_predictions.c — defines: reading a plan's "predictions" (plan_predictions.h). */
#include "io/plan_predictions.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_fields.h"

#define QS_PP_N(t) ((int)(sizeof t / sizeof t[0]))
#define QS_PP_ANY_NUM(T, m) QS_JF_F(T, m, QS_JF_NUM, false, -INFINITY, INFINITY)

static const qs_jf_field qs_pp_type_fields[] = {
    QS_JF_MS(qs_plan_type_prediction, omega, false),
    QS_JF_COUNT(qs_plan_type_prediction, quantized_layers, false),
    QS_JF_F(qs_plan_type_prediction, solver, QS_JF_STRING, false, 0, 0),
    QS_JF_MS(qs_plan_type_prediction, model_ms, false),
    QS_PP_ANY_NUM(qs_plan_type_prediction, model_target_ms),
    QS_JF_MS(qs_plan_type_prediction, base_synchronized_ms, false),
    QS_JF_MS(qs_plan_type_prediction, greedy_omega, false),
    QS_JF_MS(qs_plan_type_prediction, exact_omega, false),
    QS_PP_ANY_NUM(qs_plan_type_prediction, greedy_gap),
    QS_JF_MS(qs_plan_type_prediction, memory_cap_bytes, false),
    QS_JF_COUNT(qs_plan_type_prediction, tightened, false),
    QS_JF_F(qs_plan_type_prediction, exact_optimal, QS_JF_BOOL, false, 0, 0),
    QS_JF_F(qs_plan_type_prediction, best_effort, QS_JF_BOOL, false, 0, 0),
};

static const qs_jf_field qs_pp_worker_fields[] = {
    QS_JF_COUNT(qs_plan_worker_prediction, rank, false),
    QS_JF_F(qs_plan_worker_prediction, type, QS_JF_STRING, false, 0, 0),
    QS_JF_MS(qs_plan_worker_prediction, iteration_ms, false),
    QS_JF_MS(qs_plan_worker_prediction, memory_bytes, false),
};

static const qs_jf_field qs_pp_fields[] = {
    QS_JF_MS(qs_plan_predictions, target_ms, false),
    QS_JF_MS(qs_plan_predictions, target_asked_ms, false),
    QS_JF_F(qs_plan_predictions, target_source, QS_JF_STRING, false, 0, 0),
    QS_JF_F(qs_plan_predictions, base_precision, QS_JF_STRING, false, 0, 0),
    QS_JF_F(qs_plan_predictions, fastest_type, QS_JF_STRING, false, 0, 0),
    QS_JF_MS(qs_plan_predictions, synchronized_ms, false),
    QS_JF_MS(qs_plan_predictions, replayed_ms, false),
    QS_JF_NESTED("calibration", QS_JF_OBJECT, false),
    QS_JF_COUNT(qs_plan_predictions, rounds, false),
    QS_JF_F(qs_plan_predictions, target_met, QS_JF_BOOL, false, 0, 0),
    QS_JF_NESTED("types", QS_JF_OBJECT, false),
    QS_JF_NESTED("workers", QS_JF_ARRAY, false),
};

/* One device type's entry, keyed by its label (a qs_jf_item_fn). */
static qs_status qs_pp_type(qs_jf_ctx *ctx, const cJSON *e, void *out) {
    qs_plan_type_prediction *t = out;
    const char *label = e->string ? e->string : "";
    t->omega = t->model_ms = t->model_target_ms = t->base_synchronized_ms = NAN;
    t->greedy_omega = t->exact_omega = t->greedy_gap = t->memory_cap_bytes = NAN;
    t->quantized_layers = t->tightened = -1;
    if (strlen(label) >= sizeof t->type) return qs_jf_fail(ctx, NULL, "is a device-type label too long");
    snprintf(t->type, sizeof t->type, "%s", label);
    return qs_jf_read_open(ctx, e, qs_pp_type_fields, QS_PP_N(qs_pp_type_fields), t);
}

/* One worker's entry (a qs_jf_item_fn). */
static qs_status qs_pp_worker(qs_jf_ctx *ctx, const cJSON *e, void *out) {
    qs_plan_worker_prediction *w = out;
    w->rank = -1;
    w->iteration_ms = w->memory_bytes = NAN;
    return qs_jf_read_open(ctx, e, qs_pp_worker_fields, QS_PP_N(qs_pp_worker_fields), w);
}

/* obj[key], when present: its items (keyed: an object's) read by `read` into *list, *n. */
static qs_status qs_pp_list(qs_jf_ctx *ctx, const cJSON *obj, const char *key, bool keyed, size_t size,
                            qs_jf_item_fn read, void **list, int *n) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!c) return QS_OK;
    size_t at = qs_jf_enter_key(ctx, key);
    qs_status st = qs_jf_items(ctx, c, keyed, size, read, list, n);
    qs_jf_leave(ctx, at);
    return st;
}

/* The whole object (the path at "predictions"). */
static qs_status qs_pp_read(qs_jf_ctx *ctx, const cJSON *obj, qs_plan_predictions *p) {
    QS_TRY(qs_jf_read_open(ctx, obj, qs_pp_fields, QS_PP_N(qs_pp_fields), p));
    p->has_fastest_type = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(obj, "fastest_type"));
    void *types = NULL, *workers = NULL;
    qs_status st = qs_pp_list(ctx, obj, "types", true, sizeof *p->types, qs_pp_type, &types, &p->n_types);
    p->types = types;
    if (st == QS_OK) st = qs_pp_list(ctx, obj, "workers", false, sizeof *p->workers, qs_pp_worker, &workers, &p->n_workers);
    p->workers = workers;
    return st;
}

qs_status qs_plan_predictions_read(const cJSON *obj, const char *origin, qs_plan_predictions *out) {
    memset(out, 0, sizeof *out);
    out->target_ms = out->target_asked_ms = out->synchronized_ms = out->replayed_ms = NAN;
    out->rounds = -1;
    if (!obj) return QS_OK;
    out->present = true;
    qs_jf_ctx ctx = {.what = "plan", .origin = origin};
    qs_jf_enter_key(&ctx, "predictions");
    qs_status st = qs_pp_read(&ctx, obj, out);
    if (st != QS_OK) {
        qs_plan_predictions_free(out);
        qs_plan_predictions_read(NULL, origin, out);
    }
    return st;
}

void qs_plan_predictions_free(qs_plan_predictions *p) {
    free(p->types);
    free(p->workers);
    p->types = NULL;
    p->workers = NULL;
    p->n_types = p->n_workers = 0;
}

const qs_plan_type_prediction *qs_plan_predictions_type(const qs_plan_predictions *p, const char *type) {
    for (int i = 0; i < p->n_types; i++)
        if (strcmp(p->types[i].type, type) == 0) return &p->types[i];
    return NULL;
}
