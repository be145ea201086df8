/* tests/test_cuda_ops.c — the CUDA backend (src/cuda), op by op, against the CPU backend run on
 * the very same inputs. Runs on the GPU machine; elsewhere (a build without CUDA, or no usable
 * device) it says why and exits 77, which ctest reports as SKIPPED. With QS_REQUIRE_GPU=1 (set
 * by scripts/gpu-suite.sh) a missing GPU is a failure instead. QS_CUDA_DEVICE picks the
 * device (default 0); QS_GPU_TESTS_JSON=FILE writes every case's figure to FILE as JSON.
 *
 * Method (the harness, shared with test_cuda_transformer_ops.c: tests/support/gpu_harness.h)
 *  - GEMM-like ops (linear, conv): random FP32 tensors are quantized ONCE, by the CPU backend's
 *    quantize op, into the plan's operand dtypes; the quantized codes and their scales are
 *    copied to the GPU, so both backends multiply identical operands and the comparison
 *    isolates the GEMM (GPU quantization is tested separately, for bit identity). TF32 has no
 *    CPU counterpart: the reference is the CPU's FP32 plan on the same FP32 operands. INT8 is
 *    expected to be unsupported on the GPU for now: its plans must fail cleanly.
 *  - Every GPU output lives in an offset view into a larger allocation: GUARD bytes of a
 *    pattern before and after it are checked after the op (an overrun or a write through a
 *    wrong offset fails the test), and the view itself is filled with 0xFF bytes before an op
 *    that overwrites it (NaN for floats, -1 for indices), so an element the op forgets to write
 *    shows up as a non-finite mismatch. Every allocation is freed by the per-test teardown, which
 *    also checks that the backend's memory_stats in_use is back at its starting value.
 *  - Every comparison prints one line with its measured figure (NMSE, worst error against the
 *    tolerance, or bit identity), so the run's log documents the numbers; failures are counted
 *    and each test fails at its end, after all its cases have been printed.
 *
 * NMSE budgets of the GEMM-like ops (derived; not tuned to pass)
 *   NMSE = Σ(g−c)² / Σc² over the elements where the CPU result c is finite; non-finite CPU
 *   elements must be non-finite of the same kind on the GPU, finite ones finite. u = 2^-24.
 *   Operands are zero-mean (uniform), K is the reduction length of the output (C·R·S for a
 *   conv forward, K·⌈R/sh⌉·⌈S/sw⌉ for its backward-data, N·P·Q for backward-weights).
 *  (a) FP32 accumulation. Addition k of a K-term dot product errs by at most ulp(s_k)/2 under
 *      round-to-nearest or < ulp(s_k) under truncation (tensor cores align and truncate their
 *      addends: Fasi, Higham, Mikaitis, Pranesh, PeerJ CS 2021), with ulp(s) ≤ 2u|s|: mean
 *      square ≤ u²s²/3 (RNE) or ≤ 4u²s²/3 (RZ). For zero-mean terms E s_k² = k·σ², so
 *      Σ_k E s_k² ≈ K²σ²/2 against a result variance K·σ²; the errors have random signs and
 *      are uncorrelated, so one implementation's relative MSE is ≤ u²K/6 (RNE) or (2/3)u²K
 *      (RZ), and CPU vs GPU differ by ≤ (1/6 + 2/3)u²K < u²K. Rounded products (no FMA), the
 *      bias and the accumulate add give a few more roundings:   A32(K) = u²·(K + 2).
 *  (b) FP8 on Hopper tensor cores is NOT accumulated in IEEE FP32: the addends of an MMA are
 *      aligned and truncated to about 13 fraction bits (DeepSeek-V3 technical report §3.3.2:
 *      "around 14 bits" retained on H800). cuBLASLt's default (CUBLASLT_MATMUL_DESC_FAST_ACCUM
 *      = 0) promotes partial sums to FP32 periodically; with a promotion interval of ≤ 128
 *      products (CUTLASS's default: every 4 MMAs of k = 32), argument (a) with 2^-13 in place
 *      of u gives, per chunk and hence relative to the whole sum:
 *                                                         A8(K) = 2^-26·(min(K, 128) + 2).
 *      A backend that enables fast accumulation (no promotion) errs ∝ K and fails at large K
 *      on purpose: that is a precision decision to be taken explicitly, not by accident.
 *  (c) TF32: the GPU rounds each FP32 operand to 10 fraction bits before multiplying (the CPU
 *      reference does not). Relative operand error: |δ| ≤ 2^-11 (RNE, mean 0) or
 *      δ ∈ (−2^-10, 0] (truncation: mean μ with |μ| ≤ 2^-11, mean square ≤ (2^-10)²/3, both
 *      worst for significands near 1). Product k carries t_k = δx + δw, so the output's error
 *      is Σ t_k·p_k: its zero-mean part is uncorrelated across sign-random products and the
 *      common mean shrinks y as a whole, giving NMSE = E[t²] = E δx² + E δw² + 2·μ² ≤
 *      2·2^-20/3 + 2·2^-22:                           I_tf32 = (7/6)·2^-20 ≈ 1.1e-6.
 *      (Checked by emulating TF32 on the CPU: RNE 6.5e-8, truncation 4e-7..7e-7.)
 *  (d) BF16, FP16 and FP8 operands are identical on both sides and exactly representable, and
 *      their products are exact in FP32 (8×8-, 11×11-, 4×4-bit significands ≤ 24 bits), so
 *      only the accumulation differs: (a), plus (b) for FP8.
 *  (e) Output rounding. cuBLASLt writes an FP32 D for every input type: a Linear has none.
 *      cuDNN's legacy convolution configurations need x, w, y of one type (the BF16/FP16
 *      "PSEUDO_*_CONFIG"s), so a conv may produce BF16/FP16 and widen it; an FP8 conv may run as
 *      BF16 or FP16 on widened operands (both hold every E4M3/E5M2 value exactly). One RNE
 *      rounding to p fraction bits: error² ≤ ulp²/12 ≤ 2^-2p·y²/12, hence for convs
 *      O = 2^-14/12 ≈ 5.1e-6 (BF16, and FP8 taking the coarser format), 2^-20/12 ≈ 7.9e-8
 *      (FP16), 0 otherwise.
 *  (f) cuDNN may pick Winograd or FFT algorithms for a conv, whose transforms round beyond
 *      direct summation: convs get ×100 (×10 in RMS) on A32. The largest FP32 conv budget
 *      here (K = 6272: 2.2e-8) is still ~3× below the NMSE of even round-to-nearest TF32
 *      operands (2·2^-20/24 ≈ 7.9e-8 for uniformly spread significands; 6.5e-8 measured), so
 *      an FP32 conv silently run with TF32 tensor-core math (cuDNN's CUDNN_DEFAULT_MATH allows
 *      it on Ampere and later) fails.
 *   budget = MARGIN·(A32·[×100 for conv] + A8·[FP8] + I_tf32·[TF32] + O·[conv]), MARGIN = 10:
 *   the terms are upper estimates of expected values; the NMSE of ≥ 15 outputs is an average of
 *   independent errors, and 10× covers its spread. Not wider: real bugs (a transposed operand,
 *   a lost scale, wrong padding or stride, a dropped bias or accumulate, FP16 accumulation,
 *   TF32 in an FP32 plan, a BF16-rounded Linear output) are orders of magnitude above.
 *   Examples (Linear, K = 1024): FP32, BF16, FP16 3.6e-11; TF32 1.1e-5; FP8 1.9e-5. A
 *   sequential float sum in reverse order (instead of oneDNN's) measured 1.3%..1.9% of the
 *   FP32 budget.
 *
 * Tolerances of the memory-bound ops
 *   Exact (value equality; NaN must match NaN): relu, add, add+relu, accumulate, scale, the
 *   layout transposes, max pooling values, nchw_to_nhwc accumulate. Bit identity (bytes):
 *   quantize (codes and scales: the GPU shares core/numfmt.h's element functions), dequantize,
 *   cast, dropout masks, max-pooling argmax indices (ties included: first in scan order).
 *   Otherwise element i passes when |g−c| ≤ atol + rtol·|c| with rtol = 4·u·sqrt(4·Kr), the
 *   budget of tests/support/check.h (4·u·sqrt(Kr) per implementation against the exact value,
 *   so twice that between two implementations), Kr the number of roundings on the value's path
 *   or the length of the reduction it depends on, and atol = rtol·max|c| (values that cancel to
 *   ~0 are judged against the tensor's scale). Element-wise ops have Kr ≤ 4 (rtol ≤ 9.5e-7);
 *   optimizer steps Kr = 8..12 (rtol 1.4e-6..1.7e-6); reductions over rows or classes
 *   (batch norm, softmax, pooling windows, column sums accumulated in double: Kr = 1) scale
 *   with their length. sum_squares (double) passes at relative 1e-12.
 *
 * BF16 forward outputs (y_dt = BF16) of conv and linear, batch norm reading a BF16 x and writing
 * a BF16 dx: the section "BF16 forward outputs", test_batchnorm_bf16_x and test_batchnorm_bf16_dx
 * say how they are judged. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bits.h"
#include "check.h"
#include "core/backend.h"
#include "core/numfmt.h"
#include "gpu_harness.h"
#include "graph_helpers.h"
#include "qsync/rng.h"
#include "qsync/status.h"

/* ============================================================================ comparisons */

/* Reduction lengths as doubles for names and budgets. */
typedef enum gemm_kind { GEMM_LINEAR, GEMM_CONV } gemm_kind;

/* The NMSE budget of a GEMM-like output (derivation at the top of this file). */
static double gemm_budget(gemm_kind kind, qs_precision p, double K) {
    const double u2 = 0x1p-48, margin = 10.0;
    double a32 = u2 * (K + 2.0);
    if (kind == GEMM_CONV) a32 *= 100.0;
    double a8 = p == QS_PREC_FP8 ? 0x1p-26 * (fmin(K, 128.0) + 2.0) : 0.0;
    double in = p == QS_PREC_TF32 ? 0x1p-20 * (2.0 / 3.0 + 0.5) : 0.0;
    double out = 0.0;
    if (kind == GEMM_CONV) out = (p == QS_PREC_BF16 || p == QS_PREC_FP8) ? 0x1p-14 / 12.0 : p == QS_PREC_FP16 ? 0x1p-20 / 12.0 : 0.0;
    return margin * (a32 + a8 + in + out);
}

static bool check_exact(const char *what, const float *got, const float *ref, int64_t n) {
    return check_tol(what, got, ref, n, 0, 0);
}

/* Bit identity of n elements of `es` bytes; on a mismatch prints the first one (hex) and, when
 * src is given, the FP32 source element. */
static bool check_bits(const char *what, const void *got, const void *ref, int64_t n, size_t es, const float *src) {
    const unsigned char *g = got, *r = ref;
    int64_t nbad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(g + (size_t)i * es, r + (size_t)i * es, es) != 0) {
            if (first < 0) first = i;
            nbad++;
        }
    bool pass = nbad == 0;
    printf("  %-4s %-60s %s", pass ? "ok" : "FAIL", what, pass ? "bit-identical" : "BITS DIFFER");
    printf(" (n=%lld)", (long long)n);
    if (nbad) {
        uint64_t a = 0, b = 0;
        memcpy(&a, g + (size_t)first * es, es);
        memcpy(&b, r + (size_t)first * es, es);
        printf(" — %lld elements differ, first [%lld]: gpu 0x%llx cpu 0x%llx", (long long)nbad, (long long)first,
               (unsigned long long)a, (unsigned long long)b);
        if (src) printf(" (source %a = 0x%08x)", (double)src[first], fbits(src[first]));
    }
    printf("\n");
    fflush(stdout);
    json_case(what, "differing_elements", (double)nbad, 0.0, pass);
    if (!pass) g_fail++;
    return pass;
}

/* ====================================================================== device basics */

static void test_device(void **state) {
    BEGIN();
    char line[256];
    check_fact("backend name is \"cuda\"", GOPS->name && strcmp(GOPS->name, "cuda") == 0, GOPS->name ? GOPS->name : "(null)");
    check_fact("default stream exists", GST != NULL, "");
    for (int p = 0; p < QS_PREC_COUNT; p++) {
        qs_prec_support s = GOPS->precision_support(g_gpu, (qs_precision)p);
        bool want_unsupported = p == QS_PREC_INT8; /* INT8 on the GPU: not yet */
        snprintf(line, sizeof line, "precision_support(%s)", qs_precision_name((qs_precision)p));
        check_fact(line, want_unsupported ? s == QS_PREC_UNSUPPORTED : s != QS_PREC_UNSUPPORTED, qs_prec_support_name(s));
    }

    /* memory_stats: sizes as requested, peak monotone */
    size_t in0 = 0, pk0 = 0, in1 = 0, pk1 = 0, in2 = 0, pk2 = 0, in3 = 0;
    GOPS->memory_stats(g_gpu, &in0, &pk0);
    void *a = NULL, *b = NULL;
    ASSERT_OK(GOPS->alloc(g_gpu, 1000, &a));
    ASSERT_OK(GOPS->alloc(g_gpu, 3333, &b));
    GOPS->memory_stats(g_gpu, &in1, &pk1);
    snprintf(line, sizeof line, "in_use %zu -> %zu, peak %zu -> %zu", in0, in1, pk0, pk1);
    check_fact("memory_stats after alloc 1000 + 3333", in1 == in0 + 4333 && pk1 >= in1 && pk1 >= pk0, line);
    GOPS->free(g_gpu, a);
    GOPS->memory_stats(g_gpu, &in2, &pk2);
    snprintf(line, sizeof line, "in_use %zu, peak %zu", in2, pk2);
    check_fact("memory_stats after free 1000", in2 == in0 + 3333 && pk2 == pk1, line);
    GOPS->free(g_gpu, b);
    GOPS->memory_stats(g_gpu, &in3, NULL);
    GOPS->memory_stats(g_gpu, NULL, NULL); /* both optional */
    snprintf(line, sizeof line, "in_use %zu", in3);
    check_fact("memory_stats after free 3333", in3 == in0, line);

    /* alloc zeroes, also memory that held data before (dirty a block, free it, allocate again) */
    const size_t zb = (1u << 20) + 7;
    void *z = NULL;
    ASSERT_OK(GOPS->alloc(g_gpu, zb, &z));
    unsigned char *ones = halloc(zb), *back = halloc(zb);
    memset(ones, 0x5A, zb);
    ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, z, ones, zb));
    ASSERT_OK(GOPS->stream_sync(g_gpu, GST));
    GOPS->free(g_gpu, z);
    z = NULL;
    ASSERT_OK(GOPS->alloc(g_gpu, zb, &z));
    ASSERT_OK(GOPS->copy_d2h(g_gpu, GST, back, z, zb));
    ASSERT_OK(GOPS->stream_sync(g_gpu, GST));
    size_t nonzero = 0;
    for (size_t i = 0; i < zb; i++) nonzero += back[i] != 0;
    snprintf(line, sizeof line, "%zu of %zu bytes non-zero, address %% 256 = %zu", nonzero, zb, (size_t)((uintptr_t)z % 256));
    check_fact("alloc returns zeroed, 256-byte aligned memory", nonzero == 0 && (uintptr_t)z % 256 == 0, line);
    GOPS->free(g_gpu, z);

    /* copies between offset views, memset_zero of a view: guards untouched */
    const size_t cb = 4099;
    unsigned char *src = halloc(cb), *got = halloc(cb), *zero = halloc(cb);
    for (size_t i = 0; i < cb; i++) src[i] = (unsigned char)(i * 7 + 3);
    void *d1 = dup_gpu(src, cb), *d2 = dalloc(cb, POISON);
    if (GPU_OK(GOPS->copy_d2d(g_gpu, GST, d2, d1, cb)) && dget(got, d2, cb, "copy_d2d"))
        check_bits("copy h2d -> d2d -> d2h (4099 bytes, offset views)", got, src, (int64_t)cb, 1, NULL);
    if (GPU_OK(GOPS->memset_zero(g_gpu, GST, d2, cb)) && dget(got, d2, cb, "memset_zero"))
        check_bits("memset_zero of a view", got, zero, (int64_t)cb, 1, NULL);
    qs_status st = GOPS->copy_h2d(g_gpu, GST, NULL, src, 4);
    check_fact("copy_h2d to NULL is QS_ERR_INVALID_ARG", st == QS_ERR_INVALID_ARG, qs_status_name(st));
    END();
}

/* INT8 GEMMs are not implemented on the GPU yet: plans must say so, not crash or half-work. */
static void test_int8_unsupported(void **state) {
    BEGIN();
    qs_linear_desc ld = {.M = 8, .N = 16, .K = 32, .has_bias = true, .prec = QS_PREC_INT8};
    void *plan = NULL;
    size_t ws = 0;
    qs_error_clear();
    qs_status st = GOPS->linear_plan(g_gpu, &ld, &plan, &ws);
    char line[300];
    snprintf(line, sizeof line, "%s: %s", qs_status_name(st), qs_last_error());
    check_fact("linear_plan(int8) is QS_ERR_UNSUPPORTED naming int8",
               st == QS_ERR_UNSUPPORTED && plan == NULL && strstr(qs_last_error(), "int8") != NULL, line);
    if (st == QS_OK) keep_plan(g_gpu, plan);
    qs_conv_desc cd = {.N = 2, .H = 8, .W = 8, .C = 16, .K = 16, .R = 3, .S = 3, .stride_h = 1, .stride_w = 1,
                       .pad_h = 1, .pad_w = 1, .has_bias = false, .prec = QS_PREC_INT8};
    ASSERT_OK(qs_conv_desc_finish(&cd));
    plan = NULL;
    qs_error_clear();
    st = GOPS->conv_plan(g_gpu, &cd, &plan, &ws);
    snprintf(line, sizeof line, "%s: %s", qs_status_name(st), qs_last_error());
    check_fact("conv_plan(int8) is QS_ERR_UNSUPPORTED naming int8",
               st == QS_ERR_UNSUPPORTED && plan == NULL && strstr(qs_last_error(), "int8") != NULL, line);
    if (st == QS_OK) keep_plan(g_gpu, plan);
    END();
}

/* ==================================================================================== linear */

typedef struct lin_case {
    int64_t M, N, K;
    bool bias;
} lin_case;

static void linear_data_t_case(void *gplan, void *gws, const qmat *qx, const qmat *qw, const qmat *qdy, int64_t M,
                               int64_t N, int64_t K, const char *shape);

/* Forward, backward-data (overwrite and accumulate) and backward-weights (+ bias gradient when
 * dY is FP32) of one Linear shape at precision p, GPU against CPU; FP8 also with transposed
 * copies (linear_data_t_case). */
