/* tests/test_cpu_transformer_ops.c — the CPU backend's transformer operators (src/cpu/cpu_bmm.c,
 * src/cpu/cpu_transformer.c) against naive FP64 references written here from the contracts in
 * src/core/backend.h: batched matmul at every precision, LayerNorm, GELU (tanh form), tanh,
 * embedding, broadcast add, heads permute, masked softmax; finite differences for the
 * backward of GELU, LayerNorm and softmax; results independent of the thread count; errors.
 *
 * Tolerances (element-wise ones from tests/support/check.h: |a − r| ≤ atol + rtol·|r| with
 * rtol = 4·u·sqrt(K), atol = rtol·max|r|, u = 2^-24, K the reduction length a value depends on):
 *  - bmm, exact path: as tests/test_linear_prec.c, the operands are quantized by the backend's
 *    own quantize op (forward operands a, b with round-to-nearest, the gradient dC with
 *    stochastic rounding, one per-tensor scale over the whole batch, as a layer does) and the
 *    reference multiplies the *dequantized* values in FP64. Every path multiplies exactly
 *    representable values and accumulates exactly (INT8, int32) or in FP32, so the FP32 budget of
 *    the reduction length k applies (k = K forward, N backward_a, M backward_b), plus 4 for the
 *    few extra roundings (int32 → f32, scale products, the reference's dequantized operands) as
 *    in test_linear_prec.c, plus 1 for alpha, plus 1 for the accumulate add.
 *  - bmm, end to end: NMSE = Σ(c − r)² / Σ r² against the FP64 product of the *unquantized*
 *    operands. An output is a sum of k products of zero-mean independent operands; operand
 *    errors e_x (absolute) give NMSE = E[e_l²]/E[l²] + E[e_r²]/E[r²] (cross terms vanish in
 *    expectation). Per operand, with ulp(x) ≤ 2^-p·|x| for a format of p fraction bits:
 *    round-to-nearest E[e²] = E[ulp²]/12, stochastic rounding E[e²] = E[f(1−f)]·E[ulp²] = E[ulp²]/6
 *    (f uniform), so E[e²]/E[x²] ≤ 2^-2p/12 or 2^-2p/6 — BF16 p = 7, FP16 p = 10, E4M3 p = 3,
 *    E5M2 p = 2 (the power-of-two FP8 scale keeps values normal but for a negligible fraction).
 *    INT8 has a fixed step s = amax/127 and uniform operands on [−A, A] have E[x²] = A²/3, so
 *    E[e²]/E[x²] = 3/(12·127²) (RNE) or 3/(6·127²) (SR). FP32 accumulation adds ≤ u²·(k + 6)
 *    (tests/backend_ops/ops_gemm.c (a)). Budget = 10 × the sum: the terms are expectations, and an NMSE
 *    over ≥ 32 outputs (the only ones checked this way) stays well within 10× of its mean. A lost
 *    scale, a transposed operand, or a value rounded to the wrong format is orders above.
 *  - Memory-bound ops: K = the row length for LayerNorm (C: mean, variance, and the two row sums
 *    of backward; 2C + 4 for dx, which depends on both) and softmax (Tk: max, exp sum; + 4 for
 *    exp and the reciprocal); K = 16 for GELU (≈ 10 roundings and one expf of ≤ 2 ulp adding in
 *    quadrature); K = 4 for tanh; embedding's gradient the number of rows sharing an id. Copies,
 *    the heads permute and the broadcast add (one rounding, as the reference's (float) of the
 *    exact double sum) are compared bitwise.
 *  - Finite differences (as tests/test_layers_fd.c): L = Σ w·y over the outputs that input j
 *    reaches (its row), D(h) = (L(x+h) − L(x−h))/2h with the actual float steps, Richardson
 *    R = (4·D(h) − D(2h))/3, h = 2^-6 (truncation h⁴/30·L⁽⁵⁾ negligible). Each L carries
 *    δL = Σ|w|·rtol_fwd·max|y|, and R combines four: |R − L'| ≤ 1.5·δL/h; the analytic gradient
 *    carries rtol_bwd·max|g|. An entry passes when |R − g| ≤ 1.5·δL/h + rtol_bwd·max|g|, and that
 *    budget must stay ≤ 10% of max|g| (else the check would have no power). */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "check.h"
#include "core/backend.h"
#include "cpu/cpu_backend.h"
#include "graph_helpers.h"
#include "op_harness.h"
#include "qsync/rng.h"
#include "qsync/status.h"

#define CHECK_FP32(what, got, ref, n, K) assert_true(qs_check_fp32((what), (got), (ref), (n), (K)))
#define CHECK_EQ(what, got, ref, n) assert_true(qs_check_equal_f32((what), (got), (ref), (n)))
#define BE qs_th_be

/* ------------------------------------------------------------------ helpers */

/* FP64 reference → floats (rounded once), added to base when base is not NULL (accumulate). */
static float *to_f32(const double *r, int64_t n, const float *base) {
    float *o = qs_th_floats(n);
    for (int64_t i = 0; i < n; i++) o[i] = (float)(r[i] + (base ? (double)base[i] : 0.0));
    return o;
}

static float *copy_of(const float *x, int64_t n) {
    float *p = qs_th_floats(n);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* n floats of NaN: an element an op forgets to write then fails its comparison. */
static float *nan_floats(int64_t n) {
    float *p = qs_th_floats(n);
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* Whether qs_last_error() contains s (printed when it does not). */
static bool error_has(const char *s) {
    bool ok = strstr(qs_last_error(), s) != NULL;
    if (!ok) printf("  error message \"%s\" lacks \"%s\"\n", qs_last_error(), s);
    return ok;
}

/* NMSE of got against the FP64 ref (see the top); prints one line; true when ≤ budget. */
static bool check_nmse(const char *what, const float *got, const double *ref, int64_t n, double budget) {
    double se = 0, sr = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) finite = false;
        double e = (double)got[i] - ref[i];
        se += e * e;
        sr += ref[i] * ref[i];
    }
    double nmse = sr > 0 ? se / sr : (se > 0 ? INFINITY : 0.0);
    bool ok = finite && nmse <= budget;
    printf("  %-4s %-44s n=%-5lld nmse %9.3e  budget %9.3e (%6.2f%%)\n", ok ? "ok" : "FAIL", what, (long long)n, nmse,
           budget, 100.0 * nmse / budget);
    return ok;
}

/* ------------------------------------------------------------------ finite differences */

#define FD_H 0.015625 /* 2^-6 */
#define FD_POWER 0.10

/* y = f(x) over n values (same shape in and out); ctx carries the op's other arguments. */
typedef void (*fd_forward)(const void *ctx, const float *x, float *y);

/* L = Σ w·y over the `group` outputs of input j's group, after f(x). */
static double fd_loss(fd_forward f, const void *ctx, const float *x, float *y, int64_t j, int64_t group,
                      const float *w) {
    f(ctx, x, y);
    double L = 0;
    for (int64_t i = j - j % group; i < j - j % group + group; i++) L += (double)w[i] * y[i];
    return L;
}

/* Check the analytic gradient g = dL/dx of L = Σ w·y, y = f(x), at a few entries of x (ends,
 * spread, the largest |g|) by Richardson-extrapolated central differences (see the top). Input j
 * reaches only the `group` outputs of its row. Kf, Kb: reduction lengths of forward, backward. */
