/* tests/test_layers_fd.c — finite-difference gradient checks through the graph for every
 * layer kind, Dropout statistics and backward consistency, node metadata by formula, and
 * graph-building errors.
 *
 * FD method (FP32 forward, eps = h = 2^-6 ≈ 1.6e-2): for a parameter or input entry θ,
 *     D(h) = (L(θ+h) − L(θ−h)) / 2h,     R = (4·D(h) − D(2h)) / 3   (Richardson),
 * with the actual float steps fl(θ±h) − θ in the denominators. R's truncation error is
 * h⁴/30·L⁽⁵⁾ ≈ 2e-9·L⁽⁵⁾, negligible here, so what remains is rounding: each loss value has
 * an FP32 error δL ≤ C·u·sqrt(K)·S (check.h: K = the forward chain's total reduction length,
 * S = max|logit| + max|per-sample loss|, since the loss is a difference of logsumexp and a
 * logit), and R combines four of them:  |R − L'| ≤ (4/3·1/h + 1/3·1/(2h))·δL = 1.5·δL/h.
 * The analytic gradient g itself carries its FP32 error rtol·max|g| (K of forward + backward).
 * So an entry passes when |R − g| ≤ 1.5·δL/h + rtol·max|g|. δL assumes the rounding errors of
 * the two evaluations independent; they are partly shared, and measured errors stay near 1% of
 * the budget. A budget is useless if it is not small against the gradient, so each tensor also
 * requires budget ≤ 10% of max|g| (power: a gradient 10% wrong in its largest entry fails).
 *
 * Non-smooth layers: FD is only valid away from kinks, so ReLU and MaxPool act directly on the
 * input with values kept more than 2h away from every kink (|x| ≥ 0.1 for ReLU; pairwise
 * distinct values 0.05 apart for MaxPool, so moving one by 2h never reorders a window), and
 * only the input and downstream parameters are perturbed. Dropout keeps its mask fixed by
 * resetting m->step before every forward (the mask is a function of the step counter). */
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
#include "graph/graph.h"
#include "models/models.h"
#include "graph_helpers.h"
#include "qsync/rng.h"

#define CLASSES 5
#define FD_H 0.015625        /* 2^-6 */
#define FD_SAMPLES 6         /* random entries per tensor, plus the largest-gradient one */
#define FD_POWER 0.10        /* budget must be <= this fraction of max|g| */

static qs_backend *g_be;

static int group_setup(void **state) { return qs_test_backend_create(1, &g_be); }
static int group_teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    return 0;
}

