/* src/backends/backends.h — defines: opening a backend, the one header callers above the
 * backends include to create one (qs_backend_open, and the per-backend creators it
 * re-exports: qs_backend_cpu_create, qs_backend_cuda_create, qs_backend_cuda_facts). */
#ifndef QSYNC_BACKENDS_BACKENDS_H
#define QSYNC_BACKENDS_BACKENDS_H

#include <stdbool.h>

#include "core/backend.h"
#include "cpu/cpu_open.h"
#include "cuda/cuda_open.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend on cuda:device into *out when `cuda`, else the CPU backend with num_threads. */
qs_status qs_backend_open(bool cuda, int device, int num_threads, qs_backend **out);

#ifdef __cplusplus
}
#endif
#endif
