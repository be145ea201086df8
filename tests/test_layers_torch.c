/* tests/test_layers_torch.c — every layer kind, and a tiny whole model trained for 5 SGD
 * steps, against PyTorch references (tests/fixtures/layer_*.bin from tools/gen_fixtures.py;
 * float64 references rounded once to float32). Each case builds the same network as the
 * generator — layer under test → (Flatten if 4-d) → (Linear "fc" to 5 classes unless the
 * layer output is the logits) → softmax cross-entropy — loads the fixture's parameters and
 * buffers by PyTorch name, runs one forward (and backward in training mode) and compares the
 * layer output, the per-sample and mean losses, d loss/d input, every parameter gradient
 * and BatchNorm's running statistics, each with the FP32 budget of tests/support/check.h.
 * Also: the fixture reader's error paths on malformed files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "graph/graph.h"
#include "graph_helpers.h"
#include "optim/optim.h"

#define CLASSES 5

static qs_backend *g_be;

static int group_setup(void **state) { return qs_test_backend_create(1, &g_be); }

static int group_teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    printf("largest error over all comparisons: %.2f%% of its budget\n", 100.0 * qs_check_worst_overall());
    return 0;
}

/* ------------------------------------------------------------------ helpers */

/* Copy every parameter and buffer of m from the fixture (by PyTorch name, exact shape), and
 * check that the fixture holds no parameter or buffer the model lacks (a naming mismatch). */
static void load_state(qs_model *m, const qs_fixture *fx, const char *prefix) {
    const qs_backend_ops *ops = m->be->ops;
    char name[QS_NAME_MAX + 32];
    for (int pass = 0; pass < 2; pass++) {
        const qs_table *t = pass == 0 ? &m->params : &m->buffers;
        for (int i = 0; i < t->count; i++) {
            const qs_table_entry *e = &t->entries[i];
            snprintf(name, sizeof name, "%s%s", prefix, e->name);
            qs_fx_dtype dt = e->dtype == QS_I64 ? QS_FX_I64 : QS_FX_F32;
            const qs_fx_tensor *ft;
            ASSERT_OK(qs_fixture_get(fx, name, dt, e->ndim, e->shape, -1, &ft));
            void *dst = pass == 0 ? qs_model_param_ptr(m, i) : qs_model_buffer_ptr(m, i);
            ASSERT_OK(ops->copy_h2d(m->be, m->stream, dst, ft->data, (size_t)ft->numel * qs_fx_dtype_size(dt)));
        }
    }
    ASSERT_OK(ops->stream_sync(m->be, m->stream));
    /* names in the fixture that look like state (contain a '.', no known prefix) must exist */
    static const char *const data_prefixes[] = {"x", "labels", "out", "loss", "losses", "grad.", "after.",
                                                "grad0.", "final.", "amplification"};
    for (int i = 0; i < fx->count; i++) {
        const char *n = fx->tensors[i].name;
        bool data = false;
        for (size_t k = 0; k < sizeof data_prefixes / sizeof *data_prefixes && !data; k++) {
            size_t l = strlen(data_prefixes[k]);
            data = strncmp(n, data_prefixes[k], l) == 0 &&
                   (data_prefixes[k][l - 1] == '.' || n[l] == '\0' || n[l] == '.');
        }
        if (data) continue;
        if (qs_table_find(&m->params, n) < 0 && qs_table_find(&m->buffers, n) < 0)
            fail_msg("fixture %s holds state '%s' that the qsync model does not have (node naming mismatch)",
                     fx->path, n);
    }
}

static int64_t node_numel(const qs_model *m, const qs_node *n) {
    (void)m;
    return qs_shape_numel(n->out_ndim, n->out_shape);
}

/* Compare backend tensor `dev` (n floats) with fixture tensor `ref_name`. */
static bool cmp_dev(qs_model *m, const qs_fixture *fx, const char *label, const void *dev, const char *ref_name,
                    int64_t n, double K, double scale) {
    const float *ref = qs_fixture_f32(fx, ref_name, n);
    if (!ref) fail_msg("%s", qs_last_error());
    float *got = qs_test_download(m, dev, n);
    bool ok = qs_check_close(label, got, ref, n, qs_tol_fp32(K, scale), NULL);
    free(got);
    return ok;
}