static void fd_check(const char *what, fd_forward f, const void *ctx, const float *x0, int64_t n, int64_t group,
                     const float *w, const float *g, double Kf, double Kb) {
    float *x = copy_of(x0, n), *y = qs_th_floats(n);
    f(ctx, x, y);
    const double dy_f = qs_tol_fp32(Kf, -1).rtol * qs_max_abs(y, n);
    const double gmax = qs_max_abs(g, n), g_err = qs_tol_fp32(Kb, -1).rtol * gmax;
    int64_t idx[10], jmax = 0;
    int ni = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(g[i]) > fabsf(g[jmax])) jmax = i;
    idx[ni++] = 0;
    idx[ni++] = n - 1;
    idx[ni++] = jmax;
    for (int k = 1; k <= 6; k++) idx[ni++] = n * k / 7;
    double worst = 0;
    for (int s = 0; s < ni; s++) {
        const int64_t j = idx[s];
        double dL = 0;
        for (int64_t i = j - j % group; i < j - j % group + group; i++) dL += fabs(w[i]) * dy_f;
        const double budget = 1.5 * dL / FD_H + g_err;
        if (!(budget <= FD_POWER * gmax))
            fail_msg("%s: FD budget %.3g is not below %.0f%% of max|g| = %.3g; the check has no power", what, budget,
                     100 * FD_POWER, gmax);
        double D[2];
        for (int t = 0; t < 2; t++) {
            const float h = (float)(FD_H * (t + 1)), xp = x0[j] + h, xm = x0[j] - h;
            x[j] = xp;
            double Lp = fd_loss(f, ctx, x, y, j, group, w);
            x[j] = xm;
            double Lm = fd_loss(f, ctx, x, y, j, group, w);
            x[j] = x0[j];
            D[t] = (Lp - Lm) / ((double)xp - (double)xm);
        }
        const double R = (4 * D[0] - D[1]) / 3, err = fabs(R - g[j]);
        if (err / budget > worst) worst = err / budget;
        if (err > budget)
            fail_msg("%s: entry %lld: finite difference %.8g, analytic %.8g, |err| %.3g > budget %.3g", what,
                     (long long)j, R, (double)g[j], err, budget);
    }
    printf("  ok   %-44s FD over %d entries: worst %6.2f%% of budget\n", what, ni, 100 * worst);
}

/* ================================================================== batched matmul */

typedef struct bmm_case {
    int64_t batch, M, N, K;
    bool trans_b;
    float alpha;
} bmm_case;

/* A batch of matrices as a reference reads it: element (b, i, l) at p[b·sb + i·s0 + l·s1]. */
typedef struct ref_view {
    const float *p;
    int64_t sb, s0, s1;
} ref_view;

/* A stored row-major (rows, cols) matrix per batch entry, read as stored or transposed. */
static ref_view plain(const float *p, int64_t rows, int64_t cols) { return (ref_view){p, rows * cols, cols, 1}; }
static ref_view transposed(const float *p, int64_t rows, int64_t cols) { return (ref_view){p, rows * cols, 1, cols}; }

/* out (batch, m, n) = alpha · l (m, k) · r (k, n), in FP64. */
static void ref_bmm(int64_t batch, int64_t m, int64_t n, int64_t k, ref_view l, ref_view r, double alpha, double *out) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t t = 0; t < k; t++)
                    s += (double)l.p[b * l.sb + i * l.s0 + t * l.s1] * r.p[b * r.sb + t * r.s0 + j * r.s1];
                out[(b * m + i) * n + j] = alpha * s;
            }
}

/* One direction's product as the contract states it (backend.h): output (m, n), reduction k. */
typedef struct bmm_ref_dir {
    int64_t m, n, k;
    ref_view l, r;
} bmm_ref_dir;

/* The three directions for operands a (M,K), b (N,K | K,N), dc (M,N) per batch entry:
 *   forward    c  = a · op(b)
 *   backward_a da = dc · op(b)ᵀ
 *   backward_b db = dcᵀ · a (N,K) when trans_b, else aᵀ · dc (K,N). */
static void bmm_ref_dirs(const bmm_case *c, const float *a, const float *b, const float *dc, bmm_ref_dir d[3]) {
    const int64_t M = c->M, N = c->N, K = c->K;
    const bool tb = c->trans_b;
    d[0] = (bmm_ref_dir){M, N, K, plain(a, M, K), tb ? transposed(b, N, K) : plain(b, K, N)};
    d[1] = (bmm_ref_dir){M, K, N, plain(dc, M, N), tb ? plain(b, N, K) : transposed(b, K, N)};
    d[2] = tb ? (bmm_ref_dir){N, K, M, transposed(dc, M, N), plain(a, M, K)}
              : (bmm_ref_dir){K, N, M, transposed(a, M, K), plain(dc, M, N)};
}

/* Expected relative MSE E[e²]/E[x²] of a zero-mean uniform operand stored as dt (see the top). */
static double quant_rel_mse(qs_dtype dt, bool stochastic) {
    const double k = stochastic ? 1.0 / 6.0 : 1.0 / 12.0;
    switch (dt) {
    case QS_BF16: return k * 0x1p-14;
    case QS_F16: return k * 0x1p-20;
    case QS_F8E4M3: return k * 0x1p-6;
    case QS_F8E5M2: return k * 0x1p-4;
    case QS_S8: return k * 3.0 / (127.0 * 127.0);
    default: return 0.0; /* F32 */
    }
}

/* Run direction dir of a bmm plan: 0 forward c = out, 1 backward_a, 2 backward_b. */
static qs_status bmm_call(void *plan, int dir, const qs_operand *a, const qs_operand *b, const qs_operand *dc,
                          float *out, bool accumulate, void *ws) {
    if (dir == 0) return OPS->bmm_forward(BE, plan, STREAM, a, b, out, ws);
    if (dir == 1) return OPS->bmm_backward_a(BE, plan, STREAM, dc, b, out, accumulate, ws);
    return OPS->bmm_backward_b(BE, plan, STREAM, dc, a, out, accumulate, ws);
}

/* All three directions of one case at precision p (backward ones overwriting and accumulating)
 * against the FP64 references. extreme: constant operands at the int8 extremes (no stochastic
 * rounding), so that an int32 sum over more than 133,144 products would overflow. */
