/* src/cuda/cuda_open.h — defines: how the CUDA backend (src/cuda) is created and what it runs
 * on. Plain C without CUDA headers: a build without CUDA defines both functions as refusals
 * (src/backends/backend_cuda_stub.c). Callers open backends through src/backends/backends.h. */
#ifndef QSYNC_CUDA_CUDA_OPEN_H
#define QSYNC_CUDA_CUDA_OPEN_H

#include <stddef.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Create the CUDA backend on device `device` into *out. Fails with QS_ERR_UNSUPPORTED in a
 * build without CUDA, QS_ERR_BACKEND when there is no such device or the driver refuses. */
qs_status qs_backend_cuda_create(int device, qs_backend **out);

/* What a CUDA backend runs on: the GPU's name, its SMs as this process sees them (under an MPS
 * SM share, possibly fewer) and its memory. QS_ERR_INVALID_ARG for another backend (and in a
 * build without CUDA). */
typedef struct qs_gpu_facts {
    char name[256];
    int sms;
    size_t memory_bytes;
    int cc_major, cc_minor;
} qs_gpu_facts;
qs_status qs_backend_cuda_facts(qs_backend *be, qs_gpu_facts *out);

#ifdef __cplusplus
}
#endif
#endif
