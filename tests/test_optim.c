/* tests/test_optim.c — SGD / AdamW / clipping against PyTorch (fixture
 * tests/fixtures/optim_ref.json from tools/gen_optim_fixture.py), optimizer-state save/load
 * through a safetensors file, configuration checks and learning-rate schedules.
 *
 * Tolerance (FP32): each element sees at most ~4 roundings per step in either implementation
 * (PyTorch evaluates the same formulas with FP32 tensors and FP32-cast scalars), so after 5
 * steps the difference is bounded by about 20 unit roundoffs u = 2^-24 of the magnitudes
 * involved. Cancellation (a momentum buffer or parameter passing near zero) makes the
 * relevant magnitude the tensor's scale, not the element, so the check is norm-wise:
 *   |got_i - ref_i| <= 32·u·(|ref_i| + max_j |ref_j|).
 * β1, β2 are doubles as in PyTorch, and (1 - β) is formed in double before rounding to float
 * (with float betas, (1 - β2) would differ by 1.3e-5 relative and exp_avg_sq would fail this).
 * Gradient norms: ours is summed in double, PyTorch's in FP32: relative 1e-6. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/atomic_file.h"
#include "core/backend.h"
#include "fixture.h"
#include "graph/graph.h"
#include "graph_helpers.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "io/safetensors.h"

#define U32 (1.0 / 16777216.0)

/* ---- fixture access ---- */

typedef struct fixture {
    cJSON *root;
    qs_table table;
    int steps;
    float *init;            /* host, table layout */
    float **grads;          /* [steps], host, table layout */
} fixture;

static fixture g_fx;
static qs_backend *g_be;

/* Copy a JSON array of numbers into dst (n values expected). */
static void json_floats(const cJSON *arr, float *dst, int64_t n) {
    assert_true(cJSON_IsArray(arr));
    assert_int_equal(cJSON_GetArraySize(arr), n);
    int64_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) dst[i++] = (float)v->valuedouble;
}

/* Fill a table-layout host buffer from an object {param name: [values]}. */
static void json_table_values(const cJSON *obj, const qs_table *t, float *dst) {
    for (int i = 0; i < t->count; i++) {
        const qs_table_entry *e = &t->entries[i];
        json_floats(cJSON_GetObjectItemCaseSensitive(obj, e->name), (float *)((char *)dst + e->offset), e->numel);
    }
}

static float *host_table(const qs_table *t) {
    float *p = qs_host_alloc(t->bytes);
    assert_non_null(p);
    return p;
}

static int setup(void **state) {
    if (qs_test_backend_create(0, &g_be) != 0) return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/optim_ref.json", qs_fixture_dir());
    void *text;
    size_t n;
    if (qs_read_file(path, 1 << 24, &text, &n) != QS_OK) {
        fprintf(stderr, "%s\n", qs_last_error());
        return -1;
    }
    g_fx.root = cJSON_Parse(text);
    free(text);
    if (!g_fx.root) return -1;
    g_fx.steps = cJSON_GetObjectItem(g_fx.root, "steps")->valueint;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(g_fx.root, "params")) {
        int64_t shape[4];
        int ndim = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(p, "shape")) shape[ndim++] = (int64_t)d->valuedouble;
        if (qs_table_add(&g_fx.table, cJSON_GetObjectItem(p, "name")->valuestring, QS_F32, ndim, shape, 0, NULL) != QS_OK)
            return -1;
    }
    g_fx.init = host_table(&g_fx.table);
    for (int i = 0; i < g_fx.table.count; i++) {
        const qs_table_entry *e = &g_fx.table.entries[i];
        const cJSON *pe = cJSON_GetArrayItem(cJSON_GetObjectItem(g_fx.root, "params"), i);
        json_floats(cJSON_GetObjectItem(pe, "init"), (float *)((char *)g_fx.init + e->offset), e->numel);
    }
    g_fx.grads = calloc((size_t)g_fx.steps, sizeof *g_fx.grads);
    for (int s = 0; s < g_fx.steps; s++) {
        g_fx.grads[s] = host_table(&g_fx.table);
        json_table_values(cJSON_GetArrayItem(cJSON_GetObjectItem(g_fx.root, "grads"), s), &g_fx.table,
                          g_fx.grads[s]);
    }
    return 0;
}

