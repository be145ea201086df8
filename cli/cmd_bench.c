/* cli/cmd_bench.c — `qsync bench gemm|layer|quantize|step`: throughput per precision on this
 * machine, medians of interleaved repetitions (cli/bench_common.h), marked native/emulated. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "commands.h"
#include "core/timer.h"
#include "dist/comm.h"
#include "options.h"
#include "qsync/rng.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

qs_status qs_bench_run(const qs_bench_opts *o, int n, qs_bench_fn *fns, void **ctxs, qs_bench_stat *stats) {
    static double t[QS_BENCH_MAX_PRECS * 8][QS_BENCH_MAX_REPS];
    if (n > QS_BENCH_MAX_PRECS * 8) return QS_FAIL(QS_ERR_INTERNAL, "bench: %d cases in one run, at most %d", n, QS_BENCH_MAX_PRECS * 8);
    for (int r = 0; r < o->warmup; r++)
        for (int i = 0; i < n; i++) QS_TRY(fns[i](ctxs[i]));
    for (int r = 0; r < o->reps; r++)
        for (int i = 0; i < n; i++) {
            double t0 = qs_now_ms();
            QS_TRY(fns[i](ctxs[i]));
            t[i][r] = qs_now_ms() - t0;
        }
    for (int i = 0; i < n; i++) {
        qsort(t[i], (size_t)o->reps, sizeof(double), cmp_double);
        stats[i] = (qs_bench_stat){.median_ms = t[i][o->reps / 2], .min_ms = t[i][0], .max_ms = t[i][o->reps - 1]};
        if (o->reps % 2 == 0) stats[i].median_ms = 0.5 * (t[i][o->reps / 2 - 1] + t[i][o->reps / 2]);
    }
    return QS_OK;
}

qs_status qs_bench_parse_precs(const char *list, qs_bench_opts *o) {
    char err[160];
    if (!qs_precision_list_parse(list, o->precs, QS_BENCH_MAX_PRECS, &o->n_precs, err, sizeof err))
        return QS_FAIL(QS_ERR_INVALID_ARG, "--precisions: %s", err);
    return QS_OK;
}

const char *qs_bench_support(const qs_bench_opts *o, qs_precision p) {
    return qs_prec_support_name(o->be->ops->precision_support(o->be, p));
}

void qs_bench_fill(float *x, int64_t n, uint64_t stream) {
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(1, "bench", stream), 0);
    for (int64_t i = 0; i < n; i++) x[i] = 2.0f * qs_rng_uniform(&r) - 1.0f;
}

static const char *const qs_bench_summary =
    "Measure throughput per precision on this machine: `gemm` (Y = X·Wᵀ, operands already quantized),\n"
    "`layer` (Linear and Conv2d forward + backward including all quantization), `quantize` (conversion\n"
    "throughput on one thread and on all), `step` (whole training steps of a model, synthetic data),\n"
    "`allreduce` (under mpirun: the bucketed gradient all-reduce against MPI_Allreduce called directly).\n"
    "Medians of --reps interleaved repetitions after --warmup; each precision marked native or emulated.\n"
    "Usage: qsync bench gemm|layer|quantize|step|allreduce [options]";

int qs_cmd_bench(int argc, char **argv) {
    if (argc < 3 || argv[2][0] == '-') {
        if (argc >= 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            puts(qs_bench_summary);
            return 0;
        }
        fprintf(stderr, "qsync bench: name a part: gemm, layer, quantize or step (qsync bench --help)\n");
        return 2;
    }
    const char *part = argv[2];
    qs_bench_opts o = {.reps = 9, .warmup = 2, .threads = 0, .model = "cnn", .width = 0, .batch = 128};
    const char *precs = "fp32,bf16,int8";
    const qs_cli_opt opts[] = {
        {"precisions", QS_CLI_STR, &precs, "LIST", "comma-separated precisions (default fp32,bf16,int8)"},
        {"reps", QS_CLI_INT, &o.reps, "N", "timed repetitions per case (default 9; medians reported)"},
        {"warmup", QS_CLI_INT, &o.warmup, "N", "untimed repetitions first (default 2)"},
        {"threads", QS_CLI_INT, &o.threads, "N", "compute threads (default: OpenMP's)"},
        {"model", QS_CLI_STR, &o.model, "NAME", "step: built-in model (default cnn)"},
        {"width", QS_CLI_I64, &o.width, "W", "step: model width (0 = the model's default)"},
        {"batch", QS_CLI_I64, &o.batch, "B", "step: batch size (default 128)"},
        {"json", QS_CLI_FLAG, &o.json, NULL, "print one JSON document instead of tables"},
    };
    char cmd[64];
    snprintf(cmd, sizeof cmd, "bench %s", part);
    int rc = qs_cli_parse(argc, argv, 3, opts, (int)(sizeof opts / sizeof *opts), cmd, qs_bench_summary);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.reps < 1 || o.reps > QS_BENCH_MAX_REPS || o.warmup < 0 || o.threads < 0 || o.batch < 1) {
        fprintf(stderr, "qsync bench: --reps must be 1..%d, --warmup and --threads >= 0, --batch >= 1\n", QS_BENCH_MAX_REPS);
        return 2;
    }
    if (qs_bench_parse_precs(precs, &o) != QS_OK) {
        fprintf(stderr, "qsync bench: %s\n", qs_last_error());
        return 2;
    }
    qs_status (*run)(qs_bench_opts *) = strcmp(part, "gemm") == 0 ? qs_bench_gemm
                      : strcmp(part, "layer") == 0    ? qs_bench_layer
                      : strcmp(part, "quantize") == 0 ? qs_bench_quantize
                      : strcmp(part, "step") == 0     ? qs_bench_step
                      : strcmp(part, "allreduce") == 0 ? qs_bench_allreduce
                                                      : NULL;
    if (!run) {
        fprintf(stderr, "qsync bench: unknown part '%s' (gemm, layer, quantize, step, allreduce)\n", part);
        return 2;
    }
    if (qs_comm_init(&argc, &argv, &o.comm) != QS_OK) return qs_cmd_fail("bench");
    if (qs_backend_cpu_create(o.threads, &o.be) != QS_OK) return qs_cmd_fail("bench");
    o.rows = cJSON_CreateArray();
    qs_status st = run(&o);
    const int rank = qs_comm_rank(o.comm);
    if (st == QS_OK && o.json && rank == 0) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "part", part);
        cJSON_AddNumberToObject(doc, "threads", omp_get_max_threads());
        cJSON_AddNumberToObject(doc, "reps", o.reps);
        cJSON *sup = cJSON_AddObjectToObject(doc, "support");
        for (int p = 0; p < QS_PREC_COUNT; p++)
            cJSON_AddStringToObject(sup, qs_precision_name((qs_precision)p), qs_bench_support(&o, (qs_precision)p));
        cJSON_AddItemToObject(doc, "results", o.rows);
        o.rows = NULL;
        char *s = cJSON_Print(doc);
        puts(s);
        free(s);
        cJSON_Delete(doc);
    }
    cJSON_Delete(o.rows);
    o.be->ops->destroy(o.be);
    if (st != QS_OK && qs_comm_world(o.comm) > 1) {
        fprintf(stderr, "qsync bench: rank %d: error: %s\n", rank, qs_last_error());
        qs_comm_abort(o.comm, 1);
    }
    qs_comm_finalize(o.comm);
    return st == QS_OK ? 0 : qs_cmd_fail("bench");
}
