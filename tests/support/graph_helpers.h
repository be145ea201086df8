/* tests/support/graph_helpers.h — defines: helpers shared by the tests that drive the CPU
 * backend or build model graphs node by node (test_cpu_ops.c, test_layers_fd.c,
 * test_layers_torch.c, test_optim.c): a status assertion, the CPU backend for cmocka group
 * setups, adding a node and copying backend tensors to the host.
 *
 * Helpers that assert report through cmocka (fail_msg / assert_*), so they may only be called
 * from inside a running cmocka test; a file using ASSERT_OK includes <cmocka.h> first. */
#ifndef QSYNC_TESTS_GRAPH_HELPERS_H
#define QSYNC_TESTS_GRAPH_HELPERS_H

#include <stdint.h>

#include "core/backend.h"
#include "graph/graph.h"
#include "qsync/status.h"

/* Fail the running test unless expr (a qs_status expression) is QS_OK; the message names the
 * expression, the status and qs_last_error(). */
#define ASSERT_OK(expr)                                                                          \
    do {                                                                                         \
        qs_status st_ = (expr);                                                                  \
        if (st_ != QS_OK) fail_msg("%s -> %s: %s", #expr, qs_status_name(st_), qs_last_error()); \
    } while (0)

/* A node configuration literal: CFG(.conv = {...}). */
#define CFG(...) ((qs_node_cfg){__VA_ARGS__})

/* For a cmocka group setup: create the CPU backend with `threads` threads into *out. Returns 0,
 * or -1 after printing the reason to stderr. */
int qs_test_backend_create(int threads, qs_backend **out);
/* For a cmocka group teardown: destroy *be when it is not NULL and set it to NULL. */
void qs_test_backend_destroy(qs_backend **be);

/* Add node `kind` called `name` to m with input in0, and in1 as a second input when in1 >= 0;
 * returns its index (fails the test when qs_model_add fails). */
int qs_test_add(qs_model *m, qs_node_kind kind, const char *name, int in0, int in1, qs_node_cfg cfg);
/* An all-zero node configuration, for node kinds that take none. */
qs_node_cfg qs_test_no_cfg(void);
/* A malloc'ed host copy of n floats at backend address dev of m's backend (copied on m's
 * stream, then synchronised); the caller frees it. */
float *qs_test_download(qs_model *m, const void *dev, int64_t n);

#endif
