/* src/cpu/cpu_reduce.c — defines: deterministic per-channel (column) sums over (rows, C) data
 * (qs_cpu_colsums, shared with cpu_norm.c) and the column_sums op.
 *
 * Rows are split into a fixed number of chunks that depends only on `rows` (not on the
 * thread count); each chunk sums into its own double row of partials (vectorised over C),
 * then the partials are added in chunk order. No atomics, so results are bitwise stable. */
#include "cpu/cpu_backend.h"

#include <stdlib.h>
#include <string.h>

#define QS_REDUCE_MIN_ROWS 64   /* rows per chunk at least */
#define QS_REDUCE_MAX_CHUNKS 32

/* Contract: cpu_backend.h. */
qs_status qs_cpu_colsums(int64_t rows, int64_t C, const float *a, const float *mask, const float *b,
                         const double *sa, const double *sb, double *sum1, double *sum2) {
    if (C <= 0) return QS_OK;
    int64_t nchunk = (rows + QS_REDUCE_MIN_ROWS - 1) / QS_REDUCE_MIN_ROWS;
    if (nchunk > QS_REDUCE_MAX_CHUNKS) nchunk = QS_REDUCE_MAX_CHUNKS;
    if (nchunk < 1) nchunk = 1;
    const int nout = (sum1 ? 1 : 0) + (sum2 ? 1 : 0);
    if (nout == 0) return QS_OK;
    double *part = calloc((size_t)(nchunk * nout * C), sizeof(double));
    double *zero = calloc((size_t)C, sizeof(double));
    if (!part || !zero) {
        free(part);
        free(zero);
        return QS_FAIL(QS_ERR_OOM, "per-channel reduction: out of memory for %lld partial sums",
                       (long long)(nchunk * nout * C));
    }
    const double *ssa = sa ? sa : zero, *ssb = sb ? sb : zero;
    const float *bb = b ? b : a;
    const double *bshift = b ? ssb : ssa;
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < nchunk; ch++) {
        int64_t r0 = rows * ch / nchunk, r1 = rows * (ch + 1) / nchunk;
        double *p1 = sum1 ? part + ch * nout * C : NULL;
        double *p2 = sum2 ? part + ch * nout * C + (sum1 ? C : 0) : NULL;
        for (int64_t r = r0; r < r1; r++) {
            const float *ar = a + r * C, *br = bb + r * C, *mr = mask ? mask + r * C : NULL;
            if (mr) { /* masked by a multiply with [mask > 0], faster than a select (docs/BENCHMARKS.md) */
                if (p1)
#pragma omp simd
                    for (int64_t c = 0; c < C; c++) p1[c] += (double)(ar[c] * (float)(mr[c] > 0.0f));
                if (p2)
#pragma omp simd
                    for (int64_t c = 0; c < C; c++)
                        p2[c] += ((double)(ar[c] * (float)(mr[c] > 0.0f)) - ssa[c]) * ((double)br[c] - bshift[c]);
                continue;
            }
            if (p1)
#pragma omp simd
                for (int64_t c = 0; c < C; c++) p1[c] += (double)ar[c];
            if (p2)
#pragma omp simd
                for (int64_t c = 0; c < C; c++) p2[c] += ((double)ar[c] - ssa[c]) * ((double)br[c] - bshift[c]);
        }
    }
    if (sum1) memset(sum1, 0, (size_t)C * sizeof(double));
    if (sum2) memset(sum2, 0, (size_t)C * sizeof(double));
    for (int64_t ch = 0; ch < nchunk; ch++) {
        const double *p = part + ch * nout * C;
        if (sum1)
            for (int64_t c = 0; c < C; c++) sum1[c] += p[c];
        if (sum2)
            for (int64_t c = 0; c < C; c++) sum2[c] += p[(sum1 ? C : 0) + c];
    }
    free(part);
    free(zero);
    return QS_OK;
}

/* sums[c] = Σ_r x[r,c] for x (rows, cols), in double through qs_cpu_colsums, rounded once. */
qs_status qs_cpu_column_sums(qs_backend *be, qs_stream *s, int64_t rows, int64_t cols, const float *x, float *sums) {
    if (rows < 0 || cols < 1 || !sums || (rows > 0 && !x))
        return QS_FAIL(QS_ERR_INVALID_ARG, "column_sums: bad shape (%lld, %lld) or NULL pointer", (long long)rows,
                       (long long)cols);
    double *acc = NULL;
    QS_TRY(qs_cpu_scratch(qs_cpu_be(be), (size_t)cols * sizeof(double), (void **)&acc));
    QS_TRY(qs_cpu_colsums(rows, cols, x, NULL, NULL, NULL, NULL, acc, NULL));
    for (int64_t c = 0; c < cols; c++) sums[c] = (float)acc[c];
    return QS_OK;
}
