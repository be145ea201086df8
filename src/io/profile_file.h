/* src/io/profile_file.h — defines: profile files (`qsync profile`, format docs/PROFILE.md) read
 * once into a qs_profile, every field checked at read time; and the look-ups the replayer and
 * the planner make in one (runs by precision, the base run, an op by name).
 *
 * Read: the document must be an object of format "qsync-profile", version 1. Every object's
 * keys must be known and given once; required fields must be present; numbers must be finite,
 * times and sizes >= 0, counts whole (batch a whole number in [1, 2^53]); precisions and dtypes
 * known names, the optimizer "sgd" or "adamw"; "runs" keyed by precision names (at least one
 * run; each run's "precision" its key); "allreduce".points [bytes, ms] pairs with strictly
 * increasing bytes. Fields added to the format after its first files (data_ms,
 * step_samples_ms, grad_average_ms, grad_sync, co_running_*, emulation, device.type,
 * fp8_amax_history, mixed_runs, memory_facts) are optional. Errors are QS_ERR_FORMAT
 * (QS_ERR_IO / QS_ERR_NOT_FOUND for a file that cannot be read) naming the file, the JSON path
 * and the value (src/io/json_fields.h); on failure nothing is kept (*out zeroed). */
#ifndef QSYNC_IO_PROFILE_FILE_H
#define QSYNC_IO_PROFILE_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "core/backend.h"
#include "dag/dag.h"
#include "optim/optim.h"
#include "qsync/dtype.h"
#include "qsync/status.h"

#define QS_PROFILE_FORMAT "qsync-profile"
#define QS_PROFILE_VERSION 1
#define QS_PROFILE_TYPE_MAX 48 /* device-type labels (a cluster worker's "type") */

/* One op of a run ("runs.<p>.ops[i]"): one node after the input, in execution order. */
typedef struct qs_profile_op {
    char name[QS_NAME_MAX];           /* the node (PyTorch module path) */
    char kind[32];                    /* its class, e.g. "Conv2d" */
    char (*inputs)[QS_NAME_MAX];      /* its input nodes (owned) */
    int n_inputs;
    char fused_into[QS_NAME_MAX];     /* "" unless fused into another op (its costs are that op's) */
    bool fused;                       /* "fused_into" was given */
    qs_precision precision;
    qs_dtype out_dtype;
    int64_t out_elements, out_bytes, grad_bytes, saved_bytes, workspace_bytes, param_count;
    double forward_ms, backward_data_ms, backward_weights_ms, cast_ms; /* medians per step */
} qs_profile_op;

/* The model's gradient sync measured in place ("grad_sync"). */
typedef struct qs_profile_sync {
    int64_t ranks, bucket_bytes, buckets;
    double overlap_ms, no_overlap_ms;          /* time inside the sync, per mode */
    double overlap_step_ms, no_overlap_step_ms; /* the synchronized step; NAN when not recorded */
} qs_profile_sync;

/* A run's memory by category ("memory_bytes"), bytes. */
typedef struct qs_profile_memory {
    int64_t params, grads, optimizer, buffers, activations, activation_grads, saved, workspace, labels;
    int64_t backend_in_use, backend_peak;
} qs_profile_memory;

/* The run at one precision ("runs.<p>"). */
typedef struct qs_profile_prec_run {
    qs_precision precision;
    qs_prec_support support;          /* native or emulated */
    double step_ms, optimizer_ms;
    double grad_average_ms;           /* 0 when not recorded */
    double *step_samples_ms;          /* every timed step, in order (owned; may be NULL) */
    int n_step_samples;
    bool has_sync;
    qs_profile_sync sync;
    qs_profile_memory memory;
    qs_mem_facts memory_facts;        /* the backend facts the memory plan took ("memory_facts");
                                       * absent (profiles taken before it): the backend's defaults,
                                       * all true on "cuda", all false otherwise */
    qs_profile_op *ops;               /* owned */
    int n_ops;
} qs_profile_prec_run;

/* One fitted cast line ("casts[i]"). */
typedef struct qs_profile_cast_fit {
    qs_dtype from, to;
    double alpha_ms, beta_ms_per_element; /* beta may be < 0 (a least-squares slope) */
    double *points;                       /* [elements, ms] pairs (owned) */
    int n_points;
} qs_profile_cast_fit;

