/* cli/bench_quant.c — `qsync bench quantize`: elements per second of the backend's quantize op
 * on 4 Mi elements (16 MiB of FP32) for each target format with round-to-nearest and with
 * stochastic rounding, on one thread and on all threads (OpenMP). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "qsync/tensor.h"

#define QN ((int64_t)4 << 20)

typedef struct quant_case {
    qs_backend *be;
    qs_dtype dt;
    bool sr;
    const float *x;
    void *q;
    float scale;
    uint64_t counter;
} quant_case;

static qs_status run_quant(void *ctx) {
    quant_case *c = ctx;
    qs_sr sr = {.key = 5, .counter = ++c->counter};
    return c->be->ops->quantize(c->be, NULL, 1, QN, c->x, NULL, c->dt, c->q, &c->scale, false, c->sr ? &sr : NULL);
}

qs_status qs_bench_quantize(qs_bench_opts *o) {
    float *x = qs_host_alloc((size_t)QN * sizeof(float));
    void *q = qs_host_alloc((size_t)QN * 2);
    if (!x || !q) {
        qs_host_free(x);
        qs_host_free(q);
        return QS_FAIL(QS_ERR_OOM, "bench quantize: out of memory");
    }
    qs_bench_fill(x, QN, 9);
    const qs_dtype dts[] = {QS_S8, QS_BF16, QS_F16, QS_F8E4M3, QS_F8E5M2};
    enum { NC = 10 };
    quant_case cases[NC];
    qs_bench_fn fns[NC];
    void *ctxs[NC];
    for (int i = 0; i < NC; i++) {
        cases[i] = (quant_case){.be = o->be, .dt = dts[i / 2], .sr = i % 2 == 1, .x = x, .q = q};
        fns[i] = run_quant;
        ctxs[i] = &cases[i];
    }
    const int all = omp_get_max_threads();
    const int threads[2] = {1, all};
    qs_status st = QS_OK;
    if (!o->json) printf("quantize: %lld elements from FP32, %d reps (median)\n", (long long)QN, o->reps);
    for (int t = 0; t < (all > 1 ? 2 : 1) && st == QS_OK; t++) {
        omp_set_num_threads(threads[t]);
        qs_bench_stat stats[NC];
        st = qs_bench_run(o, NC, fns, ctxs, stats);
        for (int i = 0; i < NC && st == QS_OK; i++) {
            double ge = (double)QN / (stats[i].median_ms * 1e6);
            const char *rnd = cases[i].sr ? "stochastic" : "nearest";
            if (!o->json)
                printf("  %-7s %-10s %d thread(s): %8.3f ms  %6.2f G elements/s\n", qs_dtype_name(cases[i].dt), rnd,
                       threads[t], stats[i].median_ms, ge);
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "kind", "quantize");
            cJSON_AddStringToObject(r, "dtype", qs_dtype_name(cases[i].dt));
            cJSON_AddStringToObject(r, "rounding", rnd);
            cJSON_AddNumberToObject(r, "threads", threads[t]);
            cJSON_AddNumberToObject(r, "elements", (double)QN);
            cJSON_AddNumberToObject(r, "median_ms", stats[i].median_ms);
            cJSON_AddNumberToObject(r, "g_elements_per_s", ge);
            cJSON_AddItemToArray(o->rows, r);
        }
    }
    omp_set_num_threads(all);
    qs_host_free(x);
    qs_host_free(q);
    return st;
}
