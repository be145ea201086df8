/* cli/cmd_simulate.c — defines: `qsync simulate`: predict one training iteration of every worker of a
 * cluster for a precision plan, from profiles (src/predict/simulate.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "profile_args.h"
#include "core/atomic_file.h"
#include "backends/backends.h"
#include "io/cluster.h"
#include "graph/precision.h"
#include "models/models.h"
#include "options.h"
#include "io/plan_file.h"
#include "predict/simulate.h"


static const char *const qs_simulate_summary =
    "Predict one training iteration of every worker from profiles (`qsync profile`): per worker the\n"
    "data, forward, backward, gradient wait, optimizer and memory, and the synchronized iteration\n"
    "time. --profile takes FILE (for every worker) or TYPE=FILE,... (per device type of --cluster);\n"
    "a profile taken under a worker's emulation (profile --cluster) already holds its slowdown.\n"
    "Precisions as in training: --precision, --plan (sections per device type) or the cluster's.";


/* Build worker r's model from its profile's model and options, with its precisions. */
static qs_status qs_sim_build(const qs_profile *prof, qs_backend *be, const qs_cluster_worker *cw, const char *precision,
                              const char *plan_path, bool allow_emulated, qs_model **out) {
    QS_TRY(qs_models_build_config(prof->model, prof->config, out));
    qs_model_fuse(*out);
    qs_precision_options po;
    qs_precision_options_default(&po);
    po.allow_emulated = allow_emulated;
    qs_plan plan;
    memset(&plan, 0, sizeof plan);
    const char *pp = cw && cw->plan[0] ? cw->plan : plan_path;
    const char *pr = cw && cw->precision[0] ? cw->precision : precision;
    if (!qs_precision_parse(pr, &po.uniform))
        return QS_FAIL(QS_ERR_INVALID_ARG, "unknown precision '%s' (fp32, tf32, bf16, fp16, fp8, int8)", pr);
    qs_status st = QS_OK;
    if (pp) {
        st = qs_plan_read(pp, &plan);
        if (st == QS_OK && qs_plan_has_device_types(&plan))
            st = qs_plan_select_device_type(&plan, cw ? cw->type : "");
    }
    if (st == QS_OK) st = qs_plan_precision_setup(pp ? &plan : NULL, *out, be, &po);
    if (pp) qs_plan_free(&plan);
    return st;
}

static qs_status qs_sim_write(const char *path, const cJSON *doc) {
    char *text = cJSON_Print(doc);
    if (!text) return QS_FAIL(QS_ERR_OOM, "out of memory writing %s", path);
    qs_status st = qs_write_file_atomic(path, text, strlen(text));
    free(text);
    return st;
}

static void qs_sim_print(const qs_sim_result *p) {
    printf("predicted iteration: %.2f ms, mean %.2f ms (slowest: rank %d; jitter %+.2f ms; communication: %s from "
           "the %s, %.2f ms in %d buckets)\n",
           p->iteration_ms, p->iteration_mean_ms, p->slowest, p->jitter_ms, p->comm_model, p->comm_source,
           p->allreduce_ms, p->buckets);
    const qs_sim_calibration *cal = &p->calibration;
    if (p->calibrated && cal->applied)
        printf("calibrated against the synchronized steps measured in place: %+.2f ms on the replay's %.2f ms\n",
               cal->residual_ms, cal->replayed_ms);
    else if (p->calibrated)
        printf("not calibrated: %s\n", cal->reason);
    for (int r = 0; r < p->n_workers; r++) {
        const qs_sim_worker_result *w = &p->workers[r];
        printf("  rank %d%s%s%s: data %.2f, outside ops %.2f, forward %.2f, backward %.2f, gradient wait %.2f, optimizer "
               "%.2f ms -> %.2f ms; memory %.1f MiB%s\n",
               w->rank, w->type ? " (" : "", w->type ? w->type : "", w->type ? ")" : "", w->data_ms, w->untimed_ms,
               w->forward_ms, w->backward_ms, w->comm_wait_ms, w->optimizer_ms, w->iteration_ms,
               w->memory_bytes / 1048576.0, w->slowdown > 1 ? " (emulated slowdown)" : "");
    }
}

/* Worker r's replay inputs (the cluster's worker cw, NULL without a cluster): its profile, its
 * model at its precisions, its emulation. */
static qs_status qs_sim_worker_of(const qs_profile_args *prof, qs_backend *be, const qs_cluster_worker *cw, int r,
                                  const char *cluster_path, const char *precision, const char *plan_path,
                                  bool allow_emulated, qs_sim_worker *w) {
    int k = qs_profile_args_for(prof, cw ? cw->type : NULL);
    if (k < 0)
        return QS_FAIL(QS_ERR_NOT_FOUND, "no profile for worker %d of type \"%s\" (%s): give --profile %s=FILE", r,
                       cw ? cw->type : "", cluster_path, cw ? cw->type : "TYPE");
    if (cw && (cw->precision[0] || cw->plan[0]) && (plan_path || strcmp(precision, "fp32") != 0))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s sets the precisions of worker %d; do not also give --precision/--plan",
                       cluster_path, r);
    const qs_profile *p = &prof->prof[k];
    qs_model *m = NULL;
    qs_status st = qs_sim_build(p, be, cw, precision, plan_path, allow_emulated, &m);
    *w = (qs_sim_worker){.type = cw ? cw->type : NULL, .profile = p, .m = m, .batch = p->batch};
    /* a profile taken under the worker's emulation already holds its slowdown */
    if (st == QS_OK) st = qs_sim_worker_emulation(p, cw, r, &w->slowdown, &w->slow_whole_step);
    return st;
}

