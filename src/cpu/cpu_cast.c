/* src/cpu/cpu_cast.c — element type conversion among f32, bf16 and f16 with
 * round-to-nearest-even, done on the bit patterns (independent of the FPU mode and of
 * hardware conversion instructions). Every source value is first widened exactly to f32,
 * then rounded once to the destination, so bf16 <-> f16 also rounds correctly. NaN stays
 * NaN (quietened, sign and leading payload bits kept); overflow gives ±inf; f16 subnormals
 * are produced and consumed. */
#include "cpu/cpu_backend.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f32 bits → bf16 bits, RNE. */
static inline uint16_t f32_to_bf16(uint32_t u) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* f32 bits → f16 bits, RNE. */
static inline uint16_t f32_to_f16(uint32_t u) {
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* quiet NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  /* >= 65520 rounds to inf */
    if (a >= 0x38800000u) {                                   /* normal f16 (>= 2^-14) */
        uint32_t v = a - 0x38000000u;                         /* rebias exponent 127 → 15 */
        return (uint16_t)(sign | ((v + 0x0FFFu + ((v >> 13) & 1u)) >> 13));
    }
    if (a <= 0x33000000u) return (uint16_t)sign;              /* <= 2^-25 rounds to ±0 */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;                 /* subnormal: value/2^-24 */
    uint32_t shift = 126u - (a >> 23);                        /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    r += (rem > half) | ((rem == half) & (r & 1u));
    return (uint16_t)(sign | r);
}

/* f16 bits → f32 bits (exact). */
static inline uint32_t f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return sign | 0x7F800000u | (m << 13);
    if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
    return sign | f32_bits((float)m * 0x1p-24f); /* zero or subnormal, exact */
}

static inline uint32_t load_bits(const void *src, qs_dtype dt, int64_t i) {
    if (dt == QS_F32) return ((const uint32_t *)src)[i];
    if (dt == QS_BF16) return (uint32_t)((const uint16_t *)src)[i] << 16;
    return f16_to_f32(((const uint16_t *)src)[i]);
}

static inline void store_bits(void *dst, qs_dtype dt, int64_t i, uint32_t u) {
    if (dt == QS_F32)
        ((uint32_t *)dst)[i] = u;
    else if (dt == QS_BF16)
        ((uint16_t *)dst)[i] = f32_to_bf16(u);
    else
        ((uint16_t *)dst)[i] = f32_to_f16(u);
}

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
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) store_bits(dst, dst_dt, i, load_bits(src, src_dt, i));
    return QS_OK;
}
