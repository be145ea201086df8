/* tests/test_transformer_torch.c — the transformer models and their layers against PyTorch
 * (tests/fixtures/transformer_*.bin from tools/gen_transformer_fixtures.py: float64 references
 * rounded once to float32, of the twins in tools/torch_models.py):
 *  - LayerNorm alone (fed by an Embedding that copies its input rows), and attention alone
 *    (Embedding → SplitHeads → scores → softmax, causal or with keys of id 0 masked and one
 *    sample all padding → context → MergeHeads), each output used as the logits of a
 *    per-position cross-entropy: the outputs, the losses, and every parameter's gradient after
 *    one backward;
 *  - a tiny "gpt" and "bert" built by qs_models_build, loaded with the fixture's initial state
 *    and trained 4 steps with the project's AdamW: step 0's output of every node (block 0 and
 *    everything outside the blocks) and every gradient, the per-step losses and the final
 *    parameters.
 * Budgets are those of tests/support/check.h: K is the total reduction length along the chain a
 * value depends on, counted per node kind by fwd_K / bwd_K below (a node's output: the sum over
 * its ancestors; a training step: the sum over the whole graph, forward and backward); whole
 * runs multiply the per-step budget by the fixture's amplification × steps, as the tiny model of
 * test_layers_torch.c does. Elements whose gradient is zero in exact arithmetic at every step
 * (the fixture's "nullgrad" runs: the key biases, to which the softmax is invariant, unused
 * embedding rows) cannot be compared after AdamW, which normalises the FP32 rounding noise of a
 * zero gradient into a step of up to lr; those are checked against that bound instead.
 * Also: tools/loader_order.py (the Python port of the data order and of the token streams) against
 * qs_loader_next and qs_dataset_load. */
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
#include "data/dataset.h"
#include "fixture.h"
#include "graph/graph.h"
#include "graph_helpers.h"
#include "models/models.h"
#include "optim/optim.h"
#include "qsync/rng.h"
#include "run_cmd.h"

static qs_backend *g_be;

static int group_setup(void **state) { return qs_test_backend_create(1, &g_be); }

static int group_teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    printf("largest error over all comparisons: %.2f%% of its budget\n", 100.0 * qs_check_worst_overall());
    return 0;
}

/* ------------------------------------------------------------------ reduction lengths */

static int64_t last_dim(const qs_node *n) { return n->out_shape[n->out_ndim - 1]; }
static int64_t numel(const qs_node *n) { return qs_shape_numel(n->out_ndim, n->out_shape); }

/* Longest reduction (or rounding steps) of node n's forward. */
static double fwd_K(const qs_model *m, const qs_node *n) {
    const qs_node *in = n->n_inputs > 0 ? &m->nodes[n->inputs[0]] : NULL;
    switch (n->kind) {
    case QS_NODE_LINEAR: return (double)last_dim(in);
    case QS_NODE_MATMUL: return (double)last_dim(in);               /* K of A (M, K) */
    case QS_NODE_LAYERNORM: return 2.0 * (double)last_dim(n);       /* mean, variance */
    case QS_NODE_SOFTMAX: return (double)last_dim(n);               /* Σ exp over the keys */
    case QS_NODE_SOFTMAX_XENT: return (double)last_dim(in);         /* logsumexp over the classes */
    case QS_NODE_POS_EMBEDDING:
    case QS_NODE_ADD:
    case QS_NODE_GELU:
    case QS_NODE_TANH: return 1.0;
    default: return 0.0; /* copies: embedding rows, heads, the first token */
    }
}

/* Longest reductions of node n's backward: data gradient plus weight gradient. */
static double bwd_K(const qs_model *m, const qs_node *n) {
    const qs_node *in = n->n_inputs > 0 ? &m->nodes[n->inputs[0]] : NULL;
    switch (n->kind) {
    case QS_NODE_LINEAR: return (double)last_dim(n) + (double)(numel(in) / last_dim(in)); /* out; rows */
    case QS_NODE_MATMUL: return (double)last_dim(n) + (double)n->out_shape[2];            /* N'; M */
    case QS_NODE_LAYERNORM: return 2.0 * (double)last_dim(n) + (double)(numel(n) / last_dim(n));
    case QS_NODE_SOFTMAX: return (double)last_dim(n);
    case QS_NODE_EMBEDDING: return (double)numel(in); /* a row's occurrences, at most every id */
    case QS_NODE_POS_EMBEDDING: return (double)m->batch;
    case QS_NODE_SOFTMAX_XENT:
    case QS_NODE_ADD:
    case QS_NODE_GELU:
    case QS_NODE_TANH: return 1.0;
    default: return 0.0;
    }
}

