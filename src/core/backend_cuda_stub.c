/* src/core/backend_cuda_stub.c — qs_backend_open (every build), and qs_backend_cuda_create /
 * qs_backend_cuda_facts in a build without the CUDA backend (no nvcc or cuDNN at configure
 * time, or the sanitizer build): a clear refusal. */
#include "core/backend.h"

qs_status qs_backend_open(bool cuda, int device, int num_threads, qs_backend **out) {
    return cuda ? qs_backend_cuda_create(device, out) : qs_backend_cpu_create(num_threads, out);
}

#ifndef QS_HAVE_CUDA
qs_status qs_backend_cuda_create(int device, qs_backend **out) {
    *out = NULL;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "cuda:%d asked, but this qsync was built without the CUDA backend (nvcc and "
                   "cuDNN were not found when it was configured, or it is the sanitizer build): rebuild on a machine "
                   "with the CUDA toolkit", device);
}

qs_status qs_backend_cuda_facts(qs_backend *be, qs_gpu_facts *out) {
    (void)be;
    (void)out;
    return QS_FAIL(QS_ERR_INVALID_ARG, "no CUDA backend in this build");
}
#endif
