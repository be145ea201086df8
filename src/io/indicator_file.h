/* src/io/indicator_file.h — defines: indicator files (`qsync indicate`, format docs/INDICATOR.md)
 * read once into a qs_indicator_file, every field checked at read time.
 *
 * Read: the document must be an object of format "qsync-indicator", version 1, with "model",
 * "config" and "layers" (an object keyed by layer name, each layer with an "omega" object keyed
 * by precision names). Everything else the command writes (data, checkpoint, batch, batches,
 * method, gamma, seed, L; per layer kind, depth, stats, vfwd, vbwd) is optional — a hand-written
 * indicator may give ω alone — but typed when present. Every object's keys must be known and
 * given once; ω, vfwd, vbwd and the rounding variances are finite numbers >= 0 or null (a value
 * that was not finite when written, read as absent: NAN); the other statistics finite numbers
 * of any sign or null; counts whole. Errors are QS_ERR_FORMAT naming the file, the JSON path
 * (`layers["conv1"].omega.int8`) and the value (src/io/json_fields.h); on failure nothing is kept. */
#ifndef QSYNC_IO_INDICATOR_FILE_H
#define QSYNC_IO_INDICATOR_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "dag/dag.h"
#include "qsync/dtype.h"
#include "qsync/status.h"

#define QS_INDICATOR_FORMAT "qsync-indicator"
#define QS_INDICATOR_VERSION 1

/* A layer's statistics at full precision ("layers.<name>.stats"; NAN: null or not recorded). */
typedef struct qs_indicator_file_stats {
    int64_t chain_depth, bfs_depth, n_x, n_w, n_y, k_fwd, k_bwd_data, k_bwd_weights;
    bool has_dx;
    double ms_x, ms_w, ms_y, ms_dy, ms_dw, var_x, var_w, var_dy, var_dw, norm_x, norm_w;
    double amax_x, amax_w, amax_dy, int8_scale_x, int8_scale_w, int8_scale_dy;
    double espread_x, espread_w, espread_dy, grad_norm_mean, grad_amax_mean, grad_sq_norm;
    double qvar_x[QS_PREC_COUNT], qvar_w[QS_PREC_COUNT], qvar_dy[QS_PREC_COUNT];
} qs_indicator_file_stats;

/* One layer ("layers.<name>"). */
typedef struct qs_indicator_file_layer {
    char name[QS_NAME_MAX];
    char kind[32];                      /* "" when not recorded */
    int64_t depth;                      /* -1 when not recorded */
    bool has_stats;
    qs_indicator_file_stats stats;
    bool has_vfwd, has_vbwd;            /* gvar and qsync write them */
    double vfwd[QS_PREC_COUNT], vbwd[QS_PREC_COUNT];
    double omega[QS_PREC_COUNT];        /* ω per precision; NAN where absent or null */
    bool has_omega[QS_PREC_COUNT];      /* a number was given */
} qs_indicator_file_layer;

typedef struct qs_indicator_file {
    char origin[4096];                  /* the file, for messages */
    char model[32], config[256], data[256], method[16];
    char checkpoint[4096];              /* "" for null (fresh weights) or not recorded */
    int64_t batch, batches, L;          /* 0 when not recorded */
    double gamma;                       /* NAN when not recorded */
    double seed;                        /* NAN when not recorded (a uint64 as JSON holds it) */
    qs_indicator_file_layer *layers;    /* in file order (owned) */
    int n_layers;
} qs_indicator_file;

/* Read the document `doc` (origin names it in messages) into *out (free with
 * qs_indicator_file_free; zeroed on failure). */
qs_status qs_indicator_file_from_json(const cJSON *doc, const char *origin, qs_indicator_file *out);
/* Read the file at path as above. */
qs_status qs_indicator_file_read(const char *path, qs_indicator_file *out);
void qs_indicator_file_free(qs_indicator_file *f);

/* The layer named `name`, or NULL. */
const qs_indicator_file_layer *qs_indicator_file_layer_of(const qs_indicator_file *f, const char *name);

#endif
