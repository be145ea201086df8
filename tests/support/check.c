/* tests/support/check.c — tolerance comparisons (budget derivation in check.h). */
#include "check.h"

#include <math.h>
#include <stdio.h>

static double worst_overall = 0.0;

double qs_check_worst_overall(void) { return worst_overall; }

qs_tol qs_tol_fp32(double K, double scale) {
    qs_tol t;
    t.rtol = QS_TOL_C * QS_TOL_U * sqrt(K > 1 ? K : 1);
    t.atol = scale < 0 ? -1.0 : t.rtol * scale;
    return t;
}

double qs_max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

bool qs_check_close(const char *what, const float *got, const float *ref, int64_t n, qs_tol tol,
                    qs_check_stats *stats) {
    qs_check_stats s = {0};
    s.rtol = tol.rtol;
    s.atol = tol.atol < 0 ? tol.rtol * qs_max_abs(ref, n) : tol.atol;
    s.worst_index = -1;
    int shown = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = got[i], r = ref[i];
        double err = fabs(a - r), budget = s.atol + s.rtol * fabs(r);
        double frac;
        if (!isfinite(a) || !isfinite(r)) {
            if (isfinite(r) || !(a == r || (isnan(a) && isnan(r)))) s.n_nonfinite++;
            frac = (isfinite(r) || !(a == r || (isnan(a) && isnan(r)))) ? INFINITY : 0.0;
            err = frac;
        } else {
            frac = budget > 0 ? err / budget : (err > 0 ? INFINITY : 0.0);
        }
        if (err > s.max_abs_err) s.max_abs_err = err;
        if (s.worst_index < 0 || frac > s.worst_frac) {
            s.worst_frac = frac;
            s.worst_index = i;
        }
        if (frac > 1.0) {
            s.n_bad++;
            if (shown++ < 5)
                fprintf(stderr, "    %s[%lld]: got %.9g, ref %.9g, |err| %.3g > budget %.3g\n", what, (long long)i, a,
                        r, err, budget);
        }
    }
    bool ok = s.n_bad == 0 && s.n_nonfinite == 0;
    if (s.worst_frac > worst_overall) worst_overall = s.worst_frac;
    long long wi = (long long)s.worst_index;
    printf("  %-4s %-34s n=%-5lld rtol=%.2e atol=%.2e max|err|=%.2e  worst %7.2f%% of budget", ok ? "ok" : "FAIL",
           what, (long long)n, s.rtol, s.atol, s.max_abs_err, 100.0 * s.worst_frac);
    if (wi >= 0) printf(" (i=%lld got %.8g ref %.8g)", wi, (double)got[wi], (double)ref[wi]);
    if (s.n_bad) printf(" — %lld elements over budget", (long long)s.n_bad);
    if (s.n_nonfinite) printf(" — %lld non-finite", (long long)s.n_nonfinite);
    printf("\n");
    fflush(stdout);
    if (stats) *stats = s;
    return ok;
}

bool qs_check_fp32(const char *what, const float *got, const float *ref, int64_t n, double K) {
    return qs_check_close(what, got, ref, n, qs_tol_fp32(K, -1), NULL);
}

bool qs_check_equal_f32(const char *what, const float *got, const float *ref, int64_t n) {
    qs_tol exact = {0.0, 0.0};
    return qs_check_close(what, got, ref, n, exact, NULL);
}
