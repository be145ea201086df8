/* src/cuda/cuda_conv.h — defines: the small kernels the cuDNN convolution (cuda_conv.c) runs
 * around cuDNN (cuda_conv_kernels.cu: weight transposes, operand widening, the scale/bias/
 * accumulate epilogue, which also narrows a result to a BF16 output), exported with C linkage,
 * and the query of the path a conv plan chose.
 * All launchers are asynchronous on `s`, check the launch (qs_cuda_check_launch) and return
 * QS_ERR_BACKEND naming the kernel when it fails; element counts are int64. */
#ifndef QSYNC_CUDA_CONV_H
#define QSYNC_CUDA_CONV_H

#include "cuda/cuda_backend.h"

/* Set to 1: cuda_conv.c chooses cuDNN algorithms, graph engines and paths by timing them
 * (fastest; a resumed run may then round differently). Unset: a fixed, reproducible choice. */
#define QS_CUDNN_BENCHMARK_ENV "QS_CUDNN_BENCHMARK"

/* Set to 0: BF16 (and FP8 backward) convolutions do not use cuDNN engines that write a BF16
 * result (the sums rounded once, then widened to FP32); only FP32-output paths are built. */
#define QS_CUDNN_BF16_OUT_ENV "QS_CUDNN_BF16_OUT"

#ifdef __cplusplus
extern "C" {
#endif

/* Weights OIHW (K,C,R,S) → KRSC (the filter layout of cuDNN's NHWC convolutions), converted
 * from src_dt to dst_dt on the way: dst_dt == src_dt copies the bits; else dst_dt is BF16 (from
 * FP8 or BF16) or F32 (from any of F32/BF16/F16/FP8) — widening, exact. */
qs_status qs_cuda_conv_weights_krsc(cudaStream_t s, int64_t K, int64_t C, int64_t R, int64_t S, const void *src,
                                    qs_dtype src_dt, void *dst, qs_dtype dst_dt);

/* dst[i] = src[i] widened exactly (same layout), n elements: to BF16 from FP8 E4M3/E5M2, or to
 * F32 from BF16/F16/FP8. No scale is applied (scales go to the epilogue). */
qs_status qs_cuda_conv_widen(cudaStream_t s, int64_t n, const void *src, qs_dtype src_dt, void *dst,
                             qs_dtype dst_dt);

/* out (rows, cols) in out_dt: v = t·(sa ? *sa : 1)·(sb ? *sb : 1) + (bias ? bias[col] : 0) in
 * FP32; out = accumulate ? out + v : v, stored as FP32 (out_dt F32) or rounded to nearest even to
 * BF16 (out_dt BF16; accumulate must then be false). t is F32 or BF16 (t_dt; widened exactly); an
 * F32 t may equal an F32 out (then accumulate must be false). sa, sb: device scalars (per-tensor
 * dequantization scales) or NULL. */
qs_status qs_cuda_conv_epilogue(cudaStream_t s, int64_t rows, int64_t cols, const void *t, qs_dtype t_dt, void *out,
                                qs_dtype out_dt, const float *sa, const float *sb, const float *bias, bool accumulate);

/* dw (K,C,R,S) OIHW FP32 = t (K,R,S,C) KRSC, F32 or BF16 (t_dt), transposed and widened, times
 * (sa ? *sa : 1)·(sb ? *sb : 1). */
qs_status qs_cuda_conv_dw_to_oihw(cudaStream_t s, int64_t K, int64_t C, int64_t R, int64_t S, const void *t,
                                  qs_dtype t_dt, float *dw, const float *sa, const float *sb);

/* Which path a conv plan runs per direction (dir 0 forward, 1 backward-data, 2 backward-weights),
 * e.g. "graph bf16 x bf16 -> f32, engine 62, 4 plans timed, ws 0 B"; "" for a bad argument. */
const char *qs_cuda_conv_impl_name(const void *plan, int dir);

#ifdef __cplusplus
}
#endif
#endif
