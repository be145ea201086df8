/* tests/test_memory_plan.c — the one memory plan (graph/memory_plan.h): for every built-in model
 * (small widths, layers and inputs) at two batch sizes and several precision assignments (FP32,
 * BF16 with its rewrites, and for some models INT8, FP8 with delayed scaling and a mixed
 * plan), (a) the predicted peak (predict/sim_memory.h, made without a backend from the
 * unset-up model) equals the set-up model's arenas plus its tables and optimizer state, byte
 * for byte and category by category, and (b) the backend's measured peak after a training step
 * is within 1% of it. Also: the plan's layout (aligned, disjoint, within its arenas, the
 * pointers the model got), the backend facts (transposed FP8 copies, pointwise convolutions as
 * Linear) and a batch change; the full-size presets are planned without being set up. Runs on
 * the CPU backend, and on the CUDA backend where one is available (skipped otherwise). */
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
#include "graph/memory_plan.h"
#include "graph/precision.h"
#include "graph_helpers.h"
#include "models/models.h"
#include "optim/optim.h"
#include "predict/sim_memory.h"

/* One model: its build options (small), and whether its quantized precisions are checked too. */
typedef struct mp_model {
    const char *name;
    int64_t in_h, in_w, in_c, classes, width, layers, heads;
    bool quantized;
} mp_model;

static const mp_model g_models[] = {
    {"mlp", 28, 28, 1, 10, 32, 0, 0, true},       {"cnn", 28, 28, 1, 10, 4, 0, 0, true},
    {"resnet18", 16, 16, 3, 10, 4, 0, 0, true},   {"resnet34", 16, 16, 3, 10, 4, 0, 0, false},
    {"resnet50", 16, 16, 3, 10, 4, 0, 0, false},  {"vgg11", 32, 32, 3, 10, 4, 0, 0, false},
    {"vgg16", 32, 32, 3, 10, 4, 0, 0, false},     {"gpt", 1, 1, 16, 64, 32, 2, 2, false},
    {"gpt-mini", 1, 1, 16, 64, 64, 1, 2, true},   {"bert", 1, 1, 16, 5, 32, 2, 2, false},
    {"bert-mini", 1, 1, 16, 5, 64, 1, 2, false},
};
#define N_MODELS (sizeof g_models / sizeof g_models[0])

/* How a case assigns precisions: uniform p, or (mixed) every other selectable node at p. */
typedef struct mp_assign {
    qs_precision p;
    bool mixed;
    int fp8_history;
} mp_assign;

/* Build the model of e, fused, with the assignment's precisions and casts (not set up). */
static qs_model *mp_build(const mp_model *e, mp_assign a) {
    qs_model_options o = qs_models_default_options(e->in_h, e->in_w, e->in_c, e->classes);
    o.width = e->width;
    o.layers = e->layers;
    o.heads = e->heads;
    qs_model *m = NULL;
    ASSERT_OK(qs_models_build(e->name, &o, &m));
    qs_model_fuse(m);
    m->fp8_amax_history = a.fp8_history;
    int k = 0;
    for (int i = 0; i < m->n_nodes; i++)
        if (qs_node_precision_selectable(m->nodes[i].kind)) m->nodes[i].prec = !a.mixed || k++ % 2 ? a.p : QS_PREC_FP32;
    ASSERT_OK(qs_model_insert_casts(m, NULL));
    return m;
}

/* A batch for m: images in [-1, 1) or token ids (ids of the padding token 0 included), labels. */
static void mp_batch(const qs_model *m, int64_t batch, float **x, int32_t **y) {
    const int64_t per = m->in_h * m->in_w * m->in_c, rows = batch * m->label_len;
    const bool tokens = m->in_h == 1 && m->in_w == 1;
    *x = malloc((size_t)(batch * per) * sizeof **x);
    *y = malloc((size_t)rows * sizeof **y);
    assert_non_null(*x);
    assert_non_null(*y);
    for (int64_t i = 0; i < batch * per; i++) (*x)[i] = tokens ? (float)((i * 7) % 50) : sinf(0.37f * (float)i);
    for (int64_t i = 0; i < rows; i++) (*y)[i] = (int32_t)((i * 3) % m->num_classes);
}

/* Which attentions the set-up model (ctx) fused, answered as a profile would. */
static bool mp_fused_like(void *ctx, const qs_attention_desc *d) {
    const qs_model *m = ctx;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        if (n->kind == QS_NODE_MERGE_HEADS && n->cfg.merge.fused &&
            (m->nodes[n->cfg.merge.scores].prec == QS_PREC_BF16) == (d->dtype == QS_BF16))
            return true;
    }
    return false;
}

