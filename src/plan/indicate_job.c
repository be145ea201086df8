/* src/plan/indicate_job.c — the indicate job (indicate_job.h). */
#include "plan/indicate_job.h"

#include <string.h>

#include "plan/model_data.h"

qs_status qs_indicate_job_run(const qs_indicate_job *j, cJSON **doc) {
    *doc = NULL;
    if (j->batches < 1 || j->batches > 1000000)
        return QS_FAIL(QS_ERR_INVALID_ARG, "batches must be 1..1000000 (got %lld)", (long long)j->batches);
    qs_model_data_request rq = {.model = j->model, .width = j->width, .data = j->data, .data_dir = j->data_dir,
                                .checkpoint = j->checkpoint, .batch = j->batch, .seed = j->seed,
                                .threads = j->threads, .cuda = j->cuda, .cuda_device = j->cuda_device};
    qs_model_data md;
    qs_indicator ind;
    memset(&ind, 0, sizeof ind);
    qs_status st = qs_model_data_open(&rq, &md);
    if (st == QS_OK) st = qs_indicator_collect(md.m, (int)j->batches, qs_model_data_next, &md, j->seed, &ind);
    if (st == QS_OK) {
        qs_indicator_meta meta = {.model = md.arch, .config = md.m->config, .data = j->data, .batch = j->batch,
                                  .batches = (int)j->batches, .method = j->method, .gamma = j->gamma,
                                  .seed = j->seed, .checkpoint = j->checkpoint};
        *doc = qs_indicator_to_json(&ind, &meta);
        if (!*doc) st = QS_FAIL(QS_ERR_OOM, "out of memory building the indicator document");
    }
    qs_indicator_free(&ind);
    qs_model_data_close(&md);
    return st;
}
