/* tests/backend_ops/facts.h — defines: the ordinary cmocka tests of test_backend_ops.c that are
 * not op-against-reference comparisons (facts_*.c): the device basics, refusals, argument-error
 * parity, error reporting of non-finite input and plan lifetimes, run on every backend under
 * test (g_dut) with the harness's teardown. */
#ifndef QSYNC_TESTS_BACKEND_OPS_FACTS_H
#define QSYNC_TESTS_BACKEND_OPS_FACTS_H

#include <stddef.h>
#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

extern const struct CMUnitTest bo_facts[];
extern const size_t bo_nfacts;

#endif
