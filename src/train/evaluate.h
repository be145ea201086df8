/* src/train/evaluate.h — defines: evaluation of a set-up model over a whole dataset split
 * (no shuffling, the last batch padded and its padding ignored). */
#ifndef QSYNC_TRAIN_EVALUATE_H
#define QSYNC_TRAIN_EVALUATE_H

#include "graph/graph.h"
#include "data/dataset.h"

typedef struct qs_eval_stats {
    double accuracy, loss;   /* over all samples */
    int64_t samples;
} qs_eval_stats;

/* Forward every sample of ds in eval mode (BN running stats, no dropout) in batches of the
 * model's batch size. logits_out, when not NULL, receives (ds->n, classes) floats. */
qs_status qs_evaluate_logits(qs_model *m, const qs_dataset *ds, qs_eval_stats *out, float *logits_out);
static inline qs_status qs_evaluate(qs_model *m, const qs_dataset *ds, qs_eval_stats *out) {
    return qs_evaluate_logits(m, ds, out, NULL);
}

#endif
