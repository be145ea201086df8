/* tests/support/check.h — defines: tolerance comparisons of computed tensors against
 * references, with the FP32 budget derived below, and a one-line report per comparison
 * giving the largest error as a percentage of its budget.
 *
 * Element i passes when a_i is finite and  |a_i − r_i| ≤ atol + rtol·|r_i|.
 *
 * Where rtol and atol come from (FP32, unit roundoff u = 2^-24, round to nearest even):
 *  - The reference r is exact: tools/gen_fixtures.py computes it in float64 from the very
 *    float32 values the test feeds in, and rounds it to float32 once (error ≤ u/2·|r|). Any
 *    remaining difference is the rounding of the implementation under test.
 *  - A sum or dot product of K terms in FP32 has the worst-case bound γ_K·Σ|terms|,
 *    γ_K ≈ K·u, but rounding errors behave like independent zero-mean variables (Higham &
 *    Mary 2019), so the error grows like sqrt(K)·u. For zero-mean data the partial sums are
 *    ~sqrt(k)·σ and the error's standard deviation is ≈ 0.4·u·K·σ, i.e. ≈ 0.15·u·sqrt(K)
 *    relative to the largest |r| of a tensor (≈ 3·sqrt(K)·σ); for same-sign terms (means,
 *    bias gradients) it is ≈ 0.35·u·sqrt(K)·|r|. Hence
 *        rtol = C · u · sqrt(K),        atol = rtol · S,
 *    with S the tensor's scale, by default max_i |r_i| (absolute errors of an element that
 *    cancels to near zero are set by the magnitude of the tensor, not by the element).
 *    The same estimate in terms of the summed terms t_k is ≈ 0.4·u·sqrt(K)·‖t‖₂, so when a
 *    whole tensor cancels to ~0 in exact arithmetic (the bias gradient of a conv followed by
 *    BatchNorm is exactly zero) S is the largest ‖t‖₂ over its elements instead.
 *  - K is the total reduction length along the chain the value depends on: the sum of the
 *    reduction lengths of every op between the inputs and the value (independent stages add
 *    in quadrature, so the errors add like sqrt(ΣK)). E.g. d loss/d conv.weight after conv →
 *    flatten → fc → loss: K = C·R·S (conv forward) + F (fc forward) + classes (softmax) +
 *    classes (fc backward-data) + N·P·Q (the weight gradient's reduction over rows).
 *  - C = QS_TOL_C = 4: λ ≈ 2 for a high-confidence probabilistic bound (≥ 10 standard
 *    deviations above the estimates), times 2 for a few-ulp error of transcendental functions
 *    (exp, log, rsqrt) and the O(1) conditioning of softmax and normalisation downstream.
 *  - Whole-training comparisons multiply this per-step budget by the measured amplification
 *    of the trajectory and the number of steps (see test_layers_torch.c).
 * Never widen a tolerance to make a test pass: a failure means a layout or semantic bug, or a
 * wrong K; find out which. */
#ifndef QSYNC_TESTS_CHECK_H
#define QSYNC_TESTS_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#define QS_TOL_U 5.9604644775390625e-08  /* 2^-24 */
#define QS_TOL_C 4.0

typedef struct qs_tol {
    double rtol;
    double atol;    /* < 0: use rtol · max|ref| */
} qs_tol;

/* rtol = QS_TOL_C·u·sqrt(max(K,1)); atol = rtol·scale, or rtol·max|ref| when scale < 0. */
qs_tol qs_tol_fp32(double K, double scale);

typedef struct qs_check_stats {
    double worst_frac;      /* max_i |a_i − r_i| / (atol + rtol·|r_i|); ≤ 1 passes */
    int64_t worst_index;
    double max_abs_err;
    int64_t n_bad;          /* elements over budget */
    int64_t n_nonfinite;    /* NaN/Inf in the result where the reference is finite */
    double rtol, atol;
} qs_check_stats;

/* Compare n floats; prints one line "what: … worst X% of budget" (and the first few
 * offending elements on failure). Returns true when every element passes. */
bool qs_check_close(const char *what, const float *got, const float *ref, int64_t n, qs_tol tol,
                    qs_check_stats *stats);
/* Shorthand: qs_check_close with qs_tol_fp32(K, -1). */
bool qs_check_fp32(const char *what, const float *got, const float *ref, int64_t n, double K);
/* Exact comparison (integers, max pooling, ReLU, copies). */
bool qs_check_equal_f32(const char *what, const float *got, const float *ref, int64_t n);

double qs_max_abs(const float *x, int64_t n);
/* Largest worst_frac seen by any check in this process (for a final summary line). */
double qs_check_worst_overall(void);

#endif
