/* src/parallel/batch_balance.c — speed measurement for dynamic batching (see batch_balance.h). */
#include "parallel/batch_balance.h"

#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "parallel/batch_split.h"

qs_status qs_batch_balance_init(qs_batch_balance *b, int world, int rank, int64_t global, int every) {
    memset(b, 0, sizeof *b);
    if (every < 2) return QS_FAIL(QS_ERR_INVALID_ARG, "dynamic batching needs windows of at least 2 steps (got %d)", every);
    b->window = malloc((size_t)every * sizeof *b->window);
    if (!b->window) return QS_FAIL(QS_ERR_OOM, "out of memory for the dynamic-batching window");
    b->world = world;
    b->rank = rank;
    b->global = global;
    b->every = every;
    b->skip = QS_BATCH_BALANCE_SKIP;
    return QS_OK;
}

void qs_batch_balance_free(qs_batch_balance *b) {
    free(b->window);
    memset(b, 0, sizeof *b);
}

void qs_batch_balance_record(qs_batch_balance *b, double compute_ms) {
    if (b->skip > 0) {
        b->skip--;
        return;
    }
    if (b->n < b->every) b->window[b->n++] = compute_ms;
}

bool qs_batch_balance_due(const qs_batch_balance *b) { return b->every > 0 && b->n == b->every; }

void qs_batch_balance_restart(qs_batch_balance *b) {
    b->n = 0;
    b->skip = QS_BATCH_BALANCE_SKIP;
}

qs_status qs_batch_balance_propose(qs_batch_balance *b, qs_comm *comm, double timeout_s, const int64_t *cur,
                                   int64_t *next, double *speed) {
    double median = qs_median_inplace(b->window, b->n);
    b->n = 0;
    double *v = calloc((size_t)b->world, sizeof *v);
    if (!v) return QS_FAIL(QS_ERR_OOM, "out of memory for the dynamic-batching speeds");
    v[b->rank] = median > 0 ? (double)cur[b->rank] / median : 0;
    qs_status st = b->world > 1 ? qs_comm_allreduce_sum_f64(comm, v, b->world, timeout_s) : QS_OK;
    if (st == QS_OK) st = qs_batch_split_proportional(v, b->world, b->global, next);
    if (st == QS_OK && speed) memcpy(speed, v, (size_t)b->world * sizeof *v);
    free(v);
    return st;
}
