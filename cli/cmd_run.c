/* cli/cmd_run.c — defines: `qsync run`: the QSync pipeline on a cluster (src/run/run_job.h,
 * docs/RUN.md). Started without a launcher, it starts itself under mpirun with one rank per
 * worker of the cluster. */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "precision_args.h"
#include "io/cluster.h"
#include "parallel/mps.h"
#include "parallel/comm.h"
#include "options.h"
#include "run/run_job.h"
#include "run/run_report.h"
#include "stop_signals.h"

static const char *const qs_run_summary =
    "The QSync pipeline on a hybrid cluster: profile every device type (each worker under its own\n"
    "threads and emulated slowdown), measure the indicator, plan the precisions of every slower type\n"
    "(least sum of omega within the fastest type's predicted iteration and the memory caps), broadcast\n"
    "the plan, then train the same job once per compared arm and seed and report predicted against\n"
    "measured iteration times, throughput, the gap closed, test accuracy and loss curves against\n"
    "training all at the base precision (--base-precision: fp32 on a CPU; on a GPU give\n"
    "--base-precision bf16 --low-precision fp8; docs/RUN.md). Arms: qsync (the plan), base (named by\n"
    "its precision, e.g. fp32: all at the base, synchronous), low (named by its precision, e.g. int8:\n"
    "uniform --low-precision on the slower types), dynamic (all at the base, local batches by\n"
    "measured speed), ideal (all at the base without the emulated slowdowns). Started without mpirun\n"
    "it launches itself under mpirun with one rank per worker. Outputs go to --out: profiles,\n"
    "indicator, plan, metrics, report.json.";

#define QS_RUN_DEFAULT_CLUSTER "examples/clusters/cpu-hybrid.json"

/* Set by SIGINT/SIGTERM: the running training job checkpoints nothing and stops after its step. */
static atomic_int qs_run_interrupted;

/* The default cluster file, found from the executable: <its directory>/../examples/... (the
 * build tree sits in the source tree: build/qsync → examples/). */
static const char *qs_run_default_cluster(char *buf, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(buf, cap, "%s/../%s", exe, QS_RUN_DEFAULT_CLUSTER);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

/* Not under a launcher: run this same command under `mpirun -np <workers>` (exec; returns only
 * on failure). QSYNC_MPIRUN overrides the launcher's path. */
static int qs_run_launch(int argc, char **argv, int workers, const char *cluster_path, bool cluster_given) {
    char exe[PATH_MAX], np[16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "qsync run: error: cannot find this executable to launch it under mpirun\n");
        return 1;
    }
    exe[n] = '\0';
    snprintf(np, sizeof np, "%d", workers);
    const char *mpirun = getenv("QSYNC_MPIRUN") ? getenv("QSYNC_MPIRUN") : "mpirun";
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char **args = calloc((size_t)argc + 12, sizeof *args);
    if (!args) return 1;
    int k = 0;
    args[k++] = (char *)mpirun;
    args[k++] = "-np";
    args[k++] = np;
    if (geteuid() == 0) args[k++] = "--allow-run-as-root"; /* Open MPI refuses root otherwise */
    if (cores > 0 && workers > cores) args[k++] = "--oversubscribe";
    args[k++] = exe;
    for (int i = 1; i < argc; i++) args[k++] = argv[i];
    if (!cluster_given) { /* every rank must read the same default */
        args[k++] = "--cluster";
        args[k++] = (char *)cluster_path;
    }
    args[k] = NULL;
    fprintf(stderr, "qsync run: launching %d ranks: %s -np %s%s %s run ...\n", workers, mpirun, np,
            geteuid() == 0 ? " --allow-run-as-root" : "", exe);
    fflush(stderr);
    execvp(mpirun, args);
    fprintf(stderr, "qsync run: error: cannot start %s (%s is needed for a cluster of %d workers; Debian: openmpi-bin, "
            "or start qsync run under your own launcher)\n", mpirun, mpirun, workers);
    free(args);
    return 1;
}

/* The command line of `qsync run` beyond the run's configuration. */
typedef struct qs_run_cli {
    const char *menu, *cluster_path, *out_dir, *arms, *base, *low, *method, *optimizer, *plot;
    const char *grad_rounding, *weight_scales, *fp8_scaling;
    double bucket_mb;
    bool json, verbose, quiet, no_launch;
} qs_run_cli;

