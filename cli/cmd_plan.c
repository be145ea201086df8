/* cli/cmd_plan.c — defines: `qsync plan`: choose per device type the precisions that keep a hybrid
 * cluster in step at the least indicator cost (src/plan/plan_build.h; docs/PLANS.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "profile_args.h"
#include "core/atomic_file.h"
#include "io/plan_file.h"
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

/* What the written plan holds (read back as a plan file): T, the prediction, per type its layers
 * below the base and the solver's figures, per worker its iteration and memory. */
static void qs_plan_print(const qs_plan *plan, const char *out) {
    const qs_plan_predictions *pred = &plan->predictions;
    const char *base = pred->base_precision;
    printf("T = %.3f ms (%s); replayed synchronized iteration %.3f ms after %d round(s)\n", pred->target_ms,
           pred->target_source, pred->synchronized_ms, (int)pred->rounds);
    for (int i = 0; i < pred->n_types; i++) {
        const qs_plan_type_prediction *ty = &pred->types[i];
        printf("  %s: %d layer(s) below %s, sum omega %.6g", ty->type, (int)ty->quantized_layers, base, ty->omega);
        if (ty->solver[0]) {
            printf(" (%s; all %s would take %.3f ms; model %.3f ms at target %.3f ms", ty->solver, base,
                   ty->base_synchronized_ms, ty->model_ms, ty->model_target_ms);
            if (!isnan(ty->greedy_gap))
                printf("; greedy %.6g, %.2f%% above the optimum", ty->greedy_omega, 100 * ty->greedy_gap);
            printf(")");
        } else {
            printf(" (fastest type)");
        }
        printf("\n");
        for (int k = 0; k < plan->n_types; k++) {
            const qs_plan_section *sec = &plan->types[k];
            if (strcmp(sec->type, ty->type) != 0) continue;
            for (int l = 0; l < sec->n_layers; l++)
                if (strcmp(qs_precision_name(sec->layers[l].prec), base) != 0)
                    printf("    %s: %s\n", sec->layers[l].name, qs_precision_name(sec->layers[l].prec));
        }
    }
    for (int r = 0; r < pred->n_workers; r++) {
        const qs_plan_worker_prediction *w = &pred->workers[r];
        printf("  rank %d (%s): %.3f ms, %.1f MiB\n", (int)w->rank, w->type[0] ? w->type : "?", w->iteration_ms,
               w->memory_bytes / 1048576.0);
    }
    printf("plan written to %s\n", out);
}

/* The profiles' model and width against --model and --width. */
static qs_status qs_plan_check_args(const qs_profile *p, const char *model, int64_t width) {
    if (strcmp(p->model, model) != 0)
        return QS_FAIL(QS_ERR_MISMATCH, "profile %s is of model %s, not --model %s: profile %s", p->origin, p->model,
                       model, model);
    if (width > 0 && !qs_plan_config_has_width(p->config, width))
        return QS_FAIL(QS_ERR_MISMATCH, "profile %s is of %s built with \"%s\", not --width %lld: profile at that width",
                       p->origin, model, p->config, (long long)width);
    return QS_OK;
}

/* The cluster's workers with their types' profiles. */
static qs_status qs_plan_workers(const qs_cluster *cluster, const qs_profile_args *prof, const char *cluster_path,
                                 qs_planb_worker *w) {
    const qs_profile **wprof = calloc((size_t)cluster->n_workers + 1, sizeof *wprof);
    qs_status st = wprof ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory");
    for (int r = 0; r < cluster->n_workers && st == QS_OK; r++) {
        int k = qs_profile_args_for(prof, cluster->workers[r].type);
        if (k < 0)
            st = QS_FAIL(QS_ERR_NOT_FOUND, "no profile for worker %d of type \"%s\" (%s): give --profile %s=FILE", r,
                         cluster->workers[r].type, cluster_path, cluster->workers[r].type);
        else wprof[r] = &prof->prof[k];
    }
    if (st == QS_OK) st = qs_planb_workers_from_cluster(cluster, wprof, w);
    free(wprof);
    return st;
}

/* Write the plan document to out; print it (json) or what it holds. */
static qs_status qs_plan_output(const cJSON *doc, const char *out, bool json) {
    char *text = cJSON_Print(doc);
    qs_status st = text ? qs_write_file_atomic(out, text, strlen(text)) : QS_FAIL(QS_ERR_OOM, "out of memory writing %s", out);
    if (st == QS_OK && json) puts(text);
    qs_plan plan;
    if (st == QS_OK && !json) st = qs_plan_parse(text, out, &plan);
    if (st == QS_OK && !json) {
        qs_plan_print(&plan, out);
        qs_plan_free(&plan);
    }
    free(text);
    return st;
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
    qs_indicator_file ind;
    memset(&ind, 0, sizeof ind);
    qs_planb_worker *w = NULL;
    cJSON *doc = NULL;
    qs_status st = qs_profile_args_read(profiles, &prof);
    if (st == QS_OK) st = qs_cluster_read(cluster_path, &cluster);
    if (st == QS_OK) st = qs_indicator_file_read(indicator, &ind);
    if (st == QS_OK && !(w = calloc((size_t)cluster.n_workers, sizeof *w))) st = QS_FAIL(QS_ERR_OOM, "out of memory");
    if (st == QS_OK) st = qs_plan_workers(&cluster, &prof, cluster_path, w);
    if (st == QS_OK) st = qs_plan_check_args(&prof.prof[0], model, width);
    if (st == QS_OK) {
        qs_planb_request rq = {.workers = w, .n_workers = cluster.n_workers, .arch = model, .config = prof.prof[0].config,
                               .batch = batch, .indicator = &ind, .target_ms = target_ms, .greedy_only = greedy_only,
                               .tolerance = tolerance_pct / 100, .max_rounds = rounds,
                               .bucket_bytes = (size_t)(bucket_mb * 1048576.0), .overlap = !no_overlap};
        st = qs_plan_build(&rq, &doc);
    }
    if (st == QS_OK) st = qs_plan_output(doc, out, json);
    cJSON_Delete(doc);
    qs_indicator_file_free(&ind);
    free(w);
    qs_cluster_free(&cluster);
    qs_profile_args_free(&prof);
    return st == QS_OK ? 0 : qs_cmd_fail("plan");
}
