/* src/core/stats.h — defines: lists of timing samples and their order statistics, a least-squares
 * line, and rank correlation (Spearman's rho with average ranks for ties). */
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

/* The 1-based ranks of v[0..n) into ranks[0..n), ascending, tied values sharing the average of
 * the ranks they span ({10, 20, 20, 30} → {1, 2.5, 2.5, 4}). QS_ERR_INVALID_ARG for a NaN value
 * (it has no rank), QS_ERR_OOM when the scratch cannot be allocated. */
qs_status qs_ranks_average(const double *v, int64_t n, double *ranks);

/* Spearman's rank correlation of the pairs (x[i], y[i]), i < n: Pearson's correlation of their
 * average ranks, which treats ties exactly. *rho is in [-1, 1], or NaN where it is undefined:
 * fewer than 2 pairs, or all of x (or all of y) equal. Errors as qs_ranks_average. */
qs_status qs_spearman(const double *x, const double *y, int64_t n, double *rho);

#endif
