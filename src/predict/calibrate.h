/* src/predict/calibrate.h — defines: the replay calibrated against synchronized steps measured
 * in place (qs_simulate, declared in simulate.h).
 *
 * Where ranks share one GPU (the "concurrent" communication model), the replay's per-op costs
 * come from lockstep runs in which every rank ran one precision, and its all-reduce from
 * transfers timed alone; in training a rank's step also depends on what the others run beside
 * it, and the all-reduce contends with their compute (measured on the H100 pair:
 * docs/BENCHMARKS.md). The profiles measure the whole synchronized step in place for
 * assignments a of a precision to each device type: "grad_sync" of every run (all types at that
 * precision) and of every "mixed_runs" entry (src/predict/profile_mixed.h). For each, the
 * residual r_a = measured − replay of the workers as those runs measured them
 * (qs_sim_worker.as_run: no data loading, as the runs had none). A plan's prediction is its replay
 * plus Σ_a w_a·r_a, w_a = Π_t s_t(a(t)), where s_t(p) is the share of device type t's
 * Conv2d/Linear/MatMul time, as replayed, that the plan runs at p: exact at the measured
 * assignments, linear in each type's shares between them.
 *
 * Applied only with several workers, the concurrent model, every worker replayed from the
 * profile of its own device type (the profile's "device"."type"), and every assignment of
 * positive weight measured between this many ranks with these buckets and overlap; otherwise
 * the replay stands and the document's "calibration" says why ("applied": false, "reason"). */
#ifndef QSYNC_PREDICT_CALIBRATE_H
#define QSYNC_PREDICT_CALIBRATE_H

#include "predict/simulate.h" /* qs_simulate, QS_CAL_MAX_TYPES */

#endif
