/* cli/cmd_bench.c — `qsync bench gemm|layer|quantize|step|allreduce`: throughput per precision on
 * this machine, medians of interleaved repetitions (cli/bench_common.h), marked native/emulated.
 * gemm and layer also take --device cuda[:N] (the CUDA backend; a build without CUDA, or no such
 * GPU, fails with the backend's message and exit status 1) and --size / --shape (one Linear). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "commands.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "options.h"
#include "qsync/rng.h"
#include "backends/backends.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median, min and max of n sorted-in-place samples. */
static qs_bench_stat stat_of(double *t, int n, int inner) {
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    qs_bench_stat s = {.median_ms = t[n / 2], .min_ms = t[0], .max_ms = t[n - 1], .inner = inner};
    if (n % 2 == 0) s.median_ms = 0.5 * (t[n / 2 - 1] + t[n / 2]);
    return s;
}

/* The GPU method (bench_common.h): batches of inner[i] runs between stream_syncs. */
static qs_status bench_run_device(const qs_bench_opts *o, int n, qs_bench_fn *fns, void **ctxs, double (*t)[QS_BENCH_MAX_REPS],
                                  qs_bench_stat *stats) {
    qs_backend *be = o->be;
    int inner[QS_BENCH_MAX_PRECS * 8];
    for (int i = 0; i < n; i++) QS_TRY(fns[i](ctxs[i])); /* first runs: handles, algorithms, pools */
    QS_TRY(be->ops->stream_sync(be, NULL));
    for (int i = 0; i < n; i++) {
        if (o->inner > 0) {
            inner[i] = o->inner;
            continue;
        }
        double t0 = qs_now_ms();
        QS_TRY(fns[i](ctxs[i]));
        QS_TRY(be->ops->stream_sync(be, NULL));
        double one = qs_now_ms() - t0, want = QS_BENCH_BATCH_MS / (one > 1e-3 ? one : 1e-3);
        inner[i] = want < 1 ? 1 : want > QS_BENCH_MAX_INNER ? QS_BENCH_MAX_INNER : (int)(want + 0.999);
    }
    for (int r = 0; r < o->warmup; r++)
        for (int i = 0; i < n; i++)
            for (int k = 0; k < inner[i]; k++) QS_TRY(fns[i](ctxs[i]));
    for (int r = 0; r < o->reps; r++)
        for (int i = 0; i < n; i++) {
            QS_TRY(be->ops->stream_sync(be, NULL)); /* the previous case's batch is not ours */
            double t0 = qs_now_ms();
            for (int k = 0; k < inner[i]; k++) QS_TRY(fns[i](ctxs[i]));
            QS_TRY(be->ops->stream_sync(be, NULL));
            t[i][r] = (qs_now_ms() - t0) / inner[i];
        }
    for (int i = 0; i < n; i++) stats[i] = stat_of(t[i], o->reps, inner[i]);
    return QS_OK;
}