static int teardown(void **state) {
    for (int s = 0; s < g_fx.steps; s++) qs_host_free(g_fx.grads[s]);
    free(g_fx.grads);
    qs_host_free(g_fx.init);
    qs_table_free(&g_fx.table);
    cJSON_Delete(g_fx.root);
    qs_test_backend_destroy(&g_be);
    return 0;
}

static const cJSON *find_case(const char *name) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_fx.root, "cases"))
        if (strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name) == 0) return c;
    fail_msg("fixture case %s missing", name);
    return NULL;
}

static float jf(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(c, key);
    return v ? (float)v->valuedouble : 0.0f;
}

static qs_optim_config case_config(const cJSON *c) {
    qs_optim_kind kind;
    assert_int_equal(qs_optim_kind_parse(cJSON_GetObjectItem(c, "kind")->valuestring, &kind), QS_OK);
    qs_optim_config cfg = qs_optim_config_default(kind, jf(c, "lr"));
    cfg.lr = (float)cJSON_GetArrayItem(cJSON_GetObjectItem(c, "lr"), 0)->valuedouble;
    cfg.weight_decay = jf(c, "weight_decay");
    cfg.clip_norm = jf(c, "clip_norm");
    if (kind == QS_OPTIM_SGD) {
        cfg.momentum = jf(c, "momentum");
        cfg.dampening = jf(c, "dampening");
        cfg.nesterov = cJSON_IsTrue(cJSON_GetObjectItem(c, "nesterov"));
    } else {
        cfg.beta1 = cJSON_GetObjectItem(c, "beta1")->valuedouble; /* double, like PyTorch */
        cfg.beta2 = cJSON_GetObjectItem(c, "beta2")->valuedouble;
        cfg.eps = jf(c, "eps");
    }
    return cfg;
}

static float case_lr(const cJSON *c, int step) {
    return (float)cJSON_GetArrayItem(cJSON_GetObjectItem(c, "lr"), step)->valuedouble;
}

/* Norm-wise FP32 comparison (see the file comment) plus extra_rel·|ref_i|; returns the worst
 * error/tolerance. */
static double check_close(const char *what, const float *got, const float *ref, int64_t n, double extra_rel) {
    double scale = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double tol = 32.0 * U32 * (fabs((double)ref[i]) + scale) + extra_rel * fabs((double)ref[i]);
        double err = fabs((double)got[i] - (double)ref[i]);
        if (!(err <= tol)) fail_msg("%s[%lld]: got %.9g, PyTorch %.9g (|diff| %.3g > tol %.3g)", what, (long long)i,
                                    (double)got[i], (double)ref[i], err, tol);
        if (tol > 0) worst = fmax(worst, err / tol);
    }
    return worst;
}

/* Backend buffers for one run. */
typedef struct run {
    qs_optimizer opt;
    void *p, *g;
} run;

static void run_init(run *r, const qs_optim_config *cfg) {
    qs_status st = qs_optimizer_init(&r->opt, g_be, &g_fx.table, cfg);
    if (st != QS_OK) fail_msg("%s", qs_last_error());
    assert_int_equal(g_be->ops->alloc(g_be, g_fx.table.bytes, &r->p), QS_OK);
    assert_int_equal(g_be->ops->alloc(g_be, g_fx.table.bytes, &r->g), QS_OK);
    qs_stream *s = g_be->ops->default_stream(g_be);
    assert_int_equal(g_be->ops->copy_h2d(g_be, s, r->p, g_fx.init, g_fx.table.bytes), QS_OK);
}

static void run_free(run *r) {
    qs_optimizer_free(&r->opt, g_be);
    g_be->ops->free(g_be, r->p);
    g_be->ops->free(g_be, r->g);
}

/* Apply fixture step `step` (its gradients, its lr) and return the norm. */
static double run_step(run *r, const cJSON *c, int step) {
    qs_stream *s = g_be->ops->default_stream(g_be);
    assert_int_equal(g_be->ops->copy_h2d(g_be, s, r->g, g_fx.grads[step], g_fx.table.bytes), QS_OK);
    double norm = -1;
    qs_status st = qs_optimizer_step(&r->opt, g_be, s, r->p, r->g, case_lr(c, step), &norm);
    if (st != QS_OK) fail_msg("%s", qs_last_error());
    return norm;
}