static void run_linear(qs_precision p, lin_case lc) {
    const int64_t M = lc.M, N = lc.N, K = lc.K;
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    const char *pn = qs_precision_name(p);
    char shape[64], what[192];
    snprintf(shape, sizeof shape, "M%lld N%lld K%lld%s", (long long)M, (long long)N, (long long)K, lc.bias ? " +b" : "");
    qs_linear_desc gd = {.M = M, .N = N, .K = K, .has_bias = lc.bias, .prec = p}, cd = gd;
    cd.prec = cpu_prec(p);
    void *cplan = NULL, *gplan = NULL;
    size_t cwsb = 0, gwsb = 0;
    ASSERT_OK(COPS->linear_plan(g_cpu, &cd, &cplan, &cwsb));
    keep_plan(g_cpu, cplan);
    snprintf(what, sizeof what, "linear_plan %s %s", pn, shape);
    if (!gpu_ok_(GOPS->linear_plan(g_gpu, &gd, &gplan, &gwsb), what)) return;
    keep_plan(g_gpu, gplan);
    void *cws = cwsb ? halloc(cwsb) : NULL, *gws = gwsb ? dalloc(gwsb, POISON) : NULL;

    seed("linear", (uint64_t)p * 1000003u + (uint64_t)(M * 10007 + N * 101 + K));
    float *x = rnd(M * K, -2, 2), *w = rnd(N * K, -0.5f, 0.5f), *dy = rnd(M * N, -1, 1), *dx0 = rnd(M * K, -1, 1);
    float *b = lc.bias ? rnd(N, -1, 1) : NULL;
    const qs_sr sr = {.key = qs_rng_key(5, "linear_dy", (uint64_t)p), .counter = 3, .offset = 0};
    qmat qx = quant_both(x, M, K, fdt, NULL), qw = quant_both(w, N, K, fdt, NULL), qdy = quant_both(dy, M, N, gdt, &sr);
    const float *gb = b ? dup_gpu_f(b, N) : NULL;

    /* forward */
    float *cy = hf(M * N), *gy = dalloc_f(M * N), *hy = hf(M * N);
    ASSERT_OK(COPS->linear_forward(g_cpu, cplan, CST, &qx.cpu, &qw.cpu, b, cy, cws));
    snprintf(what, sizeof what, "linear %-4s fwd          %s", pn, shape);
    if (gpu_ok_(GOPS->linear_forward(g_gpu, gplan, GST, &qx.gpu, &qw.gpu, gb, gy, gws), what) &&
        dget(hy, gy, (size_t)(M * N) * 4, what))
        check_nmse(what, hy, cy, M * N, gemm_budget(GEMM_LINEAR, p, (double)K));

    /* backward data: overwrite, then accumulate onto dx0 */
    float *cdx = hf(M * K), *gdx = dalloc_f(M * K), *hdx = hf(M * K);
    ASSERT_OK(COPS->linear_backward_data(g_cpu, cplan, CST, &qdy.cpu, &qw.cpu, cdx, false, cws));
    snprintf(what, sizeof what, "linear %-4s bwd_data     %s", pn, shape);
    if (gpu_ok_(GOPS->linear_backward_data(g_gpu, gplan, GST, &qdy.gpu, &qw.gpu, gdx, false, gws), what) &&
        dget(hdx, gdx, (size_t)(M * K) * 4, what))
        check_nmse(what, hdx, cdx, M * K, gemm_budget(GEMM_LINEAR, p, (double)N));
    float *cdxa = hcopy(dx0, M * K), *gdxa = dup_gpu_f(dx0, M * K);
    ASSERT_OK(COPS->linear_backward_data(g_cpu, cplan, CST, &qdy.cpu, &qw.cpu, cdxa, true, cws));
    snprintf(what, sizeof what, "linear %-4s bwd_data acc %s", pn, shape);
    if (gpu_ok_(GOPS->linear_backward_data(g_gpu, gplan, GST, &qdy.gpu, &qw.gpu, gdxa, true, gws), what) &&
        dget(hdx, gdxa, (size_t)(M * K) * 4, what))
        check_nmse(what, hdx, cdxa, M * K, gemm_budget(GEMM_LINEAR, p, (double)N + 1));

    /* backward weights; db only with an FP32 dY (else NULL, per the contract) */
    const bool want_db = lc.bias && gdt == QS_F32;
    float *cdw = hf(N * K), *gdw = dalloc_f(N * K), *hdw = hf(N * K);
    float *cdb = want_db ? hf(N) : NULL, *gdb = want_db ? dalloc_f(N) : NULL, *hdb = hf(N);
    ASSERT_OK(COPS->linear_backward_weights(g_cpu, cplan, CST, &qdy.cpu, &qx.cpu, cdw, cdb, cws));
    snprintf(what, sizeof what, "linear %-4s bwd_weights  %s", pn, shape);
    if (gpu_ok_(GOPS->linear_backward_weights(g_gpu, gplan, GST, &qdy.gpu, &qx.gpu, gdw, gdb, gws), what) &&
        dget(hdw, gdw, (size_t)(N * K) * 4, what)) {
        check_nmse(what, hdw, cdw, N * K, gemm_budget(GEMM_LINEAR, p, (double)M));
        snprintf(what, sizeof what, "linear %-4s bias grad    %s", pn, shape);
        if (want_db && dget(hdb, gdb, (size_t)N * 4, what))
            check_nmse(what, hdb, cdb, N, gemm_budget(GEMM_LINEAR, p, (double)M));
    }
    if (p == QS_PREC_FP8) linear_data_t_case(gplan, gws, &qx, &qw, &qdy, M, N, K, shape);
}