/* Flatten + Linear "fc" to CLASSES + loss after node h; finalize. */
static void head(qs_model *m, int h) {
    if (m->nodes[h].out_ndim == 4) h = qs_test_add(m, QS_NODE_FLATTEN, "flatten", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_LINEAR, "fc", h, -1, CFG(.linear = {CLASSES, true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", h, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
}

/* ------------------------------------------------------------------ FD models */

typedef enum { IN_NORMAL, IN_MARGIN, IN_DISTINCT } input_kind;

typedef struct fd_model {
    const char *name;
    int64_t N, H, W, C;
    void (*build)(qs_model *m);
    double K_fwd;      /* forward chain reduction length (loss rounding) */
    double K_bwd;      /* backward chain reduction length (gradient rounding) */
    input_kind input;
} fd_model;

static void build_linear(qs_model *m) {
    int h = qs_test_add(m, QS_NODE_FLATTEN, "flatten_in", 0, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_LINEAR, "fc1", h, -1, CFG(.linear = {6, true}));
    h = qs_test_add(m, QS_NODE_LINEAR, "fc2", h, -1, CFG(.linear = {CLASSES, false}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", h, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
}
static void build_conv(qs_model *m) {
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv1", 0, -1, CFG(.conv = {4, 3, 1, 1, true}));
    h = qs_test_add(m, QS_NODE_CONV2D, "conv2", h, -1, CFG(.conv = {3, 5, 1, 2, false}));
    head(m, h);
}
static void build_conv_strided(qs_model *m) {
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv1", 0, -1, CFG(.conv = {4, 3, 2, 1, true}));
    h = qs_test_add(m, QS_NODE_CONV2D, "conv2", h, -1, CFG(.conv = {3, 1, 2, 0, false}));
    head(m, h);
}
static void build_bn(qs_model *m) {
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1, CFG(.conv = {4, 3, 1, 1, false}));
    h = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn", h, -1, CFG(.bn = {1e-5f, 0.1f}));
    head(m, h);
}
static void build_relu(qs_model *m) { head(m, qs_test_add(m, QS_NODE_RELU, "relu", 0, -1, qs_test_no_cfg())); }
static void build_maxpool2(qs_model *m) {
    head(m, qs_test_add(m, QS_NODE_MAXPOOL2D, "pool", 0, -1, CFG(.pool = {2, 2, 0, false})));
}
static void build_maxpool3(qs_model *m) {
    head(m, qs_test_add(m, QS_NODE_MAXPOOL2D, "pool", 0, -1, CFG(.pool = {3, 2, 1, false})));
}
static void build_avgpool(qs_model *m) {
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1, CFG(.conv = {3, 3, 1, 1, true}));
    h = qs_test_add(m, QS_NODE_AVGPOOL2D, "pool1", h, -1, CFG(.pool = {3, 2, 1, false}));
    h = qs_test_add(m, QS_NODE_AVGPOOL2D, "pool2", h, -1, CFG(.pool = {2, 2, 0, false}));
    head(m, h);
}
static void build_gap(qs_model *m) {
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1, CFG(.conv = {4, 3, 1, 1, true}));
    head(m, qs_test_add(m, QS_NODE_AVGPOOL2D, "gap", h, -1, CFG(.pool = {0, 0, 0, true})));
}
/* a feeds three consumers (conv2, add1, add2): backward overwrites a.dy once, then
 * accumulates twice — once of them through conv backward-data with accumulate = true. */
static void build_fanout(qs_model *m) {
    int a = qs_test_add(m, QS_NODE_CONV2D, "conv1", 0, -1, CFG(.conv = {3, 3, 1, 1, true}));
    int b = qs_test_add(m, QS_NODE_CONV2D, "conv2", a, -1, CFG(.conv = {3, 3, 1, 1, true}));
    int c = qs_test_add(m, QS_NODE_ADD, "add1", b, a, qs_test_no_cfg());
    int d = qs_test_add(m, QS_NODE_ADD, "add2", c, a, qs_test_no_cfg());
    assert_int_equal(m->nodes[a].n_consumers, 3);
    head(m, d);
}
/* the input itself fans out (conv and add): d loss/d x accumulates too */
static void build_input_fanout(qs_model *m) {
    int a = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1, CFG(.conv = {2, 3, 1, 1, true}));
    int b = qs_test_add(m, QS_NODE_ADD, "add", 0, a, qs_test_no_cfg());
    head(m, b);
}
static void build_dropout(qs_model *m) {
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1, CFG(.conv = {4, 3, 1, 1, true}));
    head(m, qs_test_add(m, QS_NODE_DROPOUT, "drop", h, -1, CFG(.dropout = {0.5f})));
}

static void build_layernorm(qs_model *m) {
    head(m, qs_test_add(m, QS_NODE_LAYERNORM, "ln", 0, -1, CFG(.ln = {1e-5f})));
}
static void build_gelu(qs_model *m) { head(m, qs_test_add(m, QS_NODE_GELU, "gelu", 0, -1, qs_test_no_cfg())); }
static void build_tanh(qs_model *m) { head(m, qs_test_add(m, QS_NODE_TANH, "tanh", 0, -1, qs_test_no_cfg())); }
static void build_silu(qs_model *m) { head(m, qs_test_add(m, QS_NODE_SILU, "silu", 0, -1, qs_test_no_cfg())); }

