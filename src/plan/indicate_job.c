/* src/plan/indicate_job.c — the indicate job (indicate_job.h). */
#include "plan/indicate_job.h"

#include <string.h>

#include "plan/model_data.h"

qs_status qs_indicate_job_run(const qs_indicate_job *j, cJSON **doc) {
    *doc = NULL;
    if (j->batches < 1 || j->batches > 1000000)
        return QS_FAIL(QS_ERR_INVALID_ARG, "batches must be 1..1000000 (got %lld)", (long long)j->batches);
    qs_model_data md;
    qs_indicator ind;
    memset(&ind, 0, sizeof ind);
    qs_status st = qs_model_data_open(&j->in, &md);
    if (st == QS_OK) st = qs_indicator_collect(md.m, (int)j->batches, qs_model_data_next, &md, j->in.seed, &ind);
    if (st == QS_OK) {
        qs_indicator_meta meta = {.model = md.arch, .config = md.m->config, .data = j->in.data, .batch = j->in.batch,
                                  .batches = (int)j->batches, .method = j->method, .gamma = j->gamma,
                                  .seed = j->in.seed, .checkpoint = j->in.checkpoint};
        *doc = qs_indicator_to_json(&ind, &meta);
        if (!*doc) st = QS_FAIL(QS_ERR_OOM, "out of memory building the indicator document");
    }
    qs_indicator_free(&ind);
    qs_model_data_close(&md);
    return st;
}
