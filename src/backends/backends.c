/* src/backends/backends.c — defines: qs_backend_open, the choice between the CPU and the CUDA
 * backend. */
#include "backends/backends.h"

/* cuda: qs_backend_cuda_create(device); else qs_backend_cpu_create(num_threads). */
qs_status qs_backend_open(bool cuda, int device, int num_threads, qs_backend **out) {
    return cuda ? qs_backend_cuda_create(device, out) : qs_backend_cpu_create(num_threads, out);
}
