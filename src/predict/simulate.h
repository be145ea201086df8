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
 * whole step's, and under the serial model also the transfers it takes part in. Memory: every node's output, output gradient, saved tensors and the largest
 * workspace at its precision, plus parameters, gradients, optimizer state, buffers and labels —
 * the categories the backend's allocation is made of. */
#ifndef QSYNC_PREDICT_SIMULATE_H
#define QSYNC_PREDICT_SIMULATE_H

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "qsync/status.h"
#include "graph/graph.h"

#define QS_SIM_FORMAT "qsync-simulation"
#define QS_SIM_VERSION 1

typedef struct qs_sim_worker {
    const char *type;         /* device-type label (reports) */
    double slowdown;          /* emulated, ≥ 1 */
    bool slow_whole_step;     /* the slowdown covers the whole step (CPU quota), not only the ops */
    const cJSON *profile;     /* its device type's profile (borrowed) */
    const char *profile_path; /* for messages */
    const qs_model *m;        /* built with this worker's precisions and casts (setup not needed) */
    int64_t batch;            /* its local batch: the profile must have been taken at it */
    const cJSON *as_run;      /* NULL; else replay the worker as this run of its profile measured it
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
    double mem;         /* output + output gradient + saved tensors, bytes */
    double workspace;   /* its workspace, bytes (the replay adds the largest one) */
} qs_sim_charge;

/* Per node of w->m (out: [w->m->n_nodes]; node 0, the input, and fused aliases get 0), the cost
 * the replay charges it, from the same rules as qs_simulate: the sum over nodes of ms, plus
 * data, the base run's untimed time, communication and optimizer, is the worker's iteration; of
 * mem plus the shared memory and the largest workspace, its memory. For the planner
 * (src/plan/plan_build.h). Errors as qs_simulate's for this worker's profile. */
qs_status qs_sim_node_charges(const qs_sim_worker *w, qs_sim_charge *out);

/* Replay one iteration of the n workers. Returns the prediction as a JSON document (format
 * QS_SIM_FORMAT) in *out (caller deletes): "iteration_ms" (the synchronized iteration, the
 * latest worker's finish, grown by the median of the step jitter's maximum over workers),
 * "iteration_mean_ms" (grown by its mean instead), "jitter_ms", "slowest", "comm" {"model",
 * "source" ("measured sync" or "size curve"), "buckets", "allreduce_ms"}, and per
 * worker "rank", "type", "slowdown", "data_ms", "untimed_ms" (what the profile's runs spent
 * outside the per-op timers: input copies, bookkeeping), "forward_ms", "backward_ms", "comm_wait_ms"
 * (waiting for the gradients after its own backward), "grad_average_ms", "optimizer_ms", "iteration_ms" (its own
 * finish) and "memory_bytes" (predicted peak). When trace is not NULL, Chrome-trace events
 * (one process per worker, a compute and a communication thread) are appended to it.
 * Errors: a profile of another model, options or batch, a precision without a run in the
 * profile, several workers without an all-reduce measurement for that many ranks. */
/* The highest precision (in the order fp32, tf32, bf16, fp16, fp8, int8) a profile has a run
 * for, into *out: the profile's base (fp32 on a CPU profile, bf16 in a GPU profile of bf16 and
 * fp8; the planner's base). false when it has none. */
bool qs_profile_top_precision(const cJSON *profile, qs_precision *out);
/* Whether op `name` ran fused into another op in the profile's base run (its entry has
 * "fused_into": a ReLU fused into its producer, the nodes of a fused attention). */
bool qs_profile_op_fused(const cJSON *profile, const char *name);

/* The replay alone, as qs_simulate describes it, without the calibration (calibrate.h): the
 * planner's scale and the calibration's own replays. */
qs_status qs_sim_replay(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, cJSON **out);

/* The replay (qs_sim_replay), calibrated where the profiles allow it (src/predict/calibrate.h;
 * the document then has "calibration"). */
qs_status qs_simulate(const qs_sim_worker *w, int n, const qs_sim_options *o, cJSON *trace, cJSON **out);

#endif