/* A host (rows, cols) byte matrix transposed, on the GPU. */
static void *gpu_transposed(const void *host, int64_t rows, int64_t cols) {
    const uint8_t *h = host;
    uint8_t *t = halloc((size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) t[c * rows + r] = h[r * cols + c];
    return dup_gpu(t, (size_t)(rows * cols));
}

/* Two device arrays of n elements of es bytes downloaded and compared bit for bit. */
static void same_elems(const char *what, const void *got, const void *ref, int64_t n, size_t es) {
    void *hg = halloc((size_t)n * es), *hr = halloc((size_t)n * es);
    if (dget(hg, got, (size_t)n * es, what) && dget(hr, ref, (size_t)n * es, what)) check_bits(what, hg, hr, n, es, NULL);
}

/* Two device FP32 arrays of n elements downloaded and compared bit for bit. */
static void same_bits(const char *what, const float *got, const float *ref, int64_t n) {
    same_elems(what, got, ref, n, 4);
}

/* FP8: backward-data and backward-weights reading the operands' transposed copies
 * (qs_operand.data_t, as a Linear node keeps them) give the bits of the same products making
 * their own copies. */
static void linear_data_t_case(void *gplan, void *gws, const qmat *qx, const qmat *qw, const qmat *qdy, int64_t M,
                               int64_t N, int64_t K, const char *shape) {
    char what[192];
    qs_operand tx = qx->gpu, tw = qw->gpu, tdy = qdy->gpu;
    tx.data_t = gpu_transposed(qx->cpu.data, M, K);
    tw.data_t = gpu_transposed(qw->cpu.data, N, K);
    tdy.data_t = gpu_transposed(qdy->cpu.data, M, N);
    float *a = dalloc_f(M * K), *b = dalloc_f(M * K);
    snprintf(what, sizeof what, "linear fp8  bwd_data    data_t %s", shape);
    if (gpu_ok_(GOPS->linear_backward_data(g_gpu, gplan, GST, &qdy->gpu, &qw->gpu, a, false, gws), what) &&
        gpu_ok_(GOPS->linear_backward_data(g_gpu, gplan, GST, &tdy, &tw, b, false, gws), what))
        same_bits(what, b, a, M * K);
    float *c = dalloc_f(N * K), *d = dalloc_f(N * K);
    snprintf(what, sizeof what, "linear fp8  bwd_weights data_t %s", shape);
    if (gpu_ok_(GOPS->linear_backward_weights(g_gpu, gplan, GST, &qdy->gpu, &qx->gpu, c, NULL, gws), what) &&
        gpu_ok_(GOPS->linear_backward_weights(g_gpu, gplan, GST, &tdy, &tx, d, NULL, gws), what))
        same_bits(what, d, c, N * K);
}

static const lin_case k_lin[] = {
    {3, 5, 7, true},        /* small and odd: no dimension a multiple of 16 */
    {1, 17, 33, true},      /* batch 1 */
    {8, 10, 120, false},    /* batch 8, no bias */
    {8, 64, 784, true},     /* an MLP's first layer on 28×28 inputs */
    {37, 29, 53, true},     /* odd everywhere, a bit larger */
    {256, 512, 1024, true}, /* large: tensor-core tiles, split-K candidates */
};

/* All Linear shapes at precision p. */
static void linear_all(qs_precision p) {
    BEGIN();
    snprintf(g_test_buf, sizeof g_test_buf, "test_linear_%s", qs_precision_name(p));
    g_test = g_test_buf;
    for (size_t i = 0; i < sizeof k_lin / sizeof k_lin[0]; i++) {
        mark m = mark_now();
        run_linear(p, k_lin[i]);
        release_to(m);
    }
    END();
}
static void test_linear_fp32(void **state) { linear_all(QS_PREC_FP32); }
static void test_linear_tf32(void **state) { linear_all(QS_PREC_TF32); }
static void test_linear_bf16(void **state) { linear_all(QS_PREC_BF16); }
static void test_linear_fp16(void **state) { linear_all(QS_PREC_FP16); }
static void test_linear_fp8(void **state) { linear_all(QS_PREC_FP8); }

/* FP32 Linear with a NaN in one input row and an Inf in one weight row: the GPU must produce the
 * same non-finite pattern as the CPU (NaN row, ±Inf column) and match elsewhere. */
static void test_linear_nonfinite(void **state) {
    BEGIN();
    const int64_t M = 4, N = 6, K = 9;
    qs_linear_desc d = {.M = M, .N = N, .K = K, .has_bias = true, .prec = QS_PREC_FP32};
    void *cplan = NULL, *gplan = NULL;
    size_t cwsb = 0, gwsb = 0;
    ASSERT_OK(COPS->linear_plan(g_cpu, &d, &cplan, &cwsb));
    keep_plan(g_cpu, cplan);
    if (!GPU_OK(GOPS->linear_plan(g_gpu, &d, &gplan, &gwsb))) {
        END();
        return;
    }
    keep_plan(g_gpu, gplan);
    seed("linear_nonfinite", 0);
    float *x = rnd(M * K, 0.5f, 1.5f), *w = rnd(N * K, -1, 1), *b = rnd(N, -1, 1);
    x[1 * K + 3] = NAN;
    w[4 * K + 5] = INFINITY;
    float *cy = hf(M * N), *gy = dalloc_f(M * N), *hy = hf(M * N);
    qs_operand cx = qs_operand_f32(x), cw = qs_operand_f32(w);
    qs_operand gx = qs_operand_f32(dup_gpu_f(x, M * K)), gw = qs_operand_f32(dup_gpu_f(w, N * K));
    ASSERT_OK(COPS->linear_forward(g_cpu, cplan, CST, &cx, &cw, b, cy, cwsb ? halloc(cwsb) : NULL));
    if (GPU_OK(GOPS->linear_forward(g_gpu, gplan, GST, &gx, &gw, dup_gpu_f(b, N), gy, gwsb ? dalloc(gwsb, POISON) : NULL)) &&
        dget(hy, gy, (size_t)(M * N) * 4, "linear fp32 fwd with NaN/Inf"))
        check_nmse("linear fp32 fwd, NaN in x row 1, +Inf in w row 4", hy, cy, M * N,
                   gemm_budget(GEMM_LINEAR, QS_PREC_FP32, (double)K));
    END();
}

/* ====================================================================================== conv */

/* A conv descriptor (P, Q filled in). */
static qs_conv_desc conv_desc(int64_t N, int64_t H, int64_t W, int64_t C, int64_t K, int64_t R, int64_t S, int64_t sh,
                              int64_t sw, int64_t ph, int64_t pw, bool bias) {
    return (qs_conv_desc){.N = N, .H = H, .W = W, .C = C, .K = K, .R = R, .S = S, .stride_h = sh, .stride_w = sw,
                          .pad_h = ph, .pad_w = pw, .has_bias = bias, .prec = QS_PREC_FP32};
}

/* Forward, backward-data (overwrite, accumulate) and backward-weights (+ bias gradient when dY
 * is FP32) of one conv shape at precision p, GPU against CPU. */
static void run_conv(qs_precision p, qs_conv_desc d0) {
    qs_conv_desc gd = d0;
    gd.prec = p;
    ASSERT_OK(qs_conv_desc_finish(&gd));
    qs_conv_desc cd = gd;
    cd.prec = cpu_prec(p);
    const qs_conv_desc *d = &gd;
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    const char *pn = qs_precision_name(p);
    const int64_t nx = d->N * d->H * d->W * d->C, ny = d->N * d->P * d->Q * d->K, nw = d->K * d->C * d->R * d->S;
    char shape[96], what[224];
    snprintf(shape, sizeof shape, "N%lld %lldx%lldx%lld->%lld k%lldx%lld s%lld p%lld%s", (long long)d->N,
             (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K, (long long)d->R, (long long)d->S,
             (long long)d->stride_h, (long long)d->pad_h, d->has_bias ? " +b" : "");
    if (d->stride_h != d->stride_w || d->pad_h != d->pad_w)
        snprintf(shape, sizeof shape, "N%lld %lldx%lldx%lld->%lld k%lldx%lld s%lldx%lld p%lldx%lld%s", (long long)d->N,
                 (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K, (long long)d->R, (long long)d->S,
                 (long long)d->stride_h, (long long)d->stride_w, (long long)d->pad_h, (long long)d->pad_w,
                 d->has_bias ? " +b" : "");
    void *cplan = NULL, *gplan = NULL;
    size_t cwsb = 0, gwsb = 0;
    ASSERT_OK(COPS->conv_plan(g_cpu, &cd, &cplan, &cwsb));
    keep_plan(g_cpu, cplan);
    snprintf(what, sizeof what, "conv_plan %s %s", pn, shape);
    if (!gpu_ok_(GOPS->conv_plan(g_gpu, &gd, &gplan, &gwsb), what)) return;
    keep_plan(g_gpu, gplan);
    void *cws = cwsb ? halloc(cwsb) : NULL, *gws = gwsb ? dalloc(gwsb, POISON) : NULL;

    seed("conv", (uint64_t)p * 1000003u + (uint64_t)(nx * 31 + nw * 7 + ny));
    float *x = rnd(nx, -1, 1), *w = rnd(nw, -0.5f, 0.5f), *dy = rnd(ny, -1, 1), *dx0 = rnd(nx, -1, 1);
    float *b = d->has_bias ? rnd(d->K, -1, 1) : NULL;
    const qs_sr sr = {.key = qs_rng_key(5, "conv_dy", (uint64_t)p), .counter = 3, .offset = 0};
    qmat qx = quant_both(x, d->N * d->H * d->W, d->C, fdt, NULL);
    qmat qw = quant_both(w, d->K, d->C * d->R * d->S, fdt, NULL);
    qmat qdy = quant_both(dy, d->N * d->P * d->Q, d->K, gdt, &sr);
    const float *gb = b ? dup_gpu_f(b, d->K) : NULL;
    const double k_fwd = (double)(d->C * d->R * d->S);
    const double k_bd = (double)(d->K * ((d->R + d->stride_h - 1) / d->stride_h) * ((d->S + d->stride_w - 1) / d->stride_w));
    const double k_bw = (double)(d->N * d->P * d->Q);

    float *cy = hf(ny), *gy = dalloc_f(ny), *hy = hf(ny);
    ASSERT_OK(COPS->conv_forward(g_cpu, cplan, CST, &qx.cpu, &qw.cpu, b, cy, cws));
    snprintf(what, sizeof what, "conv %-4s fwd          %s", pn, shape);
    if (gpu_ok_(GOPS->conv_forward(g_gpu, gplan, GST, &qx.gpu, &qw.gpu, gb, gy, gws), what) &&
        dget(hy, gy, (size_t)ny * 4, what))
        check_nmse(what, hy, cy, ny, gemm_budget(GEMM_CONV, p, k_fwd));

    float *cdx = hf(nx), *gdx = dalloc_f(nx), *hdx = hf(nx);
    ASSERT_OK(COPS->conv_backward_data(g_cpu, cplan, CST, &qdy.cpu, &qw.cpu, cdx, false, cws));
    snprintf(what, sizeof what, "conv %-4s bwd_data     %s", pn, shape);
    if (gpu_ok_(GOPS->conv_backward_data(g_gpu, gplan, GST, &qdy.gpu, &qw.gpu, gdx, false, gws), what) &&
        dget(hdx, gdx, (size_t)nx * 4, what))
        check_nmse(what, hdx, cdx, nx, gemm_budget(GEMM_CONV, p, k_bd));
    float *cdxa = hcopy(dx0, nx), *gdxa = dup_gpu_f(dx0, nx);
    ASSERT_OK(COPS->conv_backward_data(g_cpu, cplan, CST, &qdy.cpu, &qw.cpu, cdxa, true, cws));
    snprintf(what, sizeof what, "conv %-4s bwd_data acc %s", pn, shape);
    if (gpu_ok_(GOPS->conv_backward_data(g_gpu, gplan, GST, &qdy.gpu, &qw.gpu, gdxa, true, gws), what) &&
        dget(hdx, gdxa, (size_t)nx * 4, what))
        check_nmse(what, hdx, cdxa, nx, gemm_budget(GEMM_CONV, p, k_bd + 1));

    const bool want_db = d->has_bias && gdt == QS_F32;
    float *cdw = hf(nw), *gdw = dalloc_f(nw), *hdw = hf(nw);
    float *cdb = want_db ? hf(d->K) : NULL, *gdb = want_db ? dalloc_f(d->K) : NULL, *hdb = hf(d->K);
    ASSERT_OK(COPS->conv_backward_weights(g_cpu, cplan, CST, &qdy.cpu, &qx.cpu, cdw, cdb, cws));
    snprintf(what, sizeof what, "conv %-4s bwd_weights  %s", pn, shape);
    if (gpu_ok_(GOPS->conv_backward_weights(g_gpu, gplan, GST, &qdy.gpu, &qx.gpu, gdw, gdb, gws), what) &&
        dget(hdw, gdw, (size_t)nw * 4, what)) {
        check_nmse(what, hdw, cdw, nw, gemm_budget(GEMM_CONV, p, k_bw));
        snprintf(what, sizeof what, "conv %-4s bias grad    %s", pn, shape);
        if (want_db && dget(hdb, gdb, (size_t)d->K * 4, what)) check_nmse(what, hdb, cdb, d->K, gemm_budget(GEMM_CONV, p, k_bw));
    }
}

/* All conv shapes at precision p. */
static void conv_all(qs_precision p) {
    BEGIN();
    snprintf(g_test_buf, sizeof g_test_buf, "test_conv_%s", qs_precision_name(p));
    g_test = g_test_buf;
    const qs_conv_desc shapes[] = {
        conv_desc(1, 28, 28, 1, 8, 5, 5, 1, 1, 2, 2, true),   /* 1 -> 8 channels 5x5 pad 2 on 28x28, batch 1 */
        conv_desc(8, 28, 28, 1, 8, 5, 5, 1, 1, 2, 2, true),   /* the same, batch 8 */
        conv_desc(8, 15, 15, 16, 32, 3, 3, 2, 2, 1, 1, true), /* 16 -> 32 3x3 stride 2, odd input */
        conv_desc(8, 7, 7, 32, 16, 1, 1, 1, 1, 0, 0, false),  /* 1x1 */
        conv_desc(1, 7, 9, 3, 5, 3, 3, 1, 1, 1, 1, true),     /* small and odd */
        conv_desc(2, 11, 8, 5, 7, 3, 2, 2, 1, 1, 0, true),    /* non-square kernel, mixed stride */
        conv_desc(8, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, false), /* larger: 64 -> 64 3x3 */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mark m = mark_now();
        run_conv(p, shapes[i]);
        release_to(m);
    }
    END();
}
static void test_conv_fp32(void **state) { conv_all(QS_PREC_FP32); }
static void test_conv_tf32(void **state) { conv_all(QS_PREC_TF32); }
static void test_conv_bf16(void **state) { conv_all(QS_PREC_BF16); }
static void test_conv_fp16(void **state) { conv_all(QS_PREC_FP16); }
static void test_conv_fp8(void **state) { conv_all(QS_PREC_FP8); }

/* ======================================================= BF16 forward outputs (y_dt = BF16) */

/* A GEMM-like forward planned with y_dt BF16 (backend.h: the FP32 result, bias included, rounded
 * to nearest even; a 16-bit-output engine may round its own sums) is run next to the same GPU
 * plan with y_dt F32, on the same operands, and judged twice:
 *  (1) against that FP32 y rounded to nearest even on the host (qs_f32_to_bf16), element by
 *      element (check_bf16_y below). Where both plans run the same arithmetic they agree bit for
 *      bit: the epilogue paths round the very FP32 values the F32 plan writes, and a conv's
 *      16-bit engine is the one the F32 plan widens (paths are chosen independently of y_dt
 *      unless QS_CUDNN_BENCHMARK=1). They may differ where the BF16 output comes from another
 *      kernel than the F32 one — the Linear's cuBLASLt product with a BF16 D (its own algorithm),
 *      or benchmark mode picking another conv path — whose FP32 sums are the same exact products
 *      added in another order: two such sums s1, s2 differ by a few FP32 ulps, far less than a
 *      BF16 ulp, and RNE is monotone, so rne(s1) and rne(s2) are equal or adjacent BF16 values.
 *      Tolerance: at most ONE BF16 ulp (adjacent values: a distance of 1 between the bit
 *      patterns read as a monotone integer, across binades and zero). The one exception is an
 *      element whose sum cancels to near zero, where the FP32 sums' own difference (absolute,
 *      set by the tensor's scale: check.h) can exceed a BF16 ulp of the tiny result: such an
 *      element also passes when |got − want| ≤ atol = rtol·max|want|, rtol = 4·u·sqrt(4·K)
 *      (check.h's budget of a K-term FP32 reduction, doubled for two implementations). And
 *      since the two rounding orders disagree only for sums within a few FP32 ulps of a BF16
 *      rounding boundary (a fraction ~2^8·u·sqrt(K) ≈ 5e-4 at K = 1024), at most 1 + n/100
 *      elements may differ at all: a wrong rounding (truncation: half the elements off by one
 *      ulp) fails that even though each element is within one ulp.
 *  (2) against the CPU's FP32 reference as an NMSE, within the plan's FP32-output budget
 *      (gemm_budget) plus one more BF16 rounding of the output, O = 2^-14/12 (relative error²
 *      of one RNE to 8 significant bits, the top-of-file (e)), with the same MARGIN 10. */
static double bf16_y_budget(void) { return 10.0 * 0x1p-14 / 12.0; }

/* BF16 bits as a monotone integer: adjacent BF16 values differ by 1 (+0 and -0 coincide). */
static int32_t bf16_ord(uint16_t h) {
    return (h & 0x8000u) ? 0x8000 - (int32_t)(h & 0x7fffu) : 0x8000 + (int32_t)h;
}
static bool bf16_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }
static double bf16_val(uint16_t h) { return (double)bitsf((uint32_t)h << 16); }

/* (1) above: got, want n BF16 values of outputs with reduction length K. */
static bool check_bf16_y(const char *what, const uint16_t *got, const uint16_t *want, int64_t n, double K) {
    double maxw = 0;
    for (int64_t i = 0; i < n; i++)
        if (!bf16_nan(want[i])) maxw = fmax(maxw, fabs(bf16_val(want[i])));
    const double atol = qs_tol_fp32(4.0 * K, -1.0).rtol * maxw;
    const int64_t max_unequal = 1 + n / 100;
    int64_t unequal = 0, one_ulp = 0, by_atol = 0, bad = 0, first = -1;
    int32_t max_ulps = 0;
    for (int64_t i = 0; i < n; i++) {
        if (bf16_nan(got[i]) && bf16_nan(want[i])) continue;
        if (!bf16_nan(got[i]) && !bf16_nan(want[i]) && bf16_ord(got[i]) == bf16_ord(want[i])) continue; /* ±0 too */
        unequal++;
        const int32_t d = bf16_nan(got[i]) || bf16_nan(want[i]) ? INT32_MAX : abs(bf16_ord(got[i]) - bf16_ord(want[i]));
        if (d > max_ulps) max_ulps = d;
        if (d <= 1) {
            one_ulp++;
        } else if (d != INT32_MAX && fabs(bf16_val(got[i]) - bf16_val(want[i])) <= atol) {
            by_atol++;
        } else {
            if (first < 0) first = i;
            bad++;
        }
    }
    const bool pass = bad == 0 && unequal <= max_unequal;
    printf("  %-4s %-60s unequal %lld of %lld (limit %lld): %lld by 1 ulp, %lld within atol %.2e", pass ? "ok" : "FAIL",
           what, (long long)unequal, (long long)n, (long long)max_unequal, (long long)one_ulp, (long long)by_atol, atol);
    if (bad)
        printf(" — %lld beyond, first [%lld]: gpu 0x%04x want 0x%04x; largest distance %d ulps", (long long)bad,
               (long long)first, got[first], want[first], (int)max_ulps);
    printf("\n");
    fflush(stdout);
    json_case(what, "bf16_unequal", bad ? (double)INFINITY : (double)unequal, (double)max_unequal, pass);
    if (!pass) g_fail++;
    return pass;
}

/* A BF16 forward output on the host: (1) against want = rne(the F32 plan's y32), (2) widened,
 * against the CPU's cy within budget + one BF16 rounding. */
static void judge_bf16_y(const char *what, const uint16_t *y16, const float *y32, const float *cy, int64_t n, double K,
                         double budget) {
    char line[224];
    uint16_t *want = halloc((size_t)n * 2);
    float *wide = hf(n);
    ASSERT_OK(qs_f32_to_bf16(n, y32, want, NULL));
    snprintf(line, sizeof line, "%s = rne(f32 y)", what);
    check_bf16_y(line, y16, want, n, K);
    ASSERT_OK(qs_bf16_to_f32(n, y16, wide));
    snprintf(line, sizeof line, "%s vs cpu", what);
    check_nmse(line, wide, cy, n, budget + bf16_y_budget());
}

/* The outputs of an F32-output plan (g32) and a BF16-output one (g16) on the GPU, n elements of
 * a reduction of length K: fetched and judged (judge_bf16_y) against each other and cpu. */
static void fetch_judge_bf16(const char *what, const float *g32, const uint16_t *g16, const float *cpu, int64_t n,
                             double K, double budget) {
    float *h32 = hf(n);
    uint16_t *h16 = halloc((size_t)n * 2);
    if (dget(h32, g32, (size_t)n * 4, what) && dget(h16, g16, (size_t)n * 2, what))
        judge_bf16_y(what, h16, h32, cpu, n, K, budget);
}

/* One conv shape at precision p: the forward of a y_dt BF16 plan against the y_dt F32 plan and
 * the CPU (above). */
static void run_conv_y16(qs_precision p, qs_conv_desc d0) {
    qs_conv_desc gd = d0;
    gd.prec = p;
    ASSERT_OK(qs_conv_desc_finish(&gd));
    qs_conv_desc gd16 = gd, cd = gd;
    gd16.y_dt = QS_BF16;
    gd16.dx_dt = QS_BF16;
    cd.prec = cpu_prec(p);
    const qs_conv_desc *d = &gd;
    const qs_dtype fdt = qs_precision_operand_dtype(p, false);
    const char *pn = qs_precision_name(p);
    const int64_t nx = d->N * d->H * d->W * d->C, ny = d->N * d->P * d->Q * d->K, nw = d->K * d->C * d->R * d->S;
    char shape[96], what[224];
    snprintf(shape, sizeof shape, "N%lld %lldx%lldx%lld->%lld k%lldx%lld s%lld p%lld%s", (long long)d->N,
             (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->K, (long long)d->R, (long long)d->S,
             (long long)d->stride_h, (long long)d->pad_h, d->has_bias ? " +b" : "");
    void *cplan = NULL, *gplan = NULL, *gplan16 = NULL;
    size_t cwsb = 0, gwsb = 0, gwsb16 = 0;
    ASSERT_OK(COPS->conv_plan(g_cpu, &cd, &cplan, &cwsb));
    keep_plan(g_cpu, cplan);
    snprintf(what, sizeof what, "conv_plan %s %s", pn, shape);
    if (!gpu_ok_(GOPS->conv_plan(g_gpu, &gd, &gplan, &gwsb), what)) return;
    keep_plan(g_gpu, gplan);
    snprintf(what, sizeof what, "conv_plan %s y bf16 %s", pn, shape);
    if (!gpu_ok_(GOPS->conv_plan(g_gpu, &gd16, &gplan16, &gwsb16), what)) return;
    keep_plan(g_gpu, gplan16);
    /* the log shows the path: a direct BF16 y needs no staging T, an epilogue path one of y's size */
    printf("  info %-60s workspace: y f32 plan %zu B, y bf16 plan %zu B\n", what, gwsb, gwsb16);
    void *cws = cwsb ? halloc(cwsb) : NULL, *gws = gwsb ? dalloc(gwsb, POISON) : NULL;
    void *gws16 = gwsb16 ? dalloc(gwsb16, POISON) : NULL;

    seed("conv_y16", (uint64_t)p * 1000003u + (uint64_t)(nx * 31 + nw * 7 + ny) + (d->has_bias ? 1u : 0u));
    float *x = rnd(nx, -1, 1), *w = rnd(nw, -0.5f, 0.5f);
    float *b = d->has_bias ? rnd(d->K, -1, 1) : NULL;
    qmat qx = quant_both(x, d->N * d->H * d->W, d->C, fdt, NULL);
    qmat qw = quant_both(w, d->K, d->C * d->R * d->S, fdt, NULL);
    const float *gb = b ? dup_gpu_f(b, d->K) : NULL;
    const double k_fwd = (double)(d->C * d->R * d->S);
    float *cy = hf(ny), *gy = dalloc_f(ny);
    uint16_t *gy16 = dalloc((size_t)ny * 2, POISON);
    ASSERT_OK(COPS->conv_forward(g_cpu, cplan, CST, &qx.cpu, &qw.cpu, b, cy, cws));
    snprintf(what, sizeof what, "conv %-4s fwd y bf16 %s", pn, shape);
    if (gpu_ok_(GOPS->conv_forward(g_gpu, gplan, GST, &qx.gpu, &qw.gpu, gb, gy, gws), what) &&
        gpu_ok_(GOPS->conv_forward(g_gpu, gplan16, GST, &qx.gpu, &qw.gpu, gb, gy16, gws16), what))
        fetch_judge_bf16(what, gy, gy16, cy, ny, k_fwd, gemm_budget(GEMM_CONV, p, k_fwd));
    /* backward-data into a BF16 dx (dx_dt), judged the same way */
    const double k_bd = (double)(d->K * ((d->R + d->stride_h - 1) / d->stride_h) * ((d->S + d->stride_w - 1) / d->stride_w));
    qmat qdy = quant_both(rnd(ny, -1, 1), d->N * d->P * d->Q, d->K, qs_precision_operand_dtype(p, true), NULL);
    float *cdx = hf(nx), *gdx = dalloc_f(nx);
    uint16_t *gdx16 = dalloc((size_t)nx * 2, POISON);
    ASSERT_OK(COPS->conv_backward_data(g_cpu, cplan, CST, &qdy.cpu, &qw.cpu, cdx, false, cws));
    snprintf(what, sizeof what, "conv %-4s bwd_data dx bf16 %s", pn, shape);
    if (gpu_ok_(GOPS->conv_backward_data(g_gpu, gplan, GST, &qdy.gpu, &qw.gpu, gdx, false, gws), what) &&
        gpu_ok_(GOPS->conv_backward_data(g_gpu, gplan16, GST, &qdy.gpu, &qw.gpu, gdx16, false, gws16), what))
        fetch_judge_bf16(what, gdx, gdx16, cdx, nx, k_bd, gemm_budget(GEMM_CONV, p, k_bd));
    snprintf(what, sizeof what, "conv %-4s bwd_data dx bf16 accumulate refused %s", pn, shape);
    check_fact(what, GOPS->conv_backward_data(g_gpu, gplan16, GST, &qdy.gpu, &qw.gpu, gdx16, true, gws16) ==
                         QS_ERR_INVALID_ARG, qs_last_error());
    qs_error_clear();
}

/* Conv forward into a BF16 y: at BF16 without a bias cuDNN's 16-bit engine writes y itself (a
 * 3x3, a strided 3x3; a single-channel input, which may have no such engine and take the FP32
 * paths); with a bias, and at FP32, TF32 and FP8, the epilogue rounds the result into y. */
static void test_conv_y_bf16(void **state) {
    BEGIN();
    const qs_conv_desc direct[] = {
        conv_desc(8, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, false), /* 64 -> 64 3x3 */
        conv_desc(8, 15, 15, 16, 32, 3, 3, 2, 2, 1, 1, false), /* 16 -> 32 3x3 stride 2, odd input */
        conv_desc(8, 28, 28, 1, 8, 5, 5, 1, 1, 2, 2, false),   /* 1 -> 8 channels 5x5 */
    };
    const qs_conv_desc epilogue[] = {
        conv_desc(8, 16, 16, 64, 64, 3, 3, 1, 1, 1, 1, false),
        conv_desc(8, 15, 15, 16, 32, 3, 3, 2, 2, 1, 1, true), /* with a bias */
    };
    for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++) {
        mark m = mark_now();
        run_conv_y16(QS_PREC_BF16, direct[i]);
        release_to(m);
    }
    const qs_precision precs[] = {QS_PREC_BF16, QS_PREC_FP32, QS_PREC_TF32, QS_PREC_FP8};
    for (size_t k = 0; k < sizeof precs / sizeof precs[0]; k++)
        for (size_t i = 0; i < sizeof epilogue / sizeof epilogue[0]; i++) {
            if (precs[k] == QS_PREC_BF16 && !epilogue[i].has_bias) continue; /* in `direct` */
            mark m = mark_now();
            run_conv_y16(precs[k], epilogue[i]);
            release_to(m);
        }
    END();
}

/* One Linear shape at precision p: the forward of a y_dt BF16 plan against the y_dt F32 plan and
 * the CPU (above). */
static void run_linear_y16(qs_precision p, lin_case lc) {
    const int64_t M = lc.M, N = lc.N, K = lc.K;
    const qs_dtype fdt = qs_precision_operand_dtype(p, false);
    const char *pn = qs_precision_name(p);
    char shape[64], what[192];
    snprintf(shape, sizeof shape, "M%lld N%lld K%lld%s", (long long)M, (long long)N, (long long)K, lc.bias ? " +b" : "");
    qs_linear_desc gd = {.M = M, .N = N, .K = K, .has_bias = lc.bias, .prec = p}, gd16 = gd, cd = gd;
    gd16.y_dt = QS_BF16;
    gd16.dx_dt = QS_BF16;
    cd.prec = cpu_prec(p);
    void *cplan = NULL, *gplan = NULL, *gplan16 = NULL;
    size_t cwsb = 0, gwsb = 0, gwsb16 = 0;
    ASSERT_OK(COPS->linear_plan(g_cpu, &cd, &cplan, &cwsb));
    keep_plan(g_cpu, cplan);
    snprintf(what, sizeof what, "linear_plan %s %s", pn, shape);
    if (!gpu_ok_(GOPS->linear_plan(g_gpu, &gd, &gplan, &gwsb), what)) return;
    keep_plan(g_gpu, gplan);
    snprintf(what, sizeof what, "linear_plan %s y bf16 %s", pn, shape);
    if (!gpu_ok_(GOPS->linear_plan(g_gpu, &gd16, &gplan16, &gwsb16), what)) return;
    keep_plan(g_gpu, gplan16);
    /* the log shows the path: the fallback reserves an FP32 Y (M·N·4 B, 256-aligned), a BF16 D none */
    printf("  info %-60s workspace: y f32 plan %zu B, y bf16 plan %zu B\n", what, gwsb, gwsb16);
    void *cws = cwsb ? halloc(cwsb) : NULL, *gws = gwsb ? dalloc(gwsb, POISON) : NULL;
    void *gws16 = gwsb16 ? dalloc(gwsb16, POISON) : NULL;

    seed("linear_y16", (uint64_t)p * 1000003u + (uint64_t)(M * 10007 + N * 101 + K) + (lc.bias ? 1u : 0u));
    float *x = rnd(M * K, -2, 2), *w = rnd(N * K, -0.5f, 0.5f);
    float *b = lc.bias ? rnd(N, -1, 1) : NULL;
    qmat qx = quant_both(x, M, K, fdt, NULL), qw = quant_both(w, N, K, fdt, NULL);
    const float *gb = b ? dup_gpu_f(b, N) : NULL;
    float *cy = hf(M * N), *gy = dalloc_f(M * N);
    uint16_t *gy16 = dalloc((size_t)(M * N) * 2, POISON);
    ASSERT_OK(COPS->linear_forward(g_cpu, cplan, CST, &qx.cpu, &qw.cpu, b, cy, cws));
    snprintf(what, sizeof what, "linear %-4s fwd y bf16 %s", pn, shape);
    if (gpu_ok_(GOPS->linear_forward(g_gpu, gplan, GST, &qx.gpu, &qw.gpu, gb, gy, gws), what) &&
        gpu_ok_(GOPS->linear_forward(g_gpu, gplan16, GST, &qx.gpu, &qw.gpu, gb, gy16, gws16), what))
        fetch_judge_bf16(what, gy, gy16, cy, M * N, (double)K, gemm_budget(GEMM_LINEAR, p, (double)K));
    /* backward-data into a BF16 dx (dx_dt), judged the same way */
    qmat qdy = quant_both(rnd(M * N, -1, 1), M, N, qs_precision_operand_dtype(p, true), NULL);
    float *cdx = hf(M * K), *gdx = dalloc_f(M * K);
    uint16_t *gdx16 = dalloc((size_t)(M * K) * 2, POISON);
    ASSERT_OK(COPS->linear_backward_data(g_cpu, cplan, CST, &qdy.cpu, &qw.cpu, cdx, false, cws));
    snprintf(what, sizeof what, "linear %-4s bwd_data dx bf16 %s", pn, shape);
    if (gpu_ok_(GOPS->linear_backward_data(g_gpu, gplan, GST, &qdy.gpu, &qw.gpu, gdx, false, gws), what) &&
        gpu_ok_(GOPS->linear_backward_data(g_gpu, gplan16, GST, &qdy.gpu, &qw.gpu, gdx16, false, gws16), what))
        fetch_judge_bf16(what, gdx, gdx16, cdx, M * K, (double)N, gemm_budget(GEMM_LINEAR, p, (double)N));
    snprintf(what, sizeof what, "linear %-4s bwd_data dx bf16 accumulate refused %s", pn, shape);
    check_fact(what, GOPS->linear_backward_data(g_gpu, gplan16, GST, &qdy.gpu, &qw.gpu, gdx16, true, gws16) ==
                         QS_ERR_INVALID_ARG, qs_last_error());
    qs_error_clear();
}

/* Linear forward into a BF16 y: at BF16 without a bias cuBLASLt writes a BF16 D (where it has an
 * algorithm for the shape); with a bias, at FP8, and at FP32 and FP16 (whose inputs cuBLASLt
 * pairs with no BF16 D: the plan falls back by itself) an FP32 product is rounded into y. */
static void test_linear_y_bf16(void **state) {
    BEGIN();
    const lin_case shapes[] = {
        {3, 5, 7, false},        /* small and odd */
        {37, 29, 53, true},      /* odd, with a bias */
        {8, 64, 784, false},     /* an MLP's first layer */
        {256, 512, 1024, false}, /* large: tensor-core tiles */
        {256, 512, 1024, true},
    };
    const qs_precision precs[] = {QS_PREC_BF16, QS_PREC_FP8, QS_PREC_FP32, QS_PREC_FP16};
    for (size_t k = 0; k < sizeof precs / sizeof precs[0]; k++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const bool fallback_only = precs[k] == QS_PREC_FP32 || precs[k] == QS_PREC_FP16;
            if (fallback_only && (shapes[i].bias || shapes[i].M == 8)) continue; /* 3 plans a case: stay in MAX_PLANS */
            mark m = mark_now();
            run_linear_y16(precs[k], shapes[i]);
            release_to(m);
        }
    END();
}

/* y_dt other than F32 and BF16: refused at plan time (QS_ERR_UNSUPPORTED naming y_dt), no plan. */
static void test_y_dt_refused(void **state) {
    BEGIN();
    char detail[320];
    const qs_linear_desc ld = {.M = 4, .N = 3, .K = 2, .has_bias = false, .prec = QS_PREC_BF16, .y_dt = QS_F16};
    void *plan = NULL;
    size_t ws = 0;
    qs_error_clear();
    qs_status st = GOPS->linear_plan(g_gpu, &ld, &plan, &ws);
    keep_plan(g_gpu, plan);
    snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "plan created" : qs_last_error());
    check_fact("linear_plan y_dt f16 refused", st == QS_ERR_UNSUPPORTED && !plan && strstr(qs_last_error(), "y_dt"),
               detail);
    qs_conv_desc cd = conv_desc(1, 8, 8, 3, 4, 3, 3, 1, 1, 1, 1, false);
    cd.prec = QS_PREC_BF16;
    cd.y_dt = QS_F16;
    ASSERT_OK(qs_conv_desc_finish(&cd));
    plan = NULL;
    qs_error_clear();
    st = GOPS->conv_plan(g_gpu, &cd, &plan, &ws);
    keep_plan(g_gpu, plan);
    snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "plan created" : qs_last_error());
    check_fact("conv_plan y_dt f16 refused", st == QS_ERR_UNSUPPORTED && !plan && strstr(qs_last_error(), "y_dt"),
               detail);
    qs_error_clear();
    END();
}

/* ============================================================================== quantization */