static const fd_model FD_MODELS[] = {
    {"linear", 4, 1, 1, 10, build_linear, 10 + 6 + CLASSES, 4 + CLASSES + 6, IN_NORMAL},
    {"conv3x3_p1+conv5x5_p2", 2, 6, 5, 3, build_conv, 27 + 100 + 90 + CLASSES, CLASSES + 75 + 36 + 30, IN_NORMAL},
    {"conv3x3_s2_p1+conv1x1_s2", 2, 7, 6, 3, build_conv_strided, 27 + 4 + 12 + CLASSES, CLASSES + 3 + 36 + 12,
     IN_NORMAL},
    {"batchnorm_train", 4, 3, 3, 3, build_bn, 27 + 72 + 36 + CLASSES, CLASSES + 72 + 36 + 36, IN_NORMAL},
    {"relu", 2, 4, 4, 3, build_relu, 48 + CLASSES, CLASSES + 2, IN_MARGIN},
    {"maxpool2", 2, 4, 4, 3, build_maxpool2, 4 + 12 + CLASSES, CLASSES + 2, IN_DISTINCT},
    {"maxpool3_s2_p1", 2, 5, 5, 2, build_maxpool3, 9 + 18 + CLASSES, CLASSES + 4, IN_DISTINCT},
    {"avgpool3_s2_p1+avgpool2", 2, 6, 6, 2, build_avgpool, 18 + 9 + 4 + 3 + CLASSES, CLASSES + 4 + 9 + 27 + 36,
     IN_NORMAL},
    {"global_avgpool", 2, 3, 4, 3, build_gap, 27 + 12 + 4 + CLASSES, CLASSES + 12 + 36 + 24, IN_NORMAL},
    {"add_fanout3", 2, 4, 4, 2, build_fanout, 18 + 27 + 2 + 48 + CLASSES, CLASSES + 3 + 27 + 27 + 32, IN_NORMAL},
    {"add_input_fanout", 2, 4, 4, 2, build_input_fanout, 18 + 1 + 32 + CLASSES, CLASSES + 2 + 18 + 32, IN_NORMAL},
    {"dropout_train", 2, 4, 4, 3, build_dropout, 27 + 64 + CLASSES, CLASSES + 1 + 36 + 32, IN_NORMAL},
    {"layernorm", 3, 2, 1, 6, build_layernorm, 12 + 12 + CLASSES, CLASSES + 12 + 12, IN_NORMAL},
    {"gelu", 2, 3, 2, 2, build_gelu, 12 + CLASSES, CLASSES + 2, IN_NORMAL},
    {"tanh", 2, 3, 2, 2, build_tanh, 12 + CLASSES, CLASSES + 2, IN_NORMAL},
    {"silu", 2, 3, 2, 2, build_silu, 12 + CLASSES, CLASSES + 2, IN_NORMAL},
};

/* Mean training-mode loss at the current parameters and input (mask of step 1). */
static double eval_loss(qs_model *m, const float *x, const int32_t *y) {
    m->step = 0;
    ASSERT_OK(qs_model_forward(m, x, y, true));
    double l;
    ASSERT_OK(qs_model_loss_accuracy(m, m->batch, &l, NULL));
    return l;
}

/* One tensor the FD checks perturb: a parameter (param >= 0) or the host input. */
typedef struct fd_target {
    const char *name;
    int param;           /* -1: the input */
    float *host;         /* the input (param < 0) */
    int64_t n;
} fd_target;

static float get_value(qs_model *m, const fd_target *t, int64_t k) {
    if (t->param < 0) return t->host[k];
    float v;
    ASSERT_OK(m->be->ops->copy_d2h(m->be, m->stream, &v, (float *)qs_model_param_ptr(m, t->param) + k, sizeof v));
    ASSERT_OK(m->be->ops->stream_sync(m->be, m->stream));
    return v;
}

static void set_value(qs_model *m, const fd_target *t, int64_t k, float v) {
    if (t->param < 0) {
        t->host[k] = v;
        return;
    }
    ASSERT_OK(m->be->ops->copy_h2d(m->be, m->stream, (float *)qs_model_param_ptr(m, t->param) + k, &v, sizeof v));
    ASSERT_OK(m->be->ops->stream_sync(m->be, m->stream));
}

/* Richardson-extrapolated central difference of the loss w.r.t. entry k of t. */
static double fd_derivative(qs_model *m, const fd_target *t, int64_t k, float *x, const int32_t *y) {
    float v0 = get_value(m, t, k);
    double D[2];
    for (int s = 0; s < 2; s++) {
        double h = FD_H * (s + 1);
        float vp = (float)(v0 + h), vm = (float)(v0 - h);
        set_value(m, t, k, vp);
        double lp = eval_loss(m, x, y);
        set_value(m, t, k, vm);
        double lm = eval_loss(m, x, y);
        D[s] = (lp - lm) / ((double)vp - (double)vm);
    }
    set_value(m, t, k, v0);
    return (4.0 * D[0] - D[1]) / 3.0;
}

static void fill_input(const fd_model *c, float *x, int64_t n, qs_rng *r) {
    if (c->input == IN_DISTINCT) {
        /* a random permutation of (i − n/2)·0.05: every pair of values 0.05 > 2·2h apart */
        int64_t *perm = malloc((size_t)n * sizeof *perm);
        assert_non_null(perm);
        for (int64_t i = 0; i < n; i++) perm[i] = i;
        qs_rng_shuffle_i64(r, perm, n);
        for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(perm[i] - n / 2) * 0.05);
        free(perm);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (c->input == IN_MARGIN) {
            float mag = 0.1f + 0.9f * qs_rng_uniform(r);
            x[i] = qs_rng_uniform(r) < 0.5f ? -mag : mag;
        } else {
            x[i] = qs_rng_normal(r);
        }
    }
}

