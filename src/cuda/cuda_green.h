/* src/cuda/cuda_green.h — defines: an SM partition of the GPU for this process, through a
 * CUDA green context (an emulated smaller GPU; docs/CLUSTERS.md).
 *
 * QS_CUDA_SM_PARTITION="<offset>:<count>" (set by a cluster's cuda worker with
 * emulation.sm_count, parallel/mps.h, or by hand for one process) makes the backend run all its
 * work on `count` SMs of the device: the device's SMs are split into groups of the driver's
 * minimum partition size (8 SMs on Hopper), and the partition takes the groups that cover SMs
 * [offset, offset + count) of that split. Ranks that share a GPU take disjoint ranges, so under
 * MPS (which lets their kernels run side by side) each runs on its own SMs. The driver API is
 * reached through the runtime (cudaGetDriverEntryPointByVersion): nothing links libcuda, and
 * the CPU-only machines that run the test binaries need no driver. */
#ifndef QSYNC_CUDA_GREEN_H
#define QSYNC_CUDA_GREEN_H

#include "core/backend.h" /* QS_CUDA_SM_PARTITION_ENV */
#include "qsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A green context of this process. */
typedef struct qs_cuda_green {
    void *green;    /* CUgreenCtx, NULL when no partition */
    void *ctx;      /* CUcontext converted from it (what becomes current) */
    int sm_offset;  /* first SM of the range asked */
    int sm_count;   /* SMs of the partition */
    int sm_total;   /* SMs of the device */
    void *set_current; /* the driver's cuCtxSetCurrent */
    void *destroy;     /* the driver's cuGreenCtxDestroy */
} qs_cuda_green;

/* Parse QS_CUDA_SM_PARTITION's value "<offset>:<count>" (whole numbers, offset ≥ 0, count ≥ 1).
 * QS_ERR_INVALID_ARG naming the variable and the text when malformed. */
qs_status qs_cuda_green_parse(const char *text, int *offset, int *count);

/* Create the partition [offset, offset + count) of CUDA device `device` and make it current for
 * the calling thread (call it before the backend creates its streams and handles: they belong
 * to the context current when they are made). QS_ERR_INVALID_ARG when offset or count is not a
 * multiple of the device's partition granularity or the range passes the SMs that the split
 * covers (the message gives both); QS_ERR_UNSUPPORTED when the driver lacks green contexts. */
qs_status qs_cuda_green_enter(int device, int offset, int count, qs_cuda_green *out);

/* Make g's context current for the calling thread (no-op without a partition). */
qs_status qs_cuda_green_make_current(const qs_cuda_green *g);

/* Destroy the green context (after every stream made in it is destroyed); no-op without one. */
void qs_cuda_green_destroy(qs_cuda_green *g);

#ifdef __cplusplus
}
#endif
#endif
