/* src/predict/simulate.h — defines: the replayer: one training iteration of every worker of a
 * cluster, predicted from profiles (docs/PROFILE.md) for any precision plan.
 *
 * Per worker, the iteration is its model's ops in execution order, each costed from the
 * worker's profile at that op's precision: Conv2d/Linear from the run at their precision, the
 * ops without a precision of their own from the fp32 run, each quantizing cast from the run in
 * which the same cast (same input, same dtype) was measured, else from the fitted line of its
 * dtype pair — so a cast costs something exactly where neighbouring precisions differ. Then
 * data loading, forward in order, backward in reverse (a gradient bucket, formed exactly as the
 * runtime forms it, is ready when its last gradient is), the gradient all-reduce, the optimizer.
 *
 * Communication (several workers): the gradient sync measured in place by the profile for
 * this many ranks and these buckets ("grad_sync" of the fp32 run) when there is one; else a
 * bucket's all-reduce costs the profile's measured time at its size (linear between measured
 * sizes, the fitted line beyond), plus the final averaging. No bucket can start before every
 * worker has its gradients. On the CPU the transfers are done by the compute cores
 * themselves inside the polls between backward ops (Open MPI progresses only in MPI calls), so
 * they add to the slowest worker's backward instead of running beside it ("serial" model,
 * measured in docs/BENCHMARKS.md); on other devices buckets run on their own stream, one after
 * another, each starting when ready ("concurrent").
 *
 * Emulated workers: a duty cycle multiplies the ops' times by the slowdown; a CPU quota the
 * whole step's, and under the serial model also the transfers it takes part in.
 *
 * Memory: the worker's memory plan (predict/sim_memory.h, the layout allocation uses) with the
 * profile's backend facts, workspaces and optimizer: its arenas plus parameters, gradients,
 * optimizer state and buffers. */
#ifndef QSYNC_PREDICT_SIMULATE_H
#define QSYNC_PREDICT_SIMULATE_H

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "qsync/status.h"
#include "graph/graph.h"
#include "io/cluster.h"
#include "io/profile_file.h"

#define QS_SIM_FORMAT "qsync-simulation"
#define QS_SIM_VERSION 1
/* At most this many device types are calibrated (more: the replay stands; calibrate.h). */
#define QS_CAL_MAX_TYPES 8

typedef struct qs_sim_worker {
    const char *type;               /* device-type label (reports) */
    double slowdown;                /* emulated, ≥ 1 */
    bool slow_whole_step;           /* the slowdown covers the whole step (CPU quota), not only the ops */
    const qs_profile *profile;      /* its device type's profile (borrowed; its origin names it) */
    const qs_model *m;              /* built with this worker's precisions and casts (setup not needed) */
    int64_t batch;                  /* its local batch: the profile must have been taken at it */
    const qs_profile_prec_run *as_run; /* NULL; else replay the worker as this run of its profile measured it
                                      (its ops, untimed time, optimizer, averaging; no data loading):
                                      the calibration's replay of a measured assignment (calibrate.h) */
} qs_sim_worker;

typedef struct qs_sim_options {
    size_t bucket_bytes;      /* as --bucket-mb of training */
    bool overlap;             /* buckets start during backward (else after it) */
} qs_sim_options;

/* What the replay charges one node of a worker's model (qs_sim_node_charges). */
typedef struct qs_sim_charge {
    double ms;          /* forward + casts + backward (data and weights), times the emulated op slowdown */
    double untimed_ms;  /* Conv2d/Linear: its share of the untimed time beyond the base run's (may be < 0;
                           times the whole-step slowdown); 0 for other nodes */
    double mem;         /* its own buffers in the worker's memory plan (output, output gradient unless
                           shared, saved tensors), bytes */
    double workspace;   /* its workspace, bytes (the replay adds the largest one) */
} qs_sim_charge;

/* One worker of a prediction. */
typedef struct qs_sim_worker_result {
    int rank;
    const char *type;   /* the worker's (borrowed; NULL: none) */
    double slowdown;    /* the emulated slowdown replayed (1: none) */
    double data_ms, untimed_ms, forward_ms, backward_ms;
    double comm_wait_ms;    /* waiting for the gradients after its own backward */
    double grad_average_ms, optimizer_ms;
    double iteration_ms;    /* its own finish */
    double memory_bytes;    /* predicted peak */
} qs_sim_worker_result;

