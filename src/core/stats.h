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

#endif
