/* src/io/json_fields.h — defines: reading the JSON objects of the pipeline documents (profiles,
 * indicators, plan predictions) into C structs by a table of their fields, with the errors every
 * such reader shares. Each error is QS_ERR_FORMAT and names the document kind, the file, the
 * JSON path of the value (e.g. `runs.fp32.ops[3].forward_ms`) and the value itself:
 *   profile p.json: runs.fp32.ops[3].forward_ms must be a finite number >= 0 (got -1)
 *   profile p.json: runs.fp32: unknown key "forward" (known: precision, support, ...)
 * A reader keeps the path of the object it reads in a qs_jf_ctx, entering and leaving keys and
 * indices as it descends. */
#ifndef QSYNC_IO_JSON_FIELDS_H
#define QSYNC_IO_JSON_FIELDS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "qsync/dtype.h"
#include "qsync/status.h"

/* The largest whole number a JSON number holds exactly (2^53): the default bound of counts. */
#define QS_JF_WHOLE_MAX 9007199254740992.0

/* Where a reader is: the document kind and file for messages, and the JSON path of the value
 * being read ("" at the top level). */
typedef struct qs_jf_ctx {
    const char *what;   /* "profile", "indicator", "plan" */
    const char *origin; /* the file, or e.g. "the broadcast profile" */
    char path[512];
} qs_jf_ctx;

typedef enum qs_jf_kind {
    QS_JF_NUM,       /* double: a finite number in [lo, hi] (±INFINITY: unbounded) */
    QS_JF_NUM_NULL,  /* double: as QS_JF_NUM, or null (read as NAN: a statistic that was not finite;
                        a non-finite number, as a document in memory holds one, likewise) */
    QS_JF_WHOLE,     /* int64_t: a whole number in [lo, hi] */
    QS_JF_STRING,    /* char[size]: a string shorter than size (non-empty when lo > 0) */
    QS_JF_PRECISION, /* qs_precision: a precision name (fp32, tf32, bf16, fp16, fp8, int8) */
    QS_JF_DTYPE,     /* qs_dtype: a dtype name (f32, bf16, f16, f8e4m3, ...) */
    QS_JF_BOOL,      /* bool */
    QS_JF_OBJECT,    /* read by the caller; checked here to be an object */
    QS_JF_ARRAY,     /* read by the caller; checked here to be an array */
    QS_JF_ANY        /* read by the caller, which checks its type */
} qs_jf_kind;

/* One key of an object: its kind, whether it must be present, where its value goes in the
 * struct (offset; unused for OBJECT, ARRAY, ANY), a string's buffer size, numeric bounds. */
typedef struct qs_jf_field {
    const char *key;
    qs_jf_kind kind;
    bool required;
    size_t offset;
    size_t size;
    double lo, hi;
} qs_jf_field;

/* Table rows for a member m of struct T whose key is the member's name. */
#define QS_JF_F(T, m, kind, req, lo, hi) {#m, kind, req, offsetof(T, m), sizeof(((T *)0)->m), lo, hi}
#define QS_JF_MS(T, m, req) QS_JF_F(T, m, QS_JF_NUM, req, 0, INFINITY)        /* times: finite, >= 0 */
#define QS_JF_COUNT(T, m, req) QS_JF_F(T, m, QS_JF_WHOLE, req, 0, QS_JF_WHOLE_MAX) /* bytes, counts */
#define QS_JF_STR(T, m, req) QS_JF_F(T, m, QS_JF_STRING, req, 1, 0)           /* non-empty string */
#define QS_JF_NESTED(key, kind, req) {key, kind, req, 0, 0, 0, 0}             /* read by the caller */

/* Read object obj (at ctx->path) into out by fields[0..n): obj must be an object, each of its
 * keys one of the fields given once, every required field present; each value is checked by its
 * kind and stored at its offset (an absent optional value keeps what out holds: its default). */
qs_status qs_jf_read(qs_jf_ctx *ctx, const cJSON *obj, const qs_jf_field *fields, int n, void *out);
/* qs_jf_read of an open object: keys outside the table are left alone (a free-form object of
 * which only some keys have a meaning, e.g. a plan's "predictions"). */
qs_status qs_jf_read_open(qs_jf_ctx *ctx, const cJSON *obj, const qs_jf_field *fields, int n, void *out);

/* One value v of field f (at ctx->path), checked by f's kind and stored at out + f->offset. */
qs_status qs_jf_read_value(qs_jf_ctx *ctx, const qs_jf_field *f, const cJSON *v, char *out);

/* Append ".key" (just "key" at the top level), "[i]" or `["label"]` to ctx->path; each returns
 * the path's previous length, which qs_jf_leave restores. */
size_t qs_jf_enter_key(qs_jf_ctx *ctx, const char *key);
size_t qs_jf_enter_index(qs_jf_ctx *ctx, int i);
size_t qs_jf_enter_label(qs_jf_ctx *ctx, const char *label);
void qs_jf_leave(qs_jf_ctx *ctx, size_t len);

/* The error QS_ERR_FORMAT "<what> <origin>: <path> <message> (got <value>)"; value NULL: no
 * "(got ...)". */
qs_status qs_jf_fail(const qs_jf_ctx *ctx, const cJSON *value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reads one item of a container into out (the path at the item). */
typedef qs_status (*qs_jf_item_fn)(qs_jf_ctx *ctx, const cJSON *item, void *out);
/* Every item of `container` (at ctx->path: an array, or with keyed an object whose keys are
 * labels given once, e.g. layer names) read by `read` into a new array of items of `size` bytes:
 * *items (n + 1 zeroed entries, allocated here) and *n_items, which counts every item read or
 * begun, so that the caller frees them all (also on failure). The path at each item is [i], or
 * ["label"] when keyed. */
qs_status qs_jf_items(qs_jf_ctx *ctx, const cJSON *container, bool keyed, size_t size, qs_jf_item_fn read, void **items,
                      int *n_items);

/* Array `arr` (at ctx->path) of [x, y] pairs of finite numbers >= 0 into *pts (2·*n doubles,
 * allocated here, NULL when empty; the caller frees it, also on failure). increasing: the x must
 * grow strictly from one pair to the next. */
qs_status qs_jf_points(qs_jf_ctx *ctx, const cJSON *arr, bool increasing, double **pts, int *n);
/* Array `arr` (at ctx->path) of finite numbers >= 0 into *v (allocated here as above). */
qs_status qs_jf_times(qs_jf_ctx *ctx, const cJSON *arr, double **v, int *n);
/* Object `obj` (at ctx->path) keyed by precision names, each at most once, with finite numbers
 * >= 0 (or null when null_ok: NAN) into v[precision]; present[p] says which were given (absent:
 * v[p] = NAN; all false on failure). */
qs_status qs_jf_precision_map(qs_jf_ctx *ctx, const cJSON *obj, bool null_ok, double v[QS_PREC_COUNT],
                              bool present[QS_PREC_COUNT]);
/* Whether an earlier member of obj has item's key (cJSON keeps repeated keys). */
bool qs_jf_key_repeated(const cJSON *obj, const cJSON *item);

#endif
