/* qsync/log.h — defines: rank-aware logging. A qs_logger belongs to a context (no global
 * state): it knows the rank and the level; by default only rank 0 prints info messages,
 * every rank prints warnings and errors, prefixed with "[rank r]" when the world size > 1. */
#ifndef QSYNC_LOG_H
#define QSYNC_LOG_H

#include <stdio.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qs_log_level { QS_LOG_DEBUG = 0, QS_LOG_INFO, QS_LOG_WARN, QS_LOG_ERROR, QS_LOG_QUIET } qs_log_level;

typedef struct qs_logger {
    int rank;
    int world_size;
    qs_log_level level;
    bool all_ranks;   /* info/debug from every rank, not only rank 0 */
    FILE *out;        /* NULL means stderr */
} qs_logger;

void qs_logger_init(qs_logger *lg, int rank, int world_size, qs_log_level level);
void qs_log(const qs_logger *lg, qs_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define qs_log_info(lg, ...) qs_log((lg), QS_LOG_INFO, __VA_ARGS__)
#define qs_log_warn(lg, ...) qs_log((lg), QS_LOG_WARN, __VA_ARGS__)
#define qs_log_error(lg, ...) qs_log((lg), QS_LOG_ERROR, __VA_ARGS__)
#define qs_log_debug(lg, ...) qs_log((lg), QS_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