/* The configuration's defaults and the command line's. */
static void qs_run_defaults(qs_run_config *c, qs_run_cli *a) {
    memset(c, 0, sizeof *c);
    qs_train_config_defaults(&c->train);
    c->seeds = 1;
    c->train.log_every = 10;
    c->low_precision = QS_PREC_INT8;
    c->profile_warmup = 3;
    c->profile_reps = 20;
    c->indicator_batches = 8;
    c->gamma = 4;
    *a = (qs_run_cli){.out_dir = "runs/qsync-run", .arms = "qsync,base,low,dynamic,ideal", .base = "fp32",
                      .low = NULL, .method = "gvar", .optimizer = "sgd", .fp8_scaling = "current", .bucket_mb = 25};
}

/* The command line parsed into c and a; 0, or the exit status (1: --help shown). */
static int qs_run_parse(int argc, char **argv, qs_run_config *c, qs_run_cli *a) {
    qs_cli_opt opts[] = {
        {"cluster", QS_CLI_STR, &a->cluster_path, "FILE", "the workers (docs/CLUSTERS.md; default " QS_RUN_DEFAULT_CLUSTER ")"},
        {"model", QS_CLI_STR, &c->train.model, "NAME", "model (default cnn)"},
        {"width", QS_CLI_I64, &c->train.model_opt.width, "N", "model width (0 = the architecture's default)"},
        {"data", QS_CLI_STR, &c->train.data, "NAME", "fashion-mnist (default), cifar10, synthetic[:HxWxC], fortunes[:T], fortune-topics[:T], tokens:PATH[:T[:V]], synthetic-text:V:T (docs/DATA.md)"},
        {"data-dir", QS_CLI_STR, &c->train.data_dir, "DIR", "dataset directory"},
        {"batch", QS_CLI_I64, &c->train.batch, "N", "global batch, split evenly over the workers (default 128)"},
        {"epochs", QS_CLI_I64, &c->train.epochs, "N", "epochs per run (default 1; ignored with --steps)"},
        {"steps", QS_CLI_I64, &c->train.steps, "N", "optimizer steps per run"},
        {"lr", QS_CLI_FLOAT, &c->train.optim.lr, "X", "peak learning rate (default 0.1)"},
        {"optimizer", QS_CLI_STR, &a->optimizer, "NAME", "sgd (default) or adamw"},
        {"train-subset", QS_CLI_I64, &c->train.train_subset, "N", "train on the first N samples only"},
        {"eval-subset", QS_CLI_I64, &c->train.eval_subset, "N", "evaluate on the first N test samples only"},
        {"log-every", QS_CLI_I64, &c->train.log_every, "N", "loss records every N steps, for the curves (default 10)"},
        {"seed", QS_CLI_U64, &c->train.seed, "N", "first seed (default 1)"},
        {"seeds", QS_CLI_INT, &c->seeds, "N", "seeds per arm, paired across arms (default 1)"},
        {"arms", QS_CLI_STR, &a->arms, "LIST", "compared arms: qsync, base (or its precision, fp32), low (or its "
         "precision, int8), dynamic, ideal (default all)"},
        {"base-precision", QS_CLI_STR, &a->base, "P", "what every layer trains at outside the plan, profiled first "
         "(default fp32; give bf16 on a GPU)"},
        {"low-precision", QS_CLI_STR, &a->low, "P", "the low arm's uniform precision on slower workers, below the base "
         "(default int8, measured emulated where the CPU only emulates it; give fp8 on a GPU)"},
        {"precisions", QS_CLI_STR, &a->menu, "LIST", "the precisions profiled and planned from, the base first (default: "
         "the base and every lower one the device runs natively; e.g. bf16,fp8 on a GPU)"},
        {"allow-emulated", QS_CLI_FLAG, &c->train.allow_emulated, NULL, "permit precisions the device only emulates, "
         "in the profiles, the plan and every arm (e.g. int8 and bf16 on a CPU without VNNI / AVX-512)"},
        {"grad-rounding", QS_CLI_STR, &a->grad_rounding, "R", "low-precision gradients: stochastic (default) or nearest"},
        {"weight-scales", QS_CLI_STR, &a->weight_scales, "S", "INT8 weight scales: tensor (default) or channel"},
        {"fp8-scaling", QS_CLI_STR, &a->fp8_scaling, "MODE", "FP8 scales in profiles and arms: current (default) or delayed[:N]"},
        {"indicator", QS_CLI_STR, &a->method, "NAME", "indicator method: gvar (default), qsync, wvar, hess, random"},
        {"indicator-batches", QS_CLI_I64, &c->indicator_batches, "N", "batches the indicator averages (default 8)"},
        {"gamma", QS_CLI_DOUBLE, &c->gamma, "G", "the indicator's forward weight (default 4)"},
        {"target-ms", QS_CLI_DOUBLE, &c->target_ms, "MS", "the plan's T (default: the fastest type's iteration)"},
        {"ideal-ms", QS_CLI_DOUBLE, &c->ideal_ms, "MS",
         "the ideal iteration measured elsewhere, for the gap closure (MPS clusters; instead of the ideal arm)"},
        {"plan", QS_CLI_STR, &c->plan_path, "FILE", "compare this plan (a section per device type) instead of planning"},
        {"exact", QS_CLI_FLAG, &c->exact, NULL, "also solve the plan exactly (GLPK) and report the greedy's gap"},
        {"profile-reps", QS_CLI_INT, &c->profile_reps, "N", "timed profile steps per precision (default 20)"},
        {"bucket-mb", QS_CLI_DOUBLE, &a->bucket_mb, "MB", "gradient all-reduce bucket size (default 25)"},
        {"collective-timeout", QS_CLI_DOUBLE, &c->train.collective_timeout_s, "S",
         "end the job when a collective waits longer than S seconds (default 300)"},
        {"out", QS_CLI_STR, &a->out_dir, "DIR", "output directory (default runs/qsync-run)"},
        {"plot", QS_CLI_STR, &a->plot, "PNG", "draw training loss against time and steps per arm (gnuplot)"},
        {"json", QS_CLI_FLAG, &a->json, NULL, "print the report as JSON"},
        {"verbose", QS_CLI_FLAG, &a->verbose, NULL, "also every training job's own log"},
        {"quiet", QS_CLI_FLAG, &a->quiet, NULL, "only the report and errors"},
        {"no-launch", QS_CLI_FLAG, &a->no_launch, NULL, "do not start mpirun when run without it"},
    };
    return qs_cli_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof opts[0]), "run", qs_run_summary);
}

