/* cli/bench_step.c — `qsync bench step`: whole training steps (forward, backward, SGD with
 * momentum) of a built-in model at each uniform precision, on a fixed synthetic batch, with
 * ReLU/BatchNorm fusion on as in training. Reports images/s and the gain over FP32 measured in
 * the same run (g, the whole-step gain later issues choose emulated slowdowns from). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "graph/precision.h"
#include "models/models.h"
#include "optim/optim.h"
#include "qsync/tensor.h"

typedef struct step_case {
    qs_model *m;
    qs_optimizer opt;
    const float *x;
    const int32_t *y;
} step_case;

static qs_status run_step(void *ctx) {
    step_case *c = ctx;
    QS_TRY(qs_model_forward(c->m, c->x, c->y, true));
    QS_TRY(qs_model_backward(c->m, 1.0f));
    return qs_optimizer_step(&c->opt, c->m->be, c->m->stream, c->m->param_data, c->m->grad_data, 0.01f, NULL);
}

static qs_status step_init(step_case *c, qs_bench_opts *o, qs_precision p, const float *x, const int32_t *y) {
    memset(c, 0, sizeof *c);
    qs_model_options mo = qs_models_default_options(28, 28, 1, 10);
    mo.width = o->width;
    QS_TRY(qs_models_build(o->model, &mo, &c->m));
    qs_model_fuse(c->m);
    qs_model_set_uniform_precision(c->m, p);
    QS_TRY(qs_model_insert_casts(c->m, NULL));
    QS_TRY(qs_model_setup(c->m, o->be, o->batch, 1));
    qs_optim_config oc = qs_optim_config_default(QS_OPTIM_SGD, 0.01f);
    oc.momentum = 0.9f;
    QS_TRY(qs_optimizer_init(&c->opt, o->be, &c->m->params, &oc));
    c->x = x;
    c->y = y;
    return QS_OK;
}

qs_status qs_bench_step(qs_bench_opts *o) {
    const int64_t B = o->batch, in = 28 * 28;
    float *x = qs_host_alloc((size_t)(B * in) * sizeof(float));
    int32_t *y = qs_host_alloc((size_t)B * sizeof(int32_t));
    step_case cases[QS_BENCH_MAX_PRECS];
    qs_bench_fn fns[QS_BENCH_MAX_PRECS];
    void *ctxs[QS_BENCH_MAX_PRECS];
    int n = 0;
    qs_status st = x && y ? QS_OK : QS_FAIL(QS_ERR_OOM, "bench step: out of memory");
    if (st == QS_OK) {
        qs_bench_fill(x, B * in, 11);
        for (int64_t i = 0; i < B; i++) y[i] = (int32_t)(i % 10);
    }
    for (int i = 0; i < o->n_precs && st == QS_OK; i++) { /* a failed case is counted too, to be freed */
        st = step_init(&cases[n], o, o->precs[i], x, y);
        fns[n] = run_step;
        ctxs[n] = &cases[n];
        n++;
    }
    qs_bench_stat stats[QS_BENCH_MAX_PRECS];
    if (st == QS_OK) st = qs_bench_run(o, n, fns, ctxs, stats);
    double fp32_ms = 0;
    for (int j = 0; j < n && st == QS_OK; j++)
        if (o->precs[j] == QS_PREC_FP32) fp32_ms = stats[j].median_ms;
    if (st == QS_OK && !o->json)
        printf("step: %s (width %lld), batch %lld, synthetic 28x28x1 data, %d reps (median)\n", o->model,
               (long long)o->width, (long long)B, o->reps);
    for (int j = 0; j < n && st == QS_OK; j++) {
        double ips = (double)B / (stats[j].median_ms * 1e-3);
        double g = fp32_ms > 0 ? fp32_ms / stats[j].median_ms : 0;
        if (!o->json)
            printf("  %-5s %-8s %9.2f ms/step (min %.2f, max %.2f)  %8.1f images/s  g = x%.2f vs fp32\n",
                   qs_precision_name(o->precs[j]), qs_bench_support(o, o->precs[j]), stats[j].median_ms, stats[j].min_ms,
                   stats[j].max_ms, ips, g);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "kind", "step");
        cJSON_AddStringToObject(r, "model", o->model);
        cJSON_AddNumberToObject(r, "width", (double)o->width);
        cJSON_AddNumberToObject(r, "batch", (double)B);
        cJSON_AddStringToObject(r, "precision", qs_precision_name(o->precs[j]));
        cJSON_AddStringToObject(r, "support", qs_bench_support(o, o->precs[j]));
        cJSON_AddNumberToObject(r, "median_ms", stats[j].median_ms);
        cJSON_AddNumberToObject(r, "images_per_s", ips);
        if (fp32_ms > 0) cJSON_AddNumberToObject(r, "gain_vs_fp32", g);
        cJSON_AddItemToArray(o->rows, r);
    }
    for (int j = 0; j < n; j++) {
        if (cases[j].m) qs_optimizer_free(&cases[j].opt, o->be);
        qs_model_free(cases[j].m);
    }
    qs_host_free(x);
    qs_host_free(y);
    return st;
}
