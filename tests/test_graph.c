/* tests/test_graph.c — graph driver behaviours: a BatchNorm directly on the input (whose input
 * needs no gradient) still gets its parameter gradients, since its fused backward runs for
 * them alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "graph_helpers.h"

static qs_backend *g_be;

static int setup(void **state) { return qs_test_backend_create(1, &g_be); }
static int teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    return 0;
}

static void test_batchnorm_on_input_gets_param_grads(void **state) {
    const int64_t B = 4, H = 3, W = 3, C = 2, K = 3;
    qs_model *m;
    ASSERT_OK(qs_model_create("bnnet", H, W, C, K, &m));
    int bn = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn", 0, -1, qs_test_no_cfg());
    int fl = qs_test_add(m, QS_NODE_FLATTEN, "flatten", bn, -1, qs_test_no_cfg());
    int fc = qs_test_add(m, QS_NODE_LINEAR, "fc", fl, -1, CFG(.linear = {.out_features = K, .bias = true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", fc, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    ASSERT_OK(qs_model_setup(m, g_be, B, 5));
    assert_false(m->nodes[0].needs_grad);
    float x[4 * 3 * 3 * 2];
    int32_t y[4] = {0, 1, 2, 1};
    for (int i = 0; i < B * H * W * C; i++) x[i] = sinf((float)i);
    ASSERT_OK(qs_model_forward(m, x, y, true));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    float *dgamma = qs_test_download(m, qs_model_grad_ptr(m, m->nodes[bn].param[0]), C);
    float *dbeta = qs_test_download(m, qs_model_grad_ptr(m, m->nodes[bn].param[1]), C);
    for (int c = 0; c < C; c++) assert_true(dgamma[c] != 0.0f && dbeta[c] != 0.0f && isfinite(dgamma[c]));
    assert_int_equal(m->nodes[bn].time[QS_CAT_BACKWARD_DATA].calls, 1);
    free(dgamma);
    free(dbeta);
    qs_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_batchnorm_on_input_gets_param_grads)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
