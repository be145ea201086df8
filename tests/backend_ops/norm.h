/* tests/backend_ops/norm.h — defines: what the batch-norm op files (ops_norm.c, ops_norm_bf16.c)
 * share: the seeded inputs of the batch-norm rows (v = {input set, rows, C, relu}) and the
 * constants of every call. */
#ifndef QSYNC_TESTS_BACKEND_OPS_NORM_H
#define QSYNC_TESTS_BACKEND_OPS_NORM_H

#include "bo.h"

#define BN_MOMENTUM 0.1f
#define BN_EPS 1e-5f

/* Host inputs of a batch-norm row: x (rows, C) with an offset mean (input sets 5 and 6: far
 * from 0 relative to their spread), gamma, beta, dy, running statistics and an accumulation base. */
typedef struct bn_data {
    int64_t rows, C, n;
    float *x, *gamma, *beta, *dy, *rm, *rv, *base;
} bn_data;
bn_data bn_draw(bo_case *c);

#endif
