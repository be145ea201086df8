/* tests/support/run_cmd.h — run the qsync binary (env QS_BIN) in a shell and capture its
 * combined stdout+stderr, and make, inspect and remove scratch directories (directly, or as
 * cmocka setup/teardown functions around a shared one). */
#ifndef QSYNC_TESTS_RUN_CMD_H
#define QSYNC_TESTS_RUN_CMD_H

#include <stdbool.h>

#include "qsync/dtype.h" /* qs_precision */

/* Run `QS_BIN args` through /bin/sh with 2>&1; returns the exit status (or -1) and stores the
 * output (malloc'ed, NUL-terminated) in *out when out is not NULL. */
int qs_test_run_qsync(const char *args, char **out);
/* Run `QS_BIN args`; fail the current cmocka test (printing the output) unless it exits with
 * `want` and, when needle is not NULL, its output contains needle. */
void qs_test_expect_qsync(int want, const char *needle, const char *args);
/* Run an arbitrary shell command the same way. */
int qs_test_run_shell(const char *cmd, char **out);
/* A fresh directory under $TMPDIR (or /tmp), path written into buf; buf[0] == '\0' when it
 * could not be made. */
void qs_test_make_tmpdir(char *buf, unsigned cap);
/* Make the tree at path owner-accessible again (tests leave read-only directories behind) and
 * remove it: chmod -R u+rwx, then rm -rf. Returns 0, or -1 (with a message on stderr) when
 * that fails. Refuses an empty path and "/". */
int qs_test_remove_tree(const char *path);
/* Number of directory entries of dir other than . and .., or -1 when it cannot be opened. */
int qs_test_count_entries(const char *dir);

/* Environment for running mpirun from a test: root allowed (CI runs as root), and in sanitizer
 * builds Open MPI's allocations held until exit suppressed by name (tests/lsan-mpi.supp, which
 * needs full stacks and its plugins kept loaded). Call once, before the first mpirun. */
void qs_test_mpi_env(void);

/* Write text into qs_test_tmp/name (a failure to write ends the test program with a message). */
void qs_test_write_tmp(const char *name, const char *text);

/* Train a tiny checkpoint (cnn width 4, synthetic data, 5 steps) into qs_test_tmp/ck; its path
 * into dir. Fails the current test when training fails. */
void qs_test_tiny_checkpoint(char *dir, unsigned cap);

/* The scratch directory made by qs_test_tmpdir_setup, "" outside it. */
extern char qs_test_tmp[128];
/* cmocka setup (per test or per group): make a fresh qs_test_tmp and point *state at it.
 * Returns 0, or -1 when no directory could be made. */
int qs_test_tmpdir_setup(void **state);
/* cmocka teardown matching qs_test_tmpdir_setup: remove qs_test_tmp with qs_test_remove_tree
 * and clear it. Returns that function's result. */
int qs_test_tmpdir_teardown(void **state);
/* A cmocka test run in a fresh qs_test_tmp that is removed afterwards. */
#define QS_TMPDIR_TEST(f) cmocka_unit_test_setup_teardown(f, qs_test_tmpdir_setup, qs_test_tmpdir_teardown)

/* cmocka group setup of the suites that run mpirun: qs_test_mpi_env, then qs_test_tmpdir_setup. */
int qs_test_mpi_tmpdir_setup(void **state);

/* Whether the CPU backend only emulates precision p on this machine (precision_support, as
 * `qsync train` decides whether --allow-emulated is needed): fp16 and fp8 always; int8 where
 * oneDNN runs no VNNI/AMX kernels and bf16 where it has no optimized bf16 ones, e.g. on a CPU
 * with AVX2 but no AVX-512, or under ONEDNN_MAX_CPU_ISA=AVX2. */
bool qs_test_cpu_emulates(qs_precision p);

/* Start-up of a suite that runs qsync on the GPU: 0 when CUDA device 0 is usable (a backend
 * made and destroyed in this process), else the exit code — 77 (skipped, with a line naming
 * the suite on stderr), or 1 when QS_REQUIRE_GPU=1. */
int qs_test_gpu_suite_start(const char *suite);

#endif