static void check_bmm(qs_precision p, bmm_case c, bool extreme) {
    static const char *const dir_name[3] = {"fwd", "bwd_a", "bwd_b"};
    qs_th_seed(qs_rng_key(21, "bmm", (uint64_t)(p * 100000 + c.batch * 1000 + c.M * 10 + c.trans_b)));
    const qs_dtype fdt = qs_precision_operand_dtype(p, false), gdt = qs_precision_operand_dtype(p, true);
    const qs_bmm_desc d = {.batch = c.batch, .M = c.M, .N = c.N, .K = c.K, .trans_b = c.trans_b, .alpha = c.alpha,
                           .prec = p};
    void *plan = NULL;
    size_t wsb = 0;
    ASSERT_OK(OPS->bmm_plan(BE, &d, &plan, &wsb));
    void *ws = qs_th_alloc(wsb);
    if (c.M == 33) /* once per precision and variant: which oneDNN kernels run */
        printf("       %s bmm%s implementations: fwd %s, bwd_a %s, bwd_b %s\n", qs_precision_name(p),
               c.trans_b ? " tB" : "", qs_cpu_bmm_impl_name(plan, 0), qs_cpu_bmm_impl_name(plan, 1),
               qs_cpu_bmm_impl_name(plan, 2));
    const int64_t B = c.batch, na = B * c.M * c.K, nb = B * c.N * c.K, nc = B * c.M * c.N;
    const int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
    float *a = qs_th_uniform(na, -2, 2), *b = qs_th_uniform(nb, -0.5f, 0.5f), *dc = qs_th_uniform(nc, -1, 1);
    for (int64_t i = 0; extreme && i < na; i++) a[i] = 1.0f;
    for (int64_t i = 0; extreme && i < nb; i++) b[i] = 0.5f;
    for (int64_t i = 0; extreme && i < nc; i++) dc[i] = 0.25f;
    qs_th_qmat qa = qs_th_quantize(a, B * c.M, c.K, fdt, false, false, 7);
    qs_th_qmat qb = qs_th_quantize(b, B * b_rows, b_cols, fdt, false, false, 7);
    qs_th_qmat qdc = qs_th_quantize(dc, B * c.M, c.N, gdt, false, !extreme, 9);
    bmm_ref_dir deq[3], exact[3];
    bmm_ref_dirs(&c, qa.deq, qb.deq, qdc.deq, deq);
    bmm_ref_dirs(&c, a, b, dc, exact);
    /* the operand formats of each direction, for the NMSE budget: (l, r) */
    const double qf = quant_rel_mse(fdt, false), qg = quant_rel_mse(gdt, !extreme);
    const double q[3] = {qf + qf, qg + qf, qg + qf};
    char what[160];
    for (int dir = 0; dir < 3; dir++) {
        const bmm_ref_dir *r = &deq[dir];
        const int64_t n = B * r->m * r->n;
        double *ref = qs_th_doubles(n), *ref_exact = qs_th_doubles(n);
        ref_bmm(B, r->m, r->n, r->k, r->l, r->r, c.alpha, ref);
        ref_bmm(B, r->m, r->n, r->k, exact[dir].l, exact[dir].r, c.alpha, ref_exact);
        float *out = nan_floats(n);
        ASSERT_OK(bmm_call(plan, dir, &qa.op, &qb.op, &qdc.op, out, false, ws));
        snprintf(what, sizeof what, "%s bmm %s b%lld M%lld N%lld K%lld%s a%g", qs_precision_name(p), dir_name[dir],
                 (long long)B, (long long)c.M, (long long)c.N, (long long)c.K, c.trans_b ? " tB" : "", (double)c.alpha);
        CHECK_FP32(what, out, to_f32(ref, n, NULL), n, (double)r->k + 5);
        if (n >= 32) {
            const double budget = 10.0 * (q[dir] + QS_TOL_U * QS_TOL_U * ((double)r->k + 6));
            assert_true(check_nmse(what, out, ref_exact, n, budget));
        }
        if (dir == 0) continue;
        float *base = qs_th_uniform(n, -1, 1), *acc = copy_of(base, n);
        ASSERT_OK(bmm_call(plan, dir, &qa.op, &qb.op, &qdc.op, acc, true, ws));
        snprintf(what, sizeof what, "%s bmm %s accumulate", qs_precision_name(p), dir_name[dir]);
        CHECK_FP32(what, acc, to_f32(ref, n, base), n, (double)r->k + 6);
    }
    OPS->plan_destroy(BE, plan);
}

static const qs_precision g_precs[] = {QS_PREC_FP32, QS_PREC_BF16, QS_PREC_INT8, QS_PREC_FP16, QS_PREC_FP8};

/* Every precision × shapes with odd and unit sizes (one query row, one key, one feature) ×
 * trans_b both ways × alpha 1 and 0.3. */
