/* src/cuda/cuda_cast.cu — defines: the f32 / bf16 / f16 casts of the CUDA backend, with
 * round-to-nearest-even by core/numfmt.h's bit-level element functions (the CPU's bits). */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/numfmt.h"
#include "cuda/cuda_map.cuh"

namespace {

using qs_cuda::args_check;

enum CastMode { kF32toBF16, kF32toF16, kBF16toF32, kF16toF32, kBF16toF16, kF16toBF16 };

/* dst[i] = src[i] converted with round-to-nearest-even by core/numfmt.h's bit-level element
 * functions (the CPU's), bf16 <-> f16 through the exact f32 value. 32-bit values move as
 * their bit patterns, so NaN payloads are those the CPU produces. */
template <int MODE>
__global__ void __launch_bounds__(kThreads) k_cast(int64_t n, const void *src, void *dst) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if constexpr (MODE == kF32toBF16) {
            static_cast<uint16_t *>(dst)[i] = qs_nf_f32_to_bf16_rne(static_cast<const uint32_t *>(src)[i]);
        } else if constexpr (MODE == kF32toF16) {
            static_cast<uint16_t *>(dst)[i] = (uint16_t)qs_nf_f32_to_f16_rne(static_cast<const uint32_t *>(src)[i]);
        } else if constexpr (MODE == kBF16toF32) {
            static_cast<uint32_t *>(dst)[i] = qs_nf_bf16_to_f32(static_cast<const uint16_t *>(src)[i]);
        } else if constexpr (MODE == kF16toF32) {
            static_cast<uint32_t *>(dst)[i] = qs_nf_f16_to_f32(static_cast<const uint16_t *>(src)[i]);
        } else if constexpr (MODE == kBF16toF16) {
            static_cast<uint16_t *>(dst)[i] =
                (uint16_t)qs_nf_f32_to_f16_rne(qs_nf_bf16_to_f32(static_cast<const uint16_t *>(src)[i]));
        } else {
            static_cast<uint16_t *>(dst)[i] =
                qs_nf_f32_to_bf16_rne(qs_nf_f16_to_f32(static_cast<const uint16_t *>(src)[i]));
        }
    }
}

template <int MODE>
qs_status launch_cast(qs_backend *be, qs_stream *s, int64_t n, const void *src, void *dst) {
    k_cast<MODE><<<grid_for(be, n), kThreads, 0, stream_of(be, s)>>>(n, src, dst);
    return qs_cuda_check_launch("cast");
}

bool cast_supported(qs_dtype dt) { return dt == QS_F32 || dt == QS_BF16 || dt == QS_F16; }

} // namespace

/* dst[i] = RNE(src[i]) among f32/bf16/f16 (same dtype: a copy). dst must not overlap src
 * unless both are the same buffer and dtype. */
qs_status qs_cuda_cast(qs_backend *be, qs_stream *s, int64_t n, const void *src, qs_dtype src_dt, void *dst,
                       qs_dtype dst_dt) {
    QS_TRY(args_check("cast", n, {src, dst}));
    if (!cast_supported(src_dt) || !cast_supported(dst_dt))
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cast: %s -> %s is not supported by the CUDA backend (only f32/bf16/f16)",
                       qs_dtype_name(src_dt), qs_dtype_name(dst_dt));
    if (n == 0) return QS_OK;
    if (src_dt == dst_dt) {
        if (src != dst)
            QS_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * qs_dtype_size(src_dt), cudaMemcpyDeviceToDevice,
                                        stream_of(be, s)));
        return QS_OK;
    }
    if (src_dt == QS_F32) {
        if (dst_dt == QS_BF16) return launch_cast<kF32toBF16>(be, s, n, src, dst);
        return launch_cast<kF32toF16>(be, s, n, src, dst);
    }
    if (src_dt == QS_BF16) {
        if (dst_dt == QS_F32) return launch_cast<kBF16toF32>(be, s, n, src, dst);
        return launch_cast<kBF16toF16>(be, s, n, src, dst);
    }
    if (dst_dt == QS_F32) return launch_cast<kF16toF32>(be, s, n, src, dst);
    return launch_cast<kF16toBF16>(be, s, n, src, dst);
}
