/* cli/bench_allreduce.c — `qsync bench allreduce` (under mpirun): the sum all-reduce of FP32
 * gradients as data-parallel training runs it — split into buckets (25 MiB by default, as
 * --bucket-mb in training), all started non-blocking, then waited for by polling — against one
 * MPI_Allreduce of the whole buffer called directly, interleaved, for 1–64 MiB. Reports
 * medians and the bus bandwidth 2·(p−1)/p·bytes / time (the traffic per rank of a ring
 * all-reduce over p ranks). Every rank runs it; rank 0 prints. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "dist/comm.h"
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

qs_status qs_bench_allreduce(qs_bench_opts *o) {
    qs_comm *comm = o->comm;
    const int world = qs_comm_world(comm), rank = qs_comm_rank(comm);
    if (world < 2)
        return QS_FAIL(QS_ERR_INVALID_ARG, "bench allreduce needs several ranks: run it under mpirun -np N (N >= 2)");
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
        const double bytes = (double)n * sizeof(float), factor = 2.0 * (world - 1) / world;
        for (int k = 0; k < 2 && rank == 0; k++) {
            double busbw = factor * bytes / (st[k].median_ms * 1e6);
            if (!o->json)
                printf("  %4lld MiB %-9s %9.3f ms (min %.3f, max %.3f)  bus bandwidth %6.2f GB/s%s\n",
                       (long long)sizes_mb[s], k ? "direct" : "bucketed", st[k].median_ms, st[k].min_ms, st[k].max_ms,
                       busbw, k ? "" : "");
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "kind", "allreduce");
            cJSON_AddStringToObject(r, "path", k ? "MPI_Allreduce" : "bucketed");
            cJSON_AddNumberToObject(r, "bytes", bytes);
            cJSON_AddNumberToObject(r, "ranks", world);
            cJSON_AddNumberToObject(r, "median_ms", st[k].median_ms);
            cJSON_AddNumberToObject(r, "bus_gb_per_s", busbw);
            cJSON_AddItemToArray(o->rows, r);
        }
    }
    return QS_OK;
}
