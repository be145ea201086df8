/* cli/bench_quant.c — `qsync bench quantize`: elements per second of the backend's quantize op
 * on 4 Mi elements (16 MiB of FP32) for each target format with round-to-nearest and with
 * stochastic rounding, on one thread and on all threads (OpenMP). On a GPU (--device cuda):
 * an N×N FP32 tensor in device memory (--size, default 8192), each format with both
 * roundings, the 1-byte ones also with the transposed copy (dst_t), as ms per call and the
 * bandwidth of the bytes a call must move at least (the source read once, plus once more for
 * the amax of S8/FP8; the outputs written once). */
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
    void *q, *q_t;   /* q_t: NULL or the transposed copy */
    float scale;
    float *dscale;   /* device: the scale in backend memory (else &scale) */
    int64_t rows, cols;
    uint64_t counter;
} quant_case;

static qs_status run_quant(void *ctx) {
    quant_case *c = ctx;
    qs_sr sr = {.key = 5, .counter = ++c->counter};
    return c->be->ops->quantize(c->be, NULL, c->rows, c->cols, c->x, NULL, c->dt, c->q, c->dscale ? c->dscale : &c->scale,
                                false, c->sr ? &sr : NULL, c->q_t, NULL);
}

/* The GPU part (file comment): every buffer in backend memory. */
static qs_status bench_quantize_device(qs_bench_opts *o) {
    const int64_t n_side = o->shape_m ? o->shape_m : 8192, n = n_side * n_side;
    qs_backend *be = o->be;
    float *hx = qs_host_alloc((size_t)n * sizeof(float));
    void *x = NULL, *q = NULL, *qt = NULL, *sc = NULL;
    qs_status st = hx ? QS_OK : QS_FAIL(QS_ERR_OOM, "bench quantize: out of host memory");
    if (st == QS_OK) st = be->ops->alloc(be, (size_t)n * sizeof(float), &x);
    if (st == QS_OK) st = be->ops->alloc(be, (size_t)n * 2, &q);
    if (st == QS_OK) st = be->ops->alloc(be, (size_t)n, &qt);
    if (st == QS_OK) st = be->ops->alloc(be, 256, &sc);
    if (st == QS_OK) {
        qs_bench_fill(hx, n, 9);
        st = be->ops->copy_h2d(be, NULL, x, hx, (size_t)n * sizeof(float));
    }
    const qs_dtype dts[] = {QS_S8, QS_F8E4M3, QS_F8E5M2, QS_BF16};
    enum { NC = 14 };
    quant_case cases[NC];
    qs_bench_fn fns[NC];
    void *ctxs[NC];
    int nc = 0;
    for (int d = 0; d < 4; d++)
        for (int t = 0; t < (dts[d] == QS_BF16 ? 1 : 2); t++)
            for (int r = 0; r < 2; r++) {
                cases[nc] = (quant_case){.be = be, .dt = dts[d], .sr = r == 1, .x = x, .q = q, .q_t = t ? qt : NULL,
                                         .dscale = sc, .rows = n_side, .cols = n_side};
                fns[nc] = run_quant;
                ctxs[nc] = &cases[nc];
                nc++;
            }
    qs_bench_stat stats[NC];
    if (st == QS_OK) st = qs_bench_run(o, nc, fns, ctxs, stats);
    if (st == QS_OK && !o->json)
        printf("quantize on %s: %lld x %lld FP32, %d reps (median)\n", o->device, (long long)n_side, (long long)n_side,
               o->reps);
    for (int i = 0; i < nc && st == QS_OK; i++) {
        const quant_case *c = &cases[i];
        const bool scaled = c->dt != QS_BF16;
        const double bytes = (double)n * (4.0 * (scaled ? 2 : 1) + (double)qs_dtype_size(c->dt) + (c->q_t ? 1.0 : 0.0));
        const double gbs = bytes / (stats[i].median_ms * 1e6);
        const char *rnd = c->sr ? "stochastic" : "nearest";
        if (!o->json)
            printf("  %-7s %-10s %-11s %8.4f ms  %7.1f GB/s (minimum traffic)\n", qs_dtype_name(c->dt), rnd,
                   c->q_t ? "+transposed" : "", stats[i].median_ms, gbs);
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "kind", "quantize");
        cJSON_AddStringToObject(row, "dtype", qs_dtype_name(c->dt));
        cJSON_AddStringToObject(row, "rounding", rnd);
        cJSON_AddBoolToObject(row, "transposed_copy", c->q_t != NULL);
        cJSON_AddNumberToObject(row, "elements", (double)n);
        cJSON_AddNumberToObject(row, "median_ms", stats[i].median_ms);
        cJSON_AddNumberToObject(row, "min_traffic_gb_per_s", gbs);
        cJSON_AddItemToArray(o->rows, row);
    }
    void *bufs[] = {x, q, qt, sc};
    for (int i = 0; i < 4; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    qs_host_free(hx);
    return st;
}

qs_status qs_bench_quantize(qs_bench_opts *o) {
    if (o->device_sync) return bench_quantize_device(o);
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
        cases[i] = (quant_case){.be = o->be, .dt = dts[i / 2], .sr = i % 2 == 1, .x = x, .q = q, .rows = 1, .cols = QN};
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
