/* src/dist/cluster.h — defines: cluster files, the description of the workers of a
 * data-parallel job (one entry per rank), read and validated before training starts.
 *
 * Format (JSON, docs/CLUSTERS.md):
 *   {"format": "qsync-cluster", "version": 1,
 *    "workers": [
 *      {"device": "cpu", "type": "fast", "threads": 1},
 *      {"device": "cpu", "type": "slow", "threads": 1, "memory_mb": 2048,
 *       "precision": "int8" | "plan": "plans/slow.json",
 *       "emulation": {"slowdown": 1.6, "method": "auto", "calibration_steps": 10}}]}
 * Rank i takes workers[i]; the job's world size must equal the number of workers. "type" is
 * the device-type label plans and reports use; "precision" (uniform) or "plan" (a plan file,
 * relative to the cluster file's directory) is that worker's own precision setup; "threads"
 * its compute threads; "memory_mb" a memory cap (checked against the model's measured
 * allocation); "emulation.slowdown" ≥ 1 makes the worker that much slower than it is (an
 * emulated weaker device, reported as emulation), by a cgroup CPU quota or a duty cycle
 * ("emulation.method"; "auto": the quota where the cgroup file system is writable). */
#ifndef QSYNC_DIST_CLUSTER_H
#define QSYNC_DIST_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "qsync/status.h"

#define QS_CLUSTER_MAX_WORKERS 256
#define QS_CLUSTER_DEFAULT_CALIBRATION_STEPS 10

typedef struct qs_cluster_worker {
    char device[16];     /* "cpu" (this build) */
    char type[48];       /* device-type label */
    int threads;         /* 0 = default */
    int64_t memory_mb;   /* 0 = no cap */
    char precision[8];   /* "" or a precision name */
    char plan[4096];     /* "" or a plan file path (resolved against the cluster file's directory) */
    double slowdown;     /* 1 = none */
    char emulation_method[16]; /* "auto" (cgroup quota where writable, else duty cycle), "cgroup", "duty-cycle" */
    int64_t calibration_steps; /* unslowed steps measured first (train/emulator.h); default 10, 0 = none */
} qs_cluster_worker;

typedef struct qs_cluster {
    char origin[4096];
    qs_cluster_worker *workers;
    int n_workers;
} qs_cluster;

/* Read and validate a cluster file (QS_ERR_FORMAT naming the file and the JSON path of the
 * fault). */
qs_status qs_cluster_read(const char *path, qs_cluster *out);
void qs_cluster_free(qs_cluster *c);
/* The entry of `rank` in a job of `world` ranks: QS_ERR_MISMATCH when the file describes
 * another number of workers. */
qs_status qs_cluster_worker_for(const qs_cluster *c, int rank, int world, const qs_cluster_worker **out);

#endif
