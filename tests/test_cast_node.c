/* tests/test_cast_node.c — casts are graph nodes: Linear → Cast(bf16) → Cast(f32) → loss.
 * Forward: the logits equal the Linear output rounded to bf16 (round-to-nearest-even),
 * the bf16 node stores 2 bytes per element, and its time lands in the "cast" category, not in
 * "forward". Backward: the gradient reaching the Linear is the loss gradient rounded to bf16
 * on its way back through the casts, and the casts' backward is also timed as "cast". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "graph_helpers.h"

static qs_backend *g_be;

static int setup(void **state) { return qs_test_backend_create(1, &g_be); }
static int teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    return 0;
}

/* Reference float → bf16 → float with round-to-nearest-even (finite inputs). */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void test_cast_round_trip_node(void **state) {
    const int64_t B = 6, F = 9, C = 5;
    qs_model *m;
    ASSERT_OK(qs_model_create("castnet", 1, 1, F, C, &m));
    int fl = qs_test_add(m, QS_NODE_FLATTEN, "flatten", 0, -1, qs_test_no_cfg());
    int fc = qs_test_add(m, QS_NODE_LINEAR, "fc", fl, -1, CFG(.linear = {.out_features = C, .bias = true}));
    int c16 = qs_test_add(m, QS_NODE_CAST, "to_bf16", fc, -1, CFG(.cast = {.to = QS_BF16}));
    int c32 = qs_test_add(m, QS_NODE_CAST, "to_f32", c16, -1, CFG(.cast = {.to = QS_F32}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", c32, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    assert_int_equal(m->nodes[c16].out_dtype, QS_BF16);
    ASSERT_OK(qs_model_setup(m, g_be, B, 3));
    float x[6 * 9];
    int32_t y[6];
    for (int i = 0; i < B * F; i++) x[i] = (float)((i * 37) % 23) / 7.0f - 1.5f;
    for (int i = 0; i < B; i++) y[i] = i % C;
    ASSERT_OK(qs_model_forward(m, x, y, true));
    float *lin = qs_test_download(m, m->nodes[fc].y, B * C);
    float *logits = qs_test_download(m, m->nodes[c32].y, B * C);
    for (int i = 0; i < B * C; i++) assert_true(logits[i] == bf16_round(lin[i]));
    assert_int_equal(m->nodes[c16].time[QS_CAT_CAST].calls, 1);
    assert_int_equal(m->nodes[c16].time[QS_CAT_FORWARD].calls, 0);
    ASSERT_OK(qs_model_backward(m, 1.0f));
    float *dlogits = qs_test_download(m, m->nodes[c32].dy, B * C);
    float *dlin = qs_test_download(m, m->nodes[fc].dy, B * C);
    for (int i = 0; i < B * C; i++) assert_true(dlin[i] == bf16_round(dlogits[i]));
    assert_int_equal(m->nodes[c16].time[QS_CAT_CAST].calls, 2);
    assert_int_equal(m->nodes[c16].time[QS_CAT_BACKWARD_DATA].calls, 0);
    free(lin);
    free(logits);
    free(dlogits);
    free(dlin);
    qs_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cast_round_trip_node)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