static bool cmp_dev_exact(qs_model *m, const qs_fixture *fx, const char *label, const void *dev,
                          const char *ref_name, int64_t n) {
    const float *ref = qs_fixture_f32(fx, ref_name, n);
    if (!ref) fail_msg("%s", qs_last_error());
    float *got = qs_test_download(m, dev, n);
    bool ok = qs_check_equal_f32(label, got, ref, n);
    free(got);
    return ok;
}

/* Scale of a bias gradient (check.h): db[c] = Σ_rows dy[r,c], so besides max|ref| the L2
 * norm of the summed terms, max over c of sqrt(Σ_r dy[r,c]²), bounds its rounding. */
static double bias_grad_scale(qs_model *m, const qs_table_entry *e, const float *ref) {
    double s = qs_max_abs(ref, e->numel);
    const qs_node *n = &m->nodes[e->node];
    if (!n->dy) return s;
    int64_t total = node_numel(m, n), C = e->numel, rows = total / C;
    float *dy = qs_test_download(m, n->dy, total);
    for (int64_t c = 0; c < C; c++) {
        double ss = 0;
        for (int64_t r = 0; r < rows; r++) ss += (double)dy[r * C + c] * dy[r * C + c];
        if (sqrt(ss) > s) s = sqrt(ss);
    }
    free(dy);
    return s;
}

static bool is_bias(const qs_table_entry *e) {
    size_t l = strlen(e->name);
    return l > 5 && strcmp(e->name + l - 5, ".bias") == 0;
}

/* Compare the gradient of parameter i with fixture tensor ref_name. */
static bool cmp_grad(qs_model *m, const qs_fixture *fx, int i, const char *ref_name, double K) {
    const qs_table_entry *e = &m->params.entries[i];
    const float *ref = qs_fixture_f32(fx, ref_name, e->numel);
    if (!ref) fail_msg("%s", qs_last_error());
    qs_node_kind k = m->nodes[e->node].kind;
    double scale = -1;
    if (is_bias(e) && (k == QS_NODE_CONV2D || k == QS_NODE_LINEAR)) scale = bias_grad_scale(m, e, ref);
    return cmp_dev(m, fx, ref_name, qs_model_grad_ptr(m, i), ref_name, e->numel, K, scale);
}

/* A BatchNorm num_batches_tracked buffer against the i64 scalar fixture tensor `ref_name`:
 * qsync keeps it as the model's step counter (the checkpoint writer stores m->step), so
 * m->step must equal the reference. Prints one line; returns whether they are equal. */
static bool check_step(const qs_model *m, const qs_fixture *fx, const char *ref_name) {
    const qs_fx_tensor *t;
    ASSERT_OK(qs_fixture_get(fx, ref_name, QS_FX_I64, 0, NULL, -1, &t));
    int64_t want = *(const int64_t *)t->data;
    printf("  %-4s %-34s m->step=%lld ref %lld\n", m->step == want ? "ok" : "FAIL", ref_name, (long long)m->step,
           (long long)want);
    return m->step == want;
}

/* ------------------------------------------------------------------ layer cases */

typedef struct layer_case {
    const char *fixture;    /* layer_<fixture>.bin */
    qs_node_kind kind;      /* layer under test */
    const char *node_name;  /* its PyTorch module name */
    qs_node_cfg cfg;
    bool residual;          /* y = layer(x) + x through an Add node "add" */
    bool fc;                /* Flatten + Linear "fc" to CLASSES after the layer */
    bool flat_input;        /* the input is (N,1,1,F): Flatten before a Linear under test */
    bool train;             /* training-mode forward + backward (else eval forward only) */
    bool exact_out;         /* the layer output is exact (selection / copy) */
    double k_fwd;           /* reduction length of the layer's forward */
    double k_bwd;           /* largest reduction length of the layer's backward */
} layer_case;

