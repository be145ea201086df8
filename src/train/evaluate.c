/* src/train/evaluate.c — whole-split evaluation. */
#include "train/evaluate.h"

#include <string.h>

qs_status qs_evaluate_logits(qs_model *m, const qs_dataset *ds, qs_eval_stats *out, float *logits_out,
                             int32_t *labels_out) {
    QS_TRY(qs_dataset_check_model(ds, ds->name, m->arch, m->in_h, m->in_w, m->in_c, m->label_len, m->num_classes));
    qs_loader ld;
    qs_loader_options lo = {.global_batch = m->batch, .rank = 0, .world = 1, .seed = 0, .shuffle = false,
                            .drop_last = false, .augment = false};
    QS_TRY(qs_loader_init(&ld, ds, &lo));
    const int64_t L = ds->label_len, rows = m->batch * L; /* predictions per batch */
    float *x = qs_host_alloc((size_t)(m->batch * ds->h * ds->w * ds->c) * sizeof(float));
    int32_t *y = qs_host_alloc((size_t)rows * sizeof(int32_t));
    float *lg = logits_out ? qs_host_alloc((size_t)(rows * m->num_classes) * sizeof(float)) : NULL;
    qs_status st = (x && y && (lg || !logits_out)) ? QS_OK : QS_ERR_OOM;
    double loss_sum = 0;
    int64_t correct = 0, seen = 0, steps = qs_loader_steps_per_epoch(&ld);
    for (int64_t s = 0; st == QS_OK && s < steps; s++) {
        int64_t valid, ok;
        double loss;
        st = qs_loader_next(&ld, x, y, &valid, NULL);
        if (st == QS_OK) st = qs_model_forward(m, x, y, false);
        if (st == QS_OK) st = qs_model_loss_accuracy(m, valid, &loss, &ok);
        if (st == QS_OK && lg) {
            st = qs_model_logits(m, lg);
            memcpy(logits_out + seen * L * m->num_classes, lg, (size_t)(valid * L * m->num_classes) * sizeof(float));
        }
        if (st == QS_OK && labels_out) memcpy(labels_out + seen * L, y, (size_t)(valid * L) * sizeof(int32_t));
        if (st != QS_OK) break;
        loss_sum += loss * (double)valid;
        correct += ok;
        seen += valid;
    }
    if (st == QS_OK) {
        out->samples = seen;
        out->accuracy = seen ? (double)correct / (double)(seen * L) : 0; /* correct counts predictions */
        out->loss = seen ? loss_sum / (double)seen : 0;
    }
    qs_host_free(x);
    qs_host_free(y);
    qs_host_free(lg);
    qs_loader_free(&ld);
    return st;
}