static void check_params(run *r, const cJSON *c, int step, double *worst) {
    qs_stream *s = g_be->ops->default_stream(g_be);
    float *got = host_table(&g_fx.table), *ref = host_table(&g_fx.table);
    assert_int_equal(g_be->ops->copy_d2h(g_be, s, got, r->p, g_fx.table.bytes), QS_OK);
    assert_int_equal(g_be->ops->stream_sync(g_be, s), QS_OK);
    json_table_values(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "after"), step), &g_fx.table, ref);
    for (int i = 0; i < g_fx.table.count; i++) {
        const qs_table_entry *e = &g_fx.table.entries[i];
        char what[160];
        snprintf(what, sizeof what, "%s step %d %s", cJSON_GetObjectItem(c, "name")->valuestring, step + 1, e->name);
        double w = check_close(what, (float *)((char *)got + e->offset), (float *)((char *)ref + e->offset), e->numel, 0.0);
        *worst = fmax(*worst, w);
    }
    qs_host_free(got);
    qs_host_free(ref);
}

/* ---- tests ---- */

static void test_matches_pytorch(void **state) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g_fx.root, "cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        qs_optim_config cfg = case_config(c);
        run r;
        run_init(&r, &cfg);
        double worst = 0.0;
        for (int step = 0; step < g_fx.steps; step++) {
            double norm = run_step(&r, c, step);
            double ref = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "grad_norms"), step)->valuedouble;
            if (!(fabs(norm - ref) <= 1e-6 * ref)) fail_msg("%s step %d: grad norm %.9g, PyTorch %.9g", name, step + 1, norm, ref);
            check_params(&r, c, step, &worst);
        }
        assert_int_equal(r.opt.step, g_fx.steps);

        /* final state, by PyTorch name */
        qs_optim_state st;
        assert_int_equal(qs_optimizer_state_save(&r.opt, g_be, g_be->ops->default_stream(g_be), &st), QS_OK);
        const cJSON *ref_state = cJSON_GetObjectItem(c, "state");
        assert_int_equal(st.count, cJSON_GetArraySize(ref_state));
        assert_int_equal(st.step, g_fx.steps);
        for (int k = 0; k < st.count; k++) {
            const cJSON *arr = cJSON_GetObjectItemCaseSensitive(ref_state, st.names[k]);
            if (!arr) fail_msg("%s: state tensor %s is not in PyTorch's state", name, st.names[k]);
            int64_t n = qs_tensor_numel(&st.tensors[k]);
            float *ref = malloc((size_t)n * sizeof *ref);
            json_floats(arr, ref, n);
            char what[200];
            snprintf(what, sizeof what, "%s state %s", name, st.names[k]);
            worst = fmax(worst, check_close(what, st.tensors[k].data, ref, n, 0.0));
            free(ref);
        }
        qs_optim_state_free(&st);
        if (getenv("QS_TEST_VERBOSE")) fprintf(stderr, "  %-18s worst error / tolerance = %.3f\n", name, worst);
        run_free(&r);
    }
}

/* Clipping scales the gradients in place by clip/(norm + 1e-6). */
static void test_clip_scales_grads(void **state) {
    const cJSON *c = find_case("adamw_clip");
    qs_optim_config cfg = case_config(c);
    run r;
    run_init(&r, &cfg);
    double norm = run_step(&r, c, 0);
    float *g = host_table(&g_fx.table);
    qs_stream *s = g_be->ops->default_stream(g_be);
    assert_int_equal(g_be->ops->copy_d2h(g_be, s, g, r.g, g_fx.table.bytes), QS_OK);
    const float coef = (float)(cfg.clip_norm / (norm + 1e-6));
    double ss = 0.0;
    for (int i = 0; i < g_fx.table.count; i++) {
        const qs_table_entry *e = &g_fx.table.entries[i];
        const float *got = (const float *)((const char *)g + e->offset);
        const float *orig = (const float *)((const char *)g_fx.grads[0] + e->offset);
        for (int64_t j = 0; j < e->numel; j++) {
            assert_true(got[j] == orig[j] * coef);
            ss += (double)got[j] * got[j];
        }
    }
    assert_true(fabs(sqrt(ss) - cfg.clip_norm) < 1e-5);
    qs_host_free(g);
    run_free(&r);
}