static void test_bmm_precisions(void **state) {
    static const bmm_case shapes[] = {
        {1, 1, 1, 1, false, 1}, {2, 7, 5, 13, false, 1}, {4, 1, 6, 8, false, 1},
        {3, 9, 9, 16, false, 1}, {2, 33, 17, 64, false, 1}, {1, 5, 1, 3, false, 1},
    };
    for (size_t pi = 0; pi < sizeof g_precs / sizeof *g_precs; pi++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (int v = 0; v < 4; v++) {
                bmm_case c = shapes[si];
                c.trans_b = v & 1;
                c.alpha = v & 2 ? 0.3f : 1.0f;
                check_bmm(g_precs[pi], c, false);
            }
}

/* INT8 with a reduction (backward_b over M) longer than int32 sums exactly, operands at the
 * extremes: the plan must not overflow (it runs emulated). Also FP32 on the same shape. */
static void test_bmm_int8_long_reduction(void **state) {
    check_bmm(QS_PREC_INT8, (bmm_case){1, 140001, 3, 5, true, 1}, true);
    check_bmm(QS_PREC_INT8, (bmm_case){1, 140001, 3, 5, false, 0.5f}, true);
}

/* Plan and operand errors say what was wrong. */
static void test_bmm_errors(void **state) {
    qs_bmm_desc d = {.batch = 2, .M = 3, .N = 4, .K = 5, .trans_b = true, .alpha = 1, .prec = QS_PREC_INT8};
    void *plan = (void *)1;
    size_t wsb = 1;
    assert_int_equal(OPS->bmm_plan(BE, NULL, &plan, &wsb), QS_ERR_INVALID_ARG);
    qs_bmm_desc bad = d;
    bad.M = 0;
    assert_int_equal(OPS->bmm_plan(BE, &bad, &plan, &wsb), QS_ERR_INVALID_ARG);
    assert_null(plan);
    assert_true(error_has("M=0"));
    bad = d;
    bad.alpha = NAN;
    assert_int_equal(OPS->bmm_plan(BE, &bad, &plan, &wsb), QS_ERR_INVALID_ARG);
    assert_true(error_has("alpha"));
    /* TF32 is refused exactly as linear_plan refuses it */
    bad = d;
    bad.prec = QS_PREC_TF32;
    assert_int_equal(OPS->bmm_plan(BE, &bad, &plan, &wsb), QS_ERR_UNSUPPORTED);
    assert_true(error_has("tf32"));
    qs_linear_desc ld = {.M = 3, .N = 4, .K = 5, .prec = QS_PREC_TF32};
    void *lplan = NULL;
    assert_int_equal(OPS->linear_plan(BE, &ld, &lplan, &wsb), QS_ERR_UNSUPPORTED);

    ASSERT_OK(OPS->bmm_plan(BE, &d, &plan, &wsb));
    assert_true(wsb > 0);
    void *ws = qs_th_alloc(wsb);
    float *a = qs_th_uniform(30, -1, 1), *b = qs_th_uniform(40, -1, 1), *dc = qs_th_uniform(24, -1, 1);
    float *out = qs_th_floats(40);
    qs_th_qmat qa = qs_th_quantize(a, 6, 5, QS_S8, false, false, 1);
    qs_th_qmat qb = qs_th_quantize(b, 8, 5, QS_S8, false, false, 1);
    qs_th_qmat qdc = qs_th_quantize(dc, 6, 4, QS_S8, false, false, 1);
    ASSERT_OK(OPS->bmm_forward(BE, plan, STREAM, &qa.op, &qb.op, out, ws));
    /* per-row scales are refused for every operand */
    qs_th_qmat qbr = qs_th_quantize(b, 8, 5, QS_S8, true, false, 1);
    assert_int_equal(OPS->bmm_forward(BE, plan, STREAM, &qa.op, &qbr.op, out, ws), QS_ERR_INVALID_ARG);
    assert_true(error_has("per-row"));
    assert_int_equal(OPS->bmm_backward_a(BE, plan, STREAM, &qdc.op, &qbr.op, out, false, ws), QS_ERR_INVALID_ARG);
    assert_true(error_has("per-row"));
    qs_th_qmat qar = qs_th_quantize(a, 6, 5, QS_S8, true, false, 1);
    assert_int_equal(OPS->bmm_backward_b(BE, plan, STREAM, &qdc.op, &qar.op, out, false, ws), QS_ERR_INVALID_ARG);
    assert_true(error_has("per-row"));
    /* wrong dtype, missing scale, NULL operand / output / workspace / plan, foreign plan */
    qs_operand fa = qs_operand_f32(a), sa = {.data = qa.op.data, .dt = QS_S8, .scale = NULL};
    assert_int_equal(OPS->bmm_forward(BE, plan, STREAM, &fa, &qb.op, out, ws), QS_ERR_INVALID_ARG);
    assert_true(error_has("s8"));
    assert_int_equal(OPS->bmm_forward(BE, plan, STREAM, &sa, &qb.op, out, ws), QS_ERR_INVALID_ARG);
    assert_true(error_has("scale"));
    assert_int_equal(OPS->bmm_forward(BE, plan, STREAM, NULL, &qb.op, out, ws), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->bmm_forward(BE, plan, STREAM, &qa.op, &qb.op, NULL, ws), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->bmm_backward_b(BE, plan, STREAM, &qdc.op, &qa.op, out, false, NULL), QS_ERR_INVALID_ARG);
    assert_true(error_has("workspace"));
    assert_int_equal(OPS->bmm_forward(BE, NULL, STREAM, &qa.op, &qb.op, out, ws), QS_ERR_INVALID_ARG);
    qs_linear_desc lf = {.M = 3, .N = 4, .K = 5, .prec = QS_PREC_FP32};
    ASSERT_OK(OPS->linear_plan(BE, &lf, &lplan, &wsb));
    assert_int_equal(OPS->bmm_forward(BE, lplan, STREAM, &qa.op, &qb.op, out, ws), QS_ERR_INVALID_ARG);
    assert_true(error_has("another operator kind"));
    OPS->plan_destroy(BE, lplan);
    OPS->plan_destroy(BE, plan);
    OPS->plan_destroy(BE, NULL);
}

/* ================================================================== LayerNorm */

typedef struct ln_ctx {
    int64_t rows, C;
    const float *gamma, *beta;
    float eps;
    float *mean, *rstd;
} ln_ctx;

/* fd_forward of LayerNorm: y = layernorm(x) with ctx's shape and parameters. */
static void ln_fwd(const void *vctx, const float *x, float *y) {
    const ln_ctx *c = vctx;
    ASSERT_OK(OPS->layernorm_forward(BE, STREAM, c->rows, c->C, x, c->gamma, c->beta, c->eps, y, c->mean, c->rstd));
}

/* LayerNorm forward (y, saved mean and rstd) and backward (dx overwrite / accumulate / NULL,
 * dgamma, dbeta) of x (rows, C) against the FP64 reference; fd: also the finite-difference check
 * of dx (on rows rescaled to unit spread). */
static void check_layernorm(int64_t rows, int64_t C, bool fd) {
    qs_th_seed(qs_rng_key(5, "layernorm", (uint64_t)(rows * 1000 + C)));
    const int64_t n = rows * C;
    const float eps = 1e-5f;
    float *x = qs_th_uniform(n, -2, 2), *gamma = qs_th_uniform(C, 0.5f, 1.5f), *beta = qs_th_uniform(C, -1, 1);
    float *dy = qs_th_uniform(n, -1, 1);
    for (int64_t r = 0; fd && C > 1 && r < rows; r++) {
        /* FD needs h far below a row's spread (its truncation error grows like rstd⁵·h⁴): give
         * every row a unit standard deviation */
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; c++) m += x[r * C + c] / (double)C;
        for (int64_t c = 0; c < C; c++) v += (x[r * C + c] - m) * (x[r * C + c] - m) / (double)C;
        for (int64_t c = 0; c < C; c++) x[r * C + c] = (float)(m + (x[r * C + c] - m) / sqrt(v));
    }
    for (int64_t i = 0; i < n; i++) x[i] += 3.0f; /* a mean to subtract */
    double *ry = qs_th_doubles(n), *rmean = qs_th_doubles(rows), *rrstd = qs_th_doubles(rows), *rdx = qs_th_doubles(n);
    double *rdg = qs_th_doubles(C), *rdb = qs_th_doubles(C), *xh = qs_th_doubles(C), *sdg = qs_th_doubles(C);
    double s_y = 0, s_dx = 0, s_dg = 0; /* scales of the terms before cancellation (see below) */
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C, *gr = dy + r * C;
        double m = 0, v = 0, sg = 0, sgh = 0;
        for (int64_t c = 0; c < C; c++) m += xr[c];
        m /= (double)C;
        for (int64_t c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        const double rs = 1.0 / sqrt(v / (double)C + eps);
        rmean[r] = m, rrstd[r] = rs;
        for (int64_t c = 0; c < C; c++) {
            xh[c] = (xr[c] - m) * rs;
            ry[r * C + c] = xh[c] * gamma[c] + beta[c];
            sg += (double)gr[c] * gamma[c];
            sgh += (double)gr[c] * gamma[c] * xh[c];
            rdg[c] += (double)gr[c] * xh[c];
            rdb[c] += gr[c];
        }
        for (int64_t c = 0; c < C; c++) {
            rdx[r * C + c] = rs * ((double)gr[c] * gamma[c] - sg / C - xh[c] * sgh / C);
            /* x̂ = (x − mean)·rstd cancels: its rounding is relative to (|x| + |mean|)·rstd, not to
             * |x̂| (the saved mean is an FP32 rounding of a value of size |mean|), so every
             * quantity built on x̂ is judged against the magnitude of its terms (check.h) */
            const double xt = (fabs(xr[c]) + fabs(m)) * rs;
            s_y = fmax(s_y, xt * fabs(gamma[c]) + fabs(beta[c]));
            s_dx = fmax(s_dx, rs * (fabs((double)gr[c] * gamma[c]) + fabs(sg / C) + xt * fabs(sgh / C)));
            sdg[c] += (gr[c] * xt) * (gr[c] * xt); /* ‖terms‖₂² of the dgamma sum */
        }
    }
    for (int64_t c = 0; c < C; c++) s_dg = fmax(s_dg, sqrt(sdg[c]));
    float *y = nan_floats(n), *mean = nan_floats(rows), *rstd = nan_floats(rows);
    ASSERT_OK(OPS->layernorm_forward(BE, STREAM, rows, C, x, gamma, beta, eps, y, mean, rstd));
    char what[96];
    snprintf(what, sizeof what, "layernorm fwd rows%lld C%lld", (long long)rows, (long long)C);
    assert_true(qs_check_close(what, y, to_f32(ry, n, NULL), n, qs_tol_fp32((double)C + 4, s_y), NULL));
    CHECK_FP32("layernorm saved mean", mean, to_f32(rmean, rows, NULL), rows, (double)C);
    CHECK_FP32("layernorm saved rstd", rstd, to_f32(rrstd, rows, NULL), rows, (double)C + 4);
    float *dx = nan_floats(n), *dg = nan_floats(C), *db = nan_floats(C);
    ASSERT_OK(OPS->layernorm_backward(BE, STREAM, rows, C, x, dy, gamma, mean, rstd, dx, false, dg, db));
    snprintf(what, sizeof what, "layernorm bwd dx rows%lld C%lld", (long long)rows, (long long)C);
    assert_true(qs_check_close(what, dx, to_f32(rdx, n, NULL), n, qs_tol_fp32(2.0 * (double)C + 4, s_dx), NULL));
    assert_true(qs_check_close("layernorm dgamma", dg, to_f32(rdg, C, NULL), C,
                               qs_tol_fp32((double)rows + (double)C + 4, s_dg), NULL));
    CHECK_FP32("layernorm dbeta", db, to_f32(rdb, C, NULL), C, (double)rows);
    float *base = qs_th_uniform(n, -1, 1), *dxa = copy_of(base, n);
    ASSERT_OK(OPS->layernorm_backward(BE, STREAM, rows, C, x, dy, gamma, mean, rstd, dxa, true, dg, db));
    assert_true(qs_check_close("layernorm bwd dx accumulate", dxa, to_f32(rdx, n, base), n,
                               qs_tol_fp32(2.0 * (double)C + 5, s_dx + qs_max_abs(base, n)), NULL));
    float *dg2 = nan_floats(C), *db2 = nan_floats(C); /* no input gradient: parameters only */
    ASSERT_OK(OPS->layernorm_backward(BE, STREAM, rows, C, x, dy, gamma, mean, rstd, NULL, false, dg2, db2));
    CHECK_EQ("layernorm dgamma without dx", dg2, dg, C);
    CHECK_EQ("layernorm dbeta without dx", db2, db, C);
    if (!fd) return;
    ln_ctx ctx = {rows, C, gamma, beta, eps, qs_th_floats(rows), qs_th_floats(rows)};
    snprintf(what, sizeof what, "layernorm dx FD rows%lld C%lld", (long long)rows, (long long)C);
    fd_check(what, ln_fwd, &ctx, x, n, C, dy, dx, (double)C + 4, 2.0 * (double)C + 4);
}

