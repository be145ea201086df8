/* src/predict/simulate_internal.h — defines: what the replayer's files share (simulate.c: one
 * worker's costs, memory and timeline; simulate_cluster.c: the cluster, its communication and
 * jitter). Not for use outside src/predict/simulate*.c and calibrate.c. */
#ifndef QSYNC_PREDICT_SIMULATE_INTERNAL_H
#define QSYNC_PREDICT_SIMULATE_INTERNAL_H

#include "predict/simulate.h"

/* One worker's replayed iteration. */
typedef struct qs_sim_timeline {
    double data, untimed, forward, backward, optimizer, grad_average; /* durations, ms */
    double bwd_end;      /* from the iteration's start */
    double *bucket_ready; /* per bucket, from the iteration's start (the caller's array) */
    double memory;       /* predicted peak, bytes */
} qs_sim_timeline;

/* The profile must be of this worker's model, with its options, at its batch (QS_ERR_MISMATCH;
 * rank names the worker). */
qs_status qs_sim_check_profile(const qs_sim_worker *w, int rank);

/* Worker w's timeline (rank: its trace process) with the model's gradient buckets (nb of them;
 * entry_bucket: the bucket of each parameter-table entry); its events appended to trace (may be
 * NULL). */
qs_status qs_sim_worker_timeline(const qs_sim_worker *w, int rank, int nb, const int *entry_bucket, cJSON *trace,
                                 qs_sim_timeline *tl);

/* A Chrome-trace complete event (nothing when trace is NULL or ms <= 0). */
void qs_sim_event(cJSON *trace, const char *name, const char *cat, int pid, int tid, double t0_ms, double ms);

#endif
