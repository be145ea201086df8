/* tests/test_models.c — the built-in models against their PyTorch twins: every parameter and
 * buffer name, dtype, shape and order, every module's per-sample output shape and the totals,
 * from tests/fixtures/models_<case>.txt (tools/gen_model_fixtures.py); plus the registry, the
 * config string, the summary printer and clear errors for bad names and options. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/backends.h"
#include "models/models.h"

#define FWD_BATCH 2   /* tools/gen_model_fixtures.py FORWARD_BATCH */

/* ---------- the text fixture ---------- */

typedef struct fx_line {
    char kind[16];         /* "param", "buffer" or "output" */
    char name[QS_NAME_MAX];
    char dtype[8];         /* params and buffers only */
    int ndim;
    int64_t shape[4];
} fx_line;

typedef struct fx_model {
    char arch[32];
    char config[256];
    fx_line *lines;        /* state_dict entries first, then outputs, in file order */
    int n_lines;
    int64_t total_params, total_buffers;
    double *logits;        /* FWD_BATCH·classes reference logits, or NULL */
    int n_logits;
} fx_model;

/* Parse the values after "logits" into fx. */
static bool parse_logits(const char *s, fx_model *fx) {
    int cap = 64, used;
    fx->logits = malloc((size_t)cap * sizeof *fx->logits);
    double v;
    while (fx->logits && sscanf(s, "%lf%n", &v, &used) == 1) {
        if (fx->n_logits == cap) fx->logits = realloc(fx->logits, (size_t)(cap *= 2) * sizeof *fx->logits);
        if (!fx->logits) return false;
        fx->logits[fx->n_logits++] = v;
        s += used;
    }
    return fx->n_logits > 0;
}

/* Read the dims "<ndim> d0 d1 ..." starting at s into l; false if malformed. */
static bool parse_dims(const char *s, fx_line *l) {
    int used;
    if (sscanf(s, "%d%n", &l->ndim, &used) != 1 || l->ndim < 0 || l->ndim > 4) return false;
    s += used;
    for (int d = 0; d < l->ndim; d++) {
        long long v;
        if (sscanf(s, "%lld%n", &v, &used) != 1) return false;
        l->shape[d] = v;
        s += used;
    }
    return true;
}

/* Load $QS_FIXTURES/models_<tag>.txt; fails the test on any malformed line. */
static fx_model *fx_load(const char *tag) {
    const char *dir = getenv("QS_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/models_%s.txt", dir ? dir : "tests/fixtures", tag);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s (set QS_FIXTURES to tests/fixtures)", path);
    fx_model *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    int cap = 0;
    static char buf[1 << 14];
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        char key[16];
        int used;
        if (buf[0] == '#' || buf[0] == '\0' || sscanf(buf, "%15s%n", key, &used) != 1) continue;
        const char *rest = buf + used + 1;
        long long v;
        if (strcmp(key, "arch") == 0) {
            snprintf(fx->arch, sizeof fx->arch, "%s", rest);
        } else if (strcmp(key, "config") == 0) {
            snprintf(fx->config, sizeof fx->config, "%s", rest);
        } else if (strcmp(key, "total_params") == 0 && sscanf(rest, "%lld", &v) == 1) {
            fx->total_params = v;
        } else if (strcmp(key, "total_buffers") == 0 && sscanf(rest, "%lld", &v) == 1) {
            fx->total_buffers = v;
        } else if (strcmp(key, "logits") == 0) {
            if (!parse_logits(rest, fx)) fail_msg("%s: malformed logits line", path);
        } else {
            if (fx->n_lines == cap) {
                cap = cap ? 2 * cap : 256;
                fx->lines = realloc(fx->lines, (size_t)cap * sizeof *fx->lines);
                assert_non_null(fx->lines);
            }
            fx_line *l = &fx->lines[fx->n_lines++];
            memset(l, 0, sizeof *l);
            snprintf(l->kind, sizeof l->kind, "%s", key);
            bool state = strcmp(key, "param") == 0 || strcmp(key, "buffer") == 0;
            bool ok = state ? sscanf(rest, "%95s %7s%n", l->name, l->dtype, &used) == 2
                            : strcmp(key, "output") == 0 && sscanf(rest, "%95s%n", l->name, &used) == 1;
            if (!ok || !parse_dims(rest + used, l)) fail_msg("%s: malformed line '%s'", path, buf);
        }
    }
    fclose(f);
    if (!fx->arch[0] || !fx->config[0] || fx->total_params <= 0)
        fail_msg("%s: missing arch, config or total_params", path);
    return fx;
}

