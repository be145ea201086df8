/* src/core/stats.c — order statistics over timing samples. */
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
