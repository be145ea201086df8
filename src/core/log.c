/* src/core/log.c — rank-aware logging to a stream held by the logger. */
#include "qsync/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qs_logger_init(qs_logger *lg, int rank, int world_size, qs_log_level level) {
    lg->rank = rank;
    lg->world_size = world_size;
    lg->level = level;
    lg->all_ranks = false;
    lg->out = NULL;
}

/* One line is written by one fwrite: stderr is unbuffered, and the ranks of a job share it,
 * so a line written piece by piece interleaves with another rank's. */
void qs_log(const qs_logger *lg, qs_log_level lvl, const char *fmt, ...) {
    if (!lg || lvl < lg->level || lg->level == QS_LOG_QUIET) return;
    if (lvl < QS_LOG_WARN && lg->rank != 0 && !lg->all_ranks) return;
    FILE *f = lg->out ? lg->out : stderr;
    const char *kind = lvl == QS_LOG_WARN ? "warning: " : lvl == QS_LOG_ERROR ? "error: " : "";
    char prefix[48];
    if (lg->world_size > 1) snprintf(prefix, sizeof prefix, "[rank %d] %s", lg->rank, kind);
    else snprintf(prefix, sizeof prefix, "%s", kind);
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    char buf[2048], *line = buf;
    size_t np = strlen(prefix);
    buf[np] = '\0';
    int n = vsnprintf(buf + np, sizeof buf - np - 1, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= sizeof buf - np - 1) { /* longer than the stack buffer */
        line = malloc(np + (size_t)n + 2);
        if (line) vsnprintf(line + np, (size_t)n + 1, fmt, ap2);
        else line = buf; /* truncated rather than lost */
    }
    va_end(ap2);
    size_t len = np + strlen(line + np);
    memcpy(line, prefix, np);
    line[len] = '\n';
    fwrite(line, 1, len + 1, f);
    fflush(f);
    if (line != buf) free(line);
}
