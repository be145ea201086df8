/* tests/test_predict.c — the predictor's measurements: the line fits, the profile of a model
 * (every op of every run, memory that adds up to what the backend allocated, casts fitted),
 * precision lists, and `qsync profile` on bad input and under mpirun. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "graph/graph.h"
#include "graph/precision.h"
#include "predict/profile.h"
#include "core/json_doc.h"
#include "parallel/grad_sync.h"
#include "predict/simulate.h"
#include "graph/precision_setup.h"
#include "backends/backends.h"
#include "optim/optim.h"
#include "run_cmd.h"

static void test_linear_fit(void **state) {
    double x[4] = {1, 2, 3, 4}, y[4], a, b;
    for (int i = 0; i < 4; i++) y[i] = 0.5 + 0.25 * x[i];
    qs_linear_fit(x, y, 4, &a, &b);
    assert_true(fabs(a - 0.5) < 1e-12 && fabs(b - 0.25) < 1e-12);
    /* a negative intercept is replaced by the line through the origin */
    for (int i = 0; i < 4; i++) y[i] = -1.0 + 2.0 * x[i];
    qs_linear_fit(x, y, 4, &a, &b);
    assert_true(a == 0 && fabs(b - (1 * 1 + 3 * 2 + 5 * 3 + 7 * 4) / 30.0) < 1e-12);
    /* one point, or all at the same x: through the origin */
    qs_linear_fit(x, y, 1, &a, &b);
    assert_true(a == 0 && fabs(b - 1.0) < 1e-12);
    double same[3] = {2, 2, 2}, ys[3] = {1, 2, 3};
    qs_linear_fit(same, ys, 3, &a, &b);
    assert_true(a == 0 && fabs(b - 1.0) < 1e-12);
    qs_linear_fit(x, y, 0, &a, &b);
    assert_true(a == 0 && b == 0);
}