static void fx_free(fx_model *fx) {
    free(fx->logits);
    free(fx->lines);
    free(fx);
}

/* ---------- checks against a fixture ---------- */

static int node_by_name(const qs_model *m, const char *name) {
    for (int i = 0; i < m->n_nodes; i++)
        if (strcmp(m->nodes[i].name, name) == 0) return i;
    return -1;
}

/* The parameters and buffers, node by node (params before buffers), must be the fixture's
 * state_dict entries in order; each table on its own must keep that order too. */
static void check_state_dict(const qs_model *m, const fx_model *fx) {
    int k = 0, np = 0, nb = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        for (int j = 0; j < n->n_params + n->n_buffers; j++) {
            bool is_param = j < n->n_params;
            int ti = is_param ? n->param[j] : n->buffer[j - n->n_params];
            const qs_table_entry *e = is_param ? &m->params.entries[ti] : &m->buffers.entries[ti];
            if (k >= fx->n_lines || strcmp(fx->lines[k].kind, "output") == 0)
                fail_msg("%s: qsync has extra %s %s", fx->arch, is_param ? "param" : "buffer", e->name);
            const fx_line *l = &fx->lines[k++];
            if (strcmp(e->name, l->name) != 0)
                fail_msg("%s: state_dict entry %d is %s in qsync, %s in PyTorch", fx->arch, k - 1, e->name,
                         l->name);
            assert_string_equal(l->kind, is_param ? "param" : "buffer");
            assert_string_equal(qs_dtype_name(e->dtype), l->dtype);
            assert_int_equal(e->node, i);
            assert_int_equal(ti, is_param ? np++ : nb++);
            if (e->ndim != l->ndim)
                fail_msg("%s: %s has %d dims, PyTorch %d", fx->arch, e->name, e->ndim, l->ndim);
            for (int d = 0; d < l->ndim; d++)
                if (e->shape[d] != l->shape[d])
                    fail_msg("%s: %s dim %d is %lld, PyTorch %lld", fx->arch, e->name, d, (long long)e->shape[d],
                             (long long)l->shape[d]);
        }
    }
    if (k < fx->n_lines && strcmp(fx->lines[k].kind, "output") != 0)
        fail_msg("%s: qsync lacks %s %s", fx->arch, fx->lines[k].kind, fx->lines[k].name);
    assert_int_equal(np, m->params.count);
    assert_int_equal(nb, m->buffers.count);
}

/* Node n's per-sample output equals PyTorch shape l: (C,H,W) for NHWC nodes, (F) for (N,F)
 * nodes, which also matches PyTorch's (F,1,1). */
static bool same_output(const qs_node *n, const fx_line *l) {
    int64_t q[3];
    int qn = 0;
    if (n->out_ndim == 4) {
        q[0] = n->out_shape[3], q[1] = n->out_shape[1], q[2] = n->out_shape[2], qn = 3;
    } else if (n->out_ndim == 2) {
        q[0] = n->out_shape[1], qn = 1;
    }
    if (qn == 1 && l->ndim == 3 && l->shape[1] == 1 && l->shape[2] == 1) return q[0] == l->shape[0];
    if (qn != l->ndim) return false;
    for (int d = 0; d < qn; d++)
        if (q[d] != l->shape[d]) return false;
    return true;
}

/* Every PyTorch leaf module is a node with the same output shape, and every qsync node except
 * input, flatten, add and loss is a PyTorch module. */
static void check_outputs(const qs_model *m, const fx_model *fx) {
    bool *seen = calloc((size_t)m->n_nodes, 1);
    assert_non_null(seen);
    for (int k = 0; k < fx->n_lines; k++) {
        const fx_line *l = &fx->lines[k];
        if (strcmp(l->kind, "output") != 0) continue;
        int i = node_by_name(m, l->name);
        if (i < 0) fail_msg("%s: PyTorch module %s has no qsync node", fx->arch, l->name);
        if (!same_output(&m->nodes[i], l)) {
            char q[64];
            qs_shape_format(m->nodes[i].out_ndim, m->nodes[i].out_shape, q, sizeof q);
            fail_msg("%s: node %s outputs %s (NHWC), PyTorch (%lld,%lld,%lld)[:%d]", fx->arch, l->name, q,
                     (long long)l->shape[0], (long long)l->shape[1], (long long)l->shape[2], l->ndim);
        }
        seen[i] = true;
    }
    for (int i = 0; i < m->n_nodes; i++) {
        qs_node_kind kd = m->nodes[i].kind;
        if (!seen[i] && kd != QS_NODE_INPUT && kd != QS_NODE_FLATTEN && kd != QS_NODE_ADD &&
            kd != QS_NODE_SOFTMAX_XENT)
            fail_msg("%s: node %s is not a module of the PyTorch twin", fx->arch, m->nodes[i].name);
    }
    free(seen);
}

