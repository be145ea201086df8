/* tests/support/dist_run.h — run qsync (env QS_BIN) or the test program itself on N ranks
 * under the real launcher and compare the checkpoints of two runs; shared by the data-parallel
 * suites (tests/test_dist.c on CPUs, tests/test_cuda_dist.c on one GPU, tests/test_comm.c).
 * Call qs_test_mpi_env() once first. */
#ifndef QSYNC_TESTS_DIST_RUN_H
#define QSYNC_TESTS_DIST_RUN_H

#include <stddef.h>

/* The command line `mpirun -np N --oversubscribe -x LD_LIBRARY_PATH QS_BIN args` (N = 0: no
 * launcher) into cmd. */
void qs_test_ranks_command(int n, const char *args, char *cmd, size_t cap);
/* Run QS_BIN args on N ranks; returns the exit code and fails the current test unless it
 * equals want (-2: any non-zero code) and, when needle is not NULL, the output holds needle. */
int qs_test_run_ranks(int n, const char *args, int want, const char *needle);
/* Run QS_BIN args on N ranks, which must succeed; its output into *out (caller frees). */
void qs_test_run_ranks_output(int n, const char *args, char **out);
/* Run this test program itself on N ranks (`timeout 300 mpirun -np N --oversubscribe -x
 * LD_LIBRARY_PATH /proc/self/exe args`), for suites whose ranks run library code directly; returns the exit
 * code and the output into *out (caller frees). */
int qs_test_run_self_ranks(int n, const char *args, char **out);
/* qs_test_run_self_ranks, for suites whose ranks each end with a line "... N failed": fails
 * the current test (printing the output) unless it exits 0 and all n ranks report 0. */
void qs_test_expect_self_ranks(int n, const char *args);
/* Largest |a − b| / max|a| over the FP32 tensors of two checkpoint directories'
 * model.safetensors (fails the test when either cannot be read). */
double qs_test_checkpoint_max_rel_diff(const char *dir_a, const char *dir_b);

#endif
