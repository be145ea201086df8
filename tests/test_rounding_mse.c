/* tests/test_rounding_mse.c — the indicator's measured rounding errors (src/plan/rounding_mse.h)
 * against closed forms: INT8 (absolute step amax/127) and BF16 (relative step 2⁻⁸) with
 * round-to-nearest on uniform data, stochastic rounding's doubled variance, and no error for
 * FP32 or an empty tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "plan/rounding_mse.h"
#include "qsync/rng.h"

#define N ((int64_t)1 << 21) /* elements of the test tensor */

/* n values uniform on [lo, hi) from seed; returns max |x|. */
static double fill_uniform(float *x, int64_t n, uint64_t seed, double lo, double hi) {
    qs_rng r;
    qs_rng_init(&r, seed, 0);
    double amax = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(lo + (hi - lo) * qs_rng_uniform(&r));
        if (fabs(x[i]) > amax) amax = fabs(x[i]);
    }
    return amax;
}

/* got within k standard errors of want, the per-element squared error having coefficient of
 * variation cv (so the mean over N has relative standard error cv/√N). */
static void within(double got, double want, double cv, const char *what) {
    double bound = 6.0 * cv / sqrt((double)N) * want;
    if (!(fabs(got - want) <= bound)) fail_msg("%s: %.7g, closed form %.7g (bound ±%.3g)", what, got, want, bound);
}

/* INT8 on uniform [-1, 1): step s = amax/127; RNE error uniform on [−s/2, s/2] → s²/12 (e² has
 * CV 2/√5 ≈ 0.89); SR error of a value at fraction f of a step has variance f(1−f)s², mean
 * s²/6 over uniform f (CV of the drawn e² ≈ 1.3). */
static void test_int8(void **state) {
    (void)state;
    float *x = malloc((size_t)N * sizeof *x);
    assert_non_null(x);
    double amax = fill_uniform(x, N, 11, -1, 1), s = amax / 127.0, mse;
    qs_rounding_scratch sc = {0};
    assert_int_equal(qs_rounding_mse(QS_PREC_INT8, NULL, x, N, amax, &sc, &mse), QS_OK);
    within(mse, s * s / 12.0, 0.9, "int8 RNE");
    qs_sr sr = {.key = 5, .counter = 1, .offset = 0};
    assert_int_equal(qs_rounding_mse(QS_PREC_INT8, &sr, x, N, amax, &sc, &mse), QS_OK);
    within(mse, s * s / 6.0, 1.3, "int8 SR");
    assert_int_equal(qs_rounding_mse(QS_PREC_FP32, NULL, x, N, amax, &sc, &mse), QS_OK);
    assert_true(mse == 0);
    assert_int_equal(qs_rounding_mse(QS_PREC_BF16, NULL, x, 0, amax, &sc, &mse), QS_OK);
    assert_true(mse == 0);
    qs_rounding_scratch_free(&sc);
    free(x);
}

/* BF16 RNE on uniform [1, 2): the step is 2⁻⁷ throughout (8 significant bits), error uniform
 * on half a step each side → 2⁻¹⁴/12 (CV 0.89). */
static void test_bf16(void **state) {
    (void)state;
    float *x = malloc((size_t)N * sizeof *x);
    assert_non_null(x);
    double amax = fill_uniform(x, N, 12, 1, 2), mse;
    qs_rounding_scratch sc = {0};
    assert_int_equal(qs_rounding_mse(QS_PREC_BF16, NULL, x, N, amax, &sc, &mse), QS_OK);
    within(mse, ldexp(1.0, -14) / 12.0, 0.9, "bf16 RNE");
    qs_rounding_scratch_free(&sc);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int8),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