/* The plan of set-up model m is laid out as documented: every buffer aligned, inside its arena,
 * disjoint from the others of its arena (the workspace's share offset 0), and the pointers and
 * per-node figures the model reports are the plan's. */
static void mp_check_layout(const qs_model *m) {
    const qs_memory_plan *p = m->mem;
    assert_non_null(p);
    for (int b = 0; b < p->n_buf; b++) {
        const qs_mem_buffer *x = &p->buf[b];
        assert_int_equal(x->offset % QS_DEVICE_ALIGN, 0);
        assert_true(x->offset + x->bytes <= p->arena_bytes[x->arena]);
        assert_true(x->first <= x->last);
        if (x->arena == QS_MEM_WORKSPACE) assert_int_equal(x->offset, 0);
        for (int c = b + 1; c < p->n_buf && x->arena != QS_MEM_WORKSPACE; c++)
            if (p->buf[c].arena == x->arena)
                assert_true(p->buf[c].offset >= x->offset + x->bytes || x->offset >= p->buf[c].offset + p->buf[c].bytes);
    }
    size_t sum[3] = {0, 0, 0};
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        size_t out, grad, saved;
        qs_node_memory(m, n, &out, &grad, &saved);
        sum[0] += out, sum[1] += grad, sum[2] += saved;
        const qs_mem_node *pn = &p->node[i];
        assert_true(n->y == (pn->y < 0 ? NULL : (char *)m->arena[QS_MEM_ACTIVATIONS] + p->buf[pn->y].offset));
        for (int k = 0; k < QS_MAX_NODE_SAVED; k++) assert_int_equal(n->saved_bytes[k], pn->saved[k] < 0 ? 0 : p->buf[pn->saved[k]].bytes);
    }
    assert_int_equal(sum[0], p->arena_bytes[QS_MEM_ACTIVATIONS]);
    assert_int_equal(sum[1], p->arena_bytes[QS_MEM_ACTIVATION_GRADS]);
    assert_int_equal(sum[2], p->arena_bytes[QS_MEM_SAVED]);
}

static size_t mp_total(const qs_memory_report *r) {
    return r->params + r->grads + r->optimizer + r->buffers + r->activations + r->activation_grads + r->saved +
           r->workspace + r->labels;
}

/* The prediction for the unset-up twin of m (sim_memory: facts and workspace as a profile
 * records them) into *pred, and its peak. */
static size_t mp_predict(const qs_model *twin, const qs_model *m, const qs_optim_config *oc, qs_memory_report *pred) {
    size_t *ws = calloc((size_t)m->n_nodes, sizeof *ws), peak = 0;
    assert_non_null(ws);
    for (int i = 0; i < m->n_nodes; i++) ws[i] = m->nodes[i].workspace;
    const qs_sim_memory_input in = {.m = twin, .batch = m->batch, .facts = m->facts, .workspace = ws,
                                    .attention_supported = mp_fused_like, .attention_ctx = (void *)m, .optimizer = oc};
    ASSERT_OK(qs_sim_memory(&in, pred, &peak, NULL));
    free(ws);
    return peak;
}

