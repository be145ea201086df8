/* src/cuda/cuda_quant_dequant.cu — defines: dequantize of the CUDA backend (contract in
 * core/backend_ops.def; the CPU reference is src/cpu/cpu_quant.c): every element through the
 * CPU's bit-level decoders (core/numfmt.h) and explicitly rounded intrinsics, so the GPU writes
 * the CPU's bits. */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/numfmt.h"
#include "cuda/cuda_quant.cuh"

/* dst[i] = value of element i of an operand (n = rows·cols, row i / cols): BF16/F16 widened
 * exactly; S8 (float)q · scale (qs_int8_dequantize); FP8 decode(q) / fl(1/scale) (the CPU's
 * qs_fp8_to_f32 with scale 1/scale, exact for power-of-two scales). scale per row when
 * PER_ROW, else scales[0]. */
template <qq_fmt F, bool PER_ROW>
static __global__ void qq_dequant_kernel(const void *data, const float *scales, int64_t n, int64_t cols, float *dst) {
    float tmul = 0.0f;
    if constexpr (!PER_ROW && F == QQ_S8) tmul = scales[0];
    if constexpr (!PER_ROW && (F == QQ_E4M3 || F == QQ_E5M2)) tmul = __fdiv_rn(1.0f, scales[0]);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float m = tmul;
        if constexpr (PER_ROW) {
            float sc = scales[i / cols];
            m = F == QQ_S8 ? sc : __fdiv_rn(1.0f, sc);
        }
        float y;
        if constexpr (F == QQ_BF16)
            y = qs_nf_bits_f32(qs_nf_bf16_to_f32(static_cast<const uint16_t *>(data)[i]));
        else if constexpr (F == QQ_F16)
            y = qs_nf_bits_f32(qs_nf_f16_to_f32(static_cast<const uint16_t *>(data)[i]));
        else if constexpr (F == QQ_S8)
            y = __fmul_rn((float)static_cast<const int8_t *>(data)[i], m);
        else
            y = __fdiv_rn(qs_nf_fp8_to_f32(static_cast<const uint8_t *>(data)[i], F == QQ_E4M3 ? QS_F8E4M3 : QS_F8E5M2),
                          m);
        dst[i] = y;
        (void)m;
    }
    (void)scales;
    (void)cols;
}

/* Launch the dequantize kernel of format F, per-row scales where the operand has them. */
template <qq_fmt F>
static qs_status qq_dequant_launch(qs_backend *be, cudaStream_t st, const qs_operand *src, int64_t n, int64_t cols,
                                   float *dst) {
    unsigned grid = qq_grid(be, (uint64_t)n);
    bool per_row = false;
    if constexpr (F == QQ_S8 || F == QQ_E4M3 || F == QQ_E5M2) per_row = src->per_row; /* checked by the caller */
    if (per_row)
        qq_dequant_kernel<F, true><<<grid, QQ_THREADS, 0, st>>>(src->data, src->scale, n, cols, dst);
    else
        qq_dequant_kernel<F, false><<<grid, QQ_THREADS, 0, st>>>(src->data, src->scale, n, cols, dst);
    return qs_cuda_check_launch("dequantize kernel");
}

/* dequantize (core/backend_ops.def): dst (rows, cols) FP32 device memory = value of operand src
 * (data and scales in device memory; per_row: one scale per row, S8 and FP8). */
qs_status qs_cuda_dequantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const qs_operand *src,
                             float *dst) {
    if (rows < 0 || cols < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dequantize: negative shape (%lld, %lld)", (long long)rows,
                       (long long)cols);
    if (cols > 0 && rows > INT64_MAX / cols)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dequantize: shape (%lld, %lld) overflows int64", (long long)rows,
                       (long long)cols);
    const int64_t n = rows * cols;
    if (n == 0) return QS_OK;
    if (!src || !src->data || !dst) return QS_FAIL(QS_ERR_INVALID_ARG, "dequantize: NULL operand or dst");
    const bool scaled = qq_scaled(src->dt);
    if (scaled && !src->scale)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dequantize: %s operand without a scale", qs_dtype_name(src->dt));
    if (src->per_row && !scaled)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dequantize: per-row scales on a %s operand (only s8 and fp8 have scales)",
                       qs_dtype_name(src->dt));
    cudaStream_t st = qq_stream(be, s);
    switch (src->dt) {
    case QS_F32:
        QS_CUDA_TRY(cudaMemcpyAsync(dst, src->data, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, st));
        return QS_OK;
    case QS_BF16: return qq_dequant_launch<QQ_BF16>(be, st, src, n, cols, dst);
    case QS_F16: return qq_dequant_launch<QQ_F16>(be, st, src, n, cols, dst);
    case QS_S8: return qq_dequant_launch<QQ_S8>(be, st, src, n, cols, dst);
    case QS_F8E4M3: return qq_dequant_launch<QQ_E4M3>(be, st, src, n, cols, dst);
    case QS_F8E5M2: return qq_dequant_launch<QQ_E5M2>(be, st, src, n, cols, dst);
    default:
        return QS_FAIL(QS_ERR_UNSUPPORTED, "dequantize: no conversion from %s", qs_dtype_name(src->dt));
    }
}
