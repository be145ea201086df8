/* src/cuda/cuda_quant.cu — defines: quantize of the CUDA backend (contract in core/backend_ops.def;
 * the CPU reference is src/cpu/cpu_quant.c; dequantize: cuda_quant_dequant.cu). Every element goes through the
 * same QS_HD element functions as the CPU (core/numfmt.h, core/quant_int8.h) with the same
 * random word per element (core/quant_sr.h), and every float operation outside them is the
 * CPU's, in the CPU's order, with explicitly rounded intrinsics (__fmul_rn, __fdiv_rn: never
 * contracted into an FMA, never approximated), so the GPU writes the CPU's bits.
 *
 * Scales of S8 and FP8 are chosen on the device, without a host synchronisation:
 *   1. the scales buffer (device memory) is zeroed and used as the amax accumulator: amax
 *      kernel → atomicMax of |x| bit patterns (they order like the magnitudes; NaN patterns
 *      exceed +Inf, so a NaN or Inf anywhere leaves a pattern >= 0x7F800000);
 *   2. a scale kernel reads those bits and overwrites them with the scale the CPU computes
 *      from amax; non-finite amax sets QS_CUDA_FLAG_NONFINITE_QUANTIZE in the backend's
 *      device flag word (reported by the next stream_sync) and stores a NaN scale;
 *   3. the quantize kernel reads the scale from device memory.
 * The CPU fails at once on non-finite input; here the outputs of such a call are poison (the
 * NaN scale) and the error surfaces at stream_sync. */
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/numfmt.h"
#include "core/quant_int8.h"
#include "core/quant_sr.h"
#include "cuda/cuda_quant.cuh"

/* Arguments of the quantize kernels. n = rows·cols elements of src (row-major), element i is
 * (i / cols, i % cols). scales: device memory, S8 one per tensor or per row, FP8 the
 * dequantization multiplier (one); unused otherwise. SR: the word of element i is
 * qs_sr_word(key, counter, offset + i). */
typedef struct qq_args {
    const float *src;
    const float *col_scale; /* NULL or cols entries */
    void *dst;
    const float *scales;
    int64_t n, cols;
    uint64_t key, counter, offset;
    const uint64_t *counter_at; /* NULL or device memory: the counter, read by the kernel (qs_sr) */
    int64_t rows;  /* the tiled kernel's shape (n = rows·cols) */
    void *dst_t;   /* NULL or (cols, rows) row-major: the tiled kernel's transposed copy */
    /* delayed scaling (tiled kernel with AMAX): NULL or where this tensor's amax bits are
     * recorded (atomicMax) — with amax_step_at, amax_out[*amax_step_at mod amax_len] — and the
     * backend's flag word for non-finite input */
    unsigned *amax_out, *flags;
    const int64_t *amax_step_at;
    int amax_len;
} qq_args;

/* ------------------------------------------------------------------ amax and scales */

/* Maximum of m over the block (blockDim.x a multiple of 32, every thread calling); the result
 * is valid in thread 0. */
