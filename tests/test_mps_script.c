/* tests/test_mps_script.c — scripts/mps.sh (start, status, stop of the MPS control daemon) and
 * qs_mps_daemon_running against a stand-in for nvidia-cuda-mps-control on PATH: with -d it
 * leaves a live process, writes that process's pid to <pipe dir>/nvidia-cuda-mps-control.pid
 * and makes <pipe dir>/control a FIFO, as the real daemon does with its files; "quit" on stdin
 * ends that process and removes both. The real daemon was driven by the same script on
 * the GPU machine (bench/gpu_hybrid.sh, 2026-12-03). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "parallel/mps.h"
#include "run_cmd.h"

/* The stand-in control binary (bash), written into dir. */
static void write_fake_control(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/nvidia-cuda-mps-control", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("#!/usr/bin/env bash\n"
          "pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}\n"
          "if [ \"${1:-}\" = -d ]; then\n"
          "  (exec sleep 600) </dev/null >/dev/null 2>&1 &\n"
          "  echo $! > \"$pipe/nvidia-cuda-mps-control.pid\"\n"
          "  [ -p \"$pipe/control\" ] || mkfifo \"$pipe/control\"\n"
          "  exit 0\n"
          "fi\n"
          "read -r cmd\n"
          "if [ \"$cmd\" = quit ]; then kill \"$(cat \"$pipe/nvidia-cuda-mps-control.pid\")\"; "
          "rm -f \"$pipe/nvidia-cuda-mps-control.pid\" \"$pipe/control\"; fi\n",
          f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0755), 0);
}

/* Run scripts/mps.sh <verb> with the stand-in first on PATH and the pipe directory in the
 * scratch directory; returns its exit status and its output in *out (caller frees). */
static int mps_sh(const char *verb, char **out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "PATH=%s:$PATH CUDA_MPS_PIPE_DIRECTORY=%s/pipe CUDA_MPS_LOG_DIRECTORY=%s/log %s/scripts/mps.sh %s",
             qs_test_tmp, qs_test_tmp, qs_test_tmp, getenv("QS_SOURCE_DIR"), verb);
    return qs_test_run_shell(cmd, out);
}

/* Expect exit status `want` and `needle` in the output of mps.sh <verb>. */
static void expect_mps_sh(const char *verb, int want, const char *needle) {
    char *out = NULL;
    int rc = mps_sh(verb, &out);
    if (rc != want || !strstr(out, needle))
        fail_msg("mps.sh %s: exit %d (want %d), output:\n%s\n(wanted: %s)", verb, rc, want, out, needle);
    free(out);
}

static void test_start_status_stop(void **state) {
    (void)state;
    write_fake_control(qs_test_tmp);
    char pipe[512];
    snprintf(pipe, sizeof pipe, "%s/pipe", qs_test_tmp);
    assert_int_equal(setenv("CUDA_MPS_PIPE_DIRECTORY", pipe, 1), 0);
    expect_mps_sh("status", 1, "MPS control daemon not running");
    expect_mps_sh("stop", 0, "MPS control daemon not running");
    assert_false(qs_mps_daemon_running(NULL, 0));
    expect_mps_sh("start", 0, "MPS control daemon started (pid ");
    expect_mps_sh("start", 0, "MPS control daemon already running");
    expect_mps_sh("status", 0, "MPS control daemon running (pid ");
    assert_true(qs_mps_daemon_running(NULL, 0)); /* what qsync checks before asking for a share */
    expect_mps_sh("stop", 0, "MPS control daemon stopped (was pid ");
    expect_mps_sh("status", 1, "MPS control daemon not running");
    assert_false(qs_mps_daemon_running(NULL, 0));
    /* a daemon gone without cleaning up: its control pipe and a pid file naming no live process */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkfifo %s/control && sh -c 'echo $$' > %s/nvidia-cuda-mps-control.pid", pipe, pipe);
    assert_int_equal(qs_test_run_shell(cmd, NULL), 0);
    assert_false(qs_mps_daemon_running(NULL, 0));
    expect_mps_sh("status", 1, "MPS control daemon not running");
    expect_mps_sh("bogus", 2, "usage: scripts/mps.sh start|stop|status");
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
}

/* Without the control binary, start says where it comes from. */
static void test_no_control_binary(void **state) {
    (void)state;
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "PATH=/usr/bin:/bin CUDA_MPS_PIPE_DIRECTORY=%s/pipe2 %s/scripts/mps.sh start",
             qs_test_tmp, getenv("QS_SOURCE_DIR"));
    int rc = qs_test_run_shell(cmd, &out);
    if (rc != 1 || !strstr(out, "nvidia-cuda-mps-control not found on PATH"))
        fail_msg("%s: exit %d, output:\n%s", cmd, rc, out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        QS_TMPDIR_TEST(test_start_status_stop),
        QS_TMPDIR_TEST(test_no_control_binary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
