/* src/io/json_fields.c — defines: the table-driven JSON object reader of the pipeline documents
 * and its path-naming errors (json_fields.h). */
#include "io/json_fields.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the path ---- */

size_t qs_jf_enter_key(qs_jf_ctx *ctx, const char *key) {
    size_t len = strlen(ctx->path);
    snprintf(ctx->path + len, sizeof ctx->path - len, "%s%s", len ? "." : "", key);
    return len;
}

size_t qs_jf_enter_index(qs_jf_ctx *ctx, int i) {
    size_t len = strlen(ctx->path);
    snprintf(ctx->path + len, sizeof ctx->path - len, "[%d]", i);
    return len;
}

size_t qs_jf_enter_label(qs_jf_ctx *ctx, const char *label) {
    size_t len = strlen(ctx->path);
    snprintf(ctx->path + len, sizeof ctx->path - len, "[\"%.64s\"]", label);
    return len;
}

void qs_jf_leave(qs_jf_ctx *ctx, size_t len) {
    if (len < sizeof ctx->path) ctx->path[len] = '\0';
}

/* ---- errors ---- */

qs_status qs_jf_fail(const qs_jf_ctx *ctx, const cJSON *value, const char *fmt, ...) {
    char msg[512], got[64] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (value) {
        char *text = cJSON_PrintUnformatted(value);
        size_t n = text ? strlen(text) : 0;
        snprintf(got, sizeof got, " (got %.40s%s)", text ? text : "?", n > 40 ? "..." : "");
        free(text);
    }
    return QS_FAIL(QS_ERR_FORMAT, "%s %s: %s%s%s%s", ctx->what, ctx->origin, ctx->path, ctx->path[0] ? " " : "", msg,
                   got);
}

/* ---- one value ---- */

bool qs_jf_key_repeated(const cJSON *obj, const cJSON *item) {
    for (const cJSON *c = obj->child; c && c != item; c = c->next)
        if (c->string && item->string && strcmp(c->string, item->string) == 0) return true;
    return false;
}

/* The bounds of a number for messages: ">= 0", "in [1, 100]", "" (any). */
static void qs_jf_bounds(double lo, double hi, char *buf, size_t cap) {
    if (isinf(lo) && isinf(hi)) snprintf(buf, cap, "%s", "");
    else if (isinf(hi)) snprintf(buf, cap, " >= %.17g", lo);
    else if (isinf(lo)) snprintf(buf, cap, " <= %.17g", hi);
    else snprintf(buf, cap, " in [%.17g, %.17g]", lo, hi);
}

/* A number field's value v into *out (NAN for an allowed null). */
static qs_status qs_jf_number(qs_jf_ctx *ctx, const qs_jf_field *f, const cJSON *v, double *out) {
    char b[96];
    qs_jf_bounds(f->lo, f->hi, b, sizeof b);
    if (f->kind == QS_JF_NUM_NULL && (cJSON_IsNull(v) || (cJSON_IsNumber(v) && !isfinite(v->valuedouble)))) {
        *out = NAN; /* null, as a non-finite number is written (a document still in memory holds it as such) */
        return QS_OK;
    }
    bool whole = f->kind == QS_JF_WHOLE;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble >= f->lo && v->valuedouble <= f->hi) ||
        (whole && v->valuedouble != floor(v->valuedouble)))
        return qs_jf_fail(ctx, v, "must be a %s%s%s", whole ? "whole number" : "finite number", b,
                          f->kind == QS_JF_NUM_NULL ? ", or null" : "");
    *out = v->valuedouble;
    return QS_OK;
}

/* A string field's value v into buf (size bytes). */
static qs_status qs_jf_string(qs_jf_ctx *ctx, const qs_jf_field *f, const cJSON *v, char *buf) {
    if (!cJSON_IsString(v) || !v->valuestring) return qs_jf_fail(ctx, v, "must be a string");
    size_t n = strlen(v->valuestring);
    if (n >= f->size) return qs_jf_fail(ctx, v, "must be a string of at most %zu characters", f->size - 1);
    if (f->lo > 0 && n == 0) return qs_jf_fail(ctx, v, "must be a non-empty string");
    memcpy(buf, v->valuestring, n + 1);
    return QS_OK;
}

/* A precision or dtype name v into *out. */
static qs_status qs_jf_name(qs_jf_ctx *ctx, const qs_jf_field *f, const cJSON *v, int *out) {
    const bool prec = f->kind == QS_JF_PRECISION;
    const int count = prec ? QS_PREC_COUNT : QS_DTYPE_COUNT;
    char all[128];
    size_t len = 0;
    all[0] = '\0';
    for (int i = 0; i < count; i++) {
        const char *name = prec ? qs_precision_name((qs_precision)i) : qs_dtype_name((qs_dtype)i);
        if (cJSON_IsString(v) && strcmp(v->valuestring, name) == 0) {
            *out = i;
            return QS_OK;
        }
        len += (size_t)snprintf(all + len, len < sizeof all ? sizeof all - len : 0, "%s%s", i ? ", " : "", name);
    }
    return qs_jf_fail(ctx, v, "must be a %s name (%s)", prec ? "precision" : "dtype", all);
}

