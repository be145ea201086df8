/* bench/bench_util.h — defines: CHECK(expr) for the benchmark programs: a failing qsync call
 * prints where, what and qs_last_error(), then ends the benchmark with exit status 1. */
#ifndef QSYNC_BENCH_UTIL_H
#define QSYNC_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include "qsync/status.h"

#define CHECK(expr)                                                                                      \
    do {                                                                                                 \
        qs_status st_ = (expr);                                                                          \
        if (st_ != QS_OK) {                                                                              \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr, qs_status_name(st_), \
                    qs_last_error());                                                                    \
            exit(1);                                                                                     \
        }                                                                                                \
    } while (0)

#endif
