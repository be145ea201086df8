/* src/plan/plan_build_doc.c — defines: the plan document `qsync plan` writes (qs_pb_document,
 * plan_build_internal.h; format docs/PLANS.md): a section per device type and the predictions. */
#include "plan/plan_build_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The planned type d's entry of "predictions"."types" (its section's precisions into sec). */
static void qs_pb_type_doc(const qs_pb_ctx *c, const qs_pb_type *d, cJSON *sec, cJSON *pt) {
    cJSON *precs = cJSON_AddObjectToObject(sec, "precisions");
    int quantized = 0;
    for (int j = 0; j < c->n_layers; j++) {
        cJSON_AddStringToObject(precs, c->layer[j], qs_precision_name(d->prec[j]));
        quantized += d->prec[j] != c->base;
    }
    const qs_alloc_result *chosen = d->has_exact ? &d->exact : &d->greedy;
    cJSON_AddNumberToObject(pt, "omega", chosen->omega);
    cJSON_AddNumberToObject(pt, "quantized_layers", quantized);
    cJSON_AddStringToObject(pt, "solver", d->has_exact ? "exact" : "greedy");
    cJSON_AddNumberToObject(pt, "model_ms", chosen->time_ms); /* the additive model, at its (tightened) target */
    cJSON_AddNumberToObject(pt, "model_target_ms", d->prob.target_ms);
    cJSON_AddNumberToObject(pt, "base_synchronized_ms", d->sync_base_cal_ms);
    cJSON_AddNumberToObject(pt, "greedy_omega", d->greedy.omega);
    if (d->has_exact) {
        cJSON_AddNumberToObject(pt, "exact_omega", d->exact.omega);
        cJSON_AddBoolToObject(pt, "exact_optimal", d->exact.optimal);
        if (isfinite(d->greedy.gap)) cJSON_AddNumberToObject(pt, "greedy_gap", d->greedy.gap);
    }
    if (d->prob.mem_cap != QS_ALLOC_NO_CAP) cJSON_AddNumberToObject(pt, "memory_cap_bytes", (double)d->prob.mem_cap);
    cJSON_AddNumberToObject(pt, "tightened", d->rounds_tightened); /* times its target or cap was lowered */
    if (d->best_effort) cJSON_AddBoolToObject(pt, "best_effort", true); /* T relaxed to its fastest plan */
}

/* "device_types" and "predictions"."types": the fastest type at the base, the others planned. */
static void qs_pb_types_doc(const qs_pb_ctx *c, cJSON *sections, cJSON *ptypes) {
    const char *base = qs_precision_name(c->base);
    for (int i = 0; i < c->n_types; i++) {
        cJSON *s = cJSON_AddObjectToObject(sections, c->types[i]);
        cJSON *pt = cJSON_AddObjectToObject(ptypes, c->types[i]);
        const qs_pb_type *d = NULL;
        for (int k = 0; k < c->n_slow; k++)
            if (strcmp(c->t[k].name, c->types[i]) == 0) d = &c->t[k];
        if (d) {
            qs_pb_type_doc(c, d, s, pt);
            continue;
        }
        cJSON_AddStringToObject(s, "default", base);
        cJSON_AddNumberToObject(pt, "omega", 0);
        cJSON_AddNumberToObject(pt, "quantized_layers", 0);
    }
}

/* "predictions"."workers": per rank the calibrated iteration and the memory. */
static void qs_pb_workers_doc(const qs_sim_result *cal, cJSON *workers) {
    for (int r = 0; r < cal->n_workers; r++) {
        const qs_sim_worker_result *x = &cal->workers[r];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", x->rank);
        if (x->type) cJSON_AddStringToObject(o, "type", x->type);
        cJSON_AddNumberToObject(o, "iteration_ms", x->iteration_ms);
        cJSON_AddNumberToObject(o, "memory_bytes", x->memory_bytes);
        cJSON_AddItemToArray(workers, o);
    }
}

cJSON *qs_pb_document(const qs_pb_ctx *c, double T, const qs_sim_result *sim, const qs_sim_result *cal, int rounds) {
    const qs_planb_request *rq = c->rq;
    cJSON *doc = cJSON_CreateObject();
    if (!doc) return NULL;
    cJSON_AddStringToObject(doc, "format", "qsync-plan");
    cJSON_AddNumberToObject(doc, "version", 2);
    cJSON_AddStringToObject(doc, "model", rq->arch);
    cJSON_AddStringToObject(doc, "config", rq->config);
    cJSON_AddStringToObject(doc, "backend", rq->workers[0].profile->device.backend);
    const char *base = qs_precision_name(c->base);
    cJSON_AddStringToObject(doc, "default", base);
    cJSON_AddStringToObject(doc, "comment", "chosen by qsync plan (docs/PLANS.md)");
    cJSON *sections = cJSON_AddObjectToObject(doc, "device_types");
    cJSON *pred = cJSON_CreateObject();
    cJSON_AddNumberToObject(pred, "target_ms", T);
    char source[64];
    snprintf(source, sizeof source, "fastest device type, all %s", base);
    cJSON_AddStringToObject(pred, "target_source", rq->target_ms > 0 ? "--target-ms" : source);
    cJSON_AddStringToObject(pred, "base_precision", base);
    cJSON_AddStringToObject(pred, "fastest_type", c->fast);
    cJSON_AddNumberToObject(pred, "synchronized_ms", cal->iteration_ms);
    cJSON_AddNumberToObject(pred, "replayed_ms", sim->iteration_ms);
    if (cal->calibrated) cJSON_AddItemToObject(pred, "calibration", qs_sim_calibration_json(&cal->calibration));
    cJSON_AddNumberToObject(pred, "rounds", rounds);
    /* best effort: an asked T below the fastest type's own time was raised to it, and is not met */
    const bool raised = rq->target_ms > 0 && rq->target_ms < T;
    cJSON_AddBoolToObject(pred, "target_met", !raised && sim->iteration_ms <= T * (1 + rq->tolerance));
    qs_pb_types_doc(c, sections, cJSON_AddObjectToObject(pred, "types"));
    qs_pb_workers_doc(cal, cJSON_AddArrayToObject(pred, "workers"));
    if (raised) cJSON_AddNumberToObject(pred, "target_asked_ms", rq->target_ms);
    cJSON_AddItemToObject(doc, "predictions", pred);
    return doc;
}
