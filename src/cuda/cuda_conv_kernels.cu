/* src/cuda/cuda_conv_kernels.cu — the kernels cuda_conv.c runs around cuDNN: OIHW → KRSC weight
 * transposes (with exact widening), FP8/BF16/FP16 operand widening, the epilogue that applies
 * per-tensor dequantization scales, bias and accumulation to a convolution result (FP32, or BF16
 * from a 16-bit-output engine, widened) and writes it in FP32 or, for a BF16 forward output,
 * rounded to nearest even to BF16, and the KRSC → OIHW transpose of weight gradients.
 * Contracts in cuda_conv.h. Decoding uses the project's own number formats (core/numfmt.h), so
 * a value widens to the same bits as on the CPU.
 * All loops are grid-stride over int64 indices; every launch is checked. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/numfmt.h"
#include "cuda/cuda_conv.h"
#include "cuda/cuda_launch.cuh"

namespace {

constexpr int kBlock = 256;

/* Blocks for n elements (grid-stride loops cover the rest). */
unsigned grid_for(int64_t n) { return qs_cuda::grid_for_n(n, kBlock); }

/* Value of element i of a buffer of dtype dt (F32, BF16, F16, F8E4M3, F8E5M2), exact. */
__device__ __forceinline__ float load_val(const void *p, int64_t i, qs_dtype dt) {
    switch (dt) {
    case QS_F32: return static_cast<const float *>(p)[i];
    case QS_BF16: return qs_nf_bits_f32(qs_nf_bf16_to_f32(static_cast<const uint16_t *>(p)[i]));
    case QS_F16: return qs_nf_bits_f32(qs_nf_f16_to_f32(static_cast<const uint16_t *>(p)[i]));
    default: return qs_nf_fp8_to_f32(static_cast<const uint8_t *>(p)[i], dt);
    }
}

/* Store v as element i of a BF16 (RNE; exact for the widening uses here) or F32 buffer. */
__device__ __forceinline__ void store_val(void *p, int64_t i, qs_dtype dt, float v) {
    if (dt == QS_BF16)
        static_cast<uint16_t *>(p)[i] = qs_nf_f32_to_bf16_rne(qs_nf_f32_bits(v));
    else
        static_cast<float *>(p)[i] = v;
}

/* Source index (OIHW) of destination index j (KRSC). */
__device__ __forceinline__ int64_t krsc_src(int64_t j, int64_t C, int64_t R, int64_t S) {
    int64_t c = j % C, t = j / C;
    int64_t s = t % S;
    t /= S;
    int64_t r = t % R, k = t / R;
    return ((k * C + c) * R + r) * S + s;
}

template <typename T>
__global__ void k_krsc_copy(int64_t n, int64_t C, int64_t R, int64_t S, const T *__restrict__ src,
                            T *__restrict__ dst) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        dst[j] = src[krsc_src(j, C, R, S)];
}

__global__ void k_krsc_convert(int64_t n, int64_t C, int64_t R, int64_t S, const void *__restrict__ src,
                               qs_dtype sdt, void *__restrict__ dst, qs_dtype ddt) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        store_val(dst, j, ddt, load_val(src, krsc_src(j, C, R, S), sdt));
}

__global__ void k_widen(int64_t n, const void *__restrict__ src, qs_dtype sdt, void *__restrict__ dst, qs_dtype ddt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store_val(dst, i, ddt, load_val(src, i, sdt));
}

__device__ __forceinline__ float scale_of(const float *sa, const float *sb) {
    return (sa ? *sa : 1.0f) * (sb ? *sb : 1.0f);
}

/* t (F32 or BF16) may alias an F32 out (no __restrict__). out: F32 (accumulate allowed) or BF16
 * (v rounded to nearest even by store_val). */
__global__ void k_epilogue(int64_t n, int64_t cols, const void *t, qs_dtype tdt, void *out, qs_dtype odt,
                           const float *sa, const float *sb, const float *bias, bool accumulate) {
    const float sc = scale_of(sa, sb);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = load_val(t, i, tdt) * sc + (bias ? bias[i % cols] : 0.0f);
        if (accumulate) v = static_cast<const float *>(out)[i] + v; /* F32 out only (checked) */
        store_val(out, i, odt, v);
    }
}

/* dw[j] (OIHW index j) = t[KRSC index of the same (k,c,r,s)] · scale. */
__global__ void k_dw_oihw(int64_t n, int64_t C, int64_t R, int64_t S, const void *__restrict__ t, qs_dtype tdt,
                          float *__restrict__ dw, const float *sa, const float *sb) {
    const float sc = scale_of(sa, sb);
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = j % S, u = j / S;
        int64_t r = u % R;
        u /= R;
        int64_t c = u % C, k = u / C;
        dw[j] = load_val(t, ((k * R + r) * S + s) * C + c, tdt) * sc;
    }
}

bool widen_ok(qs_dtype src, qs_dtype dst) {
    bool fp8 = src == QS_F8E4M3 || src == QS_F8E5M2;
    if (dst == QS_BF16) return fp8 || src == QS_BF16;
    if (dst == QS_F32) return fp8 || src == QS_BF16 || src == QS_F16 || src == QS_F32;
    return false;
}

} // namespace

