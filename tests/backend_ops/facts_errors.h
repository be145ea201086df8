/* tests/backend_ops/facts_errors.h — defines: the error-behaviour facts of test_backend_ops
 * (facts_errors.c): non-finite input to INT8/FP8 quantize reported (by the call or the next
 * stream_sync) and cleared, and host-side argument checks giving the reference's status. */
#ifndef QSYNC_TESTS_BACKEND_OPS_FACTS_ERRORS_H
#define QSYNC_TESTS_BACKEND_OPS_FACTS_ERRORS_H

void test_quantize_nonfinite(void **state);
void test_quantize_delayed_nonfinite(void **state);
void test_arg_errors(void **state);
void test_arg_errors_transformer(void **state);

#endif
