/* src/cuda/cuda_linear_kernels.h — defines: the launchers of the small kernels that the cuBLASLt
 * wrapper (cuda_gemm.c) and the Linear (cuda_linear.c) need (cuda_linear_kernels.cu, C linkage):
 * the byte transpose and the zero-filled byte copy that give FP8 GEMMs their "TN" operands
 * with 16-byte leading dimensions, the write-back of a padded FP32 result into the caller's
 * unpadded output, the bias add of the FP8 forward, and the deterministic column sums behind
 * an FP32 bias gradient.
 *
 * All launchers enqueue on `stream` and return at once; a launch error comes back as
 * QS_ERR_BACKEND (qs_cuda_check_launch), errors inside the kernels show at the next sync.
 * Matrices are row-major; pointers are device pointers. The launchers with a `batch` argument
 * work on that many matrices stored one after another (matrix b of a buffer starts b times
 * the size of one matrix later; batch 1 is a single matrix). */
#ifndef QSYNC_CUDA_LINEAR_KERNELS_H
#define QSYNC_CUDA_LINEAR_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "qsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each of `batch` matrices: dst (cols_padded, rows_padded) = transpose of the byte matrix
 * src (rows, cols), with the columns rows..rows_padded-1 and the rows cols..cols_padded-1 of dst
 * set to 0 (a zero byte is +0 in E4M3 and E5M2, so padding the reduction dimension of a GEMM
 * with it adds nothing). rows_padded >= rows, cols_padded >= cols; src holds batch·rows·cols
 * bytes, dst batch·cols_padded·rows_padded. */
qs_status qs_cuda_linear_transpose_u8(cudaStream_t stream, int64_t batch, const void *src, int64_t rows, int64_t cols,
                                      void *dst, int64_t rows_padded, int64_t cols_padded);

/* For each of `batch` matrices: dst (rows_padded, cols_padded) = the byte matrix src (rows,
 * cols), row-major both, with the columns cols..cols_padded-1 and the rows rows..rows_padded-1
 * of dst set to 0. rows_padded >= rows, cols_padded >= cols; src may have any alignment. */
qs_status qs_cuda_linear_pad_u8(cudaStream_t stream, int64_t batch, const void *src, int64_t rows, int64_t cols,
                                void *dst, int64_t rows_padded, int64_t cols_padded);

/* For each of `batch` matrices (src matrix b at src + b·src_stride floats, dst matrix b at
 * dst + b·rows·cols): dst (rows, cols) = (the old dst[r·cols + c] with accumulate +)
 * src[r·ld + c] (+ b[c] when b is not NULL), for a GEMM result computed into a padded buffer
 * (ld >= cols, src_stride >= rows·ld when batch > 1). Each addition is one FP32 rounding, in
 * that order: the same values as the product written straight into dst with β = accumulate,
 * then bias_add. src and dst must not overlap. */
qs_status qs_cuda_linear_unpad_f32(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols, const float *src,
                                   int64_t ld, int64_t src_stride, const float *b, bool accumulate, float *dst);

/* y (M, N) += b (N) broadcast over the rows. */
qs_status qs_cuda_linear_bias_add(cudaStream_t stream, int64_t M, int64_t N, const float *b, float *y);

/* Row blocks that qs_cuda_linear_column_sums uses for an (M, N) input on a device with `sms`
 * multiprocessors (1..64), and the bytes of `partial` it then needs (0 when it is 1). */
int qs_cuda_linear_column_sum_chunks(int64_t M, int64_t N, int sms);
size_t qs_cuda_linear_column_sum_bytes(int64_t N, int chunks);

/* sums[c] = Σ_r x[r, c] for x (M, N), accumulated in double in a fixed order (deterministic),
 * rounded once to float. chunks from qs_cuda_linear_column_sum_chunks; partial: that many
 * bytes of device scratch (may be NULL when chunks == 1). */
qs_status qs_cuda_linear_column_sums(cudaStream_t stream, int64_t M, int64_t N, const float *x, int chunks,
                                     double *partial, float *sums);

#ifdef __cplusplus
}
#endif
#endif