static void test_precision_list(void **state) {
    qs_precision p[QS_PREC_COUNT];
    int n = 0;
    char err[160];
    assert_true(qs_precision_list_parse("fp32,int8,bf16", p, QS_PREC_COUNT, &n, err, sizeof err));
    assert_int_equal(n, 3);
    assert_int_equal(p[0], QS_PREC_FP32);
    assert_int_equal(p[1], QS_PREC_INT8);
    assert_int_equal(p[2], QS_PREC_BF16);
    assert_false(qs_precision_list_parse("fp32,int4", p, QS_PREC_COUNT, &n, err, sizeof err));
    assert_non_null(strstr(err, "unknown precision 'int4'"));
    assert_false(qs_precision_list_parse("int8,int8", p, QS_PREC_COUNT, &n, err, sizeof err));
    assert_non_null(strstr(err, "listed twice"));
    assert_false(qs_precision_list_parse("", p, QS_PREC_COUNT, &n, err, sizeof err));
    assert_false(qs_precision_list_parse("fp32,int8", p, 1, &n, err, sizeof err));
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* cnn at fp32 and int8 on a synthetic batch: every run lists every op of the model built at
 * that precision (its casts included), Conv2d/Linear at the run's precision with a forward
 * time; the per-op memory adds up to the run's categories, which add up to exactly what the
 * backend allocated; a cast fit for f32 → s8 over the 4 casts. */
static void test_profile_cnn(void **state) {
    const int64_t B = 8;
    float *x = calloc((size_t)B * 28 * 28, sizeof *x);
    int32_t y[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    assert_non_null(x);
    for (int64_t i = 0; i < B * 28 * 28; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    qs_precision precs[2] = {QS_PREC_FP32, QS_PREC_INT8};
    qs_profile_options o = {.model = "cnn", .data = "synthetic", .batch = B, .threads = 1, .precs = precs,
                            .n_precs = 2, .allow_emulated = true, .warmup = 1, .reps = 3,
                            .optimizer = QS_OPTIM_SGD, .x = x, .y = y};
    o.model_opt = qs_models_default_options(28, 28, 1, 10);
    o.model_opt.width = 4;
    cJSON *doc = NULL;
    assert_int_equal(qs_profile_model(&o, &doc), QS_OK);
    assert_string_equal(cJSON_GetObjectItem(doc, "format")->valuestring, QS_PROFILE_FORMAT);
    assert_int_equal((int)num(doc, "version"), QS_PROFILE_VERSION);
    assert_int_equal((int)num(doc, "batch"), (int)B);
    assert_non_null(strstr(cJSON_GetObjectItem(doc, "config")->valuestring, "width=4"));
    const char *prec_names[2] = {"fp32", "int8"};
    int want_ops[2] = {11, 15}; /* 11 ops after the input; int8 adds a cast in front of each of 4 layers */
    for (int r = 0; r < 2; r++) {
        const cJSON *run = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "runs"), prec_names[r]);
        assert_non_null(run);
        const cJSON *ops = cJSON_GetObjectItem(run, "ops"), *op;
        assert_int_equal(cJSON_GetArraySize(ops), want_ops[r]);
        double out = B * 28 * 28 * sizeof(float), grad = 0, saved = 0;
        int gemms = 0;
        cJSON_ArrayForEach(op, ops) {
            const char *kind = cJSON_GetObjectItem(op, "kind")->valuestring;
            if (strcmp(kind, "Conv2d") == 0 || strcmp(kind, "Linear") == 0) {
                gemms++;
                assert_string_equal(cJSON_GetObjectItem(op, "precision")->valuestring, prec_names[r]);
                assert_true(num(op, "forward_ms") > 0);
                assert_true(num(op, "backward_weights_ms") > 0);
            }
            if (strcmp(kind, "Cast") == 0) {
                assert_string_equal(cJSON_GetObjectItem(op, "out_dtype")->valuestring, "s8");
                assert_true(num(op, "cast_ms") > 0);
            }
            out += num(op, "out_bytes");
            grad += num(op, "grad_bytes");
            saved += num(op, "saved_bytes");
        }
        assert_int_equal(gemms, 4);
        const cJSON *mem = cJSON_GetObjectItem(run, "memory_bytes");
        assert_true(out == num(mem, "activations"));
        assert_true(grad == num(mem, "activation_grads"));
        assert_true(saved == num(mem, "saved"));
        double total = 0;
        const char *cats[] = {"params", "grads", "optimizer", "buffers", "activations", "activation_grads", "saved",
                              "workspace", "labels"};
        for (int k = 0; k < 9; k++) total += num(mem, cats[k]);
        assert_true(total == num(mem, "backend_in_use"));
        assert_true(num(run, "step_ms") > 0 && num(run, "optimizer_ms") > 0);
    }
    const cJSON *casts = cJSON_GetObjectItem(doc, "casts");
    assert_int_equal(cJSON_GetArraySize(casts), 1);
    const cJSON *c = cJSON_GetArrayItem(casts, 0);
    assert_string_equal(cJSON_GetObjectItem(c, "from")->valuestring, "f32");
    assert_string_equal(cJSON_GetObjectItem(c, "to")->valuestring, "s8");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(c, "points")), 4);
    assert_true(num(c, "alpha_ms") >= 0 && num(c, "beta_ms_per_element") >= 0);
    cJSON_Delete(doc);
    /* refused: too few repetitions, an unknown model, an emulated precision not allowed */
    o.reps = 2;
    assert_int_equal(qs_profile_model(&o, &doc), QS_ERR_INVALID_ARG);
    o.reps = 3;
    o.model = "resnet9";
    assert_int_not_equal(qs_profile_model(&o, &doc), QS_OK);
    o.model = "cnn";
    qs_precision fp8 = QS_PREC_FP8;
    o.precs = &fp8;
    o.n_precs = 1;
    o.allow_emulated = false;
    assert_int_not_equal(qs_profile_model(&o, &doc), QS_OK);
    assert_non_null(strstr(qs_last_error(), "fp8"));
    assert_null(doc);
    free(x);
}

