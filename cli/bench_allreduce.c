/* cli/bench_allreduce.c — `qsync bench allreduce` (under mpirun): the sum all-reduce of FP32
 * gradients as data-parallel training runs it — through the communication interface
 * (parallel/coll.h) with the transport training picks, split into buckets (25 MiB by default, as
 * --bucket-mb in training), all started non-blocking, then waited for by polling — against one
 * MPI_Allreduce of the whole buffer called directly, interleaved, for 1–64 MiB. Reports
 * medians and the bus bandwidth 2·(p−1)/p·bytes / time (the traffic per rank of a ring
 * all-reduce over p ranks). Every rank runs it; rank 0 prints.
 *
 * With --device cuda[:N] the buffers are device memory and the bucketed path is the GPU
 * transport training uses there (ipc when every rank shares that GPU), synchronized at the
 * end, against a host-staged MPI_Allreduce (copy to the host, MPI_Allreduce, copy back: what a
 * non-CUDA-aware MPI offers), for 1–512 MiB (GPT-2 124M's gradients are 475 MiB). A timed run
 * ends with a stream sync; one run per sample. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "parallel/coll.h"
#include "parallel/comm.h"
#include "qsync/tensor.h"

#define QS_AR_BUCKET ((int64_t)(25 << 20) / (int64_t)sizeof(float)) /* floats per bucket */
#define QS_AR_MAX_BUCKETS 64

/* One buffer reduced in buckets through the interface (coll), or directly (coll NULL: one
 * MPI_Allreduce, host-staged when the buffer is on a device). */
typedef struct ar_case {
    qs_comm *comm;
    qs_coll *coll;
    qs_backend *be;    /* device buffers, or NULL */
    float *buf, *host; /* host: the staging copy of a device buffer */
    int64_t n;
} ar_case;

static qs_status run_ar(void *ctx) {
    ar_case *c = ctx;
    qs_stream *s = c->be ? c->be->ops->default_stream(c->be) : NULL;
    if (!c->coll && !c->be) return qs_comm_allreduce_sum_f32_direct(c->comm, c->buf, c->n);
    if (!c->coll) {
        const size_t bytes = (size_t)c->n * sizeof(float);
        QS_TRY(c->be->ops->copy_d2h(c->be, s, c->host, c->buf, bytes));
        QS_TRY(c->be->ops->stream_sync(c->be, s));
        QS_TRY(qs_comm_allreduce_sum_f32_direct(c->comm, c->host, c->n));
        QS_TRY(c->be->ops->copy_h2d(c->be, s, c->buf, c->host, bytes));
        return c->be->ops->stream_sync(c->be, s);
    }
    int reqs[QS_AR_MAX_BUCKETS], nr = 0;
    for (int64_t off = 0; off < c->n; off += QS_AR_BUCKET) {
        const int64_t cnt = c->n - off < QS_AR_BUCKET ? c->n - off : QS_AR_BUCKET;
        QS_TRY(qs_coll_allreduce(c->coll, c->buf + off, cnt, QS_F32, s, &reqs[nr++]));
    }
    for (int i = 0; i < nr; i++) QS_TRY(qs_coll_wait(c->coll, reqs[i], 300));
    return c->be ? c->be->ops->stream_sync(c->be, s) : QS_OK;
}

/* Print and record one path's figures for one size. */
static void report_row(qs_bench_opts *o, int64_t mib, const char *path, const qs_bench_stat *st, double bytes,
                       int world) {
    const double busbw = 2.0 * (world - 1) / world * bytes / (st->median_ms * 1e6);
    if (!o->json)
        printf("  %4lld MiB %-12s %9.3f ms (min %.3f, max %.3f)  bus bandwidth %7.2f GB/s\n", (long long)mib, path,
               st->median_ms, st->min_ms, st->max_ms, busbw);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "kind", "allreduce");
    cJSON_AddStringToObject(r, "device", o->device);
    cJSON_AddStringToObject(r, "path", path);
    cJSON_AddNumberToObject(r, "bytes", bytes);
    cJSON_AddNumberToObject(r, "ranks", world);
    cJSON_AddNumberToObject(r, "median_ms", st->median_ms);
    cJSON_AddNumberToObject(r, "bus_gb_per_s", busbw);
    cJSON_AddItemToArray(o->rows, r);
}