qs_status qs_jf_read_value(qs_jf_ctx *ctx, const qs_jf_field *f, const cJSON *v, char *out) {
    double x = 0;
    int k = 0;
    switch (f->kind) {
    case QS_JF_NUM:
    case QS_JF_NUM_NULL:
        QS_TRY(qs_jf_number(ctx, f, v, &x));
        memcpy(out + f->offset, &x, sizeof x);
        return QS_OK;
    case QS_JF_WHOLE: {
        QS_TRY(qs_jf_number(ctx, f, v, &x));
        int64_t w = (int64_t)x;
        memcpy(out + f->offset, &w, sizeof w);
        return QS_OK;
    }
    case QS_JF_STRING: return qs_jf_string(ctx, f, v, out + f->offset);
    case QS_JF_PRECISION:
    case QS_JF_DTYPE: {
        QS_TRY(qs_jf_name(ctx, f, v, &k));
        if (f->kind == QS_JF_PRECISION) *(qs_precision *)(void *)(out + f->offset) = (qs_precision)k;
        else *(qs_dtype *)(void *)(out + f->offset) = (qs_dtype)k;
        return QS_OK;
    }
    case QS_JF_BOOL:
        if (!cJSON_IsBool(v)) return qs_jf_fail(ctx, v, "must be true or false");
        *(bool *)(void *)(out + f->offset) = cJSON_IsTrue(v);
        return QS_OK;
    case QS_JF_OBJECT: return cJSON_IsObject(v) ? QS_OK : qs_jf_fail(ctx, v, "must be an object");
    case QS_JF_ARRAY: return cJSON_IsArray(v) ? QS_OK : qs_jf_fail(ctx, v, "must be an array");
    case QS_JF_ANY: return QS_OK;
    }
    return QS_FAIL(QS_ERR_INTERNAL, "qs_jf_value: unknown field kind %d", (int)f->kind);
}

/* ---- objects ---- */

/* The unknown-key error of `key` in an object of fields[0..n). */
static qs_status qs_jf_unknown(qs_jf_ctx *ctx, const char *key, const qs_jf_field *fields, int n) {
    char known[768];
    size_t len = 0;
    known[0] = '\0';
    for (int i = 0; i < n && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", fields[i].key);
    return QS_FAIL(QS_ERR_FORMAT, "%s %s: %s%sunknown key \"%.64s\" (known: %s)", ctx->what, ctx->origin, ctx->path,
                   ctx->path[0] ? ": " : "", key, known);
}

/* qs_jf_read; open: unknown keys are left alone. */
static qs_status qs_jf_read_object(qs_jf_ctx *ctx, const cJSON *obj, const qs_jf_field *fields, int n, void *out,
                                   bool open) {
    if (!cJSON_IsObject(obj)) return qs_jf_fail(ctx, obj, "must be an object");
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        const char *key = item->string ? item->string : "";
        int f = 0;
        while (f < n && strcmp(fields[f].key, key) != 0) f++;
        if (f == n && open) continue;
        if (f == n) return qs_jf_unknown(ctx, key, fields, n);
        size_t at = qs_jf_enter_key(ctx, key);
        qs_status st = qs_jf_key_repeated(obj, item) ? qs_jf_fail(ctx, NULL, "appears twice") : QS_OK;
        if (st == QS_OK) st = qs_jf_read_value(ctx, &fields[f], item, out);
        qs_jf_leave(ctx, at);
        QS_TRY(st);
    }
    for (int f = 0; f < n; f++)
        if (fields[f].required && !cJSON_GetObjectItemCaseSensitive(obj, fields[f].key))
            return qs_jf_fail(ctx, NULL, "%slacks \"%s\"", ctx->path[0] ? "" : "the document ", fields[f].key);
    return QS_OK;
}

qs_status qs_jf_read(qs_jf_ctx *ctx, const cJSON *obj, const qs_jf_field *fields, int n, void *out) {
    return qs_jf_read_object(ctx, obj, fields, n, out, false);
}

qs_status qs_jf_read_open(qs_jf_ctx *ctx, const cJSON *obj, const qs_jf_field *fields, int n, void *out) {
    return qs_jf_read_object(ctx, obj, fields, n, out, true);
}

/* ---- containers ---- */

