/* src/core/stats.h — defines: small order statistics over timing samples. */
#ifndef QSYNC_CORE_STATS_H
#define QSYNC_CORE_STATS_H

#include <stdint.h>

/* Median of v[0..n) (the mean of the middle two for even n; 0 for n = 0). Sorts v in place. */
double qs_median_inplace(double *v, int64_t n);

#endif
