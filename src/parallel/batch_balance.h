/* src/parallel/batch_balance.h — defines: dynamic batching's measurement: each rank records the
 * compute time of its steps (step time minus the time it waited for the gradient all-reduce);
 * after a window of steps the ranks exchange their speeds (local batch / median compute time)
 * and every rank computes the same new split of the global batch, in proportion to speed
 * (parallel/batch_split.h). The first steps after a change of batch size are skipped (the new
 * shapes' first runs are slower). */
#ifndef QSYNC_PARALLEL_BATCH_BALANCE_H
#define QSYNC_PARALLEL_BATCH_BALANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "parallel/comm.h"
#include "qsync/status.h"

#define QS_BATCH_BALANCE_SKIP 2   /* steps ignored after a start or a change of split */

typedef struct qs_batch_balance {
    int world, rank;
    int64_t global;
    int every;          /* steps measured per window */
    double *window;     /* this rank's compute ms per step */
    int n, skip;
} qs_batch_balance;

/* every ≥ 2 steps per window. */
qs_status qs_batch_balance_init(qs_batch_balance *b, int world, int rank, int64_t global, int every);
void qs_batch_balance_free(qs_batch_balance *b);
/* Record one step's compute time (ms). */
void qs_batch_balance_record(qs_batch_balance *b, double compute_ms);
/* Whether a window is complete (then call qs_batch_balance_propose on every rank). */
bool qs_batch_balance_due(const qs_batch_balance *b);
/* Collective: from the window (this rank ran cur[rank] samples per step), the split in
 * proportion to the ranks' speeds into next[world] and the speeds (samples/ms) into
 * speed[world] (may be NULL); starts a new window. */
qs_status qs_batch_balance_propose(qs_batch_balance *b, qs_comm *comm, double timeout_s, const int64_t *cur,
                                   int64_t *next, double *speed);
/* The split changed: skip the next steps' times. */
void qs_batch_balance_restart(qs_batch_balance *b);

#endif