/* One size: the buffer where it lives (the backend's memory with a GPU, else the host's), its
 * communicator (collective), both paths timed interleaved, the rows printed. */
static qs_status bench_size(qs_bench_opts *o, int64_t mib, bool gpu) {
    qs_comm *comm = o->comm;
    const int64_t n = mib * (1 << 20) / (int64_t)sizeof(float);
    const size_t bytes = (size_t)n * sizeof(float);
    qs_backend *be = gpu ? o->be : NULL;
    ar_case cases[2] = {{comm, NULL, be, NULL, NULL, n}, {comm, NULL, be, NULL, NULL, n}};
    float *host = qs_host_alloc(bytes);
    qs_status st = host ? QS_OK : QS_FAIL(QS_ERR_OOM, "bench allreduce: out of memory");
    if (st == QS_OK) qs_bench_fill(host, n, 21);
    if (st == QS_OK && gpu) st = be->ops->alloc(be, bytes, (void **)&cases[0].buf);
    if (st == QS_OK && gpu) st = be->ops->copy_h2d(be, be->ops->default_stream(be), cases[0].buf, host, bytes);
    if (!gpu) cases[0].buf = host;
    const qs_coll_options co = {.transport = QS_COLL_AUTO, .be = be,
                                .max_inflight = (int)((n + QS_AR_BUCKET - 1) / QS_AR_BUCKET), .timeout_s = 300};
    if (st == QS_OK) st = qs_coll_open(comm, &co, &cases[0].coll);
    if (st == QS_OK) st = qs_coll_register(cases[0].coll, cases[0].buf, bytes);
    cases[1].buf = cases[0].buf;
    cases[1].host = host;
    qs_bench_stat stat[2];
    if (st == QS_OK) {
        qs_bench_fn fns[2] = {run_ar, run_ar};
        void *ctxs[2] = {&cases[0], &cases[1]};
        st = qs_bench_run(o, 2, fns, ctxs, stat);
    }
    const char *path = cases[0].coll ? qs_coll_transport_name(qs_coll_transport_of(cases[0].coll)) : "ipc";
    qs_coll_close(cases[0].coll);
    if (gpu && cases[0].buf) be->ops->free(be, cases[0].buf);
    qs_host_free(host);
    QS_TRY(st);
    if (qs_comm_rank(comm) != 0) return QS_OK;
    report_row(o, mib, gpu ? path : "bucketed", &stat[0], (double)bytes, qs_comm_world(comm));
    report_row(o, mib, gpu ? "host-staged" : "MPI_Allreduce", &stat[1], (double)bytes, qs_comm_world(comm));
    return QS_OK;
}

qs_status qs_bench_allreduce(qs_bench_opts *o) {
    const int world = qs_comm_world(o->comm), rank = qs_comm_rank(o->comm);
    if (world < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "bench allreduce needs several ranks: run it under mpirun -np N (N >= 2)");
    const bool gpu = o->device_sync;
    static const int64_t cpu_mb[] = {1, 4, 16, 64}, gpu_mb[] = {1, 4, 16, 64, 256, 512};
    if (gpu) o->inner = 1; /* every rank runs the same number of collectives */
    if (rank == 0 && !o->json && gpu)
        printf("allreduce on %s: %d ranks sharing it, FP32 sum in place, %d reps (median); ipc = CUDA IPC in 25 MiB "
               "buckets, host-staged = copy to host + MPI_Allreduce + copy back\n", o->device, world, o->reps);
    else if (rank == 0 && !o->json)
        printf("allreduce: %d ranks, FP32 sum in place, %d reps (median); bucketed = 25 MiB buckets, non-blocking + "
               "polling\n", world, o->reps);
    const int64_t *sizes = gpu ? gpu_mb : cpu_mb;
    const size_t n_sizes = gpu ? sizeof gpu_mb / sizeof *gpu_mb : sizeof cpu_mb / sizeof *cpu_mb;
    for (size_t s = 0; s < n_sizes; s++) QS_TRY(bench_size(o, sizes[s], gpu));
    return QS_OK;
}
