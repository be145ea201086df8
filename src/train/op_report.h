/* src/train/op_report.h — defines: the per-op time and memory breakdown read from the
 * engine's own timers (node->time), as a text table and as JSON. */
#ifndef QSYNC_TRAIN_OP_REPORT_H
#define QSYNC_TRAIN_OP_REPORT_H

#include <stdio.h>
#include <cjson/cJSON.h>
#include "graph/graph.h"

/* Print, per node with any recorded time, the mean ms per call in each category, then the
 * totals per category and the memory report. `steps` = steps the timers cover. */
void qs_op_report_print(const qs_model *m, int64_t steps, size_t optimizer_bytes, FILE *f);
/* The same as a JSON object {"steps", "ops": [...], "totals_ms": {...}, "memory_bytes": {...}}. */
cJSON *qs_op_report_json(const qs_model *m, int64_t steps, size_t optimizer_bytes);

#endif