/* C = 1 (zero variance), C = 3, one row, a row of small spread, 64 columns, 300 rows. */
static void test_layernorm(void **state) {
    check_layernorm(1, 1, false); /* zero variance: y = beta, dx = 0 */
    check_layernorm(1, 3, true);
    check_layernorm(7, 3, false); /* raw uniform rows: one has a small spread (large rstd) */
    check_layernorm(6, 3, true);
    check_layernorm(5, 64, true);
    check_layernorm(300, 17, false); /* several chunks of the parameter-gradient reduction */
}

/* ================================================================== GELU, tanh */

#define SQRT_2_OVER_PI 0.79788456080286535588 /* sqrt(2/π) */
/* GELU (tanh form, as the contract writes it) and its derivative, in FP64. */
static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    const double k = SQRT_2_OVER_PI, t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

/* fd_forward of GELU over *(int64_t *)ctx values. */
static void gelu_fwd(const void *ctx, const float *x, float *y) {
    ASSERT_OK(OPS->gelu_forward(BE, STREAM, *(const int64_t *)ctx, x, y));
}

/* GELU forward, backward (overwrite, accumulate), in place, FD, over n values in [−5, 5) with
 * zeros, ±12 (saturation) and a few fixed points when n > 8. */
static void check_gelu(int64_t n) {
    qs_th_seed(qs_rng_key(6, "gelu", (uint64_t)n));
    float *x = qs_th_uniform(n, -5, 5), *dy = qs_th_uniform(n, -1, 1);
    static const float special[] = {0.0f, -0.0f, 12.0f, -12.0f, 0.5f, -0.5f, 3.0f, -3.0f};
    for (int64_t i = 0; i < n && i < 8 && n > 8; i++) x[i] = special[i];
    double *ry = qs_th_doubles(n), *rdx = qs_th_doubles(n);
    for (int64_t i = 0; i < n; i++) {
        ry[i] = gelu_ref(x[i]);
        rdx[i] = dy[i] * gelu_grad_ref(x[i]);
    }
    float *y = nan_floats(n), *dx = nan_floats(n);
    ASSERT_OK(OPS->gelu_forward(BE, STREAM, n, x, y));
    CHECK_FP32("gelu fwd", y, to_f32(ry, n, NULL), n, 16);
    ASSERT_OK(OPS->gelu_backward(BE, STREAM, n, x, dy, dx, false));
    CHECK_FP32("gelu bwd", dx, to_f32(rdx, n, NULL), n, 16);
    float *base = qs_th_uniform(n, -1, 1), *dxa = copy_of(base, n);
    ASSERT_OK(OPS->gelu_backward(BE, STREAM, n, x, dy, dxa, true));
    CHECK_FP32("gelu bwd accumulate", dxa, to_f32(rdx, n, base), n, 17);
    float *yy = copy_of(x, n); /* in place */
    ASSERT_OK(OPS->gelu_forward(BE, STREAM, n, yy, yy));
    CHECK_EQ("gelu fwd in place", yy, y, n);
    fd_check("gelu dx FD", gelu_fwd, &n, x, n, 1, dy, dx, 16, 16);
}

/* One value, an odd count, a thousand. */
static void test_gelu(void **state) {
    check_gelu(1);
    check_gelu(7);
    check_gelu(1000);
}

/* tanh forward (saturating values included) and backward from the forward's output. */
static void test_tanh(void **state) {
    qs_th_seed(qs_rng_key(7, "tanh", 0));
    const int64_t n = 257;
    float *x = qs_th_uniform(n, -4, 4), *dy = qs_th_uniform(n, -1, 1), *y = nan_floats(n), *dx = nan_floats(n);
    x[0] = 0.0f, x[1] = 20.0f, x[2] = -20.0f;
    double *ry = qs_th_doubles(n), *rdx = qs_th_doubles(n);
    ASSERT_OK(OPS->tanh_forward(BE, STREAM, n, x, y));
    for (int64_t i = 0; i < n; i++) {
        ry[i] = tanh((double)x[i]);
        rdx[i] = dy[i] * (1.0 - (double)y[i] * y[i]); /* the contract: from the forward's output */
    }
    CHECK_FP32("tanh fwd", y, to_f32(ry, n, NULL), n, 4);
    ASSERT_OK(OPS->tanh_backward(BE, STREAM, n, y, dy, dx, false));
    CHECK_FP32("tanh bwd", dx, to_f32(rdx, n, NULL), n, 4);
    float *base = qs_th_uniform(n, -1, 1), *dxa = copy_of(base, n);
    ASSERT_OK(OPS->tanh_backward(BE, STREAM, n, y, dy, dxa, true));
    CHECK_FP32("tanh bwd accumulate", dxa, to_f32(rdx, n, base), n, 5);
}

/* ================================================================== embedding */

/* Embedding forward (bitwise copies) and backward (overwrite, with a table row no id names that
 * must be zeroed; accumulate) for rows ids over a vocabulary of V, C columns. */
