/* src/core/stats.c — lists of timing samples and their order statistics, a least-squares line,
 * rank correlation. */
#include "core/stats.h"

#include <math.h>
#include <stdlib.h>

static int qs_cmp_double_asc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double qs_median_inplace(double *v, int64_t n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, qs_cmp_double_asc);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

qs_status qs_samples_push(qs_samples *s, double x, const char *what) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 256;
        double *t = realloc(s->v, (size_t)cap * sizeof *t);
        if (!t) return QS_FAIL(QS_ERR_OOM, "out of memory recording %s", what);
        s->v = t;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return QS_OK;
}

void qs_samples_free(qs_samples *s) {
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

void qs_linear_fit(const double *x, const double *y, int64_t n, double *alpha, double *beta) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int64_t i = 0; i < n; i++) {
        sx += x[i];
        sy += y[i];
        sxx += x[i] * x[i];
        sxy += x[i] * y[i];
    }
    *alpha = 0;
    *beta = 0;
    if (n == 0) return;
    double d = (double)n * sxx - sx * sx;
    if (n >= 2 && d > 1e-12 * sxx * (double)n) {
        *beta = ((double)n * sxy - sx * sy) / d;
        *alpha = (sy - *beta * sx) / (double)n;
        if (*alpha >= 0) return;
    }
    *alpha = 0;
    *beta = sxx > 0 ? sxy / sxx : 0; /* through the origin */
}

/* A value and where it came from, for ranking. */
typedef struct qs_ranked {
    double v;
    int64_t i;
} qs_ranked;

static int qs_cmp_ranked_asc(const void *a, const void *b) {
    const qs_ranked *x = a, *y = b;
    if (x->v != y->v) return (x->v > y->v) - (x->v < y->v);
    return (x->i > y->i) - (x->i < y->i); /* a total order: qsort is not stable */
}

qs_status qs_ranks_average(const double *v, int64_t n, double *ranks) {
    if (n <= 0) return QS_OK;
    for (int64_t i = 0; i < n; i++)
        if (isnan(v[i])) return QS_FAIL(QS_ERR_INVALID_ARG, "ranking: value %lld is NaN", (long long)i);
    qs_ranked *s = malloc((size_t)n * sizeof *s);
    if (!s) return QS_FAIL(QS_ERR_OOM, "out of memory ranking %lld values", (long long)n);
    for (int64_t i = 0; i < n; i++) s[i] = (qs_ranked){v[i], i};
    qsort(s, (size_t)n, sizeof *s, qs_cmp_ranked_asc);
    for (int64_t lo = 0, hi; lo < n; lo = hi) {
        for (hi = lo + 1; hi < n && s[hi].v == s[lo].v; hi++) {}
        const double avg = 0.5 * (double)(lo + 1 + hi); /* mean of the ranks lo+1 .. hi */
        for (int64_t k = lo; k < hi; k++) ranks[s[k].i] = avg;
    }
    free(s);
    return QS_OK;
}

/* Pearson's correlation of a and b over n values; NaN when either has no spread. */
static double qs_pearson(const double *a, const double *b, int64_t n) {
    double ma = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) ma += a[i], mb += b[i];
    ma /= (double)n;
    mb /= (double)n;
    double sab = 0, saa = 0, sbb = 0;
    for (int64_t i = 0; i < n; i++) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    if (!(saa > 0) || !(sbb > 0)) return NAN;
    double r = sab / sqrt(saa * sbb);
    return r > 1 ? 1 : r < -1 ? -1 : r;
}

qs_status qs_spearman(const double *x, const double *y, int64_t n, double *rho) {
    *rho = NAN;
    if (n < 2) return QS_OK;
    double *rx = malloc((size_t)n * sizeof *rx), *ry = malloc((size_t)n * sizeof *ry);
    qs_status st = rx && ry ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for a rank correlation of %lld pairs",
                                              (long long)n);
    if (st == QS_OK) st = qs_ranks_average(x, n, rx);
    if (st == QS_OK) st = qs_ranks_average(y, n, ry);
    if (st == QS_OK) *rho = qs_pearson(rx, ry, n);
    free(rx);
    free(ry);
    return st;
}
