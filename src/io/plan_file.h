/* src/io/plan_file.h — defines: precision plan files (which compute precision each
 * GEMM-like layer of a model runs at, plus the quantization options), their validation
 * against a built model and a backend, applying them to a model (through
 * graph/precision_setup.h) and writing a model's current precisions back out.
 *
 * The file format (JSON, "format": "qsync-plan", "version": 1 or 2) is specified in
 * docs/PLANS.md:
 *   {"format": "qsync-plan", "version": 2, "model": "cnn",
 *    "config": "in_h=28 ...",            optional: the model's build config (checked if present)
 *    "backend": "cpu",                   optional: checked against the backend if present
 *    "device_type": "xeon-avx512",       optional label, recorded (not with "device_types")
 *    "default": "fp32",                  optional, precision of the layers not listed
 *    "precisions": {"conv1": "int8", "fc1": "bf16"},
 *    "options": {"grad_rounding": "stochastic"|"nearest", "weight_scales": "tensor"|"channel"},
 *    "device_types": {"cpu-slow": {"default": ..., "precisions": {...}, "options": {...}}},
 *                                        version 2 only: per-device-type sections (below)
 *    "comment": "...",                   optional, not interpreted
 *    "predictions": {...}}               optional: qsync plan's predictions, typed where known
 *                                        (io/plan_predictions.h), otherwise free-form
 * A version-2 plan without "device_types" is a version-1 plan.
 *
 * Per-device-type sections: each rank calls qs_plan_select_device_type with its device type
 * (a cluster file worker's "type") before using the plan. A layer's precision is then the
 * section's precisions[layer], else the top-level precisions[layer], else the section's
 * default, else the top-level default; the section's options override the top-level ones.
 * qs_plan_validate / qs_plan_apply refuse a plan whose sections were not resolved.
 *
 * Order of use (see graph/precision.h): build → qs_model_finalize → qs_model_fuse →
 * [qs_plan_select_device_type] → qs_plan_apply (or qs_plan_check_model + qs_precision_setup
 * with qs_plan_assignment) →
 * qs_model_insert_casts → qs_model_setup.
 *
 * Errors (each message names the file, the JSON path of the offending key and what to do):
 *   QS_ERR_IO / QS_ERR_NOT_FOUND   the file cannot be read
 *   QS_ERR_FORMAT       malformed JSON (line:column), wrong "format" or "version", a key of the
 *                       wrong type, an unknown key, an unknown precision or option value, a
 *                       layer or device type listed twice, an empty device-type label,
 *                       "device_types" in a version-1 plan
 *   QS_ERR_MISMATCH     the plan is for another model ("model", "config") or backend
 *   QS_ERR_NOT_FOUND    a layer the model does not have (a few valid names are listed)
 *   QS_ERR_INVALID_ARG  a layer whose precision cannot be chosen (e.g. a BatchNorm2d)
 *   QS_ERR_UNSUPPORTED  a precision the backend cannot run, or one it only emulates when
 *                       allow_emulated is false */
#ifndef QSYNC_IO_PLAN_FILE_H
#define QSYNC_IO_PLAN_FILE_H

#include <stdbool.h>
#include <cjson/cJSON.h>
#include "qsync/status.h"
#include "qsync/dtype.h"
#include "core/backend.h"
#include "graph/graph.h"
#include "graph/precision_setup.h"
#include "io/plan_predictions.h"

#define QS_PLAN_FORMAT "qsync-plan"
#define QS_PLAN_VERSION 2     /* the newest version read (and written when a plan has sections) */
#define QS_PLAN_VERSION_MIN 1 /* the oldest version read (and written when it has none) */
#define QS_PLAN_TYPE_MAX 64   /* device-type labels: at most QS_PLAN_TYPE_MAX - 1 bytes */
#define QS_PLAN_MAX_BYTES ((size_t)16 << 20)

/* One entry of "device_types": what differs for the ranks of one device type. */
typedef struct qs_plan_section {
    char type[QS_PLAN_TYPE_MAX]; /* device-type label (non-empty) */
    qs_precision default_prec;   /* meaningful when has_default */
    bool has_default;
    qs_layer_prec *layers;       /* the section's "precisions", in file order */
    int n_layers;
    bool has_precisions;         /* "precisions" was given (possibly empty) */
    qs_grad_rounding grad_rounding; /* UNSET: the top-level option */
    qs_weight_scales weight_scales;
} qs_plan_section;