/* Check every parameter's gradient (and the input's when check_input) of a set-up model at
 * the point (x, y) against Richardson FD; K_fwd/K_bwd as in fd_model. */
static void fd_check_model(const char *name, qs_model *m, float *x, const int32_t *y, int64_t nx, double K_fwd,
                           double K_bwd, qs_rng *r, bool check_input) {
    const int64_t rows = m->batch * m->label_len;
    double L0 = eval_loss(m, x, y);
    ASSERT_OK(qs_model_backward(m, 1.0f));
    float *logits = qs_test_download(m, m->nodes[m->logits_node].y, rows * m->num_classes);
    float *losses = qs_test_download(m, m->nodes[m->n_nodes - 1].y, rows);
    double S = qs_max_abs(logits, rows * m->num_classes) + qs_max_abs(losses, rows);
    free(logits);
    free(losses);
    double dL = QS_TOL_C * QS_TOL_U * sqrt(K_fwd) * S;
    double fd_budget = 1.5 * dL / FD_H;
    double rtol_g = qs_tol_fp32(K_fwd + K_bwd, -1).rtol;
    printf("  loss %.6f, δL %.2e (K %.0f, S %.3g) → FD rounding budget %.2e\n", L0, dL, K_fwd, S, fd_budget);

    int n_targets = m->params.count + 1;
    fd_target *targets = calloc((size_t)n_targets, sizeof *targets);
    float **grads = calloc((size_t)n_targets, sizeof *grads);
    assert_non_null(targets);
    assert_non_null(grads);
    targets[0] = (fd_target){.name = "input", .param = -1, .host = x, .n = nx};
    if (check_input) grads[0] = qs_test_download(m, m->nodes[0].dy, nx);
    for (int i = 0; i < m->params.count; i++) {
        targets[i + 1] = (fd_target){.name = m->params.entries[i].name, .param = i, .n = m->params.entries[i].numel};
        grads[i + 1] = qs_test_download(m, qs_model_grad_ptr(m, i), targets[i + 1].n);
    }

    bool ok = true;
    for (int t = check_input ? 0 : 1; t < n_targets; t++) {
        const fd_target *tg = &targets[t];
        const float *g = grads[t];
        double gmax = qs_max_abs(g, tg->n);
        int64_t kmax = 0;
        for (int64_t k = 0; k < tg->n; k++)
            if (fabs(g[k]) == gmax) {
                kmax = k;
                break;
            }
        double budget = fd_budget + rtol_g * gmax;
        double worst = 0, worst_fd = 0, worst_g = 0;
        int64_t worst_k = -1;
        int checked = 0;
        for (int s = 0; s <= FD_SAMPLES && s < tg->n + 1; s++) {
            int64_t k = s == 0 ? kmax : (int64_t)qs_rng_below(r, (uint64_t)tg->n);
            double fd = fd_derivative(m, tg, k, x, y);
            double frac = fabs(fd - g[k]) / budget;
            checked++;
            if (worst_k < 0 || frac > worst) {
                worst = frac;
                worst_k = k;
                worst_fd = fd;
                worst_g = g[k];
            }
        }
        /* an attention key bias adds q·b to a whole row of scores, which the softmax cancels:
         * its gradient is exactly 0, so only agreement with FD (|fd| within budget) is asked */
        const bool zero_by_design = strstr(tg->name, ".key.bias") != NULL;
        bool powerful = zero_by_design || budget <= FD_POWER * gmax;
        bool pass = worst <= 1.0 && powerful;
        ok &= pass;
        printf("  %-4s %-22s %d entries, max|g| %.3e, budget %.2e (%.2f%% of max|g|), worst %6.2f%% of budget "
               "(k=%lld fd %.6g g %.6g)%s\n",
               pass ? "ok" : "FAIL", tg->name, checked, gmax, budget, 100.0 * budget / (gmax > 0 ? gmax : 1),
               100.0 * worst, (long long)worst_k, worst_fd, worst_g,
               powerful ? "" : " — budget too large against the gradient (test has no power)");
    }
    for (int t = 0; t < n_targets; t++) free(grads[t]);
    free(grads);
    free(targets);
    if (!ok) fail_msg("FD check %s failed (see above)", name);
}

