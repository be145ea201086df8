/* src/cuda/cuda_reduce.cu — defines: the column sums of the CUDA backend (bias gradients),
 * accumulated in double over a row split that depends only on the shape: deterministic, and equal
 * to the CPU's to double rounding (the FP32 sums came out identical in the tests). */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/cuda_map.cuh"

namespace {

constexpr int kTile = 32; /* columns per block */
constexpr int kColRowsPerChunk = 256; /* at least, before the chunk count is capped */
constexpr int64_t kColMaxBlocks = 4096;
constexpr int64_t kColMaxChunks = 1024;

/* Block (32, 8): columns [32·blockIdx.x, +32), rows of chunk blockIdx.y (of nchunk equal
 * splits). Thread (tx, ty) sums rows ty, ty+8, ... of its column in double; the 8 partials are
 * added in ty order. Writes part[chunk·cols + c], or the float sums[c] directly when there is
 * only one chunk (part NULL). */
__global__ void __launch_bounds__(kThreads)
    k_colsum_part(int64_t rows, int64_t cols, int64_t nchunk, const float *x, double *part, float *sums) {
    __shared__ double acc[kThreads / kTile][kTile];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = (int64_t)blockIdx.x * kTile + tx;
    const int64_t ch = blockIdx.y;
    const int64_t r0 = rows * ch / nchunk, r1 = rows * (ch + 1) / nchunk;
    double sum = 0.0;
    if (c < cols)
        for (int64_t r = r0 + ty; r < r1; r += kThreads / kTile) sum += (double)x[r * cols + c];
    acc[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && c < cols) {
        double t = acc[0][tx];
        for (int k = 1; k < kThreads / kTile; k++) t += acc[k][tx];
        if (part)
            part[ch * cols + c] = t;
        else
            sums[c] = (float)t;
    }
}

/* sums[c] = Σ_chunk part[chunk·cols + c], in chunk order. */
__global__ void __launch_bounds__(kThreads) k_colsum_final(int64_t cols, int64_t nchunk, const double *part, float *sums) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += stride) {
        double t = 0.0;
        for (int64_t ch = 0; ch < nchunk; ch++) t += part[ch * cols + c];
        sums[c] = (float)t;
    }
}

} // namespace

/* sums[c] = Σ_r x[r,c] over the row-major (rows, cols) x, accumulated in double, rounded once
 * to float (rows == 0 gives zeros). Deterministic: the row split depends only on the shape.
 * A temporary of chunks × cols doubles comes from the stream-ordered pool. */
qs_status qs_cuda_column_sums(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x,
                              float *sums) {
    if (rows < 0 || cols < 1 || !sums || (rows > 0 && !x))
        return QS_FAIL(QS_ERR_INVALID_ARG, "column_sums: bad shape (%lld, %lld) or NULL pointer", (long long)rows,
                       (long long)cols);
    cudaStream_t st = stream_of(be, s);
    if (rows == 0) {
        QS_CUDA_TRY(cudaMemsetAsync(sums, 0, (size_t)cols * sizeof(float), st));
        return QS_OK;
    }
    const int64_t ctiles = (cols + kTile - 1) / kTile;
    if (ctiles > INT32_MAX)
        return QS_FAIL(QS_ERR_INVALID_ARG, "column_sums: %lld columns exceed the CUDA grid", (long long)cols);
    int64_t nchunk = (rows + kColRowsPerChunk - 1) / kColRowsPerChunk;
    const int64_t by_blocks = kColMaxBlocks / ctiles > 1 ? kColMaxBlocks / ctiles : 1;
    if (nchunk > by_blocks) nchunk = by_blocks;
    if (nchunk > kColMaxChunks) nchunk = kColMaxChunks;
    const dim3 block(kTile, kThreads / kTile), grid((unsigned int)ctiles, (unsigned int)nchunk);
    if (nchunk == 1) {
        k_colsum_part<<<grid, block, 0, st>>>(rows, cols, 1, x, nullptr, sums);
        return qs_cuda_check_launch("column_sums");
    }
    double *part = nullptr;
    QS_CUDA_TRY(cudaMallocAsync((void **)&part, (size_t)(nchunk * cols) * sizeof(double), st));
    k_colsum_part<<<grid, block, 0, st>>>(rows, cols, nchunk, x, part, nullptr);
    qs_status rc = qs_cuda_check_launch("column_sums (partial sums)");
    if (rc == QS_OK) {
        k_colsum_final<<<grid_for(be, cols), kThreads, 0, st>>>(cols, nchunk, part, sums);
        rc = qs_cuda_check_launch("column_sums (final sums)");
    }
    const cudaError_t fe = cudaFreeAsync(part, st);
    if (rc == QS_OK && fe != cudaSuccess)
        return QS_FAIL(QS_ERR_BACKEND, "column_sums: cudaFreeAsync of the partial sums failed: %s (%s)",
                       cudaGetErrorName(fe), cudaGetErrorString(fe));
    return rc;
}