/* A cnn (width 4, batch 8) profile at fp32 and int8, for the replayer's tests. */
static cJSON *small_profile(void) {
    static float x[8 * 28 * 28];
    static int32_t y[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int i = 0; i < 8 * 28 * 28; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    qs_precision precs[2] = {QS_PREC_FP32, QS_PREC_INT8};
    qs_profile_options o = {.model = "cnn", .data = "synthetic", .batch = 8, .threads = 1, .precs = precs, .n_precs = 2,
                            .allow_emulated = true, .warmup = 1, .reps = 3, .optimizer = QS_OPTIM_SGD, .x = x, .y = y,
                            .data_ms = 0.5};
    o.model_opt = qs_models_default_options(28, 28, 1, 10);
    o.model_opt.width = 4;
    cJSON *doc = NULL;
    assert_int_equal(qs_profile_model(&o, &doc), QS_OK);
    return doc;
}

/* The profile document doc read as a profile (io/profile_file.h), named origin; *p is freed first
 * when it holds one. */
static void typed(const cJSON *doc, const char *origin, qs_profile *p) {
    if (p->origin[0]) qs_profile_free(p);
    if (qs_profile_from_json(doc, origin, p) != QS_OK) fail_msg("profile %s: %s", origin, qs_last_error());
}

/* qs_simulate of the n workers, its prediction as its document into *out (NULL on failure). */
static qs_status simulate(const qs_sim_worker *w, int n, const qs_sim_options *so, cJSON *trace, cJSON **out) {
    qs_sim_result res;
    qs_status st = qs_simulate(w, n, so, trace, &res);
    *out = st == QS_OK ? qs_sim_result_json(&res) : NULL;
    qs_sim_result_free(&res);
    return st;
}

/* cnn width 4 with conv2 and fc1 in INT8 (the others FP32), casts inserted; set up at batch 8
 * when be is not NULL (with an SGD optimizer's momentum counted in *optimizer_bytes). */
static qs_model *mixed_cnn(qs_backend *be, size_t *optimizer_bytes) {
    qs_model_options mo = qs_models_default_options(28, 28, 1, 10);
    mo.width = 4;
    qs_model *m = NULL;
    assert_int_equal(qs_models_build("cnn", &mo, &m), QS_OK);
    qs_model_fuse(m);
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].name, "conv2") == 0 || strcmp(m->nodes[i].name, "fc1") == 0) m->nodes[i].prec = QS_PREC_INT8;
    assert_int_equal(qs_model_insert_casts(m, NULL), QS_OK);
    if (be) {
        assert_int_equal(qs_model_setup(m, be, 8, 1), QS_OK);
        *optimizer_bytes = m->params.bytes; /* SGD momentum: one buffer like the parameters */
    }
    return m;
}

/* One worker: the iteration is the sum of its parts; a mixed plan's memory is predicted to the
 * byte of what the engine allocates for it (from the uniform runs), and its time lies between
 * the uniform plans'. */
static void test_simulate_one_worker(void **state) {
    cJSON *prof = small_profile();
    qs_profile P = {0};
    typed(prof, "small", &P);
    qs_backend *be = NULL;
    assert_int_equal(qs_backend_cpu_create(1, &be), QS_OK);
    size_t opt_bytes = 0;
    qs_model *real = mixed_cnn(be, &opt_bytes), *m = mixed_cnn(NULL, NULL);
    qs_sim_worker w = {.profile = &P, .m = m, .batch = 8};
    qs_sim_options so = {.bucket_bytes = 25 << 20, .overlap = true};
    cJSON *trace = cJSON_CreateArray(), *out = NULL;
    assert_int_equal(simulate(&w, 1, &so, trace, &out), QS_OK);
    const cJSON *w0 = cJSON_GetArrayItem(cJSON_GetObjectItem(out, "workers"), 0);
    double parts = num(w0, "data_ms") + num(w0, "untimed_ms") + num(w0, "forward_ms") + num(w0, "backward_ms") +
                   num(w0, "optimizer_ms");
    assert_true(fabs(num(out, "iteration_ms") - parts) < 1e-9);
    assert_true(num(w0, "data_ms") == 0.5);
    qs_memory_report mr;
    qs_model_memory(real, &mr);
    size_t in_use = 0;
    be->ops->memory_stats(be, &in_use, NULL);
    assert_true(num(w0, "memory_bytes") == (double)(in_use + opt_bytes));
    assert_true(cJSON_GetArraySize(trace) > 10);
    cJSON_Delete(out);
    cJSON_Delete(trace);
    /* a profile at another batch, a precision it has no run of */
    w.batch = 16;
    assert_int_equal(simulate(&w, 1, &so, NULL, &out), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "taken at batch 8"));
    w.batch = 8;
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].name, "fc2") == 0) m->nodes[i].prec = QS_PREC_BF16;
    assert_int_equal(simulate(&w, 1, &so, NULL, &out), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "no run at bf16"));
    qs_model_free(m);
    qs_model_free(real);
    be->ops->destroy(be);
    qs_profile_free(&P);
    cJSON_Delete(prof);
}

/* One case of test_simulate_memory_is_the_plan: a model and its lower precision. */
typedef struct sim_mem_case {
    const char *name;
    int64_t in_h, in_w, in_c, classes, width, layers, heads;
    qs_precision low;
} sim_mem_case;

/* One batch of inputs for model options mo at batch b (token ids for a transformer, whose
 * input is in_c tokens), labels y of label_len each: owned by the caller. */