/* Σ fwd_K over node i and all its ancestors (each once). */
static double chain_K(const qs_model *m, int i) {
    bool *seen = calloc((size_t)m->n_nodes, sizeof *seen);
    int *stack = malloc((size_t)m->n_nodes * sizeof *stack), top = 0;
    assert_true(seen && stack);
    double K = 0;
    stack[top++] = i;
    seen[i] = true;
    while (top) {
        const qs_node *n = &m->nodes[stack[--top]];
        K += fwd_K(m, n);
        for (int k = 0; k < n->n_inputs; k++)
            if (!seen[n->inputs[k]]) {
                seen[n->inputs[k]] = true;
                stack[top++] = n->inputs[k];
            }
    }
    free(seen);
    free(stack);
    return K;
}

/* One training step: Σ over the graph of fwd_K + bwd_K. */
static double step_K(const qs_model *m) {
    double K = 0;
    for (int i = 1; i < m->n_nodes; i++) K += fwd_K(m, &m->nodes[i]) + bwd_K(m, &m->nodes[i]);
    return K;
}

/* ------------------------------------------------------------------ helpers */

static const float *fx_f32(const qs_fixture *fx, const char *name, int64_t n) {
    const float *p = qs_fixture_f32(fx, name, n);
    if (!p) fail_msg("%s", qs_last_error());
    return p;
}

static float fx_scalar(const qs_fixture *fx, const char *name) { return *fx_f32(fx, name, 1); }

/* Copy every parameter of m from the fixture (by PyTorch name, exact shape), and check that the
 * fixture holds no state the model lacks (a naming mismatch). */
static void load_params(qs_model *m, const qs_fixture *fx) {
    const qs_backend_ops *ops = m->be->ops;
    for (int i = 0; i < m->params.count; i++) {
        const qs_table_entry *e = &m->params.entries[i];
        const qs_fx_tensor *ft;
        ASSERT_OK(qs_fixture_get(fx, e->name, QS_FX_F32, e->ndim, e->shape, -1, &ft));
        ASSERT_OK(ops->copy_h2d(m->be, m->stream, qs_model_param_ptr(m, i), ft->data,
                                (size_t)ft->numel * sizeof(float)));
    }
    ASSERT_OK(ops->stream_sync(m->be, m->stream));
    assert_int_equal(m->buffers.count, 0);
    static const char *const data_names[] = {"x", "labels", "out", "loss", "losses", "amplification"};
    static const char *const data_prefixes[] = {"x.",     "labels.", "act.",     "grad.",
                                                "grad0.", "final.",  "nullgrad.", "adamw."};
    int k_param = 0; /* the fixture lists the twin's state_dict in order: it must be qsync's */
    for (int i = 0; i < fx->count; i++) {
        const char *n = fx->tensors[i].name;
        bool data = false;
        for (size_t k = 0; k < sizeof data_names / sizeof *data_names; k++) data |= strcmp(n, data_names[k]) == 0;
        for (size_t k = 0; k < sizeof data_prefixes / sizeof *data_prefixes; k++)
            data |= strncmp(n, data_prefixes[k], strlen(data_prefixes[k])) == 0;
        if (data) continue;
        if (qs_table_find(&m->params, n) < 0)
            fail_msg("fixture %s holds parameter '%s' that the qsync model does not have (naming mismatch)", fx->path,
                     n);
        if (strcmp(m->params.entries[k_param].name, n) != 0)
            fail_msg("fixture %s: state_dict entry %d is '%s', qsync's parameter %d is '%s' (order mismatch)", fx->path,
                     k_param, n, k_param, m->params.entries[k_param].name);
        k_param++;
    }
}

/* Compare n floats at backend address dev with fixture tensor ref_name. */
static bool cmp_dev(qs_model *m, const qs_fixture *fx, const char *label, const void *dev, const char *ref_name,
                    int64_t n, double K, double scale) {
    const float *ref = fx_f32(fx, ref_name, n);
    float *got = qs_test_download(m, dev, n);
    bool ok = qs_check_close(label, got, ref, n, qs_tol_fp32(K, scale), NULL);
    free(got);
    return ok;
}

/* The output of every node that the fixture has ("act.<name>"), each with the K of its chain.
 * Returns false when one is over budget; fails when the fixture names a node the model lacks. */
