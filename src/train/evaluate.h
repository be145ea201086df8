/* src/train/evaluate.h — defines: evaluation of a set-up model over a whole dataset split
 * (no shuffling, the last batch padded and its padding ignored). */
#ifndef QSYNC_TRAIN_EVALUATE_H
#define QSYNC_TRAIN_EVALUATE_H

#include "graph/graph.h"
#include "data/dataset.h"

typedef struct qs_eval_stats {
    double accuracy, loss;   /* over all predictions: samples × labels per sample (a language model's
                              * accuracy and loss are per token) */
    int64_t samples;
} qs_eval_stats;

/* Forward every sample of ds in eval mode (BN running stats, no dropout) in batches of the
 * model's batch size. The data must fit the model (qs_dataset_check_model; QS_ERR_MISMATCH).
 * logits_out, when not NULL, receives (ds->n, label_len, classes) floats and labels_out, when
 * not NULL, (ds->n, label_len) int32 labels, both in dataset order. */
qs_status qs_evaluate_logits(qs_model *m, const qs_dataset *ds, qs_eval_stats *out, float *logits_out,
                             int32_t *labels_out);
/* qs_evaluate_logits without the logits and labels. */
static inline qs_status qs_evaluate(qs_model *m, const qs_dataset *ds, qs_eval_stats *out) {
    return qs_evaluate_logits(m, ds, out, NULL, NULL);
}

#endif