static void sim_mem_batch(const qs_model_options *mo, int64_t b, int64_t label_len, int64_t classes, float **x,
                          int32_t **y) {
    const int64_t n = b * mo->in_h * mo->in_w * mo->in_c;
    *x = malloc((size_t)n * sizeof **x);
    *y = malloc((size_t)(b * label_len) * sizeof **y);
    assert_true(*x && *y);
    for (int64_t i = 0; i < n; i++) (*x)[i] = (float)(i % classes); /* whole numbers: valid token ids too */
    for (int64_t i = 0; i < b * label_len; i++) (*y)[i] = (int32_t)(i % classes);
}

/* The replayer's memory for a worker is what the engine allocates for the same precisions: the
 * prediction from a profile taken at the worker's batch equals the set-up model's arenas,
 * parameters, gradients, buffers and optimizer state (qs_model_memory), and the backend's own
 * count of what it allocated stays within 1% of it — for cnn, resnet18 and gpt-mini, at two
 * batches each, uniform FP32 and a lower precision. */
static void test_simulate_memory_is_the_plan(void **state) {
    (void)state;
    static const sim_mem_case cases[] = {
        {"cnn", 28, 28, 1, 10, 4, 0, 0, QS_PREC_INT8},
        {"resnet18", 16, 16, 3, 10, 4, 0, 0, QS_PREC_INT8},
        {"gpt-mini", 1, 1, 16, 64, 64, 1, 2, QS_PREC_BF16},
    };
    static const int64_t batches[2] = {4, 8};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int bi = 0; bi < 2; bi++) {
            const sim_mem_case *e = &cases[c];
            const int64_t b = batches[bi];
            qs_model_options mo = qs_models_default_options(e->in_h, e->in_w, e->in_c, e->classes);
            mo.width = e->width, mo.layers = e->layers, mo.heads = e->heads;
            qs_model *probe = NULL;
            assert_int_equal(qs_models_build(e->name, &mo, &probe), QS_OK);
            float *x = NULL;
            int32_t *y = NULL;
            sim_mem_batch(&mo, b, probe->label_len, e->classes, &x, &y);
            qs_model_free(probe);
            qs_precision precs[2] = {QS_PREC_FP32, e->low};
            qs_profile_options o = {.model = e->name, .data = "synthetic", .batch = b, .threads = 1, .precs = precs,
                                    .n_precs = 2, .allow_emulated = true, .warmup = 1, .reps = 3,
                                    .optimizer = QS_OPTIM_SGD, .x = x, .y = y, .model_opt = mo};
            cJSON *doc = NULL;
            if (qs_profile_model(&o, &doc) != QS_OK) fail_msg("profile %s: %s", e->name, qs_last_error());
            qs_profile P = {0};
            typed(doc, e->name, &P);
            for (int k = 0; k < 2; k++) {
                /* the engine: the model set up as training sets it up, and its optimizer */
                qs_backend *be = NULL;
                assert_int_equal(qs_backend_cpu_create(1, &be), QS_OK);
                qs_model *real = NULL;
                assert_int_equal(qs_models_build(e->name, &mo, &real), QS_OK);
                qs_model_fuse(real);
                qs_precision_options po;
                qs_precision_options_default(&po);
                po.uniform = precs[k];
                po.allow_emulated = true;
                assert_int_equal(qs_precision_setup(real, be, &po), QS_OK);
                assert_int_equal(qs_model_setup(real, be, b, 1), QS_OK);
                const qs_optim_config oc = qs_profile_optim_config(QS_OPTIM_SGD);
                qs_optimizer opt;
                assert_int_equal(qs_optimizer_init(&opt, be, &real->params, &oc), QS_OK);
                qs_memory_report mr;
                qs_model_memory(real, &mr);
                const double arenas = (double)(mr.params + mr.grads + mr.buffers + mr.activations + mr.activation_grads +
                                               mr.saved + mr.workspace + mr.labels +
                                               qs_optim_state_bytes(&oc, &real->params));
                size_t in_use = 0;
                be->ops->memory_stats(be, &in_use, NULL);
                /* the replayer: the planner's view of the same precisions */
                qs_model *m = NULL;
                assert_int_equal(qs_models_build(e->name, &mo, &m), QS_OK);
                qs_model_fuse(m);
                qs_model_set_uniform_precision(m, precs[k]);
                assert_int_equal(qs_model_insert_casts(m, NULL), QS_OK);
                qs_sim_worker w = {.profile = &P, .m = m, .batch = b};
                qs_sim_options so = {.bucket_bytes = 25 << 20, .overlap = true};
                cJSON *out = NULL;
                if (simulate(&w, 1, &so, NULL, &out) != QS_OK) fail_msg("simulate %s: %s", e->name, qs_last_error());
                const double pred = num(cJSON_GetArrayItem(cJSON_GetObjectItem(out, "workers"), 0), "memory_bytes");
                printf("  %s %s batch %lld: predicted %.0f B, set-up model %.0f B, backend %zu B\n", e->name,
                       qs_precision_name(precs[k]), (long long)b, pred, arenas, in_use);
                assert_true(pred == arenas);
                assert_true(fabs(pred - (double)in_use) <= 0.01 * (double)in_use);
                cJSON_Delete(out);
                qs_model_free(m);
                qs_optimizer_free(&opt, be);
                qs_model_free(real);
                be->ops->destroy(be);
            }
            qs_profile_free(&P);
            cJSON_Delete(doc);
            free(x);
            free(y);
        }
}