/* Inputs for quantize: rows of different magnitude (per-row scales differ), plus zeros, −0,
 * subnormals, exact BF16/FP16 ties, a value beyond FP16's range and, when `nonfinite`, NaN
 * (quiet and signalling) and ±Inf; row 1 all zero when rows ≥ 3 (a zero per-row scale). */
static float *quant_input(int64_t rows, int64_t cols, bool nonfinite) {
    float *x = rnd(rows * cols, -3, 3);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] *= ldexpf(1.0f, (int)(r % 9) - 4);
    if (rows >= 3)
        for (int64_t c = 0; c < cols; c++) x[cols + c] = 0.0f;
    const float special[] = {0.0f, -0.0f, 1e-40f, -3e-39f, bitsf(0x3F808000u), 1.0f + 0x1p-11f, -(1.0f + 3 * 0x1p-11f),
                             70000.0f, 0x1p-25f, 0x1.8p-24f, 65519.0f};
    const float nonfin[] = {NAN, INFINITY, -INFINITY, bitsf(0x7FA00001u), bitsf(0xFFC12345u)};
    const int64_t n = rows * cols;
    int64_t at = rows >= 3 ? 2 * cols : 0; /* after the zero row */
    for (size_t i = 0; i < sizeof special / sizeof special[0] && at < n; i++, at += 3) x[at] = special[i];
    for (size_t i = 0; nonfinite && i < sizeof nonfin / sizeof nonfin[0] && at < n; i++, at += 3) x[at] = nonfin[i];
    return x;
}

/* The same quantization with a transposed copy (dst_t): the GPU's codes are still cq (the
 * CPU's, without dst_t) and its transposed copy is the CPU's, bit for bit. */
static void quant_transposed_case(const float *x, const float *gx, int64_t rows, int64_t cols, const float *col_scale,
                                  const float *gcol, qs_dtype dt, const qs_sr *sr, const void *cq, const char *what0) {
    const int64_t n = rows * cols;
    char what[224];
    snprintf(what, sizeof what, "%s +dst_t", what0);
    void *cq2 = halloc((size_t)n), *ct = halloc((size_t)n);
    float cs[1];
    ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, col_scale, dt, cq2, cs, false, sr, ct, NULL));
    check_bits(what, cq2, cq, n, 1, NULL);
    void *gq = dalloc((size_t)n, POISON), *gt = dalloc((size_t)n, POISON);
    float *gs = dalloc_f(1);
    if (!gpu_ok_(GOPS->quantize(g_gpu, GST, rows, cols, gx, gcol, dt, gq, gs, false, sr, gt, NULL), what)) return;
    void *hq = halloc((size_t)n), *ht = halloc((size_t)n);
    if (!dget(hq, gq, (size_t)n, what) || !dget(ht, gt, (size_t)n, what)) return;
    check_bits(what, hq, cq, n, 1, NULL);
    snprintf(what, sizeof what, "%s +dst_t: the transposed copy", what0);
    check_bits(what, ht, ct, n, 1, NULL);
}

/* GPU quantize against CPU quantize on the same input (codes and scales bit for bit), then GPU
 * dequantize against CPU dequantize of the same (CPU) codes when `deq`. */
static void quant_case(const float *x, const float *gx, int64_t rows, int64_t cols, const float *col_scale,
                       const float *gcol, qs_dtype dt, bool per_row, const qs_sr *sr, bool deq) {
    const int64_t n = rows * cols, ns = per_row ? rows : 1;
    const size_t es = qs_dtype_size(dt), bytes = (size_t)n * es;
    const bool scaled = dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2;
    char what[192];
    snprintf(what, sizeof what, "quantize %-6s%s %-3s %lldx%lld%s%s", qs_dtype_name(dt), per_row ? " per-row" : "",
             sr ? "SR" : "RNE", (long long)rows, (long long)cols, col_scale ? " col_scale" : "",
             sr && sr->offset ? " offset" : "");
    void *cq = halloc(bytes);
    float *cs = scaled ? hf(ns) : NULL;
    ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, col_scale, dt, cq, cs, per_row, sr, NULL, NULL));
    void *gq = dalloc(bytes, POISON);
    float *gs = scaled ? dalloc_f(ns) : NULL; /* scales unused (NULL) for bf16/f16/f32 */
    if (!gpu_ok_(GOPS->quantize(g_gpu, GST, rows, cols, gx, gcol, dt, gq, gs, per_row, sr, NULL, NULL), what)) return;
    void *hq = halloc(bytes);
    if (!dget(hq, gq, bytes, what)) return;
    check_bits(what, hq, cq, n, es, col_scale ? NULL : x);
    if (scaled) {
        float *hs = hf(ns);
        char sw[224];
        snprintf(sw, sizeof sw, "%s: scales", what);
        if (dget(hs, gs, (size_t)ns * 4, sw)) check_bits(sw, hs, cs, ns, 4, NULL);
    }
    if (dt != QS_BF16 && dt != QS_F16 && dt != QS_F32 && !per_row) quant_transposed_case(x, gx, rows, cols, col_scale, gcol, dt, sr, cq, what);
    if (!deq) return;
    qs_operand cop = {cq, dt, scaled ? cs : NULL, per_row, NULL};
    qs_operand gop = {dup_gpu(cq, bytes), dt, scaled ? dup_gpu_f(cs, ns) : NULL, per_row, NULL};
    float *cd = hf(n), *gd = dalloc_f(n), *hd = hf(n);
    ASSERT_OK(COPS->dequantize(g_cpu, CST, rows, cols, &cop, cd));
    snprintf(what, sizeof what, "dequantize %-6s%s %lldx%lld", qs_dtype_name(dt), per_row ? " per-row" : "", (long long)rows,
             (long long)cols);
    if (gpu_ok_(GOPS->dequantize(g_gpu, GST, rows, cols, &gop, gd), what) && dget(hd, gd, (size_t)n * 4, what))
        check_bits(what, hd, cd, n, 4, NULL);
}

static void test_quantize(void **state) {
    BEGIN();
    /* {130, 256}, {64, 128}: whole 64-column groups (one Philox call per tile row, GROUPED in
     * cuda_quant.cu) with a partial row tile and without */
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 40}, {64, 1000}, {257, 1031}, {2, 100003}, {130, 256}, {64, 128}};
    const struct {
        qs_dtype dt;
        bool per_row;
    } kinds[] = {{QS_S8, false}, {QS_S8, true}, {QS_F8E4M3, false}, {QS_F8E5M2, false},
                 {QS_BF16, false}, {QS_F16, false}, {QS_F32, false}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1];
        mark m = mark_now();
        seed("quantize", s);
        float *x = quant_input(rows, cols, false), *xnf = quant_input(rows, cols, true);
        float *colsc = rnd(cols, 0.25f, 4.0f);
        const float *gx = dup_gpu_f(x, rows * cols), *gxnf = dup_gpu_f(xnf, rows * cols), *gcol = dup_gpu_f(colsc, cols);
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            const qs_dtype dt = kinds[k].dt;
            /* BF16/F16/F32 pass NaN/Inf through; INT8/FP8 reject them (tested below) */
            const bool pass_nonfinite = dt == QS_BF16 || dt == QS_F16 || dt == QS_F32;
            const float *in = pass_nonfinite ? xnf : x, *gin = pass_nonfinite ? gxnf : gx;
            const qs_sr sr0 = {.key = qs_rng_key(9, "quant_sr", s), .counter = 5, .offset = 0};
            const qs_sr sr1 = {.key = qs_rng_key(9, "quant_sr", s + 100), .counter = 7, .offset = 1000003};
            const qs_sr *srs[3] = {NULL, &sr0, &sr1};
            for (int r = 0; r < 3; r++) {
                quant_case(in, gin, rows, cols, NULL, NULL, dt, kinds[k].per_row, srs[r], r == 0);
                quant_case(in, gin, rows, cols, colsc, gcol, dt, kinds[k].per_row, srs[r], false);
            }
        }
        release_to(m);
    }
    /* an all-zero tensor: S8 scale 2^-126, FP8 scale 1 */
    float *zeros = hf(4 * 33), *gzeros = dup_gpu_f(zeros, 4 * 33);
    quant_case(zeros, gzeros, 4, 33, NULL, NULL, QS_S8, false, NULL, true);
    quant_case(zeros, gzeros, 4, 33, NULL, NULL, QS_S8, true, NULL, true);
    quant_case(zeros, gzeros, 4, 33, NULL, NULL, QS_F8E4M3, false, NULL, true);
    quant_case(zeros, gzeros, 4, 33, NULL, NULL, QS_F8E5M2, false, NULL, true);
    END();
}

/* Stochastic rounding with its counter in device memory (qs_sr.counter_at, what captured graphs
 * read): the codes (and transposed copies) are those of the same counter passed by value, in
 * every kernel (element-wise BF16, tiled 1-byte formats with and without whole Philox groups),
 * and the CPU backend reading its counter from host memory agrees; the counter is really read
 * (a different value there gives other codes). */
static void test_quantize_counter_at(void **state) {
    BEGIN();
    const int64_t shapes[][2] = {{5, 40}, {130, 256}};
    const qs_dtype dts[] = {QS_BF16, QS_S8, QS_F8E4M3, QS_F8E5M2};
    const uint64_t step = 12345, other = 12346;
    const uint64_t *gstep = dup_gpu(&step, sizeof step), *gother = dup_gpu(&other, sizeof other);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        seed("quantize_counter_at", s);
        float *x = quant_input(rows, cols, false);
        const float *gx = dup_gpu_f(x, n);
        for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
            const qs_dtype dt = dts[d];
            const size_t bytes = (size_t)n * qs_dtype_size(dt);
            const bool scaled = dt != QS_BF16, transposed = dt == QS_F8E4M3 || dt == QS_F8E5M2;
            const uint64_t key = qs_rng_key(9, "counter_at", d);
            const qs_sr by_value = {.key = key, .counter = step};
            const qs_sr *const variants[3] = {
                &(qs_sr){.key = key, .counter = 0, .counter_at = gstep},
                &(qs_sr){.key = key, .counter = step, .counter_at = gother},
                &by_value,
            };
            void *q[3], *qt[3], *h[3], *ht[3];
            for (int v = 0; v < 3; v++) {
                q[v] = dalloc(bytes, POISON);
                qt[v] = transposed ? dalloc(bytes, POISON) : NULL;
                float *sc = scaled ? dalloc_f(1) : NULL;
                char what[96];
                snprintf(what, sizeof what, "quantize %s %lldx%lld counter_at variant %d", qs_dtype_name(dt),
                         (long long)rows, (long long)cols, v);
                if (!gpu_ok_(GOPS->quantize(g_gpu, GST, rows, cols, gx, NULL, dt, q[v], sc, false, variants[v], qt[v],
                                            NULL), what))
                    return;
                h[v] = halloc(bytes);
                ht[v] = transposed ? halloc(bytes) : NULL;
                if (!dget(h[v], q[v], bytes, what) || (transposed && !dget(ht[v], qt[v], bytes, what))) return;
            }
            char what[128];
            snprintf(what, sizeof what, "quantize %s %lldx%lld SR counter read from device memory", qs_dtype_name(dt),
                     (long long)rows, (long long)cols);
            check_bits(what, h[0], h[2], n, qs_dtype_size(dt), x);
            if (transposed) check_bits(what, ht[0], ht[2], n, 1, NULL);
            check_fact(what, memcmp(h[1], h[2], bytes) != 0, "a different counter in device memory changes the codes");
            /* the CPU: counter in host memory */
            const qs_sr cpu_at = {.key = key, .counter = 0, .counter_at = &step};
            void *cq = halloc(bytes);
            float *cs = scaled ? hf(1) : NULL;
            ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, NULL, dt, cq, cs, false, &cpu_at, NULL, NULL));
            snprintf(what, sizeof what, "quantize %s %lldx%lld SR counter_at: CPU = GPU", qs_dtype_name(dt),
                     (long long)rows, (long long)cols);
            check_bits(what, cq, h[0], n, qs_dtype_size(dt), x);
        }
    }
    END();
}

/* FP8 delayed scaling: a sequence of quantizations of growing and shrinking tensors through
 * one amax history (len 3), GPU against CPU: codes, scales and the history bit for bit after
 * every call, with nearest and stochastic rounding, a col_scale, a transposed copy, a call
 * that does not record, and a flat tensor — for E5M2 with the slot taken from a step in
 * memory (step_at: step + 1, not the slot passed) — then non-finite input reported by
 * stream_sync. */
static void test_quantize_delayed(void **state) {
    BEGIN();
    const int64_t rows = 70, cols = 130, n = rows * cols;
    const float gain[] = {1.0f, 3.0f, 0.25f, 8.0f, 1.0f, 0.5f}; /* 3 and 8: beyond the history: saturate */
    seed("quantize_delayed", 0);
    float *x0 = rnd(n, -2, 2), *colsc = rnd(cols, 0.5f, 2.0f), *gcol = dup_gpu_f(colsc, cols);
    const qs_dtype dts[] = {QS_F8E4M3, QS_F8E5M2};
    for (int d = 0; d < 2; d++) {
        float ch[4] = {0, 0, 0, 0}, *gh = dup_gpu_f(ch, 4), hh[4];
        for (int step = 0; step < 6; step++) {
            float *x = hcopy(x0, n);
            for (int64_t i = 0; i < n; i++) x[i] *= gain[step];
            const bool sr_on = step % 2 == 1, cs_on = step == 2, flat = step == 4, record = step != 3;
            const qs_sr sr = {.key = 77, .counter = (uint64_t)step, .offset = 0};
            const bool at = dts[d] == QS_F8E5M2;
            const int64_t step_mem = step + 1;
            const qs_quant_delayed cdl = {.amax = ch, .len = 3, .slot = step % 3, .record = record,
                                          .step_at = at ? &step_mem : NULL};
            const qs_quant_delayed gdl = {.amax = gh, .len = 3, .slot = step % 3, .record = record,
                                          .step_at = at ? dup_gpu(&step_mem, sizeof step_mem) : NULL};
            const int64_t r = flat ? 1 : rows, c = flat ? n : cols;
            char what[160];
            snprintf(what, sizeof what, "quantize %s delayed step %d%s%s%s%s", qs_dtype_name(dts[d]), step,
                     sr_on ? " SR" : "", cs_on ? " col_scale" : "", record ? "" : " no-record", flat ? " flat" : "");
            uint8_t *cq = halloc((size_t)n), *ct = halloc((size_t)n), *hq = halloc((size_t)n), *ht = halloc((size_t)n);
            float cs, hs;
            ASSERT_OK(COPS->quantize(g_cpu, CST, r, c, x, cs_on ? colsc : NULL, dts[d], cq, &cs, false, sr_on ? &sr : NULL,
                                     flat ? NULL : ct, &cdl));
            if (at && step == 0)
                check_fact("quantize f8e5m2 delayed step_at: the CPU records into slot (step + 1) mod 3",
                           ch[1] > 0.0f && ch[0] == 0.0f, "");
            void *gq = dalloc((size_t)n, POISON), *gt = dalloc((size_t)n, POISON);
            float *gs = dalloc_f(1);
            if (!gpu_ok_(GOPS->quantize(g_gpu, GST, r, c, dup_gpu_f(x, n), cs_on ? gcol : NULL, dts[d], gq, gs, false,
                                        sr_on ? &sr : NULL, flat ? NULL : gt, &gdl),
                         what))
                break;
            if (!dget(hq, gq, (size_t)n, what) || !dget(&hs, gs, 4, what) || !dget(hh, gh, 12, what)) break;
            check_bits(what, hq, cq, n, 1, NULL);
            char w2[200];
            snprintf(w2, sizeof w2, "%s: scale", what);
            check_bits(w2, &hs, &cs, 1, 4, NULL);
            snprintf(w2, sizeof w2, "%s: amax history", what);
            check_bits(w2, hh, ch, 3, 4, NULL);
            if (!flat && dget(ht, gt, (size_t)n, what)) {
                snprintf(w2, sizeof w2, "%s: transposed copy", what);
                check_bits(w2, ht, ct, n, 1, NULL);
            }
        }
    }
    /* non-finite input with a history: reported by the next stream_sync */
    float h[4] = {1.0f, 0, 0, 0}, *gh = dup_gpu_f(h, 4);
    float *xb = hcopy(x0, n);
    xb[100] = NAN;
    const qs_quant_delayed gdl = {.amax = gh, .len = 3, .slot = 1, .record = true};
    qs_error_clear();
    qs_status st = GOPS->quantize(g_gpu, GST, rows, cols, dup_gpu_f(xb, n), NULL, QS_F8E4M3, dalloc((size_t)n, POISON),
                                  dalloc_f(1), false, NULL, NULL, &gdl);
    if (st == QS_OK) st = GOPS->stream_sync(g_gpu, GST);
    check_fact("quantize f8e4m3 delayed with NaN: non-finite error at stream_sync",
               st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "non-finite"), qs_status_name(st));
    check_fact("  ...then stream_sync is clean", GOPS->stream_sync(g_gpu, GST) == QS_OK, "");
    END();
}

/* A non-finite input to an INT8/FP8 quantize is QS_ERR_INVALID_ARG with "non-finite": from the
 * call itself or, for the asynchronous GPU, from the next stream_sync, which also clears the
 * condition; BF16/F16 pass NaN/Inf through without error. */
static void test_quantize_nonfinite(void **state) {
    BEGIN();
    const int64_t rows = 3, cols = 1000, n = rows * cols;
    const struct {
        qs_dtype dt;
        bool per_row;
    } kinds[] = {{QS_S8, false}, {QS_S8, true}, {QS_F8E4M3, false}, {QS_F8E5M2, false}};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const char *bad_name[] = {"NaN", "+Inf", "-Inf"};
    seed("quantize_nonfinite", 0);
    float *x = rnd(n, -1, 1);
    float *gx = dup_gpu_f(x, n), *gs = dalloc_f(rows);
    void *gq = dalloc((size_t)n, POISON), *cq = halloc((size_t)n);
    float *cs = hf(rows);
    char what[160], detail[400];
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int b = 0; b < 3; b++) {
            float *xb = hcopy(x, n);
            xb[777] = bad[b];
            snprintf(what, sizeof what, "quantize %s%s with %s: non-finite error", qs_dtype_name(kinds[k].dt),
                     kinds[k].per_row ? " per-row" : "", bad_name[b]);
            qs_error_clear();
            qs_status cst = COPS->quantize(g_cpu, CST, rows, cols, xb, NULL, kinds[k].dt, cq, cs, kinds[k].per_row, NULL, NULL, NULL);
            bool cpu_ok = cst == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "non-finite");
            float *gxb = dup_gpu_f(xb, n);
            qs_error_clear();
            qs_status st = GOPS->quantize(g_gpu, GST, rows, cols, gxb, NULL, kinds[k].dt, gq, gs, kinds[k].per_row, NULL, NULL, NULL);
            const char *where = "call";
            if (st == QS_OK) {
                st = GOPS->stream_sync(g_gpu, GST);
                where = "stream_sync";
            }
            bool gpu_ok = st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "non-finite");
            snprintf(detail, sizeof detail, "cpu %s; gpu %s from the %s: %s", qs_status_name(cst), qs_status_name(st),
                     where, qs_last_error());
            check_fact(what, cpu_ok && gpu_ok, detail);
            /* reported once: the stream is clean again and a finite quantize works */
            qs_status again = GOPS->stream_sync(g_gpu, GST);
            snprintf(what, sizeof what, "  ...then stream_sync is clean (%s)", bad_name[b]);
            check_fact(what, again == QS_OK, qs_status_name(again));
        }
    ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, x, NULL, QS_F8E4M3, cq, cs, false, NULL, NULL, NULL));
    void *hq = halloc((size_t)n);
    if (GPU_OK(GOPS->quantize(g_gpu, GST, rows, cols, gx, NULL, QS_F8E4M3, gq, gs, false, NULL, NULL, NULL)) &&
        dget(hq, gq, (size_t)n, "quantize after the errors"))
        check_bits("quantize f8e4m3 after the errors", hq, cq, n, 1, x);
    /* BF16 / F16: non-finite values are converted, no error */
    float *xb = hcopy(x, n);
    xb[5] = NAN, xb[6] = INFINITY, xb[7] = -INFINITY;
    float *gxb = dup_gpu_f(xb, n);
    void *g16 = dalloc((size_t)n * 2, POISON), *c16 = halloc((size_t)n * 2), *h16 = halloc((size_t)n * 2);
    const qs_dtype d16[2] = {QS_BF16, QS_F16};
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(COPS->quantize(g_cpu, CST, rows, cols, xb, NULL, d16[i], c16, NULL, false, NULL, NULL, NULL));
        snprintf(what, sizeof what, "quantize %s with NaN/Inf (no error)", qs_dtype_name(d16[i]));
        if (gpu_ok_(GOPS->quantize(g_gpu, GST, rows, cols, gxb, NULL, d16[i], g16, NULL, false, NULL, NULL, NULL), what) &&
            dget(h16, g16, (size_t)n * 2, what))
            check_bits(what, h16, c16, n, 2, xb);
    }
    END();
}