/* Non-trivial scales and shifts for every norm node of `kind`: weights U(0.5, 1.5), biases
 * U(−0.5, 0.5) (at 1 and 0 some gradient paths would be degenerate). */
static void randomize_norms(qs_model *m, qs_node_kind kind, qs_rng *r) {
    for (int i = 0; i < m->params.count; i++) {
        const qs_table_entry *e = &m->params.entries[i];
        if (m->nodes[e->node].kind != kind) continue;
        float v[64];
        assert_true(e->numel <= 64);
        bool is_weight = strstr(e->name, ".weight") != NULL;
        for (int64_t k = 0; k < e->numel; k++)
            v[k] = is_weight ? 0.5f + qs_rng_uniform(r) : qs_rng_uniform(r) - 0.5f;
        ASSERT_OK(g_be->ops->copy_h2d(g_be, m->stream, qs_model_param_ptr(m, i), v, (size_t)e->numel * sizeof(float)));
    }
}

static void run_fd_model(void **state) {
    const fd_model *c = *state;
    printf("[%s]\n", c->name);
    qs_model *m;
    ASSERT_OK(qs_model_create(c->name, c->H, c->W, c->C, CLASSES, &m));
    c->build(m);
    m->want_input_grad = true;
    ASSERT_OK(qs_model_setup(m, g_be, c->N, 77));
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(2024, c->name, 0), 0);

    randomize_norms(m, QS_NODE_BATCHNORM2D, &r);
    int64_t nx = c->N * c->H * c->W * c->C;
    float *x = malloc((size_t)nx * sizeof(float));
    int32_t *y = malloc((size_t)c->N * sizeof(int32_t));
    assert_non_null(x);
    assert_non_null(y);
    fill_input(c, x, nx, &r);
    for (int64_t b = 0; b < c->N; b++) y[b] = (int32_t)qs_rng_below(&r, CLASSES);
    fd_check_model(c->name, m, x, y, nx, c->K_fwd, c->K_bwd, &r, true);
    free(x);
    free(y);
    qs_model_free(m);
}

/* ------------------------------------------------------------------ transformers */

/* A token model from the zoo (tiny sizes), its LayerNorm weights and biases randomised. */
typedef struct fd_token_model {
    const char *arch;
    int64_t N, T, classes, width, heads;
    double K_fwd, K_bwd;
} fd_token_model;

static const fd_token_model FD_TOKEN_MODELS[] = {
    /* K: LN 8 + c_attn 8 + scores 4 + softmax/context 4 + c_proj 8 + LN 8 + c_fc 8 + c_proj 32
     * + ln_f 8 + lm_head 8 + loss 7, doubled for the second residual path */
    {"gpt", 2, 4, 7, 8, 2, 200, 300},
    /* K: emb LN 8 + q/k/v 8 + scores 4 + context 5 + dense 8 + LN 8 + intermediate 8 + output 32
     * + LN 8 + pooler 8 + classifier 8 + loss 3 */
    {"bert", 3, 5, 3, 8, 2, 200, 300},
};

#define LINEAR_GAIN 3.0f