/* Two workers, the second emulated 2x slower: without an all-reduce measurement for 2 ranks
 * the replay is refused; with one, the gradients' buckets are exchanged after the slow worker's
 * backward, so the fast one waits and both finish with it. */
static void test_simulate_two_workers(void **state) {
    cJSON *prof = small_profile();
    qs_profile P = {0};
    typed(prof, "small", &P);
    qs_model *m0 = mixed_cnn(NULL, NULL), *m1 = mixed_cnn(NULL, NULL);
    qs_sim_worker w[2] = {{.profile = &P, .m = m0, .batch = 8}, {.profile = &P, .m = m1, .batch = 8, .slowdown = 2}};
    qs_sim_options so = {.bucket_bytes = 1 << 10, .overlap = true};
    cJSON *out = NULL;
    assert_int_equal(simulate(w, 2, &so, NULL, &out), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "all-reduce measured between 2 ranks"));
    cJSON *ar = cJSON_Parse("{\"ranks\": 2, \"alpha_ms\": 0.01, \"beta_ms_per_byte\": 1e-6, "
                            "\"points\": [[1024, 0.02], [1048576, 1.0]]}");
    cJSON_AddItemToObject(prof, "allreduce", ar);
    typed(prof, "small", &P);
    assert_int_equal(simulate(w, 2, &so, NULL, &out), QS_OK);
    const cJSON *comm = cJSON_GetObjectItem(out, "comm");
    assert_string_equal(cJSON_GetObjectItem(comm, "model")->valuestring, "serial");
    assert_true(num(comm, "buckets") > 1 && num(comm, "allreduce_ms") > 0);
    const cJSON *ws = cJSON_GetObjectItem(out, "workers"), *a = cJSON_GetArrayItem(ws, 0), *b = cJSON_GetArrayItem(ws, 1);
    assert_true(fabs(num(b, "backward_ms") - 2 * num(a, "backward_ms")) < 1e-9 * num(b, "backward_ms") + 1e-12);
    assert_true(num(a, "comm_wait_ms") > num(b, "comm_wait_ms"));
    assert_int_equal((int)num(out, "slowest"), 1);
    assert_true(num(out, "iteration_ms") >= num(b, "data_ms") + num(b, "forward_ms") + num(b, "backward_ms") +
                                            num(comm, "allreduce_ms"));
    cJSON_Delete(out);
    qs_model_free(m0);
    qs_model_free(m1);
    qs_profile_free(&P);
    cJSON_Delete(prof);
}

/* Give a profile (small_profile) a 2-rank in-place sync of m's gradients in 1 KiB buckets
 * (overlap_ms, no_overlap_ms) and a 2-rank all-reduce size curve. */
static void add_two_rank_comm(cJSON *prof, const qs_model *m, double overlap_ms, double no_overlap_ms) {
    cJSON *run = cJSON_GetObjectItem(cJSON_GetObjectItem(prof, "runs"), "fp32");
    qs_grad_bucket b[64];
    int eb[64];
    assert_true(m->params.count <= 64);
    int nb = qs_grad_buckets_form(&m->params, 1 << 10, b, eb);
    char js[256];
    snprintf(js, sizeof js, "{\"ranks\": 2, \"bucket_bytes\": 1024, \"buckets\": %d, \"overlap_ms\": %g, "
             "\"no_overlap_ms\": %g}", nb, overlap_ms, no_overlap_ms); /* no synchronized steps: optional */
    cJSON_AddItemToObject(run, "grad_sync", cJSON_Parse(js));
    cJSON_AddItemToObject(prof, "allreduce", cJSON_Parse("{\"ranks\": 2, \"alpha_ms\": 0.01, \"beta_ms_per_byte\": "
                                                         "1e-6, \"points\": [[1024, 0.02], [1048576, 1.0]]}"));
}

