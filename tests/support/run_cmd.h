/* tests/support/run_cmd.h — run the qsync binary (env QS_BIN) in a shell and capture its
 * combined stdout+stderr, and make scratch directories. */
#ifndef QSYNC_TESTS_RUN_CMD_H
#define QSYNC_TESTS_RUN_CMD_H

/* Run `QS_BIN args` through /bin/sh with 2>&1; returns the exit status (or -1) and stores the
 * output (malloc'ed, NUL-terminated) in *out when out is not NULL. */
int qs_test_run_qsync(const char *args, char **out);
/* Run an arbitrary shell command the same way. */
int qs_test_run_shell(const char *cmd, char **out);
/* A fresh directory under $TMPDIR (or /tmp), path written into buf. */
void qs_test_make_tmpdir(char *buf, unsigned cap);
/* rm -rf path */
void qs_test_remove_tree(const char *path);

#endif
