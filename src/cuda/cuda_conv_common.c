/* src/cuda/cuda_conv_common.c — defines: what every CUDA convolution file uses (cuda_conv_plan.h):
 * the direction names, the two environment switches, cuDNN error messages, the backend's cuDNN
 * handle, the clean-up of a direction and the scratch that timing candidates runs on. */
#include "cuda/cuda_conv_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const qs_cuda_conv_dir_names[QS_CONV_DIRS] = {"forward", "backward-data", "backward-weights"};

/* Whether QS_CUDNN_BENCHMARK=1: choose algorithms, engines and paths by timing (read once). */
bool qs_cuda_conv_benchmark(void) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv(QS_CUDNN_BENCHMARK_ENV);
        on = v && strcmp(v, "1") == 0;
    }
    return on == 1;
}

/* Whether 16-bit-output engines may be used (QS_CUDNN_BF16_OUT unset or not "0"; read once). */
bool qs_cuda_conv_bf16_out(void) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv(QS_CUDNN_BF16_OUT_ENV);
        on = !(v && strcmp(v, "0") == 0);
    }
    return on == 1;
}

/* A failed cuDNN call: QS_ERR_BACKEND naming the call, the convolution, precision and direction,
 * with cuDNN's status and its last error message. */
qs_status qs_cuda_conv_dnn_fail(const qs_conv_desc *d, int dir, const char *call, cudnnStatus_t st) {
    char msg[384];
    msg[0] = 0;
    cudnnGetLastErrorString(msg, sizeof msg);
    return QS_FAIL(QS_ERR_BACKEND,
                   "%s failed for conv N=%lld H=%lld W=%lld C=%lld K=%lld %lldx%lld (stride %lldx%lld, pad %lldx%lld) "
                   "at %s (%s): %s%s%s",
                   call, (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K,
                   (long long)d->R, (long long)d->S, (long long)d->stride_h, (long long)d->stride_w,
                   (long long)d->pad_h, (long long)d->pad_w, qs_precision_name(d->prec), qs_cuda_conv_dir_names[dir],
                   cudnnGetErrorString(st), msg[0] ? " — " : "", msg);
}

/* The backend's cuDNN handle, created on first use on the backend's device. */
qs_status qs_cuda_conv_handle(qs_backend *be, cudnnHandle_t *out) {
    qs_cuda_backend *cb = qs_cuda_be(be);
    if (!cb->dnn) {
        size_t v = cudnnGetVersion();
        if (v < 90000)
            return QS_FAIL(QS_ERR_UNSUPPORTED,
                           "cuDNN %zu.%zu is loaded but the CUDA backend needs cuDNN 9 (built against %d.%d); "
                           "install cuDNN 9 or fix LD_LIBRARY_PATH",
                           v / 10000, v / 100 % 100, CUDNN_MAJOR, CUDNN_MINOR);
        QS_TRY(qs_cuda_make_current(cb));
        cudnnHandle_t h = NULL;
        cudnnStatus_t st = cudnnCreate(&h);
        if (st != CUDNN_STATUS_SUCCESS)
            return QS_FAIL(QS_ERR_BACKEND, "cudnnCreate failed on cuda:%d: %s", cb->device, cudnnGetErrorString(st));
        cb->dnn = h;
    }
    *out = (cudnnHandle_t)cb->dnn;
    return QS_OK;
}

/* Destroy the legacy descriptor, the graph plan and every kept descriptor; zero cd. */
void qs_cuda_conv_dir_clear(qs_cuda_conv_dir *cd) {
    if (cd->conv) cudnnDestroyConvolutionDescriptor(cd->conv);
    if (cd->gplan) cudnnBackendDestroyDescriptor(cd->gplan);
    for (int i = cd->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(cd->keep[i]);
    memset(cd, 0, sizeof *cd);
}

/* Allocate and zero the timing scratch (cuda_conv_plan.h); false when any step fails. */
bool qs_cuda_conv_scratch_open(qs_cuda_conv_scratch *sc, size_t a_bytes, size_t b_bytes, size_t out_bytes,
                               size_t scale_bytes, size_t ws_bytes, cudaStream_t st) {
    memset(sc, 0, sizeof *sc);
    return cudaMalloc(&sc->a, a_bytes) == cudaSuccess && cudaMalloc(&sc->b, b_bytes) == cudaSuccess &&
           cudaMalloc(&sc->o, out_bytes) == cudaSuccess &&
           (!scale_bytes || cudaMalloc(&sc->scale, scale_bytes) == cudaSuccess) &&
           (!ws_bytes || cudaMalloc(&sc->w, ws_bytes) == cudaSuccess) && cudaEventCreate(&sc->e0) == cudaSuccess &&
           cudaEventCreate(&sc->e1) == cudaSuccess && cudaMemsetAsync(sc->a, 0, a_bytes, st) == cudaSuccess &&
           cudaMemsetAsync(sc->b, 0, b_bytes, st) == cudaSuccess;
}

/* Wait for st and free the timing scratch, opened or not (cuda_conv_plan.h). */
void qs_cuda_conv_scratch_close(qs_cuda_conv_scratch *sc, cudaStream_t st) {
    cudaStreamSynchronize(st);
    if (sc->e0) cudaEventDestroy(sc->e0);
    if (sc->e1) cudaEventDestroy(sc->e1);
    cudaFree(sc->a);
    cudaFree(sc->b);
    cudaFree(sc->o);
    cudaFree(sc->w);
    cudaFree(sc->scale);
    cudaGetLastError(); /* a scratch allocation that failed here is not the caller's error */
    memset(sc, 0, sizeof *sc);
}
