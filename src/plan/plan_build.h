/* src/plan/plan_build.h — defines: `qsync plan`'s core: from a cluster's workers, their
 * profiles (docs/PROFILE.md) and an indicator file, the per-device-type allocator problems
 * (src/plan/allocator.h), their solution, and the check of the chosen plan by the full replayer
 * (src/predict/simulate.h). docs/PLANS.md "Choosing a plan: qsync plan".
 *
 * The base precision is the highest precision (first in fp32, tf32, bf16, fp16, fp8, int8) the
 * profiles have runs for: fp32 on a CPU profiled with fp32,bf16,int8, bf16 on a GPU profiled with
 * bf16,fp8. Every profile of the request must start at the same one. The fastest type trains
 * every layer at the base.
 *
 * Per device type d slower than the fastest type:
 *  - layers: the model's Conv2d/Linear in order; options: the precisions d's profile has runs
 *    for, highest first (the base first);
 *  - t[l][k]: what the replayer charges layer l at precision k (qs_sim_node_charges on the
 *    model built with every layer at k): its forward, backward-data and backward-weights, the
 *    ops without a precision of their own that it feeds (costed from its run), the quantizing
 *    cast of its input, and its share of the untimed time; m[l][k] likewise for memory;
 *    a layer's minimum over k moves into fixed_ms, so every t ≥ 0;
 *  - edges: a cast shared by several consumers of one input is charged to the first consumer;
 *    each other consumer gets an edge from it whose cost is its own cast when the two
 *    precisions need different operand dtypes (none when they share the cast);
 *  - fixed_ms: the replayed synchronized iteration of a cluster where d's workers train all at
 *    the base and every other worker is a fastest-type worker, less Σ t[l][base]; fixed_mem: d's
 *    replayed memory less Σ m[l][base]; mem_cap: the least memory_mb of d's workers;
 *  - ω from the indicator (ω of the base may be absent: 0); T: the replayed synchronized
 *    iteration of the cluster made of fastest-type workers only (all at the base), or the target
 *    given.
 * The greedy always runs, the exact ILP unless greedy_only. The chosen plans are replayed on the
 * real cluster; while that replay misses T (beyond the tolerance) or a worker's memory cap,
 * the missing types' problems are tightened by the miss and solved again (max_rounds). */
#ifndef QSYNC_PLAN_PLAN_BUILD_H
#define QSYNC_PLAN_PLAN_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "io/cluster.h"
#include "io/indicator_file.h"
#include "io/profile_file.h"
#include "qsync/status.h"

/* One worker of the cluster, as the replayer sees it. */
typedef struct qs_planb_worker {
    const char *type;         /* device-type label (non-empty) */
    const qs_profile *profile; /* its type's profile (borrowed; its origin names it) */
    double slowdown;          /* emulated, ≥ 1 */
    bool slow_whole_step;     /* the slowdown covers the whole step */
    int64_t memory_cap;       /* bytes; 0 = none */
} qs_planb_worker;

typedef struct qs_planb_request {
    const qs_planb_worker *workers;
    int n_workers;            /* ≥ 2, of ≥ 2 device types */
    const char *arch;         /* the model, e.g. "cnn" */
    const char *config;       /* its resolved config string (qs_model.config) */
    int64_t batch;            /* the local batch of every worker */
    const qs_indicator_file *indicator; /* borrowed; its origin names it */
    double target_ms;         /* > 0: this T; else the fastest type's synchronized iteration */
    bool greedy_only;         /* skip the exact solver */
    double tolerance;         /* relative: a replay ≤ T·(1 + tolerance) meets T (default 0.005) */
    int max_rounds;           /* solve-and-replay rounds (default 4) */
    size_t bucket_bytes;      /* as --bucket-mb of training */
    bool overlap;             /* as training without --no-overlap */
    bool best_effort;         /* when no plan meets T: take each type's fastest plan of least Σω (the
                               * document says "target_met": false) instead of QS_ERR_INFEASIBLE */
} qs_planb_request;

/* Build the problems, solve them, verify by replay. On QS_OK *plan_doc is a plan document
 * (format qsync-plan, version 2, "default" the base, a section per device type of the cluster,
 * "predictions" with "base_precision") the caller writes and deletes. Errors: QS_ERR_INVALID_ARG
 * (fewer than 2 workers or device types, bad request), QS_ERR_MISMATCH (profiles of another
 * model, options or batch, profiles starting at different precisions, an indicator of another
 * model or config), QS_ERR_FORMAT / QS_ERR_NOT_FOUND (a layer or a precision's ω the indicator
 * lacks),
 * QS_ERR_INFEASIBLE (no plan meets T or a memory cap: the message gives the best achievable
 * synchronized time); *plan_doc is NULL then. */
qs_status qs_plan_build(const qs_planb_request *rq, cJSON **plan_doc);

/* The workers of cluster c as the allocator sees them (w: c->n_workers entries), worker r with
 * its type's profile profiles[r] (borrowed). A profile
 * taken under the worker's emulation holds its slowdown; a worker emulated but profiled without
 * it gets the slowdown applied by the replayer. Errors: QS_ERR_INVALID_ARG (the cluster sets a
 * worker's precisions: the plan chooses them), QS_ERR_MISMATCH (a profile taken under another
 * slowdown than its worker's). */
qs_status qs_planb_workers_from_cluster(const qs_cluster *c, const qs_profile *const *profiles, qs_planb_worker *w);

#endif