/* The command line's values checked and set into c; 0, or the exit status (usage: 2). */
static int qs_run_values(const qs_run_cli *a, qs_run_config *c) {
    int rc;
    char err[160];
    if (!qs_precision_parse(a->base, &c->base_precision) || c->base_precision == QS_PREC_INT8) {
        fprintf(stderr, "qsync run: --base-precision must be a precision above the lowest (fp32, tf32, bf16, fp16, "
                "fp8; got '%s')\n", a->base);
        return 2;
    }
    /* the default low arm (int8) runs where the CPU only emulates it; a chosen one needs --allow-emulated */
    const char *low = a->low ? a->low : "int8";
    c->low_emulated_ok = !a->low;
    if (!qs_precision_parse(low, &c->low_precision) || c->low_precision <= c->base_precision) {
        fprintf(stderr, "qsync run: --low-precision must be a precision below the base precision %s (order: fp32, "
                "tf32, bf16, fp16, fp8, int8; got '%s')\n", qs_precision_name(c->base_precision), low);
        return 2;
    }
    if (a->menu && !qs_precision_list_parse(a->menu, c->menu, QS_PREC_COUNT, &c->n_menu, err, sizeof err)) {
        fprintf(stderr, "qsync run: --precisions: %s\n", err);
        return 2;
    }
    if (!qs_run_arms_parse(c, a->arms, c->arms, err, sizeof err)) {
        fprintf(stderr, "qsync run: --arms: %s\n", err);
        return 2;
    }
    c->arms[QS_ARM_QSYNC] = true;
    qs_precision unused;
    if ((rc = qs_cli_precision_options("run", "fp32", NULL, a->grad_rounding, a->weight_scales, &unused,
                                       &c->train.grad_rounding, &c->train.weight_scales)))
        return rc;
    if ((rc = qs_cli_fp8_scaling("run", a->fp8_scaling, &c->train.fp8_amax_history))) return rc;
    if (!qs_indicator_method_parse(a->method, &c->method)) {
        fprintf(stderr, "qsync run: --indicator: unknown method '%s' (gvar, qsync, wvar, hess, random)\n", a->method);
        return 2;
    }
    if (strcmp(a->optimizer, "sgd") == 0) c->train.optim.kind = QS_OPTIM_SGD;
    else if (strcmp(a->optimizer, "adamw") == 0) c->train.optim.kind = QS_OPTIM_ADAMW;
    else {
        fprintf(stderr, "qsync run: --optimizer must be sgd or adamw (got '%s')\n", a->optimizer);
        return 2;
    }
    if (c->seeds < 1 || c->seeds > 64 || c->train.batch < 2 || c->train.steps < 0 || c->train.epochs < 0 ||
        (c->train.steps == 0 && c->train.epochs == 0) || c->train.log_every < 1 || c->profile_reps < 3 || c->indicator_batches < 1 ||
        !(a->bucket_mb > 0) || c->target_ms < 0 || c->ideal_ms < 0 || !(c->gamma >= 0) || !(c->train.optim.lr > 0)) {
        fprintf(stderr, "qsync run: --seeds must be 1..64, --batch >= 2, --steps or --epochs > 0, --profile-reps >= 3, "
                "--indicator-batches and --log-every >= 1, --bucket-mb, --lr > 0, --target-ms, --ideal-ms and --gamma >= 0\n");
        return 2;
    }
    if (a->plot && system("gnuplot --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "qsync run: error: --plot needs gnuplot, which did not start (Debian: gnuplot-nox)\n");
        return 2;
    }
    c->train.bucket_bytes = (size_t)(a->bucket_mb * 1048576.0);
    return 0;
}

/* This rank's part of the job (under mpirun): the checks every rank makes alike, the worker's
 * MPS share, the pipeline, rank 0's report. */
static int qs_run_rank(qs_run_config *c, qs_cluster *cluster, qs_comm *comm, const qs_run_cli *a) {
    const int rank = qs_comm_rank(comm), world = qs_comm_world(comm);
    if (qs_run_check(c, world) != QS_OK) /* every rank refuses alike: one message, no abort */
        return rank == 0 ? qs_cmd_fail("run") : 1;
    if (qs_mps_apply(&cluster->workers[rank], rank) != QS_OK) { /* before any CUDA context of this process */
        fprintf(stderr, "qsync run: error: %s\n", qs_last_error());
        if (world > 1) qs_comm_abort(comm, 1);
        return 1;
    }
    qs_logger lg, tlg;
    qs_logger_init(&lg, rank, world, a->quiet || rank != 0 ? QS_LOG_WARN : QS_LOG_INFO);
    qs_logger_init(&tlg, rank, world, a->verbose && rank == 0 ? QS_LOG_INFO : QS_LOG_WARN);
    c->train.comm = comm;
    c->train.interrupt = &qs_run_interrupted;
    c->train.progress = !a->quiet && rank == 0;
    c->out_dir = a->out_dir;
    c->plot_path = a->plot;
    c->log = &lg;
    c->train_log = &tlg;
    qs_run_report *report = NULL;
    qs_status st = qs_run(c, &report);
    if (st != QS_OK && world > 1) { /* the peers may wait for this rank: end the whole job */
        fprintf(stderr, "qsync run: error: %s\n", qs_last_error());
        qs_comm_abort(comm, 1);
    }
    if (st == QS_OK && report && a->json) {
        cJSON *doc = qs_run_report_json(report);
        char *s = doc ? cJSON_Print(doc) : NULL;
        if (s) puts(s);
        free(s);
        cJSON_Delete(doc);
    } else if (st == QS_OK && report) {
        qs_run_report_print(report, stdout);
        printf("report: %s/report.json%s%s\n", a->out_dir, a->plot ? "; plot: " : "", a->plot ? a->plot : "");
    }
    if (report) qs_run_report_free(report);
    free(report);
    return st == QS_OK ? 0 : qs_cmd_fail("run");
}

int qs_cmd_run(int argc, char **argv) {
    qs_run_config c;
    qs_run_cli a;
    qs_run_defaults(&c, &a);
    int rc = qs_run_parse(argc, argv, &c, &a);
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = qs_run_values(&a, &c))) return rc;
    char default_cluster[PATH_MAX + 64];
    const char *cluster_path = a.cluster_path;
    const bool cluster_given = cluster_path != NULL;
    if (!cluster_path && !(cluster_path = qs_run_default_cluster(default_cluster, sizeof default_cluster))) {
        fprintf(stderr, "qsync run: error: no --cluster given and the default %s was not found in the "
                "directory above this executable's\n", QS_RUN_DEFAULT_CLUSTER);
        return 2;
    }
    qs_cluster cluster;
    if (qs_cluster_read(cluster_path, &cluster) != QS_OK) return qs_cmd_fail("run");
    c.cluster = &cluster;
    const bool launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK");
    const bool launch = !launched && !a.no_launch && cluster.n_workers > 1;
    if (!launched && qs_run_check(&c, launch ? cluster.n_workers : 1) != QS_OK) {
        qs_cluster_free(&cluster);
        return qs_cmd_fail("run");
    }
    if (launch) {
        int n = cluster.n_workers;
        qs_cluster_free(&cluster);
        return qs_run_launch(argc, argv, n, cluster_path, cluster_given);
    }
    qs_stop_signals_start(&qs_run_interrupted); /* before MPI's and OpenMP's threads exist */
    qs_comm *comm = NULL;
    if (qs_comm_init(&argc, &argv, &comm) != QS_OK) {
        qs_cluster_free(&cluster);
        return qs_cmd_fail("run");
    }
    rc = qs_run_rank(&c, &cluster, comm, &a);
    qs_cluster_free(&cluster);
    qs_comm_finalize(comm);
    return rc;
}
