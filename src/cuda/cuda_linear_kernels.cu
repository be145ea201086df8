/* src/cuda/cuda_linear_kernels.cu — defines: the small kernels around the cuBLASLt products of
 * cuda_gemm.c (Linear and batched matmul) and the Linear's bias sums (declared, with their
 * contracts, in cuda_linear_kernels.h):
 *   transpose_u8   FP8 operand transposes (cuBLASLt's FP8 GEMMs take only the TN layout),
 *                  zero-filling the padding of both dimensions of the destination
 *   pad_u8         FP8 operand copies into a wider / taller row-major buffer, zero-filled
 *                  (cuBLASLt's FP8 GEMMs need 16-byte leading dimensions)
 *   unpad_f32      a padded FP32 GEMM result back into the caller's unpadded output, with
 *                  the bias and the accumulation that the product would have carried
 *   (these three work on `batch` contiguous matrices at once: matrix b of a buffer starts at
 *   b times the matrix size)
 *   bias_add       y += b for the FP8 forward (its FP32-output epilogue wants a BF16 bias)
 *   column sums    db of an FP32 dY, two passes over row blocks, double accumulation in a
 *                  fixed order (deterministic: no atomics)
 * All kernels use grid-stride loops, so any shape fits the grid limits. */
#include "cuda/cuda_linear_kernels.h"

#include "cuda/cuda_backend.h"

#define QS_LIN_TT 32 /* transpose tile edge (bytes); block 32 × 8 */
#define QS_LIN_TY 8

/* One 32×32 tile at a time through shared memory: coalesced 32-byte row reads of src and
 * 32-byte row writes of dst. Tiles cover (rows_p, cols_p) of each of the batch matrices
 * (ntiles per matrix, visited matrix by matrix); source elements outside (rows, cols) read as 0,
 * so dst (cols_p, rows_p) is zero beyond column rows and beyond row cols. */
__global__ void __launch_bounds__(QS_LIN_TT *QS_LIN_TY)
    qs_lin_transpose_u8(const uint8_t *__restrict__ src_all, int64_t rows, int64_t cols, uint8_t *__restrict__ dst_all,
                        int64_t rows_p, int64_t cols_p, int64_t tiles_c, int64_t ntiles, int64_t batch) {
    __shared__ uint8_t tile[QS_LIN_TT][QS_LIN_TT + 1];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    for (int64_t bt = blockIdx.x; bt < batch * ntiles; bt += gridDim.x) {
        const int64_t b = bt / ntiles, t = bt % ntiles;
        const uint8_t *src = src_all + b * rows * cols;
        uint8_t *dst = dst_all + b * rows_p * cols_p;
        const int64_t r0 = (t / tiles_c) * QS_LIN_TT, c0 = (t % tiles_c) * QS_LIN_TT;
        for (int i = ty; i < QS_LIN_TT; i += QS_LIN_TY) {
            const int64_t r = r0 + i, c = c0 + tx;
            tile[i][tx] = (r < rows && c < cols) ? src[r * cols + c] : (uint8_t)0;
        }
        __syncthreads();
        for (int i = ty; i < QS_LIN_TT; i += QS_LIN_TY) {
            const int64_t c = c0 + i, r = r0 + tx; /* dst row c, column r */
            if (c < cols_p && r < rows_p) dst[c * rows_p + r] = tile[tx][i];
        }
        __syncthreads();
    }
}

/* The same with 4-byte words, for cols % 4 == 0, rows_p % 4 == 0 and 4-aligned pointers (a
 * 4-byte source word is then wholly inside or wholly outside cols, a destination word wholly
 * inside or outside rows_p; cols_p is free): a 64×64 tile, block 16 × 16; a half-warp reads one
 * 64-byte source row segment, and writes one 64-byte destination segment packed from four
 * tile rows. */
