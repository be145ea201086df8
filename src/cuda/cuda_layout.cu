/* src/cuda/cuda_layout.cu — defines: the NHWC <-> NCHW layout changes of the CUDA backend, as
 * batched transposes through 32×32 shared-memory tiles (reads and writes both coalesced). */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/cuda_map.cuh"

namespace {

using qs_cuda::args_check;
using qs_cuda::grid_cap;

constexpr int kTile = 32;

/* For each of `batch` matrices: dst (cols, rows) = src (rows, cols)ᵀ, or dst += srcᵀ with ACC.
 * Block (32, 8) moves one 32×32 tile through shared memory so that reads and writes are both
 * coalesced; tiles are visited grid-stride (batch-major), so any shape fits the grid. */
template <bool ACC>
__global__ void __launch_bounds__(kThreads)
    k_transpose(int64_t batch, int64_t rows, int64_t cols, const float *src, float *dst) {
    __shared__ float tile[kTile][kTile + 1];
    const int64_t rt = (rows + kTile - 1) / kTile, ct = (cols + kTile - 1) / kTile;
    const int64_t per = rt * ct, ntiles = batch * per;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int64_t b = t / per, rem = t % per;
        const int64_t r0 = (rem / ct) * kTile, c0 = (rem % ct) * kTile;
        const float *s = src + b * rows * cols;
        float *d = dst + b * rows * cols;
        for (int k = ty; k < kTile; k += kThreads / kTile) {
            const int64_t r = r0 + k, c = c0 + tx;
            if (r < rows && c < cols) tile[k][tx] = s[r * cols + c];
        }
        __syncthreads();
        for (int k = ty; k < kTile; k += kThreads / kTile) {
            const int64_t c = c0 + k, r = r0 + tx;
            if (r < rows && c < cols) {
                const float v = tile[tx][k];
                float *o = d + c * rows + r;
                *o = ACC ? __fadd_rn(*o, v) : v;
            }
        }
        __syncthreads(); /* the tile is reused by the next iteration */
    }
}

qs_status batched_transpose(qs_backend *be, qs_stream *s, int64_t batch, int64_t rows, int64_t cols,
                            const float *src, float *dst, bool accumulate, const char *what) {
    const int64_t tiles = batch * ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
    const dim3 block(kTile, kThreads / kTile);
    const unsigned int grid = grid_cap(be, tiles);
    if (accumulate)
        k_transpose<true><<<grid, block, 0, stream_of(be, s)>>>(batch, rows, cols, src, dst);
    else
        k_transpose<false><<<grid, block, 0, stream_of(be, s)>>>(batch, rows, cols, src, dst);
    return qs_cuda_check_launch(what);
}

qs_status layout_check(const char *what, int64_t N, int64_t H, int64_t W, int64_t C, const float *x,
                       const float *y) {
    if (N < 0 || H < 0 || W < 0 || C < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: negative dimension in (%lld,%lld,%lld,%lld)", what, (long long)N,
                       (long long)H, (long long)W, (long long)C);
    return args_check(what, N * H * W * C, {x, y});
}

} // namespace

/* x (N,H,W,C) → y (N,C,H,W); x and y must not overlap. */
qs_status qs_cuda_nhwc_to_nchw(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                               const float *x, float *y) {
    QS_TRY(layout_check("nhwc_to_nchw", N, H, W, C, x, y));
    if (N * H * W * C == 0) return QS_OK;
    return batched_transpose(be, s, N, H * W, C, x, y, false, "nhwc_to_nchw");
}

/* x (N,C,H,W) → y (N,H,W,C), or y += that; x and y must not overlap. */
qs_status qs_cuda_nchw_to_nhwc(qs_backend *be, qs_stream *s, int64_t N, int64_t H, int64_t W, int64_t C,
                               const float *x, float *y, bool accumulate) {
    QS_TRY(layout_check("nchw_to_nhwc", N, H, W, C, x, y));
    if (N * H * W * C == 0) return QS_OK;
    return batched_transpose(be, s, N, C, H * W, x, y, accumulate, "nchw_to_nhwc");
}
