/* cli/bench_common.h — defines: what the `qsync bench` parts share: medians of repeated timed
 * runs, the precision list option, and result rows printed as a table or collected as JSON.
 *
 * Method (every part): a timed function is run `warmup` times, then `reps` times, each timed
 * with a monotonic clock; the median is reported, with min and max. Ratios against FP32 are
 * medians measured in the same process, interleaved per repetition so slow drifts of the
 * machine (frequency, other load) hit every precision alike.
 *
 * On a GPU backend (o->device_sync: calls only queue work) a sample is a batch instead:
 * stream_sync, clock, `inner` runs, stream_sync, clock; the sample is the elapsed time divided
 * by `inner`. One first run of every case (lazy handles, algorithm choice), then `inner` is
 * fixed per case (o->inner, or chosen so that a batch lasts about QS_BENCH_BATCH_MS), then
 * `warmup` untimed batches, then `reps` timed ones, interleaved across cases as on the CPU. */
#ifndef QSYNC_CLI_BENCH_COMMON_H
#define QSYNC_CLI_BENCH_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "core/backend.h"
#include "qsync/status.h"

#define QS_BENCH_MAX_PRECS QS_PREC_COUNT
#define QS_BENCH_MAX_REPS 101
#define QS_BENCH_BATCH_MS 25.0  /* GPU: target length of one timed batch when o->inner is 0 */
#define QS_BENCH_MAX_INNER 10000

typedef struct qs_bench_opts {
    int reps, warmup, threads;
    qs_precision precs[QS_BENCH_MAX_PRECS];
    int n_precs;
    bool json;
    const char *model;
    int64_t width, batch;
    qs_backend *be;
    struct qs_comm *comm;  /* the process group (allreduce) */
    cJSON *rows;  /* JSON array of result rows */
    cJSON *skipped;  /* JSON array of {kind, shape, precision, reason} for cases the backend refused */
    const char *includes;  /* set by a part: what one timed run includes (printed in the JSON document) */
    /* gemm/layer on a GPU backend (--device cuda[:N]) */
    const char *device;  /* "cpu", "cuda:N" (for headers and JSON) */
    bool device_sync;    /* the backend queues asynchronously: time batches between stream_syncs */
    int inner;           /* runs per timed batch (0: chosen per case, QS_BENCH_BATCH_MS) */
    int64_t shape_m, shape_n, shape_k;  /* --size / --shape: one Linear shape instead of the built-in list (0: list) */
    bool fp8_delayed;    /* layer: FP8 delayed scaling (--fp8-scaling delayed) */
} qs_bench_opts;

/* One timed case: fn(ctx) runs it once. */
typedef qs_status (*qs_bench_fn)(void *ctx);

/* Timings of one case in milliseconds. */
typedef struct qs_bench_stat {
    double median_ms, min_ms, max_ms;  /* per run */
    int inner;                         /* runs per timed sample (1 on the CPU) */
} qs_bench_stat;

/* Run n cases interleaved: warmup rounds, then reps rounds each timing every case once
 * (batches between stream_syncs with o->device_sync: see the file comment); stats[i] gets
 * case i's median/min/max per run. */
qs_status qs_bench_run(const qs_bench_opts *o, int n, qs_bench_fn *fns, void **ctxs, qs_bench_stat *stats);

/* Parse "fp32,bf16,int8" into o->precs (QS_ERR_INVALID_ARG naming the bad item). */
qs_status qs_bench_parse_precs(const char *list, qs_bench_opts *o);

/* "native" / "emulated" for a precision on o->be, as printed next to every figure. */
const char *qs_bench_support(const qs_bench_opts *o, qs_precision p);

/* Fill n floats with uniform values in [-1, 1) from a fixed stream (seeded by `stream`). */
void qs_bench_fill(float *x, int64_t n, uint64_t stream);

/* The parts: each prints its table (unless o->json) and appends rows to o->rows. */
qs_status qs_bench_gemm(qs_bench_opts *o);
qs_status qs_bench_layer(qs_bench_opts *o);
qs_status qs_bench_quantize(qs_bench_opts *o);
qs_status qs_bench_step(qs_bench_opts *o);
qs_status qs_bench_allreduce(qs_bench_opts *o);

#endif