/* Names are unique; each parameter is named after its node; totals match. */
static void check_totals(const qs_model *m, const fx_model *fx) {
    for (int i = 0; i < m->n_nodes; i++)
        for (int j = i + 1; j < m->n_nodes; j++)
            if (strcmp(m->nodes[i].name, m->nodes[j].name) == 0)
                fail_msg("duplicate node name %s", m->nodes[i].name);
    int64_t params = 0, buffers = 0, node_params = 0;
    for (int i = 0; i < m->params.count; i++) params += m->params.entries[i].numel;
    for (int i = 0; i < m->buffers.count; i++) buffers += m->buffers.entries[i].numel;
    for (int i = 0; i < m->n_nodes; i++) node_params += m->nodes[i].param_count;
    assert_int_equal(params, fx->total_params);
    assert_int_equal(node_params, fx->total_params);
    assert_int_equal(buffers, fx->total_buffers);
    const qs_node *last = &m->nodes[m->n_nodes - 1];
    assert_int_equal(last->kind, QS_NODE_SOFTMAX_XENT);
    assert_int_equal(m->logits_node, last->inputs[0]);
    assert_int_equal(m->nodes[m->logits_node].out_shape[1], m->num_classes);
}

/* ---------- end-to-end forward against the PyTorch twin ---------- */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* tools/gen_model_fixtures.py fill_value(): element k of state_dict entry e (index ti). */
static float fill_value(const qs_table_entry *e, int ti, int64_t k) {
    double s = sin(0.7 * (double)k + 1.3 * ti);
    if (ends_with(e->name, "running_var")) return (float)(1.0 + 0.5 * s * s);
    if (e->ndim >= 2) return (float)(s / sqrt((double)(e->numel / e->shape[0])));
    if (ends_with(e->name, ".weight")) return (float)(1.0 + 0.1 * s);
    return (float)(0.1 * s);
}

/* Fill every f32 parameter and buffer of a set-up model with fill_value(), in state_dict
 * order (node by node, parameters before buffers). */
static void fill_model(qs_model *m) {
    int ti = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        for (int j = 0; j < n->n_params + n->n_buffers; j++, ti++) {
            bool is_param = j < n->n_params;
            int idx = is_param ? n->param[j] : n->buffer[j - n->n_params];
            const qs_table_entry *e = is_param ? &m->params.entries[idx] : &m->buffers.entries[idx];
            if (e->dtype != QS_F32) continue;
            float *host = malloc((size_t)e->numel * sizeof *host);
            assert_non_null(host);
            for (int64_t k = 0; k < e->numel; k++) host[k] = fill_value(e, ti, k);
            void *dst = is_param ? qs_model_param_ptr(m, idx) : qs_model_buffer_ptr(m, idx);
            size_t bytes = (size_t)e->numel * sizeof *host;
            assert_int_equal(m->be->ops->copy_h2d(m->be, m->stream, dst, host, bytes), QS_OK);
            assert_int_equal(m->be->ops->stream_sync(m->be, m->stream), QS_OK);
            free(host);
        }
    }
}

/* Eval-mode logits of the filled model on the generator's input_value() batch (NHWC here)
 * equal the float64 PyTorch reference within FP32 rounding. */