#define QS_LIN_TW 64
__global__ void __launch_bounds__(256)
    qs_lin_transpose_u8x4(const uint8_t *__restrict__ src_all, int64_t rows, int64_t cols,
                          uint8_t *__restrict__ dst_all, int64_t rows_p, int64_t cols_p, int64_t tiles_c,
                          int64_t ntiles, int64_t batch) {
    __shared__ __align__(16) uint8_t tile[QS_LIN_TW][QS_LIN_TW + 4];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y; /* tx: 4-byte group, ty: row lane */
    for (int64_t bt = blockIdx.x; bt < batch * ntiles; bt += gridDim.x) {
        /* matrix starts stay 4-aligned: rows·cols and rows_p·cols_p are multiples of 4 */
        const int64_t b = bt / ntiles, t = bt % ntiles;
        const uint8_t *src = src_all + b * rows * cols;
        uint8_t *dst = dst_all + b * rows_p * cols_p;
        const int64_t r0 = (t / tiles_c) * QS_LIN_TW, c0 = (t % tiles_c) * QS_LIN_TW;
        for (int i = ty; i < QS_LIN_TW; i += 16) {
            const int64_t r = r0 + i, c = c0 + 4 * tx;
            uint32_t v = (r < rows && c < cols) ? *(const uint32_t *)(src + r * cols + c) : 0u;
            *(uint32_t *)&tile[i][4 * tx] = v;
        }
        __syncthreads();
        for (int i = ty; i < QS_LIN_TW; i += 16) {
            const int64_t c = c0 + i, r = r0 + 4 * tx; /* dst row c, columns r..r+3 */
            if (c < cols_p && r < rows_p) {
                const uint32_t v = (uint32_t)tile[4 * tx][i] | (uint32_t)tile[4 * tx + 1][i] << 8 |
                                   (uint32_t)tile[4 * tx + 2][i] << 16 | (uint32_t)tile[4 * tx + 3][i] << 24;
                *(uint32_t *)(dst + c * rows_p + r) = v;
            }
        }
        __syncthreads();
    }
}

/* dst (rows_p, cols_p) = src (rows, cols) with zeros beyond row rows and column cols, for each
 * of the batch matrices (the destination rows of all matrices form one sequence of rows_p·batch
 * rows); one 4-byte destination word a thread (cols_p % 4 == 0, 4-aligned dst), its bytes read
 * singly (src rows have any length and alignment). */
__global__ void qs_lin_pad_u8x4(const uint8_t *__restrict__ src, int64_t rows, int64_t cols,
                                uint32_t *__restrict__ dst, int64_t rows_p, int64_t words_per_row, int64_t batch) {
    const int64_t nwords = batch * rows_p * words_per_row;
    for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < nwords; w += (int64_t)gridDim.x * blockDim.x) {
        const int64_t rr = w / words_per_row, c0 = (w % words_per_row) * 4;
        const int64_t b = rr / rows_p, r = rr % rows_p;
        const uint8_t *s = src + b * rows * cols;
        uint32_t v = 0u;
        if (r < rows)
            for (int j = 0; j < 4; j++) {
                const int64_t c = c0 + j;
                if (c < cols) v |= (uint32_t)s[r * cols + c] << (8 * j);
            }
        dst[w] = v; /* byte offset 4·w = (b·rows_p + r)·cols_p + c0 */
    }
}

/* The same a byte a thread, for any cols_p and alignment. */
__global__ void qs_lin_pad_u8(const uint8_t *__restrict__ src, int64_t rows, int64_t cols, uint8_t *__restrict__ dst,
                              int64_t rows_p, int64_t cols_p, int64_t batch) {
    const int64_t n = batch * rows_p * cols_p;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t rr = i / cols_p, c = i % cols_p;
        const int64_t b = rr / rows_p, r = rr % rows_p;
        dst[i] = (r < rows && c < cols) ? src[(b * rows + r) * cols + c] : (uint8_t)0;
    }
}

