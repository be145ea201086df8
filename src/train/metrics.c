/* src/train/metrics.c — JSON-lines metrics sink. */
#include "train/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

qs_status qs_metrics_open(qs_metrics *mt, const char *path, bool append, int rank) {
    mt->f = NULL;
    mt->rank = rank;
    if (!path || !path[0]) return QS_OK;
    mt->f = fopen(path, append ? "a" : "w");
    if (!mt->f)
        return QS_FAIL(QS_ERR_IO, "cannot open metrics file %s: %s (check the directory exists and is writable)",
                       path, strerror(errno));
    return QS_OK;
}

qs_status qs_metrics_write(qs_metrics *mt, cJSON *rec) {
    qs_status st = QS_OK;
    if (mt->f && rec) {
        cJSON_AddNumberToObject(rec, "rank", mt->rank);
        char *s = cJSON_PrintUnformatted(rec);
        if (!s || fprintf(mt->f, "%s\n", s) < 0 || fflush(mt->f) != 0)
            st = QS_FAIL(QS_ERR_IO, "writing a metrics record failed: %s", strerror(errno));
        free(s);
    }
    cJSON_Delete(rec);
    return st;
}

void qs_metrics_close(qs_metrics *mt) {
    if (mt->f) fclose(mt->f);
    mt->f = NULL;
}