/* ====================================================================================== cast */

static void test_cast(void **state) {
    BEGIN();
    const qs_dtype dts[3] = {QS_F32, QS_BF16, QS_F16};
    /* FP32 sources: hand-picked ties/specials, then random patterns over the whole range (half
     * with exponents 2^-27..2^18: FP16 subnormals, normals and overflow), NaNs included */
    const int64_t nf = 200003;
    seed("cast", 0);
    float *f = hf(nf);
    const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F80FFFFu, 0x7F7FFFFFu, 0x7F800000u,
                                0xFF800000u, 0x80000000u, 0x00000001u, 0x7FC00001u, 0x7F800001u, 0xBF7F8000u,
                                0x477FF000u, 0x477FEFFFu, 0x33000000u, 0x33000001u, 0x38800000u, 0x387FE000u};
    for (int64_t i = 0; i < nf; i++) {
        uint32_t u = qs_rng_u32(&g_rng);
        if (i % 2) u = (u & 0x807FFFFFu) | ((100u + qs_rng_u32(&g_rng) % 46u) << 23);
        f[i] = bitsf(u);
    }
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) f[i] = bitsf(special[i]);
    uint16_t *all = halloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    char what[128];
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < 3; t++) {
            const int64_t n = dts[s] == QS_F32 ? nf : 65536;
            const void *src = dts[s] == QS_F32 ? (const void *)f : (const void *)all;
            const size_t ss = qs_dtype_size(dts[s]), ds = qs_dtype_size(dts[t]);
            void *cdst = halloc((size_t)n * ds), *hdst = halloc((size_t)n * ds), *gdst = dalloc((size_t)n * ds, POISON);
            const void *gsrc = dup_gpu(src, (size_t)n * ss);
            ASSERT_OK(COPS->cast(g_cpu, CST, n, src, dts[s], cdst, dts[t]));
            snprintf(what, sizeof what, "cast %s -> %s (%s)", qs_dtype_name(dts[s]), qs_dtype_name(dts[t]),
                     dts[s] == QS_F32 ? "random patterns + specials" : "all 65536 patterns");
            if (gpu_ok_(GOPS->cast(g_gpu, GST, n, gsrc, dts[s], gdst, dts[t]), what) && dget(hdst, gdst, (size_t)n * ds, what))
                check_bits(what, hdst, cdst, n, ds, dts[s] == QS_F32 ? f : NULL);
        }
    END();
}

/* ============================================================================= element-wise */

static void test_eltwise(void **state) {
    BEGIN();
    const int64_t sizes[2] = {1003, (1 << 20) + 1};
    char what[128];
    for (int t = 0; t < 2; t++) {
        const int64_t n = sizes[t];
        seed("eltwise", (uint64_t)t);
        float *x = rnd(n, -1, 1), *b = rnd(n, -1, 1), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
        x[0] = 0.0f, x[1] = -0.0f, x[2] = NAN, x[3] = INFINITY, x[4] = -INFINITY, x[5] = 1e-40f, x[6] = -1e-40f;
        float *xa = hcopy(x, n); /* for add: no NaN (CPU add+relu maps NaN to 0, relu keeps it) */
        xa[2] = 0.5f;
        float *gx = dup_gpu_f(x, n), *gxa = dup_gpu_f(xa, n), *gb = dup_gpu_f(b, n), *gdy = dup_gpu_f(dy, n);
        float *cy = hf(n), *hy = hf(n), *gy = dalloc_f(n);
#define ELT_CHECK(label, call_cpu, call_gpu, gout, cout)                                                      \
    do {                                                                                                      \
        snprintf(what, sizeof what, "%s n=%lld", label, (long long)n);                                        \
        ASSERT_OK(call_cpu);                                                                                  \
        if (gpu_ok_(call_gpu, what) && dget(hy, gout, (size_t)n * 4, what)) check_exact(what, hy, cout, n);   \
    } while (0)
        ELT_CHECK("relu fwd", COPS->relu_forward(g_cpu, CST, n, x, cy), GOPS->relu_forward(g_gpu, GST, n, gx, gy), gy, cy);
        float *yrelu = hcopy(cy, n); /* the CPU's ReLU output drives both backward passes */
        float *cin = hcopy(x, n), *gin = dup_gpu_f(x, n);
        ELT_CHECK("relu fwd in place", COPS->relu_forward(g_cpu, CST, n, cin, cin), GOPS->relu_forward(g_gpu, GST, n, gin, gin),
                  gin, cin);
        float *gyr = dup_gpu_f(yrelu, n), *gdx = dalloc_f(n);
        ELT_CHECK("relu bwd", COPS->relu_backward(g_cpu, CST, n, yrelu, dy, QS_F32, cy, false),
                  GOPS->relu_backward(g_gpu, GST, n, gyr, gdy, QS_F32, gdx, false), gdx, cy);
        float *cacc = hcopy(base, n), *gacc = dup_gpu_f(base, n);
        ELT_CHECK("relu bwd accumulate", COPS->relu_backward(g_cpu, CST, n, yrelu, dy, QS_F32, cacc, true),
                  GOPS->relu_backward(g_gpu, GST, n, gyr, gdy, QS_F32, gacc, true), gacc, cacc);
        /* a BF16 dy (a BF16 GEMM's dx_dt): widened exactly on both backends */
        uint16_t *dyb = halloc((size_t)n * 2);
        ASSERT_OK(qs_f32_to_bf16(n, dy, dyb, NULL));
        const void *gdyb = dup_gpu(dyb, (size_t)n * 2);
        ELT_CHECK("relu bwd dy bf16", COPS->relu_backward(g_cpu, CST, n, yrelu, dyb, QS_BF16, cy, false),
                  GOPS->relu_backward(g_gpu, GST, n, gyr, gdyb, QS_BF16, gdx, false), gdx, cy);
        float *cacc16 = hcopy(base, n), *gacc16 = dup_gpu_f(base, n);
        ELT_CHECK("relu bwd dy bf16 accumulate", COPS->relu_backward(g_cpu, CST, n, yrelu, dyb, QS_BF16, cacc16, true),
                  GOPS->relu_backward(g_gpu, GST, n, gyr, gdyb, QS_BF16, gacc16, true), gacc16, cacc16);
        ELT_CHECK("add", COPS->add_forward(g_cpu, CST, n, xa, QS_F32, b, QS_F32, cy, false),
                  GOPS->add_forward(g_gpu, GST, n, gxa, QS_F32, gb, QS_F32, gy, false), gy, cy);
        ELT_CHECK("add+relu", COPS->add_forward(g_cpu, CST, n, xa, QS_F32, b, QS_F32, cy, true),
                  GOPS->add_forward(g_gpu, GST, n, gxa, QS_F32, gb, QS_F32, gy, true), gy, cy);
        /* BF16 inputs (a block output kept in BF16): widened exactly on both backends */
        uint16_t *xab = halloc((size_t)n * 2), *bb = halloc((size_t)n * 2);
        ASSERT_OK(qs_f32_to_bf16(n, xa, xab, NULL));
        ASSERT_OK(qs_f32_to_bf16(n, b, bb, NULL));
        const void *gxab = dup_gpu(xab, (size_t)n * 2), *gbb = dup_gpu(bb, (size_t)n * 2);
        ELT_CHECK("add b bf16", COPS->add_forward(g_cpu, CST, n, xa, QS_F32, bb, QS_BF16, cy, false),
                  GOPS->add_forward(g_gpu, GST, n, gxa, QS_F32, gbb, QS_BF16, gy, false), gy, cy);
        ELT_CHECK("add+relu a bf16", COPS->add_forward(g_cpu, CST, n, xab, QS_BF16, b, QS_F32, cy, true),
                  GOPS->add_forward(g_gpu, GST, n, gxab, QS_BF16, gb, QS_F32, gy, true), gy, cy);
        ELT_CHECK("add+relu both bf16", COPS->add_forward(g_cpu, CST, n, xab, QS_BF16, bb, QS_BF16, cy, true),
                  GOPS->add_forward(g_gpu, GST, n, gxab, QS_BF16, gbb, QS_BF16, gy, true), gy, cy);
        float *cacc2 = hcopy(base, n), *gacc2 = dup_gpu_f(base, n);
        ELT_CHECK("accumulate +=", COPS->accumulate(g_cpu, CST, n, x, cacc2, true),
                  GOPS->accumulate(g_gpu, GST, n, gx, gacc2, true), gacc2, cacc2);
        float *gcopy = dalloc_f(n);
        ELT_CHECK("accumulate = (copy)", COPS->accumulate(g_cpu, CST, n, x, cy, false),
                  GOPS->accumulate(g_gpu, GST, n, gx, gcopy, false), gcopy, cy);
        float *csc = hcopy(b, n), *gsc = dup_gpu_f(b, n);
        ELT_CHECK("scale by -0.375", COPS->scale(g_cpu, CST, n, csc, -0.375f), GOPS->scale(g_gpu, GST, n, gsc, -0.375f), gsc,
                  csc);
        ELT_CHECK("scale by 1/3", COPS->scale(g_cpu, CST, n, csc, 1.0f / 3.0f), GOPS->scale(g_gpu, GST, n, gsc, 1.0f / 3.0f),
                  gsc, csc);
#undef ELT_CHECK
    }
    check_fact("relu_forward n=0 with NULL pointers", GOPS->relu_forward(g_gpu, GST, 0, NULL, NULL) == QS_OK, "");
    END();
}

/* ================================================================================== dropout */

static void test_dropout(void **state) {
    BEGIN();
    const struct {
        int64_t n;
        float p;
        uint64_t cb;
    } cases[] = {{1003, 0.3f, 1000}, {(1 << 20) + 3, 0.1f, 7}, {100003, 0.5f, 0x100000005ull}, {1003, 0.0f, 1},
                 {1003, 1.0f, 2}};
    char what[160];
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t n = cases[t].n;
        const float p = cases[t].p;
        const uint64_t key = qs_rng_key(42, "dropout", t), cb = cases[t].cb;
        seed("dropout", t);
        float *x = rnd(n, -1, 1), *dy = rnd(n, -1, 1), *base = rnd(n, -1, 1);
        float *cy = hf(n), *hy = hf(n), *gy = dalloc_f(n), *gx = dup_gpu_f(x, n);
        uint8_t *cm = halloc((size_t)n), *hm = halloc((size_t)n), *gm = dalloc((size_t)n, POISON);
        const qs_dropout_rng rng = {.key = key, .counter_base = cb};
        ASSERT_OK(COPS->dropout_forward(g_cpu, CST, n, x, cy, cm, p, &rng));
        snprintf(what, sizeof what, "dropout fwd n=%lld p=%g counter_base=%llu", (long long)n, (double)p,
                 (unsigned long long)cb);
        if (!gpu_ok_(GOPS->dropout_forward(g_gpu, GST, n, gx, gy, gm, p, &rng), what)) continue;
        if (dget(hm, gm, (size_t)n, what)) {
            char mw[192];
            snprintf(mw, sizeof mw, "%s: mask", what);
            check_bits(mw, hm, cm, n, 1, NULL);
        }
        /* the base read from device memory (step_at · step_stride = cb; counter_base ignored) */
        const int64_t step_val = (int64_t)cb;
        const qs_dropout_rng rng_at = {.key = key, .counter_base = cb + 1,
                                       .step_at = dup_gpu(&step_val, sizeof step_val), .step_stride = 1};
        uint8_t *gm_at = dalloc((size_t)n, POISON);
        float *gy_at = dalloc_f(n);
        snprintf(what, sizeof what, "dropout fwd n=%lld p=%g base from device memory", (long long)n, (double)p);
        if (gpu_ok_(GOPS->dropout_forward(g_gpu, GST, n, gx, gy_at, gm_at, p, &rng_at), what) &&
            dget(hm, gm_at, (size_t)n, what))
            check_bits(what, hm, cm, n, 1, NULL);
        /* kept values are x·(1/(1-p)): one rounding (the factor may be formed in float or double) */
        if (dget(hy, gy, (size_t)n * 4, what)) check_tol(what, hy, cy, n, 1, -1);
        /* backward from the CPU's mask, overwrite and accumulate */
        const float *gmask = dup_gpu(cm, (size_t)n), *gdy = dup_gpu_f(dy, n);
        float *cdx = hf(n), *gdx = dalloc_f(n);
        ASSERT_OK(COPS->dropout_backward(g_cpu, CST, n, dy, cm, p, cdx, false));
        snprintf(what, sizeof what, "dropout bwd n=%lld p=%g", (long long)n, (double)p);
        if (gpu_ok_(GOPS->dropout_backward(g_gpu, GST, n, gdy, (const uint8_t *)gmask, p, gdx, false), what) &&
            dget(hy, gdx, (size_t)n * 4, what))
            check_tol(what, hy, cdx, n, 1, -1);
        float *cacc = hcopy(base, n), *gacc = dup_gpu_f(base, n);
        ASSERT_OK(COPS->dropout_backward(g_cpu, CST, n, dy, cm, p, cacc, true));
        snprintf(what, sizeof what, "dropout bwd accumulate n=%lld p=%g", (long long)n, (double)p);
        if (gpu_ok_(GOPS->dropout_backward(g_gpu, GST, n, gdy, (const uint8_t *)gmask, p, gacc, true), what) &&
            dget(hy, gacc, (size_t)n * 4, what))
            check_tol(what, hy, cacc, n, 2, -1);
    }
    END();
}

/* =================================================================================== layouts */

static void test_layout(void **state) {
    BEGIN();
    const int64_t shapes[][4] = {{3, 5, 7, 37}, {8, 28, 28, 16}, {1, 1, 1, 1}, {2, 9, 4, 3}};
    char what[128];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t N = shapes[t][0], H = shapes[t][1], W = shapes[t][2], C = shapes[t][3], n = N * H * W * C;
        seed("layout", t);
        float *x = rnd(n, -1, 1), *base = rnd(n, -1, 1);
        float *cy = hf(n), *hy = hf(n), *gy = dalloc_f(n), *gx = dup_gpu_f(x, n);
        snprintf(what, sizeof what, "nhwc_to_nchw %lldx%lldx%lldx%lld", (long long)N, (long long)H, (long long)W, (long long)C);
        ASSERT_OK(COPS->nhwc_to_nchw(g_cpu, CST, N, H, W, C, x, cy));
        if (gpu_ok_(GOPS->nhwc_to_nchw(g_gpu, GST, N, H, W, C, gx, gy), what) && dget(hy, gy, (size_t)n * 4, what))
            check_exact(what, hy, cy, n);
        /* and back, from the CPU's NCHW tensor (overwrite, accumulate) */
        const float *gnchw = dup_gpu_f(cy, n);
        float *cb = hf(n), *gback = dalloc_f(n);
        snprintf(what, sizeof what, "nchw_to_nhwc %lldx%lldx%lldx%lld", (long long)N, (long long)H, (long long)W, (long long)C);
        ASSERT_OK(COPS->nchw_to_nhwc(g_cpu, CST, N, H, W, C, cy, cb, false));
        if (gpu_ok_(GOPS->nchw_to_nhwc(g_gpu, GST, N, H, W, C, gnchw, gback, false), what) && dget(hy, gback, (size_t)n * 4, what))
            check_exact(what, hy, cb, n);
        float *cacc = hcopy(base, n), *gacc = dup_gpu_f(base, n);
        snprintf(what, sizeof what, "nchw_to_nhwc accumulate %lldx%lldx%lldx%lld", (long long)N, (long long)H, (long long)W,
                 (long long)C);
        ASSERT_OK(COPS->nchw_to_nhwc(g_cpu, CST, N, H, W, C, cy, cacc, true));
        if (gpu_ok_(GOPS->nchw_to_nhwc(g_gpu, GST, N, H, W, C, gnchw, gacc, true), what) && dget(hy, gacc, (size_t)n * 4, what))
            check_exact(what, hy, cacc, n);
    }
    END();
}

/* ======================================================================= reductions, optimizer */

/* Column sums are accumulated in double on both sides: they differ by at most the final
 * rounding to float (Kr = 1). rows = 0 must write zeros. */
static void test_column_sums(void **state) {
    BEGIN();
    const int64_t shapes[][2] = {{1, 1}, {5, 40}, {6272, 8}, {1000, 1037}, {0, 7}, {100003, 3}};
    char what[128];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t rows = shapes[t][0], cols = shapes[t][1];
        seed("column_sums", t);
        float *x = rnd(rows * cols + 1, -1, 1);
        for (int64_t i = 0; i < rows * cols; i += 3) x[i] += 2.0f; /* a non-zero mean */
        float *cs = hf(cols), *hs = hf(cols), *gs = dalloc_f(cols), *gx = dup_gpu_f(x, rows * cols + 1);
        ASSERT_OK(COPS->column_sums(g_cpu, CST, rows, cols, x, cs));
        snprintf(what, sizeof what, "column_sums %lldx%lld", (long long)rows, (long long)cols);
        if (gpu_ok_(GOPS->column_sums(g_gpu, GST, rows, cols, gx, gs), what) && dget(hs, gs, (size_t)cols * 4, what))
            check_tol(what, hs, cs, cols, 1, -1);
    }
    END();
}

/* Σx² in double on both sides: relative difference ≤ 1e-12 (double rounding of ≤ 4M terms,
 * random-walk growth ≈ sqrt(n)·2^-53 ≤ 2.3e-13); an FP32 accumulation would be ~1e-7 off. */
static void test_sum_squares(void **state) {
    BEGIN();
    const int64_t sizes[] = {0, 1, 1003, 100003, (1 << 22) + 5};
    char what[128], detail[160];
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        const int64_t n = sizes[t];
        seed("sum_squares", t);
        float *x = rnd(n + 1, -3, 3);
        double c = -1, g = -1;
        const float *gx = n ? dup_gpu_f(x, n) : NULL;
        ASSERT_OK(COPS->sum_squares(g_cpu, CST, n, n ? x : NULL, &c));
        snprintf(what, sizeof what, "sum_squares n=%lld", (long long)n);
        if (!gpu_ok_(GOPS->sum_squares(g_gpu, GST, n, gx, &g), what)) continue;
        if (!GPU_OK(GOPS->stream_sync(g_gpu, GST))) continue;
        double rel = c != 0 ? fabs(g - c) / c : fabs(g);
        bool pass = n == 0 ? g == 0.0 : rel <= 1e-12;
        snprintf(detail, sizeof detail, "gpu %.17g cpu %.17g rel %.2e (limit 1e-12)", g, c, rel);
        printf("  %-4s %-60s %s\n", pass ? "ok" : "FAIL", what, detail);
        json_case(what, "relative_error", rel, 1e-12, pass);
        if (!pass) g_fail++;
    }
    END();
}

/* SGD (4 configurations) and AdamW, 3-4 steps each. Both sides start every step from the same
 * state (the CPU's result is copied to the GPU after each comparison), so each step is compared
 * alone: Kr counts the roundings of one step (SGD: d = g + wd·p 2, buf 3, nesterov 2, p 2 → 8;
 * AdamW: m 3, v 4, p: decay, sqrt, /bc2, +eps, ÷, ·step, − and the float/double scalars → 12). */