/* With clipping on, a non-finite gradient norm skips the update entirely. */
static void test_nonfinite_norm_skips(void **state) {
    qs_optim_config cfg = qs_optim_config_default(QS_OPTIM_ADAMW, 1e-2f);
    cfg.clip_norm = 1.0f;
    run r;
    run_init(&r, &cfg);
    qs_stream *s = g_be->ops->default_stream(g_be);
    float *g = host_table(&g_fx.table);
    memcpy(g, g_fx.grads[0], g_fx.table.bytes);
    g[1] = NAN;
    assert_int_equal(g_be->ops->copy_h2d(g_be, s, r.g, g, g_fx.table.bytes), QS_OK);
    double norm = 0;
    assert_int_equal(qs_optimizer_step(&r.opt, g_be, s, r.p, r.g, 1e-2f, &norm), QS_OK);
    assert_true(isnan(norm));
    assert_int_equal(r.opt.step, 0);
    float *p = host_table(&g_fx.table);
    assert_int_equal(g_be->ops->copy_d2h(g_be, s, p, r.p, g_fx.table.bytes), QS_OK);
    assert_memory_equal(p, g_fx.init, g_fx.table.bytes);
    qs_optim_state st;
    assert_int_equal(qs_optimizer_state_save(&r.opt, g_be, s, &st), QS_OK);
    for (int k = 0; k < st.count; k++)
        for (int64_t j = 0; j < qs_tensor_numel(&st.tensors[k]); j++) assert_true(((float *)st.tensors[k].data)[j] == 0.0f);
    qs_optim_state_free(&st);
    /* infinite lr is rejected */
    assert_int_equal(qs_optimizer_step(&r.opt, g_be, s, r.p, r.g, INFINITY, NULL), QS_ERR_INVALID_ARG);
    qs_host_free(g);
    qs_host_free(p);
    run_free(&r);
}

/* Save after 3 steps to a safetensors file, load into a fresh optimizer, continue: the
 * resumed run matches the uninterrupted one bit for bit (and PyTorch within tolerance). */
static void resume_case(const char *case_name) {
    const cJSON *c = find_case(case_name);
    qs_optim_config cfg = case_config(c);
    qs_stream *s = g_be->ops->default_stream(g_be);
    run a, b;
    run_init(&a, &cfg);
    const int split = 3;
    for (int step = 0; step < split; step++) run_step(&a, c, step);

    qs_optim_state st;
    assert_int_equal(qs_optimizer_state_save(&a.opt, g_be, s, &st), QS_OK);
    qs_st_tensor *ts = calloc((size_t)st.count + 1, sizeof *ts);
    for (int k = 0; k < st.count; k++) {
        ts[k].name = st.names[k];
        ts[k].dtype = st.tensors[k].dtype;
        ts[k].ndim = st.tensors[k].ndim;
        memcpy(ts[k].shape, st.tensors[k].shape, sizeof ts[k].shape);
        ts[k].data = st.tensors[k].data;
    }
    char dir[] = "/tmp/qs_test_optim_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/optim.safetensors", dir);
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%lld", (long long)st.step);
    qs_st_meta meta = {"optimizer_step", step_text};
    assert_int_equal(qs_safetensors_write(path, ts, st.count, &meta, 1), QS_OK);
    free(ts);
    qs_optim_state_free(&st);

    /* fresh optimizer, parameters as saved by A */
    run_init(&b, &cfg);
    assert_int_equal(g_be->ops->copy_d2d(g_be, s, b.p, a.p, g_fx.table.bytes), QS_OK);
    qs_st_file *f;
    assert_int_equal(qs_safetensors_open(path, &f), QS_OK);
    int64_t step = strtoll(qs_safetensors_meta(f, "optimizer_step"), NULL, 10);
    qs_status rc = qs_optimizer_state_load(&b.opt, g_be, s, step, qs_safetensors_lookup, f);
    if (rc != QS_OK) fail_msg("%s", qs_last_error());
    qs_safetensors_close(f);
    unlink(path);
    rmdir(dir);
    assert_int_equal(b.opt.step, split);

    double worst = 0.0;
    for (int k = split; k < g_fx.steps; k++) {
        run_step(&a, c, k);
        run_step(&b, c, k);
        check_params(&b, c, k, &worst);
    }
    float *pa = host_table(&g_fx.table), *pb = host_table(&g_fx.table);
    assert_int_equal(g_be->ops->copy_d2h(g_be, s, pa, a.p, g_fx.table.bytes), QS_OK);
    assert_int_equal(g_be->ops->copy_d2h(g_be, s, pb, b.p, g_fx.table.bytes), QS_OK);
    assert_int_equal(g_be->ops->stream_sync(g_be, s), QS_OK);
    assert_memory_equal(pa, pb, g_fx.table.bytes);
    qs_host_free(pa);
    qs_host_free(pb);
    run_free(&a);
    run_free(&b);
}