/* (a) and (b) for one model, assignment and batch, on a fresh backend from make (for its peak). */
static void mp_case(qs_status (*make)(qs_backend **), const mp_model *e, mp_assign a, int64_t batch,
                    void (*facts)(qs_backend *)) {
    qs_backend *be = NULL;
    ASSERT_OK(make(&be));
    if (be->ops->precision_support(be, a.p) == QS_PREC_UNSUPPORTED) { /* e.g. INT8 on a GPU without it */
        printf("  %s: %s is not supported on %s, not checked\n", e->name, qs_precision_name(a.p), be->ops->name);
        be->ops->destroy(be);
        return;
    }
    if (facts) facts(be);
    qs_model *m = mp_build(e, a), *twin = mp_build(e, a);
    ASSERT_OK(qs_model_setup(m, be, batch, 3));
    mp_check_layout(m);
    qs_optim_config oc = qs_optim_config_default(QS_OPTIM_SGD, 0.01f);
    oc.momentum = 0.9f;
    qs_optimizer opt;
    ASSERT_OK(qs_optimizer_init(&opt, be, &m->params, &oc));
    float *x;
    int32_t *y;
    mp_batch(m, batch, &x, &y);
    ASSERT_OK(qs_model_forward(m, x, y, true));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    ASSERT_OK(qs_optimizer_step(&opt, be, m->stream, m->param_data, m->grad_data, oc.lr, NULL));
    ASSERT_OK(be->ops->stream_sync(be, m->stream));
    qs_memory_report r, pred;
    qs_model_memory(m, &r);
    r.optimizer = qs_optim_state_bytes(&oc, &m->params);
    const size_t predicted = mp_predict(twin, m, &oc, &pred);
    size_t in_use = 0, peak = 0;
    be->ops->memory_stats(be, &in_use, &peak);
    printf("  %-9s %-4s%s batch %lld on %s: predicted %zu, arenas + tables %zu, measured peak %zu (%+.3f%%)\n", e->name,
           qs_precision_name(a.p), a.mixed ? "/fp32" : a.fp8_history ? "+hist" : "", (long long)batch, be->ops->name,
           predicted, mp_total(&r), peak, 100.0 * ((double)peak - (double)predicted) / (double)predicted);
    assert_memory_equal(&pred, &r, sizeof r); /* every category, to the byte */
    assert_int_equal(predicted, mp_total(&r));
    assert_true(fabs((double)peak - (double)predicted) <= 0.01 * (double)predicted);
    free(x);
    free(y);
    qs_optimizer_free(&opt, be);
    qs_model_free(m);
    qs_model_free(twin);
    be->ops->destroy(be);
}

/* One compute thread: cases are tiny, and OpenMP threads that spin on a shared machine stall them. */
static qs_status mp_cpu(qs_backend **be) { return qs_backend_cpu_create(1, be); }
static qs_status mp_cuda(qs_backend **be) { return qs_backend_cuda_create(0, be); }

/* Every model at two batches, FP32 and BF16, and the quantized assignments where asked. */
static void mp_all_models(qs_status (*make)(qs_backend **)) {
    const mp_assign uniform[] = {{QS_PREC_FP32, false, 0}, {QS_PREC_BF16, false, 0}};
    const mp_assign quant[] = {{QS_PREC_INT8, false, 0}, {QS_PREC_FP8, false, 2}, {QS_PREC_INT8, true, 0}};
    const int64_t batches[] = {2, 5};
    for (size_t i = 0; i < N_MODELS; i++)
        for (size_t b = 0; b < 2; b++) {
            for (size_t k = 0; k < 2; k++) mp_case(make, &g_models[i], uniform[k], batches[b], NULL);
            for (size_t k = 0; k < 3 && g_models[i].quantized; k++) mp_case(make, &g_models[i], quant[k], batches[b], NULL);
        }
}

static void test_every_model_cpu(void **state) {
    (void)state;
    mp_all_models(mp_cpu);
}

/* The same on the GPU, where a CUDA backend opens (its own facts: transposed FP8 copies,
 * pointwise convolutions as Linear, fused attention). */
static void test_every_model_cuda(void **state) {
    (void)state;
    qs_backend *be = NULL;
    if (qs_backend_cuda_create(0, &be) != QS_OK) {
        print_message("no CUDA backend here, skipping: %s\n", qs_last_error());
        skip();
    }
    be->ops->destroy(be);
    mp_all_models(mp_cuda);
}

/* The CUDA backend's size-changing facts switched on for the CPU backend (which runs either way). */
static void mp_gpu_facts(qs_backend *be) {
    be->fp8_wants_transposed = true;
    be->pointwise_conv_as_linear = true;
}

/* Backend facts change the plan and the prediction follows them: FP8 transposed copies and
 * 1×1 convolutions run as Linear (resnet50's), on the CPU. */
static void test_backend_facts(void **state) {
    (void)state;
    const mp_assign fp8 = {QS_PREC_FP8, false, 0};
    mp_case(mp_cpu, &g_models[4], fp8, 3, mp_gpu_facts); /* resnet50 */
    mp_case(mp_cpu, &g_models[0], fp8, 3, mp_gpu_facts); /* mlp */
    qs_model *m = mp_build(&g_models[0], fp8);
    qs_memory_plan with, without;
    const qs_mem_facts on = {.fp8_wants_transposed = true}, off = {0};
    ASSERT_OK(qs_model_memory_plan(m, 3, &on, NULL, &with));
    ASSERT_OK(qs_model_memory_plan(m, 3, &off, NULL, &without));
    assert_true(with.arena_bytes[QS_MEM_SAVED] > without.arena_bytes[QS_MEM_SAVED]);
    assert_int_equal(with.arena_bytes[QS_MEM_ACTIVATIONS], without.arena_bytes[QS_MEM_ACTIVATIONS]);
    qs_memory_plan_free(&with);
    qs_memory_plan_free(&without);
    qs_model_free(m);
    m = mp_build(&g_models[0], (mp_assign){QS_PREC_FP8, false, 3});
    ASSERT_OK(qs_model_memory_plan(m, 3, &off, NULL, &with));
    int hist = 0; /* the FP8 amax histories are declared persistent (carried from step to step) */
    for (int b = 0; b < with.n_buf; b++) hist += with.buf[b].persistent && with.buf[b].dtype == QS_F32;
    assert_true(hist > 0);
    qs_memory_plan_free(&with);
    qs_model_free(m);
}

