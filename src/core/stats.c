/* src/core/stats.c — lists of timing samples and their order statistics. */
#include "core/stats.h"

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
