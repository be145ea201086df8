/* tests/support/run_cmd.c — process helpers for CLI tests. */
#include "run_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int qs_test_run_shell(const char *cmd, char **out) {
    size_t len = strlen(cmd) + 16;
    char *full = malloc(len);
    snprintf(full, len, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    free(full);
    if (!p) return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (cap - n - 1 == 0) buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    int status = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int qs_test_run_qsync(const char *args, char **out) {
    const char *bin = getenv("QS_BIN");
    if (!bin) bin = "qsync";
    size_t len = strlen(bin) + strlen(args) + 8;
    char *cmd = malloc(len);
    snprintf(cmd, len, "%s %s", bin, args);
    int rc = qs_test_run_shell(cmd, out);
    free(cmd);
    return rc;
}

void qs_test_make_tmpdir(char *buf, unsigned cap) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/qsync-test-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(buf)) buf[0] = '\0';
}

void qs_test_remove_tree(const char *path) {
    if (!path || !path[0] || strcmp(path, "/") == 0) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}