static void test_optim(void **state) {
    BEGIN();
    const int64_t n = 100003;
    const struct {
        float lr, mom, damp, wd;
        bool nesterov;
    } cfg[] = {{0.1f, 0.0f, 0.0f, 0.0f, false}, {0.05f, 0.9f, 0.0f, 5e-4f, false}, {0.05f, 0.9f, 0.0f, 1e-4f, true},
               {0.2f, 0.5f, 0.3f, 0.0f, false}};
    char what[160];
    for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
        seed("sgd", t);
        const bool mom = cfg[t].mom != 0;
        float *p = rnd(n, -1, 1), *buf = mom ? hf(n) : NULL, *hp = hf(n), *hb = hf(n);
        float *gp = dup_gpu_f(p, n), *gbuf = mom ? dup_gpu_f(buf, n) : NULL;
        for (int step = 0; step < 3; step++) {
            float *g = rnd(n, -1, 1), *gg = dup_gpu_f(g, n);
            ASSERT_OK(COPS->sgd_step(g_cpu, CST, n, p, g, buf, cfg[t].lr, cfg[t].mom, cfg[t].damp, cfg[t].wd, cfg[t].nesterov,
                                     step == 0));
            snprintf(what, sizeof what, "sgd cfg %zu step %d: p", t, step);
            if (!gpu_ok_(GOPS->sgd_step(g_gpu, GST, n, gp, gg, gbuf, cfg[t].lr, cfg[t].mom, cfg[t].damp, cfg[t].wd,
                                        cfg[t].nesterov, step == 0),
                         what))
                break;
            if (dget(hp, gp, (size_t)n * 4, what)) check_tol(what, hp, p, n, 8, -1);
            snprintf(what, sizeof what, "sgd cfg %zu step %d: momentum buffer", t, step);
            if (mom && dget(hb, gbuf, (size_t)n * 4, what)) check_tol(what, hb, buf, n, 5, -1);
            ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, gp, p, (size_t)n * 4)); /* restart the next step from the CPU state */
            if (mom) ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, gbuf, buf, (size_t)n * 4));
        }
    }
    const float lr = 1e-2f, eps = 1e-8f, wd = 0.01f;
    const double b1 = 0.9, b2 = 0.999;
    seed("adamw", 0);
    float *p = rnd(n, -1, 1), *m = hf(n), *v = hf(n), *hp = hf(n), *hm = hf(n), *hv = hf(n);
    float *gp = dup_gpu_f(p, n), *gm = dup_gpu_f(m, n), *gv = dup_gpu_f(v, n);
    for (int64_t step = 1; step <= 4; step++) {
        float *g = rnd(n, -1, 1), *gg = dup_gpu_f(g, n);
        ASSERT_OK(COPS->adamw_step(g_cpu, CST, n, p, g, m, v, lr, b1, b2, eps, wd, step));
        snprintf(what, sizeof what, "adamw step %lld: p", (long long)step);
        if (!gpu_ok_(GOPS->adamw_step(g_gpu, GST, n, gp, gg, gm, gv, lr, b1, b2, eps, wd, step), what)) break;
        if (dget(hp, gp, (size_t)n * 4, what)) check_tol(what, hp, p, n, 12, -1);
        snprintf(what, sizeof what, "adamw step %lld: m", (long long)step);
        if (dget(hm, gm, (size_t)n * 4, what)) check_tol(what, hm, m, n, 3, -1);
        snprintf(what, sizeof what, "adamw step %lld: v", (long long)step);
        if (dget(hv, gv, (size_t)n * 4, what)) check_tol(what, hv, v, n, 4, -1);
        ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, gp, p, (size_t)n * 4));
        ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, gm, m, (size_t)n * 4));
        ASSERT_OK(GOPS->copy_h2d(g_gpu, GST, gv, v, (size_t)n * 4));
    }
    END();
}

/* ================================================================================ batch norm */

static void test_batchnorm(void **state) {
    BEGIN();
    /* the last two shapes' channels sit far from 0 relative to their spread (mean 1000, std
     * 0.006; mean 10^5, std 0.06): one-pass sums of x and x² would cancel — by a simulation of
     * the kernel's double sums, the second case's y then misses its tolerance 15-fold — so the
     * GPU shifts them by each channel's first value */
    const int64_t shapes[][2] = {{70, 13}, {6272, 8}, {2, 1}, {1000, 3}, {392, 64}, {512, 16}, {512, 16}};
    const size_t far_mean = 5, farther_mean = 6;
    const float momentum = 0.1f, eps = 1e-5f;
    char what[160];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        const double K = (double)rows;
        seed("batchnorm", t);
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
        for (int64_t i = 0; i < n; i++) /* offset mean: two-pass variance matters */
            x[i] = t == far_mean ? 1000.0f + 0.01f * x[i] : t == farther_mean ? 1e5f + 0.1f * x[i] : 3.0f + 2.0f * x[i];
        float *rm = rnd(C, -0.1f, 0.1f), *rv = rnd(C, 0.9f, 1.1f), *base = rnd(n, -1, 1);
        float *gx = dup_gpu_f(x, n), *gg = dup_gpu_f(gamma, C), *gbt = dup_gpu_f(beta, C), *gdy = dup_gpu_f(dy, n);
        char sh[48];
        snprintf(sh, sizeof sh, "rows=%lld C=%lld%s", (long long)rows, (long long)C,
                 t == far_mean ? " mean 1e3" : t == farther_mean ? " mean 1e5" : "");

        for (int relu = 0; relu < 2; relu++) {
            /* training forward, with running statistics */
            float *crm = hcopy(rm, C), *crv = hcopy(rv, C), *cy = hf(n), *cm = hf(C), *ci = hf(C);
            float *grm = dup_gpu_f(rm, C), *grv = dup_gpu_f(rv, C), *gy = dalloc_f(n), *gm = dalloc_f(C), *gi = dalloc_f(C);
            ASSERT_OK(COPS->batchnorm_forward_train(g_cpu, CST, rows, C, x, QS_F32, gamma, beta, cy, QS_F32, cm, ci, crm, crv, momentum, eps,
                                                    relu, NULL, QS_F32));
            snprintf(what, sizeof what, "bn train%s %s: y", relu ? "+relu" : "", sh);
            if (!gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, gy, QS_F32, gm, gi, grm, grv, momentum, eps,
                                                       relu, NULL, QS_F32),
                         what))
                continue;
            cmp_tol(what, gy, cy, n, K, -1);
            snprintf(what, sizeof what, "bn train%s %s: save_mean", relu ? "+relu" : "", sh);
            cmp_tol(what, gm, cm, C, K, -1);
            snprintf(what, sizeof what, "bn train%s %s: save_invstd", relu ? "+relu" : "", sh);
            cmp_tol(what, gi, ci, C, K, -1);
            snprintf(what, sizeof what, "bn train%s %s: running_mean", relu ? "+relu" : "", sh);
            cmp_tol(what, grm, crm, C, K, -1);
            snprintf(what, sizeof what, "bn train%s %s: running_var", relu ? "+relu" : "", sh);
            cmp_tol(what, grv, crv, C, K, -1);
            /* without running statistics (NULL: no update) */
            float *gy2 = dalloc_f(n), *gm2 = dalloc_f(C), *gi2 = dalloc_f(C);
            snprintf(what, sizeof what, "bn train%s %s, no running stats: y", relu ? "+relu" : "", sh);
            if (gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, gy2, QS_F32, gm2, gi2, NULL, NULL, momentum,
                                                      eps, relu, NULL, QS_F32),
                        what))
                cmp_tol(what, gy2, cy, n, K, -1);

            /* BF16 output (a fused straight-through cast): bitwise the GPU's own FP32 output rounded
             * to nearest even; a backward masked by it bitwise the one masked by that FP32 output
             * (no output here is so small that BF16 rounds it to 0) */
            float *hy = hf(n), *hdx = hf(n), *hdxb = hf(n), *gdxm = dalloc_f(n), *gdxb = dalloc_f(n);
            float *gdgm = dalloc_f(C), *gdbm = dalloc_f(C), *gdgb = dalloc_f(C), *gdbb = dalloc_f(C);
            uint16_t *hyb = halloc((size_t)n * 2), *want = halloc((size_t)n * 2), *gyb = dalloc((size_t)n * 2, 0xff);
            snprintf(what, sizeof what, "bn train%s %s: bf16 y = rne(f32 y)", relu ? "+relu" : "", sh);
            if (gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, gyb, QS_BF16, gm2, gi2, NULL, NULL,
                                                      momentum, eps, relu, NULL, QS_F32),
                        what) &&
                dget(hy, gy2, (size_t)n * 4, what) && dget(hyb, gyb, (size_t)n * 2, what)) {
                ASSERT_OK(qs_f32_to_bf16(n, hy, want, NULL));
                check_fact(what, memcmp(hyb, want, (size_t)n * 2) == 0, "bitwise");
            }
            snprintf(what, sizeof what, "bn bwd%s %s: bf16 mask = f32 mask", relu ? " (relu fused)" : "", sh);
            if (relu &&
                gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, gm2, gi2, gdxm, QS_F32, NULL, false, gdgm, gdbm, gy2,
                                                 QS_F32, NULL, false),
                        what) &&
                gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, gm2, gi2, gdxb, QS_F32, NULL, false, gdgb, gdbb, gyb,
                                                 QS_BF16, NULL, false),
                        what) &&
                dget(hdx, gdxm, (size_t)n * 4, what) && dget(hdxb, gdxb, (size_t)n * 4, what))
                check_fact(what, memcmp(hdx, hdxb, (size_t)n * 4) == 0, "bitwise");

            /* eval forward with the (CPU-)updated running statistics */
            const float *grm_c = dup_gpu_f(crm, C), *grv_c = dup_gpu_f(crv, C);
            float *ce = hf(n), *ge = dalloc_f(n);
            ASSERT_OK(COPS->batchnorm_forward_eval(g_cpu, CST, rows, C, x, QS_F32, gamma, beta, crm, crv, eps, ce, QS_F32, relu, NULL, QS_F32));
            snprintf(what, sizeof what, "bn eval%s %s: y", relu ? "+relu" : "", sh);
            if (gpu_ok_(GOPS->batchnorm_forward_eval(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, grm_c, grv_c, eps, ge, QS_F32, relu, NULL, QS_F32), what))
                cmp_tol(what, ge, ce, n, 8, -1);

            /* backward from the CPU's saved statistics (and, fused, the CPU's output) */
            const float *gsm = dup_gpu_f(cm, C), *gsi = dup_gpu_f(ci, C), *gyr = relu ? dup_gpu_f(cy, n) : NULL;
            const float *yr = relu ? cy : NULL;
            /* dx's terms cancel: judge its error against the largest term (as test_cpu_ops.c) */
            double dx_scale = 0;
            for (int64_t c = 0; c < C; c++) {
                double sdy = 0, sdyx = 0;
                for (int64_t r = 0; r < rows; r++) {
                    double g = dy[r * C + c] * (yr && !(yr[r * C + c] > 0) ? 0.0 : 1.0);
                    sdy += g;
                    sdyx += g * (x[r * C + c] - cm[c]);
                }
                for (int64_t r = 0; r < rows; r++) {
                    double t1 = yr && !(yr[r * C + c] > 0) ? 0.0 : fabs(dy[r * C + c]), t2 = fabs(sdy) / rows,
                           t3 = fabs((x[r * C + c] - cm[c]) * ci[c] * ci[c] * sdyx / rows);
                    dx_scale = fmax(dx_scale, fabs(gamma[c] * ci[c]) * (t1 + t2 + t3));
                }
            }
            float *cdx = hf(n), *cdg = hf(C), *cdb = hf(C), *gdx = dalloc_f(n), *gdg = dalloc_f(C), *gdb = dalloc_f(C);
            ASSERT_OK(COPS->batchnorm_backward(g_cpu, CST, rows, C, x, QS_F32, dy, QS_F32, gamma, cm, ci, cdx, QS_F32, NULL, false, cdg, cdb, yr, QS_F32, NULL, false));
            snprintf(what, sizeof what, "bn bwd%s %s: dx", relu ? " (relu fused)" : "", sh);
            if (gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, gsm, gsi, gdx, QS_F32, NULL, false, gdg, gdb, gyr, QS_F32, NULL, false), what)) {
                cmp_tol(what, gdx, cdx, n, 2 * K, dx_scale);
                snprintf(what, sizeof what, "bn bwd%s %s: dgamma", relu ? " (relu fused)" : "", sh);
                cmp_tol(what, gdg, cdg, C, K, -1);
                snprintf(what, sizeof what, "bn bwd%s %s: dbeta", relu ? " (relu fused)" : "", sh);
                cmp_tol(what, gdb, cdb, C, K, -1);
            }
            /* dx NULL: parameter gradients only */
            float *gdg2 = dalloc_f(C), *gdb2 = dalloc_f(C);
            snprintf(what, sizeof what, "bn bwd%s dx=NULL %s: dgamma", relu ? " (relu fused)" : "", sh);
            if (gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, gsm, gsi, NULL, QS_F32, NULL, false, gdg2, gdb2, gyr, QS_F32, NULL, false),
                        what)) {
                cmp_tol(what, gdg2, cdg, C, K, -1);
                snprintf(what, sizeof what, "bn bwd%s dx=NULL %s: dbeta", relu ? " (relu fused)" : "", sh);
                cmp_tol(what, gdb2, cdb, C, K, -1);
            }
            /* accumulate into dx */
            float *cdxa = hcopy(base, n), *gdxa = dup_gpu_f(base, n), *gdg3 = dalloc_f(C), *gdb3 = dalloc_f(C);
            ASSERT_OK(COPS->batchnorm_backward(g_cpu, CST, rows, C, x, QS_F32, dy, QS_F32, gamma, cm, ci, cdxa, QS_F32, NULL, true, cdg, cdb, yr, QS_F32, NULL, false));
            snprintf(what, sizeof what, "bn bwd%s accumulate %s: dx", relu ? " (relu fused)" : "", sh);
            if (gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, gsm, gsi, gdxa, QS_F32, NULL, true, gdg3, gdb3, gyr, QS_F32, NULL, false),
                        what))
                cmp_tol(what, gdxa, cdxa, n, 2 * K + 1, dx_scale + 1.0);
        }
    }
    END();
}

/* Batch norm reading a BF16 x (a convolution's BF16 output) and, in backward, a BF16 dy (that
 * convolution's reader's BF16 dx): backend.h makes every result equal, bit for bit, to the F32
 * op's on the widened x and dy, so each output — training forward (y in F32 and BF16,
 * save_mean, save_invstd, running statistics; ReLU off and on), evaluation forward (y in F32
 * and BF16), backward (dx overwritten and accumulated, dgamma, dbeta; unmasked, and masked by an
 * F32 and a BF16 ReLU output) — is compared byte for byte with the GPU's own F32 op run on x and
 * dy widened on the host. Tolerance: none (memcmp). */
static void test_batchnorm_bf16_x(void **state) {
    BEGIN();
    const int64_t shapes[][2] = {{70, 13}, {6272, 8}, {2, 1}, {1000, 3}, {392, 64}};
    const float momentum = 0.1f, eps = 1e-5f;
    char what[160];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        mark mk = mark_now();
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        seed("batchnorm_bf16_x", t);
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
        for (int64_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i]; /* an offset mean, as test_batchnorm */
        float *rm = rnd(C, -0.1f, 0.1f), *rv = rnd(C, 0.9f, 1.1f), *base = rnd(n, -1, 1);
        uint16_t *xb = halloc((size_t)n * 2);
        float *xw = hf(n);
        ASSERT_OK(qs_f32_to_bf16(n, x, xb, NULL));
        ASSERT_OK(qs_bf16_to_f32(n, xb, xw)); /* the BF16 values, widened exactly */
        const void *gxb = dup_gpu(xb, (size_t)n * 2);
        const float *gxw = dup_gpu_f(xw, n), *gg = dup_gpu_f(gamma, C), *gbt = dup_gpu_f(beta, C);
        uint16_t *dyb = halloc((size_t)n * 2);
        float *dyw = hf(n);
        ASSERT_OK(qs_f32_to_bf16(n, dy, dyb, NULL));
        ASSERT_OK(qs_bf16_to_f32(n, dyb, dyw));
        const void *gdyb = dup_gpu(dyb, (size_t)n * 2);
        const float *gdy = dup_gpu_f(dyw, n), *grm0 = dup_gpu_f(rm, C), *grv0 = dup_gpu_f(rv, C);
        char sh[48];
        snprintf(sh, sizeof sh, "rows=%lld C=%lld", (long long)rows, (long long)C);

        for (int relu = 0; relu < 2; relu++) {
            const char *rl = relu ? "+relu" : "";
            /* training forward, y in F32 then BF16; [0]: F32 x (widened), [1]: BF16 x. The F32-y
             * run's statistics and both outputs feed the backward below. */
            float *sm = NULL, *si = NULL;
            void *yk[2][2] = {{0}}; /* [y dtype: F32, BF16][x dtype] */
            bool fwd_ok = true;
            for (int yb = 0; yb < 2; yb++) {
                const qs_dtype ydt = yb ? QS_BF16 : QS_F32;
                const size_t es = yb ? 2 : 4;
                float *m[2] = {0}, *is[2] = {0}, *rmk[2] = {0}, *rvk[2] = {0};
                bool ok = true;
                snprintf(what, sizeof what, "bn train%s %s, bf16 x, %s y", rl, sh, qs_dtype_name(ydt));
                for (int xk = 0; xk < 2 && ok; xk++) {
                    yk[yb][xk] = dalloc((size_t)n * es, POISON);
                    m[xk] = dalloc_f(C), is[xk] = dalloc_f(C);
                    rmk[xk] = dup_gpu_f(rm, C), rvk[xk] = dup_gpu_f(rv, C);
                    ok = gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, xk ? gxb : (const void *)gxw,
                                                               xk ? QS_BF16 : QS_F32, gg, gbt, yk[yb][xk], ydt, m[xk],
                                                               is[xk], rmk[xk], rvk[xk], momentum, eps, relu, NULL, QS_F32),
                                 what);
                }
                fwd_ok = fwd_ok && ok;
                if (!ok) continue;
                snprintf(what, sizeof what, "bn train%s %s, bf16 x: %s y", rl, sh, qs_dtype_name(ydt));
                same_elems(what, yk[yb][1], yk[yb][0], n, es);
                if (yb) continue; /* the statistics do not depend on y's dtype: compared once */
                snprintf(what, sizeof what, "bn train%s %s, bf16 x: save_mean", rl, sh);
                same_elems(what, m[1], m[0], C, 4);
                snprintf(what, sizeof what, "bn train%s %s, bf16 x: save_invstd", rl, sh);
                same_elems(what, is[1], is[0], C, 4);
                snprintf(what, sizeof what, "bn train%s %s, bf16 x: running_mean", rl, sh);
                same_elems(what, rmk[1], rmk[0], C, 4);
                snprintf(what, sizeof what, "bn train%s %s, bf16 x: running_var", rl, sh);
                same_elems(what, rvk[1], rvk[0], C, 4);
                sm = m[0], si = is[0];
            }

            /* evaluation forward, y in F32 and BF16 */
            for (int yb = 0; yb < 2; yb++) {
                const qs_dtype ydt = yb ? QS_BF16 : QS_F32;
                const size_t es = yb ? 2 : 4;
                void *ea = dalloc((size_t)n * es, POISON), *eb = dalloc((size_t)n * es, POISON);
                snprintf(what, sizeof what, "bn eval%s %s, bf16 x: %s y", rl, sh, qs_dtype_name(ydt));
                if (gpu_ok_(GOPS->batchnorm_forward_eval(g_gpu, GST, rows, C, gxw, QS_F32, gg, gbt, grm0, grv0, eps, ea,
                                                         ydt, relu, NULL, QS_F32),
                            what) &&
                    gpu_ok_(GOPS->batchnorm_forward_eval(g_gpu, GST, rows, C, gxb, QS_BF16, gg, gbt, grm0, grv0, eps, eb,
                                                         ydt, relu, NULL, QS_F32),
                            what))
                    same_elems(what, eb, ea, n, es);
            }

            /* backward from the F32-x run's saved statistics: unmasked, or (relu) masked by the F32
             * or the BF16 output; dx overwritten, then accumulated onto base */
            if (!fwd_ok || !sm) continue;
            for (int mk16 = 0; mk16 < (relu ? 2 : 1); mk16++) {
                const qs_dtype mdt = mk16 ? QS_BF16 : QS_F32;
                const void *mask = relu ? yk[mk16][0] : NULL;
                const char *mn = !relu ? "" : mk16 ? " (bf16 relu mask)" : " (f32 relu mask)";
                for (int acc = 0; acc < 2; acc++) {
                    float *dx[2] = {0}, *dg[2] = {0}, *db[2] = {0};
                    bool ok = true;
                    snprintf(what, sizeof what, "bn bwd%s%s %s, bf16 x", mn, acc ? " acc" : "", sh);
                    for (int xk = 0; xk < 2 && ok; xk++) {
                        dx[xk] = acc ? dup_gpu_f(base, n) : dalloc_f(n);
                        dg[xk] = dalloc_f(C), db[xk] = dalloc_f(C);
                        ok = gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, xk ? gxb : (const void *)gxw,
                                                              xk ? QS_BF16 : QS_F32, xk ? gdyb : (const void *)gdy,
                                                              xk ? QS_BF16 : QS_F32, gg, sm, si, dx[xk], QS_F32, NULL,
                                                              acc, dg[xk], db[xk], mask, mdt, NULL, false),
                                     what);
                    }
                    if (!ok) continue;
                    snprintf(what, sizeof what, "bn bwd%s%s %s, bf16 x: dx", mn, acc ? " acc" : "", sh);
                    same_elems(what, dx[1], dx[0], n, 4);
                    if (acc) continue; /* dgamma, dbeta do not depend on accumulate */
                    snprintf(what, sizeof what, "bn bwd%s %s, bf16 x: dgamma", mn, sh);
                    same_elems(what, dg[1], dg[0], C, 4);
                    snprintf(what, sizeof what, "bn bwd%s %s, bf16 x: dbeta", mn, sh);
                    same_elems(what, db[1], db[0], C, 4);
                }
            }
        }
        /* an input dtype other than F32/BF16 is refused like an output one */
        if (t == 0) {
            float *gy = dalloc_f(n), *gm = dalloc_f(C), *gi = dalloc_f(C);
            qs_error_clear();
            const qs_status st = GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gxb, QS_F16, gg, gbt, gy, QS_F32, gm,
                                                               gi, NULL, NULL, momentum, eps, false, NULL, QS_F32);
            char detail[256];
            snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "accepted" : qs_last_error());
            check_fact("bn train, f16 x refused", st == QS_ERR_UNSUPPORTED, detail);
            qs_error_clear();
        }
        release_to(mk);
    }
    END();
}