/* The trace document: the events, and a name for every worker's process. */
static qs_status qs_sim_write_trace(const char *path, cJSON *trace, const qs_sim_worker *w, int n) {
    for (int r = 0; r < n; r++) { /* name the tracks */
        cJSON *e = cJSON_CreateObject(), *args = cJSON_CreateObject();
        char name[96];
        snprintf(name, sizeof name, "rank %d%s%s", r, w[r].type ? " " : "", w[r].type ? w[r].type : "");
        cJSON_AddStringToObject(e, "name", "process_name");
        cJSON_AddStringToObject(e, "ph", "M");
        cJSON_AddNumberToObject(e, "pid", r);
        cJSON_AddStringToObject(args, "name", name);
        cJSON_AddItemToObject(e, "args", args);
        cJSON_AddItemToArray(trace, e);
    }
    cJSON *t = cJSON_CreateObject();
    cJSON_AddItemToObject(t, "traceEvents", trace);
    qs_status st = qs_sim_write(path, t);
    cJSON_Delete(t);
    return st;
}

int qs_cmd_simulate(int argc, char **argv) {
    const char *cluster_path = NULL, *plan_path = NULL, *precision = "fp32", *profiles = NULL, *trace_path = NULL;
    double bucket_mb = 25;
    bool json = false, no_overlap = false, allow_emulated = false;
    qs_cli_opt opts[] = {
        {"profile", QS_CLI_STR, &profiles, "LIST", "FILE, or TYPE=FILE,... per device type (required)"},
        {"cluster", QS_CLI_STR, &cluster_path, "FILE", "the workers (docs/CLUSTERS.md); default: one worker"},
        {"plan", QS_CLI_STR, &plan_path, "FILE", "per-layer precisions (docs/PLANS.md)"},
        {"precision", QS_CLI_STR, &precision, "P", "precision of every Linear/Conv2d/MatMul (default fp32)"},
        {"allow-emulated", QS_CLI_FLAG, &allow_emulated, NULL, "permit precisions the backend only emulates"},
        {"bucket-mb", QS_CLI_DOUBLE, &bucket_mb, "MB", "gradient bucket size, as in training (default 25)"},
        {"no-overlap", QS_CLI_FLAG, &no_overlap, NULL, "all-reduce after backward, as train --no-overlap"},
        {"trace", QS_CLI_STR, &trace_path, "FILE", "write a Chrome trace (Perfetto) of the predicted iteration"},
        {"json", QS_CLI_FLAG, &json, NULL, "print the prediction as JSON"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "simulate", qs_simulate_summary);
    if (rc) return rc == 1 ? 0 : rc;
    if (!profiles) {
        fprintf(stderr, "qsync simulate: --profile is required\n");
        return 2;
    }
    if (!(bucket_mb > 0)) {
        fprintf(stderr, "qsync simulate: --bucket-mb must be > 0\n");
        return 2;
    }
    qs_profile_args prof;
    qs_cluster cluster;
    memset(&cluster, 0, sizeof cluster);
    qs_backend *be = NULL;
    qs_sim_worker *w = NULL;
    qs_sim_result res;
    memset(&res, 0, sizeof res);
    cJSON *trace = trace_path ? cJSON_CreateArray() : NULL;
    int n = 1;
    qs_status st = qs_profile_args_read(profiles, &prof);
    if (st == QS_OK && cluster_path) {
        st = qs_cluster_read(cluster_path, &cluster);
        n = cluster.n_workers;
    }
    if (st == QS_OK) st = qs_backend_cpu_create(1, &be);
    if (st == QS_OK && !(w = calloc((size_t)n, sizeof *w))) st = QS_FAIL(QS_ERR_OOM, "out of memory");
    for (int r = 0; r < n && st == QS_OK; r++)
        st = qs_sim_worker_of(&prof, be, cluster_path ? &cluster.workers[r] : NULL, r, cluster_path, precision,
                              plan_path, allow_emulated, &w[r]);
    qs_sim_options so = {.bucket_bytes = (size_t)(bucket_mb * 1048576.0), .overlap = !no_overlap};
    if (st == QS_OK) st = qs_simulate(w, n, &so, trace, &res);
    if (st == QS_OK && trace) {
        st = qs_sim_write_trace(trace_path, trace, w, n);
        trace = NULL;
    }
    if (st == QS_OK && json) {
        cJSON *doc = qs_sim_result_json(&res);
        char *s = doc ? cJSON_Print(doc) : NULL;
        if (s) puts(s);
        free(s);
        cJSON_Delete(doc);
    } else if (st == QS_OK) {
        qs_sim_print(&res);
    }
    for (int r = 0; w && r < n; r++) qs_model_free((qs_model *)w[r].m);
    free(w);
    qs_sim_result_free(&res);
    cJSON_Delete(trace);
    if (be) be->ops->destroy(be);
    qs_cluster_free(&cluster);
    qs_profile_args_free(&prof);
    return st == QS_OK ? 0 : qs_cmd_fail("simulate");
}
