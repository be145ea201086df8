/* src/core/stats.h — defines: lists of timing samples and their order statistics. */
#ifndef QSYNC_CORE_STATS_H
#define QSYNC_CORE_STATS_H

#include <stdint.h>
#include "qsync/status.h"

/* A growing list of samples (zero-initialise; free with qs_samples_free). */
typedef struct qs_samples {
    double *v;
    int64_t n, cap;
} qs_samples;

/* Append x (QS_ERR_OOM, naming `what`, when the list cannot grow). */
qs_status qs_samples_push(qs_samples *s, double x, const char *what);
void qs_samples_free(qs_samples *s);

/* Median of v[0..n) (the mean of the middle two for even n; 0 for n = 0). Sorts v in place. */
double qs_median_inplace(double *v, int64_t n);

/* Least-squares fit y ≈ alpha + beta·x over n points. With fewer than 2 distinct x, or when
 * the intercept would come out negative (a cost below zero for small x), the line through the
 * origin is fitted instead (alpha = 0). n = 0 gives 0, 0. */
void qs_linear_fit(const double *x, const double *y, int64_t n, double *alpha, double *beta);

#endif