static __device__ unsigned qq_block_max(unsigned m) {
    __shared__ unsigned part[32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (lane == 0) part[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < (blockDim.x >> 5) ? part[lane] : 0u;
        m = __reduce_max_sync(0xFFFFFFFFu, m);
    }
    __syncthreads(); /* part[] is reused by the caller's next segment */
    return m;
}

/* a·b rounded to nearest, with the NaN the CPU's SSE/AVX multiply gives: a NaN operand comes
 * out quieted with its sign and payload (the first one if both are NaN), where the GPU would
 * give its canonical 0x7fffffff. So NaN inputs keep their bits (and FP8 their sign) as on the CPU. */
static __device__ __forceinline__ float qq_mul_like_x86(float a, float b) {
    uint32_t ua = __float_as_uint(a), ub = __float_as_uint(b);
    if ((ua & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float(ua | 0x00400000u);
    if ((ub & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float(ub | 0x00400000u);
    return __fmul_rn(a, b);
}

/* Amax bits of nseg segments of len elements each (segment s = src[s·len, (s+1)·len)):
 * atomicMax of max_k |x[s·len + k]| (as bits) into bits[s], which the caller zeroed. x is
 * src·col_scale[c] when col_scale is given (the CPU's folded copy, one FP32 product); c = k
 * for per-row segments (len == cols), k % cols for the single per-tensor segment.
 * Grid: x splits a segment, y walks segments (both grid-stride). VEC4 (no col_scale, len a
 * multiple of 4, every segment 16-byte aligned): float4 loads. gate: NULL, or a word that,
 * when non-zero, makes the kernel do nothing (delayed scaling's history maximum). */
template <bool HAS_CS, bool PER_ROW, bool VEC4>
static __global__ void qq_amax_kernel(const float *src, const float *col_scale, int64_t nseg, int64_t len,
                                      int64_t cols, unsigned *bits, const unsigned *gate) {
    if (gate && *gate != 0u) return; /* delayed scaling with a history: no pass needed */
    for (int64_t s = blockIdx.y; s < nseg; s += gridDim.y) {
        const float *x = src + s * len;
        unsigned m = 0;
        const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
        if constexpr (VEC4) {
            const float4 *x4 = reinterpret_cast<const float4 *>(x);
            for (int64_t k = start; k < len / 4; k += stride) {
                const float4 f = x4[k];
                const unsigned b0 = __float_as_uint(f.x) & 0x7FFFFFFFu, b1 = __float_as_uint(f.y) & 0x7FFFFFFFu;
                const unsigned b2 = __float_as_uint(f.z) & 0x7FFFFFFFu, b3 = __float_as_uint(f.w) & 0x7FFFFFFFu;
                m = max(m, max(max(b0, b1), max(b2, b3)));
            }
        } else {
            for (int64_t k = start; k < len; k += stride) {
                float v = x[k];
                if constexpr (HAS_CS) v = __fmul_rn(v, col_scale[PER_ROW ? k : k % cols]);
                unsigned b = __float_as_uint(v) & 0x7FFFFFFFu;
                m = b > m ? b : m;
            }
        }
        m = qq_block_max(m);
        if (threadIdx.x == 0 && m != 0) atomicMax(bits + s, m);
    }
    (void)cols;
    (void)col_scale;
}

/* INT8 scales in place: scales[s] holds amax bits on entry and
 * max(amax / 127, 2^-126) (qs_int8_scale_from_amax) on exit, for s < nseg. */
static __global__ void qq_int8_scale_kernel(float *scales, int64_t nseg, unsigned *flags) {
    for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < nseg; s += (int64_t)gridDim.x * blockDim.x) {
        unsigned b = reinterpret_cast<const unsigned *>(scales)[s];
        float sc;
        if (b >= 0x7F800000u) { /* amax NaN or +Inf: the CPU fails "non-finite amax" */
            atomicOr(flags, (unsigned)QS_CUDA_FLAG_NONFINITE_QUANTIZE);
            sc = __uint_as_float(0x7FC00000u);
        } else {
            float q = __fdiv_rn(__uint_as_float(b), (float)QS_INT8_QMAX);
            sc = q < QS_INT8_MIN_SCALE ? QS_INT8_MIN_SCALE : q;
        }
        scales[s] = sc;
    }
}

/* The CPU's FP8 encoding scale (cpu_quant.c, fp8_encode_scale): the power of two 2^e with
 * e = (int)floorf(log2f(fmt_max / amax)) clamped to [-126, 126]; 1 when amax is 0.
 * floorf(log2f(q)) can differ from q's exponent only just below a power of two, where
 * log2f(q) rounds up to the integer; that depends on the FP32 rounding of log2 q alone, so it
 * is computed in double (error ~1e-16·|log2 q|, far below the distance of log2 q from the
 * FP32 rounding boundary next to an integer) and rounded once to FP32 — the value glibc's
 * log2f (double-precision evaluation, one final rounding) returns there.
 * q = +Inf (amax < fmt_max / FLT_MAX): x86-64's truncating conversion turns floorf(+Inf)
 * into INT_MIN, which the CPU clamps to -126; mirrored here so the bits agree (see the report:
 * the intended value is 126). */
static __device__ float qq_fp8_encode_scale(float fmt_max, float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    float q = __fdiv_rn(fmt_max, amax);
    int e;
    if (__float_as_uint(q) == 0x7F800000u) /* +Inf */
        e = -126;
    else
        e = (int)floorf(__double2float_rn(log2((double)q)));
    if (e > 126) e = 126;
    if (e < -126) e = -126;
    return __uint_as_float((unsigned)(e + 127) << 23);
}

/* FP8 scale in place (one thread): scales[0] holds amax bits on entry and the dequantization
 * multiplier 1 / enc (exact: enc is a power of two) on exit. gate: NULL, or delayed scaling's
 * history maximum (bits), which replaces the amax when non-zero. */
static __global__ void qq_fp8_scale_kernel(float *scales, float fmt_max, unsigned *flags, const unsigned *gate) {
    unsigned b = reinterpret_cast<const unsigned *>(scales)[0];
    if (gate && *gate != 0u) b = *gate;
    float out;
    if (b >= 0x7F800000u) { /* the CPU fails "non-finite amax" */
        atomicOr(flags, (unsigned)QS_CUDA_FLAG_NONFINITE_QUANTIZE);
        out = __uint_as_float(0x7FC00000u);
    } else {
        out = __fdiv_rn(1.0f, qq_fp8_encode_scale(fmt_max, __uint_as_float(b)));
    }
    scales[0] = out;
}

/* Delayed scaling, first step (one warp): amax[len] = the largest of amax[0..len) as bits
 * (0 when nothing is recorded); then, with record, amax[slot] = 0 (slot = *step_at mod len
 * when step_at is set), ready for this call's atomicMax. History entries are finite and >= 0,
 * so their bits order like their values. */
static __global__ void qq_history_kernel(float *amax, int len, int slot, const int64_t *step_at, bool record) {
    unsigned *bits = reinterpret_cast<unsigned *>(amax);
    if (step_at) slot = (int)(*step_at % len);
    unsigned m = 0;
    for (int k = (int)threadIdx.x; k < len; k += 32) m = max(m, bits[k]);
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (threadIdx.x == 0) {
        bits[len] = m;
        if (record) bits[slot] = 0u;
    }
}

/* ------------------------------------------------------------------ quantize kernels */

/* The per-tensor multiplier read once per thread: S8 inv = fl(1/scale) (qs_int8_quantize),
 * FP8 enc = 1 / scales[0] (exact; the CPU's encoding scale). 0 where unused. */
template <qq_fmt F, bool PER_ROW>
static __device__ __forceinline__ float qq_tensor_mul(const float *scales) {
    if constexpr ((F == QQ_S8 && !PER_ROW) || F == QQ_E4M3 || F == QQ_E5M2)
        return __fdiv_rn(1.0f, scales[0]);
    else
        return 0.0f;
}

/* Row whose inverse scale a thread holds (per-row S8): the CPU's 1.0f / scales[r]. */
typedef struct qq_row_cache {
    int64_t row;
    float inv;
} qq_row_cache;

/* The 1-byte code of x (already multiplied by col_scale) in format F (S8, E4M3, E5M2): mul is
 * the tensor's multiplier (qq_tensor_mul, or the row's for per-row S8), rnd the random word
 * when SR. */
template <qq_fmt F, bool SR>
static __device__ __forceinline__ uint8_t qq_byte(float x, float mul, uint32_t rnd) {
    if constexpr (F == QQ_S8) {
        return (uint8_t)(SR ? qs_q8_sr(x, mul, rnd) : qs_q8_rne(x, mul));
    } else if constexpr (F == QQ_E4M3) {
        return qs_nf_f32_to_fp8(qs_nf_f32_bits(qq_mul_like_x86(x, mul)), rnd, SR ? 1 : 0, QS_E4M3_M, QS_E4M3_EMIN,
                                QS_E4M3_MAXBITS, QS_E4M3_NAN);
    } else {
        return qs_nf_f32_to_fp8(qs_nf_f32_bits(qq_mul_like_x86(x, mul)), rnd, SR ? 1 : 0, QS_E5M2_M, QS_E5M2_EMIN,
                                QS_E5M2_MAXBITS, QS_E5M2_NAN);
    }
}

/* Quantize element i of a (random word rnd when SR). */
template <qq_fmt F, bool SR, bool HAS_CS, bool PER_ROW>
static __device__ __forceinline__ void qq_quant_one(const qq_args &a, int64_t i, uint32_t rnd, float mul,
                                                    qq_row_cache &rc) {
    int64_t c = 0;
    if constexpr (HAS_CS || PER_ROW) {
        int64_t r = i / a.cols;
        c = i - r * a.cols;
        if constexpr (PER_ROW) {
            if (r != rc.row) {
                rc.row = r;
                rc.inv = __fdiv_rn(1.0f, a.scales[r]);
            }
            mul = rc.inv;
        }
    }
    float x = a.src[i];
    if constexpr (HAS_CS) x = qq_mul_like_x86(x, a.col_scale[c]);
    if constexpr (F == QQ_F32) {
        static_cast<float *>(a.dst)[i] = x;
    } else if constexpr (F == QQ_BF16) {
        uint32_t u = qs_nf_f32_bits(x);
        static_cast<uint16_t *>(a.dst)[i] = SR ? qs_nf_f32_to_bf16_sr(u, rnd) : qs_nf_f32_to_bf16_rne(u);
    } else if constexpr (F == QQ_F16) {
        uint32_t u = qs_nf_f32_bits(x);
        static_cast<uint16_t *>(a.dst)[i] = (uint16_t)(SR ? qs_nf_f32_to_f16_sr(u, rnd) : qs_nf_f32_to_f16_rne(u));
    } else {
        static_cast<uint8_t *>(a.dst)[i] = qq_byte<F, SR>(x, mul, rnd);
    }
    (void)c;
    (void)rnd;
    (void)mul;
}

/* The stochastic-rounding counter of the call: read from device memory when a.counter_at is set. */
static __device__ __forceinline__ uint64_t qq_counter(const qq_args &a) { return a.counter_at ? *a.counter_at : a.counter; }

/* Round to nearest even: one element per thread and step (grid-stride over a.n). */
template <qq_fmt F, bool HAS_CS, bool PER_ROW>
static __global__ void qq_quant_rne_kernel(qq_args a) {
    const float mul = qq_tensor_mul<F, PER_ROW>(a.scales);
    qq_row_cache rc = {-1, 0.0f};
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x)
        qq_quant_one<F, false, HAS_CS, PER_ROW>(a, i, 0u, mul, rc);
}

/* Stochastic rounding: one Philox block per thread and step. Unit t covers group
 * g = offset/64 + t/16, lane l = t % 16, i.e. the global indices j = 64g + 16w + l (w < 4)
 * whose words qs_sr_block returns together; element i = j - offset where 0 <= i < n. */
template <qq_fmt F, bool HAS_CS, bool PER_ROW>
static __global__ void qq_quant_sr_kernel(qq_args a, uint64_t units) {
    const float mul = qq_tensor_mul<F, PER_ROW>(a.scales);
    qq_row_cache rc = {-1, 0.0f};
    const uint64_t g0 = a.offset >> 6, counter = qq_counter(a);
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < units; t += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t g = g0 + (t >> 4);
        const uint32_t l = (uint32_t)(t & 15u);
        uint32_t words[4];
        qs_sr_block(a.key, counter, g, l, words);
#pragma unroll
        for (uint32_t w = 0; w < 4; w++) {
            uint64_t i = (g << 6) + 16u * w + l - a.offset; /* wraps to >= 2^64 - 63 before the first */
            if (i < (uint64_t)a.n) qq_quant_one<F, true, HAS_CS, PER_ROW>(a, (int64_t)i, words[w], mul, rc);
        }
    }
}

#define QQ_TILE 64

/* The tiled kernel's loads of one thread: v[p][k] = src[gr·cols + gc + k] for the tile rows
 * gr = gr0 + 16p (p < QQ_TILE/16), k < 4, 0 outside (rows, cols); one float4 per row when VEC
 * (cols % 4 == 0, 16-byte aligned rows) and the 4 columns are inside. */
template <bool VEC>
static __device__ __forceinline__ void qq_tile_load(const float *src, int64_t rows, int64_t cols, int64_t gr0,
                                                    int64_t gc, float (*v)[4]) {
#pragma unroll
    for (int p = 0; p < QQ_TILE / 16; p++) {
        const int64_t gr = gr0 + 16 * p;
        const float *x = src + gr * cols + gc;
        if (VEC && gr < rows && gc + 3 < cols) {
            const float4 f = *reinterpret_cast<const float4 *>(x);
            v[p][0] = f.x, v[p][1] = f.y, v[p][2] = f.z, v[p][3] = f.w;
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) v[p][k] = gr < rows && gc + k < cols ? x[k] : 0.0f;
        }
    }
}

/* The tiled kernel's transposed copy of the codes of tile (r0, c0) into dst_t (cols, rows): the
 * thread (tr, l) writes source columns 16p + tr, rows 4l .. 4l+3, as one 4-byte store when vec_t
 * (rows % 4 == 0, dst_t 4-byte aligned) and the 4 rows are inside. */
static __device__ __forceinline__ void qq_tile_store_t(const uint8_t (*tile)[QQ_TILE + 4], uint8_t *dst_t, int64_t rows,
                                                       int64_t cols, int64_t r0, int64_t c0, int tr, int l,
                                                       bool vec_t) {
#pragma unroll
    for (int p = 0; p < QQ_TILE / 16; p++) {
        const int cc = 16 * p + tr;
        const int64_t gcc = c0 + cc, gr = r0 + 4 * l;
        if (gcc >= cols || gr >= rows) continue;
        uint8_t *out = dst_t + gcc * rows + gr;
        if (vec_t && gr + 3 < rows) {
            const uint32_t b = (uint32_t)tile[4 * l][cc] | (uint32_t)tile[4 * l + 1][cc] << 8 |
                               (uint32_t)tile[4 * l + 2][cc] << 16 | (uint32_t)tile[4 * l + 3][cc] << 24;
            *reinterpret_cast<uint32_t *>(out) = b;
        } else {
            for (int k = 0; k < 4 && gr + k < rows; k++) out[k] = tile[4 * l + k][cc];
        }
    }
}

/* Tiled quantization of the 1-byte per-tensor formats (S8, E4M3, E5M2): QQ_TILE × QQ_TILE
 * tiles of the (rows, cols) source, QQ_THREADS threads each (any shape: edge tiles are
 * bounds-checked). Every element goes through qq_byte with the word of its global index
 * (qs_sr_word), so the codes are those of qq_quant_one. Thread t handles tile rows 16p + t/16
 * (p < 4), 4 consecutive columns 4·(t%16) .. +3 each: one float4 load (VEC: cols % 4 == 0 and
 * 16-byte aligned rows) or four scalar ones, all issued before any conversion, and one 4-byte
 * store to dst; the codes also go to a shared tile from which, when a.dst_t is set, they are
 * written transposed (4 source rows per thread and store).
 * SR, GROUPED (cols and offset multiples of 64): a 64-element tile row is one Philox group,
 * whose 16 blocks the row's 16 threads compute once (block l holds the words of columns
 * l + 16w), after issuing their loads, and exchange through shared memory; otherwise one
 * block per element.
 * AMAX (delayed scaling): the amax of what was quantized is found on the way — recorded into
 * a.amax_out (when set) and, when non-finite, reported through a.flags. */
template <qq_fmt F, bool SR, bool HAS_CS, bool GROUPED, bool VEC, bool AMAX>
static __global__ void __launch_bounds__(QQ_THREADS) qq_quant_tile_kernel(qq_args a) {
    __shared__ __align__(16) uint8_t tile[QQ_TILE][QQ_TILE + 4];
    __shared__ uint32_t words[GROUPED ? QQ_TILE : 1][GROUPED ? QQ_TILE + 1 : 1];
    const float mul = qq_tensor_mul<F, false>(a.scales);
    const int64_t rows = a.rows, cols = a.cols;
    const uint64_t counter = SR ? qq_counter(a) : 0u;
    const int64_t tiles_c = (cols + QQ_TILE - 1) / QQ_TILE, ntiles = (rows + QQ_TILE - 1) / QQ_TILE * tiles_c;
    const int tr = (int)(threadIdx.x >> 4), l = (int)(threadIdx.x & 15u);
    uint8_t *dst = static_cast<uint8_t *>(a.dst), *dst_t = static_cast<uint8_t *>(a.dst_t);
    const bool vec_t = rows % 4 == 0 && (uintptr_t)dst_t % 4 == 0;
    unsigned amax = 0; /* AMAX: bits of the largest |x| this thread quantized */
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int64_t r0 = t / tiles_c * QQ_TILE, c0 = t % tiles_c * QQ_TILE;
        float v[QQ_TILE / 16][4];
        const int c = 4 * l;
        const int64_t gc = c0 + c;
        qq_tile_load<VEC>(a.src, rows, cols, r0 + tr, gc, v); /* loads first: in flight while the generator runs */
        if constexpr (SR && GROUPED) {
#pragma unroll
            for (int p = 0; p < QQ_TILE / 16; p++) {
                const int r = 16 * p + tr;
                if (r0 + r >= rows) continue;
                uint32_t w4[4];
                qs_sr_block(a.key, counter, (a.offset + (uint64_t)((r0 + r) * cols + c0)) >> 6, (uint32_t)l, w4);
#pragma unroll
                for (int w = 0; w < 4; w++) words[r][l + 16 * w] = w4[w];
            }
            __syncthreads();
        }
#pragma unroll
        for (int p = 0; p < QQ_TILE / 16; p++) {
            const int r = 16 * p + tr;
            const int64_t gr = r0 + r;
            uint32_t code = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float x = v[p][k];
                if constexpr (HAS_CS) x = gc + k < cols ? qq_mul_like_x86(x, a.col_scale[gc + k]) : 0.0f;
                if constexpr (AMAX) amax = max(amax, __float_as_uint(x) & 0x7FFFFFFFu); /* out of range: 0 */
                uint32_t rnd = 0;
                if constexpr (SR && GROUPED) rnd = words[r][c + k];
                if constexpr (SR && !GROUPED) rnd = qs_sr_word_inline(a.key, counter, a.offset + (uint64_t)(gr * cols + gc + k));
                code |= (uint32_t)qq_byte<F, SR>(x, mul, rnd) << (8 * k);
            }
            *reinterpret_cast<uint32_t *>(&tile[r][c]) = code;
            if (gr >= rows || gc >= cols) continue;
            uint8_t *out = dst + gr * cols + gc;
            if (VEC && gc + 3 < cols) {
                *reinterpret_cast<uint32_t *>(out) = code;
            } else {
                for (int k = 0; k < 4 && gc + k < cols; k++) out[k] = (uint8_t)(code >> (8 * k));
            }
        }
        __syncthreads();
        if (dst_t) {
            qq_tile_store_t(tile, dst_t, rows, cols, r0, c0, tr, l, vec_t);
            __syncthreads();
        }
    }
    if constexpr (AMAX) {
        amax = qq_block_max(amax);
        if (threadIdx.x == 0) {
            if (amax >= 0x7F800000u) atomicOr(a.flags, (unsigned)QS_CUDA_FLAG_NONFINITE_QUANTIZE);
            else if (a.amax_out && amax)
                atomicMax(a.amax_step_at ? a.amax_out + *a.amax_step_at % a.amax_len : a.amax_out, amax);
        }
    }
}

