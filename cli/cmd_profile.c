/* cli/cmd_profile.c — defines: `qsync profile`: measure a model's per-op costs at every precision on
 * this device and write the profile (src/predict/profile.h, docs/PROFILE.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/profile_file.h"

#include "commands.h"
#include "precision_args.h"
#include "core/atomic_file.h"
#include "io/cluster.h"
#include "parallel/mps.h"
#include "parallel/comm.h"
#include "options.h"
#include "predict/profile_job.h"

static const char *const qs_profile_summary =
    "Measure a model's costs on this device for the predictor: per op and precision the forward,\n"
    "backward-data and backward-weights times (medians of --reps steps after --warmup, from the\n"
    "engine's per-op timers) and memory; quantizing casts fitted as alpha + beta*elements; the\n"
    "optimizer step; device facts. Under mpirun every rank profiles the model at once (as they train,\n"
    "sharing the machine), then times the gradient all-reduce between them (alpha + beta*bytes);\n"
    "rank 0 writes its profile to --out (versioned JSON, format: docs/PROFILE.md).";

/* Print per run its step, ops, optimizer and memory, and the cast fits (the profile as the
 * replayer reads it). */
static void qs_profile_print(const qs_profile *p) {
    printf("profile of %s, batch %.0f:\n", p->model, (double)p->batch);
    for (int k = 0; k < p->n_runs; k++) {
        const qs_profile_prec_run *r = &p->runs[k];
        double ops = 0;
        for (int i = 0; i < r->n_ops; i++) { /* its categories, one by one in file order */
            ops += r->ops[i].forward_ms;
            ops += r->ops[i].backward_data_ms;
            ops += r->ops[i].backward_weights_ms;
            ops += r->ops[i].cast_ms;
        }
        printf("  %-5s %-8s step %8.2f ms (ops %.2f, optimizer %.2f), %.1f MiB allocated\n",
               qs_precision_name(r->precision), qs_prec_support_name(r->support), r->step_ms, ops, r->optimizer_ms,
               (double)r->memory.backend_in_use / 1048576.0);
    }
    for (int i = 0; i < p->n_casts; i++) {
        const qs_profile_cast_fit *c = &p->casts[i];
        printf("  cast %s -> %s: %.4f ms + %.3g ms/element (%d points)\n", qs_dtype_name(c->from), qs_dtype_name(c->to),
               c->alpha_ms, c->beta_ms_per_element, c->n_points);
    }
}

/* The worker this rank profiles for: --type's first worker, else this rank's entry (the world
 * must match); NULL without --cluster. */
static qs_status qs_profile_worker(const qs_cluster *c, const char *type, int rank, int world,
                                   const qs_cluster_worker **out) {
    *out = NULL;
    if (!type) return qs_cluster_worker_for(c, rank, world, out);
    for (int i = 0; i < c->n_workers && !*out; i++)
        if (strcmp(c->workers[i].type, type) == 0) *out = &c->workers[i];
    return *out ? QS_OK : QS_FAIL(QS_ERR_NOT_FOUND, "%s has no worker of type \"%s\"", c->origin, type);
}

/* --out with %t replaced by the device type. */
static void qs_profile_out_path(const char *pattern, const char *type, char *buf, size_t cap) {
    const char *t = strstr(pattern, "%t");
    if (!t) snprintf(buf, cap, "%s", pattern);
    else snprintf(buf, cap, "%.*s%s%s", (int)(t - pattern), pattern, type ? type : "default", t + 2);
}

/* With --cluster: this rank's worker (--type's first, else its own; its MPS share applied before
 * any CUDA context), its device type into *own_type (pointing into cluster) and whether this rank
 * writes its type's profile (the first rank of each type; with --type rank 0). */
static qs_status qs_profile_cluster(const char *cluster_path, const char *type, const char *out_path, int rank, int world,
                                    qs_cluster *cluster, qs_profile_job *job, const char **own_type, bool *writer) {
    QS_TRY(qs_cluster_read(cluster_path, cluster));
    QS_TRY(qs_cluster_check_devices(cluster));
    QS_TRY(qs_profile_worker(cluster, type, rank, world, &job->worker));
    if (!type) job->cluster = cluster; /* rank r is worker r (with --type every rank is one worker) */
    QS_TRY(qs_mps_apply(job->worker, rank)); /* before any CUDA context */
    *own_type = job->worker->type;
    *writer = type ? rank == 0 : true;
    for (int r = 0; !type && r < rank; r++) *writer &= strcmp(cluster->workers[r].type, *own_type) != 0;
    bool several = false;
    for (int r = 0; !type && r < world; r++) several |= strcmp(cluster->workers[r].type, *own_type) != 0;
    if (several && !strstr(out_path, "%t"))
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s has several device types: put %%t in --out (replaced by each type)",
                       cluster_path);
    return QS_OK;
}

/* Write the profile doc to path, once it reads back as a profile (what simulate and plan will
 * read), and print it unless quiet. */
static qs_status qs_profile_write(const cJSON *doc, const char *path, bool quiet) {
    char *text = doc ? cJSON_Print(doc) : NULL;
    qs_profile typed;
    memset(&typed, 0, sizeof typed);
    qs_status st = text ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory writing the profile");
    if (st == QS_OK) st = qs_profile_from_json(doc, path, &typed);
    if (st == QS_OK) st = qs_write_file_atomic(path, text, strlen(text));
    if (st == QS_OK && !quiet) {
        qs_profile_print(&typed);
        printf("written to %s\n", path);
    }
    qs_profile_free(&typed);
    free(text);
    return st;
}

