/* src/core/log.c — rank-aware logging to a stream held by the logger. */
#include "qsync/log.h"

#include <stdarg.h>

void qs_logger_init(qs_logger *lg, int rank, int world_size, qs_log_level level) {
    lg->rank = rank;
    lg->world_size = world_size;
    lg->level = level;
    lg->all_ranks = false;
    lg->out = NULL;
}

void qs_log(const qs_logger *lg, qs_log_level lvl, const char *fmt, ...) {
    if (!lg || lvl < lg->level || lg->level == QS_LOG_QUIET) return;
    if (lvl < QS_LOG_WARN && lg->rank != 0 && !lg->all_ranks) return;
    FILE *f = lg->out ? lg->out : stderr;
    if (lg->world_size > 1) fprintf(f, "[rank %d] ", lg->rank);
    if (lvl == QS_LOG_WARN) fputs("warning: ", f);
    if (lvl == QS_LOG_ERROR) fputs("error: ", f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}
