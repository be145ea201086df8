/* src/core/backend_cuda_stub.c — qs_backend_cuda_create in a build without the CUDA backend
 * (no nvcc or cuDNN at configure time, or the sanitizer build): a clear refusal. */
#include "core/backend.h"

#ifndef QS_HAVE_CUDA
qs_status qs_backend_cuda_create(int device, qs_backend **out) {
    *out = NULL;
    return QS_FAIL(QS_ERR_UNSUPPORTED, "cuda:%d asked, but this qsync was built without the CUDA backend (nvcc and "
                   "cuDNN were not found when it was configured, or it is the sanitizer build): rebuild on a machine "
                   "with the CUDA toolkit", device);
}
#endif