static void check_forward(qs_model *m, const fx_model *fx) {
    const int64_t H = m->in_h, W = m->in_w, C = m->in_c, K = m->num_classes;
    assert_int_equal(fx->n_logits, FWD_BATCH * K);
    qs_backend *be = NULL;
    assert_int_equal(qs_backend_cpu_create(0, &be), QS_OK);
    qs_status st = qs_model_setup(m, be, FWD_BATCH, 1);
    if (st != QS_OK) fail_msg("%s: setup: %s", fx->arch, qs_last_error());
    fill_model(m);
    float *x = malloc((size_t)(FWD_BATCH * H * W * C) * sizeof *x);
    float *logits = malloc((size_t)(FWD_BATCH * K) * sizeof *logits);
    int32_t labels[FWD_BATCH] = {0};
    assert_non_null(x);
    assert_non_null(logits);
    for (int64_t n = 0; n < FWD_BATCH; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++)
                for (int64_t c = 0; c < C; c++)
                    x[((n * H + h) * W + w) * C + c] = (float)sin(0.37 * c + 0.11 * h + 0.07 * w + 0.5 * n);
    st = qs_model_forward(m, x, labels, false);
    if (st == QS_OK) st = qs_model_logits(m, logits);
    if (st != QS_OK) fail_msg("%s: forward: %s", fx->arch, qs_last_error());
    for (int64_t i = 0; i < FWD_BATCH * K; i++) {
        double ref = fx->logits[i], tol = 2e-4 * (1.0 + fabs(ref));
        if (!(fabs(logits[i] - ref) <= tol))
            fail_msg("%s (%s): logit %lld is %.7g, PyTorch %.7g", fx->arch, fx->config, (long long)i,
                     (double)logits[i], ref);
    }
    free(x);
    free(logits);
    qs_model_free(m);
    be->ops->destroy(be);
}

/* Build the fixture's model from its arch and config and check all of it. */
static void test_fixture(void **state) {
    const char *tag = *state;
    fx_model *fx = fx_load(tag);
    qs_model *m = NULL;
    qs_status st = qs_models_build_config(fx->arch, fx->config, &m);
    if (st != QS_OK) fail_msg("%s: %s: %s", tag, qs_status_name(st), qs_last_error());
    assert_string_equal(m->arch, fx->arch);
    assert_string_equal(m->config, fx->config);
    check_state_dict(m, fx);
    check_outputs(m, fx);
    check_totals(m, fx);
    if (fx->logits)
        check_forward(m, fx); /* frees m */
    else
        qs_model_free(m);
    fx_free(fx);
}

/* ---------- registry, options, config, printing ---------- */

static void test_names(void **state) {
    const char *const *names = qs_models_names();
    const char *expect[] = {"mlp", "cnn", "resnet18", "resnet34", "resnet50", "vgg11", "vgg16",
                            "gpt", "gpt-mini", "bert", "bert-mini"};
    const int count = (int)(sizeof expect / sizeof expect[0]);
    int n = 0;
    for (; names[n]; n++) {
        assert_true(n < count);
        assert_string_equal(names[n], expect[n]);
        assert_non_null(qs_models_describe(names[n]));
        assert_int_equal(qs_models_is_transformer(names[n]), n >= 7);
    }
    assert_int_equal(n, count);
    assert_null(qs_models_describe("resnet19"));
    assert_null(qs_models_describe(NULL));
}

static void test_unknown_name(void **state) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    qs_model *m = (qs_model *)&o; /* must be reset to NULL */
    assert_int_equal(qs_models_build("resnet19", &o, &m), QS_ERR_NOT_FOUND);
    assert_null(m);
    assert_non_null(strstr(qs_last_error(), "resnet19"));
    assert_non_null(strstr(qs_last_error(), "mlp, cnn, resnet18, resnet34, resnet50, vgg11, vgg16, gpt, gpt-mini, bert, bert-mini"));
    assert_int_equal(qs_models_build(NULL, &o, &m), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_models_build("mlp", NULL, &m), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_models_build("mlp", &o, NULL), QS_ERR_INVALID_ARG);
}

/* Build `name` with o; expect status `want` and, for failures, `needle` in the message. */
static void expect_build(const char *name, qs_model_options o, qs_status want, const char *needle) {
    qs_model *m = NULL;
    qs_status st = qs_models_build(name, &o, &m);
    if (st != want)
        fail_msg("%s: got %s (%s), want %s", name, qs_status_name(st), qs_last_error(), qs_status_name(want));
    if (want == QS_OK) {
        qs_model_free(m);
        return;
    }
    assert_null(m);
    if (!strstr(qs_last_error(), needle))
        fail_msg("%s: message '%s' lacks '%s'", name, qs_last_error(), needle);
}