static void test_state_resume_sgd(void **state) { resume_case("sgd_nesterov_wd"); }
static void test_state_resume_adamw(void **state) { resume_case("adamw"); }

/* Lookup callback over a qs_optim_state (for the failure cases). */
static qs_status state_lookup(void *ctx, const char *name, qs_tensor *out) {
    const qs_optim_state *st = ctx;
    for (int k = 0; k < st->count; k++)
        if (strcmp(st->names[k], name) == 0) {
            *out = st->tensors[k];
            return QS_OK;
        }
    return QS_FAIL(QS_ERR_NOT_FOUND, "no tensor named '%s'", name);
}

static void test_state_load_rejects(void **state) {
    const cJSON *c = find_case("adamw");
    qs_optim_config cfg = case_config(c);
    qs_stream *s = g_be->ops->default_stream(g_be);
    run r;
    run_init(&r, &cfg);
    run_step(&r, c, 0);
    qs_optim_state good;
    assert_int_equal(qs_optimizer_state_save(&r.opt, g_be, s, &good), QS_OK);
    assert_int_equal(good.count, 2 * g_fx.table.count);
    assert_string_equal(good.names[0], "fc.weight.exp_avg");
    assert_string_equal(good.names[g_fx.table.count], "fc.weight.exp_avg_sq");

    /* wrong shape on the last tensor: nothing is loaded */
    qs_optim_state bad;
    assert_int_equal(qs_optimizer_state_save(&r.opt, g_be, s, &bad), QS_OK);
    bad.tensors[bad.count - 1].shape[0] += 1;
    run fresh;
    run_init(&fresh, &cfg);
    qs_error_clear();
    assert_int_equal(qs_optimizer_state_load(&fresh.opt, g_be, s, 1, state_lookup, &bad), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), bad.names[bad.count - 1]));
    assert_non_null(strstr(qs_last_error(), "(2, 1, 3, 3)"));
    assert_int_equal(fresh.opt.step, 0);
    qs_optim_state after;
    assert_int_equal(qs_optimizer_state_save(&fresh.opt, g_be, s, &after), QS_OK);
    for (int k = 0; k < after.count; k++)
        for (int64_t j = 0; j < qs_tensor_numel(&after.tensors[k]); j++) assert_true(((float *)after.tensors[k].data)[j] == 0.0f);
    qs_optim_state_free(&after);

    /* wrong dtype */
    bad.tensors[bad.count - 1].shape[0] -= 1;
    bad.tensors[0].dtype = QS_BF16;
    assert_int_equal(qs_optimizer_state_load(&fresh.opt, g_be, s, 1, state_lookup, &bad), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "bf16"));
    /* missing tensor */
    bad.tensors[0].dtype = QS_F32;
    strcpy(bad.names[1], "renamed");
    assert_int_equal(qs_optimizer_state_load(&fresh.opt, g_be, s, 1, state_lookup, &bad), QS_ERR_NOT_FOUND);
    assert_non_null(strstr(qs_last_error(), "fc.bias.exp_avg"));
    /* negative step */
    assert_int_equal(qs_optimizer_state_load(&fresh.opt, g_be, s, -1, state_lookup, &good), QS_ERR_INVALID_ARG);
    /* and the good one loads */
    assert_int_equal(qs_optimizer_state_load(&fresh.opt, g_be, s, 1, state_lookup, &good), QS_OK);
    assert_int_equal(fresh.opt.step, 1);

    /* plain SGD has no state */
    qs_optimizer sgd;
    qs_optim_config plain = qs_optim_config_default(QS_OPTIM_SGD, 0.1f);
    assert_int_equal(qs_optimizer_init(&sgd, g_be, &g_fx.table, &plain), QS_OK);
    qs_optim_state none;
    assert_int_equal(qs_optimizer_state_save(&sgd, g_be, s, &none), QS_OK);
    assert_int_equal(none.count, 0);
    assert_int_equal(qs_optimizer_state_load(&sgd, g_be, s, 7, state_lookup, &none), QS_OK);
    assert_int_equal(sgd.step, 7);
    qs_optim_state_free(&none);
    qs_optimizer_free(&sgd, g_be);

    qs_optim_state_free(&good);
    qs_optim_state_free(&bad);
    run_free(&fresh);
    run_free(&r);
}

