/* src/io/cluster.h — defines: cluster files, the description of the workers of a
 * data-parallel job (one entry per rank), read and validated before training starts.
 *
 * Format (JSON, docs/CLUSTERS.md):
 *   {"format": "qsync-cluster", "version": 1,
 *    "workers": [
 *      {"device": "cpu", "type": "fast", "threads": 1},
 *      {"device": "cpu", "type": "slow", "threads": 1, "memory_mb": 2048,
 *       "precision": "int8" | "plan": "plans/slow.json",
 *       "emulation": {"slowdown": 1.6, "method": "auto", "calibration_steps": 10}},
 *      {"device": "cuda:0", "type": "h200-sm30", "memory_mb": 40000,
 *       "emulation": {"sm_percent": 30, "method": "mps"}},
 *      {"device": "cuda:0", "type": "h200-48sm", "emulation": {"sm_count": 48}}]}
 * Rank i takes workers[i]; the job's world size must equal the number of workers. "device" is
 * "cpu", "cuda" (= "cuda:0") or "cuda:N" (N ≥ 0, the CUDA device ordinal the rank opens).
 * "type" is the device-type label plans and reports use; "precision" (uniform) or "plan" (a
 * plan file, relative to the cluster file's directory) is that worker's own precision setup;
 * "threads" its compute threads (host threads for a cuda worker); "memory_mb" a memory cap
 * (checked against the model's measured allocation; on a cuda worker also the MPS pinned
 * device memory limit, parallel/mps.h).
 * cpu workers: "emulation.slowdown" ≥ 1 makes the worker that much slower than it is (an
 * emulated weaker device, reported as emulation), by a cgroup CPU quota or a duty cycle
 * ("emulation.method"; "auto": the quota where the cgroup file system is writable).
 * cuda workers: "emulation.sm_percent" (1..100) is the share of the GPU's SMs the rank's
 * context may use under NVIDIA MPS ("emulation.method" "mps"); or "emulation.sm_count" gives the
 * rank a green-context partition of that many SMs ("emulation.method" "green-context";
 * src/cuda/cuda_green.h), the workers of one GPU taking consecutive SM ranges in worker order
 * (sm_offset), so that ranks side by side under MPS run on disjoint SMs; several such workers
 * share one GPU (hybrid emulation). Their slowdown is measured,
 * never asked: "emulation.slowdown" and "calibration_steps" are errors on a cuda worker, as
 * "sm_percent" is on a cpu worker. */
#ifndef QSYNC_IO_CLUSTER_H
#define QSYNC_IO_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "qsync/status.h"

#define QS_CLUSTER_MAX_WORKERS 256
#define QS_CLUSTER_DEFAULT_CALIBRATION_STEPS 10

typedef struct qs_cluster_worker {
    char device[16];     /* as written: "cpu", "cuda" or "cuda:N" */
    bool cuda;           /* device is "cuda" or "cuda:N" */
    int cuda_device;     /* N of "cuda:N" ("cuda": 0); 0 for a cpu worker */
    int sm_percent;      /* MPS active thread percentage (1..100) of a cuda worker; 0 = no MPS SM share */
    int sm_count;        /* SMs of a cuda worker's green-context partition; 0 = none */
    int sm_offset;       /* its first SM: the sm_counts of the earlier workers on the same GPU */
    char type[48];       /* device-type label */
    int threads;         /* 0 = default */
    int64_t memory_mb;   /* 0 = no cap; on a cuda worker also its MPS pinned device memory limit */
    char precision[8];   /* "" or a precision name */
    char plan[4096];     /* "" or a plan file path (resolved against the cluster file's directory) */
    double slowdown;     /* 1 = none (always 1 on a cuda worker) */
    char emulation_method[16]; /* cpu: "auto" (cgroup quota where writable, else duty cycle), "cgroup",
                                * "duty-cycle"; cuda: "mps" or "green-context" (with sm_count) */
    int64_t calibration_steps; /* unslowed steps measured first (train/emulator.h); cpu default 10, 0 = none;
                                * always 0 on a cuda worker */
} qs_cluster_worker;

typedef struct qs_cluster {
    char origin[4096];
    qs_cluster_worker *workers;
    int n_workers;
} qs_cluster;

/* Read and validate a cluster file (QS_ERR_FORMAT naming the file and the JSON path of the
 * fault): known keys, each given once; "threads", "memory_mb", "calibration_steps", "sm_percent"
 * and "sm_count" whole numbers; "comment" a string. */
qs_status qs_cluster_read(const char *path, qs_cluster *out);
void qs_cluster_free(qs_cluster *c);
/* Whether a job can run the cluster's workers (the file may describe more): all on CPUs, all on
 * one GPU (they sum through CUDA IPC) or each on its own GPU (NCCL); QS_ERR_UNSUPPORTED naming
 * two workers otherwise (CPU and GPU mixed; several workers on one of several GPUs). Every rank checks the same file, so all
 * refuse alike. */
qs_status qs_cluster_check_devices(const qs_cluster *c);
/* The entry of `rank` in a job of `world` ranks: QS_ERR_MISMATCH when the file describes
 * another number of workers. */
qs_status qs_cluster_worker_for(const qs_cluster *c, int rank, int world, const qs_cluster_worker **out);

#endif