/* dgamma and dbeta of two backward calls (device, C floats each) byte for byte: one line. */
static void same_param_grads(const char *what, const float *dg, const float *db, const float *dg_ref,
                             const float *db_ref, int64_t C) {
    float *h[4] = {hf(C), hf(C), hf(C), hf(C)};
    if (dget(h[0], dg, (size_t)C * 4, what) && dget(h[1], db, (size_t)C * 4, what) &&
        dget(h[2], dg_ref, (size_t)C * 4, what) && dget(h[3], db_ref, (size_t)C * 4, what))
        check_fact(what, memcmp(h[0], h[2], (size_t)C * 4) == 0 && memcmp(h[1], h[3], (size_t)C * 4) == 0,
                   "bitwise");
}

/* Batch norm writing a BF16 dx (the gradient of the BF16 convolution before it): backend.h makes
 * it, bit for bit, the F32 op's dx followed by quantize(→ BF16) with the same qs_sr, or by the
 * RNE cast without one. For shapes with rows·C not a multiple of 64, C not a multiple of the
 * kernel's 32 channels, and C a multiple of 64 (the four-channels-per-Philox-block kernel, taken
 * at offsets 0 and 1024, not at 1000), ReLU off and on, x F32 and BF16, the GPU's BF16 dx is
 * compared byte for byte with the GPU's own F32 dx passed through the GPU's quantize (stochastic
 * rounding: counter 5 at offsets 0, 1000 and 1024, and the counter read from device memory while
 * the one passed by value differs) and cast (no sr); dgamma, dbeta and dresidual must be those of
 * the F32 call. A BF16 dx that accumulates and an F16 dx are refused. Tolerance: none (memcmp). */
static void test_batchnorm_bf16_dx(void **state) {
    BEGIN();
    const int64_t shapes[][2] = {{70, 13}, {2, 1}, {392, 64}, {129, 100}, {1000, 3}, {50, 256}, {301, 192}};
    const float momentum = 0.1f, eps = 1e-5f;
    const uint64_t key = qs_rng_key(11, "batchnorm_bf16_dx", 0), counter = 5, other = 6;
    enum { NSR = 5 }; /* stochastic-rounding variants; variant NSR is the RNE cast */
    const uint64_t *gctr = dup_gpu(&counter, sizeof counter);
    const qs_sr srs[NSR] = {
        {.key = key, .counter = counter, .offset = 0},
        {.key = key, .counter = counter, .offset = 1000},
        {.key = key, .counter = other, .offset = 1000, .counter_at = gctr}, /* counter_at wins: = srs[1] */
        {.key = key, .counter = counter, .offset = 1024},
        {.key = key, .counter = other, .offset = 1024, .counter_at = gctr}, /* = srs[3] */
    };
    const int ref_sr[NSR] = {0, 1, 1, 3, 3}; /* the qs_sr quantize gets for the reference */
    const char *const vname[NSR + 1] = {"sr offset 0",    "sr offset 1000", "sr offset 1000 counter_at",
                                        "sr offset 1024", "sr offset 1024 counter_at", "no sr (rne)"};
    char what[192], sh[80];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        mark mk = mark_now();
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        seed("batchnorm_bf16_dx", t);
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *dy = rnd(n, -1, 1);
        for (int64_t i = 0; i < n; i++) x[i] = 3.0f + 2.0f * x[i];
        uint16_t *xb = halloc((size_t)n * 2);
        ASSERT_OK(qs_f32_to_bf16(n, x, xb, NULL));
        const float *gx = dup_gpu_f(x, n), *gg = dup_gpu_f(gamma, C), *gbt = dup_gpu_f(beta, C), *gdy = dup_gpu_f(dy, n);
        const void *gxb = dup_gpu(xb, (size_t)n * 2);

        for (int relu = 0; relu < 2; relu++) {
            /* saved statistics and (relu) the F32 output masking dy, from the F32 x */
            float *y = dalloc_f(n), *sm = dalloc_f(C), *si = dalloc_f(C);
            snprintf(what, sizeof what, "bn bwd bf16 dx rows=%lld C=%lld%s: forward", (long long)rows, (long long)C,
                     relu ? " relu" : "");
            if (!gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, y, QS_F32, sm, si, NULL,
                                                       NULL, momentum, eps, relu, NULL, QS_F32),
                         what))
                continue;
            const float *mask = relu ? y : NULL;
            for (int xk = 0; xk < 2; xk++) {
                const void *xp = xk ? gxb : (const void *)gx;
                const qs_dtype xdt = xk ? QS_BF16 : QS_F32;
                snprintf(sh, sizeof sh, "rows=%lld C=%lld%s, %s x", (long long)rows, (long long)C, relu ? " relu" : "",
                         qs_dtype_name(xdt));
                /* the reference: the F32 op */
                float *dxf = dalloc_f(n), *dgf = dalloc_f(C), *dbf = dalloc_f(C), *drf = dalloc_f(n);
                snprintf(what, sizeof what, "bn bwd bf16 dx %s: f32 dx", sh);
                if (!gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, xp, xdt, gdy, QS_F32, gg, sm, si, dxf, QS_F32, NULL,
                                                      false, dgf, dbf, mask, QS_F32, drf, false),
                             what))
                    continue;
                uint16_t *hq[NSR + 1] = {0};
                for (int v = 0; v <= NSR; v++) {
                    const qs_sr *sr = v < NSR ? &srs[v] : NULL;
                    uint16_t *want = dalloc((size_t)n * 2, POISON), *got = dalloc((size_t)n * 2, POISON);
                    float *dg = dalloc_f(C), *db = dalloc_f(C), *dr = dalloc_f(n);
                    snprintf(what, sizeof what, "bn bwd bf16 dx %s, %s: reference", sh, vname[v]);
                    const qs_status rs =
                        v < NSR ? GOPS->quantize(g_gpu, GST, rows, C, dxf, NULL, QS_BF16, want, NULL, false,
                                                 &srs[ref_sr[v]], NULL, NULL)
                                : GOPS->cast(g_gpu, GST, n, dxf, QS_F32, want, QS_BF16);
                    if (!gpu_ok_(rs, what)) continue;
                    snprintf(what, sizeof what, "bn bwd bf16 dx %s, %s", sh, vname[v]);
                    if (!gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, xp, xdt, gdy, QS_F32, gg, sm, si, got, QS_BF16, sr,
                                                          false, dg, db, mask, QS_F32, dr, false),
                                 what))
                        continue;
                    snprintf(what, sizeof what, "bn bwd bf16 dx %s, %s: dx = %s(f32 dx)", sh, vname[v],
                             v < NSR ? "quantize" : "cast");
                    same_elems(what, got, want, n, 2);
                    snprintf(what, sizeof what, "bn bwd bf16 dx %s, %s: dgamma, dbeta = f32 op's", sh, vname[v]);
                    same_param_grads(what, dg, db, dgf, dbf, C);
                    snprintf(what, sizeof what, "bn bwd bf16 dx %s, %s: dresidual = f32 op's", sh, vname[v]);
                    same_elems(what, dr, drf, n, 4);
                    hq[v] = halloc((size_t)n * 2);
                    if (!dget(hq[v], got, (size_t)n * 2, what)) hq[v] = NULL;
                }
                /* the rounding is really stochastic and follows the offset (not a property of
                 * the comparison above: quantize could share a bug) — for enough elements that
                 * a coincidence is out of the question */
                if (n >= 1000 && hq[0] && hq[1] && hq[3] && hq[NSR]) {
                    snprintf(what, sizeof what, "bn bwd bf16 dx %s: sr differs from rne and across offsets", sh);
                    check_fact(what,
                               memcmp(hq[0], hq[NSR], (size_t)n * 2) != 0 && memcmp(hq[0], hq[1], (size_t)n * 2) != 0 &&
                                   memcmp(hq[0], hq[3], (size_t)n * 2) != 0,
                               "codes differ");
                }
            }
        }
        /* refusals: a BF16 dx cannot accumulate; dx in another dtype */
        if (t == 0) {
            float *sm = dalloc_f(C), *si = dalloc_f(C), *dg = dalloc_f(C), *db = dalloc_f(C);
            void *dxb = dalloc((size_t)n * 2, POISON);
            char detail[256];
            qs_error_clear();
            qs_status st = GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, sm, si, dxb, QS_BF16,
                                                    &srs[0], true, dg, db, NULL, QS_F32, NULL, false);
            snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "accepted" : qs_last_error());
            check_fact("bn bwd, bf16 dx with accumulate refused (invalid arg)",
                       st == QS_ERR_INVALID_ARG && strstr(qs_last_error(), "accumulate") != NULL, detail);
            qs_error_clear();
            st = GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, sm, si, dxb, QS_F16, NULL, false, dg,
                                          db, NULL, QS_F32, NULL, false);
            snprintf(detail, sizeof detail, "%s: %s", qs_status_name(st), st == QS_OK ? "accepted" : qs_last_error());
            check_fact("bn bwd, f16 dx refused (unsupported)", st == QS_ERR_UNSUPPORTED, detail);
            qs_error_clear();
            (void)GOPS->stream_sync(g_gpu, GST);
        }
        release_to(mk);
    }
    END();
}

/* A batch norm with a residual block's Add fused in (backend.h: residual, dresidual) equals, bit
 * for bit, the GPU's own unfused ops: forward (train and eval; ReLU off and on; y F32 and BF16)
 * = batch norm, then add_forward (then the RNE cast for a BF16 y), and with a BF16 residual =
 * the fused op on its widened values; backward (mask from the fused
 * output) dx = the plain batch norm's dx on the Add's gradient, dresidual = relu_backward (a copy
 * of dy without ReLU), overwritten and accumulated, also with dx NULL. Shapes with C not a multiple
 * of the kernel's 32 channels. Tolerance: none (memcmp). */
static void test_batchnorm_residual(void **state) {
    BEGIN();
    const int64_t shapes[][2] = {{70, 13}, {392, 64}, {129, 100}};
    const float momentum = 0.1f, eps = 1e-5f;
    char what[192];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        mark mk = mark_now();
        const int64_t rows = shapes[t][0], C = shapes[t][1], n = rows * C;
        seed("batchnorm_residual", t);
        float *x = rnd(n, -1, 1), *gamma = rnd(C, 0.5f, 1.5f), *beta = rnd(C, -0.5f, 0.5f), *r = rnd(n, -2, 2),
              *dy = rnd(n, -1, 1), *acc0 = rnd(n, -1, 1), *rv = rnd(C, 0.5f, 2.0f);
        const float *gx = dup_gpu_f(x, n), *gg = dup_gpu_f(gamma, C), *gbt = dup_gpu_f(beta, C), *gr = dup_gpu_f(r, n),
                    *gdy = dup_gpu_f(dy, n), *grm = dup_gpu_f(r, C), *grv = dup_gpu_f(rv, C);
        uint16_t *rb = halloc((size_t)n * 2); /* r in BF16, and widened back */
        ASSERT_OK(qs_f32_to_bf16(n, r, rb, NULL));
        float *rw = hf(n);
        ASSERT_OK(qs_bf16_to_f32(n, rb, rw));
        const void *grb = dup_gpu(rb, (size_t)n * 2);
        const float *grw = dup_gpu_f(rw, n);
        for (int relu = 0; relu < 2; relu++) {
            for (int yk = 0; yk < 2; yk++) {
                const qs_dtype ydt = yk ? QS_BF16 : QS_F32;
                const size_t es = yk ? 2 : 4;
                char sh[96];
                snprintf(sh, sizeof sh, "bn+add rows=%lld C=%lld%s y %s", (long long)rows, (long long)C,
                         relu ? " relu" : "", qs_dtype_name(ydt));
                /* unfused: y0 = BN(x); ya = [relu](y0 + r); want = ya in ydt */
                float *y0 = dalloc_f(n), *ya = dalloc_f(n), *sm = dalloc_f(C), *si = dalloc_f(C);
                float *sm2 = dalloc_f(C), *si2 = dalloc_f(C), *e0 = dalloc_f(n), *ea = dalloc_f(n);
                void *want = dalloc((size_t)n * es, POISON), *got = dalloc((size_t)n * es, POISON);
                void *ewant = dalloc((size_t)n * es, POISON), *egot = dalloc((size_t)n * es, POISON);
                snprintf(what, sizeof what, "%s: unfused ops", sh);
                if (!gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, y0, QS_F32, sm, si,
                                                           NULL, NULL, momentum, eps, false, NULL, QS_F32), what) ||
                    !gpu_ok_(GOPS->add_forward(g_gpu, GST, n, y0, QS_F32, gr, QS_F32, ya, relu), what) ||
                    !gpu_ok_(GOPS->cast(g_gpu, GST, n, ya, QS_F32, want, ydt), what) ||
                    !gpu_ok_(GOPS->batchnorm_forward_eval(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, grm, grv, eps, e0,
                                                          QS_F32, false, NULL, QS_F32), what) ||
                    !gpu_ok_(GOPS->add_forward(g_gpu, GST, n, e0, QS_F32, gr, QS_F32, ea, relu), what) ||
                    !gpu_ok_(GOPS->cast(g_gpu, GST, n, ea, QS_F32, ewant, ydt), what))
                    continue;
                snprintf(what, sizeof what, "%s: fused", sh);
                if (!gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, got, ydt, sm2, si2,
                                                           NULL, NULL, momentum, eps, relu, gr, QS_F32), what) ||
                    !gpu_ok_(GOPS->batchnorm_forward_eval(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, grm, grv, eps, egot,
                                                          ydt, relu, gr, QS_F32), what))
                    continue;
                snprintf(what, sizeof what, "%s: train y = unfused", sh);
                same_elems(what, got, want, n, es);
                snprintf(what, sizeof what, "%s: eval y = unfused", sh);
                same_elems(what, egot, ewant, n, es);
                /* a BF16 residual: the fused op on its widened values (grw), train and eval */
                void *tb = dalloc((size_t)n * es, POISON), *tw = dalloc((size_t)n * es, POISON);
                void *eb = dalloc((size_t)n * es, POISON), *ew = dalloc((size_t)n * es, POISON);
                snprintf(what, sizeof what, "%s: bf16 residual", sh);
                if (gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, tb, ydt, sm2, si2, NULL,
                                                          NULL, momentum, eps, relu, grb, QS_BF16), what) &&
                    gpu_ok_(GOPS->batchnorm_forward_train(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, tw, ydt, sm2, si2, NULL,
                                                          NULL, momentum, eps, relu, grw, QS_F32), what) &&
                    gpu_ok_(GOPS->batchnorm_forward_eval(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, grm, grv, eps, eb, ydt,
                                                         relu, grb, QS_BF16), what) &&
                    gpu_ok_(GOPS->batchnorm_forward_eval(g_gpu, GST, rows, C, gx, QS_F32, gg, gbt, grm, grv, eps, ew, ydt,
                                                         relu, grw, QS_F32), what)) {
                    snprintf(what, sizeof what, "%s: train y, bf16 residual = its widened values", sh);
                    same_elems(what, tb, tw, n, es);
                    snprintf(what, sizeof what, "%s: eval y, bf16 residual = its widened values", sh);
                    same_elems(what, eb, ew, n, es);
                }
                /* backward: the Add's gradient dr (relu_backward, or dy), then the plain batch norm */
                const void *mask = relu ? got : NULL;
                float *dr = dalloc_f(n), *dxw = dalloc_f(n), *dgw = dalloc_f(C), *dbw = dalloc_f(C);
                float *dra = dup_gpu_f(acc0, n), *dxg = dalloc_f(n), *dgg = dalloc_f(C), *dbg = dalloc_f(C);
                float *dres = dalloc_f(n), *dresa = dup_gpu_f(acc0, n), *dres_nodx = dalloc_f(n);
                snprintf(what, sizeof what, "%s: unfused backward", sh);
                const qs_status rs = relu ? GOPS->relu_backward(g_gpu, GST, n, ya, gdy, QS_F32, dr, false)
                                          : GOPS->accumulate(g_gpu, GST, n, gdy, dr, false);
                if (!gpu_ok_(rs, what) ||
                    !gpu_ok_(relu ? GOPS->relu_backward(g_gpu, GST, n, ya, gdy, QS_F32, dra, true)
                                  : GOPS->accumulate(g_gpu, GST, n, gdy, dra, true), what) ||
                    !gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, dr, QS_F32, gg, sm, si, dxw, QS_F32, NULL,
                                                      false, dgw, dbw, NULL, QS_F32, NULL, false), what))
                    continue;
                snprintf(what, sizeof what, "%s: fused backward", sh);
                if (!gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, sm, si, dxg, QS_F32, NULL,
                                                      false, dgg, dbg, mask, ydt, dres, false), what) ||
                    !gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, sm, si, NULL, QS_F32, NULL,
                                                      false, NULL, NULL, mask, ydt, dresa, true), what) ||
                    !gpu_ok_(GOPS->batchnorm_backward(g_gpu, GST, rows, C, gx, QS_F32, gdy, QS_F32, gg, sm, si, NULL, QS_F32, NULL,
                                                      false, NULL, NULL, mask, ydt, dres_nodx, false), what))
                    continue;
                snprintf(what, sizeof what, "%s: dx = unfused", sh);
                same_bits(what, dxg, dxw, n);
                snprintf(what, sizeof what, "%s: dgamma, dbeta = unfused", sh);
                same_param_grads(what, dgg, dbg, dgw, dbw, C);
                snprintf(what, sizeof what, "%s: dresidual = the Add's gradient", sh);
                same_bits(what, dres, dr, n);
                snprintf(what, sizeof what, "%s: dresidual accumulated, dx NULL", sh);
                same_bits(what, dresa, dra, n);
                snprintf(what, sizeof what, "%s: dresidual alone (dx, dgamma, dbeta NULL)", sh);
                same_bits(what, dres_nodx, dr, n);
            }
        }
        release_to(mk);
    }
    END();
}

/* =================================================================================== pooling */

static qs_pool_desc pool_desc(qs_pool_kind kind, int64_t N, int64_t H, int64_t W, int64_t C, int64_t R, int64_t S,
                              int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
    return (qs_pool_desc){.kind = kind, .N = N, .H = H, .W = W, .C = C, .R = R, .S = S, .stride_h = sh,
                          .stride_w = sw, .pad_h = ph, .pad_w = pw};
}

/* One pooling geometry: forward (max: values exact, argmax indices identical; avg: Kr = R·S + 1)
 * and backward from the CPU's indices (Kr = contributions per input element). `ties`: inputs
 * from {-1, 0, 1}, so windows hold equal maxima and the first one in scan order must win. */