/* dst (rows, cols) = [dst +] src (rows, cols; row stride ld) [+ b (cols)] for each of the batch
 * matrices (src matrix b at b·src_stride, dst matrix b at b·rows·cols): a thread an element;
 * the additions in this order, each rounded once, as the product's β = 1 epilogue and then
 * bias_add would round them. */
__global__ void qs_lin_unpad_f32(int64_t rows, int64_t cols, const float *__restrict__ src, int64_t ld,
                                 int64_t src_stride, int64_t batch, const float *__restrict__ b, int accumulate,
                                 float *__restrict__ dst) {
    const int64_t per = rows * cols, n = batch * per;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = i / per, e = i % per;
        const int64_t r = e / cols, c = e % cols;
        float v = src[m * src_stride + r * ld + c];
        if (accumulate) v = dst[i] + v;
        if (b) v += b[c];
        dst[i] = v;
    }
}

/* v += b, one float or four (float4: x, y, z, w in turn). */
__device__ __forceinline__ void qs_lin_add(float &v, const float &b) { v += b; }
__device__ __forceinline__ void qs_lin_add(float4 &v, const float4 &b) {
    v.x += b.x;
    v.y += b.y;
    v.z += b.z;
    v.w += b.w;
}

/* y (M, N) += b in elements V (float, or float4 for N % 4 == 0 and 16-aligned y and b; N then
 * counts float4s): threads over columns (b read once per thread), each block a run of rows. */
template <typename V>
__global__ void qs_lin_bias_add(int64_t M, int64_t N, int64_t rows_per_block, const V *__restrict__ b,
                                V *__restrict__ y) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < N; c += (int64_t)gridDim.x * blockDim.x) {
        const V bc = b[c];
        for (int64_t r0 = (int64_t)blockIdx.y * rows_per_block; r0 < M; r0 += (int64_t)gridDim.y * rows_per_block) {
            const int64_t r1 = r0 + rows_per_block < M ? r0 + rows_per_block : M;
            for (int64_t r = r0; r < r1; r++) {
                V v = y[r * N + c];
                qs_lin_add(v, bc);
                y[r * N + c] = v;
            }
        }
    }
}

/* Pass 1: block (32 columns × 8 row lanes) sums its columns over row block blockIdx.y
 * (rows_per_chunk rows): each lane strides by 8 rows, then lane sums are added in lane order.
 * With one row block the result goes straight to sums, else to partial[blockIdx.y · N + c]. */
__global__ void __launch_bounds__(256)
    qs_lin_colsum_partial(const float *__restrict__ x, int64_t M, int64_t N, int64_t rows_per_chunk,
                          double *__restrict__ partial, float *__restrict__ sums) {
    __shared__ double red[8][32];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int64_t r_begin = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t r_end = r_begin + rows_per_chunk < M ? r_begin + rows_per_chunk : M;
    const int64_t col_blocks = (N + 31) / 32;
    for (int64_t cb = blockIdx.x; cb < col_blocks; cb += gridDim.x) {
        const int64_t c = cb * 32 + tx;
        double acc = 0.0;
        if (c < N)
            for (int64_t r = r_begin + ty; r < r_end; r += 8) acc += (double)x[r * N + c];
        red[ty][tx] = acc;
        __syncthreads();
        if (ty == 0 && c < N) {
            double s = 0.0;
            for (int i = 0; i < 8; i++) s += red[i][tx];
            if (sums)
                sums[c] = (float)s;
            else
                partial[(int64_t)blockIdx.y * N + c] = s;
        }
        __syncthreads();
    }
}

/* Pass 2: sums[c] = Σ_chunk partial[chunk · N + c], chunks in order. */
__global__ void qs_lin_colsum_final(const double *__restrict__ partial, int64_t N, int chunks,
                                    float *__restrict__ sums) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < N; c += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int i = 0; i < chunks; i++) s += partial[(int64_t)i * N + c];
        sums[c] = (float)s;
    }
}

static unsigned grid_cap(int64_t want, int64_t cap) { return (unsigned)(want < 1 ? 1 : want > cap ? cap : want); }