/* Launch the tiled kernel of format F (1-byte, per-tensor) for the runtime choices. */
template <qq_fmt F>
static qs_status qq_launch_tiles(qs_backend *be, cudaStream_t st, const qq_args &a, bool sr) {
    const uint64_t ntiles = (uint64_t)((a.rows + QQ_TILE - 1) / QQ_TILE) * (uint64_t)((a.cols + QQ_TILE - 1) / QQ_TILE);
    const int sms = qs_cuda_be(be)->props.multiProcessorCount;
    const uint64_t cap = (uint64_t)(sms > 0 ? sms : 1) * QQ_BLOCKS_PER_SM;
    const unsigned grid = (unsigned)(ntiles < cap ? ntiles : cap);
    const bool cs = a.col_scale != NULL, grouped = a.cols % 64 == 0 && a.offset % 64 == 0;
    const bool vec = a.cols % 4 == 0 && (uintptr_t)a.src % 16 == 0 && (uintptr_t)a.dst % 4 == 0;
    const bool amax = a.flags != NULL; /* delayed scaling (FP8 only) */
#define QQ_TILES_A(SR_, CS_, G_, A_)                                                                             \
    (vec ? qq_quant_tile_kernel<F, SR_, CS_, G_, true, A_><<<grid, QQ_THREADS, 0, st>>>(a)                     \
         : qq_quant_tile_kernel<F, SR_, CS_, G_, false, A_><<<grid, QQ_THREADS, 0, st>>>(a))
#define QQ_TILES(SR_, CS_, G_) (amax && F != QQ_S8 ? QQ_TILES_A(SR_, CS_, G_, F != QQ_S8) : QQ_TILES_A(SR_, CS_, G_, false))
    if (!sr) {
        if (cs) QQ_TILES(false, true, false);
        else QQ_TILES(false, false, false);
    } else if (grouped) {
        if (cs) QQ_TILES(true, true, true);
        else QQ_TILES(true, false, true);
    } else {
        if (cs) QQ_TILES(true, true, false);
        else QQ_TILES(true, false, false);
    }
#undef QQ_TILES
#undef QQ_TILES_A
    return qs_cuda_check_launch("quantize: tiled kernel");
}