static bool cmp_activations(qs_model *m, const qs_fixture *fx) {
    bool ok = true;
    int found = 0;
    char ref[QS_NAME_MAX + 8];
    for (int i = 1; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        snprintf(ref, sizeof ref, "act.%s", n->name);
        if (!qs_fixture_find(fx, ref)) continue;
        found++;
        ok &= cmp_dev(m, fx, ref, n->y, ref, numel(n), chain_K(m, i), -1);
    }
    int want = 0;
    for (int i = 0; i < fx->count; i++) want += strncmp(fx->tensors[i].name, "act.", 4) == 0;
    if (found != want)
        fail_msg("fixture %s has %d node outputs, the model matches %d of them (node naming)", fx->path, want, found);
    return ok;
}

/* Scale of a gradient that is a sum over rows (check.h): besides max|ref|, the largest L2
 * norm over its elements of the summed terms — dy[r,c] for a Linear or LayerNorm bias, dy[r,c]·x̂[r,c]
 * for a LayerNorm weight — bounds its rounding when the sum cancels (a key bias' gradient is 0
 * in exact arithmetic: the softmax is invariant to it). */
static double summed_grad_scale(qs_model *m, const qs_table_entry *e, const float *ref) {
    double s = qs_max_abs(ref, e->numel);
    const qs_node *n = &m->nodes[e->node];
    const bool ln = n->kind == QS_NODE_LAYERNORM, ln_weight = ln && strstr(e->name, ".weight") != NULL;
    if (!n->dy || e->ndim != 1 || (!ln && n->kind != QS_NODE_LINEAR) || (!ln && !strstr(e->name, ".bias"))) return s;
    const int64_t C = e->numel, rows = numel(n) / C;
    float *dy = qs_test_download(m, n->dy, rows * C);
    float *x = ln_weight ? qs_test_download(m, m->nodes[n->inputs[0]].y, rows * C) : NULL;
    double *ss = calloc((size_t)C, sizeof *ss);
    assert_non_null(ss);
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0, rstd = 1;
        if (x) {
            for (int64_t c = 0; c < C; c++) mean += x[r * C + c];
            mean /= (double)C;
            for (int64_t c = 0; c < C; c++) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
            rstd = 1.0 / sqrt(var / (double)C + n->cfg.ln.eps);
        }
        for (int64_t c = 0; c < C; c++) {
            double t = dy[r * C + c] * (x ? (x[r * C + c] - mean) * rstd : 1.0);
            ss[c] += t * t;
        }
    }
    for (int64_t c = 0; c < C; c++) s = fmax(s, sqrt(ss[c]));
    free(ss);
    free(dy);
    free(x);
    return s;
}

/* Compare the gradient of every parameter with fixture tensors "<prefix><name>". */
static bool cmp_grads(qs_model *m, const qs_fixture *fx, const char *prefix, double K) {
    bool ok = true;
    char ref[QS_NAME_MAX + 16];
    for (int i = 0; i < m->params.count; i++) {
        const qs_table_entry *e = &m->params.entries[i];
        snprintf(ref, sizeof ref, "%s%s", prefix, e->name);
        const float *r = fx_f32(fx, ref, e->numel);
        ok &= cmp_dev(m, fx, ref, qs_model_grad_ptr(m, i), ref, e->numel, K, summed_grad_scale(m, e, r));
    }
    return ok;
}

/* Per-label losses (the loss node's output), the mean loss, against "losses" and "loss". The
 * loss is a difference of a logsumexp and a logit: its absolute error scales with the logits. */
static bool cmp_losses(qs_model *m, const qs_fixture *fx, double K) {
    const int64_t rows = m->batch * m->label_len;
    float *lg = qs_test_download(m, m->nodes[m->logits_node].y, rows * m->num_classes);
    double scale = qs_max_abs(lg, rows * m->num_classes) + qs_max_abs(fx_f32(fx, "losses", rows), rows);
    free(lg);
    bool ok = cmp_dev(m, fx, "losses", m->nodes[m->n_nodes - 1].y, "losses", rows, K, scale);
    double mean;
    ASSERT_OK(qs_model_loss_accuracy(m, m->batch, &mean, NULL));
    float mean_f = (float)mean;
    ok &= qs_check_close("loss (mean)", &mean_f, fx_f32(fx, "loss", 1), 1, qs_tol_fp32(K + (double)rows, scale), NULL);
    return ok;
}

