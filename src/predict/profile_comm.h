/* src/predict/profile_comm.h — defines: the measured cost of the gradient all-reduce between
 * the actual ranks of a job, for the predictor's communication model. */
#ifndef QSYNC_PREDICT_PROFILE_COMM_H
#define QSYNC_PREDICT_PROFILE_COMM_H

#include <cjson/cJSON.h>
#include "qsync/status.h"
#include "core/backend.h"
#include "parallel/comm.h"
#include "graph/graph.h"

/* Collective over every rank of comm (world ≥ 2): time one bucket's all-reduce as training
 * runs it (in-place FP32 sum of a buffer written just before, started non-blocking, waited
 * for) for bucket sizes from 64 KiB to 25 MiB and on, doubling, until max_bytes (the model's
 * gradient bytes, its largest possible bucket) is covered; `reps` times each after one
 * warm-up, the ranks aligned before every repetition. A size's time is the slowest rank's
 * median. Fitted as alpha + beta·bytes; every rank gets the same JSON object {"ranks", "reps",
 * "alpha_ms", "beta_ms_per_byte", "points": [[bytes, ms], ...]} in *out (caller deletes).
 * be: a CUDA backend — device buffers summed through CUDA IPC (every rank on that GPU), a
 * reduction timed until its result is on the device — or NULL / the CPU backend (host, MPI). */
qs_status qs_profile_allreduce(qs_comm *comm, qs_backend *be, int reps, double max_bytes, cJSON **out);

/* Collective: the time m's gradient sync costs a rank, measured in place as training runs it
 * (src/parallel/grad_sync.c: buckets of bucket_bytes, overlapped with backward or all started
 * after it, then the average): runs `step` (a forward and backward of m, then its optimizer)
 * reps + 1 times per mode (the first a warm-up) with the runtime's hooks installed and timed;
 * a step's figure is the least time any rank spent inside them (the rank that arrived last
 * waited for no one), the result the median over the steps. `step` also returns its wall time
 * (ending with the device idle): per mode the median over the steps of the slowest rank's, the
 * whole synchronized iteration of these ranks. m's hooks are left as found. *out (caller
 * deletes): {"ranks", "bucket_bytes", "buckets", "overlap_ms", "no_overlap_ms",
 * "overlap_step_ms", "no_overlap_step_ms"}. */
qs_status qs_profile_model_sync(qs_comm *comm, qs_model *m, size_t bucket_bytes, int reps,
                                qs_status (*step)(void *ctx, double *ms), void *step_ctx, cJSON **out);

#endif
