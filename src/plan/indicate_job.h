/* src/plan/indicate_job.h — defines: the whole `qsync indicate` job, shared by `qsync indicate`
 * and `qsync run`: the dataset, the model (freshly initialised with the seed, or a checkpoint's
 * weights), a shuffled loader over the training split, the FP32 statistics over `batches`
 * batches (src/plan/indicator.h) and the versioned indicator document. */
#ifndef QSYNC_PLAN_INDICATE_JOB_H
#define QSYNC_PLAN_INDICATE_JOB_H

#include <stdint.h>
#include <cjson/cJSON.h>

#include "plan/indicator.h"
#include "plan/model_data.h"
#include "qsync/status.h"

typedef struct qs_indicate_job {
    qs_model_data_request in;    /* model, data, batch, seed, device (plan/model_data.h); the seed also
                                  * seeds gradient rounding and the random method; with cuda, forward and
                                  * backward run on the GPU (statistics on the host) */
    int64_t batches;             /* ≥ 1 */
    qs_indicator_method method;
    double gamma;                /* ≥ 0 */
} qs_indicate_job;

/* Run the job; on QS_OK *doc is the indicator document (caller deletes). Errors name the
 * mismatch (model or width against the checkpoint, input shape against the data, a batch
 * larger than the training split). */
qs_status qs_indicate_job_run(const qs_indicate_job *j, cJSON **doc);

#endif