/* ------------------------------------------------------------------ single layers */

/* ids 0..N·T-1 → "emb" Embedding (N·T, C) holding the rows x (an exact copy) → LayerNorm "ln"
 * (eps 1e-5) → its output the logits of C classes per position. */
static void test_layernorm(void **state) {
    printf("[layernorm]\n");
    qs_fixture *fx;
    ASSERT_OK(qs_fixture_open("transformer_layernorm.bin", &fx));
    const qs_fx_tensor *x, *y, *emb;
    ASSERT_OK(qs_fixture_get(fx, "x", QS_FX_F32, 2, NULL, -1, &x));
    ASSERT_OK(qs_fixture_get(fx, "emb.weight", QS_FX_F32, 2, NULL, -1, &emb));
    if (x->ndim != 2 || emb->ndim != 2) fail_msg("fixture %s: x must be ids (N, T) and emb.weight (N·T, C)", fx->path);
    const int64_t N = x->shape[0], T = x->shape[1], C = emb->shape[1];
    ASSERT_OK(qs_fixture_get(fx, "labels", QS_FX_I32, 2, (int64_t[]){N, T}, -1, &y));
    qs_model *m;
    ASSERT_OK(qs_model_create("layernorm_test", 1, 1, T, C, &m));
    m->label_len = T;
    int e = qs_test_add(m, QS_NODE_EMBEDDING, "emb", 0, -1, CFG(.embed = {N * T, C}));
    int ln = qs_test_add(m, QS_NODE_LAYERNORM, "ln", e, -1, CFG(.ln = {1e-5f}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", ln, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    ASSERT_OK(qs_model_setup(m, g_be, N, 1));
    load_params(m, fx);
    ASSERT_OK(qs_model_forward(m, x->data, y->data, true));
    bool ok = cmp_dev(m, fx, "out", m->nodes[ln].y, "out", numel(&m->nodes[ln]), chain_K(m, ln), -1);
    ok &= cmp_losses(m, fx, chain_K(m, m->n_nodes - 1));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    ok &= cmp_grads(m, fx, "grad.", step_K(m));
    qs_model_free(m);
    qs_fixture_free(fx);
    if (!ok) fail_msg("layernorm: comparisons over budget (see the lines above)");
}

typedef struct attn_case {
    const char *fixture;
    bool causal, pad;
} attn_case;

/* ids (N, T) → "emb" Embedding (V, 3C) → attn.q/k/v (H heads) → attn.scores (·1/√D) →
 * attn.softmax (causal; or keys of id 0 masked) → attn.context → attn.merge (N, T, C): the logits
 * of C classes per position. Must match tools/gen_transformer_fixtures.py AttnOnly. */
static void run_attention(void **state) {
    const attn_case *c = *state;
    printf("[%s]\n", c->fixture);
    qs_fixture *fx;
    ASSERT_OK(qs_fixture_open(c->fixture, &fx));
    const qs_fx_tensor *x, *y, *emb;
    ASSERT_OK(qs_fixture_get(fx, "x", QS_FX_F32, 2, NULL, -1, &x));
    ASSERT_OK(qs_fixture_get(fx, "emb.weight", QS_FX_F32, 2, NULL, -1, &emb));
    if (x->ndim != 2 || emb->ndim != 2) fail_msg("fixture %s: x must be ids (N, T) and emb.weight (V, 3C)", fx->path);
    const int64_t N = x->shape[0], T = x->shape[1], V = emb->shape[0], C = emb->shape[1] / 3, H = 2;
    ASSERT_OK(qs_fixture_get(fx, "labels", QS_FX_I32, 2, (int64_t[]){N, T}, -1, &y));
    qs_model *m;
    ASSERT_OK(qs_model_create("attention_test", 1, 1, T, C, &m));
    m->label_len = T;
    int e = qs_test_add(m, QS_NODE_EMBEDDING, "emb", 0, -1, CFG(.embed = {V, 3 * C}));
    int q = qs_test_add(m, QS_NODE_SPLIT_HEADS, "attn.q", e, -1, CFG(.heads = {H, 0, 3}));
    int k = qs_test_add(m, QS_NODE_SPLIT_HEADS, "attn.k", e, -1, CFG(.heads = {H, 1, 3}));
    int v = qs_test_add(m, QS_NODE_SPLIT_HEADS, "attn.v", e, -1, CFG(.heads = {H, 2, 3}));
    int s = qs_test_add(m, QS_NODE_MATMUL, "attn.scores", q, k, CFG(.matmul = {true, 1.0f / sqrtf((float)(C / H))}));
    int p = qs_test_add(m, QS_NODE_SOFTMAX, "attn.softmax", s, c->pad ? 0 : -1,
                        CFG(.softmax = {c->causal, c->pad ? 0.0f : -1.0f}));
    int ctx = qs_test_add(m, QS_NODE_MATMUL, "attn.context", p, v, CFG(.matmul = {false, 1.0f}));
    int mg = qs_test_add(m, QS_NODE_MERGE_HEADS, "attn.merge", ctx, -1, qs_test_no_cfg());
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", mg, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    ASSERT_OK(qs_model_setup(m, g_be, N, 1));
    load_params(m, fx);
    ASSERT_OK(qs_model_forward(m, x->data, y->data, true));
    bool ok = cmp_activations(m, fx);
    ok &= cmp_dev(m, fx, "out", m->nodes[mg].y, "out", numel(&m->nodes[mg]), chain_K(m, mg), -1);
    ok &= cmp_losses(m, fx, chain_K(m, m->n_nodes - 1));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    ok &= cmp_grads(m, fx, "grad.", step_K(m));
    qs_model_free(m);
    qs_fixture_free(fx);
    if (!ok) fail_msg("%s: comparisons over budget (see the lines above)", c->fixture);
}

static const attn_case ATTN_CASES[] = {
    {"transformer_attn_causal.bin", true, false},
    {"transformer_attn_padmask.bin", false, true},
};

/* ------------------------------------------------------------------ tiny gpt / bert, AdamW */

#define MODEL_STEPS 4

typedef struct model_case {
    const char *fixture;
    const char *arch;
    int64_t T, classes, width, layers, heads, batch; /* must match tools/gen_transformer_fixtures.py */
} model_case;

static const model_case MODEL_CASES[] = {
    {"transformer_gpt_tiny.bin", "gpt", 6, 11, 8, 2, 2, 3},
    {"transformer_bert_tiny.bin", "bert", 6, 3, 4, 2, 2, 3},
};

/* Largest |m̂_t| / sqrt(v̂_t) AdamW can reach at step t (1-based) for any gradients, by
 * Cauchy–Schwarz: (1-β1)/(1-β1^t) · sqrt((1-β2^t)/(1-β2)) · sqrt(Σ_k β1^{2(t-k)} / β2^{t-k}). */
static double adam_ratio_bound(double b1, double b2, int t) {
    double s = 0;
    for (int k = 1; k <= t; k++) s += pow(b1, 2.0 * (t - k)) / pow(b2, (double)(t - k));
    return (1 - b1) / (1 - pow(b1, t)) * sqrt((1 - pow(b2, t)) / (1 - b2)) * sqrt(s);
}

/* Compare final parameter i; elements in the fixture's "nullgrad.<name>" runs only within
 * `null_bound` (plus the budget). */
static bool cmp_final(qs_model *m, const qs_fixture *fx, int i, double K, double traj, double null_bound) {
    const qs_table_entry *e = &m->params.entries[i];
    char name[QS_NAME_MAX + 16];
    snprintf(name, sizeof name, "final.%s", e->name);
    const float *ref = fx_f32(fx, name, e->numel), *init = fx_f32(fx, e->name, e->numel);
    float *got = qs_test_download(m, qs_model_param_ptr(m, i), e->numel);
    /* the initial parameters are exact, so rounding enters through the updates: the scale of
     * the error is that of the change, max|final − initial| */
    double scale = 0;
    for (int64_t k = 0; k < e->numel; k++) scale = fmax(scale, fabs((double)ref[k] - init[k]));
    qs_tol tol = qs_tol_fp32(K, scale);
    tol.rtol *= traj;
    tol.atol *= traj;
    bool ok = true;
    snprintf(name, sizeof name, "nullgrad.%s", e->name);
    const qs_fx_tensor *runs = qs_fixture_find(fx, name);
    if (runs) {
        if (runs->dtype != QS_FX_I32 || runs->ndim != 2 || runs->shape[1] != 2)
            fail_msg("fixture %s: %s must be i32 (R, 2)", fx->path, name);
        const int32_t *r = runs->data;
        int64_t count = 0;
        double worst = 0;
        for (int64_t j = 0; j < runs->shape[0]; j++)
            for (int64_t k = r[2 * j]; k < (int64_t)r[2 * j] + r[2 * j + 1]; k++) {
                if (k < 0 || k >= e->numel) fail_msg("fixture %s: %s indexes element %lld of %lld", fx->path, name,
                                                     (long long)k, (long long)e->numel);
                const double d = fabs((double)got[k] - ref[k]);
                const double allowed = tol.atol + tol.rtol * fabs(ref[k]) + null_bound;
                worst = fmax(worst, d / allowed);
                if (!(d <= allowed)) ok = false;
                got[k] = ref[k]; /* compared here; excluded from the check below */
                count++;
            }
        printf("  %-4s %s: %lld elements with a zero exact gradient, worst %.1f%% of lr·Σ R_t = %.3g\n",
               ok ? "ok" : "FAIL", name, (long long)count, 100.0 * worst, null_bound);
    }
    snprintf(name, sizeof name, "final.%s", e->name);
    ok &= qs_check_close(name, got, ref, e->numel, tol, NULL);
    free(got);
    return ok;
}

static void run_model(void **state) {
    const model_case *c = *state;
    printf("[%s: %s, %d AdamW steps]\n", c->fixture, c->arch, MODEL_STEPS);
    qs_fixture *fx;
    ASSERT_OK(qs_fixture_open(c->fixture, &fx));
    qs_model_options o = {.in_h = 1, .in_w = 1, .in_c = c->T, .num_classes = c->classes, .width = c->width,
                          .layers = c->layers, .heads = c->heads};
    qs_model *m;
    ASSERT_OK(qs_models_build(c->arch, &o, &m));
    ASSERT_OK(qs_model_setup(m, g_be, c->batch, 7));
    load_params(m, fx);
    const int64_t L = m->label_len, N = c->batch;

    const double K = step_K(m);
    const double amp = fx_scalar(fx, "amplification"), traj = amp * MODEL_STEPS;
    qs_optim_config oc = qs_optim_config_default(QS_OPTIM_ADAMW, fx_scalar(fx, "adamw.lr"));
    oc.beta1 = fx_scalar(fx, "adamw.beta1");
    oc.beta2 = fx_scalar(fx, "adamw.beta2");
    oc.eps = fx_scalar(fx, "adamw.eps");
    oc.weight_decay = fx_scalar(fx, "adamw.weight_decay");
    double null_bound = 0;
    for (int t = 1; t <= MODEL_STEPS; t++) null_bound += oc.lr * adam_ratio_bound(oc.beta1, oc.beta2, t);
    printf("  per-step K=%.0f, trajectory factor %.2f (amplification %.3f × %d steps); AdamW lr %g betas (%g, %g) "
           "eps %g wd %g\n", K, traj, amp, MODEL_STEPS, (double)oc.lr, oc.beta1, oc.beta2, (double)oc.eps,
           (double)oc.weight_decay);
    qs_optimizer opt;
    ASSERT_OK(qs_optimizer_init(&opt, g_be, &m->params, &oc));

    bool ok = true;
    float losses[MODEL_STEPS];
    char name[64];
    for (int s = 0; s < MODEL_STEPS; s++) {
        const qs_fx_tensor *x, *y;
        snprintf(name, sizeof name, "x.%d", s);
        ASSERT_OK(qs_fixture_get(fx, name, QS_FX_F32, 2, (int64_t[]){N, c->T}, -1, &x));
        snprintf(name, sizeof name, "labels.%d", s);
        ASSERT_OK(qs_fixture_get(fx, name, QS_FX_I32, -1, NULL, N * L, &y));
        ASSERT_OK(qs_model_forward(m, x->data, y->data, true));
        if (s == 0) ok &= cmp_activations(m, fx);
        double l;
        ASSERT_OK(qs_model_loss_accuracy(m, N, &l, NULL));
        losses[s] = (float)l;
        ASSERT_OK(qs_model_backward(m, 1.0f));
        if (s == 0) ok &= cmp_grads(m, fx, "grad0.", K);
        ASSERT_OK(qs_optimizer_step(&opt, g_be, m->stream, m->param_data, m->grad_data, oc.lr, NULL));
        ASSERT_OK(g_be->ops->stream_sync(g_be, m->stream));
    }
    const float *ref_losses = fx_f32(fx, "losses", MODEL_STEPS);
    qs_tol tl = qs_tol_fp32(K, qs_max_abs(ref_losses, MODEL_STEPS));
    tl.rtol *= traj;
    tl.atol *= traj;
    ok &= qs_check_close("losses (per step)", losses, ref_losses, MODEL_STEPS, tl, NULL);
    for (int i = 0; i < m->params.count; i++) ok &= cmp_final(m, fx, i, K, traj, null_bound);
    assert_int_equal(opt.step, MODEL_STEPS);
    qs_optimizer_free(&opt, g_be);
    qs_model_free(m);
    qs_fixture_free(fx);
    if (!ok) fail_msg("%s: comparisons over budget (see the lines above)", c->fixture);
}

/* ------------------------------------------------------------------ data order in Python */

/* tools/loader_order.py reproduces qs_loader_next's sample order (Philox key derivation,
 * rejection sampling, Fisher–Yates, the epoch's permutation, a rank's slice) over three epochs
 * of a token stream whose window i starts with token i·T, for several seeds, batch sizes and
 * world sizes. Skipped without python3. */
static void test_loader_order(void **state) {
    const char *src = getenv("QS_SOURCE_DIR");
    char cmd[1024];
    char *out = NULL;
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tools/loader_order.py key --seed 42 --purpose loader-shuffle --index 3",
             src ? src : ".");
    int rc = qs_test_run_shell(cmd, &out);
    if (rc == 127) {
        free(out);
        skip();
    }
    if (rc != 0) fail_msg("%s failed:\n%s", cmd, out);
    char want[32];
    snprintf(want, sizeof want, "0x%016llx", (unsigned long long)qs_rng_key(42, "loader-shuffle", 3));
    if (strncmp(out, want, strlen(want)) != 0)
        fail_msg("qs_rng_key(42, loader-shuffle, 3) = %s, Python says %s", want, out);
    free(out);

    const int64_t T = 3, n = 1000;
    uint16_t *tok = malloc((size_t)(n * T + 1) * sizeof *tok);
    assert_non_null(tok);
    for (int64_t i = 0; i <= n * T; i++) tok[i] = (uint16_t)i;
    qs_dataset ds;
    ASSERT_OK(qs_dataset_token_stream("order-test", "the order test stream", tok, n * T + 1, T, 65536, &ds));
    static const struct { uint64_t seed; int64_t batch; int world, rank; } cases[] = {
        {1, 7, 1, 0}, {0xDEADBEEFCAFEF00Dull, 64, 1, 0}, {12345, 10, 3, 2}, {7, 1000, 1, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        qs_loader ld;
        qs_loader_options lo = {.global_batch = cases[ci].batch, .rank = cases[ci].rank, .world = cases[ci].world,
                                .seed = cases[ci].seed, .shuffle = true, .drop_last = true};
        ASSERT_OK(qs_loader_init(&ld, &ds, &lo));
        const int64_t steps = 3 * qs_loader_steps_per_epoch(&ld), local = qs_loader_local_batch(&ld);
        float *x = malloc((size_t)(local * T) * sizeof *x);
        int32_t *y = malloc((size_t)(local * T) * sizeof *y);
        size_t cap = (size_t)(steps * local * 8 + steps + 16), len = 0;
        char *text = malloc(cap);
        assert_true(x && y && text);
        for (int64_t s = 0; s < steps; s++) {
            ASSERT_OK(qs_loader_next(&ld, x, y, NULL, NULL));
            for (int64_t j = 0; j < local; j++)
                len += (size_t)snprintf(text + len, cap - len, "%s%lld", j ? " " : "",
                                        (long long)(x[j * T] / (float)T));
            len += (size_t)snprintf(text + len, cap - len, "\n");
        }
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/loader_order.py indices --n %lld --batch %lld --seed %llu "
                 "--steps %lld --world %d --rank %d", src ? src : ".", (long long)n, (long long)cases[ci].batch,
                 (unsigned long long)cases[ci].seed, (long long)steps, cases[ci].world, cases[ci].rank);
        rc = qs_test_run_shell(cmd, &out);
        if (rc != 0) fail_msg("%s failed:\n%s", cmd, out);
        bool same = strcmp(out, text) == 0;
        printf("  %-4s seed %llu, batch %lld, rank %d of %d: %lld steps over 3 epochs\n", same ? "ok" : "FAIL",
               (unsigned long long)cases[ci].seed, (long long)cases[ci].batch, cases[ci].rank, cases[ci].world,
               (long long)steps);
        if (!same) fail_msg("the Python order differs from qs_loader_next's\nC:\n%.400s\nPython:\n%.400s", text, out);
        free(out);
        free(text);
        free(x);
        free(y);
        qs_loader_free(&ld);
    }
    qs_dataset_free(&ds);
}

/* FNV-1a 64 over the tokens as uint16 values (tools/loader_order.py fnv1a64). */
static uint64_t fnv1a64(const uint16_t *t, int64_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int64_t i = 0; i < n; i++) h = (h ^ t[i]) * 0x100000001B3ull;
    return h;
}