qs_status qs_bench_run(const qs_bench_opts *o, int n, qs_bench_fn *fns, void **ctxs, qs_bench_stat *stats) {
    static double t[QS_BENCH_MAX_PRECS * 8][QS_BENCH_MAX_REPS];
    if (n > QS_BENCH_MAX_PRECS * 8) return QS_FAIL(QS_ERR_INTERNAL, "bench: %d cases in one run, at most %d", n, QS_BENCH_MAX_PRECS * 8);
    if (o->device_sync) return bench_run_device(o, n, fns, ctxs, t, stats);
    for (int r = 0; r < o->warmup; r++)
        for (int i = 0; i < n; i++) QS_TRY(fns[i](ctxs[i]));
    for (int r = 0; r < o->reps; r++)
        for (int i = 0; i < n; i++) {
            double t0 = qs_now_ms();
            QS_TRY(fns[i](ctxs[i]));
            t[i][r] = qs_now_ms() - t0;
        }
    for (int i = 0; i < n; i++) stats[i] = stat_of(t[i], o->reps, 1);
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
    "gemm and layer also run on a GPU (--device cuda[:N]: every sample a batch of runs between stream\n"
    "syncs; TFLOP/s and ratios to bf16) and on one square (--size N) or any (--shape MxNxK) Linear shape;\n"
    "allreduce on a GPU that every rank shares: CUDA IPC against host-staged MPI_Allreduce.\n"
    "Usage: qsync bench gemm|layer|quantize|step|allreduce [options]";

/* --size / --shape into o->shape_*; 0, or 2 after a message. Each dimension 1..2^20 and every
 * operand at most 2^32 elements. */
static int parse_shape(int64_t size, const char *shape, qs_bench_opts *o) {
    if (size && shape) {
        fprintf(stderr, "qsync bench: give --size or --shape, not both\n");
        return 2;
    }
    if (!size && !shape) return 0;
    long long m = size, n = size, k = size;
    int used = 0;
    if (shape && (sscanf(shape, "%lldx%lldx%lld%n", &m, &n, &k, &used) != 3 || shape[used] != '\0')) {
        fprintf(stderr, "qsync bench: --shape must be MxNxK, e.g. 8192x8192x8192 (got '%s')\n", shape);
        return 2;
    }
    const long long lim = 1LL << 20, elim = 1LL << 32;
    if (m < 1 || n < 1 || k < 1 || m > lim || n > lim || k > lim || m * k > elim || n * k > elim || m * n > elim) {
        fprintf(stderr, "qsync bench: --size/--shape: M=%lld N=%lld K=%lld: each must be 1..%lld and each operand "
                "at most %lld elements\n", m, n, k, lim, elim);
        return 2;
    }
    o->shape_m = m, o->shape_n = n, o->shape_k = k;
    return 0;
}

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
    const char *precs = NULL, *device = "cpu", *shape = NULL, *fp8_scaling = "current";
    int64_t size = 0;
    const qs_cli_opt opts[] = {
        {"precisions", QS_CLI_STR, &precs, "LIST", "comma-separated precisions (default fp32,bf16,int8; on cuda fp32,tf32,bf16,fp16,fp8)"},
        {"reps", QS_CLI_INT, &o.reps, "N", "timed repetitions per case (default 9; medians reported)"},
        {"warmup", QS_CLI_INT, &o.warmup, "N", "untimed repetitions first (default 2)"},
        {"threads", QS_CLI_INT, &o.threads, "N", "compute threads (default: OpenMP's)"},
        {"model", QS_CLI_STR, &o.model, "NAME", "step: built-in model (default cnn)"},
        {"width", QS_CLI_I64, &o.width, "W", "step: model width (0 = the model's default)"},
        {"batch", QS_CLI_I64, &o.batch, "B", "step: batch size (default 128)"},
        {"device", QS_CLI_STR, &device, "D", "gemm, layer, quantize, allreduce: cpu (default), cuda or cuda:N"},
        {"size", QS_CLI_I64, &size, "N", "gemm, layer: one square Linear N x N x N instead of the built-in shapes; "
                                         "quantize on cuda: an N x N tensor (default 8192)"},
        {"shape", QS_CLI_STR, &shape, "MxNxK", "gemm, layer: one Linear shape (Y MxN, K inner) instead of the built-in shapes"},
        {"inner", QS_CLI_INT, &o.inner, "N", "cuda: runs per timed sample (default 0: enough for ~25 ms)"},
        {"fp8-scaling", QS_CLI_STR, &fp8_scaling, "MODE", "layer: current (default: each tensor's own amax) or delayed "
                                                          "(the amax history of the previous runs, docs/PRECISION.md)"},
        {"json", QS_CLI_FLAG, &o.json, NULL, "print one JSON document instead of tables"},
    };
    char cmd[64];
    snprintf(cmd, sizeof cmd, "bench %s", part);
    int rc = qs_cli_parse(argc, argv, 3, opts, (int)(sizeof opts / sizeof *opts), cmd, qs_bench_summary);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.reps < 1 || o.reps > QS_BENCH_MAX_REPS || o.warmup < 0 || o.threads < 0 || o.batch < 1 || o.inner < 0 ||
        o.inner > QS_BENCH_MAX_INNER) {
        fprintf(stderr, "qsync bench: --reps must be 1..%d, --warmup and --threads >= 0, --batch >= 1, --inner 0..%d\n",
                QS_BENCH_MAX_REPS, QS_BENCH_MAX_INNER);
        return 2;
    }
    if (strcmp(fp8_scaling, "current") != 0 && strcmp(fp8_scaling, "delayed") != 0) {
        fprintf(stderr, "qsync bench: --fp8-scaling must be current or delayed (got '%s')\n", fp8_scaling);
        return 2;
    }
    o.fp8_delayed = strcmp(fp8_scaling, "delayed") == 0;
    if (o.fp8_delayed && strcmp(part, "layer") != 0) {
        fprintf(stderr, "qsync bench: --fp8-scaling applies to layer only\n");
        return 2;
    }
    bool cuda = false;
    int dev = 0;
    if (!qs_cli_parse_device(device, &cuda, &dev)) {
        fprintf(stderr, "qsync bench: --device must be cpu, cuda or cuda:N (got '%s')\n", device);
        return 2;
    }
    const bool products = strcmp(part, "gemm") == 0 || strcmp(part, "layer") == 0;
    const bool quant = strcmp(part, "quantize") == 0;
    if ((size || shape) && !products && !(quant && cuda && !shape)) {
        fprintf(stderr, "qsync bench: --size and --shape apply to gemm and layer (and --size to quantize --device cuda) only\n");
        return 2;
    }
    if (cuda && !products && !quant && strcmp(part, "allreduce") != 0) {
        fprintf(stderr, "qsync bench: --device applies to gemm, layer, quantize and allreduce only (%s runs on the CPU "
                "backend)\n", part);
        return 2;
    }
    if ((rc = parse_shape(size, shape, &o))) return rc;
    if (qs_bench_parse_precs(precs ? precs : cuda ? "fp32,tf32,bf16,fp16,fp8" : "fp32,bf16,int8", &o) != QS_OK) {
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
    char devname[32];
    snprintf(devname, sizeof devname, cuda ? "cuda:%d" : "cpu", dev);
    o.device = devname;
    o.device_sync = cuda;
    if (qs_comm_init(&argc, &argv, &o.comm) != QS_OK) return qs_cmd_fail("bench");
    if ((cuda ? qs_backend_cuda_create(dev, &o.be) : qs_backend_cpu_create(o.threads, &o.be)) != QS_OK) {
        rc = qs_cmd_fail("bench");
        qs_comm_finalize(o.comm);
        return rc;
    }
    o.rows = cJSON_CreateArray();
    o.skipped = cJSON_CreateArray();
    qs_status st = run(&o);
    const int rank = qs_comm_rank(o.comm);
    if (st == QS_OK && o.json && rank == 0) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "part", part);
        cJSON_AddStringToObject(doc, "device", o.device);
        cJSON_AddNumberToObject(doc, "threads", omp_get_max_threads());
        cJSON_AddNumberToObject(doc, "reps", o.reps);
        cJSON_AddNumberToObject(doc, "warmup", o.warmup);
        if (o.includes) cJSON_AddStringToObject(doc, "includes", o.includes);
        if (strcmp(part, "layer") == 0) cJSON_AddStringToObject(doc, "fp8_scaling", fp8_scaling);
        if (cuda)
            cJSON_AddStringToObject(doc, "timing",
                                    "every sample: stream_sync, clock, `inner` runs (per row), stream_sync, clock; "
                                    "elapsed / inner; median (min, max) of `reps` samples, precisions interleaved per "
                                    "sample; before them one run of every case, then `warmup` untimed batches");
        cJSON *sup = cJSON_AddObjectToObject(doc, "support");
        for (int p = 0; p < QS_PREC_COUNT; p++)
            cJSON_AddStringToObject(sup, qs_precision_name((qs_precision)p), qs_bench_support(&o, (qs_precision)p));
        cJSON_AddItemToObject(doc, "results", o.rows);
        o.rows = NULL;
        if (cJSON_GetArraySize(o.skipped) > 0) {
            cJSON_AddItemToObject(doc, "skipped", o.skipped);
            o.skipped = NULL;
        }
        char *s = cJSON_Print(doc);
        puts(s);
        free(s);
        cJSON_Delete(doc);
    }
    cJSON_Delete(o.rows);
    cJSON_Delete(o.skipped);
    o.be->ops->destroy(o.be);
    if (st != QS_OK && qs_comm_world(o.comm) > 1) {
        fprintf(stderr, "qsync bench: rank %d: error: %s\n", rank, qs_last_error());
        qs_comm_abort(o.comm, 1);
    }
    qs_comm_finalize(o.comm);
    return st == QS_OK ? 0 : qs_cmd_fail("bench");
}
