/* src/cuda/cuda_common.c — defines: the helpers every src/cuda file shares (cuda_common.h): the
 * launch check and making the backend's context current. */
#include "cuda/cuda_common.h"

/* QS_OK, or the pending launch error as QS_ERR_BACKEND naming `what`. */
qs_status qs_cuda_check_launch(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return QS_OK;
    return QS_FAIL(QS_ERR_BACKEND, "%s: CUDA kernel launch failed: %s (%s)", what, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}

/* The green context of the backend's SM partition, else cudaSetDevice(device). */
qs_status qs_cuda_make_current(qs_cuda_backend *cb) {
    if (cb->green.green) return qs_cuda_green_make_current(&cb->green);
    QS_CUDA_TRY(cudaSetDevice(cb->device));
    return QS_OK;
}
