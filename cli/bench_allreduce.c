/* cli/bench_allreduce.c — `qsync bench allreduce` (under mpirun): the sum all-reduce of FP32
 * gradients as data-parallel training runs it — split into buckets (25 MiB by default, as
 * --bucket-mb in training), all started non-blocking, then waited for by polling — against one
 * MPI_Allreduce of the whole buffer called directly, interleaved, for 1–64 MiB. Reports
 * medians and the bus bandwidth 2·(p−1)/p·bytes / time (the traffic per rank of a ring
 * all-reduce over p ranks). Every rank runs it; rank 0 prints.
 *
 * With --device cuda[:N] (every rank on that one GPU) the buffers are device memory and the two
 * paths are the one training uses there — the CUDA IPC all-reduce (parallel/ipc_reduce.h) in
 * 25 MiB buckets, synchronized at the end — against a host-staged MPI_Allreduce (copy to the
 * host, MPI_Allreduce, copy back: what a non-CUDA-aware MPI offers), for 1–512 MiB (GPT-2
 * 124M's gradients are 475 MiB). A timed run ends with a stream sync; one run per sample. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "parallel/comm.h"
#include "parallel/ipc_reduce.h"
#include "qsync/tensor.h"

typedef struct ar_case {
    qs_comm *comm;
    float *buf;
    int64_t n, bucket;
    bool direct;
} ar_case;

static qs_status run_ar(void *ctx) {
    ar_case *c = ctx;
    if (c->direct) return qs_comm_allreduce_sum_f32_direct(c->comm, c->buf, c->n);
    int reqs[QS_COMM_MAX_REQS], nr = 0;
    for (int64_t off = 0; off < c->n; off += c->bucket) {
        int64_t cnt = c->n - off < c->bucket ? c->n - off : c->bucket;
        QS_TRY(qs_comm_iallreduce_sum_f32(c->comm, c->buf + off, cnt, &reqs[nr++]));
    }
    for (int i = 0; i < nr; i++) QS_TRY(qs_comm_wait(c->comm, reqs[i], 300));
    return QS_OK;
}

/* One device buffer reduced through CUDA IPC in buckets, or staged through the host. */
typedef struct ar_gpu_case {
    qs_backend *be;
    qs_comm *comm;
    float *dev, *host;
    int64_t n, bucket;
    qs_ipc_reduce *ipc;  /* NULL: host-staged */
} ar_gpu_case;

