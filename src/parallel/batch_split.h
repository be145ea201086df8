/* src/parallel/batch_split.h — defines: how a global batch of B samples is split over the ranks
 * of a data-parallel job: evenly (the default), as given (--batch-split 40,24), or in
 * proportion to each rank's measured speed (dynamic batching, the baseline that gives a
 * slower worker fewer samples). Rank r takes positions [offset_r, offset_r + b_r) of every
 * global batch, offset_r = b_0 + ... + b_{r-1}; every b_r ≥ 1 and Σ b_r = B. */
#ifndef QSYNC_PARALLEL_BATCH_SPLIT_H
#define QSYNC_PARALLEL_BATCH_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qsync/status.h"

/* split[world]: B / world each, the first B mod world ranks one more. */
void qs_batch_split_even(int world, int64_t global, int64_t *split);

/* Parse "b0,b1,..." (one positive integer per rank, summing to `global`) into split[world];
 * QS_ERR_INVALID_ARG saying what is wrong otherwise. */
qs_status qs_batch_split_parse(const char *text, int world, int64_t global, int64_t *split);

/* split[r] ∝ speed[r] (samples per ms, > 0), rounded by largest remainder so that Σ = global,
 * each ≥ 1 (global ≥ world). QS_ERR_INVALID_ARG for a speed that is not positive and finite. */
qs_status qs_batch_split_proportional(const double *speed, int world, int64_t global, int64_t *split);

/* First position of rank `rank`'s slice: Σ_{r < rank} split[r]. */
int64_t qs_batch_split_offset(const int64_t *split, int rank);

/* Whether `next` differs from `cur` enough to be worth re-planning the ranks' batches: some
 * rank's batch changes by more than max(1 sample, rel × its current batch). */
bool qs_batch_split_changed(const int64_t *cur, const int64_t *next, int world, double rel);

/* "40,24" into buf. */
void qs_batch_split_format(const int64_t *split, int world, char *buf, size_t cap);

#endif
