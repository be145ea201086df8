/* cli/cmd_plan.c — `qsync plan`: choose per device type the precisions that keep a hybrid
 * cluster in step at the least indicator cost (src/plan/plan_build.h; docs/PLANS.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "profile_args.h"
#include "core/atomic_file.h"
#include "core/json_doc.h"
#include "io/cluster.h"
#include "options.h"
#include "plan/plan_build.h"


static const char *const qs_plan_summary =
    "Choose the precision plan of a hybrid cluster: for every device type slower than the fastest,\n"
    "the per-layer precisions of least indicator cost (Σω) whose predicted synchronized iteration\n"
    "is at most T (the fastest type's, every layer at the base precision, the profiles' highest; or\n"
    "--target-ms) within the workers' memory. Costs come from the profiles (qsync profile) as the\n"
    "replayer (qsync simulate) charges them; the plan is checked by a full replay and re-solved\n"
    "tighter while that misses T. Writes a plan file (version 2, a section per device type) with its\n"
    "predictions for `qsync train --plan`.";


/* Whether the config string has the word "width=W". */
static bool qs_plan_config_has_width(const char *config, int64_t width) {
    char want[40];
    snprintf(want, sizeof want, "width=%lld", (long long)width);
    size_t n = strlen(want);
    for (const char *s = strstr(config, want); s; s = strstr(s + 1, want))
        if ((s == config || s[-1] == ' ') && (s[n] == '\0' || s[n] == ' ')) return true;
    return false;
}

static void qs_plan_print(const cJSON *doc, const char *out) {
    const cJSON *pred = cJSON_GetObjectItem(doc, "predictions"), *ty;
    const char *base = cJSON_GetObjectItem(pred, "base_precision")->valuestring;
    printf("T = %.3f ms (%s); replayed synchronized iteration %.3f ms after %d round(s)\n",
           cJSON_GetObjectItem(pred, "target_ms")->valuedouble, cJSON_GetObjectItem(pred, "target_source")->valuestring,
           cJSON_GetObjectItem(pred, "synchronized_ms")->valuedouble, cJSON_GetObjectItem(pred, "rounds")->valueint);
    cJSON_ArrayForEach(ty, cJSON_GetObjectItem(pred, "types")) {
        const cJSON *solver = cJSON_GetObjectItem(ty, "solver");
        printf("  %s: %d layer(s) below %s, sum omega %.6g", ty->string,
               cJSON_GetObjectItem(ty, "quantized_layers")->valueint, base, cJSON_GetObjectItem(ty, "omega")->valuedouble);
        if (solver) {
            printf(" (%s; all %s would take %.3f ms; model %.3f ms at target %.3f ms", solver->valuestring, base,
                   cJSON_GetObjectItem(ty, "base_synchronized_ms")->valuedouble,
                   cJSON_GetObjectItem(ty, "model_ms")->valuedouble, cJSON_GetObjectItem(ty, "model_target_ms")->valuedouble);
            const cJSON *gap = cJSON_GetObjectItem(ty, "greedy_gap");
            if (gap) printf("; greedy %.6g, %.2f%% above the optimum", cJSON_GetObjectItem(ty, "greedy_omega")->valuedouble,
                            100 * gap->valuedouble);
            printf(")");
        } else {
            printf(" (fastest type)");
        }
        printf("\n");
        const cJSON *sec = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "device_types"), ty->string), *l;
        cJSON_ArrayForEach(l, cJSON_GetObjectItem(sec, "precisions"))
            if (strcmp(l->valuestring, base) != 0) printf("    %s: %s\n", l->string, l->valuestring);
    }
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(pred, "workers")) {
        const cJSON *type = cJSON_GetObjectItem(w, "type");
        printf("  rank %d (%s): %.3f ms, %.1f MiB\n", cJSON_GetObjectItem(w, "rank")->valueint,
               type ? type->valuestring : "?", cJSON_GetObjectItem(w, "iteration_ms")->valuedouble,
               cJSON_GetObjectItem(w, "memory_bytes")->valuedouble / 1048576.0);
    }
    printf("plan written to %s\n", out);
}