static void test_bad_options(void **state) {
    qs_model_options ok = qs_models_default_options(28, 28, 1, 10), o;
    o = ok, o.width = -1;
    expect_build("cnn", o, QS_ERR_INVALID_ARG, "width=-1");
    o = ok, o.in_c = 0;
    expect_build("mlp", o, QS_ERR_INVALID_ARG, "in_c=0");
    o = ok, o.num_classes = 1;
    expect_build("vgg11", o, QS_ERR_INVALID_ARG, "classes=1");
    o = ok, o.dropout = 1.0f;
    expect_build("mlp", o, QS_ERR_INVALID_ARG, "dropout");
    o = ok, o.dropout = -0.1f;
    expect_build("cnn", o, QS_ERR_INVALID_ARG, "dropout");
    o = ok, o.dropout = 0.0f / 0.0f;
    expect_build("vgg16", o, QS_ERR_INVALID_ARG, "dropout");
    o = ok, o.dropout = 0.5f;
    expect_build("resnet18", o, QS_ERR_INVALID_ARG, "no dropout");
    o = qs_models_default_options(3, 3, 1, 10);
    expect_build("cnn", o, QS_ERR_INVALID_ARG, "model cnn, input 3x3x1: ");
    o = qs_models_default_options(1, 1, 3, 10);
    expect_build("resnet18", o, QS_OK, NULL); /* every stride-2 stage keeps a 1×1 map */
    o = qs_models_default_options(1, 1, 784, 10);
    expect_build("mlp", o, QS_OK, NULL);
    /* transformers: token sequences only; heads divide the width; layers/heads only for them */
    expect_build("gpt-mini", ok, QS_ERR_INVALID_ARG, "takes token sequences");
    qs_model_options t = qs_models_default_options(1, 1, 16, 256);
    o = t, o.heads = 3;
    expect_build("gpt-mini", o, QS_ERR_INVALID_ARG, "heads=3 must divide width=128");
    o = t, o.layers = -1;
    expect_build("bert-mini", o, QS_ERR_INVALID_ARG, "layers=-1");
    o = ok, o.layers = 2;
    expect_build("cnn", o, QS_ERR_INVALID_ARG, "layers=2");
    o = t, o.layers = 1, o.width = 16, o.heads = 2;
    expect_build("gpt", o, QS_OK, NULL);
}

/* A gpt's shapes and names: tied lm_head (no parameter of its own), one label per position, and
 * the config string that rebuilds it. */
static void test_transformer_structure(void **state) {
    qs_model_options o = qs_models_default_options(1, 1, 12, 50);
    o.width = 16, o.layers = 2, o.heads = 4;
    qs_model *m;
    assert_int_equal(qs_models_build("gpt", &o, &m), QS_OK);
    assert_int_equal(m->label_len, 12);
    assert_string_equal(m->config, "in_h=1 in_w=1 in_c=12 classes=50 width=16 layers=2 heads=4 dropout=0");
    const qs_node *lg = &m->nodes[m->logits_node];
    assert_string_equal(lg->name, "lm_head");
    assert_int_equal(lg->n_params, 0);
    assert_string_equal(m->params.entries[lg->tied_param].name, "transformer.wte.weight");
    assert_true(lg->out_ndim == 3 && lg->out_shape[1] == 12 && lg->out_shape[2] == 50);
    /* parameters: wte 50·16, wpe 12·16, per block 2 LN (4·16), c_attn 16·48+48, c_proj 16·16+16,
     * c_fc 16·64+64, mlp.c_proj 64·16+16; ln_f 2·16 */
    const int64_t block = 4 * 16 + (16 * 48 + 48) + (16 * 16 + 16) + (16 * 64 + 64) + (64 * 16 + 16);
    int64_t total = 0;
    for (int i = 0; i < m->params.count; i++) total += m->params.entries[i].numel;
    assert_int_equal(total, 50 * 16 + 12 * 16 + 2 * block + 2 * 16);
    int matmuls = 0;
    for (int i = 0; i < m->n_nodes; i++) matmuls += m->nodes[i].kind == QS_NODE_MATMUL;
    assert_int_equal(matmuls, 4);
    qs_model *again;
    assert_int_equal(qs_models_build_config("gpt", m->config, &again), QS_OK);
    assert_int_equal(again->n_nodes, m->n_nodes);
    assert_int_equal(again->params.count, m->params.count);
    qs_model_free(again);
    qs_model_free(m);
}

