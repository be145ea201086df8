/* src/run/run_job.h — defines: `qsync run`, the QSync pipeline end to end on a cluster of
 * workers (docs/RUN.md). Collective: every rank of the job calls qs_run at once.
 *
 *  1. profile: every rank profiles the model at its local batch, under its worker's threads and
 *     emulation, in lockstep (src/predict/profile_job.h); the first rank of each device type
 *     writes <out>/profile-<type>.json and broadcasts it;
 *  2. indicate: rank 0 measures ω (src/plan/indicate_job.h) → <out>/indicator.json;
 *  3. plan: rank 0 chooses the precisions of every slower device type (src/plan/plan_build.h)
 *     → <out>/plan.json, broadcast to every rank (with a given plan, 2 is skipped and 3 only
 *     checks, copies and broadcasts it);
 *  4. train: the same training job once per compared arm and seed (src/train/trainer.h), each
 *     rank with its worker's precisions for that arm, metrics in <out>/<label>-seed<S>.jsonl;
 *  5. report (rank 0): <out>/report.json (src/run/run_report.h) and, when asked, a PNG plot.
 *
 * Two precisions frame the comparison: the base (what an unplanned run trains at; the caller's
 * choice — fp32 by default, bf16 is the one to give on a GPU; the profiles' highest, so the
 * plan's default) and the low precision (int8 by default, fp8 to give on a GPU). The arms, labelled by qs_run_arm_label: "qsync" (the plan), the base arm
 * (every worker all at the base, synchronous; labelled by the base's name, "fp32"), the low arm
 * (the low precision uniformly on every worker slower than the fastest type, the base on the
 * fastest; labelled "int8"), "dynamic" (all at the base, local batches by measured speed),
 * "ideal" (all at the base without the emulated slowdowns: every worker as fast as it is, the
 * reference of the gap closure). */
#ifndef QSYNC_RUN_RUN_JOB_H
#define QSYNC_RUN_RUN_JOB_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "io/cluster.h"
#include "plan/indicator.h"
#include "qsync/log.h"
#include "qsync/status.h"
#include "train/trainer.h"

/* The compared arms, in training order (labels: qs_run_arm_label). */
typedef enum qs_run_arm {
    QS_ARM_QSYNC = 0, QS_ARM_BASE, QS_ARM_LOW, QS_ARM_DYNAMIC, QS_ARM_IDEAL, QS_ARM_COUNT
} qs_run_arm;

typedef struct qs_run_config {
    /* The training job every arm runs: model, width, data, global batch, steps or epochs, the
     * optimizer and schedule, subsets, comm. Its seed is the first seed; its precision, plan,
     * threads and emulation fields are ignored (the cluster and the arm set them); its
     * allow_emulated also holds for the profiles (precisions the device only emulates). */
    qs_train_config train;
    const qs_cluster *cluster;   /* one worker per rank; ≥ 2 workers of ≥ 2 device types */
    const char *out_dir;         /* created if missing */
    bool arms[QS_ARM_COUNT];     /* the compared arms (qsync always runs) */
    int seeds;                   /* ≥ 1: seeds train.seed … train.seed + seeds − 1, paired across arms */
    qs_precision base_precision; /* what the base, dynamic and ideal arms and the fastest type train at,
                                  * profiled first (default fp32, zeroed config) */
    qs_precision low_precision;  /* the low arm's uniform precision on slower workers; below the base */
    bool low_emulated_ok;        /* the low arm may run low_precision where the device only emulates it
                                  * (qsync run's own default, int8, on a CPU without VNNI / AMX: the arm
                                  * is then measured as emulated); train.allow_emulated covers every arm */
    qs_precision menu[QS_PREC_COUNT]; /* n_menu > 0: the precisions profiled, hence the plan's menu: the
                                  * base first, then lower ones (the low precision among them) */
    int n_menu;
    int profile_warmup, profile_reps;
    qs_indicator_method method;  /* the indicator */
    int64_t indicator_batches;
    double gamma;
    double target_ms;            /* > 0: the plan's T; else the fastest type's predicted iteration */
    double ideal_ms;             /* > 0: the ideal synchronized iteration, measured outside this job (a
                                  * cluster under MPS shares, whose processes keep their shares, cannot
                                  * run the ideal arm); the gap closure uses it. Excludes the ideal arm. */
    const char *plan_path;       /* non-NULL: compare this plan (a section per device type) instead of
                                  * indicating and planning */
    bool exact;                  /* also solve exactly (GLPK) and report the greedy's gap */
    const char *plot_path;       /* non-NULL: a PNG of loss against training time per arm (gnuplot) */
    const qs_logger *log;        /* the pipeline's progress (rank 0 speaks) */
    qs_logger *train_log;        /* each training job's own log */
} qs_run_config;

/* The arm's label in file names, the report and messages: "qsync", the base precision's name
 * (c->base_precision: "fp32", "bf16", ...), the low precision's name (c->low_precision: "int8",
 * "fp8", ...), "dynamic", "ideal"; "?" for no arm. */
const char *qs_run_arm_label(const qs_run_config *c, qs_run_arm a);
/* A comma-separated list of arms into on[] (all false first): their labels under c's base and
 * low precisions, or "base" and "low" for those two arms. False with a message in err. */
bool qs_run_arms_parse(const qs_run_config *c, const char *list, bool on[QS_ARM_COUNT], char *err, size_t cap);

/* The checks every rank makes alike before any work (so that a refusal needs no abort): the
 * cluster has ≥ 2 workers of ≥ 2 device types and sets no precisions, `world` ranks match it,
 * the global batch divides evenly, seeds ≥ 1, the low precision is below the base. */
qs_status qs_run_check(const qs_run_config *c, int world);

struct qs_run_report;

/* Run the pipeline. On QS_OK rank 0's *report is the finished report (run_report.h; its document
 * is also written to <out>/report.json; the caller frees it with qs_run_report_free and free,
 * while c lives), NULL on the other ranks. A failure on one rank fails the job on every rank
 * (callers abort the job when it is not a collective failure). */
qs_status qs_run(const qs_run_config *c, struct qs_run_report **report);

#endif
