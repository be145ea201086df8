/* src/predict/profile_mixed.h — defines: the mixed-precision lockstep runs of a profile taken
 * under mpirun by GPU workers of several device types. Each run gives every device type one of
 * the profiled precisions, not all the same one (the uniform assignments are the profile's
 * "runs"); every rank runs the model at its type's precision, in lockstep, and measures the
 * synchronized step in place ("grad_sync"). Ranks sharing one GPU slow each other by what the
 * others run (measured: a BF16 rank's step beside an FP8 one is longer than beside a BF16 one,
 * docs/BENCHMARKS.md), so the replayer calibrates against these (src/predict/calibrate.h). */
#ifndef QSYNC_PREDICT_PROFILE_MIXED_H
#define QSYNC_PREDICT_PROFILE_MIXED_H

#include <cjson/cJSON.h>

#include "io/cluster.h"
#include "predict/profile.h"
#include "qsync/status.h"

/* At most this many mixed runs are taken; beyond it (many types or precisions) none, with a
 * warning: the calibration then applies to uniform plans only. */
#define QS_PROFILE_MAX_MIXED 16

/* Append to doc "mixed_runs": one entry per mixed assignment of o->precs to the device types of
 * ranks 0..world-1 (cl->workers[r] is rank r), in the order of the assignment's index (types in
 * order of first rank, precisions in o->precs order, the first type varying slowest): "precisions"
 * (type → precision), "precision" (this rank's), "step_ms", "optimizer_ms", "grad_average_ms" and
 * "grad_sync" of this rank's run (docs/PROFILE.md). Nothing with fewer than two device types.
 * Collective: every rank calls it with the same cluster and precisions. */
qs_status qs_profile_mixed_runs(const qs_profile_options *o, const qs_cluster *cl, int rank, int world, cJSON *doc);

#endif