/* Launch the quantize kernel of format F for the runtime choices (per-row only for S8). */
template <qq_fmt F, bool HAS_CS, bool PER_ROW>
static qs_status qq_launch3(qs_backend *be, cudaStream_t st, const qq_args &a, bool sr) {
    if (sr) {
        uint64_t g0 = a.offset >> 6, g1 = (a.offset + (uint64_t)a.n - 1u) >> 6;
        uint64_t units = (g1 - g0 + 1u) * 16u;
        qq_quant_sr_kernel<F, HAS_CS, PER_ROW><<<qq_grid(be, units), QQ_THREADS, 0, st>>>(a, units);
        return qs_cuda_check_launch("quantize: stochastic-rounding kernel");
    }
    qq_quant_rne_kernel<F, HAS_CS, PER_ROW><<<qq_grid(be, (uint64_t)a.n), QQ_THREADS, 0, st>>>(a);
    return qs_cuda_check_launch("quantize: round-to-nearest kernel");
}

/* Launch the element-wise quantize kernel of format F (per_row only for S8). */
template <qq_fmt F>
static qs_status qq_launch(qs_backend *be, cudaStream_t st, const qq_args &a, bool per_row, bool sr) {
    bool cs = a.col_scale != NULL;
    if constexpr (F == QQ_S8) {
        if (per_row) return cs ? qq_launch3<F, true, true>(be, st, a, sr) : qq_launch3<F, false, true>(be, st, a, sr);
    }
    (void)per_row;
    return cs ? qq_launch3<F, true, false>(be, st, a, sr) : qq_launch3<F, false, false>(be, st, a, sr);
}