static const layer_case CASES[] = {
    {"linear_bias", QS_NODE_LINEAR, "fc", CFG(.linear = {CLASSES, true}), false, false, true, true, false, 12, 5},
    {"linear_nobias", QS_NODE_LINEAR, "fc", CFG(.linear = {CLASSES, false}), false, false, true, true, false, 12,
     5},
    {"conv3x3_s1_p1", QS_NODE_CONV2D, "conv", CFG(.conv = {4, 3, 1, 1, true}), false, true, false, true, false,
     3 * 9, 4 * 9 + 2 * 36},
    {"conv5x5_p2", QS_NODE_CONV2D, "conv", CFG(.conv = {3, 5, 1, 2, true}), false, true, false, true, false,
     2 * 25, 3 * 25 + 2 * 49},
    {"conv3x3_s2_p1", QS_NODE_CONV2D, "conv", CFG(.conv = {4, 3, 2, 1, true}), false, true, false, true, false,
     3 * 9, 4 * 9 + 2 * 16},
    {"conv1x1_s2_nobias", QS_NODE_CONV2D, "conv", CFG(.conv = {5, 1, 2, 0, false}), false, true, false, true,
     false, 4, 5 + 2 * 9},
    {"conv1x1_s1_bias", QS_NODE_CONV2D, "conv", CFG(.conv = {5, 1, 1, 0, true}), false, true, false, true, false, 4,
     5 + 2 * 30},
    {"conv3x3_nonsquare", QS_NODE_CONV2D, "conv", CFG(.conv = {4, 3, 1, 1, true}), false, true, false, true, false,
     3 * 9, 4 * 9 + 2 * 63},
    {"conv3x3_s2_nonsquare", QS_NODE_CONV2D, "conv", CFG(.conv = {4, 3, 2, 1, true}), false, true, false, true,
     false, 3 * 9, 4 * 9 + 2 * 20},
    {"bn_train", QS_NODE_BATCHNORM2D, "bn", CFG(.bn = {1e-5f, 0.1f}), false, true, false, true, false, 2 * 100,
     2 * 100},
    {"bn_eval", QS_NODE_BATCHNORM2D, "bn", CFG(.bn = {1e-5f, 0.1f}), false, true, false, false, false, 1, 1},
    {"relu", QS_NODE_RELU, "relu", CFG(.linear = {0, false}), false, true, false, true, true, 1, 1},
    {"maxpool2", QS_NODE_MAXPOOL2D, "pool", CFG(.pool = {2, 2, 0, false}), false, true, false, true, true, 1, 1},
    {"maxpool3_s2_p1", QS_NODE_MAXPOOL2D, "pool", CFG(.pool = {3, 2, 1, false}), false, true, false, true, true,
     1, 4},
    {"avgpool2", QS_NODE_AVGPOOL2D, "pool", CFG(.pool = {2, 2, 0, false}), false, true, false, true, false, 4, 1},
    {"avgpool3_s2_p1", QS_NODE_AVGPOOL2D, "pool", CFG(.pool = {3, 2, 1, false}), false, true, false, true, false,
     9, 4},
    {"gap", QS_NODE_AVGPOOL2D, "gap", CFG(.pool = {0, 0, 0, true}), false, true, false, true, false, 20, 1},
    {"flatten", QS_NODE_FLATTEN, "flat", CFG(.linear = {0, false}), false, true, false, true, true, 1, 1},
    {"add", QS_NODE_CONV2D, "conv", CFG(.conv = {3, 3, 1, 1, true}), true, true, false, true, false, 3 * 9 + 1,
     3 * 9 + 2 * 25 + 1},
    {"dropout_eval", QS_NODE_DROPOUT, "drop", CFG(.dropout = {0.3f}), false, true, false, false, true, 1, 1},
    {"xent", QS_NODE_FLATTEN, "", CFG(.linear = {0, false}), false, false, true, true, true, 1, 1},
    {"xent_large", QS_NODE_FLATTEN, "", CFG(.linear = {0, false}), false, false, true, true, true, 1, 1},
};

