/* src/parallel/batch_split.c — splitting the global batch over the ranks (see batch_split.h). */
#include "parallel/batch_split.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void qs_batch_split_even(int world, int64_t global, int64_t *split) {
    for (int r = 0; r < world; r++) split[r] = global / world + (r < global % world ? 1 : 0);
}

qs_status qs_batch_split_parse(const char *text, int world, int64_t global, int64_t *split) {
    const char *p = text;
    int64_t sum = 0;
    for (int r = 0; r < world; r++) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1)
            return QS_FAIL(QS_ERR_INVALID_ARG, "--batch-split \"%s\": entry %d is not a positive integer (give one "
                           "local batch per rank, comma-separated, summing to --batch %lld)", text, r, (long long)global);
        split[r] = v;
        sum += v;
        if (r + 1 < world && *end != ',')
            return QS_FAIL(QS_ERR_INVALID_ARG, "--batch-split \"%s\" has %d entr%s but the job has %d ranks", text, r + 1,
                           r ? "ies" : "y", world);
        p = end + 1;
        if (r + 1 == world && *end)
            return QS_FAIL(QS_ERR_INVALID_ARG, "--batch-split \"%s\" has more entries than the job's %d ranks", text,
                           world);
    }
    if (sum != global)
        return QS_FAIL(QS_ERR_INVALID_ARG, "--batch-split \"%s\" sums to %lld, but --batch (the global batch) is %lld",
                       text, (long long)sum, (long long)global);
    return QS_OK;
}

qs_status qs_batch_split_proportional(const double *speed, int world, int64_t global, int64_t *split) {
    double total = 0;
    for (int r = 0; r < world; r++) {
        if (!(speed[r] > 0) || !isfinite(speed[r]))
            return QS_FAIL(QS_ERR_INVALID_ARG, "rank %d's measured speed %g samples/ms is not positive", r, speed[r]);
        total += speed[r];
    }
    /* each rank gets one sample first, the rest in proportion (largest remainders round up) */
    int64_t rest = global - world, given = 0;
    double *frac = malloc((size_t)world * sizeof *frac);
    if (!frac) return QS_FAIL(QS_ERR_OOM, "out of memory splitting the batch");
    for (int r = 0; r < world; r++) {
        double share = (double)rest * speed[r] / total;
        split[r] = 1 + (int64_t)floor(share);
        frac[r] = share - floor(share);
        given += split[r];
    }
    for (; given < global; given++) { /* lowest rank wins ties: the same answer on every rank */
        int best = 0;
        for (int r = 1; r < world; r++)
            if (frac[r] > frac[best]) best = r;
        split[best]++;
        frac[best] = -1;
    }
    free(frac);
    return QS_OK;
}

int64_t qs_batch_split_offset(const int64_t *split, int rank) {
    int64_t off = 0;
    for (int r = 0; r < rank; r++) off += split[r];
    return off;
}

bool qs_batch_split_changed(const int64_t *cur, const int64_t *next, int world, double rel) {
    for (int r = 0; r < world; r++) {
        double d = fabs((double)(next[r] - cur[r]));
        if (d > 1 && d > rel * (double)cur[r]) return true;
    }
    return false;
}

void qs_batch_split_format(const int64_t *split, int world, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int r = 0; r < world && n < cap; r++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", r ? "," : "", (long long)split[r]);
}
