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


/* The converters are branch-free (every case computed, then selected with masks) so that
 * the loops below vectorise. sel(c, a, b) = c ? a : b for c in {0, 1}. */
static inline uint32_t sel(uint32_t c, uint32_t a, uint32_t b) { return b ^ ((a ^ b) & (0u - c)); }

/* f32 bits → bf16 bits, RNE. */
static inline uint16_t f32_to_bf16(uint32_t u) {
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t qnan = (u >> 16) | 0x0040u;
    return (uint16_t)sel((u & 0x7FFFFFFFu) > 0x7F800000u, qnan, rounded);
}

/* f32 bits → f16 bits (in the low half), RNE. */
static inline uint32_t f32_to_f16(uint32_t u) {
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    uint32_t qnan = 0x7E00u | ((a >> 13) & 0x3FFu);
    uint32_t v = a - 0x38000000u;                              /* rebias exponent 127 → 15 */
    uint32_t normal = (v + 0x0FFFu + ((v >> 13) & 1u)) >> 13;  /* used for a >= 2^-14 */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;                  /* subnormal: value / 2^-24 */
    uint32_t e = a >> 23;
    uint32_t shift = sel(e >= 125u, 1u, sel(e < 95u, 31u, 126u - e)); /* 14..24 where used */
    uint32_t half = 1u << (shift - 1u);
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u);
    uint32_t sub = r + sel(rem > half, 1u, sel(rem == half, r & 1u, 0u));
    uint32_t mag = sel(a <= 0x33000000u, 0u, sub);   /* <= 2^-25 rounds to ±0 */
    mag = sel(a >= 0x38800000u, normal, mag);         /* normal f16 (>= 2^-14) */
    mag = sel(a >= 0x477FF000u, 0x7C00u, mag);        /* >= 65520 rounds to inf */
    mag = sel(a > 0x7F800000u, qnan, mag);
    return sign | mag;
}

/* f16 bits → f32 bits (exact). */
static inline uint32_t f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t special = 0x7F800000u | (m << 13);
    uint32_t normal = ((e + 112u) << 23) | (m << 13);
    uint32_t sub = f32_bits((float)m * 0x1p-24f); /* zero or subnormal, exact */
    return sign | sel(e == 0x1Fu, special, sel(e != 0, normal, sub));
}

static inline uint32_t bf16_to_f32(uint16_t h) { return (uint32_t)h << 16; }

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
    const uint32_t *s32 = src;
    const uint16_t *s16 = src;
    uint32_t *d32 = dst;
    uint16_t *d16 = dst;
    if (src_dt == QS_F32 && dst_dt == QS_BF16) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d16[i] = f32_to_bf16(s32[i]);
    } else if (src_dt == QS_F32) { /* → f16 */
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d16[i] = (uint16_t)f32_to_f16(s32[i]);
    } else if (src_dt == QS_BF16 && dst_dt == QS_F32) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d32[i] = bf16_to_f32(s16[i]);
    } else if (src_dt == QS_F16 && dst_dt == QS_F32) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d32[i] = f16_to_f32(s16[i]);
    } else if (src_dt == QS_BF16) { /* → f16 */
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d16[i] = (uint16_t)f32_to_f16(bf16_to_f32(s16[i]));
    } else { /* f16 → bf16 */
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) d16[i] = f32_to_bf16(f16_to_f32(s16[i]));
    }
    return QS_OK;
}