int qs_cmd_profile(int argc, char **argv) {
    const char *model = NULL, *data = "fashion-mnist", *data_dir = NULL, *precs = NULL, *out_path = NULL;
    const char *optimizer = "sgd", *cluster_path = NULL, *type = NULL, *device = "cpu";
    int64_t batch = 64, width = 0;
    int threads = 0, warmup = 3, reps = 10;
    double bucket_mb = 25;
    bool allow_emulated = false, quiet = false;
    const char *fp8_scaling = "current";
    qs_cli_opt opts[] = {
        {"model", QS_CLI_STR, &model, "NAME", "built-in model (required; see `qsync models`)"},
        {"width", QS_CLI_I64, &width, "N", "model width (0 = the architecture's default)"},
        {"batch", QS_CLI_I64, &batch, "N", "the worker's local batch (default 64)"},
        {"data", QS_CLI_STR, &data, "NAME", "dataset whose input shape and samples are used (default fashion-mnist)"},
        {"data-dir", QS_CLI_STR, &data_dir, "DIR", "dataset directory"},
        {"precisions", QS_CLI_STR, &precs, "LIST", "comma-separated (default: every precision this device runs natively)"},
        {"allow-emulated", QS_CLI_FLAG, &allow_emulated, NULL, "also profile precisions the backend only emulates"},
        {"fp8-scaling", QS_CLI_STR, &fp8_scaling, "MODE", "FP8 scales: current (default) or delayed[:N], as in training"},
        {"optimizer", QS_CLI_STR, &optimizer, "NAME", "sgd (default, momentum 0.9) or adamw"},
        {"threads", QS_CLI_INT, &threads, "N", "compute threads (default OpenMP's)"},
        {"device", QS_CLI_STR, &device, "D", "cpu (default), cuda or cuda:N (a cluster's cuda worker: its own)"},
        {"warmup", QS_CLI_INT, &warmup, "N", "untimed steps per precision (default 3)"},
        {"reps", QS_CLI_INT, &reps, "N", "timed steps per precision (default 10; medians)"},
        {"bucket-mb", QS_CLI_DOUBLE, &bucket_mb, "MB", "under mpirun: gradient bucket size, as in training (default 25)"},
        {"cluster", QS_CLI_STR, &cluster_path, "FILE", "profile as a worker of this cluster (its threads and emulation)"},
        {"type", QS_CLI_STR, &type, "LABEL", "with --cluster: the first worker of this type (default: each rank its own)"},
        {"out", QS_CLI_STR, &out_path, "FILE", "where to write the profile (required; %t = the worker's type)"},
        {"quiet", QS_CLI_FLAG, &quiet, NULL, "no progress or summary"},
    };
    int rc = qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "profile", qs_profile_summary);
    if (rc) return rc == 1 ? 0 : rc;
    if (!model || !out_path) {
        fprintf(stderr, "qsync profile: --model and --out are required\n");
        return 2;
    }
    if (batch < 1 || warmup < 1 || reps < 3 || width < 0 || !(bucket_mb > 0)) {
        fprintf(stderr, "qsync profile: --batch and --warmup must be >= 1, --reps >= 3, --width >= 0, --bucket-mb > 0\n");
        return 2;
    }
    int fp8_history = 0;
    if ((rc = qs_cli_fp8_scaling("profile", fp8_scaling, &fp8_history))) return rc;
    qs_precision list[QS_PREC_COUNT];
    char err[160];
    qs_profile_job job = {.model = model, .width = width, .batch = batch, .data = data, .data_dir = data_dir,
                          .precs = list, .allow_emulated = allow_emulated, .fp8_amax_history = fp8_history,
                          .threads = threads, .warmup = warmup, .reps = reps, .bucket_bytes = (size_t)(bucket_mb * 1048576.0)};
    if (precs && !qs_precision_list_parse(precs, list, QS_PREC_COUNT, &job.n_precs, err, sizeof err)) {
        fprintf(stderr, "qsync profile: --precisions: %s\n", err);
        return 2;
    }
    if (!qs_cli_parse_device(device, &job.cuda, &job.cuda_device)) {
        fprintf(stderr, "qsync profile: --device must be cpu, cuda or cuda:N (got '%s')\n", device);
        return 2;
    }
    if (qs_optim_kind_parse(optimizer, &job.optimizer) != QS_OK) return qs_cmd_fail("profile");
    qs_comm *comm = NULL;
    if (qs_comm_init(&argc, &argv, &comm) != QS_OK) return qs_cmd_fail("profile");
    const int rank = qs_comm_rank(comm), world = qs_comm_world(comm);
    job.comm = comm;
    qs_logger lg;
    qs_logger_init(&lg, rank, world, quiet ? QS_LOG_WARN : QS_LOG_INFO);
    job.log = &lg;
    cJSON *doc = NULL;
    qs_cluster cluster = {0};
    const char *own_type = NULL;
    bool writer = rank == 0; /* without a cluster rank 0 writes; with one, the first rank of each type */
    qs_status st = cluster_path ? qs_profile_cluster(cluster_path, type, out_path, rank, world, &cluster, &job, &own_type,
                                                     &writer) : QS_OK;
    if (st == QS_OK) st = qs_profile_job_run(&job, &doc);
    else if (world > 1) { /* the peers would wait in the profile for this rank */
        fprintf(stderr, "qsync profile: error: %s\n", qs_last_error());
        qs_comm_abort(comm, 1);
    }
    char path[4096];
    qs_profile_out_path(out_path, own_type, path, sizeof path);
    qs_cluster_free(&cluster); /* own_type points into it */
    if (st == QS_OK && writer) st = qs_profile_write(doc, path, quiet);
    cJSON_Delete(doc);
    qs_comm_finalize(comm);
    return st == QS_OK ? 0 : qs_cmd_fail("profile");
}