/* The shapes of an FP8 operand transpose or pad (`what`): non-negative, the padded extents at
 * least the real ones; QS_ERR_INTERNAL (the callers size them) otherwise. */
static qs_status u8_shape_check(const char *what, int64_t batch, int64_t rows, int64_t cols, int64_t rows_padded,
                                int64_t cols_padded) {
    if (batch < 0 || rows < 0 || cols < 0 || rows_padded < rows || cols_padded < cols)
        return QS_FAIL(QS_ERR_INTERNAL,
                       "FP8 GEMM operand %s: bad shape batch=%lld rows=%lld cols=%lld rows_padded=%lld "
                       "cols_padded=%lld",
                       what, (long long)batch, (long long)rows, (long long)cols, (long long)rows_padded,
                       (long long)cols_padded);
    return QS_OK;
}

extern "C" qs_status qs_cuda_linear_transpose_u8(cudaStream_t stream, int64_t batch, const void *src, int64_t rows,
                                                 int64_t cols, void *dst, int64_t rows_padded, int64_t cols_padded) {
    QS_TRY(u8_shape_check("transpose", batch, rows, cols, rows_padded, cols_padded));
    if (batch == 0 || rows_padded == 0 || cols_padded == 0) return QS_OK;
    if (cols % 4 == 0 && rows_padded % 4 == 0 && (uintptr_t)src % 4 == 0 && (uintptr_t)dst % 4 == 0) {
        const int64_t tr = (rows_padded + QS_LIN_TW - 1) / QS_LIN_TW, tc = (cols_padded + QS_LIN_TW - 1) / QS_LIN_TW;
        qs_lin_transpose_u8x4<<<grid_cap(batch * tr * tc, 1 << 16), dim3(16, 16), 0, stream>>>(
            (const uint8_t *)src, rows, cols, (uint8_t *)dst, rows_padded, cols_padded, tc, tr * tc, batch);
        return qs_cuda_check_launch("FP8 GEMM operand transpose");
    }
    const int64_t tiles_r = (rows_padded + QS_LIN_TT - 1) / QS_LIN_TT;
    const int64_t tiles_c = (cols_padded + QS_LIN_TT - 1) / QS_LIN_TT;
    const int64_t ntiles = tiles_r * tiles_c;
    qs_lin_transpose_u8<<<grid_cap(batch * ntiles, 1 << 16), dim3(QS_LIN_TT, QS_LIN_TY), 0, stream>>>(
        (const uint8_t *)src, rows, cols, (uint8_t *)dst, rows_padded, cols_padded, tiles_c, ntiles, batch);
    return qs_cuda_check_launch("FP8 GEMM operand transpose");
}

extern "C" qs_status qs_cuda_linear_pad_u8(cudaStream_t stream, int64_t batch, const void *src, int64_t rows,
                                           int64_t cols, void *dst, int64_t rows_padded, int64_t cols_padded) {
    QS_TRY(u8_shape_check("pad", batch, rows, cols, rows_padded, cols_padded));
    if (batch == 0 || rows_padded == 0 || cols_padded == 0) return QS_OK;
    if (cols_padded % 4 == 0 && (uintptr_t)dst % 4 == 0) {
        const int64_t wpr = cols_padded / 4;
        qs_lin_pad_u8x4<<<grid_cap((batch * rows_padded * wpr + 255) / 256, 1 << 16), 256, 0, stream>>>(
            (const uint8_t *)src, rows, cols, (uint32_t *)dst, rows_padded, wpr, batch);
    } else {
        qs_lin_pad_u8<<<grid_cap((batch * rows_padded * cols_padded + 255) / 256, 1 << 16), 256, 0, stream>>>(
            (const uint8_t *)src, rows, cols, (uint8_t *)dst, rows_padded, cols_padded, batch);
    }
    return qs_cuda_check_launch("FP8 GEMM operand pad");
}