/* Two identical workers: a gradient sync measured in place for these buckets replaces the
 * size curve (in the mode asked, averaging included), and the synchronized step grows by the
 * jitter: each worker's steps 10, 10, 14 ms (residuals 0, 0, +4) make max(e0, e1) = 4 with
 * probability 5/9, so its median is 4 and its mean 20/9. */
static void test_simulate_measured_sync_and_jitter(void **state) {
    cJSON *prof = small_profile();
    cJSON *run = cJSON_GetObjectItem(cJSON_GetObjectItem(prof, "runs"), "fp32");
    assert_true(cJSON_ReplaceItemInObject(run, "step_samples_ms", cJSON_Parse("[10, 14, 10]")));
    qs_model *m0 = mixed_cnn(NULL, NULL), *m1 = mixed_cnn(NULL, NULL);
    add_two_rank_comm(prof, m0, 3, 5);
    qs_profile P = {0};
    typed(prof, "small", &P);
    qs_sim_worker w[2] = {{.profile = &P, .m = m0, .batch = 8}, {.profile = &P, .m = m1, .batch = 8}};
    const double want_ms[3] = {3, 5, -1}; /* overlap, no overlap, other buckets (size curve) */
    for (int k = 0; k < 3; k++) {
        qs_sim_options so = {.bucket_bytes = k == 2 ? 2048 : 1024, .overlap = k != 1};
        cJSON *out = NULL;
        assert_int_equal(simulate(w, 2, &so, NULL, &out), QS_OK);
        const cJSON *comm = cJSON_GetObjectItem(out, "comm"), *a = cJSON_GetArrayItem(cJSON_GetObjectItem(out, "workers"), 0);
        assert_string_equal(cJSON_GetObjectItem(comm, "source")->valuestring, k == 2 ? "size curve" : "measured sync");
        if (want_ms[k] > 0) {
            assert_true(num(comm, "allreduce_ms") == want_ms[k]);
            assert_true(num(a, "grad_average_ms") == 0); /* inside the measured sync */
        } else {
            assert_true(num(a, "grad_average_ms") > 0);
        }
        assert_true(num(out, "jitter_ms") == 4);
        assert_true(fabs(num(out, "iteration_mean_ms") - num(out, "iteration_ms") + 4 - 20.0 / 9) < 0.05);
        assert_true(fabs(num(out, "iteration_ms") - num(a, "iteration_ms") - 4) < 1e-9);
        cJSON_Delete(out);
    }
    qs_model_free(m0);
    qs_model_free(m1);
    qs_profile_free(&P);
    cJSON_Delete(prof);
}


/* The command: a profile file written (and nothing on failure); usage errors; under mpirun
 * with 2 ranks the all-reduce fit between them is added. */
