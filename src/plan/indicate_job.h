/* src/plan/indicate_job.h — defines: the whole `qsync indicate` job, shared by `qsync indicate`
 * and `qsync run`: the dataset, the model (freshly initialised with the seed, or a checkpoint's
 * weights), a shuffled loader over the training split, the FP32 statistics over `batches`
 * batches (src/plan/indicator.h) and the versioned indicator document. */
#ifndef QSYNC_PLAN_INDICATE_JOB_H
#define QSYNC_PLAN_INDICATE_JOB_H

#include <stdint.h>
#include <cjson/cJSON.h>

#include "plan/indicator.h"
#include "qsync/status.h"

typedef struct qs_indicate_job {
    const char *model;           /* built-in model; may be NULL with a checkpoint (then its model) */
    int64_t width;               /* 0 = the architecture's default (or the checkpoint's) */
    const char *data, *data_dir; /* data_dir may be NULL */
    const char *checkpoint;      /* NULL: fresh weights */
    int64_t batch, batches;      /* ≥ 1 */
    qs_indicator_method method;
    double gamma;                /* ≥ 0 */
    uint64_t seed;               /* initialisation, batch order, gradient rounding, the random method */
    int threads;                 /* 0 = OpenMP's default */
    bool cuda;                   /* forward and backward on GPU cuda_device (statistics on the host) */
    int cuda_device;
} qs_indicate_job;

/* Run the job; on QS_OK *doc is the indicator document (caller deletes). Errors name the
 * mismatch (model or width against the checkpoint, input shape against the data, a batch
 * larger than the training split). */
qs_status qs_indicate_job_run(const qs_indicate_job *j, cJSON **doc);

#endif
