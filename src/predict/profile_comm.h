/* src/predict/profile_comm.h — defines: the measured cost of the gradient all-reduce between
 * the actual ranks of a job, for the predictor's communication model. */
#ifndef QSYNC_PREDICT_PROFILE_COMM_H
#define QSYNC_PREDICT_PROFILE_COMM_H

#include <cjson/cJSON.h>
#include "qsync/status.h"
#include "dist/comm.h"

/* Collective over every rank of comm (world ≥ 2): time one bucket's all-reduce as training
 * runs it (in-place FP32 sum, started non-blocking, waited for by polling) for bucket sizes
 * from 64 KiB to 25 MiB, `reps` times each after one warm-up, the ranks aligned before every
 * repetition. A size's time is the slowest rank's median. Fitted as alpha + beta·bytes; every
 * rank gets the same JSON object {"ranks", "reps", "alpha_ms", "beta_ms_per_byte",
 * "points": [[bytes, ms], ...]} in *out (caller deletes). */
qs_status qs_profile_allreduce(qs_comm *comm, int reps, cJSON **out);

#endif