static void run_fd_token_model(void **state) {
    const fd_token_model *c = *state;
    printf("[%s, 1 layer, width %lld, %lld heads, T %lld]\n", c->arch, (long long)c->width, (long long)c->heads,
           (long long)c->T);
    qs_model_options o = qs_models_default_options(1, 1, c->T, c->classes);
    o.width = c->width;
    o.layers = 1;
    o.heads = c->heads;
    qs_model *m;
    ASSERT_OK(qs_models_build(c->arch, &o, &m));
    ASSERT_OK(qs_model_setup(m, g_be, c->N, 77));
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(2024, c->arch, 1), 0);
    /* Linear weights ×LINEAR_GAIN: sublayers strong enough against the residual stream that
     * the LayerNorm and bias gradients clear the FD power criterion. Embedding tables U(±1)
     * instead of N(0, 0.02²): a LayerNorm right after them divides by their spread, so at the
     * initial scale the FD step 2^-6 would not be small against it (truncation error). */
    for (int i = 0; i < m->params.count; i++) {
        const qs_table_entry *e = &m->params.entries[i];
        const qs_node_kind kind = m->nodes[e->node].kind;
        const bool embed = kind == QS_NODE_EMBEDDING || kind == QS_NODE_POS_EMBEDDING;
        if (!embed && (kind != QS_NODE_LINEAR || !strstr(e->name, ".weight"))) continue;
        float *w = qs_test_download(m, qs_model_param_ptr(m, i), e->numel);
        for (int64_t k = 0; k < e->numel; k++) w[k] = embed ? 2.0f * qs_rng_uniform(&r) - 1.0f : w[k] * LINEAR_GAIN;
        ASSERT_OK(g_be->ops->copy_h2d(g_be, m->stream, qs_model_param_ptr(m, i), w, (size_t)e->numel * sizeof(float)));
        free(w);
    }
    randomize_norms(m, QS_NODE_LAYERNORM, &r);
    const int64_t nx = c->N * c->T, vocab = strcmp(c->arch, "gpt") == 0 ? c->classes : 256;
    float *x = malloc((size_t)nx * sizeof(float));
    int32_t *y = malloc((size_t)(c->N * m->label_len) * sizeof(int32_t));
    assert_non_null(x);
    assert_non_null(y);
    /* ids 1..vocab-1; bert: the last key of every sample but the first is padding (id 0) */
    for (int64_t i = 0; i < nx; i++) x[i] = (float)(1 + qs_rng_below(&r, (uint64_t)(vocab - 1)));
    if (strcmp(c->arch, "bert") == 0)
        for (int64_t b = 1; b < c->N; b++) x[b * c->T + c->T - 1] = 0.0f;
    for (int64_t k = 0; k < c->N * m->label_len; k++) y[k] = (int32_t)qs_rng_below(&r, (uint64_t)c->classes);
    fd_check_model(c->arch, m, x, y, nx, c->K_fwd, c->K_bwd, &r, false);
    free(x);
    free(y);
    qs_model_free(m);
}

/* ------------------------------------------------------------------ dropout statistics */

static void test_dropout_statistics(void **state) {
    const float p = 0.3f;
    const int64_t N = 8, H = 16, W = 16, C = 4, n = N * H * W * C;
    qs_model *m;
    ASSERT_OK(qs_model_create("dropout", H, W, C, CLASSES, &m));
    int d = qs_test_add(m, QS_NODE_DROPOUT, "drop", 0, -1, CFG(.dropout = {p}));
    head(m, d);
    m->want_input_grad = true;
    ASSERT_OK(qs_model_setup(m, g_be, N, 5));
    float *x = malloc((size_t)n * sizeof(float));
    int32_t y[8];
    assert_non_null(x);
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(1, "dropout-test", 0), 0);
    for (int64_t i = 0; i < n; i++) x[i] = 0.5f + qs_rng_uniform(&r);   /* nonzero: y = 0 iff dropped */
    for (int b = 0; b < N; b++) y[b] = (int32_t)qs_rng_below(&r, CLASSES);

    /* training forward: drop fraction, scaling of the kept values */
    m->step = 0;
    ASSERT_OK(qs_model_forward(m, x, y, true));
    float *y1 = qs_test_download(m, m->nodes[d].y, n);
    int64_t dropped = 0, bad_scale = 0;
    for (int64_t i = 0; i < n; i++) {
        if (y1[i] == 0.0f) {
            dropped++;
            continue;
        }
        double exact = (double)x[i] / (1.0 - (double)p);
        if (fabs(y1[i] - exact) > 2 * QS_TOL_U * fabs(exact)) bad_scale++;
    }
    double frac = (double)dropped / (double)n, sigma = sqrt((double)p * (1 - p) / (double)n);
    printf("  dropped %.4f (p = %.2f, 5σ = %.4f), kept values not x/(1-p): %lld\n", frac, (double)p, 5 * sigma,
           (long long)bad_scale);
    assert_true(fabs(frac - p) <= 5 * sigma);
    assert_int_equal(bad_scale, 0);

    /* backward: dx = dy/(1-p) where kept, exactly 0 where dropped */
    ASSERT_OK(qs_model_backward(m, 1.0f));
    float *dy = qs_test_download(m, m->nodes[d].dy, n), *dx = qs_test_download(m, m->nodes[0].dy, n);
    int64_t bad_grad = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = y1[i] == 0.0f ? 0.0 : (double)dy[i] / (1.0 - (double)p);
        if (y1[i] == 0.0f ? dx[i] != 0.0f : fabs(dx[i] - want) > 2 * QS_TOL_U * fabs(want)) bad_grad++;
    }
    printf("  backward inconsistent with the forward mask: %lld of %lld\n", (long long)bad_grad, (long long)n);
    assert_int_equal(bad_grad, 0);

    /* the same step gives the same mask; the next step a different one */
    m->step = 0;
    ASSERT_OK(qs_model_forward(m, x, y, true));
    float *y2 = qs_test_download(m, m->nodes[d].y, n);
    assert_memory_equal(y1, y2, (size_t)n * sizeof(float));
    ASSERT_OK(qs_model_forward(m, x, y, true));   /* step 2 */
    float *y3 = qs_test_download(m, m->nodes[d].y, n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += (y1[i] == 0.0f) != (y3[i] == 0.0f);
    double dfrac = (double)differ / (double)n, want = 2.0 * p * (1 - p);
    printf("  masks of steps 1 and 2 differ in %.4f of the elements (independent masks: %.4f)\n", dfrac, want);
    assert_true(fabs(dfrac - want) <= 5 * sqrt(want * (1 - want) / (double)n));

    /* eval: identity */
    ASSERT_OK(qs_model_forward(m, x, y, false));
    float *y4 = qs_test_download(m, m->nodes[d].y, n);
    assert_memory_equal(x, y4, (size_t)n * sizeof(float));
    free(y1);
    free(y2);
    free(y3);
    free(y4);
    free(dy);
    free(dx);
    free(x);
    qs_model_free(m);
}

