/* src/core/status.c — status names and the thread-local last-error record. */
#include "qsync/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define QS_ERROR_CAP 1024

/* One message per thread, like errno: errors are reported where they happen and read by the
 * caller that decides what to print. */
static _Thread_local char qs_error_msg[QS_ERROR_CAP];

const char *qs_status_name(qs_status st) {
    switch (st) {
    case QS_OK: return "QS_OK";
    case QS_ERR_INVALID_ARG: return "QS_ERR_INVALID_ARG";
    case QS_ERR_OOM: return "QS_ERR_OOM";
    case QS_ERR_IO: return "QS_ERR_IO";
    case QS_ERR_FORMAT: return "QS_ERR_FORMAT";
    case QS_ERR_MISMATCH: return "QS_ERR_MISMATCH";
    case QS_ERR_NOT_FOUND: return "QS_ERR_NOT_FOUND";
    case QS_ERR_UNSUPPORTED: return "QS_ERR_UNSUPPORTED";
    case QS_ERR_BACKEND: return "QS_ERR_BACKEND";
    case QS_ERR_INTERNAL: return "QS_ERR_INTERNAL";
    case QS_ERR_TIMEOUT: return "QS_ERR_TIMEOUT";
    case QS_ERR_INFEASIBLE: return "QS_ERR_INFEASIBLE";
    }
    return "QS_ERR_UNKNOWN";
}

qs_status qs_error_set(qs_status st, const char *file, int line, const char *fmt, ...) {
    (void)file;
    (void)line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qs_error_msg, sizeof qs_error_msg, fmt, ap);
    va_end(ap);
    return st;
}

qs_status qs_error_wrap(qs_status st, const char *fmt, ...) {
    char prefix[QS_ERROR_CAP];
    char old[QS_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, qs_error_msg, sizeof old);
    size_t plen = strnlen(prefix, sizeof prefix - 1);
    memcpy(qs_error_msg, prefix, plen);
    size_t rest = sizeof qs_error_msg - 1 - plen;
    size_t olen = strnlen(old, rest);
    memcpy(qs_error_msg + plen, old, olen);
    qs_error_msg[plen + olen] = '\0';
    return st;
}

const char *qs_last_error(void) { return qs_error_msg; }

void qs_error_clear(void) { qs_error_msg[0] = '\0'; }