static void run_pool(qs_pool_desc d0, bool ties) {
    qs_pool_desc dd = d0, *d = &dd;
    ASSERT_OK(qs_pool_desc_finish(d));
    const bool is_max = d->kind == QS_POOL_MAX;
    const int64_t nx = d->N * d->H * d->W * d->C, ny = d->N * d->P * d->Q * d->C;
    char sh[128], what[192];
    snprintf(sh, sizeof sh, "%s N%lld %lldx%lldx%lld k%lldx%lld s%lldx%lld p%lldx%lld%s", is_max ? "max" : "avg",
             (long long)d->N, (long long)d->H, (long long)d->W, (long long)d->C, (long long)d->R, (long long)d->S,
             (long long)d->stride_h, (long long)d->stride_w, (long long)d->pad_h, (long long)d->pad_w, ties ? " ties" : "");
    void *cplan = NULL, *gplan = NULL;
    size_t cwsb = 0, gwsb = 0;
    ASSERT_OK(COPS->pool_plan(g_cpu, d, &cplan, &cwsb));
    keep_plan(g_cpu, cplan);
    snprintf(what, sizeof what, "pool_plan %s", sh);
    if (!gpu_ok_(GOPS->pool_plan(g_gpu, d, &gplan, &gwsb), what)) return;
    keep_plan(g_gpu, gplan);
    void *cws = cwsb ? halloc(cwsb) : NULL, *gws = gwsb ? dalloc(gwsb, POISON) : NULL;
    seed("pool", (uint64_t)(nx * 7 + ny + ties));
    float *x = rnd(nx, -2, 2), *dy = rnd(ny, -1, 1), *base = rnd(nx, -1, 1);
    if (ties)
        for (int64_t i = 0; i < nx; i++) x[i] = (float)((int)floorf(x[i] * 0.75f + 1.5f) - 1); /* -1, 0, 1 */
    float *gx = dup_gpu_f(x, nx), *gdy = dup_gpu_f(dy, ny);
    float *cy = hf(ny), *hy = hf(ny), *gy = dalloc_f(ny);
    int32_t *cidx = is_max ? halloc((size_t)ny * 4) : NULL, *hidx = halloc((size_t)ny * 4);
    int32_t *gidx = is_max ? dalloc((size_t)ny * 4, POISON) : NULL;
    ASSERT_OK(COPS->pool_forward(g_cpu, cplan, CST, x, cy, cidx, cws));
    snprintf(what, sizeof what, "pool fwd %s", sh);
    if (!gpu_ok_(GOPS->pool_forward(g_gpu, gplan, GST, gx, gy, gidx, gws), what)) return;
    if (dget(hy, gy, (size_t)ny * 4, what)) {
        if (is_max)
            check_exact(what, hy, cy, ny);
        else
            check_tol(what, hy, cy, ny, (double)(d->R * d->S + 1), -1);
    }
    snprintf(what, sizeof what, "pool fwd %s: argmax indices", sh);
    if (is_max && dget(hidx, gidx, (size_t)ny * 4, what)) check_bits(what, hidx, cidx, ny, 4, NULL);

    /* backward: each input element receives at most ⌈R/sh⌉·⌈S/sw⌉ contributions */
    const double kb = (double)(((d->R + d->stride_h - 1) / d->stride_h) * ((d->S + d->stride_w - 1) / d->stride_w));
    const double kr = is_max ? (kb > 1 ? kb : 0) : 2 * kb + 1; /* max, non-overlapping: exact */
    const int32_t *gci = is_max ? dup_gpu(cidx, (size_t)ny * 4) : NULL;
    float *cdx = hf(nx), *hdx = hf(nx), *gdx = dalloc_f(nx);
    ASSERT_OK(COPS->pool_backward(g_cpu, cplan, CST, dy, cidx, cdx, false, cws));
    snprintf(what, sizeof what, "pool bwd %s", sh);
    if (gpu_ok_(GOPS->pool_backward(g_gpu, gplan, GST, gdy, gci, gdx, false, gws), what) && dget(hdx, gdx, (size_t)nx * 4, what))
        check_tol(what, hdx, cdx, nx, kr, -1);
    float *cacc = hcopy(base, nx), *gacc = dup_gpu_f(base, nx);
    ASSERT_OK(COPS->pool_backward(g_cpu, cplan, CST, dy, cidx, cacc, true, cws));
    snprintf(what, sizeof what, "pool bwd accumulate %s", sh);
    if (gpu_ok_(GOPS->pool_backward(g_gpu, gplan, GST, gdy, gci, gacc, true, gws), what) && dget(hdx, gacc, (size_t)nx * 4, what))
        check_tol(what, hdx, cacc, nx, kr + 1, -1);
}

static void test_pool(void **state) {
    BEGIN();
    run_pool(pool_desc(QS_POOL_MAX, 8, 28, 28, 8, 2, 2, 2, 2, 0, 0), false);  /* the CNN's 2x2/2 */
    run_pool(pool_desc(QS_POOL_MAX, 3, 9, 7, 3, 3, 3, 2, 2, 1, 1), false);    /* overlapping, padded, odd */
    run_pool(pool_desc(QS_POOL_MAX, 2, 7, 10, 17, 3, 2, 1, 2, 1, 0), false);  /* non-square, mixed stride */
    run_pool(pool_desc(QS_POOL_MAX, 2, 8, 8, 5, 3, 3, 1, 1, 1, 1), true);     /* ties: first maximum wins */
    run_pool(pool_desc(QS_POOL_AVG, 2, 9, 7, 3, 3, 3, 2, 2, 1, 1), false);    /* count_include_pad */
    run_pool(pool_desc(QS_POOL_AVG, 3, 6, 6, 18, 2, 2, 2, 2, 0, 0), false);
    run_pool(pool_desc(QS_POOL_AVG, 8, 7, 7, 64, 7, 7, 1, 1, 0, 0), false);   /* global average pooling */
    run_pool(pool_desc(QS_POOL_AVG, 2, 5, 3, 9, 5, 3, 1, 1, 0, 0), false);    /* global, non-square */
    END();
}

/* ============================================================================ softmax + xent */

static void test_softmax_xent(void **state) {
    BEGIN();
    const int64_t shapes[][2] = {{5, 10}, {33, 7}, {1, 1}, {8, 1000}, {256, 10}, {4, 50304}, {3, 50257}};
    char what[128];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t B = shapes[t][0], Cl = shapes[t][1], n = B * Cl;
        seed("softmax_xent", t);
        float *lg = rnd(n, -8, 8);
        int32_t *lab = halloc((size_t)B * 4);
        for (int64_t b = 0; b < B; b++) lab[b] = (int32_t)qs_rng_below(&g_rng, (uint64_t)Cl);
        if (B > 1) lg[Cl] += 1000.0f; /* a large logit must not overflow */
        const float scale = 1.0f / (float)B;
        float *closs = hf(B), *cp = hf(n), *gloss = dalloc_f(B), *gp = dalloc_f(n);
        const float *glg = dup_gpu_f(lg, n);
        const int32_t *glab = dup_gpu(lab, (size_t)B * 4);
        ASSERT_OK(COPS->softmax_xent_forward(g_cpu, CST, B, Cl, lg, lab, closs, cp));
        snprintf(what, sizeof what, "softmax_xent fwd B=%lld classes=%lld: loss", (long long)B, (long long)Cl);
        if (gpu_ok_(GOPS->softmax_xent_forward(g_gpu, GST, B, Cl, glg, glab, gloss, gp), what)) {
            cmp_tol(what, gloss, closs, B, (double)Cl + 4, -1);
            snprintf(what, sizeof what, "softmax_xent fwd B=%lld classes=%lld: probs", (long long)B, (long long)Cl);
            cmp_tol(what, gp, cp, n, (double)Cl + 2, -1);
        }
        /* backward from the CPU's probabilities: (p − onehot)·scale, Kr = 2 */
        const float *gpc = dup_gpu_f(cp, n);
        float *cd = hf(n), *gd = dalloc_f(n);
        ASSERT_OK(COPS->softmax_xent_backward(g_cpu, CST, B, Cl, cp, lab, scale, cd));
        snprintf(what, sizeof what, "softmax_xent bwd B=%lld classes=%lld", (long long)B, (long long)Cl);
        if (gpu_ok_(GOPS->softmax_xent_backward(g_gpu, GST, B, Cl, gpc, glab, scale, gd), what)) cmp_tol(what, gd, cd, n, 2, -1);
    }
    END();
}

/* ============================================================================ plan lifetime */

/* Plans give back what they take: the same linear (FP8), conv (BF16) and pool plans are
 * created, run once and destroyed three times, their workspaces allocated through the backend.
 * The first cycle may keep lazily created resources (library handles); after it, in_use must
 * return to its value before each cycle. */
static void test_plan_lifetime(void **state) {
    BEGIN();
    const int64_t M = 64, N = 48, K = 96;
    seed("plan_lifetime", 0);
    float *x = rnd(M * K, -1, 1), *w = rnd(N * K, -1, 1);
    qmat lx = quant_both(x, M, K, QS_F8E4M3, NULL), lw = quant_both(w, N, K, QS_F8E4M3, NULL);
    float *ly = dalloc_f(M * N);
    qs_conv_desc cd = conv_desc(2, 9, 9, 16, 16, 3, 3, 1, 1, 1, 1, true);
    cd.prec = QS_PREC_BF16;
    ASSERT_OK(qs_conv_desc_finish(&cd));
    float *xc = rnd(2 * 9 * 9 * 16, -1, 1), *wc = rnd(16 * 16 * 9, -1, 1), *bc = rnd(16, -1, 1);
    qmat cx = quant_both(xc, 2 * 9 * 9, 16, QS_BF16, NULL), cw = quant_both(wc, 16, 16 * 9, QS_BF16, NULL);
    float *gbc = dup_gpu_f(bc, 16), *cy = dalloc_f(2 * 9 * 9 * 16);
    qs_pool_desc pd = pool_desc(QS_POOL_MAX, 2, 9, 9, 16, 3, 3, 2, 2, 1, 1);
    ASSERT_OK(qs_pool_desc_finish(&pd));
    const int64_t npy = pd.N * pd.P * pd.Q * pd.C;
    float *py = dalloc_f(npy), *px = dup_gpu_f(xc, 2 * 9 * 9 * 16);
    int32_t *pidx = dalloc((size_t)npy * 4, POISON);
    const qs_linear_desc ld = {.M = M, .N = N, .K = K, .has_bias = false, .prec = QS_PREC_FP8};
    char what[96], line[128];
    for (int cycle = 0; cycle < 3; cycle++) {
        size_t before = 0, after = 0, lb = 0, cb = 0, pb = 0;
        void *lp = NULL, *cp = NULL, *pp = NULL, *lws = NULL, *cws = NULL, *pws = NULL;
        GOPS->memory_stats(g_gpu, &before, NULL);
        bool ok = GPU_OK(GOPS->linear_plan(g_gpu, &ld, &lp, &lb)) && GPU_OK(GOPS->conv_plan(g_gpu, &cd, &cp, &cb)) &&
                  GPU_OK(GOPS->pool_plan(g_gpu, &pd, &pp, &pb));
        ok = ok && (!lb || GPU_OK(GOPS->alloc(g_gpu, lb, &lws))) && (!cb || GPU_OK(GOPS->alloc(g_gpu, cb, &cws))) &&
             (!pb || GPU_OK(GOPS->alloc(g_gpu, pb, &pws)));
        ok = ok && GPU_OK(GOPS->linear_forward(g_gpu, lp, GST, &lx.gpu, &lw.gpu, NULL, ly, lws)) &&
             GPU_OK(GOPS->conv_forward(g_gpu, cp, GST, &cx.gpu, &cw.gpu, gbc, cy, cws)) &&
             GPU_OK(GOPS->pool_forward(g_gpu, pp, GST, px, py, pidx, pws)) && GPU_OK(GOPS->stream_sync(g_gpu, GST));
        if (lp) GOPS->plan_destroy(g_gpu, lp);
        if (cp) GOPS->plan_destroy(g_gpu, cp);
        if (pp) GOPS->plan_destroy(g_gpu, pp);
        if (lws) GOPS->free(g_gpu, lws);
        if (cws) GOPS->free(g_gpu, cws);
        if (pws) GOPS->free(g_gpu, pws);
        if (!ok) break;
        GOPS->memory_stats(g_gpu, &after, NULL);
        snprintf(line, sizeof line, "in_use %zu -> %zu (workspaces %zu + %zu + %zu B)", before, after, lb, cb, pb);
        snprintf(what, sizeof what, "plans create/run/destroy, cycle %d", cycle);
        if (cycle == 0)
            printf("  info %-60s %s (lazy resources allowed)\n", what, line);
        else
            check_fact(what, after == before, line);
    }
    END();
}

/* ========================================================================= argument errors */

/* Host-side argument checks give the same status on both backends. */
static void test_arg_errors(void **state) {
    BEGIN();
    float *cb = hf(64), *gb = dalloc_f(64);
    char what[160], detail[300];
#define PARITY(label, call_cpu, call_gpu)                                                                          \
    do {                                                                                                           \
        qs_status cs_ = (call_cpu);                                                                                \
        qs_error_clear();                                                                                          \
        qs_status gs_ = (call_gpu);                                                                                \
        snprintf(what, sizeof what, "error parity: %s", label);                                                    \
        snprintf(detail, sizeof detail, "cpu %s, gpu %s: %s", qs_status_name(cs_), qs_status_name(gs_), qs_last_error()); \
        check_fact(what, cs_ != QS_OK && cs_ == gs_, detail);                                                      \
        (void)GOPS->stream_sync(g_gpu, GST);                                                                       \
    } while (0)
    PARITY("relu n=-1", COPS->relu_forward(g_cpu, CST, -1, cb, cb), GOPS->relu_forward(g_gpu, GST, -1, gb, gb));
    PARITY("relu NULL x", COPS->relu_forward(g_cpu, CST, 4, NULL, cb), GOPS->relu_forward(g_gpu, GST, 4, NULL, gb));
    PARITY("cast f32 -> s8", COPS->cast(g_cpu, CST, 4, cb, QS_F32, cb, QS_S8), GOPS->cast(g_gpu, GST, 4, gb, QS_F32, gb, QS_S8));
    const qs_dropout_rng rng1 = {.key = 1};
    PARITY("dropout p=1.5", COPS->dropout_forward(g_cpu, CST, 4, cb, cb, (uint8_t *)cb, 1.5f, &rng1),
           GOPS->dropout_forward(g_gpu, GST, 4, gb, gb, (uint8_t *)gb, 1.5f, &rng1));
    PARITY("adamw step 0", COPS->adamw_step(g_cpu, CST, 4, cb, cb, cb, cb, 0.1f, 0.9, 0.99, 1e-8f, 0, 0),
           GOPS->adamw_step(g_gpu, GST, 4, gb, gb, gb, gb, 0.1f, 0.9, 0.99, 1e-8f, 0, 0));
    PARITY("batchnorm train rows=1", COPS->batchnorm_forward_train(g_cpu, CST, 1, 1, cb, QS_F32, NULL, NULL, cb, QS_F32, cb, cb, NULL, NULL, 0.1f, 1e-5f, false, NULL, QS_F32),
           GOPS->batchnorm_forward_train(g_gpu, GST, 1, 1, gb, QS_F32, NULL, NULL, gb, QS_F32, gb, gb, NULL, NULL, 0.1f, 1e-5f, false, NULL, QS_F32));
    PARITY("quantize f8e4m3 per-row", COPS->quantize(g_cpu, CST, 2, 2, cb, NULL, QS_F8E4M3, cb, cb, true, NULL, NULL, NULL),
           GOPS->quantize(g_gpu, GST, 2, 2, gb, NULL, QS_F8E4M3, gb, gb, true, NULL, NULL, NULL));
    /* a plan's operand of the wrong dtype */
    qs_linear_desc ld = {.M = 4, .N = 3, .K = 2, .has_bias = false, .prec = QS_PREC_FP16};
    void *cplan = NULL, *gplan = NULL;
    size_t cw = 0, gw = 0;
    ASSERT_OK(COPS->linear_plan(g_cpu, &ld, &cplan, &cw));
    keep_plan(g_cpu, cplan);
    if (GPU_OK(GOPS->linear_plan(g_gpu, &ld, &gplan, &gw))) {
        keep_plan(g_gpu, gplan);
        qs_operand cf = qs_operand_f32(cb), gf = qs_operand_f32(gb);
        PARITY("fp16 linear given f32 operands",
               COPS->linear_forward(g_cpu, cplan, CST, &cf, &cf, NULL, cb, cw ? halloc(cw) : NULL),
               GOPS->linear_forward(g_gpu, gplan, GST, &gf, &gf, NULL, gb, gw ? dalloc(gw, POISON) : NULL));
    }
    /* a conv descriptor whose P, Q were never filled in */
    qs_conv_desc cd = conv_desc(1, 8, 8, 3, 4, 3, 3, 1, 1, 1, 1, false);
    cplan = gplan = NULL;
    PARITY("conv_plan without qs_conv_desc_finish", COPS->conv_plan(g_cpu, &cd, &cplan, &cw),
           GOPS->conv_plan(g_gpu, &cd, &gplan, &gw));
    keep_plan(g_cpu, cplan);
    keep_plan(g_gpu, gplan);
#undef PARITY
    END();
}

/* ====================================================================================== main */

int main(void) {
    const gh_suite suite = {.name = "test_cuda_ops", .seed_key = 20261202, .name_width = 60, .check_alignment = true};
    const int rc = gh_start(&suite);
    if (rc) return rc;
    for (int p = 0; p < QS_PREC_COUNT; p++)
        printf("  gpu precision %-5s %s\n", qs_precision_name((qs_precision)p),
               qs_prec_support_name(g_gpu->ops->precision_support(g_gpu, (qs_precision)p)));

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_device, teardown),
        cmocka_unit_test_teardown(test_int8_unsupported, teardown),
        cmocka_unit_test_teardown(test_linear_fp32, teardown),
        cmocka_unit_test_teardown(test_linear_tf32, teardown),
        cmocka_unit_test_teardown(test_linear_bf16, teardown),
        cmocka_unit_test_teardown(test_linear_fp16, teardown),
        cmocka_unit_test_teardown(test_linear_fp8, teardown),
        cmocka_unit_test_teardown(test_linear_nonfinite, teardown),
        cmocka_unit_test_teardown(test_conv_fp32, teardown),
        cmocka_unit_test_teardown(test_conv_tf32, teardown),
        cmocka_unit_test_teardown(test_conv_bf16, teardown),
        cmocka_unit_test_teardown(test_conv_fp16, teardown),
        cmocka_unit_test_teardown(test_conv_fp8, teardown),
        cmocka_unit_test_teardown(test_conv_y_bf16, teardown),
        cmocka_unit_test_teardown(test_linear_y_bf16, teardown),
        cmocka_unit_test_teardown(test_y_dt_refused, teardown),
        cmocka_unit_test_teardown(test_quantize, teardown),
        cmocka_unit_test_teardown(test_quantize_nonfinite, teardown),
        cmocka_unit_test_teardown(test_quantize_counter_at, teardown),
        cmocka_unit_test_teardown(test_quantize_delayed, teardown),
        cmocka_unit_test_teardown(test_cast, teardown),
        cmocka_unit_test_teardown(test_eltwise, teardown),
        cmocka_unit_test_teardown(test_dropout, teardown),
        cmocka_unit_test_teardown(test_layout, teardown),
        cmocka_unit_test_teardown(test_column_sums, teardown),
        cmocka_unit_test_teardown(test_sum_squares, teardown),
        cmocka_unit_test_teardown(test_optim, teardown),
        cmocka_unit_test_teardown(test_batchnorm, teardown),
        cmocka_unit_test_teardown(test_batchnorm_bf16_x, teardown),
        cmocka_unit_test_teardown(test_batchnorm_bf16_dx, teardown),
        cmocka_unit_test_teardown(test_batchnorm_residual, teardown),
        cmocka_unit_test_teardown(test_pool, teardown),
        cmocka_unit_test_teardown(test_softmax_xent, teardown),
        cmocka_unit_test_teardown(test_plan_lifetime, teardown),
        cmocka_unit_test_teardown(test_arg_errors, teardown),
    };
    return gh_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