static void test_profile_cli(void **state) {
    char a[1024], path[512];
    snprintf(path, sizeof path, "%s/cnn.json", qs_test_tmp);
    snprintf(a, sizeof a, "profile --model cnn --width 4 --batch 8 --data synthetic --precisions fp32,bf16 "
             "--allow-emulated --reps 3 --warmup 1 --threads 1 --out %s", path); /* bf16: emulated without AVX-512 */
    qs_test_expect_qsync(0, "written to", a);
    cJSON *doc = NULL;
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *text = calloc(1 << 20, 1);
    assert_non_null(text);
    assert_true(fread(text, 1, (1 << 20) - 1, f) > 0);
    fclose(f);
    doc = cJSON_Parse(text);
    free(text);
    assert_non_null(doc);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "runs"), "bf16"));
    assert_null(cJSON_GetObjectItem(doc, "allreduce"));
    cJSON_Delete(doc);
    /* the replayer from that file: a trace; a worker type without a profile; a plan of
     * another model; a profile of a precision the plan does not use refused by name */
    snprintf(a, sizeof a, "simulate --profile %s --precision bf16 --allow-emulated --trace %s/t.json", path, qs_test_tmp);
    qs_test_expect_qsync(0, "predicted iteration", a);
    snprintf(a, sizeof a, "grep -c traceEvents %s/t.json", qs_test_tmp);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "simulate --profile %s --precision int8 --allow-emulated", path);
    qs_test_expect_qsync(1, "has no run at int8", a);
    snprintf(a, sizeof a, "printf '{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": [{\"device\": \"cpu\", "
             "\"type\": \"a\"}, {\"device\": \"cpu\", \"type\": \"b\"}]}' > %s/c.json", qs_test_tmp);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "simulate --profile a=%s --cluster %s/c.json", path, qs_test_tmp);
    qs_test_expect_qsync(1, "no profile for worker 1 of type \"b\"", a);
    snprintf(a, sizeof a, "simulate --profile %s --plan %s/examples/plans/mlp-int8.json", path, getenv("QS_SOURCE_DIR"));
    qs_test_expect_qsync(1, "mlp", a);
    qs_test_expect_qsync(2, "--profile is required", "simulate --precision int8");
    /* a profile taken as a cluster's slowed worker records its emulation; the replay takes it
     * as that worker's and refuses it for one without */
    snprintf(a, sizeof a, "printf '{\"format\": \"qsync-cluster\", \"version\": 1, \"workers\": [{\"device\": \"cpu\", "
             "\"type\": \"a\"}, {\"device\": \"cpu\", \"type\": \"b\", \"emulation\": {\"slowdown\": 2, \"method\": "
             "\"duty-cycle\"}}]}' > %s/slow.json", qs_test_tmp);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "profile --model cnn --width 4 --batch 8 --data synthetic --precisions fp32 --reps 3 --warmup 1 "
             "--threads 1 --cluster %s/slow.json --type b --out %s/p-%%t.json", qs_test_tmp, qs_test_tmp);
    qs_test_expect_qsync(0, "p-b.json", a);
    snprintf(a, sizeof a, "grep -A2 '\"emulation\"' %s/p-b.json | grep -c duty-cycle", qs_test_tmp);
    assert_int_equal(qs_test_run_shell(a, NULL), 0);
    snprintf(a, sizeof a, "simulate --profile a=%s,b=%s/p-b.json --cluster %s/slow.json", path, qs_test_tmp, qs_test_tmp);
    qs_test_expect_qsync(1, "no profile holds an all-reduce measured between 2 ranks", a); /* single-process profiles */
    snprintf(a, sizeof a, "simulate --profile %s/p-b.json --cluster %s/slow.json", qs_test_tmp, qs_test_tmp);
    qs_test_expect_qsync(1, "taken under an emulated slowdown of 2, but worker 0 has 1", a);
    qs_test_expect_qsync(2, "--model and --out are required", "profile --model cnn");
    qs_test_expect_qsync(2, "--reps >= 3", "profile --model cnn --reps 1 --out x.json");
    qs_test_expect_qsync(2, "listed twice", "profile --model cnn --precisions int8,int8 --out x.json");
    snprintf(a, sizeof a, "profile --model cnn --batch 100000 --data synthetic --out %s/big.json", qs_test_tmp);
    qs_test_expect_qsync(1, "is larger than the 10000 samples of synthetic (test and training split)", a);
    /* a batch beyond the 2000 test samples profiles on the training split's */
    snprintf(a, sizeof a, "profile --model mlp --width 16 --batch 3000 --data synthetic --precisions fp32 --reps 3 "
             "--warmup 1 --threads 1 --quiet --out %s/b3000.json", qs_test_tmp);
    qs_test_expect_qsync(0, NULL, a);
    snprintf(a, sizeof a, "profile --model cnn --width 4 --batch 8 --data synthetic --reps 3 --out %s/no/such/dir.json",
             qs_test_tmp);
    qs_test_expect_qsync(1, "no/such/dir.json", a);
    qs_test_mpi_env();
    snprintf(a, sizeof a, "mpirun -np 2 --oversubscribe %s "
             "profile --model cnn --width 4 --batch 8 --data synthetic --precisions fp32 --reps 3 --warmup 1 "
             "--threads 1 --quiet --out %s/ar.json && grep -c beta_ms_per_byte %s/ar.json && "
             "grep -c '\"overlap_ms\"' %s/ar.json && grep -c step_samples_ms %s/ar.json && "
             "grep -c '\"co_running_slowdown\":.1,' %s/ar.json",
             getenv("QS_BIN"), qs_test_tmp, qs_test_tmp, qs_test_tmp, qs_test_tmp, qs_test_tmp);
    char *out = NULL;
    int rc = qs_test_run_shell(a, &out);
    if (rc != 0 || !strstr(out, "1")) fail_msg("%s\n  exit %d, output:\n%s", a, rc, out);
    free(out);
    /* the synchronized step in place contains the time inside the sync */
    snprintf(a, sizeof a, "%s/ar.json", qs_test_tmp);
    cJSON *prof = NULL;
    assert_int_equal(qs_json_read(a, (size_t)1 << 24, "profile", &prof), QS_OK);
    const cJSON *gs = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(prof, "runs"), "fp32"), "grad_sync");
    const double in_sync[2] = {cJSON_GetNumberValue(cJSON_GetObjectItem(gs, "overlap_ms")),
                               cJSON_GetNumberValue(cJSON_GetObjectItem(gs, "no_overlap_ms"))};
    const double step[2] = {cJSON_GetNumberValue(cJSON_GetObjectItem(gs, "overlap_step_ms")),
                            cJSON_GetNumberValue(cJSON_GetObjectItem(gs, "no_overlap_step_ms"))};
    for (int k = 0; k < 2; k++)
        if (!(step[k] > in_sync[k] && in_sync[k] > 0))
            fail_msg("grad_sync mode %d: synchronized step %g ms, inside the sync %g ms", k, step[k], in_sync[k]);
    cJSON_Delete(prof);
}