static void expect_bad_config(qs_optim_config cfg, const char *needle) {
    qs_optimizer o;
    qs_error_clear();
    assert_int_equal(qs_optimizer_init(&o, g_be, &g_fx.table, &cfg), QS_ERR_INVALID_ARG);
    if (!strstr(qs_last_error(), needle)) fail_msg("message lacks '%s': %s", needle, qs_last_error());
    assert_null(o.state[0]);
}

static void test_config_checks(void **state) {
    qs_optim_config c = qs_optim_config_default(QS_OPTIM_SGD, 0.1f);
    c.nesterov = true;
    expect_bad_config(c, "Nesterov"); /* momentum 0 */
    c.momentum = 0.9f;
    c.dampening = 0.1f;
    expect_bad_config(c, "Nesterov");
    c = qs_optim_config_default(QS_OPTIM_SGD, -0.1f);
    expect_bad_config(c, "learning rate");
    c = qs_optim_config_default(QS_OPTIM_SGD, 0.1f);
    c.momentum = -1.0f;
    expect_bad_config(c, "momentum");
    c = qs_optim_config_default(QS_OPTIM_ADAMW, 0.1f);
    c.beta2 = 1.0f;
    expect_bad_config(c, "betas");
    c = qs_optim_config_default(QS_OPTIM_ADAMW, 0.1f);
    c.weight_decay = -0.5f;
    expect_bad_config(c, "weight_decay");
    c = qs_optim_config_default(QS_OPTIM_ADAMW, 0.1f);
    c.clip_norm = NAN;
    expect_bad_config(c, "clip_norm");

    qs_optim_kind k;
    assert_int_equal(qs_optim_kind_parse("adamw", &k), QS_OK);
    assert_int_equal(k, QS_OPTIM_ADAMW);
    assert_int_equal(qs_optim_kind_parse("adam", &k), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "'adam'"));

    /* non-FP32 parameters are refused by name */
    qs_table t = {0};
    int64_t shape[1] = {4};
    assert_int_equal(qs_table_add(&t, "w16", QS_BF16, 1, shape, 0, NULL), QS_OK);
    qs_optimizer o;
    c = qs_optim_config_default(QS_OPTIM_SGD, 0.1f);
    assert_int_equal(qs_optimizer_init(&o, g_be, &t, &c), QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(qs_last_error(), "w16"));
    qs_table_free(&t);
}

/* ---- schedules ---- */

static void test_schedule_matches_pytorch(void **state) {
    const cJSON *sc;
    cJSON_ArrayForEach(sc, cJSON_GetObjectItem(g_fx.root, "schedules")) {
        qs_lr_schedule s = {0};
        assert_int_equal(qs_lr_schedule_parse(cJSON_GetObjectItem(sc, "spec")->valuestring, &s), QS_OK);
        s.base_lr = jf(sc, "base_lr");
        s.total_steps = (int64_t)jf(sc, "total_steps");
        assert_int_equal(qs_lr_schedule_check(&s), QS_OK);
        int step = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(sc, "values")) {
            double got = qs_lr_at(&s, step), ref = v->valuedouble;
            if (!(fabs(got - ref) <= 4 * U32 * ref))
                fail_msg("%s step %d: lr %.9g, PyTorch %.9g", cJSON_GetObjectItem(sc, "spec")->valuestring, step, got, ref);
            step++;
        }
    }
}

