/* tests/support/graph_helpers.c — backend and graph-building helpers of the tests
 * (graph_helpers.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_helpers.h"
#include "backends/backends.h"

int qs_test_backend_create(int threads, qs_backend **out) {
    if (qs_backend_cpu_create(threads, out) != QS_OK) {
        fprintf(stderr, "cannot create the CPU backend: %s\n", qs_last_error());
        return -1;
    }
    return 0;
}

void qs_test_backend_destroy(qs_backend **be) {
    if (*be) (*be)->ops->destroy(*be);
    *be = NULL;
}

int qs_test_add(qs_model *m, qs_node_kind kind, const char *name, int in0, int in1, qs_node_cfg cfg) {
    int inputs[2] = {in0, in1}, idx = -1;
    ASSERT_OK(qs_model_add(m, kind, name, inputs, in1 >= 0 ? 2 : 1, &cfg, &idx));
    return idx;
}

qs_node_cfg qs_test_no_cfg(void) {
    qs_node_cfg c;
    memset(&c, 0, sizeof c);
    return c;
}

float *qs_test_download(qs_model *m, const void *dev, int64_t n) {
    float *h = malloc((size_t)n * sizeof(float) + 1);
    assert_non_null(h);
    ASSERT_OK(m->be->ops->copy_d2h(m->be, m->stream, h, dev, (size_t)n * sizeof(float)));
    ASSERT_OK(m->be->ops->stream_sync(m->be, m->stream));
    return h;
}
