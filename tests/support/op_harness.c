/* tests/support/op_harness.c — see op_harness.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "graph_helpers.h"
#include "op_harness.h"
#include "qsync/rng.h"

qs_backend *qs_th_be;

#define QS_TH_MAX_ALLOCS 4096
static void *qs_th_allocs[QS_TH_MAX_ALLOCS];
static int qs_th_nallocs;
static qs_rng qs_th_rng;

int qs_th_group_setup(void **state) { return qs_test_backend_create(2, &qs_th_be); }
int qs_th_group_teardown(void **state) {
    qs_test_backend_destroy(&qs_th_be);
    return 0;
}
int qs_th_teardown(void **state) {
    for (int i = 0; i < qs_th_nallocs; i++) free(qs_th_allocs[i]);
    qs_th_nallocs = 0;
    return 0;
}

void *qs_th_alloc(size_t bytes) {
    assert_true(qs_th_nallocs < QS_TH_MAX_ALLOCS);
    void *p = calloc(1, bytes ? bytes : 1);
    assert_non_null(p);
    qs_th_allocs[qs_th_nallocs++] = p;
    return p;
}
float *qs_th_floats(int64_t n) { return qs_th_alloc((size_t)n * sizeof(float)); }
double *qs_th_doubles(int64_t n) { return qs_th_alloc((size_t)n * sizeof(double)); }

void qs_th_seed(uint64_t key) { qs_rng_init(&qs_th_rng, key, 0); }

float *qs_th_uniform(int64_t n, float lo, float hi) {
    float *p = qs_th_floats(n);
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * qs_rng_uniform(&qs_th_rng);
    return p;
}

qs_th_qmat qs_th_quantize(const float *x, int64_t rows, int64_t cols, qs_dtype dt, bool per_row, bool stochastic,
                          uint64_t sr_key) {
    qs_th_qmat q;
    void *data = qs_th_alloc((size_t)(rows * cols) * qs_dtype_size(dt) + 64);
    float *scales = qs_th_floats(rows);
    qs_sr sr = {.key = sr_key, .counter = 1, .offset = 0};
    ASSERT_OK(OPS->quantize(qs_th_be, STREAM, rows, cols, x, NULL, dt, data, scales, per_row, stochastic ? &sr : NULL, NULL, NULL));
    bool scaled = dt == QS_S8 || dt == QS_F8E4M3 || dt == QS_F8E5M2;
    q.op = (qs_operand){.data = data, .dt = dt, .scale = scaled ? scales : NULL, .per_row = per_row};
    q.deq = qs_th_floats(rows * cols);
    ASSERT_OK(OPS->dequantize(qs_th_be, STREAM, rows, cols, &q.op, q.deq));
    return q;
}