extern "C" qs_status qs_cuda_conv_weights_krsc(cudaStream_t s, int64_t K, int64_t C, int64_t R, int64_t S,
                                               const void *src, qs_dtype src_dt, void *dst, qs_dtype dst_dt) {
    const int64_t n = K * C * R * S;
    if (n <= 0) return QS_OK;
    if (src_dt == dst_dt) {
        switch (qs_dtype_size(src_dt)) {
        case 1:
            k_krsc_copy<uint8_t><<<grid_for(n), kBlock, 0, s>>>(n, C, R, S, static_cast<const uint8_t *>(src),
                                                                static_cast<uint8_t *>(dst));
            break;
        case 2:
            k_krsc_copy<uint16_t><<<grid_for(n), kBlock, 0, s>>>(n, C, R, S, static_cast<const uint16_t *>(src),
                                                                 static_cast<uint16_t *>(dst));
            break;
        case 4:
            k_krsc_copy<uint32_t><<<grid_for(n), kBlock, 0, s>>>(n, C, R, S, static_cast<const uint32_t *>(src),
                                                                 static_cast<uint32_t *>(dst));
            break;
        default:
            return QS_FAIL(QS_ERR_INTERNAL, "conv weight transpose: unexpected element size of %s",
                           qs_dtype_name(src_dt));
        }
        return qs_cuda_check_launch("conv weight transpose OIHW->KRSC (k_krsc_copy)");
    }
    if (!widen_ok(src_dt, dst_dt))
        return QS_FAIL(QS_ERR_INTERNAL, "conv weight transpose: no conversion %s -> %s", qs_dtype_name(src_dt),
                       qs_dtype_name(dst_dt));
    k_krsc_convert<<<grid_for(n), kBlock, 0, s>>>(n, C, R, S, src, src_dt, dst, dst_dt);
    return qs_cuda_check_launch("conv weight transpose + widen OIHW->KRSC (k_krsc_convert)");
}

extern "C" qs_status qs_cuda_conv_widen(cudaStream_t s, int64_t n, const void *src, qs_dtype src_dt, void *dst,
                                        qs_dtype dst_dt) {
    if (n <= 0) return QS_OK;
    if (!widen_ok(src_dt, dst_dt) || src_dt == dst_dt)
        return QS_FAIL(QS_ERR_INTERNAL, "conv operand widening: no conversion %s -> %s", qs_dtype_name(src_dt),
                       qs_dtype_name(dst_dt));
    k_widen<<<grid_for(n), kBlock, 0, s>>>(n, src, src_dt, dst, dst_dt);
    return qs_cuda_check_launch("conv operand widening (k_widen)");
}

/* The staged results the epilogues read (FP32 sums, or BF16 from a 16-bit-output engine), and the
 * outputs they write (FP32, or a BF16 forward output). */
static bool staged_dtype_ok(qs_dtype t_dt) { return t_dt == QS_F32 || t_dt == QS_BF16; }

extern "C" qs_status qs_cuda_conv_epilogue(cudaStream_t s, int64_t rows, int64_t cols, const void *t, qs_dtype t_dt,
                                           void *out, qs_dtype out_dt, const float *sa, const float *sb,
                                           const float *bias, bool accumulate) {
    const int64_t n = rows * cols;
    if (n <= 0) return QS_OK;
    if (t == out && (accumulate || t_dt != QS_F32 || out_dt != QS_F32))
        return QS_FAIL(QS_ERR_INTERNAL, "conv epilogue: accumulating, widening or narrowing a result onto itself");
    if (!staged_dtype_ok(t_dt) || !staged_dtype_ok(out_dt))
        return QS_FAIL(QS_ERR_INTERNAL, "conv epilogue: results of dtype %s into an output of dtype %s",
                       qs_dtype_name(t_dt), qs_dtype_name(out_dt));
    if (accumulate && out_dt != QS_F32)
        return QS_FAIL(QS_ERR_INTERNAL, "conv epilogue: accumulating onto a %s output", qs_dtype_name(out_dt));
    k_epilogue<<<grid_for(n), kBlock, 0, s>>>(n, cols, t, t_dt, out, out_dt, sa, sb, bias, accumulate);
    return qs_cuda_check_launch("conv epilogue (scale, bias, accumulate: k_epilogue)");
}

extern "C" qs_status qs_cuda_conv_dw_to_oihw(cudaStream_t s, int64_t K, int64_t C, int64_t R, int64_t S,
                                             const void *t, qs_dtype t_dt, float *dw, const float *sa,
                                             const float *sb) {
    const int64_t n = K * C * R * S;
    if (n <= 0) return QS_OK;
    if (!staged_dtype_ok(t_dt))
        return QS_FAIL(QS_ERR_INTERNAL, "conv weight-gradient transpose: results of dtype %s", qs_dtype_name(t_dt));
    k_dw_oihw<<<grid_for(n), kBlock, 0, s>>>(n, C, R, S, t, t_dt, dw, sa, sb);
    return qs_cuda_check_launch("conv weight-gradient transpose KRSC->OIHW (k_dw_oihw)");
}
