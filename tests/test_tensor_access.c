/* tests/test_tensor_access.c — the tensor-access API (src/graph/tensor_access.h) on the CPU
 * backend: after a forward and backward of a small graph (Linear, residual Add with a fused
 * ReLU, Linear, a BF16 cast round trip, the loss) every tap read against values computed
 * independently in double (Y = X·Wᵀ + b, the loss gradient, dW = dYᵀ·X) or bit for bit (X, W,
 * the fused ReLU, the BF16 rounding); a Linear tied to an Embedding's table reads the table
 * and the summed gradient; refusals of what cannot be read; snapshot → change → restore gives
 * the bytes back; tables read, written by entry and scaled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bits.h"
#include "graph/precision.h"
#include "graph/tensor_access.h"
#include "graph_helpers.h"
#include "models/models.h"

#define B 3
#define F 6

static qs_backend *g_be;

static int setup(void **state) {
    (void)state;
    return qs_test_backend_create(1, &g_be);
}
static int teardown(void **state) {
    (void)state;
    qs_test_backend_destroy(&g_be);
    return 0;
}

/* Node indices of the tap graph. */
typedef struct tap_graph {
    qs_model *m;
    int fl, fc1, add, relu, fc2, c16, c32, loss;
    float x[B * F];
    int32_t y[B];
} tap_graph;

/* flatten → fc1 (F→F, bias) → add(fc1, flatten) → relu (fused into the add) → fc2 (F→F) →
 * cast bf16 → cast f32 → loss, set up for batch B, one forward and backward; returns g->m. */
static qs_model *tap_graph_build(tap_graph *g) {
    ASSERT_OK(qs_model_create("taps", 1, 1, F, F, &g->m));
    qs_model *m = g->m;
    g->fl = qs_test_add(m, QS_NODE_FLATTEN, "flatten", 0, -1, qs_test_no_cfg());
    g->fc1 = qs_test_add(m, QS_NODE_LINEAR, "fc1", g->fl, -1, CFG(.linear = {.out_features = F, .bias = true}));
    g->add = qs_test_add(m, QS_NODE_ADD, "add", g->fc1, g->fl, qs_test_no_cfg());
    g->relu = qs_test_add(m, QS_NODE_RELU, "relu", g->add, -1, qs_test_no_cfg());
    g->fc2 = qs_test_add(m, QS_NODE_LINEAR, "fc2", g->relu, -1, CFG(.linear = {.out_features = F, .bias = false}));
    g->c16 = qs_test_add(m, QS_NODE_CAST, "to_bf16", g->fc2, -1, CFG(.cast = {.to = QS_BF16}));
    g->c32 = qs_test_add(m, QS_NODE_CAST, "to_f32", g->c16, -1, CFG(.cast = {.to = QS_F32}));
    g->loss = qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", g->c32, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    assert_true(qs_model_fuse(m) >= 1);
    assert_int_equal(m->nodes[g->relu].alias_of, g->add);
    ASSERT_OK(qs_model_setup(m, g_be, B, 5));
    for (int i = 0; i < B * F; i++) g->x[i] = (float)((i * 37) % 23) / 7.0f - 1.5f;
    for (int i = 0; i < B; i++) g->y[i] = (i * 4 + 1) % F;
    ASSERT_OK(qs_model_forward(m, g->x, g->y, true));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    return m;
}

/* A malloc'ed read of tap t of node i, checking its element count is n. */
static float *tap(qs_model *m, int i, qs_tap t, int64_t n) {
    int64_t got = -1, numel = -1;
    ASSERT_OK(qs_model_tensor_numel(m, i, t, &numel));
    assert_int_equal(numel, n);
    float *h = malloc((size_t)n * sizeof(float));
    assert_non_null(h);
    ASSERT_OK(qs_model_read_tensor(m, i, t, h, n, &got));
    assert_int_equal(got, n);
    return h;
}