/* A 1-byte per-tensor quantization: the tiled kernel; a flat tensor (fewer rows than a tile,
 * no transposed copy, no col_scale) is viewed as rows of 64 when it divides (the element
 * indices, hence the codes, are the same), else goes element by element (except with delayed
 * scaling, whose amax the tiled kernel finds). */
template <qq_fmt F>
static qs_status qq_launch_bytes(qs_backend *be, cudaStream_t st, qq_args a, bool sr) {
    if (a.rows < QQ_TILE && !a.dst_t && !a.col_scale) {
        if (a.n % 64 == 0) {
            a.rows = a.n / 64;
            a.cols = 64;
        } else if (!a.flags) { /* (delayed scaling needs the tiled kernel's amax) */
            return qq_launch<F>(be, st, a, false, sr);
        }
    }
    return qq_launch_tiles<F>(be, st, a, sr);
}

/* Amax of the (rows, cols) input — per row into scales[0..rows), else into scales[0] — as
 * bits, after zeroing them (step 1 of the header comment). */
static qs_status qq_amax(qs_backend *be, cudaStream_t st, const qq_args &a, int64_t rows, bool per_row,
                         float *scales, const unsigned *gate) {
    const int64_t nseg = per_row ? rows : 1, len = per_row ? a.cols : a.n;
    unsigned *bits = reinterpret_cast<unsigned *>(scales);
    QS_CUDA_TRY(cudaMemsetAsync(bits, 0, (size_t)nseg * sizeof(unsigned), st));
    /* short rows: a block of just enough warps per row */
    unsigned threads = len >= QQ_THREADS ? QQ_THREADS : (unsigned)((len + 31) / 32 * 32);
    int sms = qs_cuda_be(be)->props.multiProcessorCount;
    uint64_t target = (uint64_t)(sms > 0 ? sms : 1) * QQ_BLOCKS_PER_SM;
    uint64_t gy = (uint64_t)nseg < 65535u ? (uint64_t)nseg : 65535u;
    uint64_t per_seg = ((uint64_t)len + threads * 4u - 1u) / (threads * 4u); /* >= 4 elements per thread */
    uint64_t gx_cap = target / gy > 0 ? target / gy : 1u;
    dim3 grid((unsigned)(per_seg < gx_cap ? per_seg : gx_cap), (unsigned)gy);
    bool cs = a.col_scale != NULL;
    const bool vec4 = !cs && len % 4 == 0 && (uintptr_t)a.src % 16 == 0;
    if (per_row) {
        if (cs) qq_amax_kernel<true, true, false><<<grid, threads, 0, st>>>(a.src, a.col_scale, nseg, len, a.cols, bits, gate);
        else if (vec4) qq_amax_kernel<false, true, true><<<grid, threads, 0, st>>>(a.src, a.col_scale, nseg, len, a.cols, bits, gate);
        else qq_amax_kernel<false, true, false><<<grid, threads, 0, st>>>(a.src, a.col_scale, nseg, len, a.cols, bits, gate);
    } else {
        if (cs) qq_amax_kernel<true, false, false><<<grid, threads, 0, st>>>(a.src, a.col_scale, nseg, len, a.cols, bits, gate);
        else if (vec4) qq_amax_kernel<false, false, true><<<grid, threads, 0, st>>>(a.src, a.col_scale, nseg, len, a.cols, bits, gate);
        else qq_amax_kernel<false, false, false><<<grid, threads, 0, st>>>(a.src, a.col_scale, nseg, len, a.cols, bits, gate);
    }
    return qs_cuda_check_launch("quantize: amax kernel");
}