/* ------------------------------------------------------------------ metadata */

static void test_node_metadata(void **state) {
    qs_model *m;
    ASSERT_OK(qs_model_create("meta", 9, 7, 3, CLASSES, &m));
    int conv = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1, CFG(.conv = {4, 3, 2, 1, true}));
    const qs_node *cn = &m->nodes[conv];
    /* P = (9 + 2 − 3)/2 + 1 = 5, Q = (7 + 2 − 3)/2 + 1 = 4 */
    assert_int_equal(cn->out_ndim, 4);
    assert_int_equal(cn->out_shape[1], 5);
    assert_int_equal(cn->out_shape[2], 4);
    assert_int_equal(cn->out_shape[3], 4);
    assert_int_equal(cn->param_count, 4 * 3 * 3 * 3 + 4);
    assert_true(cn->flops_fwd == 2.0 * 5 * 4 * 4 * (3 * 3 * 3));
    assert_int_equal(cn->n_params, 2);
    const qs_table_entry *w = &m->params.entries[cn->param[0]];
    assert_string_equal(w->name, "conv.weight");
    assert_int_equal(w->ndim, 4);
    assert_true(w->shape[0] == 4 && w->shape[1] == 3 && w->shape[2] == 3 && w->shape[3] == 3);
    assert_string_equal(m->params.entries[cn->param[1]].name, "conv.bias");

    int f = qs_test_add(m, QS_NODE_FLATTEN, "flatten", conv, -1, CFG(.linear = {0, false}));
    assert_int_equal(m->nodes[f].out_shape[1], 80);
    int fc = qs_test_add(m, QS_NODE_LINEAR, "fc", f, -1, CFG(.linear = {10, true}));
    assert_int_equal(m->nodes[fc].param_count, 80 * 10 + 10);
    assert_true(m->nodes[fc].flops_fwd == 2.0 * 80 * 10);
    const qs_table_entry *fw = &m->params.entries[m->nodes[fc].param[0]];
    assert_true(fw->ndim == 2 && fw->shape[0] == 10 && fw->shape[1] == 80);
    int fc2 = qs_test_add(m, QS_NODE_LINEAR, "fc2", fc, -1, CFG(.linear = {CLASSES, false}));
    assert_int_equal(m->nodes[fc2].param_count, 10 * CLASSES);
    assert_int_equal(m->nodes[fc2].n_params, 1);
    printf("  conv: %lld params, %.0f flops/sample; fc: %lld params, %.0f flops/sample\n",
           (long long)cn->param_count, cn->flops_fwd, (long long)m->nodes[fc].param_count, m->nodes[fc].flops_fwd);
    qs_model_free(m);
}

/* ------------------------------------------------------------------ building errors */

static void expect_add_error(qs_model *m, qs_node_kind kind, const char *name, int in0, int in1, qs_node_cfg cfg,
                             qs_status want, const char *needle) {
    int n_nodes = m->n_nodes, n_params = m->params.count, n_buffers = m->buffers.count, idx = -7;
    int inputs[2] = {in0, in1};
    qs_error_clear();
    qs_status st = qs_model_add(m, kind, name, inputs, in1 >= 0 ? 2 : 1, &cfg, &idx);
    printf("  %s: %s\n", qs_status_name(st), qs_last_error());
    assert_int_equal(st, want);
    if (!strstr(qs_last_error(), name)) fail_msg("message '%s' does not name the node '%s'", qs_last_error(), name);
    if (needle && !strstr(qs_last_error(), needle)) fail_msg("message '%s' lacks '%s'", qs_last_error(), needle);
    assert_int_equal(idx, -7);
    /* a failed add leaves the model as it was */
    assert_int_equal(m->n_nodes, n_nodes);
    assert_int_equal(m->params.count, n_params);
    assert_int_equal(m->buffers.count, n_buffers);
}