/* float → bf16 → float, round to nearest even (finite inputs). */
static float bf16_round(float v) {
    const uint32_t u = fbits(v);
    return bitsf((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

static void near(double got, double want, double tol, const char *what, int i) {
    if (!(fabs(got - want) <= tol * (1 + fabs(want)))) fail_msg("%s[%d]: got %.9g, want %.9g", what, i, got, want);
}

/* y[r][j] = Σ_k a[r][k]·w[j][k] (+ b[j]) in double, over B rows of F. */
static void linear_ref(const float *a, const float *w, const float *b, double *y) {
    for (int r = 0; r < B; r++)
        for (int j = 0; j < F; j++) {
            double s = b ? b[j] : 0;
            for (int k = 0; k < F; k++) s += (double)a[r * F + k] * w[j * F + k];
            y[r * F + j] = s;
        }
}

/* X, Y, W of both Linears, the fused ReLU's Y, the BF16 cast's widened Y. */
static void test_forward_taps(void **state) {
    (void)state;
    tap_graph g;
    qs_model *m = tap_graph_build(&g);
    float *x = tap(m, g.fc1, QS_TAP_X, B * F), *y1 = tap(m, g.fc1, QS_TAP_Y, B * F);
    float *w1 = tap(m, g.fc1, QS_TAP_W, F * F), *w2 = tap(m, g.fc2, QS_TAP_W, F * F);
    float *r = tap(m, g.relu, QS_TAP_Y, B * F), *a = tap(m, g.add, QS_TAP_Y, B * F);
    float *x2 = tap(m, g.fc2, QS_TAP_X, B * F), *y2 = tap(m, g.fc2, QS_TAP_Y, B * F);
    float *params = malloc(qs_model_table_layout(m, QS_TABLE_PARAMS)->bytes);
    ASSERT_OK(qs_model_table_read(m, QS_TABLE_PARAMS, params));
    const qs_table_entry *we = &m->params.entries[m->nodes[g.fc1].param[0]];
    const qs_table_entry *be = &m->params.entries[m->nodes[g.fc1].param[1]];
    const qs_table_entry *we2 = &m->params.entries[m->nodes[g.fc2].param[0]];
    assert_memory_equal(x, g.x, sizeof g.x);
    assert_memory_equal(w1, (char *)params + we->offset, F * F * sizeof(float));
    assert_memory_equal(w2, (char *)params + we2->offset, F * F * sizeof(float));
    double ref[B * F];
    linear_ref(x, w1, (const float *)((char *)params + be->offset), ref);
    for (int i = 0; i < B * F; i++) near(y1[i], ref[i], 1e-6, "fc1 Y", i);
    for (int i = 0; i < B * F; i++) {
        float s = y1[i] + g.x[i];
        assert_true(r[i] == (s > 0 ? s : 0.0f)); /* the ReLU fused into the Add */
    }
    assert_memory_equal(a, r, sizeof g.x);  /* the owner holds the fused output */
    assert_memory_equal(x2, r, sizeof g.x); /* X of fc2 reads its input, the alias */
    linear_ref(r, w2, NULL, ref);
    for (int i = 0; i < B * F; i++) near(y2[i], ref[i], 1e-6, "fc2 Y", i);
    float *h16 = tap(m, g.c16, QS_TAP_Y, B * F), *logits = tap(m, g.c32, QS_TAP_Y, B * F);
    for (int i = 0; i < B * F; i++) assert_true(h16[i] == bf16_round(y2[i])); /* BF16 widened */
    assert_memory_equal(logits, h16, sizeof g.x);
    free(x), free(y1), free(w1), free(w2), free(r), free(a), free(x2), free(y2), free(params), free(h16);
    free(logits);
    qs_model_free(m);
}

/* The loss gradient, its BF16 rounding on the way back, the ReLU mask and both weight
 * gradients. */
static void test_backward_taps(void **state) {
    (void)state;
    tap_graph g;
    qs_model *m = tap_graph_build(&g);
    float *logits = tap(m, g.c32, QS_TAP_Y, B * F), *dlogits = tap(m, g.c32, QS_TAP_DY, B * F);
    for (int r = 0; r < B; r++) {
        double mx = -INFINITY, z = 0;
        for (int j = 0; j < F; j++) mx = fmax(mx, logits[r * F + j]);
        for (int j = 0; j < F; j++) z += exp(logits[r * F + j] - mx);
        for (int j = 0; j < F; j++) {
            double p = exp(logits[r * F + j] - mx) / z - (j == g.y[r]);
            near(dlogits[r * F + j], p / B, 1e-6, "dlogits", r * F + j);
        }
    }
    float *d16 = tap(m, g.c16, QS_TAP_DY, B * F), *dy2 = tap(m, g.fc2, QS_TAP_DY, B * F);
    for (int i = 0; i < B * F; i++) assert_true(d16[i] == bf16_round(dlogits[i])); /* a BF16 gradient */
    assert_memory_equal(dy2, d16, sizeof g.x);
    float *r = tap(m, g.relu, QS_TAP_Y, B * F), *dr = tap(m, g.relu, QS_TAP_DY, B * F);
    float *dy1 = tap(m, g.fc1, QS_TAP_DY, B * F), *x = tap(m, g.fc1, QS_TAP_X, B * F);
    for (int i = 0; i < B * F; i++) assert_true(dy1[i] == (r[i] > 0 ? dr[i] : 0.0f));
    float *dw1 = tap(m, g.fc1, QS_TAP_DW, F * F), *dw2 = tap(m, g.fc2, QS_TAP_DW, F * F);
    for (int j = 0; j < F; j++)
        for (int k = 0; k < F; k++) {
            double s1 = 0, s2 = 0;
            for (int q = 0; q < B; q++) {
                s1 += (double)dy1[q * F + j] * x[q * F + k];
                s2 += (double)dy2[q * F + j] * r[q * F + k];
            }
            near(dw1[j * F + k], s1, 1e-6, "fc1 dW", j * F + k);
            near(dw2[j * F + k], s2, 1e-6, "fc2 dW", j * F + k);
        }
    free(logits), free(dlogits), free(d16), free(dy2), free(r), free(dr), free(dy1), free(x), free(dw1), free(dw2);
    qs_model_free(m);
}

#define T 4 /* tokens per sample */
#define V 5 /* vocabulary */
#define C 3 /* embedding width */

/* A language model in miniature: wte Embedding (V, C) → lm_head Linear tied to wte's table →
 * loss over every position. The tied node's W is the table and its DW the table's gradient,
 * which holds both nodes' contributions: dW[v] = Σ_pos dY_head[pos][v]·X[pos] + Σ_{pos: id = v}
 * dY_wte[pos]. */
static void test_tied_weight(void **state) {
    (void)state;
    qs_model *m;
    ASSERT_OK(qs_model_create("lm", 1, 1, T, V, &m));
    int wte = qs_test_add(m, QS_NODE_EMBEDDING, "wte", 0, -1, CFG(.embed = {.rows = V, .dim = C}));
    const int table = m->nodes[wte].param[0];
    int head = qs_test_add(m, QS_NODE_LINEAR, "lm_head", wte, -1,
                           CFG(.linear = {.out_features = V, .bias = false, .tied = true, .tie_param = table}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", head, -1, qs_test_no_cfg());
    m->label_len = T;
    ASSERT_OK(qs_model_finalize(m));
    ASSERT_OK(qs_model_setup(m, g_be, B, 9));
    float ids[B * T];
    int32_t labels[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (float)((i * 3) % V), labels[i] = (i * 2 + 1) % V;
    ASSERT_OK(qs_model_forward(m, ids, labels, true));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    float *w = tap(m, head, QS_TAP_W, V * C), *wt = tap(m, wte, QS_TAP_W, V * C);
    assert_memory_equal(w, wt, V * C * sizeof(float));
    float *x = tap(m, head, QS_TAP_X, B * T * C), *dyh = tap(m, head, QS_TAP_DY, B * T * V);
    float *dye = tap(m, wte, QS_TAP_DY, B * T * C), *dw = tap(m, head, QS_TAP_DW, V * C);
    float *dwt = tap(m, wte, QS_TAP_DW, V * C);
    assert_memory_equal(dw, dwt, V * C * sizeof(float));
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int pos = 0; pos < B * T; pos++) {
                s += (double)dyh[pos * V + v] * x[pos * C + c];
                if ((int)ids[pos] == v) s += dye[pos * C + c];
            }
            near(dw[v * C + c], s, 1e-6, "tied dW", v * C + c);
        }
    free(w), free(wt), free(x), free(dyh), free(dye), free(dw), free(dwt);
    qs_model_free(m);
}

/* Expect `st` to be want with msg in the message. */
static void refused(qs_status st, qs_status want, const char *msg) {
    assert_int_equal(st, want);
    if (!strstr(qs_last_error(), msg)) fail_msg("message \"%s\" lacks \"%s\"", qs_last_error(), msg);
}

/* What cannot be read is refused with a message naming node and reason. */
static void test_refusals(void **state) {
    (void)state;
    tap_graph g;
    qs_model *m = tap_graph_build(&g);
    float h[B * F];
    int64_t n;
    refused(qs_model_read_tensor(m, 0, QS_TAP_X, h, B * F, &n), QS_ERR_UNSUPPORTED, "no input");
    refused(qs_model_read_tensor(m, g.loss, QS_TAP_DY, h, B * F, &n), QS_ERR_UNSUPPORTED, "no gradient buffer");
    refused(qs_model_read_tensor(m, g.fl, QS_TAP_DY, h, B * F, &n), QS_ERR_UNSUPPORTED, "flatten");
    refused(qs_model_read_tensor(m, g.relu, QS_TAP_W, h, B * F, &n), QS_ERR_UNSUPPORTED, "no weight");
    refused(qs_model_tensor_numel(m, g.add, QS_TAP_DW, &n), QS_ERR_UNSUPPORTED, "no weight");
    refused(qs_model_read_tensor(m, g.fc1, QS_TAP_Y, h, B * F - 1, &n), QS_ERR_INVALID_ARG, "holds 17");
    refused(qs_model_read_tensor(m, m->n_nodes, QS_TAP_Y, h, B * F, &n), QS_ERR_INVALID_ARG, "no node");
    refused(qs_model_read_tensor(m, -1, QS_TAP_Y, h, B * F, &n), QS_ERR_INVALID_ARG, "no node");
    refused(qs_model_read_tensor(m, g.fc1, QS_TAP_COUNT, h, B * F, &n), QS_ERR_INVALID_ARG, "does not exist");
    refused(qs_model_table_write_entry(m, QS_TABLE_PARAMS, m->params.count, h), QS_ERR_INVALID_ARG, "no entry");
    assert_string_equal(qs_tap_name(QS_TAP_DW), "dw");
    assert_null(qs_tap_name(QS_TAP_COUNT));
    qs_model_free(m);
    /* before setup */
    qs_model_options o = qs_models_default_options(4, 4, 1, 3);
    o.width = 8;
    ASSERT_OK(qs_models_build("mlp", &o, &m));
    refused(qs_model_read_tensor(m, 1, QS_TAP_Y, h, B * F, &n), QS_ERR_INVALID_ARG, "not set up");
    refused(qs_model_table_read(m, QS_TABLE_PARAMS, h), QS_ERR_INVALID_ARG, "not set up");
    /* a quantized (S8) tensor needs its scale */
    qs_model_set_uniform_precision(m, QS_PREC_INT8);
    ASSERT_OK(qs_model_insert_casts(m, NULL));
    ASSERT_OK(qs_model_setup(m, g_be, 2, 1));
    int cast = -1;
    for (int i = 0; i < m->n_nodes && cast < 0; i++)
        if (m->nodes[i].kind == QS_NODE_CAST && m->nodes[i].out_dtype == QS_S8) cast = i;
    assert_true(cast > 0);
    float big[4096];
    refused(qs_model_read_tensor(m, cast, QS_TAP_Y, big, 4096, &n), QS_ERR_UNSUPPORTED, "s8");
    qs_model_free(m);
}

/* A conv → BatchNorm → pool → Linear model (parameters and buffers, an int64 one among them),
 * set up for batch 2 and trained one forward (the running statistics move). */
static qs_model *bn_model(uint64_t seed) {
    qs_model *m;
    ASSERT_OK(qs_model_create("bnnet", 4, 4, 2, 3, &m));
    int c = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1,
                        CFG(.conv = {.out_channels = 3, .kernel = 3, .stride = 1, .pad = 1, .bias = false}));
    int bn = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn", c, -1, CFG(.bn = {.eps = 1e-5f, .momentum = 0.1f}));
    int p = qs_test_add(m, QS_NODE_AVGPOOL2D, "pool", bn, -1, CFG(.pool = {.global = true}));
    int f = qs_test_add(m, QS_NODE_FLATTEN, "flatten", p, -1, qs_test_no_cfg());
    int fc = qs_test_add(m, QS_NODE_LINEAR, "fc", f, -1, CFG(.linear = {.out_features = 3, .bias = true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", fc, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    ASSERT_OK(qs_model_setup(m, g_be, 2, seed));
    float x[2 * 4 * 4 * 2];
    for (int i = 0; i < 2 * 4 * 4 * 2; i++) x[i] = (float)((i * 13) % 11) / 5.0f - 1.0f;
    int32_t y[2] = {0, 2};
    ASSERT_OK(qs_model_forward(m, x, y, true));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    return m;
}

/* Read m's parameter and buffer tables and expect them equal to p0, b0 (same), or else
 * different (the buffers only when b0 is given). */
static void expect_tables(qs_model *m, const void *p0, const void *b0, bool same) {
    void *p = malloc(m->params.bytes), *b = malloc(m->buffers.bytes);
    ASSERT_OK(qs_model_table_read(m, QS_TABLE_PARAMS, p));
    ASSERT_OK(qs_model_table_read(m, QS_TABLE_BUFFERS, b));
    if (same) {
        assert_memory_equal(p, p0, m->params.bytes);
        assert_memory_equal(b, b0, m->buffers.bytes);
    } else {
        assert_memory_not_equal(p, p0, m->params.bytes);
        if (b0) assert_memory_not_equal(b, b0, m->buffers.bytes);
    }
    free(p), free(b);
}

/* snapshot → change every byte → restore gives the bytes back, in the same model and in
 * another build of it; a snapshot does not fit another model. */
static void test_snapshot_restore(void **state) {
    (void)state;
    qs_model *m = bn_model(3);
    assert_true(m->buffers.count >= 3 && m->buffers.bytes > 0);
    void *p0, *b0;
    ASSERT_OK(qs_model_table_download(m, QS_TABLE_PARAMS, &p0));
    ASSERT_OK(qs_model_table_download(m, QS_TABLE_BUFFERS, &b0));
    qs_model_snapshot s;
    ASSERT_OK(qs_model_snapshot_take(m, &s));
    assert_int_equal(s.param_bytes, m->params.bytes);
    assert_memory_equal(s.params, p0, m->params.bytes);
    assert_memory_equal(s.buffers, b0, m->buffers.bytes);
    const size_t most = m->params.bytes > m->buffers.bytes ? m->params.bytes : m->buffers.bytes;
    unsigned char *junk = malloc(most);
    memset(junk, 0x5A, most);
    ASSERT_OK(qs_model_table_write(m, QS_TABLE_PARAMS, junk));
    for (int e = 0; e < m->buffers.count; e++) ASSERT_OK(qs_model_table_write_entry(m, QS_TABLE_BUFFERS, e, junk));
    expect_tables(m, p0, b0, false);
    ASSERT_OK(qs_model_snapshot_restore(m, &s));
    expect_tables(m, p0, b0, true);
    qs_model *other = bn_model(11); /* other weights */
    expect_tables(other, p0, NULL, false);
    ASSERT_OK(qs_model_snapshot_restore(other, &s));
    expect_tables(other, p0, b0, true);
    tap_graph g;
    tap_graph_build(&g);
    refused(qs_model_snapshot_restore(g.m, &s), QS_ERR_MISMATCH, "does not fit model taps");
    qs_model_free(g.m);
    qs_model_snapshot_free(&s);
    qs_model_free(other);
    qs_model_free(m);
    qs_host_free(p0), qs_host_free(b0), free(junk);
}

/* The gradient table read whole and by tap, downloaded, and scaled; one entry written. */
static void test_tables(void **state) {
    (void)state;
    qs_model *m = bn_model(4);
    const size_t bytes = qs_model_table_layout(m, QS_TABLE_GRADS)->bytes;
    assert_int_equal(bytes, m->params.bytes);
    float *g0 = malloc(bytes), *g1 = malloc(bytes);
    void *dl = NULL;
    ASSERT_OK(qs_model_table_read(m, QS_TABLE_GRADS, g0));
    ASSERT_OK(qs_model_table_download(m, QS_TABLE_GRADS, &dl));
    assert_memory_equal(dl, g0, bytes);
    qs_host_free(dl);
    const int fc = m->n_nodes - 2;
    const qs_table_entry *we = &m->params.entries[m->nodes[fc].param[0]];
    float *dw = tap(m, fc, QS_TAP_DW, we->numel);
    assert_memory_equal(dw, (char *)g0 + we->offset, (size_t)we->numel * sizeof(float));
    ASSERT_OK(qs_model_grads_scale(m, 0.5f));
    ASSERT_OK(qs_model_table_read(m, QS_TABLE_GRADS, g1));
    for (int e = 0; e < m->params.count; e++) { /* the entries (the padding is not initialised) */
        const qs_table_entry *t = &m->params.entries[e];
        for (int64_t i = 0; i < t->numel; i++) {
            const size_t k = t->offset / sizeof(float) + (size_t)i;
            if (!(g1[k] == g0[k] * 0.5f))
                fail_msg("entry %s [%lld]: %.9g after scaling %.9g by 0.5", t->name, (long long)i, g1[k], g0[k]);
        }
    }
    float w[9];
    for (int i = 0; i < 9; i++) w[i] = (float)i - 4.0f;
    ASSERT_OK(qs_model_table_write_entry(m, QS_TABLE_PARAMS, m->nodes[fc].param[0], w));
    float *wr = tap(m, fc, QS_TAP_W, 9);
    assert_memory_equal(wr, w, sizeof w);
    free(g0), free(g1), free(dw), free(wr);
    qs_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_taps), cmocka_unit_test(test_backward_taps),
        cmocka_unit_test(test_tied_weight),  cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_snapshot_restore), cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