static void check_embedding(int64_t rows, int64_t C, int64_t V) {
    qs_th_seed(qs_rng_key(8, "embedding", (uint64_t)(rows * 100 + C)));
    float *ids = qs_th_floats(rows), *table = qs_th_uniform(V * C, -1, 1), *dy = qs_th_uniform(rows * C, -1, 1);
    /* ids skip the last vocabulary entry, repeat the others */
    for (int64_t r = 0; r < rows; r++) ids[r] = (float)((r * 7 + r / 3) % (V > 1 ? V - 1 : 1));
    float *y = nan_floats(rows * C), *ry = qs_th_floats(rows * C);
    for (int64_t r = 0; r < rows; r++) memcpy(ry + r * C, table + (int64_t)ids[r] * C, (size_t)C * sizeof(float));
    ASSERT_OK(OPS->embedding_forward(BE, STREAM, rows, C, V, ids, table, y));
    CHECK_EQ("embedding fwd", y, ry, rows * C);
    double *rdt = qs_th_doubles(V * C);
    int64_t most = 1;
    for (int64_t v = 0; v < V; v++) {
        int64_t cnt = 0;
        for (int64_t r = 0; r < rows; r++) {
            if ((int64_t)ids[r] != v) continue;
            cnt++;
            for (int64_t c = 0; c < C; c++) rdt[v * C + c] += dy[r * C + c];
        }
        if (cnt > most) most = cnt;
    }
    float *dt = nan_floats(V * C); /* overwrite zeroes rows no id names */
    ASSERT_OK(OPS->embedding_backward(BE, STREAM, rows, C, V, ids, dy, dt, false));
    char what[96];
    snprintf(what, sizeof what, "embedding bwd rows%lld C%lld V%lld", (long long)rows, (long long)C, (long long)V);
    CHECK_FP32(what, dt, to_f32(rdt, V * C, NULL), V * C, (double)most);
    float *base = qs_th_uniform(V * C, -1, 1), *dta = copy_of(base, V * C);
    ASSERT_OK(OPS->embedding_backward(BE, STREAM, rows, C, V, ids, dy, dta, true));
    CHECK_FP32("embedding bwd accumulate", dta, to_f32(rdt, V * C, base), V * C, (double)most + 1);
}

/* Small odd, unit and multi-block shapes; zero rows. */
static void test_embedding(void **state) {
    check_embedding(7, 3, 5);
    check_embedding(1, 1, 1);
    check_embedding(300, 70, 11); /* more columns than one summing block */
    /* no rows: overwrite still zeroes the table, accumulate leaves it */
    float *t = qs_th_uniform(6, -1, 1), *keep = copy_of(t, 6), zero[6] = {0};
    ASSERT_OK(OPS->embedding_backward(BE, STREAM, 0, 3, 2, NULL, NULL, t, true));
    CHECK_EQ("embedding bwd, no rows, accumulate", t, keep, 6);
    ASSERT_OK(OPS->embedding_backward(BE, STREAM, 0, 3, 2, NULL, NULL, t, false));
    CHECK_EQ("embedding bwd, no rows, overwrite", t, zero, 6);
}

/* An id outside [0, V), or not an integer, fails with a message naming the row and the id. */
static void test_embedding_bad_ids(void **state) {
    const int64_t rows = 5, C = 2, V = 5;
    float *table = qs_th_uniform(V * C, -1, 1), *y = qs_th_floats(rows * C), *dy = qs_th_uniform(rows * C, -1, 1);
    static const float bad[] = {5.0f, -1.0f, 2.5f, NAN, 1e9f};
    static const char *const shown[] = {"token id 5 at row 3", "token id -1 at row 3", "token id 2.5 at row 3",
                                        "at row 3", "token id 1e+09 at row 3"};
    for (int i = 0; i < 5; i++) {
        float ids[5] = {0, 4, 1, bad[i], 6};
        assert_int_equal(OPS->embedding_forward(BE, STREAM, rows, C, V, ids, table, y), QS_ERR_INVALID_ARG);
        assert_true(error_has(shown[i]));
        assert_true(error_has("[0, 5)"));
        assert_int_equal(OPS->embedding_backward(BE, STREAM, rows, C, V, ids, dy, table, false), QS_ERR_INVALID_ARG);
        assert_true(error_has(shown[i]));
    }
    float ok_ids[5] = {0, 4, 1, 2, 3};
    assert_int_equal(OPS->embedding_forward(BE, STREAM, rows, C, V, NULL, table, y), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->embedding_forward(BE, STREAM, rows, C, 0, ok_ids, table, y), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->embedding_backward(BE, STREAM, rows, C, V, ok_ids, dy, NULL, false), QS_ERR_INVALID_ARG);
}

/* ================================================================== broadcast add, heads */

/* y = x + v broadcast over outer, out of place and in place; empty and error cases. */
static void test_add_broadcast(void **state) {
    qs_th_seed(qs_rng_key(9, "add_broadcast", 0));
    const int64_t outer = 3, inner = 7;
    float *x = qs_th_uniform(outer * inner, -1, 1), *v = qs_th_uniform(inner, -1, 1), *y = nan_floats(outer * inner);
    float *ry = qs_th_floats(outer * inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) ry[o * inner + i] = (float)((double)x[o * inner + i] + v[i]);
    ASSERT_OK(OPS->add_broadcast(BE, STREAM, outer, inner, x, v, y));
    CHECK_EQ("add_broadcast", y, ry, outer * inner);
    ASSERT_OK(OPS->add_broadcast(BE, STREAM, outer, inner, x, v, x)); /* y aliases x */
    CHECK_EQ("add_broadcast in place", x, ry, outer * inner);
    ASSERT_OK(OPS->add_broadcast(BE, STREAM, 0, inner, NULL, NULL, NULL));
    assert_int_equal(OPS->add_broadcast(BE, STREAM, outer, inner, x, NULL, y), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->add_broadcast(BE, STREAM, -1, inner, x, v, y), QS_ERR_INVALID_ARG);
}

/* argmax_rows: the first maximum of every row (ties from 4 levels), against a plain scan. */
static void test_argmax_rows(void **state) {
    qs_th_seed(qs_rng_key(9, "argmax_rows", 0));
    const int64_t rows = 23, cols = 17;
    float *x = qs_th_uniform(rows * cols, 0, 4);
    for (int64_t i = 0; i < rows * cols; i++) x[i] = floorf(x[i]);
    int32_t idx[23];
    ASSERT_OK(OPS->argmax_rows(BE, STREAM, rows, cols, x, idx));
    for (int64_t r = 0; r < rows; r++) {
        int64_t want = 0;
        for (int64_t c = 0; c < cols; c++)
            if (x[r * cols + c] > x[r * cols + want]) want = c;
        assert_int_equal(idx[r], want);
    }
    ASSERT_OK(OPS->argmax_rows(BE, STREAM, 0, cols, NULL, NULL));
    assert_int_equal(OPS->argmax_rows(BE, STREAM, rows, 0, x, idx), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->argmax_rows(BE, STREAM, rows, cols, x, NULL), QS_ERR_INVALID_ARG);
}

/* Token rows of ld floats holding an (H·D) slice at off ⇄ (N,H,T,D), both ways, overwrite and
 * accumulate; the rest of the token rows stays untouched. */