static void test_schedule_warmup_and_ends(void **state) {
    qs_lr_schedule s = {.base_lr = 0.1f, .warmup_steps = 4, .total_steps = 12};
    assert_int_equal(qs_lr_schedule_parse("cosine", &s), QS_OK);
    assert_int_equal(qs_lr_schedule_check(&s), QS_OK);
    assert_true(qs_lr_at(&s, -3) == 0.0f);
    assert_true(qs_lr_at(&s, 0) == 0.0f);
    assert_true(qs_lr_at(&s, 1) == 0.025f);
    assert_true(qs_lr_at(&s, 2) == 0.05f);
    assert_true(qs_lr_at(&s, 4) == 0.1f);                  /* warm-up ends at the base */
    assert_true(fabsf(qs_lr_at(&s, 8) - 0.05f) < 1e-8f);  /* half way: cos(π/2) */
    assert_true(qs_lr_at(&s, 12) == 0.0f);
    assert_true(qs_lr_at(&s, 1000) == 0.0f);              /* stays at min_lr */

    assert_int_equal(qs_lr_schedule_parse("step:30:0.1", &s), QS_OK);
    s.warmup_steps = 2;
    assert_int_equal(qs_lr_schedule_check(&s), QS_OK);
    assert_true(qs_lr_at(&s, 2) == 0.1f);
    assert_true(qs_lr_at(&s, 31) == 0.1f);
    assert_true(fabsf(qs_lr_at(&s, 32) - 0.01f) < 1e-9f);
    assert_true(fabsf(qs_lr_at(&s, 62) - 0.001f) < 1e-10f);

    assert_int_equal(qs_lr_schedule_parse("constant", &s), QS_OK);
    s.warmup_steps = 0;
    assert_true(qs_lr_at(&s, 0) == 0.1f && qs_lr_at(&s, 123456789) == 0.1f);

    char buf[64];
    const char *forms[] = {"constant", "step:30:0.1", "cosine", "cosine:0.001"};
    for (int i = 0; i < 4; i++) {
        qs_lr_schedule t = {0};
        assert_int_equal(qs_lr_schedule_parse(forms[i], &t), QS_OK);
        qs_lr_schedule_format(&t, buf, sizeof buf);
        assert_string_equal(buf, forms[i]);
    }
}

static void test_schedule_errors(void **state) {
    const char *bad[] = {"", "linear", "constant:1", "step", "step:30", "step:0:0.1", "step:x:0.1",
                         "step:30:-1", "step:30:0.1:2", "cosine:abc", "cosine:-1", "cosine:1:2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qs_lr_schedule s = {0};
        qs_error_clear();
        assert_int_equal(qs_lr_schedule_parse(bad[i], &s), QS_ERR_INVALID_ARG);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        if (!strstr(qs_last_error(), quoted)) fail_msg("message for %s lacks the text: %s", bad[i], qs_last_error());
        if (getenv("QS_TEST_VERBOSE")) fprintf(stderr, "  %s\n", qs_last_error());
    }
    qs_lr_schedule s = {.kind = QS_LR_COSINE, .base_lr = 0.1f, .warmup_steps = 10, .total_steps = 10};
    assert_int_equal(qs_lr_schedule_check(&s), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_last_error(), "total steps"));
    s.total_steps = 20;
    s.min_lr = 0.5f;
    assert_int_equal(qs_lr_schedule_check(&s), QS_ERR_INVALID_ARG);
    s = (qs_lr_schedule){.kind = QS_LR_STEP, .base_lr = 0.1f, .step_size = 0, .gamma = 0.1f};
    assert_int_equal(qs_lr_schedule_check(&s), QS_ERR_INVALID_ARG);
    s = (qs_lr_schedule){.kind = QS_LR_CONSTANT, .base_lr = 0.1f, .warmup_steps = -1};
    assert_int_equal(qs_lr_schedule_check(&s), QS_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_clip_scales_grads),
        cmocka_unit_test(test_nonfinite_norm_skips),
        cmocka_unit_test(test_state_resume_sgd),
        cmocka_unit_test(test_state_resume_adamw),
        cmocka_unit_test(test_state_load_rejects),
        cmocka_unit_test(test_config_checks),
        cmocka_unit_test(test_schedule_matches_pytorch),
        cmocka_unit_test(test_schedule_warmup_and_ends),
        cmocka_unit_test(test_schedule_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