static void test_config(void **state) {
    qs_model_options o = qs_models_default_options(32, 32, 3, 10);
    assert_int_equal(qs_models_parse_config("width=16, dropout=0.1 cifar_stem=0", &o), QS_OK);
    assert_int_equal(o.width, 16);
    assert_true(o.dropout == 0.1f);
    assert_false(o.cifar_stem);
    assert_int_equal(o.in_h, 32);
    char buf[256];
    assert_int_equal(qs_models_format_config("mlp", &o, buf, sizeof buf), QS_OK);
    assert_string_equal(buf, "in_h=32 in_w=32 in_c=3 classes=10 width=16 dropout=0.1");
    assert_int_equal(qs_models_format_config("resnet50", &o, buf, sizeof buf), QS_OK);
    assert_string_equal(buf, "in_h=32 in_w=32 in_c=3 classes=10 width=16 cifar_stem=0");
    assert_int_equal(qs_models_format_config("mlp", &o, buf, 10), QS_ERR_INVALID_ARG);

    qs_model_options before = o;
    assert_int_equal(qs_models_parse_config("width=16 depth=3", &o), QS_ERR_NOT_FOUND);
    assert_non_null(strstr(qs_last_error(), "depth"));
    assert_int_equal(qs_models_parse_config("width=1x", &o), QS_ERR_FORMAT);
    assert_int_equal(qs_models_parse_config("width", &o), QS_ERR_FORMAT);
    assert_int_equal(qs_models_parse_config("cifar_stem=yes", &o), QS_ERR_FORMAT);
    assert_int_equal(qs_models_parse_config("dropout=0.1.2", &o), QS_ERR_FORMAT);
    assert_memory_equal(&o, &before, sizeof o);

    qs_model *m = NULL;
    assert_int_equal(qs_models_build_config("cnn", "in_h=28 in_w=28 classes=10", &m), QS_ERR_FORMAT);
    assert_non_null(strstr(qs_last_error(), "in_c"));
    assert_null(m);
    /* the default width is recorded resolved, and rebuilding from the config is identical */
    assert_int_equal(qs_models_build_config("resnet18", "in_h=28 in_w=28 in_c=1 classes=10", &m), QS_OK);
    assert_string_equal(m->config, "in_h=28 in_w=28 in_c=1 classes=10 width=64 cifar_stem=1");
    qs_model *m2 = NULL;
    assert_int_equal(qs_models_build_config(m->arch, m->config, &m2), QS_OK);
    assert_int_equal(m2->n_nodes, m->n_nodes);
    assert_int_equal(m2->params.count, m->params.count);
    qs_model_free(m2);
    qs_model_free(m);
    /* a large input defaults to the ImageNet stem */
    assert_int_equal(qs_models_build_config("resnet18", "in_h=224 in_w=224 in_c=3 classes=1000", &m), QS_OK);
    assert_non_null(strstr(m->config, "cifar_stem=0"));
    assert_true(node_by_name(m, "maxpool") > 0);
    qs_model_free(m);
}

static void test_print(void **state) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    o.width = 16;
    qs_model *m = NULL;
    assert_int_equal(qs_models_build("resnet18", &o, &m), QS_OK);
    FILE *f = tmpfile();
    assert_non_null(f);
    qs_models_print(m, f);
    long size = ftell(f);
    assert_true(size > 0);
    char *text = calloc((size_t)size + 1, 1);
    assert_non_null(text);
    rewind(f);
    assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    assert_non_null(strstr(text, "model resnet18 (in_h=28 in_w=28 in_c=1 classes=10 width=16 cifar_stem=1)"));
    assert_non_null(strstr(text, "layer4.1.relu2"));
    assert_non_null(strstr(text, "128x4x4"));
    int64_t params = 0;
    for (int i = 0; i < m->params.count; i++) params += m->params.entries[i].numel;
    char total[64];
    snprintf(total, sizeof total, "total: %lld parameters", (long long)params);
    assert_non_null(strstr(text, total));
    free(text);
    qs_model_free(m);
}

#define FIXTURE(tag) {"fixture_" tag, test_fixture, NULL, NULL, (void *)(tag)}

int main(void) {
    const struct CMUnitTest tests[] = {
        FIXTURE("mlp"),           FIXTURE("cnn"),          FIXTURE("cnn_cifar"),
        FIXTURE("resnet18"),      FIXTURE("resnet18_stem"), FIXTURE("resnet18_imagenet"),
        FIXTURE("resnet34"),      FIXTURE("resnet50"),     FIXTURE("resnet50_imagenet"),
        FIXTURE("vgg11"),         FIXTURE("vgg11_96"),     FIXTURE("vgg16"),
        FIXTURE("vgg16_imagenet"),
        FIXTURE("fwd_mlp"),       FIXTURE("fwd_cnn"),      FIXTURE("fwd_resnet18"),
        FIXTURE("fwd_resnet18_stem"), FIXTURE("fwd_resnet50"), FIXTURE("fwd_vgg11"),
        FIXTURE("fwd_vgg16_large"),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_unknown_name),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_transformer_structure),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_print),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