static void check_permute(int64_t N, int64_t T, int64_t H, int64_t D, int64_t ld, int64_t off) {
    qs_th_seed(qs_rng_key(10, "permute_heads", (uint64_t)(N * T * H * D)));
    const int64_t nh = N * H * T * D, nt = N * T * ld;
    float *tok = qs_th_uniform(nt, -1, 1), *heads = nan_floats(nh), *rheads = qs_th_floats(nh);
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++)
                    rheads[((n * H + h) * T + t) * D + d] = tok[(n * T + t) * ld + off + h * D + d];
    ASSERT_OK(OPS->permute_heads(BE, STREAM, N, T, H, D, ld, off, tok, heads, true, false));
    CHECK_EQ("permute_heads to heads", heads, rheads, nh);
    float *hbase = qs_th_uniform(nh, -1, 1), *hacc = copy_of(hbase, nh), *rhacc = qs_th_floats(nh);
    for (int64_t i = 0; i < nh; i++) rhacc[i] = (float)((double)hbase[i] + rheads[i]);
    ASSERT_OK(OPS->permute_heads(BE, STREAM, N, T, H, D, ld, off, tok, hacc, true, true));
    CHECK_EQ("permute_heads to heads accumulate", hacc, rhacc, nh);
    /* back: into sentinel-filled token rows (only the slice changes), then accumulate */
    float *src = qs_th_uniform(nh, -1, 1), *back = qs_th_uniform(nt, -1, 1), *rback = copy_of(back, nt);
    float *back_acc = copy_of(back, nt), *rback_acc = copy_of(back, nt);
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    const int64_t ti = (n * T + t) * ld + off + h * D + d;
                    const float v = src[((n * H + h) * T + t) * D + d];
                    rback[ti] = v;
                    rback_acc[ti] = (float)((double)rback_acc[ti] + v);
                }
    ASSERT_OK(OPS->permute_heads(BE, STREAM, N, T, H, D, ld, off, src, back, false, false));
    CHECK_EQ("permute_heads to tokens", back, rback, nt);
    ASSERT_OK(OPS->permute_heads(BE, STREAM, N, T, H, D, ld, off, src, back_acc, false, true));
    CHECK_EQ("permute_heads to tokens accumulate", back_acc, rback_acc, nt);
}

/* A packed QKV slice, unit T and D, an odd ld; errors for a too-short row and a negative off. */
static void test_permute_heads(void **state) {
    check_permute(2, 3, 4, 5, 60, 20); /* the K slice of a packed QKV row */
    check_permute(1, 1, 3, 1, 3, 0);   /* T = 1, D = 1, a dense row */
    check_permute(3, 7, 2, 3, 11, 5);  /* odd ld with spare floats after the slice */
    float *a = qs_th_floats(64), *b = qs_th_floats(64);
    assert_int_equal(OPS->permute_heads(BE, STREAM, 1, 2, 2, 3, 5, 0, a, b, true, false), QS_ERR_INVALID_ARG);
    assert_true(error_has("ld=5"));
    assert_int_equal(OPS->permute_heads(BE, STREAM, 1, 2, 2, 3, 8, -1, a, b, true, false), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->permute_heads(BE, STREAM, 1, 2, 2, 3, 6, 0, NULL, b, true, false), QS_ERR_INVALID_ARG);
}

/* ================================================================== masked softmax */

typedef struct sm_ctx {
    int64_t N, H, Tq, Tk;
    bool causal;
    const float *key_ids;
    float pad;
} sm_ctx;

/* fd_forward of the masked softmax with ctx's shape and masks. */
static void sm_fwd(const void *vctx, const float *x, float *y) {
    const sm_ctx *c = vctx;
    ASSERT_OK(OPS->softmax_forward(BE, STREAM, c->N, c->H, c->Tq, c->Tk, x, y, c->causal, c->key_ids, c->pad));
}

/* Whether key j of query i in sample n is masked (the contract). */
static bool sm_masked(const sm_ctx *c, int64_t n, int64_t i, int64_t j) {
    return (c->causal && j > i) || (c->key_ids && c->key_ids[n * c->Tk + j] == c->pad);
}

/* Masked softmax forward (masked entries exactly 0, fully masked rows all 0) and backward
 * (overwrite, accumulate) against FP64 references; fd: also the finite-difference check of dx. */
static void check_softmax(sm_ctx c, const char *name, bool fd) {
    qs_th_seed(qs_rng_key(12, "softmax", (uint64_t)(c.N * 1000 + c.Tq * 10 + c.Tk)));
    const int64_t rows = c.N * c.H * c.Tq, n = rows * c.Tk;
    float *x = qs_th_uniform(n, -3, 3), *dy = qs_th_uniform(n, -1, 1);
    double *ry = qs_th_doubles(n);
    int64_t n_masked = 0, n_empty = 0;
    for (int64_t row = 0; row < rows; row++) {
        const int64_t nn = row / (c.H * c.Tq), i = row % c.Tq;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c.Tk; j++)
            if (!sm_masked(&c, nn, i, j)) m = fmax(m, x[row * c.Tk + j]);
        for (int64_t j = 0; j < c.Tk; j++)
            if (!sm_masked(&c, nn, i, j)) s += exp(x[row * c.Tk + j] - m);
        for (int64_t j = 0; j < c.Tk; j++) {
            const bool msk = sm_masked(&c, nn, i, j);
            n_masked += msk;
            ry[row * c.Tk + j] = msk ? 0.0 : exp(x[row * c.Tk + j] - m) / s;
        }
        n_empty += s == 0;
    }
    float *y = nan_floats(n);
    sm_fwd(&c, x, y);
    char what[96];
    snprintf(what, sizeof what, "softmax fwd %s", name);
    CHECK_FP32(what, y, to_f32(ry, n, NULL), n, (double)c.Tk + 4);
    for (int64_t row = 0; row < rows; row++) /* masked entries are exactly 0 */
        for (int64_t j = 0; j < c.Tk; j++)
            if (sm_masked(&c, row / (c.H * c.Tq), row % c.Tq, j)) assert_true(y[row * c.Tk + j] == 0.0f);
    printf("       (%lld masked entries, %lld fully masked rows)\n", (long long)n_masked, (long long)n_empty);
    /* backward from the backend's own y, as a layer calls it */
    double *rdx = qs_th_doubles(n);
    for (int64_t row = 0; row < rows; row++) {
        double dot = 0;
        for (int64_t j = 0; j < c.Tk; j++) dot += (double)dy[row * c.Tk + j] * y[row * c.Tk + j];
        for (int64_t j = 0; j < c.Tk; j++) rdx[row * c.Tk + j] = y[row * c.Tk + j] * (dy[row * c.Tk + j] - dot);
    }
    float *dx = nan_floats(n);
    ASSERT_OK(OPS->softmax_backward(BE, STREAM, rows, c.Tk, y, dy, dx, false));
    snprintf(what, sizeof what, "softmax bwd %s", name);
    CHECK_FP32(what, dx, to_f32(rdx, n, NULL), n, (double)c.Tk + 2);
    float *base = qs_th_uniform(n, -1, 1), *dxa = copy_of(base, n);
    ASSERT_OK(OPS->softmax_backward(BE, STREAM, rows, c.Tk, y, dy, dxa, true));
    snprintf(what, sizeof what, "softmax bwd accumulate %s", name);
    CHECK_FP32(what, dxa, to_f32(rdx, n, base), n, (double)c.Tk + 3);
    if (!fd) return;
    snprintf(what, sizeof what, "softmax dx FD %s", name);
    fd_check(what, sm_fwd, &c, x, n, c.Tk, dy, dx, (double)c.Tk + 4, 2.0 * (double)c.Tk + 6);
}