static qs_status run_ar_gpu(void *ctx) {
    ar_gpu_case *c = ctx;
    qs_stream *s = c->be->ops->default_stream(c->be);
    if (!c->ipc) {
        const size_t bytes = (size_t)c->n * sizeof(float);
        QS_TRY(c->be->ops->copy_d2h(c->be, s, c->host, c->dev, bytes));
        QS_TRY(c->be->ops->stream_sync(c->be, s));
        QS_TRY(qs_comm_allreduce_sum_f32_direct(c->comm, c->host, c->n));
        QS_TRY(c->be->ops->copy_h2d(c->be, s, c->dev, c->host, bytes));
        return c->be->ops->stream_sync(c->be, s);
    }
    int k = 0;
    for (int64_t off = 0; off < c->n; off += c->bucket, k++) {
        int64_t cnt = c->n - off < c->bucket ? c->n - off : c->bucket;
        QS_TRY(qs_ipc_reduce_start(c->ipc, s, k, (size_t)off * sizeof(float), (size_t)cnt * sizeof(float)));
    }
    QS_TRY(qs_ipc_reduce_finish(c->ipc, s));
    return c->be->ops->stream_sync(c->be, s);
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

/* The GPU variant (see the file comment). */
static qs_status bench_allreduce_gpu(qs_bench_opts *o) {
    qs_comm *comm = o->comm;
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    const int64_t sizes_mb[] = {1, 4, 16, 64, 256, 512};
    const int64_t bucket = (int64_t)(25 << 20) / (int64_t)sizeof(float);
    o->inner = 1; /* every rank runs the same number of collectives */
    if (rank == 0 && !o->json)
        printf("allreduce on %s: %d ranks sharing it, FP32 sum in place, %d reps (median); ipc = CUDA IPC in 25 MiB "
               "buckets, host-staged = copy to host + MPI_Allreduce + copy back\n", o->device, world, o->reps);
    for (size_t s = 0; s < sizeof sizes_mb / sizeof *sizes_mb; s++) {
        const int64_t n = sizes_mb[s] * (1 << 20) / (int64_t)sizeof(float);
        const size_t bytes = (size_t)n * sizeof(float);
        ar_gpu_case cases[2] = {{o->be, comm, NULL, NULL, n, bucket, NULL}, {o->be, comm, NULL, NULL, n, bucket, NULL}};
        float *host = qs_host_alloc(bytes);
        qs_status st = host ? o->be->ops->alloc(o->be, bytes, (void **)&cases[0].dev)
                            : QS_FAIL(QS_ERR_OOM, "bench allreduce: out of memory");
        if (st == QS_OK) {
            qs_bench_fill(host, n, 21);
            st = o->be->ops->copy_h2d(o->be, o->be->ops->default_stream(o->be), cases[0].dev, host, bytes);
        }
        if (st == QS_OK)
            st = qs_ipc_reduce_open(o->be, comm, cases[0].dev, bytes, (int)((n + bucket - 1) / bucket), 300,
                                    &cases[0].ipc);
        cases[1].dev = cases[0].dev;
        cases[1].host = host;
        qs_bench_stat stat[2];
        if (st == QS_OK) {
            qs_bench_fn fns[2] = {run_ar_gpu, run_ar_gpu};
            void *ctxs[2] = {&cases[0], &cases[1]};
            st = qs_bench_run(o, 2, fns, ctxs, stat);
        }
        qs_ipc_reduce_close(cases[0].ipc);
        if (cases[0].dev) o->be->ops->free(o->be, cases[0].dev);
        qs_host_free(host);
        QS_TRY(st);
        for (int k = 0; k < 2 && rank == 0; k++)
            report_row(o, sizes_mb[s], k ? "host-staged" : "ipc", &stat[k], (double)bytes, world);
    }
    return QS_OK;
}

qs_status qs_bench_allreduce(qs_bench_opts *o) {
    qs_comm *comm = o->comm;
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    if (world < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "bench allreduce needs several ranks: run it under mpirun -np N (N >= 2)");
    if (o->device_sync) return bench_allreduce_gpu(o);
    const int64_t sizes_mb[] = {1, 4, 16, 64};
    const int64_t bucket = (int64_t)(25 << 20) / (int64_t)sizeof(float);
    if (rank == 0 && !o->json)
        printf("allreduce: %d ranks, FP32 sum in place, %d reps (median); bucketed = 25 MiB buckets, non-blocking + polling\n",
               world, o->reps);
    for (size_t s = 0; s < sizeof sizes_mb / sizeof *sizes_mb; s++) {
        const int64_t n = sizes_mb[s] * (1 << 20) / (int64_t)sizeof(float);
        float *buf = qs_host_alloc((size_t)n * sizeof(float));
        if (!buf) return QS_FAIL(QS_ERR_OOM, "bench allreduce: out of memory");
        qs_bench_fill(buf, n, 21);
        ar_case cases[2] = {{comm, buf, n, bucket, false}, {comm, buf, n, bucket, true}};
        qs_bench_fn fns[2] = {run_ar, run_ar};
        void *ctxs[2] = {&cases[0], &cases[1]};
        qs_bench_stat st[2];
        qs_status rc = qs_bench_run(o, 2, fns, ctxs, st);
        qs_host_free(buf);
        QS_TRY(rc);
        for (int k = 0; k < 2 && rank == 0; k++)
            report_row(o, sizes_mb[s], k ? "MPI_Allreduce" : "bucketed", &st[k], (double)n * sizeof(float), world);
    }
    return QS_OK;
}