/* One case; as_linear: the backend runs pointwise convolutions as Linears (the CUDA backend's
 * choice, qs_backend.pointwise_conv_as_linear), on the same fixture. */
static void run_case(const layer_case *c, bool as_linear) {
    char file[128];
    snprintf(file, sizeof file, "layer_%s.bin", c->fixture);
    printf("[%s]\n", c->fixture);
    qs_fixture *fx;
    ASSERT_OK(qs_fixture_open(file, &fx));
    const qs_fx_tensor *x, *labels;
    ASSERT_OK(qs_fixture_get(fx, "x", QS_FX_F32, -1, NULL, -1, &x));
    if (x->ndim != 4) fail_msg("fixture %s: x must be (N,H,W,C)", fx->path);
    int64_t N = x->shape[0];
    ASSERT_OK(qs_fixture_get(fx, "labels", QS_FX_I32, 1, (int64_t[]){N}, -1, &labels));

    qs_model *m;
    ASSERT_OK(qs_model_create("layer_test", x->shape[1], x->shape[2], x->shape[3], CLASSES, &m));
    int in = 0;
    if (c->flat_input && c->kind != QS_NODE_FLATTEN)
        in = qs_test_add(m, QS_NODE_FLATTEN, "flatten_in", in, -1, qs_test_no_cfg());
    int layer = qs_test_add(m, c->kind, c->node_name, in, -1, c->cfg);
    int out = layer;
    if (c->residual) out = qs_test_add(m, QS_NODE_ADD, "add", layer, 0, qs_test_no_cfg());
    int logits = out;
    double fc_in = 0;
    if (c->fc) {
        int f = out;
        if (m->nodes[out].out_ndim == 4) f = qs_test_add(m, QS_NODE_FLATTEN, "flatten", out, -1, qs_test_no_cfg());
        fc_in = (double)m->nodes[f].out_shape[1];
        logits = qs_test_add(m, QS_NODE_LINEAR, "fc", f, -1, CFG(.linear = {CLASSES, true}));
    }
    int loss = qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", logits, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    m->want_input_grad = true;
    g_be->pointwise_conv_as_linear = as_linear; /* read by the model's ops until freed */
    ASSERT_OK(qs_model_setup(m, g_be, N, 1234));
    load_state(m, fx, "");

    /* reduction lengths along the chains (check.h): layer output, loss, gradients */
    double K_out = c->k_fwd, K_loss = c->k_fwd + fc_in + CLASSES;
    double K_fc_grad = K_loss + (double)N, K_grad = K_loss + (c->fc ? CLASSES : 0) + c->k_bwd;

    ASSERT_OK(qs_model_forward(m, x->data, labels->data, c->train));
    bool ok = true;
    const qs_node *L = &m->nodes[out];
    if (c->exact_out) ok &= cmp_dev_exact(m, fx, "out", L->y, "out", node_numel(m, L));
    else ok &= cmp_dev(m, fx, "out", L->y, "out", node_numel(m, L), K_out, -1);

    /* the loss is a difference of logsumexp and the label's logit: its absolute error
     * scales with the logits' magnitude, not only with the loss' */
    float *logit_h = qs_test_download(m, m->nodes[logits].y, N * CLASSES);
    double loss_scale = qs_max_abs(logit_h, N * CLASSES);
    free(logit_h);
    const float *ref_losses = qs_fixture_f32(fx, "losses", N);
    if (!ref_losses) fail_msg("%s", qs_last_error());
    loss_scale += qs_max_abs(ref_losses, N);
    ok &= cmp_dev(m, fx, "losses (per sample)", m->nodes[loss].y, "losses", N, K_loss, loss_scale);
    double mean_loss;
    ASSERT_OK(qs_model_loss_accuracy(m, N, &mean_loss, NULL));
    float mean_f = (float)mean_loss;
    const float *ref_loss = qs_fixture_f32(fx, "loss", 1);
    if (!ref_loss) fail_msg("%s", qs_last_error());
    ok &= qs_check_close("loss (mean)", &mean_f, ref_loss, 1, qs_tol_fp32(K_loss + (double)N, loss_scale), NULL);

    if (c->train) {
        ASSERT_OK(qs_model_backward(m, 1.0f));
        ok &= cmp_dev(m, fx, "grad.x", m->nodes[0].dy, "grad.x", node_numel(m, &m->nodes[0]), K_grad, -1);
        char ref[QS_NAME_MAX + 16], label[QS_NAME_MAX + 16];
        for (int i = 0; i < m->params.count; i++) {
            const qs_table_entry *e = &m->params.entries[i];
            snprintf(ref, sizeof ref, "grad.%s", e->name);
            bool is_fc = strncmp(e->name, "fc.", 3) == 0 && c->fc;
            ok &= cmp_grad(m, fx, i, ref, is_fc ? K_fc_grad : K_grad);
        }
        for (int i = 0; i < m->buffers.count; i++) {
            const qs_table_entry *e = &m->buffers.entries[i];
            snprintf(ref, sizeof ref, "after.%s", e->name);
            if (e->dtype == QS_I64) { /* after one training forward both must be 1 */
                ok &= check_step(m, fx, ref);
                continue;
            }
            snprintf(label, sizeof label, "after.%s", e->name);
            /* running stats: mean over N·H·W rows, variance two reductions of that length */
            double rows = (double)qs_shape_numel(3, m->nodes[layer].out_shape);
            ok &= cmp_dev(m, fx, label, qs_model_buffer_ptr(m, i), ref, e->numel, 2 * rows, -1);
        }
    }
    qs_model_free(m);
    g_be->pointwise_conv_as_linear = false;
    qs_fixture_free(fx);
    if (!ok) fail_msg("case %s: comparisons over budget (see the lines above)", c->fixture);
}