qs_status qs_jf_items(qs_jf_ctx *ctx, const cJSON *container, bool keyed, size_t size, qs_jf_item_fn read, void **items,
                      int *n_items) {
    *n_items = 0;
    char *buf = calloc((size_t)cJSON_GetArraySize(container) + 1, size);
    *items = buf;
    if (!buf) return QS_FAIL(QS_ERR_OOM, "out of memory reading %s", ctx->origin);
    const cJSON *e;
    cJSON_ArrayForEach(e, container) {
        size_t at = keyed ? qs_jf_enter_label(ctx, e->string ? e->string : "") : qs_jf_enter_index(ctx, *n_items);
        qs_status st = keyed && qs_jf_key_repeated(container, e) ? qs_jf_fail(ctx, NULL, "appears twice") : QS_OK;
        if (st == QS_OK) st = read(ctx, e, buf + (size_t)(*n_items)++ * size);
        qs_jf_leave(ctx, at);
        QS_TRY(st);
    }
    return QS_OK;
}

/* ---- arrays of numbers ---- */

/* Element i of an array (at ctx->path) as a finite number >= 0 into *out. */
static qs_status qs_jf_time_at(qs_jf_ctx *ctx, const cJSON *v, int i, double *out) {
    static const qs_jf_field time = {"", QS_JF_NUM, true, 0, 0, 0, INFINITY};
    size_t at = qs_jf_enter_index(ctx, i);
    qs_status st = qs_jf_number(ctx, &time, v, out);
    qs_jf_leave(ctx, at);
    return st;
}

qs_status qs_jf_times(qs_jf_ctx *ctx, const cJSON *arr, double **v, int *n) {
    *v = NULL;
    *n = 0;
    if (!cJSON_IsArray(arr)) return qs_jf_fail(ctx, arr, "must be an array of numbers");
    int k = cJSON_GetArraySize(arr);
    if (k == 0) return QS_OK;
    if (!(*v = calloc((size_t)k, sizeof **v))) return QS_FAIL(QS_ERR_OOM, "out of memory reading %s", ctx->origin);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        QS_TRY(qs_jf_time_at(ctx, e, *n, &(*v)[*n]));
        (*n)++;
    }
    return QS_OK;
}

/* Pair i of a points array: [x, y] of finite numbers >= 0 into p[0], p[1]. */
static qs_status qs_jf_point(qs_jf_ctx *ctx, const cJSON *e, int i, double *p) {
    size_t at = qs_jf_enter_index(ctx, i);
    qs_status st = QS_OK;
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2)
        st = qs_jf_fail(ctx, e, "must be a pair [x, y] of numbers");
    for (int k = 0; k < 2 && st == QS_OK; k++) st = qs_jf_time_at(ctx, cJSON_GetArrayItem(e, k), k, &p[k]);
    qs_jf_leave(ctx, at);
    return st;
}

qs_status qs_jf_points(qs_jf_ctx *ctx, const cJSON *arr, bool increasing, double **pts, int *n) {
    *pts = NULL;
    *n = 0;
    if (!cJSON_IsArray(arr)) return qs_jf_fail(ctx, arr, "must be an array of [x, y] pairs");
    int k = cJSON_GetArraySize(arr);
    if (k == 0) return QS_OK;
    if (!(*pts = calloc(2 * (size_t)k, sizeof **pts))) return QS_FAIL(QS_ERR_OOM, "out of memory reading %s", ctx->origin);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        double *p = *pts + 2 * (size_t)*n;
        QS_TRY(qs_jf_point(ctx, e, *n, p));
        if (increasing && *n > 0 && !(p[0] > p[-2])) {
            size_t at = qs_jf_enter_index(ctx, *n);
            qs_status st = qs_jf_fail(ctx, e, "must come after a smaller size (%.17g): the sizes must increase", p[-2]);
            qs_jf_leave(ctx, at);
            return st;
        }
        (*n)++;
    }
    return QS_OK;
}

qs_status qs_jf_precision_map(qs_jf_ctx *ctx, const cJSON *obj, bool null_ok, double v[QS_PREC_COUNT],
                              bool present[QS_PREC_COUNT]) {
    qs_jf_field f[QS_PREC_COUNT];
    double got[QS_PREC_COUNT];
    for (int p = 0; p < QS_PREC_COUNT; p++) {
        present[p] = false; /* also on failure */
        f[p] = (qs_jf_field){qs_precision_name((qs_precision)p), null_ok ? QS_JF_NUM_NULL : QS_JF_NUM, false,
                             (size_t)p * sizeof(double), sizeof(double), 0, INFINITY};
        got[p] = NAN;
    }
    QS_TRY(qs_jf_read(ctx, obj, f, QS_PREC_COUNT, got));
    for (int p = 0; p < QS_PREC_COUNT; p++) {
        present[p] = cJSON_GetObjectItemCaseSensitive(obj, f[p].key) != NULL;
        v[p] = got[p];
    }
    return QS_OK;
}