extern "C" qs_status qs_cuda_linear_unpad_f32(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols,
                                              const float *src, int64_t ld, int64_t src_stride, const float *b,
                                              bool accumulate, float *dst) {
    if (batch < 0 || rows < 0 || cols < 0 || ld < cols || (batch > 1 && src_stride < rows * ld))
        return QS_FAIL(QS_ERR_INTERNAL,
                       "GEMM unpad: bad shape batch=%lld rows=%lld cols=%lld ld=%lld src_stride=%lld",
                       (long long)batch, (long long)rows, (long long)cols, (long long)ld, (long long)src_stride);
    if (batch == 0 || rows == 0 || cols == 0) return QS_OK;
    qs_lin_unpad_f32<<<grid_cap((batch * rows * cols + 255) / 256, 1 << 16), 256, 0, stream>>>(
        rows, cols, src, ld, src_stride, batch, b, accumulate ? 1 : 0, dst);
    return qs_cuda_check_launch("GEMM padded result write-back");
}

extern "C" qs_status qs_cuda_linear_bias_add(cudaStream_t stream, int64_t M, int64_t N, const float *b, float *y) {
    if (M <= 0 || N <= 0) return QS_OK;
    const int64_t rows_per_block = 16;
    const bool vec = N % 4 == 0 && (uintptr_t)b % 16 == 0 && (uintptr_t)y % 16 == 0;
    const int64_t cols = vec ? N / 4 : N;
    dim3 grid(grid_cap((cols + 255) / 256, 1024), grid_cap((M + rows_per_block - 1) / rows_per_block, 65535));
    if (vec)
        qs_lin_bias_add<float4><<<grid, 256, 0, stream>>>(M, cols, rows_per_block, (const float4 *)b, (float4 *)y);
    else
        qs_lin_bias_add<float><<<grid, 256, 0, stream>>>(M, N, rows_per_block, b, y);
    return qs_cuda_check_launch("linear bias add");
}

extern "C" int qs_cuda_linear_column_sum_chunks(int64_t M, int64_t N, int sms) {
    const int64_t col_blocks = (N + 31) / 32 > 0 ? (N + 31) / 32 : 1;
    const int64_t target = 2 * (int64_t)(sms > 0 ? sms : 1); /* blocks: two waves of one block per SM */
    int64_t chunks = (target + col_blocks - 1) / col_blocks;
    const int64_t by_rows = (M + 127) / 128; /* at least 128 rows a block */
    if (chunks > by_rows) chunks = by_rows;
    if (chunks > 64) chunks = 64;
    return chunks < 1 ? 1 : (int)chunks;
}

extern "C" size_t qs_cuda_linear_column_sum_bytes(int64_t N, int chunks) {
    return chunks > 1 ? (size_t)chunks * (size_t)N * sizeof(double) : 0;
}

extern "C" qs_status qs_cuda_linear_column_sums(cudaStream_t stream, int64_t M, int64_t N, const float *x, int chunks,
                                               double *partial, float *sums) {
    if (N <= 0) return QS_OK;
    if (chunks < 1 || (chunks > 1 && !partial))
        return QS_FAIL(QS_ERR_INTERNAL, "linear column sums: %d row blocks without scratch", chunks);
    const int64_t rows_per_chunk = M > 0 ? (M + chunks - 1) / chunks : 1;
    dim3 grid(grid_cap((N + 31) / 32, 65535), (unsigned)chunks);
    qs_lin_colsum_partial<<<grid, dim3(32, 8), 0, stream>>>(x, M, N, rows_per_chunk, partial,
                                                            chunks == 1 ? sums : (float *)0);
    QS_TRY(qs_cuda_check_launch("linear bias gradient (column sums, pass 1)"));
    if (chunks == 1) return QS_OK;
    qs_lin_colsum_final<<<grid_cap((N + 255) / 256, 4096), 256, 0, stream>>>(partial, N, chunks, sums);
    return qs_cuda_check_launch("linear bias gradient (column sums, pass 2)");
}