/* The all-reduce between the ranks ("allreduce"). */
typedef struct qs_profile_allreduce_curve {
    int64_t ranks, reps;              /* reps 0 when not recorded */
    double alpha_ms, beta_ms_per_byte;
    double *points;                   /* [bytes, ms] pairs, bytes increasing (owned) */
    int n_points;
} qs_profile_allreduce_curve;

/* One mixed-precision lockstep run ("mixed_runs[i]"). */
typedef struct qs_profile_mixed_run {
    char (*types)[QS_PROFILE_TYPE_MAX]; /* "precisions": device type → precision, in file order (owned) */
    qs_precision *precs;
    int n_types;
    qs_precision precision;           /* this rank's */
    double step_ms, optimizer_ms, grad_average_ms;
    bool has_sync;
    qs_profile_sync sync;
} qs_profile_mixed_run;

typedef enum qs_profile_emulation_method {
    QS_PROFILE_EMU_NONE = 0,          /* "none" */
    QS_PROFILE_EMU_CGROUP_QUOTA,      /* "cgroup-quota": a CPU quota on the whole step */
    QS_PROFILE_EMU_DUTY_CYCLE         /* "duty-cycle": over the ops */
} qs_profile_emulation_method;

/* What the profile was taken on ("device"): backend always; the rest as recorded (0 / ""). */
typedef struct qs_profile_device {
    char backend[16];                 /* "cpu" or "cuda" */
    char type[QS_PROFILE_TYPE_MAX];   /* the cluster's label; "" = none */
    int64_t cores, threads, memory_bytes, device, sms;
    char cpu[256], gpu[256], sm_partition[64];
    double mps_sm_percent;
} qs_profile_device;

typedef struct qs_profile {
    char origin[4096];                /* the file, for messages */
    char model[32], config[256], data[256], optimizer[16];
    qs_optim_kind optimizer_kind;     /* "optimizer" ("sgd" or "adamw") */
    int64_t batch, warmup, reps, fp8_amax_history;
    double data_ms;                   /* 0 when not recorded */
    int64_t co_running_ranks;         /* 0 when not recorded */
    double co_running_slowdown;       /* >= 1; 0 when not recorded */
    qs_profile_device device;
    bool has_emulation;
    double emulated_slowdown;         /* "emulation".slowdown (>= 1) */
    qs_profile_emulation_method emulation_method;
    qs_profile_prec_run *runs;        /* in file order (owned) */
    int n_runs;
    int run_index[QS_PREC_COUNT];     /* runs[] index of each precision's run, -1 without one */
    qs_profile_cast_fit *casts;       /* owned */
    int n_casts;
    bool has_allreduce;
    qs_profile_allreduce_curve allreduce;
    qs_profile_mixed_run *mixed;      /* owned */
    int n_mixed;
} qs_profile;

/* Read the document `doc` (origin names it in messages) into *out (free with qs_profile_free;
 * zeroed on failure). */
qs_status qs_profile_from_json(const cJSON *doc, const char *origin, qs_profile *out);
/* Parse text (NUL-terminated) as above. */
qs_status qs_profile_parse(const char *text, const char *origin, qs_profile *out);
/* Read the file at path as above. */
qs_status qs_profile_read(const char *path, qs_profile *out);
void qs_profile_free(qs_profile *p);

/* The run at precision prec, or NULL. */
const qs_profile_prec_run *qs_profile_run_at(const qs_profile *p, qs_precision prec);
/* The highest precision (in the order fp32, tf32, bf16, fp16, fp8, int8) p has a run for, into
 * *out: the profile's base (fp32 on a CPU profile, bf16 in a GPU profile of bf16 and fp8; the
 * planner's base). false when it has none. */
bool qs_profile_top_precision(const qs_profile *p, qs_precision *out);
/* The run of that precision (NULL without runs). */
const qs_profile_prec_run *qs_profile_base_run(const qs_profile *p);
/* The op named `name` in run r, or NULL. */
const qs_profile_op *qs_profile_find_op(const qs_profile_prec_run *r, const char *name);
/* Whether op `name` ran fused into another op in the base run (its entry has "fused_into": a
 * ReLU fused into its producer, the nodes of a fused attention). */
bool qs_profile_op_fused(const qs_profile *p, const char *name);

#endif