static void test_build_errors(void **state) {
    qs_model *m;
    ASSERT_OK(qs_model_create("errors", 4, 4, 3, CLASSES, &m));
    int a = qs_test_add(m, QS_NODE_CONV2D, "conv_a", 0, -1, CFG(.conv = {3, 3, 1, 1, true}));
    int b = qs_test_add(m, QS_NODE_CONV2D, "conv_b", 0, -1, CFG(.conv = {5, 3, 1, 1, true}));
    expect_add_error(m, QS_NODE_ADD, "bad_add", a, b, qs_test_no_cfg(), QS_ERR_MISMATCH, "conv_b");
    expect_add_error(m, QS_NODE_LINEAR, "bad_fc", a, -1, CFG(.linear = {CLASSES, true}), QS_ERR_MISMATCH, "4");
    expect_add_error(m, QS_NODE_CONV2D, "bad_conv", a, -1, CFG(.conv = {2, 5, 1, 0, true}), QS_ERR_INVALID_ARG,
                     "empty");
    expect_add_error(m, QS_NODE_CONV2D, "bad_conv_k0", a, -1, CFG(.conv = {2, 0, 1, 0, true}), QS_ERR_INVALID_ARG,
                     NULL);
    expect_add_error(m, QS_NODE_MAXPOOL2D, "bad_pool", a, -1, CFG(.pool = {8, 8, 0, false}), QS_ERR_INVALID_ARG,
                     "empty");
    expect_add_error(m, QS_NODE_DROPOUT, "bad_drop", a, -1, CFG(.dropout = {1.0f}), QS_ERR_INVALID_ARG, NULL);
    expect_add_error(m, QS_NODE_SOFTMAX_XENT, "bad_loss", a, -1, qs_test_no_cfg(), QS_ERR_MISMATCH, NULL);

    /* finalize: logits of the wrong width */
    int f = qs_test_add(m, QS_NODE_FLATTEN, "flatten", a, -1, qs_test_no_cfg());
    int fc = qs_test_add(m, QS_NODE_LINEAR, "fc", f, -1, CFG(.linear = {CLASSES + 1, true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", fc, -1, qs_test_no_cfg());
    qs_status st = qs_model_finalize(m);
    printf("  %s: %s\n", qs_status_name(st), qs_last_error());
    assert_int_equal(st, QS_ERR_MISMATCH);
    assert_non_null(strstr(qs_last_error(), "fc"));
    qs_model_free(m);

    /* setup before finalize */
    ASSERT_OK(qs_model_create("errors2", 4, 4, 3, CLASSES, &m));
    st = qs_model_setup(m, g_be, 2, 1);
    printf("  %s: %s\n", qs_status_name(st), qs_last_error());
    assert_int_equal(st, QS_ERR_INVALID_ARG);
    qs_model_free(m);
}

int main(void) {
    enum { NM = sizeof FD_MODELS / sizeof FD_MODELS[0], NT = sizeof FD_TOKEN_MODELS / sizeof FD_TOKEN_MODELS[0] };
    struct CMUnitTest tests[NM + NT + 3];
    for (int i = 0; i < NM; i++) {
        tests[i] = (struct CMUnitTest)cmocka_unit_test_prestate(run_fd_model, (void *)&FD_MODELS[i]);
        tests[i].name = FD_MODELS[i].name;
    }
    for (int i = 0; i < NT; i++) {
        tests[NM + i] = (struct CMUnitTest)cmocka_unit_test_prestate(run_fd_token_model, (void *)&FD_TOKEN_MODELS[i]);
        tests[NM + i].name = FD_TOKEN_MODELS[i].arch;
    }
    tests[NM + NT] = (struct CMUnitTest)cmocka_unit_test(test_dropout_statistics);
    tests[NM + NT + 1] = (struct CMUnitTest)cmocka_unit_test(test_node_metadata);
    tests[NM + NT + 2] = (struct CMUnitTest)cmocka_unit_test(test_build_errors);
    return _cmocka_run_group_tests("layers_fd", tests, NM + NT + 3, group_setup, group_teardown);
}
