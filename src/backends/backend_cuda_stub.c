/* src/backends/backend_cuda_stub.c — defines: qs_backend_cuda_create and qs_backend_cuda_facts
 * in a build without the CUDA backend (no nvcc or cuDNN at configure time, or the sanitizer
 * build): a clear refusal. With CUDA, src/cuda/cuda_backend.c defines them. */
#include "cuda/cuda_open.h"

#ifndef QS_HAVE_CUDA
/* *out = NULL; QS_ERR_UNSUPPORTED naming the device asked and how to get a CUDA build. */
qs_status qs_backend_cuda_create(int device, qs_backend **out) {
    *out = NULL;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "cuda:%d asked, but this qsync was built without the CUDA backend (nvcc and "
                   "cuDNN were not found when it was configured, or it is the sanitizer build): rebuild on a machine "
                   "with the CUDA toolkit", device);
}

/* QS_ERR_INVALID_ARG: there is no CUDA backend to ask. */
qs_status qs_backend_cuda_facts(qs_backend *be, qs_gpu_facts *out) {
    (void)be;
    (void)out;
    return QS_FAIL(QS_ERR_INVALID_ARG, "no CUDA backend in this build");
}
#endif