/* ------------------------------------------------------------------ backend ops */

/* quantize (core/backend_ops.def): src (rows, cols) FP32 device memory → dst in dt; scales device
 * memory (S8: 1 or rows entries, FP8: 1), written on the stream; col_scale NULL or cols
 * device floats; sr NULL (RNE) or a host descriptor of the stream. Argument errors are
 * reported at once (as the CPU does); non-finite S8/FP8 input at the next stream_sync. */
qs_status qs_cuda_quantize(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *src,
                           const float *col_scale, qs_dtype dt, void *dst, float *scales, bool per_row,
                           const qs_sr *sr, void *dst_t, const qs_quant_delayed *delayed) {
    if (rows < 0 || cols < 0)
        return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: negative shape (%lld, %lld)", (long long)rows, (long long)cols);
    if (cols > 0 && rows > INT64_MAX / cols)
        return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: shape (%lld, %lld) overflows int64", (long long)rows,
                       (long long)cols);
    const int64_t n = rows * cols;
    if (n == 0) return QS_OK;
    if (!src || !dst) return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: NULL src or dst");
    if (qq_scaled(dt) && !scales) return QS_FAIL(QS_ERR_INVALID_ARG, "quantize to %s: NULL scales", qs_dtype_name(dt));
    if (per_row && dt != QS_S8)
        return QS_FAIL(QS_ERR_INVALID_ARG, "quantize: per-row scales exist only for s8 (got %s)", qs_dtype_name(dt));
    QS_TRY(qs_quantize_dst_t_check(dt, per_row, dst_t));
    QS_TRY(qs_quantize_delayed_check(dt, delayed));
    cudaStream_t st = qq_stream(be, s);
    unsigned *flags = qs_cuda_be(be)->flags;
    qq_args a;
    a.src = src;
    a.col_scale = col_scale;
    a.dst = dst;
    a.scales = scales;
    a.n = n;
    a.cols = cols;
    a.key = sr ? sr->key : 0u;
    a.counter = sr ? sr->counter : 0u;
    a.counter_at = sr ? sr->counter_at : NULL;
    a.offset = sr ? sr->offset : 0u;
    a.rows = rows;
    a.dst_t = dst_t;
    a.amax_out = NULL;
    a.amax_step_at = NULL;
    a.amax_len = 1;
    a.flags = NULL;
    const bool use_sr = sr != NULL;
    switch (dt) {
    case QS_F32: /* a copy (of src·col_scale); no rounding, so no SR */
        if (!col_scale) {
            QS_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, st));
            return QS_OK;
        }
        return qq_launch<QQ_F32>(be, st, a, false, false);
    case QS_BF16: return qq_launch<QQ_BF16>(be, st, a, false, use_sr);
    case QS_F16: return qq_launch<QQ_F16>(be, st, a, false, use_sr);
    case QS_S8: {
        QS_TRY(qq_amax(be, st, a, rows, per_row, scales, NULL));
        const int64_t nseg = per_row ? rows : 1;
        qq_int8_scale_kernel<<<qq_grid(be, (uint64_t)nseg), QQ_THREADS, 0, st>>>(scales, nseg, flags);
        QS_TRY(qs_cuda_check_launch("quantize to s8: scale kernel"));
        if (!per_row) return qq_launch_bytes<QQ_S8>(be, st, a, use_sr);
        return qq_launch<QQ_S8>(be, st, a, per_row, use_sr);
    }
    case QS_F8E4M3:
    case QS_F8E5M2: {
        const unsigned *gate = NULL; /* delayed: the history's maximum, amax[len] */
        if (delayed) {
            qq_history_kernel<<<1, 32, 0, st>>>(delayed->amax, delayed->len, delayed->slot, delayed->step_at,
                                                 delayed->record);
            QS_TRY(qs_cuda_check_launch("quantize to fp8: amax history kernel"));
            gate = reinterpret_cast<const unsigned *>(delayed->amax + delayed->len);
            a.amax_out = !delayed->record  ? NULL
                         : delayed->step_at ? reinterpret_cast<unsigned *>(delayed->amax)
                                            : reinterpret_cast<unsigned *>(delayed->amax + delayed->slot);
            a.amax_step_at = delayed->step_at;
            a.amax_len = delayed->len;
            a.flags = flags;
        }
        QS_TRY(qq_amax(be, st, a, rows, false, scales, gate));
        qq_fp8_scale_kernel<<<1, 1, 0, st>>>(scales, qs_fp8_max(dt), flags, gate);
        QS_TRY(qs_cuda_check_launch("quantize to fp8: scale kernel"));
        return dt == QS_F8E4M3 ? qq_launch_bytes<QQ_E4M3>(be, st, a, use_sr)
                               : qq_launch_bytes<QQ_E5M2>(be, st, a, use_sr);
    }
    default:
        return QS_FAIL(QS_ERR_UNSUPPORTED, "quantize: no conversion to %s", qs_dtype_name(dt));
    }
}
