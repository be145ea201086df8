/* qsync/status.h — defines: qs_status codes, the thread-local last-error record and
 * the QS_FAIL / QS_TRY helpers. The library never exits: every fallible call returns a
 * qs_status and leaves a message (what, where, what to do) retrievable by qs_last_error(). */
#ifndef QSYNC_STATUS_H
#define QSYNC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qs_status {
    QS_OK = 0,
    QS_ERR_INVALID_ARG,   /* a caller passed a value outside the contract */
    QS_ERR_OOM,           /* an allocation failed */
    QS_ERR_IO,            /* a file could not be opened, read, written or renamed */
    QS_ERR_FORMAT,        /* a file or string is malformed or truncated */
    QS_ERR_MISMATCH,      /* two things that must agree do not (shapes, checkpoint vs model) */
    QS_ERR_NOT_FOUND,     /* a named thing (model, option, tensor, file) does not exist */
    QS_ERR_UNSUPPORTED,   /* valid request this build or backend cannot do */
    QS_ERR_BACKEND,       /* a library underneath (oneDNN, CUDA, MPI) reported an error */
    QS_ERR_INTERNAL,      /* a bug in qsync */
    QS_ERR_TIMEOUT,       /* a peer process did not arrive in time (stalled or died) */
    QS_ERR_INFEASIBLE     /* constraints no solution meets (a plan's time target or memory cap) */
} qs_status;

/* Short stable name of a status, e.g. "QS_ERR_IO". */
const char *qs_status_name(qs_status st);

/* Record an error message for this thread and return st (so callers can `return QS_FAIL(...)`).
 * The message is printf-formatted; file/line are kept for debugging. Messages longer than
 * 1 KiB are truncated. */
qs_status qs_error_set(qs_status st, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prepend context ("while loading checkpoint x: ") to the current message; returns st. */
qs_status qs_error_wrap(qs_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last error message recorded on this thread ("" if none). */
const char *qs_last_error(void);

/* Clear this thread's error record. */
void qs_error_clear(void);

#define QS_FAIL(st, ...) qs_error_set((st), __FILE__, __LINE__, __VA_ARGS__)
#define QS_TRY(expr)                                                                   \
    do {                                                                               \
        qs_status qs_try_status_ = (expr);                                             \
        if (qs_try_status_ != QS_OK) return qs_try_status_;                            \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
