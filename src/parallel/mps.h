/* src/parallel/mps.h — defines: a cuda worker's NVIDIA MPS limits (docs/CLUSTERS.md), set for
 * the calling process before its CUDA context exists. Plain C, no CUDA calls: it builds and
 * runs in the CPU-only build.
 *
 * Under MPS (Multi-Process Service) the ranks that share one GPU are clients of one MPS
 * server. A client reads two environment variables once, when its CUDA context is created,
 * and keeps the limits for the context's life (setting them later has no effect):
 *   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE  "30": the share of the GPU's SMs its kernels may use
 *                                      (a cluster worker's emulation.sm_percent);
 *   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT   "0=2048M": the device memory it may allocate on the
 *                                      device of that ordinal (the worker's memory_mb on its
 *                                      cuda_device).
 * Without a running MPS control daemon a CUDA program runs without MPS and both variables are
 * ignored, silently: hence qs_mps_apply refuses then instead. The daemon is found through its
 * pipe directory, $CUDA_MPS_PIPE_DIRECTORY or else /tmp/nvidia-mps (the client uses the
 * same), which holds its `control` socket (a FIFO in old releases). scripts/mps.sh starts and
 * stops it. */
#ifndef QSYNC_PARALLEL_MPS_H
#define QSYNC_PARALLEL_MPS_H

#include <stdbool.h>
#include <stddef.h>

#include "io/cluster.h"
#include "qsync/status.h"

#define QS_MPS_DEFAULT_PIPE_DIRECTORY "/tmp/nvidia-mps"

/* Whether an MPS control daemon is reachable: the pipe directory ($CUDA_MPS_PIPE_DIRECTORY
 * when set and non-empty, else QS_MPS_DEFAULT_PIPE_DIRECTORY) holds a `control` entry, and the
 * daemon's pid file there (nvidia-cuda-mps-control.pid) names a live process — or, without a
 * pid file, `control` is a FIFO or a UNIX socket that accepts a connection (stream or
 * sequenced-packet; the daemon leaves its socket behind when it quits). A pid file naming no
 * live process means no daemon. Writes the directory used into pipe_dir (cap bytes, truncated;
 * nothing when pipe_dir is NULL or cap 0). Never fails; sets no error. */
bool qs_mps_daemon_running(char *pipe_dir, size_t cap);

/* Set this process's MPS limits and SM partition for worker w of rank `rank` (w NULL: no
 * cluster, no-op).
 * Call it BEFORE the process creates its CUDA context (see above). For a cuda worker with
 * sm_percent, sm_count or memory_mb > 0: QS_ERR_UNSUPPORTED, naming the rank, the limit asked and the
 * pipe directory, when no daemon is reachable (qs_mps_daemon_running); else sets (overwriting)
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to sm_percent when it is > 0, QS_CUDA_SM_PARTITION to
 * "<sm_offset>:<sm_count>" when sm_count > 0 (the backend's green-context partition: ranks side
 * by side on one GPU need MPS to run concurrently at all, hence the daemon is required too) and
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT to "<cuda_device>=<memory_mb>M" when memory_mb > 0
 * (QS_ERR_OOM if the environment cannot grow). A cpu worker, or a cuda worker without any
 * limit: QS_OK, nothing set. Not thread-safe (setenv): call it before other threads
 * read the environment. */
qs_status qs_mps_apply(const qs_cluster_worker *w, int rank);

#endif