/* A batch change lays the arenas out again: the bytes in use afterwards are the prediction at
 * the new batch; and back. */
static void test_set_batch(void **state) {
    (void)state;
    qs_backend *be = NULL;
    ASSERT_OK(mp_cpu(&be));
    const mp_assign bf16 = {QS_PREC_BF16, false, 0};
    qs_model *m = mp_build(&g_models[2], bf16), *twin = mp_build(&g_models[2], bf16); /* resnet18 */
    ASSERT_OK(qs_model_setup(m, be, 4, 1));
    const int64_t batches[] = {7, 4};
    for (int k = 0; k < 2; k++) {
        ASSERT_OK(qs_model_set_batch(m, batches[k]));
        mp_check_layout(m);
        qs_memory_report pred;
        size_t in_use = 0, predicted = mp_predict(twin, m, NULL, &pred);
        be->ops->memory_stats(be, &in_use, NULL);
        printf("  resnet18 bf16 after set_batch(%lld): predicted %zu, in use %zu\n", (long long)batches[k], predicted, in_use);
        assert_int_equal(in_use, predicted);
    }
    qs_model_free(m);
    qs_model_free(twin);
    be->ops->destroy(be);
}

/* The full-size presets are planned without a backend (nothing is allocated): every category
 * is there, a larger batch takes more of each per-batch arena, and fused attention less. */
static void test_full_presets_planned(void **state) {
    (void)state;
    const char *names[] = {"resnet50", "vgg16", "gpt", "bert"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const bool tr = qs_models_is_transformer(names[i]);
        qs_model_options o = tr ? qs_models_default_options(1, 1, 128, strcmp(names[i], "gpt") == 0 ? 50257 : 2)
                                : qs_models_default_options(224, 224, 3, 1000);
        qs_model *m = NULL;
        ASSERT_OK(qs_models_build(names[i], &o, &m));
        qs_model_fuse(m);
        qs_model_set_uniform_precision(m, QS_PREC_BF16);
        ASSERT_OK(qs_model_insert_casts(m, NULL));
        const qs_optim_config oc = qs_optim_config_default(QS_OPTIM_ADAMW, 1e-4f);
        qs_memory_report r8, r16;
        size_t p8 = 0, p16 = 0;
        const qs_mem_facts gpu = {true, true, true};
        qs_sim_memory_input in = {.m = m, .batch = 8, .facts = gpu, .optimizer = &oc};
        ASSERT_OK(qs_sim_memory(&in, &r8, &p8, NULL));
        in.batch = 16;
        ASSERT_OK(qs_sim_memory(&in, &r16, &p16, NULL));
        printf("  %s bf16 (GPU facts), AdamW: predicted %.1f MB at batch 8, %.1f MB at 16 (activations %.1f / %.1f MB)\n",
               names[i], p8 / 1e6, p16 / 1e6, r8.activations / 1e6, r16.activations / 1e6);
        assert_int_equal(r8.optimizer, 2 * m->params.bytes);
        assert_true(r16.activations > r8.activations && r16.saved > r8.saved && r16.activation_grads > r8.activation_grads);
        assert_true(p16 > p8 && p8 == mp_total(&r8));
        if (tr) { /* fused attention keeps no (T, T) scores: less memory than the unfused graph */
            qs_memory_report ru;
            size_t pu = 0;
            in.facts.fused_attention = false;
            ASSERT_OK(qs_sim_memory(&in, &ru, &pu, NULL));
            printf("  %s unfused attention: %.1f MB at batch 16\n", names[i], pu / 1e6);
            assert_true(pu > p16 && ru.activations > r16.activations);
        }
        qs_model_free(m);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_model_cpu),     cmocka_unit_test(test_every_model_cuda),
        cmocka_unit_test(test_backend_facts),       cmocka_unit_test(test_set_batch),
        cmocka_unit_test(test_full_presets_planned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