/* The token stream of data name `data` (dir: the data directory or NULL) and split, as
 * tools/loader_order.py reads it, against qs_dataset_load's: length, T, vocabulary and a hash.
 * Returns false when qs_dataset_load reports QS_ERR_NOT_FOUND (the corpus is not installed). */
static bool check_stream(const char *data, const char *dir, bool train) {
    qs_dataset ds;
    qs_status st = qs_dataset_load(data, dir, train, &ds);
    if (st == QS_ERR_NOT_FOUND) {
        printf("  skip %s: %s\n", data, qs_last_error());
        return false;
    }
    ASSERT_OK(st);
    char want[128], cmd[2048];
    snprintf(want, sizeof want, "%lld %lld %lld 0x%016llx", (long long)ds.n_tokens, (long long)ds.c,
             (long long)ds.classes, (unsigned long long)fnv1a64(ds.tokens, ds.n_tokens));
    const char *src = getenv("QS_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/loader_order.py stream --data '%s'%s%s%s%s", src ? src : ".",
             data, dir ? " --data-dir '" : "", dir ? dir : "", dir ? "'" : "", train ? "" : " --test");
    char *out = NULL;
    int rc = qs_test_run_shell(cmd, &out);
    if (rc != 0) fail_msg("%s failed:\n%s", cmd, out);
    bool same = strncmp(out, want, strlen(want)) == 0 && out[strlen(want)] == '\n';
    printf("  %-4s %s (%s split): %s\n", same ? "ok" : "FAIL", data, train ? "training" : "test", want);
    if (!same) fail_msg("qsync's stream of %s is %s, tools/loader_order.py's %s", data, want, out);
    free(out);
    qs_dataset_free(&ds);
    return true;
}

