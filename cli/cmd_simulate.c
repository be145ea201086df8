/* cli/cmd_simulate.c — `qsync simulate`: predict one training iteration of every worker of a
 * cluster for a precision plan, from profiles (src/predict/simulate.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "profile_args.h"
#include "core/atomic_file.h"
#include "backends/backends.h"
#include "core/json_doc.h"
#include "io/cluster.h"
#include "parallel/cpu_quota.h"
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
static qs_status qs_sim_build(const cJSON *prof, const char *prof_path, qs_backend *be, const qs_cluster_worker *cw,
                              const char *precision, const char *plan_path, bool allow_emulated, qs_model **out) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(prof, "model"), *config = cJSON_GetObjectItemCaseSensitive(prof, "config");
    if (!cJSON_IsString(model) || !cJSON_IsString(config))
        return QS_FAIL(QS_ERR_FORMAT, "%s lacks \"model\" or \"config\": not a qsync profile", prof_path);
    QS_TRY(qs_models_build_config(model->valuestring, config->valuestring, out));
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

static void qs_sim_print(const cJSON *doc) {
    const cJSON *w;
    const cJSON *comm = cJSON_GetObjectItem(doc, "comm");
    printf("predicted iteration: %.2f ms, mean %.2f ms (slowest: rank %d; jitter %+.2f ms; communication: %s from "
           "the %s, %.2f ms in %d buckets)\n",
           cJSON_GetObjectItem(doc, "iteration_ms")->valuedouble, cJSON_GetObjectItem(doc, "iteration_mean_ms")->valuedouble,
           cJSON_GetObjectItem(doc, "slowest")->valueint, cJSON_GetObjectItem(doc, "jitter_ms")->valuedouble,
           cJSON_GetObjectItem(comm, "model")->valuestring, cJSON_GetObjectItem(comm, "source")->valuestring,
           cJSON_GetObjectItem(comm, "allreduce_ms")->valuedouble, cJSON_GetObjectItem(comm, "buckets")->valueint);
    const cJSON *cal = cJSON_GetObjectItem(doc, "calibration");
    if (cJSON_IsTrue(cJSON_GetObjectItem(cal, "applied")))
        printf("calibrated against the synchronized steps measured in place: %+.2f ms on the replay's %.2f ms\n",
               cJSON_GetObjectItem(cal, "residual_ms")->valuedouble, cJSON_GetObjectItem(cal, "replayed_ms")->valuedouble);
    else if (cal)
        printf("not calibrated: %s\n", cJSON_GetObjectItem(cal, "reason")->valuestring);
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(doc, "workers")) {
        const cJSON *type = cJSON_GetObjectItem(w, "type");
        printf("  rank %d%s%s%s: data %.2f, outside ops %.2f, forward %.2f, backward %.2f, gradient wait %.2f, optimizer "
               "%.2f ms -> %.2f ms; memory %.1f MiB%s\n",
               cJSON_GetObjectItem(w, "rank")->valueint, type ? " (" : "", type ? type->valuestring : "", type ? ")" : "",
               cJSON_GetObjectItem(w, "data_ms")->valuedouble, cJSON_GetObjectItem(w, "untimed_ms")->valuedouble,
               cJSON_GetObjectItem(w, "forward_ms")->valuedouble,
               cJSON_GetObjectItem(w, "backward_ms")->valuedouble, cJSON_GetObjectItem(w, "comm_wait_ms")->valuedouble,
               cJSON_GetObjectItem(w, "optimizer_ms")->valuedouble, cJSON_GetObjectItem(w, "iteration_ms")->valuedouble,
               cJSON_GetObjectItem(w, "memory_bytes")->valuedouble / 1048576.0,
               cJSON_GetObjectItem(w, "slowdown")->valuedouble > 1 ? " (emulated slowdown)" : "");
    }
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
    cJSON *doc = NULL, *trace = trace_path ? cJSON_CreateArray() : NULL;
    int n = 1;
    qs_status st = qs_profile_args_read(profiles, &prof);
    if (st == QS_OK && cluster_path) {
        st = qs_cluster_read(cluster_path, &cluster);
        n = cluster.n_workers;
    }
    if (st == QS_OK) st = qs_backend_cpu_create(1, &be);
    if (st == QS_OK && !(w = calloc((size_t)n, sizeof *w))) st = QS_FAIL(QS_ERR_OOM, "out of memory");
    for (int r = 0; r < n && st == QS_OK; r++) {
        const qs_cluster_worker *cw = cluster_path ? &cluster.workers[r] : NULL;
        int k = qs_profile_args_for(&prof, cw ? cw->type : NULL);
        if (k < 0) {
            st = QS_FAIL(QS_ERR_NOT_FOUND, "no profile for worker %d of type \"%s\" (%s): give --profile %s=FILE", r,
                         cw ? cw->type : "", cluster_path, cw ? cw->type : "TYPE");
            break;
        }
        if (cw && (cw->precision[0] || cw->plan[0]) && (plan_path || strcmp(precision, "fp32") != 0)) {
            st = QS_FAIL(QS_ERR_INVALID_ARG, "%s sets the precisions of worker %d; do not also give --precision/--plan",
                         cluster_path, r);
            break;
        }
        qs_model *m = NULL;
        st = qs_sim_build(prof.doc[k], prof.path[k], be, cw, precision, plan_path, allow_emulated, &m);
        w[r] = (qs_sim_worker){.type = cw ? cw->type : NULL, .profile = prof.doc[k], .profile_path = prof.path[k], .m = m,
                               .batch = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(prof.doc[k], "batch"))};
        /* a profile taken under the worker's emulation already holds its slowdown */
        const cJSON *pe = cJSON_GetObjectItem(prof.doc[k], "emulation");
        double ps = pe ? cJSON_GetNumberValue(cJSON_GetObjectItem(pe, "slowdown")) : 1, ws = cw ? cw->slowdown : 1;
        if (st == QS_OK && pe && !(ps == ws))
            st = QS_FAIL(QS_ERR_MISMATCH, "%s was taken under an emulated slowdown of %g, but worker %d has %g: "
                         "profile with --cluster for this cluster", prof.path[k], ps, r, ws);
        if (st == QS_OK && !pe && ws > 1) {
            w[r].slowdown = ws;
            w[r].slow_whole_step = strcmp(cw->emulation_method, "cgroup") == 0 ||
                                   (strcmp(cw->emulation_method, "auto") == 0 && qs_cpu_quota_available(NULL, 0));
        }
    }
    qs_sim_options so = {.bucket_bytes = (size_t)(bucket_mb * 1048576.0), .overlap = !no_overlap};
    if (st == QS_OK) st = qs_simulate(w, n, &so, trace, &doc);
    if (st == QS_OK && trace) {
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
        trace = NULL;
        st = qs_sim_write(trace_path, t);
        cJSON_Delete(t);
    }
    if (st == QS_OK) {
        if (json) {
            char *s = cJSON_Print(doc);
            if (s) puts(s);
            free(s);
        } else {
            qs_sim_print(doc);
        }
    }
    for (int r = 0; w && r < n; r++) qs_model_free((qs_model *)w[r].m);
    free(w);
    cJSON_Delete(doc);
    cJSON_Delete(trace);
    if (be) be->ops->destroy(be);
    qs_cluster_free(&cluster);
    qs_profile_args_free(&prof);
    return st == QS_OK ? 0 : qs_cmd_fail("simulate");
}