int qs_cmd_plan(int argc, char **argv) {
    const char *cluster_path = NULL, *model = NULL, *profiles = NULL, *indicator = NULL, *out = NULL;
    int64_t width = 0, batch = 0;
    double target_ms = 0, bucket_mb = 25, tolerance_pct = 0.5;
    bool json = false, exact = false, greedy_only = false, no_overlap = false;
    int rounds = 4;
    qs_cli_opt opts[] = {
        {"cluster", QS_CLI_STR, &cluster_path, "FILE", "the workers (docs/CLUSTERS.md; required)"},
        {"model", QS_CLI_STR, &model, "NAME", "the model (required; must be the profiles')"},
        {"width", QS_CLI_I64, &width, "N", "its width, checked against the profiles (0 = as profiled)"},
        {"batch", QS_CLI_I64, &batch, "N", "the local batch of every worker (required; the profiles')"},
        {"profile", QS_CLI_STR, &profiles, "LIST", "TYPE=FILE,... per device type, or FILE for all (required)"},
        {"indicator", QS_CLI_STR, &indicator, "FILE", "per-layer ω (qsync indicate; required)"},
        {"target-ms", QS_CLI_DOUBLE, &target_ms, "MS", "T (default: the fastest type's iteration, all at the base)"},
        {"exact", QS_CLI_FLAG, &exact, NULL, "solve exactly (GLPK) as well as greedily (the default)"},
        {"greedy-only", QS_CLI_FLAG, &greedy_only, NULL, "only the greedy"},
        {"tolerance", QS_CLI_DOUBLE, &tolerance_pct, "PCT", "a replay within T + PCT% meets T (default 0.5)"},
        {"rounds", QS_CLI_INT, &rounds, "N", "solve-and-replay rounds (default 4)"},
        {"bucket-mb", QS_CLI_DOUBLE, &bucket_mb, "MB", "gradient bucket size, as in training (default 25)"},
        {"no-overlap", QS_CLI_FLAG, &no_overlap, NULL, "all-reduce after backward, as train --no-overlap"},
        {"out", QS_CLI_STR, &out, "FILE", "the plan file to write (required)"},
        {"json", QS_CLI_FLAG, &json, NULL, "print the plan document as JSON"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "plan", qs_plan_summary);
    if (rc) return rc == 1 ? 0 : rc;
    if (!cluster_path || !model || !profiles || !indicator || !out || batch <= 0) {
        fprintf(stderr, "qsync plan: --cluster, --model, --batch, --profile, --indicator and --out are required\n");
        return 2;
    }
    if (exact && greedy_only) {
        fprintf(stderr, "qsync plan: --exact and --greedy-only exclude each other\n");
        return 2;
    }
    if (width < 0 || target_ms < 0 || !(bucket_mb > 0) || tolerance_pct < 0 || rounds < 1) {
        fprintf(stderr, "qsync plan: --width, --target-ms and --tolerance must be >= 0, --bucket-mb > 0, --rounds >= 1\n");
        return 2;
    }
    qs_profile_args prof;
    memset(&prof, 0, sizeof prof);
    qs_cluster cluster;
    memset(&cluster, 0, sizeof cluster);
    qs_planb_worker *w = NULL;
    cJSON *doc = NULL, *ind = NULL;
    qs_status st = qs_profile_args_read(profiles, &prof);
    if (st == QS_OK) st = qs_cluster_read(cluster_path, &cluster);
    if (st == QS_OK) st = qs_json_read(indicator, (size_t)64 << 20, "indicator", &ind);
    if (st == QS_OK && !(w = calloc((size_t)cluster.n_workers, sizeof *w))) st = QS_FAIL(QS_ERR_OOM, "out of memory");
    const cJSON **wprof = calloc((size_t)cluster.n_workers + 1, sizeof *wprof);
    const char **wpath = calloc((size_t)cluster.n_workers + 1, sizeof *wpath);
    if (st == QS_OK && (!wprof || !wpath)) st = QS_FAIL(QS_ERR_OOM, "out of memory");
    for (int r = 0; r < cluster.n_workers && st == QS_OK; r++) {
        int k = qs_profile_args_for(&prof, cluster.workers[r].type);
        if (k < 0)
            st = QS_FAIL(QS_ERR_NOT_FOUND, "no profile for worker %d of type \"%s\" (%s): give --profile %s=FILE", r,
                         cluster.workers[r].type, cluster_path, cluster.workers[r].type);
        else {
            wprof[r] = prof.doc[k];
            wpath[r] = prof.path[k];
        }
    }
    if (st == QS_OK) st = qs_planb_workers_from_cluster(&cluster, wprof, wpath, w);
    const cJSON *config = prof.n > 0 ? cJSON_GetObjectItem(prof.doc[0], "config") : NULL;
    const cJSON *pmodel = prof.n > 0 ? cJSON_GetObjectItem(prof.doc[0], "model") : NULL;
    if (st == QS_OK && (!cJSON_IsString(config) || !cJSON_IsString(pmodel)))
        st = QS_FAIL(QS_ERR_FORMAT, "%s lacks \"model\" or \"config\": not a qsync profile", prof.path[0]);
    if (st == QS_OK && strcmp(pmodel->valuestring, model) != 0)
        st = QS_FAIL(QS_ERR_MISMATCH, "profile %s is of model %s, not --model %s: profile %s", prof.path[0],
                     pmodel->valuestring, model, model);
    if (st == QS_OK && width > 0 && !qs_plan_config_has_width(config->valuestring, width))
        st = QS_FAIL(QS_ERR_MISMATCH, "profile %s is of %s built with \"%s\", not --width %lld: profile at that width",
                     prof.path[0], model, config->valuestring, (long long)width);
    if (st == QS_OK) {
        qs_planb_request rq = {.workers = w, .n_workers = cluster.n_workers, .arch = model, .config = config->valuestring,
                               .batch = batch, .indicator = ind, .indicator_path = indicator, .target_ms = target_ms,
                               .greedy_only = greedy_only, .tolerance = tolerance_pct / 100, .max_rounds = rounds,
                               .bucket_bytes = (size_t)(bucket_mb * 1048576.0), .overlap = !no_overlap};
        st = qs_plan_build(&rq, &doc);
    }
    if (st == QS_OK) {
        char *text = cJSON_Print(doc);
        st = text ? qs_write_file_atomic(out, text, strlen(text)) : QS_FAIL(QS_ERR_OOM, "out of memory writing %s", out);
        if (st == QS_OK) {
            if (json) puts(text);
            else qs_plan_print(doc, out);
        }
        free(text);
    }
    cJSON_Delete(doc);
    cJSON_Delete(ind);
    free(w);
    free(wprof);
    free(wpath);
    qs_cluster_free(&cluster);
    qs_profile_args_free(&prof);
    return st == QS_OK ? 0 : qs_cmd_fail("plan");
}
