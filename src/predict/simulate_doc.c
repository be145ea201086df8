/* src/predict/simulate_doc.c — defines: a prediction as its JSON document and its release
 * (qs_sim_result_json, qs_sim_calibration_json, qs_sim_result_free; simulate.h). */
#include "predict/simulate.h"

#include <stdlib.h>
#include <string.h>

void qs_sim_result_free(qs_sim_result *r) {
    free(r->workers);
    free(r->calibration.assignments);
    memset(r, 0, sizeof *r);
}

cJSON *qs_sim_calibration_json(const qs_sim_calibration *c) {
    cJSON *cal = cJSON_CreateObject();
    if (!cal) return NULL;
    cJSON_AddBoolToObject(cal, "applied", c->applied);
    if (!c->applied) {
        cJSON_AddStringToObject(cal, "reason", c->reason ? c->reason : "");
        return cal;
    }
    cJSON_AddNumberToObject(cal, "replayed_ms", c->replayed_ms);
    cJSON_AddNumberToObject(cal, "residual_ms", c->residual_ms);
    cJSON *list = cJSON_AddArrayToObject(cal, "assignments");
    for (int i = 0; list && i < c->n_assignments; i++) {
        const qs_sim_assignment *a = &c->assignments[i];
        cJSON *e = cJSON_CreateObject(), *as = cJSON_AddObjectToObject(e, "precisions");
        for (int k = 0; k < a->n_types; k++) cJSON_AddStringToObject(as, a->types[k], qs_precision_name(a->precs[k]));
        cJSON_AddNumberToObject(e, "weight", a->weight);
        cJSON_AddNumberToObject(e, "measured_ms", a->measured_ms);
        cJSON_AddNumberToObject(e, "replayed_ms", a->replayed_ms);
        cJSON_AddItemToArray(list, e);
    }
    return cal;
}

/* One worker's entry of "workers". */
static cJSON *qs_sim_worker_json(const qs_sim_worker_result *w) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "rank", w->rank);
    if (w->type) cJSON_AddStringToObject(x, "type", w->type);
    cJSON_AddNumberToObject(x, "slowdown", w->slowdown);
    cJSON_AddNumberToObject(x, "data_ms", w->data_ms);
    cJSON_AddNumberToObject(x, "untimed_ms", w->untimed_ms);
    cJSON_AddNumberToObject(x, "forward_ms", w->forward_ms);
    cJSON_AddNumberToObject(x, "backward_ms", w->backward_ms);
    cJSON_AddNumberToObject(x, "comm_wait_ms", w->comm_wait_ms);
    cJSON_AddNumberToObject(x, "grad_average_ms", w->grad_average_ms);
    cJSON_AddNumberToObject(x, "optimizer_ms", w->optimizer_ms);
    cJSON_AddNumberToObject(x, "iteration_ms", w->iteration_ms);
    cJSON_AddNumberToObject(x, "memory_bytes", w->memory_bytes);
    return x;
}

cJSON *qs_sim_result_json(const qs_sim_result *r) {
    cJSON *doc = cJSON_CreateObject();
    if (!doc) return NULL;
    cJSON_AddStringToObject(doc, "format", QS_SIM_FORMAT);
    cJSON_AddNumberToObject(doc, "version", QS_SIM_VERSION);
    cJSON_AddNumberToObject(doc, "iteration_ms", r->iteration_ms);
    cJSON_AddNumberToObject(doc, "iteration_mean_ms", r->iteration_mean_ms);
    cJSON_AddNumberToObject(doc, "jitter_ms", r->jitter_ms);
    cJSON_AddNumberToObject(doc, "slowest", r->slowest);
    cJSON *comm = cJSON_AddObjectToObject(doc, "comm");
    cJSON_AddStringToObject(comm, "model", r->comm_model);
    cJSON_AddStringToObject(comm, "source", r->comm_source);
    cJSON_AddNumberToObject(comm, "buckets", r->buckets);
    cJSON_AddNumberToObject(comm, "allreduce_ms", r->allreduce_ms);
    cJSON *workers = cJSON_AddArrayToObject(doc, "workers");
    for (int i = 0; workers && i < r->n_workers; i++) cJSON_AddItemToArray(workers, qs_sim_worker_json(&r->workers[i]));
    if (r->calibrated) cJSON_AddItemToObject(doc, "calibration", qs_sim_calibration_json(&r->calibration));
    return doc;
}