/* One assignment of a precision to each device type the calibration weighed (calibrate.h). */
typedef struct qs_sim_assignment {
    const char *types[QS_CAL_MAX_TYPES]; /* borrowed from the workers */
    qs_precision precs[QS_CAL_MAX_TYPES];
    int n_types;
    double weight, measured_ms, replayed_ms;
} qs_sim_assignment;

/* The calibration of a prediction: applied, or why not (reason: a static string). */
typedef struct qs_sim_calibration {
    bool applied;
    const char *reason;
    double replayed_ms, residual_ms;
    qs_sim_assignment *assignments;      /* owned */
    int n_assignments;
} qs_sim_calibration;

/* A prediction (qs_sim_replay, qs_simulate); its document is qs_sim_result_json's. */
typedef struct qs_sim_result {
    double iteration_ms;      /* the synchronized iteration: the latest finish, grown by the median of the
                                 step jitter's maximum over workers (and the calibration's residual) */
    double iteration_mean_ms; /* grown by that maximum's mean instead */
    double jitter_ms;
    int slowest;              /* the worker finishing last (on a tie, the one whose backward ended last) */
    const char *comm_model;   /* "none", "serial" or "concurrent" */
    const char *comm_source;  /* "none", "measured sync" or "size curve" */
    int buckets;
    double allreduce_ms;      /* the communication's total */
    qs_sim_worker_result *workers; /* owned */
    int n_workers;
    bool calibrated;          /* qs_simulate: calibration holds the outcome */
    qs_sim_calibration calibration;
} qs_sim_result;

void qs_sim_result_free(qs_sim_result *r);
/* The prediction as a JSON document (format QS_SIM_FORMAT): "iteration_ms", "iteration_mean_ms",
 * "jitter_ms", "slowest", "comm" {"model", "source", "buckets", "allreduce_ms"}, "workers" (per
 * worker the fields of qs_sim_worker_result, "type" only when it has one) and, when calibrated,
 * "calibration" (qs_sim_calibration_json). NULL when out of memory. */
cJSON *qs_sim_result_json(const qs_sim_result *r);
/* {"applied": false, "reason"} or {"applied": true, "replayed_ms", "residual_ms", "assignments":
 * [{"precisions": {type: precision}, "weight", "measured_ms", "replayed_ms"}, ...]}. */
cJSON *qs_sim_calibration_json(const qs_sim_calibration *c);

/* The emulated slowdown the replayer applies to cluster worker cw (rank r; NULL: a worker without
 * emulation) replayed from profile p, into *slowdown (1: none) and *whole_step: none when p was
 * taken under the worker's emulation (it holds the slowdown as it really acts); else the
 * worker's own, over the whole step when a CPU quota emulates it (method "cgroup", or "auto"
 * where quotas are available), over the ops otherwise. QS_ERR_MISMATCH when p was taken under
 * another slowdown than the worker's. */
qs_status qs_sim_worker_emulation(const qs_profile *p, const qs_cluster_worker *cw, int r, double *slowdown,
                                  bool *whole_step);

/* Per node of w->m (out: [w->m->n_nodes]; node 0, the input, and fused aliases get 0), the cost
 * the replay charges it, from the same rules as qs_simulate: the sum over nodes of ms, plus
 * data, the base run's untimed time, communication and optimizer, is the worker's iteration; of
 * mem plus the shared memory and the largest workspace, its memory. For the planner
 * (src/plan/plan_build.h). Errors as qs_simulate's for this worker's profile. */
qs_status qs_sim_node_charges(const qs_sim_worker *w, qs_sim_charge *out);

/* Replay one iteration of the n workers into *out (free with qs_sim_result_free; zeroed on
 * failure), without the calibration: the planner's scale and the calibration's own replays.
 * When trace is not NULL, Chrome-trace events (one process per worker, a compute and a
 * communication thread) are appended to it. Errors: a profile of another model, options or
 * batch, a precision without a run in the profile, several workers without an all-reduce
 * measurement for that many ranks. */
qs_status qs_sim_replay(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, qs_sim_result *out);

/* The replay (qs_sim_replay), calibrated where the profiles allow it (src/predict/calibrate.h;
 * out->calibrated). */
qs_status qs_simulate(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, qs_sim_result *out);

#endif