/* Every time of a profile's runs (the run's own figures and its ops') times f. */
static void scale_op_times(cJSON *profile, double f) {
    cJSON *run, *op;
    cJSON_ArrayForEach(run, cJSON_GetObjectItem(profile, "runs")) {
        for (cJSON *v = run->child; v; v = v->next)
            if (cJSON_IsNumber(v) && strstr(v->string, "_ms")) cJSON_SetNumberValue(v, v->valuedouble * f);
        cJSON_ArrayForEach(op, cJSON_GetObjectItem(run, "ops")) {
            for (cJSON *v = op->child; v; v = v->next)
                if (cJSON_IsNumber(v) && strstr(v->string, "_ms")) cJSON_SetNumberValue(v, v->valuedouble * f);
        }
    }
}

/* A sync measured beside a quota-limited worker (co_running_slowdown 2) costs half as much
 * between two unslowed workers, as much again when one of the replayed workers' profiles was
 * taken under that quota and that worker ends its backward last, half again when it ends it
 * first (the transfers start with the last worker, at its pace), and without the record it is
 * taken as measured beside the replayed workers themselves. */
static void test_simulate_sync_beside_slow_worker(void **state) {
    (void)state;
    cJSON *fast = small_profile();
    qs_model *m0 = mixed_cnn(NULL, NULL), *m1 = mixed_cnn(NULL, NULL);
    add_two_rank_comm(fast, m0, 6, 6);
    cJSON *slow = cJSON_Duplicate(fast, true);
    cJSON_AddItemToObject(slow, "emulation", cJSON_Parse("{\"slowdown\": 2, \"method\": \"cgroup-quota\"}"));
    qs_sim_options so = {.bucket_bytes = 1024, .overlap = true};
    cJSON *slow_early = cJSON_Duplicate(slow, true); /* quota-limited, but a quarter of the work */
    scale_op_times(slow_early, 0.25);
    cJSON_AddNumberToObject(slow_early, "co_running_slowdown", 2);
    /* no record; two fast workers; a fast and a quota-limited one ending last; ... ending first */
    const double want[4] = {6, 3, 6, 3};
    for (int k = 0; k < 4; k++) {
        if (k == 1) {
            cJSON_AddNumberToObject(fast, "co_running_slowdown", 2);
            cJSON_AddNumberToObject(slow, "co_running_slowdown", 2);
        }
        qs_profile P0 = {0}, P1 = {0};
        typed(fast, "fast", &P0);
        typed(k == 2 ? slow : k == 3 ? slow_early : fast, "w1", &P1);
        qs_sim_worker w[2] = {{.profile = &P0, .m = m0, .batch = 8}, {.profile = &P1, .m = m1, .batch = 8}};
        cJSON *out = NULL;
        assert_int_equal(simulate(w, 2, &so, NULL, &out), QS_OK);
        qs_profile_free(&P0);
        qs_profile_free(&P1);
        const cJSON *comm = cJSON_GetObjectItem(out, "comm");
        if (fabs(num(comm, "allreduce_ms") - want[k]) > 1e-9)
            fail_msg("case %d: sync %g ms, want %g", k, num(comm, "allreduce_ms"), want[k]);
        cJSON_Delete(out);
    }
    qs_model_free(m0);
    qs_model_free(m1);
    cJSON_Delete(fast);
    cJSON_Delete(slow);
    cJSON_Delete(slow_early);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_fit),
        cmocka_unit_test(test_precision_list),
        cmocka_unit_test(test_profile_cnn),
        cmocka_unit_test(test_simulate_one_worker),
        cmocka_unit_test(test_simulate_memory_is_the_plan),
        cmocka_unit_test(test_simulate_two_workers),
        cmocka_unit_test(test_simulate_measured_sync_and_jitter),
        cmocka_unit_test(test_simulate_sync_beside_slow_worker),
        QS_TMPDIR_TEST(test_profile_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