/* Causal, key padding (with an all-padding sample), both (a causal row whose only key is
 * padding), Tk = 1, no mask, Tq > Tk; argument errors. */
static void test_softmax(void **state) {
    /* key ids of 2 samples × 7 keys; pad id 0: sample 1 is all padding */
    static const float ids7[14] = {3, 9, 0, 4, 0, 8, 2, 0, 0, 0, 0, 0, 0, 0};
    /* 2 samples × 6 keys; sample 0 pads key 0, so its causal query 0 sees nothing */
    static const float ids6[12] = {-1, 5, 6, -1, 7, 8, 1, 2, 3, 4, -1, -1};
    check_softmax((sm_ctx){2, 3, 5, 5, true, NULL, 0}, "causal N2 H3 T5", true);
    check_softmax((sm_ctx){2, 2, 1, 7, false, ids7, 0.0f}, "padding Tq1 Tk7 (an all-pad sample)", true);
    check_softmax((sm_ctx){2, 1, 4, 6, true, ids6, -1.0f}, "causal+padding Tq4 Tk6", true);
    check_softmax((sm_ctx){1, 1, 3, 1, false, NULL, 0}, "no mask Tk1", false);
    check_softmax((sm_ctx){3, 2, 9, 13, false, NULL, 0}, "no mask Tq9 Tk13", true);
    check_softmax((sm_ctx){1, 2, 6, 3, true, NULL, 0}, "causal Tq6 > Tk3", false);
    float *x = qs_th_floats(8);
    assert_int_equal(OPS->softmax_forward(BE, STREAM, 1, 1, -2, 4, x, x, false, NULL, 0), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->softmax_forward(BE, STREAM, 1, 1, 2, 4, x, NULL, false, NULL, 0), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->softmax_backward(BE, STREAM, 2, 4, x, NULL, x, false), QS_ERR_INVALID_ARG);
}

/* ================================================================== thread count, errors */

/* The outputs of every op with a cross-row or scattered reduction, under `threads` threads,
 * concatenated into out (sizes fixed below). */
#define TI_ROWS 300
#define TI_C 33
#define TI_V 7
static void run_thread_case(int threads, const float *x, const float *dy, const float *ids, float *out) {
    omp_set_num_threads(threads);
    const int64_t n = TI_ROWS * TI_C;
    float *gamma = qs_th_floats(TI_C), *beta = qs_th_floats(TI_C);
    float *mean = qs_th_floats(TI_ROWS), *rstd = qs_th_floats(TI_ROWS);
    for (int64_t i = 0; i < TI_C; i++) gamma[i] = 1.0f + 0.01f * (float)i, beta[i] = 0.1f * (float)i;
    float *o = out;
    ASSERT_OK(OPS->layernorm_forward(BE, STREAM, TI_ROWS, TI_C, x, gamma, beta, 1e-5f, o, mean, rstd));
    o += n;
    ASSERT_OK(OPS->layernorm_backward(BE, STREAM, TI_ROWS, TI_C, x, dy, gamma, mean, rstd, o, false, o + n,
                                      o + n + TI_C));
    o += n + 2 * TI_C;
    ASSERT_OK(OPS->embedding_backward(BE, STREAM, TI_ROWS, TI_C, TI_V, ids, dy, o, false));
    o += TI_V * TI_C;
    ASSERT_OK(OPS->softmax_forward(BE, STREAM, 2, 3, 50, TI_C, x, o, true, NULL, 0));
    ASSERT_OK(OPS->softmax_backward(BE, STREAM, TI_ROWS, TI_C, o, dy, o + n, false));
    o += 2 * n;
    ASSERT_OK(OPS->gelu_backward(BE, STREAM, n, x, dy, o, false));
    omp_set_num_threads(2);
}

/* Every op with a reduction across rows or a scattered sum gives the same bits under 1 and 3
 * threads. */
static void test_thread_count_independence(void **state) {
    qs_th_seed(qs_rng_key(13, "threads", 0));
    const int64_t n = TI_ROWS * TI_C, total = 5 * n + 2 * TI_C + TI_V * TI_C;
    float *x = qs_th_uniform(n, -2, 2), *dy = qs_th_uniform(n, -1, 1), *ids = qs_th_floats(TI_ROWS);
    for (int64_t r = 0; r < TI_ROWS; r++) ids[r] = (float)((r * r) % TI_V);
    float *one = qs_th_floats(total), *three = qs_th_floats(total);
    run_thread_case(1, x, dy, ids, one);
    run_thread_case(3, x, dy, ids, three);
    assert_memory_equal(one, three, (size_t)total * sizeof(float));
    printf("  ok   %lld outputs bitwise equal under 1 and 3 threads\n", (long long)total);
}

/* NULL buffers, bad shapes and missing required outputs are refused; n = 0 is a no-op. */
static void test_transformer_errors(void **state) {
    float *a = qs_th_floats(64), *b = qs_th_floats(64);
    assert_int_equal(OPS->layernorm_forward(BE, STREAM, 2, 3, NULL, a, a, 1e-5f, b, b, b), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->layernorm_forward(BE, STREAM, 2, 0, a, a, a, 1e-5f, b, b, b), QS_ERR_INVALID_ARG);
    assert_true(error_has("C=0"));
    assert_int_equal(OPS->layernorm_backward(BE, STREAM, 2, 3, a, a, a, a, a, b, false, NULL, b), QS_ERR_INVALID_ARG);
    assert_true(error_has("dgamma"));
    assert_int_equal(OPS->gelu_forward(BE, STREAM, 4, a, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->gelu_backward(BE, STREAM, -1, a, a, b, false), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->tanh_forward(BE, STREAM, 4, NULL, b), QS_ERR_INVALID_ARG);
    assert_int_equal(OPS->tanh_backward(BE, STREAM, 4, a, NULL, b, true), QS_ERR_INVALID_ARG);
    ASSERT_OK(OPS->gelu_forward(BE, STREAM, 0, NULL, NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bmm_precisions, qs_th_teardown),
        cmocka_unit_test_teardown(test_bmm_int8_long_reduction, qs_th_teardown),
        cmocka_unit_test_teardown(test_bmm_errors, qs_th_teardown),
        cmocka_unit_test_teardown(test_layernorm, qs_th_teardown),
        cmocka_unit_test_teardown(test_gelu, qs_th_teardown),
        cmocka_unit_test_teardown(test_tanh, qs_th_teardown),
        cmocka_unit_test_teardown(test_embedding, qs_th_teardown),
        cmocka_unit_test_teardown(test_embedding_bad_ids, qs_th_teardown),
        cmocka_unit_test_teardown(test_add_broadcast, qs_th_teardown),
        cmocka_unit_test_teardown(test_argmax_rows, qs_th_teardown),
        cmocka_unit_test_teardown(test_permute_heads, qs_th_teardown),
        cmocka_unit_test_teardown(test_softmax, qs_th_teardown),
        cmocka_unit_test_teardown(test_thread_count_independence, qs_th_teardown),
        cmocka_unit_test_teardown(test_transformer_errors, qs_th_teardown),
    };
    return cmocka_run_group_tests(tests, qs_th_group_setup, qs_th_group_teardown);
}
