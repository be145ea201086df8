/* src/cpu/cpu_open.h — defines: how the CPU backend (src/cpu) is created; callers open backends
 * through src/backends/backends.h. */
#ifndef QSYNC_CPU_CPU_OPEN_H
#define QSYNC_CPU_CPU_OPEN_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Create the CPU backend (oneDNN) into *out. num_threads 0 keeps the OpenMP default. */
qs_status qs_backend_cpu_create(int num_threads, qs_backend **out);

#ifdef __cplusplus
}
#endif
#endif