typedef struct qs_plan {
    char origin[512];          /* where it came from, for messages: a path or "--precision int8" */
    char model[32];            /* arch the plan is for (required) */
    char config[256];          /* model build config; "" = any */
    char backend[16];          /* "cpu", "cuda"; "" = any */
    char device_type[QS_PLAN_TYPE_MAX]; /* label; "" = none. Recorded, not checked; set by
                                          qs_plan_select_device_type */
    qs_precision default_prec; /* layers not listed */
    qs_layer_prec *layers;     /* listed layers, in file order */
    int n_layers;
    qs_grad_rounding grad_rounding;
    qs_weight_scales weight_scales;
    qs_plan_section *types;    /* "device_types" sections, in file order (owned; qs_plan_free) */
    int n_types;               /* 0: none, or already resolved by qs_plan_select_device_type */
    bool uniform;              /* made by qs_plan_uniform (messages speak of --precision) */
    qs_plan_predictions predictions; /* what qsync plan predicted ("predictions"; io/plan_predictions.h) */
} qs_plan;

/* Parse plan text (NUL-terminated); `origin` names it in messages (a path). On failure *out
 * is zeroed (safe to qs_plan_free). */
qs_status qs_plan_parse(const char *text, const char *origin, qs_plan *out);
/* Read and parse the plan file at path. */
qs_status qs_plan_read(const char *path, qs_plan *out);
void qs_plan_free(qs_plan *p);

/* Whether p still has per-device-type sections (not yet resolved by
 * qs_plan_select_device_type). */
bool qs_plan_has_device_types(const qs_plan *p);
/* The number of device-type sections of p, and the label of section i (0 ≤ i < count; NULL
 * out of range): e.g. to check that each names a worker type of a cluster. */
int qs_plan_device_type_count(const qs_plan *p);
const char *qs_plan_device_type_at(const qs_plan *p, int i);
/* Resolve p in place for device type `type`: the section's default, precisions and options
 * override the top-level ones (see above), the sections are dropped and p->device_type is set
 * to `type`. A plan without sections is left as it is (QS_OK). QS_ERR_NOT_FOUND, listing the
 * plan's types, when p has sections and `type` is NULL or not among them; p is unchanged on
 * failure. */
qs_status qs_plan_select_device_type(qs_plan *p, const char *type);

/* A plan putting every selectable layer of model `arch` at p (origin e.g. "--precision int8"). */
void qs_plan_uniform(const char *arch, qs_precision p, const char *origin, qs_plan *out);

/* The file-level checks of p against model m and backend be (be may be NULL to skip its
 * check): its device-type sections resolved (QS_ERR_INVALID_ARG otherwise), its "model" m's
 * arch, its "config" (if any) m's, its "backend" (if any) be's (QS_ERR_MISMATCH). */
qs_status qs_plan_check_model(const qs_plan *p, const qs_model *m, qs_backend *be);
/* p's precisions as an assignment (a view into p, valid while p lives). */
qs_precision_assignment qs_plan_assignment(const qs_plan *p);

/* qs_plan_check_model, then qs_precision_check of its assignment: the layers against m, the
 * precisions against be (may be NULL to skip the backend checks). Emulated precisions are
 * refused unless allow_emulated. Only precisions that some layer would actually get are
 * checked against the backend. */
qs_status qs_plan_validate(const qs_plan *p, const qs_model *m, qs_backend *be, bool allow_emulated);

/* qs_plan_check_model, then qs_precision_assign: set node->prec of every selectable node
 * (listed: the plan's precision; others: the plan's default) and the options
 * (grad_round_nearest, weight_per_channel; an option the plan does not give takes its
 * default: stochastic, tensor). m is unchanged on failure. Call before qs_model_insert_casts
 * / qs_model_setup. */
qs_status qs_plan_apply(const qs_plan *p, qs_model *m, qs_backend *be, bool allow_emulated);

/* The precision set-up of a run with plan p: qs_plan_check_model, then qs_precision_setup
 * of o with p's assignment; p NULL: qs_precision_setup of o as it is. */
qs_status qs_plan_precision_setup(const qs_plan *p, qs_model *m, qs_backend *be, const qs_precision_options *o);

/* The plan of m's current state: every selectable node listed explicitly, default fp32,
 * the model's arch and config, and its options. *out must be freed with qs_plan_free. */
qs_status qs_plan_from_model(const qs_model *m, qs_plan *out);
/* The plan as a JSON document (caller frees with cJSON_Delete); NULL when out of memory.
 * Version 2 with "device_types" when p has sections, else version 1. */
cJSON *qs_plan_to_json(const qs_plan *p);
/* Write p to path atomically (temp file, fsync, rename), pretty-printed. */
qs_status qs_plan_save(const qs_plan *p, const char *path);
/* qs_plan_from_model + qs_plan_save. */
qs_status qs_plan_write(const qs_model *m, const char *path);
/* m's plan as compact JSON text (malloc'ed; checkpoint metadata); NULL when out of memory. */
char *qs_plan_model_json(const qs_model *m);

/* Whether m's per-node precisions and options are those of plan `saved` (every selectable
 * node at the precision `saved` gives it, same options; unset options in `saved` mean the
 * defaults). QS_ERR_MISMATCH describing the first differences otherwise, prefixed by `what`
 * (e.g. "--resume runs/x was trained with"). */
qs_status qs_plan_compare(const qs_plan *saved, const qs_model *m, const char *what);

#endif
