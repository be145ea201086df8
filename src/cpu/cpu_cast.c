/* src/cpu/cpu_cast.c — element type conversion among f32, bf16 and f16 with
 * round-to-nearest-even, done on the bit patterns (independent of the FPU mode and of
 * hardware conversion instructions). Every source value is first widened exactly to f32,
 * then rounded once to the destination, so bf16 <-> f16 also rounds correctly. NaN stays
 * NaN (quietened, sign and leading payload bits kept); overflow gives ±inf; f16 subnormals
 * are produced and consumed. */
#include "cpu/cpu_backend.h"

#include <string.h>

#include "core/numfmt.h"

/* The element conversions live in core/numfmt.h (one implementation for the whole code base;
 * f32 <-> bf16/f16 go through its array functions, bf16 <-> f16 widen exactly then round). */
static inline uint16_t f32_to_bf16(uint32_t u) { return qs_nf_f32_to_bf16_rne(u); }
static inline uint32_t f32_to_f16(uint32_t u) { return qs_nf_f32_to_f16_rne(u); }
static inline uint32_t f16_to_f32(uint16_t h) { return qs_nf_f16_to_f32(h); }
static inline uint32_t bf16_to_f32(uint16_t h) { return qs_nf_bf16_to_f32(h); }

static bool cast_supported(qs_dtype dt) { return dt == QS_F32 || dt == QS_BF16 || dt == QS_F16; }

/* dst[i] = round_RNE(src[i]) for i < n; src/dst dtypes among f32/bf16/f16 (same dtype copies).
 * dst must not overlap src unless they are the same buffer and dtype. */
qs_status qs_cpu_cast(qs_backend *be, qs_stream *s, int64_t n, const void *src, qs_dtype src_dt, void *dst,
                      qs_dtype dst_dt) {
    QS_TRY(qs_cpu_args_check("cast", n, 2, (const void *[]){src, dst}));
    if (!cast_supported(src_dt) || !cast_supported(dst_dt))
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cast: %s -> %s is not supported by the CPU backend (only f32/bf16/f16)",
                       qs_dtype_name(src_dt), qs_dtype_name(dst_dt));
    if (src_dt == dst_dt) {
        if (n > 0 && src != dst) memcpy(dst, src, (size_t)n * qs_dtype_size(src_dt));
        return QS_OK;
    }
    if (src_dt == QS_F32 && dst_dt == QS_BF16) return qs_f32_to_bf16(n, src, dst, NULL);
    if (src_dt == QS_F32) return qs_f32_to_f16(n, src, dst, NULL);
    if (src_dt == QS_BF16 && dst_dt == QS_F32) return qs_bf16_to_f32(n, src, dst);
    if (src_dt == QS_F16 && dst_dt == QS_F32) return qs_f16_to_f32(n, src, dst);
    const uint16_t *s16 = src;
    uint16_t *d16 = dst;
    if (src_dt == QS_BF16) { /* → f16 */
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d16[i] = (uint16_t)f32_to_f16(bf16_to_f32(s16[i]));
    } else { /* f16 → bf16 */
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d16[i] = f32_to_bf16(f16_to_f32(s16[i]));
    }
    return QS_OK;
}
