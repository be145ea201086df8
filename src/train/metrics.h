/* src/train/metrics.h — defines: the JSON-lines metrics sink. Each record is one JSON
 * object on one line, flushed at once, so a killed run keeps every record written. Records
 * carry "type" ("step", "eval", "profile", "summary") and "rank". */
#ifndef QSYNC_TRAIN_METRICS_H
#define QSYNC_TRAIN_METRICS_H

#include <stdio.h>
#include <stdbool.h>
#include <cjson/cJSON.h>
#include "qsync/status.h"

typedef struct qs_metrics {
    FILE *f;      /* NULL: records are dropped */
    int rank;
} qs_metrics;

/* Open `path` (NULL or "" → disabled). append=true keeps earlier records (resume). */
qs_status qs_metrics_open(qs_metrics *mt, const char *path, bool append, int rank);
/* Write rec (adds "rank") as one line and flush; takes ownership of rec. */
qs_status qs_metrics_write(qs_metrics *mt, cJSON *rec);
void qs_metrics_close(qs_metrics *mt);

#endif