/* tools/loader_order.py's token streams are qsync's: synthetic-text, an llm.c token file and its
 * "val" sibling, and the fortunes corpus where it is installed. Skipped without python3. */
static void test_token_streams(void **state) {
    if (qs_test_run_shell("/usr/bin/python3 -c pass", NULL) != 0) skip();
    for (int split = 0; split < 2; split++) check_stream("synthetic-text:300:16", NULL, split == 0);
    char dir[256], path[512], data[600];
    qs_test_make_tmpdir(dir, sizeof dir);
    assert_true(dir[0] != '\0');
    uint16_t tok[999];
    for (int i = 0; i < 999; i++) tok[i] = (uint16_t)((i * 7919u) % 1000u);
    snprintf(path, sizeof path, "%s/tiny_train.bin", dir);
    ASSERT_OK(qs_token_file_write(path, tok, 999));
    snprintf(path, sizeof path, "%s/tiny_val.bin", dir);
    ASSERT_OK(qs_token_file_write(path, tok + 500, 499));
    snprintf(data, sizeof data, "tokens:%s/tiny_train.bin:8:1000", dir);
    for (int split = 0; split < 2; split++) check_stream(data, NULL, split == 0);
    assert_int_equal(qs_test_remove_tree(dir), 0);
    for (int split = 0; split < 2; split++) check_stream("fortunes:16", NULL, split == 0);
}

int main(void) {
    enum { NA = sizeof ATTN_CASES / sizeof *ATTN_CASES, NM = sizeof MODEL_CASES / sizeof *MODEL_CASES };
    struct CMUnitTest tests[1 + NA + NM + 2];
    int k = 0;
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_layernorm);
    for (int i = 0; i < NA; i++) {
        tests[k] = (struct CMUnitTest)cmocka_unit_test_prestate(run_attention, (void *)&ATTN_CASES[i]);
        tests[k++].name = ATTN_CASES[i].fixture;
    }
    for (int i = 0; i < NM; i++) {
        tests[k] = (struct CMUnitTest)cmocka_unit_test_prestate(run_model, (void *)&MODEL_CASES[i]);
        tests[k++].name = MODEL_CASES[i].fixture;
    }
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_loader_order);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_token_streams);
    return _cmocka_run_group_tests("transformer_torch", tests, (size_t)k, group_setup, group_teardown);
}
