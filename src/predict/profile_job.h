/* src/predict/profile_job.h — defines: one rank's whole `qsync profile` job, shared by
 * `qsync profile` and `qsync run`: the dataset's first test batch (of the training split when
 * the test split is smaller than a batch) and its loader time, the
 * worker's emulated slowdown applied for the duration (cluster worker), the model profiled at
 * every precision asked (src/predict/profile.h), on the GPU with several device types also at
 * the mixed assignments of them (src/predict/profile_mixed.h), and under mpirun the all-reduce between the
 * ranks timed at sizes up to the model's gradient (src/predict/profile_comm.h).
 * Collective under mpirun: every rank calls it at once (ranks profile in lockstep, as they train). */
#ifndef QSYNC_PREDICT_PROFILE_JOB_H
#define QSYNC_PREDICT_PROFILE_JOB_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "io/cluster.h"
#include "parallel/comm.h"
#include "predict/profile.h"
#include "qsync/log.h"
#include "qsync/status.h"
#include "backends/backends.h"

typedef struct qs_profile_job {
    const char *model;          /* built-in model name */
    int64_t width;              /* 0 = the architecture's default */
    int64_t batch;              /* the worker's local batch */
    const char *data, *data_dir; /* the dataset whose shape and samples are used (data_dir may be NULL) */
    bool cuda;                  /* profile on the GPU cuda:cuda_device (a cuda worker's own device wins) */
    int cuda_device;
    const qs_precision *precs;  /* precisions to profile; n_precs 0 → every one the device runs natively */
    int n_precs;
    bool allow_emulated;
    int fp8_amax_history;       /* FP8 scaling of the runs (qs_model.fp8_amax_history; 0: current) */
    qs_optim_kind optimizer;
    int threads;                /* 0 = the worker's, else OpenMP's default */
    int warmup, reps;           /* ≥ 1, ≥ 3 */
    size_t bucket_bytes;        /* gradient buckets, as training forms them */
    const qs_cluster_worker *worker; /* the worker profiled for (its threads, emulation, type); may be NULL */
    const qs_cluster *cluster;  /* rank r is cluster->workers[r]: on the GPU with several device types,
                                   the mixed-precision runs too (profile_mixed.h); NULL: none */
    qs_comm *comm;              /* the job (NULL or a group of one: no all-reduce) */
    const qs_logger *log;
} qs_profile_job;

/* Run the job; on QS_OK *doc is this rank's profile (with "allreduce" under mpirun; caller
 * deletes). Under mpirun a failure on any rank fails every rank (none is left waiting). */
qs_status qs_profile_job_run(const qs_profile_job *j, cJSON **doc);

/* The precisions the backend (qs_backend_open's arguments) runs natively, into out
 * (QS_PREC_COUNT entries), highest first; their count (0 when the backend cannot be made). */
int qs_profile_native_precisions(qs_precision *out, bool cuda, int device, int threads);

#endif
