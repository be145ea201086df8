/* tests/support/op_harness.h — defines: the harness of the tests that drive single backend
 * ops on the CPU backend (test_linear_prec.c, test_conv_prec.c): the backend of the cmocka
 * group, zeroed test memory released after every test, a seeded uniform stream, and operands
 * quantized with the backend's own quantize op together with their dequantized values.
 * A file using it includes <cmocka.h> first and registers qs_th_group_setup /
 * qs_th_group_teardown for the group and qs_th_teardown for each test. */
#ifndef QSYNC_TESTS_OP_HARNESS_H
#define QSYNC_TESTS_OP_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

extern qs_backend *qs_th_be;
#define OPS (qs_th_be->ops)
#define STREAM (qs_th_be->ops->default_stream(qs_th_be))

int qs_th_group_setup(void **state);    /* CPU backend with 2 threads */
int qs_th_group_teardown(void **state);
int qs_th_teardown(void **state);       /* frees everything qs_th_alloc gave out */

/* Zeroed memory (fails the test when out of memory), freed by qs_th_teardown. */
void *qs_th_alloc(size_t bytes);
float *qs_th_floats(int64_t n);
double *qs_th_doubles(int64_t n);

/* Restart the uniform stream at Philox key `key`. */
void qs_th_seed(uint64_t key);
/* n values uniform in [lo, hi) from the stream. */
float *qs_th_uniform(int64_t n, float lo, float hi);

/* A (rows, cols) FP32 matrix quantized to dt by the backend (per row when per_row; stochastic
 * rounding with Philox key `sr_key` when stochastic), as an operand, and its dequantized
 * values (what the FP64 references multiply). */
typedef struct qs_th_qmat {
    qs_operand op;
    float *deq;
} qs_th_qmat;
qs_th_qmat qs_th_quantize(const float *x, int64_t rows, int64_t cols, qs_dtype dt, bool per_row, bool stochastic,
                          uint64_t sr_key);

#endif