static void run_layer_case(void **state) { run_case(*state, false); }

/* The pointwise convolution through the backend's Linear ops. */
static void test_pointwise_conv_as_linear(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (strcmp(CASES[i].fixture, "conv1x1_s1_bias") == 0) return run_case(&CASES[i], true);
    fail_msg("no conv1x1_s1_bias case");
}

/* ------------------------------------------------------------------ whole tiny model */

#define TINY_STEPS 5
#define TINY_BATCH 8

/* Must match tools/gen_fixtures.py Tiny. */
static qs_model *build_tiny(void) {
    qs_model *m;
    ASSERT_OK(qs_model_create("tiny", 8, 8, 3, CLASSES, &m));
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv1", 0, -1, CFG(.conv = {8, 3, 1, 1, true}));
    h = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn1", h, -1, CFG(.bn = {1e-5f, 0.1f}));
    h = qs_test_add(m, QS_NODE_RELU, "relu1", h, -1, qs_test_no_cfg());
    int pool = qs_test_add(m, QS_NODE_MAXPOOL2D, "pool1", h, -1, CFG(.pool = {2, 2, 0, false}));
    h = qs_test_add(m, QS_NODE_CONV2D, "conv2", pool, -1, CFG(.conv = {8, 3, 1, 1, true}));
    h = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn2", h, -1, CFG(.bn = {1e-5f, 0.1f}));
    h = qs_test_add(m, QS_NODE_ADD, "add", h, pool, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_RELU, "relu2", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_CONV2D, "conv3", h, -1, CFG(.conv = {16, 3, 2, 1, false}));
    h = qs_test_add(m, QS_NODE_RELU, "relu3", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_AVGPOOL2D, "gap", h, -1, CFG(.pool = {0, 0, 0, true}));
    h = qs_test_add(m, QS_NODE_FLATTEN, "flatten", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_LINEAR, "fc", h, -1, CFG(.linear = {CLASSES, true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", h, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    return m;
}

static void test_tiny_model(void **state) {
    printf("[tiny_model: 5 steps SGD lr 0.1 momentum 0.9 nesterov wd 5e-4]\n");
    qs_fixture *fx;
    ASSERT_OK(qs_fixture_open("layer_tiny_model.bin", &fx));
    qs_model *m = build_tiny();
    ASSERT_OK(qs_model_setup(m, g_be, TINY_BATCH, 99));
    load_state(m, fx, "");
    const qs_backend_ops *ops = g_be->ops;

    /* Per-step budget: K = sum of the reduction lengths of one forward + backward (conv1 27,
     * bn1 2·512 rows, conv2 72, bn2 2·128, conv3 72, gap 4, fc 16, softmax 5; backward: fc 5+8,
     * conv3 144+32, bn2 2·128, conv2 72+128, bn1 2·512, conv1 weights 512). */
    double K_step = 27 + 1024 + 72 + 256 + 72 + 4 + 16 + 5 + 13 + 176 + 256 + 200 + 1024 + 512;
    const float *amp_p = qs_fixture_f32(fx, "amplification", 1);
    if (!amp_p) fail_msg("%s", qs_last_error());
    /* Free-running budget: every step injects at most the per-step error, which the
     * remaining steps amplify by at most `amplification` (measured by the generator as the
     * growth of a relative perturbation of the initial parameters over the 5 steps). */
    double traj = (double)*amp_p * TINY_STEPS;
    printf("  per-step K=%.0f, trajectory factor %.2f (amplification %.3f × %d steps)\n", K_step, traj,
           (double)*amp_p, TINY_STEPS);

    qs_optim_config oc = qs_optim_config_default(QS_OPTIM_SGD, 0.1f);
    oc.momentum = 0.9f;
    oc.weight_decay = 5e-4f;
    oc.nesterov = true;
    qs_optimizer opt;
    ASSERT_OK(qs_optimizer_init(&opt, g_be, &m->params, &oc));

    bool ok = true;
    float losses[TINY_STEPS];
    char name[QS_NAME_MAX + 16];
    for (int s = 0; s < TINY_STEPS; s++) {
        const qs_fx_tensor *x, *y;
        snprintf(name, sizeof name, "x.%d", s);
        ASSERT_OK(qs_fixture_get(fx, name, QS_FX_F32, 4, (int64_t[]){TINY_BATCH, 8, 8, 3}, -1, &x));
        snprintf(name, sizeof name, "labels.%d", s);
        ASSERT_OK(qs_fixture_get(fx, name, QS_FX_I32, 1, (int64_t[]){TINY_BATCH}, -1, &y));
        ASSERT_OK(qs_model_forward(m, x->data, y->data, true));
        double l;
        ASSERT_OK(qs_model_loss_accuracy(m, TINY_BATCH, &l, NULL));
        losses[s] = (float)l;
        ASSERT_OK(qs_model_backward(m, 1.0f));
        if (s == 0) {
            for (int i = 0; i < m->params.count; i++) {
                char ref[QS_NAME_MAX + 16];
                snprintf(ref, sizeof ref, "grad0.%s", m->params.entries[i].name);
                ok &= cmp_grad(m, fx, i, ref, K_step);
            }
        }
        ASSERT_OK(qs_optimizer_step(&opt, g_be, m->stream, m->param_data, m->grad_data, 0.1f, NULL));
        ASSERT_OK(ops->stream_sync(g_be, m->stream));
    }
    const float *ref_losses = qs_fixture_f32(fx, "losses", TINY_STEPS);
    if (!ref_losses) fail_msg("%s", qs_last_error());
    qs_tol tl = qs_tol_fp32(K_step, qs_max_abs(ref_losses, TINY_STEPS));
    tl.rtol *= traj;
    tl.atol *= traj;
    ok &= qs_check_close("losses (5 steps)", losses, ref_losses, TINY_STEPS, tl, NULL);
    for (int pass = 0; pass < 2; pass++) {
        const qs_table *t = pass == 0 ? &m->params : &m->buffers;
        for (int i = 0; i < t->count; i++) {
            const qs_table_entry *e = &t->entries[i];
            snprintf(name, sizeof name, "final.%s", e->name);
            if (e->dtype == QS_I64) {
                ok &= check_step(m, fx, name);
                continue;
            }
            const float *ref = qs_fixture_f32(fx, name, e->numel);
            const float *init = qs_fixture_f32(fx, e->name, e->numel);
            if (!ref || !init) fail_msg("%s", qs_last_error());
            const void *dev = pass == 0 ? qs_model_param_ptr(m, i) : qs_model_buffer_ptr(m, i);
            float *got = qs_test_download(m, dev, e->numel);
            /* the initial parameters are exact, so rounding enters only through the updates:
             * the scale of a parameter's error is that of its change, max|final − initial|
             * (running statistics are new averages: their own magnitude) */
            double scale = 0;
            for (int64_t k = 0; k < e->numel; k++) scale = fmax(scale, fabs((double)ref[k] - init[k]));
            if (pass == 1) scale = qs_max_abs(ref, e->numel);
            qs_tol tp = qs_tol_fp32(K_step, scale);
            tp.rtol *= traj;
            tp.atol *= traj;
            ok &= qs_check_close(name, got, ref, e->numel, tp, NULL);
            free(got);
        }
    }
    assert_int_equal(opt.step, TINY_STEPS);
    qs_optimizer_free(&opt, g_be);
    qs_model_free(m);
    qs_fixture_free(fx);
    if (!ok) fail_msg("tiny model: comparisons over budget (see the lines above)");
}

/* ------------------------------------------------------------------ fixture reader errors */

typedef struct buf {
    uint8_t b[256];
    size_t n;
} buf;

static void put(buf *b, const void *p, size_t n) {
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) {
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, t, 4);
}
static void put_i64(buf *b, int64_t v) {
    for (int i = 0; i < 8; i++) b->b[b->n++] = (uint8_t)((uint64_t)v >> (8 * i));
}
/* The start of a tensor record: u16 name length, the name, dtype code, ndim. */
static void put_record_head(buf *b, const char *name, uint8_t dtype, uint8_t ndim) {
    size_t l = strlen(name);
    b->b[b->n++] = (uint8_t)l;
    b->b[b->n++] = (uint8_t)(l >> 8);
    put(b, name, l);
    b->b[b->n++] = dtype;
    b->b[b->n++] = ndim;
}
/* A valid file: "w" f32 (2,3) = 0..5 and "k" i64 scalar = 7. */
static buf good_file(void) {
    buf b = {.n = 0};
    put(&b, "QSFX", 4);
    put_u32(&b, 1);
    put_u32(&b, 2);
    put_record_head(&b, "w", 0, 2);
    put_i64(&b, 2);
    put_i64(&b, 3);
    for (int i = 0; i < 6; i++) {
        float f = (float)i;
        uint32_t u;
        memcpy(&u, &f, 4);
        put_u32(&b, u);
    }
    put_record_head(&b, "k", 2, 0);
    put_i64(&b, 7);
    return b;
}

/* needle: one or two alternatives separated by '|' */
static void expect_parse_error(const buf *b, qs_status want, const char *needle) {
    qs_fixture *fx = (qs_fixture *)1;
    qs_status st = qs_fixture_parse(b->b, b->n, "mem.bin", &fx);
    printf("  %s: %s\n", qs_status_name(st), qs_last_error());
    assert_int_equal(st, want);
    assert_null(fx);
    char alt[64];
    snprintf(alt, sizeof alt, "%s", needle);
    char *bar = strchr(alt, '|');
    if (bar) *bar = '\0';
    if (!strstr(qs_last_error(), alt) && !(bar && strstr(qs_last_error(), bar + 1)))
        fail_msg("message '%s' lacks '%s'", qs_last_error(), needle);
    assert_non_null(strstr(qs_last_error(), "mem.bin"));
}

static void test_fixture_reader(void **state) {
    buf b = good_file();
    qs_fixture *fx;
    ASSERT_OK(qs_fixture_parse(b.b, b.n, "mem.bin", &fx));
    assert_int_equal(fx->count, 2);
    const qs_fx_tensor *t;
    ASSERT_OK(qs_fixture_get(fx, "w", QS_FX_F32, 2, (int64_t[]){2, 3}, -1, &t));
    assert_true(((float *)t->data)[5] == 5.0f);
    ASSERT_OK(qs_fixture_get(fx, "k", QS_FX_I64, 0, NULL, 1, &t));
    assert_int_equal(*(int64_t *)t->data, 7);
    assert_int_equal(qs_fixture_get(fx, "w", QS_FX_F32, 2, (int64_t[]){3, 2}, -1, &t), QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "(2, 3)"));
    assert_int_equal(qs_fixture_get(fx, "w", QS_FX_I32, -1, NULL, -1, &t), QS_ERR_MISMATCH);
    assert_int_equal(qs_fixture_get(fx, "nope", QS_FX_F32, -1, NULL, -1, &t), QS_ERR_NOT_FOUND);
    assert_non_null(strstr(qs_last_error(), "nope"));
    assert_null(qs_fixture_f32(fx, "w", 5));
    qs_fixture_free(fx);

    buf e = b;
    e.b[0] = 'X';
    expect_parse_error(&e, QS_ERR_FORMAT, "magic");
    e = b;
    e.b[4] = 2;
    expect_parse_error(&e, QS_ERR_FORMAT, "version 2");
    for (size_t cut = 0; cut < b.n; cut += 7) {
        e = b;
        e.n = cut;
        expect_parse_error(&e, QS_ERR_FORMAT, cut < 12 ? "header" : "truncated|claims");
    }
    e = b;
    e.n = b.n - 1;
    expect_parse_error(&e, QS_ERR_FORMAT, "tensor k");
    e = b;
    e.b[e.n++] = 0;
    expect_parse_error(&e, QS_ERR_FORMAT, "trailing");
    e = b;
    e.b[12 + 2 + 1] = 9; /* dtype of "w" */
    expect_parse_error(&e, QS_ERR_FORMAT, "dtype code 9");
    e = b;
    e.b[12 + 2 + 1 + 1] = 200; /* ndim of "w" */
    expect_parse_error(&e, QS_ERR_FORMAT, "200 dims");
    e = b;
    e.b[12 + 2 + 1 + 2 + 7] = 0x80; /* first dim of "w" negative */
    expect_parse_error(&e, QS_ERR_FORMAT, "negative");
    e = b;
    e.b[12 + 2 + 1 + 2] = 0xff; /* first dim of "w" huge */
    e.b[12 + 2 + 1 + 2 + 5] = 0x7f;
    expect_parse_error(&e, QS_ERR_FORMAT, "impossible shape");
    e = b;
    e.b[e.n - 8 - 2 - 1] = 'w'; /* second name = first */
    expect_parse_error(&e, QS_ERR_FORMAT, "twice");
    e = b;
    e.b[8] = 0xff; /* count */
    expect_parse_error(&e, QS_ERR_FORMAT, "claims");

    assert_int_equal(qs_fixture_load("/nonexistent/dir/x.bin", &fx), QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), "/nonexistent/dir/x.bin"));
}

int main(void) {
    enum { NC = sizeof CASES / sizeof CASES[0] };
    struct CMUnitTest tests[NC + 3];
    for (int i = 0; i < NC; i++) {
        tests[i] = (struct CMUnitTest)cmocka_unit_test_prestate(run_layer_case, (void *)&CASES[i]);
        tests[i].name = CASES[i].fixture;
    }
    tests[NC] = (struct CMUnitTest)cmocka_unit_test(test_tiny_model);
    tests[NC + 1] = (struct CMUnitTest)cmocka_unit_test(test_fixture_reader);
    tests[NC + 2] = (struct CMUnitTest)cmocka_unit_test(test_pointwise_conv_as_linear);
    return _cmocka_run_group_tests("layers_torch", tests, NC + 3, group_setup, group_teardown);
}
