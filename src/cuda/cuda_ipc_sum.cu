/* src/cuda/cuda_ipc_sum.cu — defines: the sum of several buffers in a fixed order, for the IPC
 * transport's rank-order sums (qs_cuda_ipc_sum, cuda_ipc.h). */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ipc.h"
#include "cuda/cuda_launch.cuh"

namespace {

struct Sources {
    const float *p[QS_CUDA_SUM_MAX_SRC];
};

/* Grid-stride over n elements; each thread adds the sources in their order. */
__global__ void k_sum_ranks(Sources src, int n_src, float *__restrict__ dst, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float acc = src.p[0][i];
        for (int r = 1; r < n_src; r++) acc += src.p[r][i];
        dst[i] = acc;
    }
}

} // namespace

extern "C" qs_status qs_cuda_ipc_sum(qs_backend *be, qs_stream *s, const float *const *src, int n_src, float *dst,
                                     int64_t n) {
    if (n_src < 1 || n_src > QS_CUDA_SUM_MAX_SRC)
        return QS_FAIL(QS_ERR_INVALID_ARG, "sum of %d ranks' buffers (1..%d)", n_src, QS_CUDA_SUM_MAX_SRC);
    if (n == 0) return QS_OK;
    Sources in = {};
    for (int r = 0; r < n_src; r++) in.p[r] = src[r];
    const int threads = 256;
    k_sum_ranks<<<qs_cuda::grid_for(be, n, threads), threads, 0, s->s>>>(in, n_src, dst, n);
    return qs_cuda_check_launch("sum of ranks' buffers");
}
