/* src/predict/profile.h — defines: profiling a model on this device, the measured costs the
 * replayer predicts from (format: docs/PROFILE.md).
 *
 * For every precision asked, the model is built with every selectable layer at that precision
 * (fused and cast exactly as in training), set up on a fresh backend at the batch size, and
 * trained for `warmup` + `reps` steps on one fixed batch with the engine's per-op timers on
 * (each op timed alone). Per op and step the time of each category (forward, backward-data,
 * backward-weights, cast) is recorded, and the medians over the `reps` steps are reported,
 * with the op's memory (output, gradient, saved-for-backward and workspace bytes at that
 * precision). Quantizing casts are fitted as α + β·elements per (from, to) dtype pair over
 * every cast of every run. The optimizer step (SGD or AdamW over all parameters) and the whole
 * step are reported as medians too, and the backend's own count of the bytes it allocated. */
#ifndef QSYNC_PREDICT_PROFILE_H
#define QSYNC_PREDICT_PROFILE_H

#include <stdint.h>
#include <cjson/cJSON.h>
#include "parallel/comm.h"
#include "qsync/log.h"
#include "qsync/status.h"
#include "models/models.h"
#include "optim/optim.h"
#include "io/plan_file.h"
#include "io/profile_file.h"

typedef struct qs_profile_options {
    const char *model;            /* built-in model name */
    qs_model_options model_opt;   /* input shape, classes, width */
    const char *data;             /* the data the input shape comes from (recorded) */
    int64_t batch;                /* the local batch of the worker the profile is for */
    int threads;                  /* compute threads (0 = OpenMP's default; host threads on a GPU) */
    bool cuda;                    /* profile on the GPU cuda:cuda_device (else the CPU) */
    int cuda_device;
    const qs_precision *precs;    /* precisions to profile (each must be supported, see below) */
    int n_precs;
    bool allow_emulated;          /* also profile precisions the backend only emulates */
    int fp8_amax_history;         /* FP8 scaling (qs_model.fp8_amax_history; 0: current scaling) */
    int warmup, reps;             /* steps before timing (≥ 1), timed steps (≥ 3) */
    qs_optim_kind optimizer;
    const float *x;               /* one batch: batch × in_h·in_w·in_c floats (NHWC) */
    const int32_t *y;             /* batch labels */
    double data_ms;               /* the loader's time per batch, measured by the caller (< 0: unknown) */
    const char *device_type;      /* the cluster's label of the device profiled (NULL: none) */
    double emulated_slowdown;     /* > 1: the profile is taken under this emulated slowdown ... */
    const char *emulation_method; /* ... applied by the caller as a CPU quota ("cgroup-quota"), or
                                   * by the profile as a duty cycle over the ops ("duty-cycle") */
    const qs_logger *log;         /* progress, one line per precision (may be NULL) */
    qs_comm *comm;                /* under mpirun (world ≥ 2): each run also times the all-reduce of
                                   * the model's own gradient buckets after its backward ... */
    size_t bucket_bytes;          /* ... formed at this bucket size, as training forms them */
} qs_profile_options;

/* The optimizer a profile steps with `kind`: PyTorch's defaults at a small step size (SGD lr
 * 0.01, momentum 0.9; AdamW lr 1e-5), so that repeating one batch keeps the weights finite.
 * Its state is what a profile's "memory_bytes".optimizer counts. */
qs_optim_config qs_profile_optim_config(qs_optim_kind kind);

/* Profile o->model and return the profile document in *out (caller deletes). */
qs_status qs_profile_model(const qs_profile_options *o, cJSON **out);

/* One run of the model at precision p, as qs_profile_model's "runs" hold them (under mpirun in
 * lockstep with the other ranks' runs, "grad_sync" included), into *run (caller deletes). */
qs_status qs_profile_run(const qs_profile_options *o, qs_precision p, cJSON **run);

#endif
