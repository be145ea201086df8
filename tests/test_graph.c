/* tests/test_graph.c — graph driver behaviours: a BatchNorm directly on the input (whose input
 * needs no gradient) still gets its parameter gradients, since its fused backward runs for
 * them alone; BatchNorm+ReLU and Add+ReLU fusion (qs_model_fuse) train bitwise like the unfused graph;
 * a model whose batch size was changed and changed back (qs_model_set_batch) trains bitwise like one
 * never resized; a BF16 convolution writing BF16 for its BatchNorm trains bitwise like an explicit
 * BF16 cast between them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "graph_helpers.h"
#include "models/models.h"
#include "io/plan_file.h"

static qs_backend *g_be;

static int setup(void **state) { return qs_test_backend_create(1, &g_be); }
static int teardown(void **state) {
    qs_test_backend_destroy(&g_be);
    return 0;
}

/* qs_model_fuse when asked, else nothing; the number of fused pairs. */
static int qs_model_fuse_if(qs_model *m, bool fuse) { return fuse ? qs_model_fuse(m) : 0; }

static void test_batchnorm_on_input_gets_param_grads(void **state) {
    const int64_t B = 4, H = 3, W = 3, C = 2, K = 3;
    qs_model *m;
    ASSERT_OK(qs_model_create("bnnet", H, W, C, K, &m));
    int bn = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn", 0, -1, qs_test_no_cfg());
    int fl = qs_test_add(m, QS_NODE_FLATTEN, "flatten", bn, -1, qs_test_no_cfg());
    int fc = qs_test_add(m, QS_NODE_LINEAR, "fc", fl, -1, CFG(.linear = {.out_features = K, .bias = true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", fc, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    ASSERT_OK(qs_model_setup(m, g_be, B, 5));
    assert_false(m->nodes[0].needs_grad);
    float x[4 * 3 * 3 * 2];
    int32_t y[4] = {0, 1, 2, 1};
    for (int i = 0; i < B * H * W * C; i++) x[i] = sinf((float)i);
    ASSERT_OK(qs_model_forward(m, x, y, true));
    ASSERT_OK(qs_model_backward(m, 1.0f));
    float *dgamma = qs_test_download(m, qs_model_grad_ptr(m, m->nodes[bn].param[0]), C);
    float *dbeta = qs_test_download(m, qs_model_grad_ptr(m, m->nodes[bn].param[1]), C);
    for (int c = 0; c < C; c++) assert_true(dgamma[c] != 0.0f && dbeta[c] != 0.0f && isfinite(dgamma[c]));
    assert_int_equal(m->nodes[bn].time[QS_CAT_BACKWARD_DATA].calls, 1);
    free(dgamma);
    free(dbeta);
    qs_model_free(m);
}

/* Train m (set up) 3 plain SGD steps at rate lr on the batch (x, y), run an eval forward, and
 * return host copies of its parameters, buffers and logits (caller frees); frees m. */
static void train_3_steps(qs_model *m, const float *x, const int32_t *y, float lr, float **params, float **buffers,
                          float **logits, size_t *pbytes, size_t *bbytes) {
    for (int step = 0; step < 3; step++) {
        ASSERT_OK(qs_model_forward(m, x, y, true));
        ASSERT_OK(qs_model_backward(m, 1.0f));
        for (int k = 0; k < m->params.count; k++) {
            float *p = qs_model_param_ptr(m, k), *g = qs_model_grad_ptr(m, k);
            for (int64_t e = 0; e < m->params.entries[k].numel; e++) p[e] -= lr * g[e];
        }
    }
    ASSERT_OK(qs_model_forward(m, x, y, false));
    *pbytes = m->params.bytes;
    *bbytes = m->buffers.bytes;
    *params = qs_test_download(m, m->param_data, (int64_t)(m->params.bytes / sizeof(float)));
    *buffers = qs_test_download(m, m->buffer_data, (int64_t)(m->buffers.bytes / sizeof(float)));
    *logits = qs_test_download(m, m->nodes[m->logits_node].y, m->batch * m->num_classes);
    qs_model_free(m);
}

/* Every selectable node of m at prec (emulated where the backend lacks it), casts inserted. */
static void set_uniform_precision(qs_model *m, qs_precision prec) {
    qs_precision_options po;
    qs_precision_options_default(&po);
    po.uniform = prec;
    po.allow_emulated = true;
    ASSERT_OK(qs_precision_setup(m, g_be, &po));
}

/* Two trainings' parameters (pbytes), buffers (bbytes) and n_logits logits bit for bit; frees all six. */
static void same_training(float *p0, float *b0, float *l0, float *p1, float *b1, float *l1, size_t pbytes,
                          size_t bbytes, size_t n_logits) {
    assert_memory_equal(p0, p1, pbytes);
    assert_memory_equal(b0, b1, bbytes);
    assert_memory_equal(l0, l1, n_logits * sizeof(float));
    free(p0), free(b0), free(l0), free(p1), free(b1), free(l1);
}

/* A width-4 resnet18 on 28×28×1 (fused or not, every GEMM-like layer at `prec`) after 3 SGD
 * steps and an eval forward: the parameters, buffers and logits (host copies, caller frees).
 * resize: set up at batch 8, changed to 3 and back to 8 (qs_model_set_batch) before training. */
static void run_resnet_at(bool fuse, qs_precision prec, bool resize, float **params, float **buffers, float **logits,
                          size_t *pbytes, size_t *bbytes) {
    qs_model_options o = qs_models_default_options(28, 28, 1, 10);
    o.width = 4;
    qs_model *m;
    ASSERT_OK(qs_models_build("resnet18", &o, &m));
    int fused = qs_model_fuse_if(m, fuse);
    assert_int_equal(fused, fuse ? 25 : 0); /* the stem's and each block's BN→ReLU, each block's Add→ReLU, and
                                             * each block's Add into its last BN (bn2, or the downsample's) */
    set_uniform_precision(m, prec);
    int fused_casts = 0;
    for (int i = 0; i < m->n_nodes; i++) fused_casts += m->nodes[i].kind == QS_NODE_CAST && m->nodes[i].alias_of >= 0;
    /* each block's bn1→ReLU→cast→conv2 (8); the last block of layers 1-3 (its BN+Add+ReLU read
     * only by the cast in front of the next block's conv1 and downsample: 3); and the stem and
     * the first block of each layer, whose output the next block's Add reads from the cast in
     * front of its conv1 (qs_model_bf16_residuals: 5) */
    assert_int_equal(fused_casts, fuse && prec == QS_PREC_BF16 ? 16 : 0);
    int bf16_residuals = 0; /* Add inputs read from a BF16 cast, fused or not: those 5 block outputs */
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; m->nodes[i].kind == QS_NODE_ADD && k < m->nodes[i].n_inputs; k++) {
            const qs_node *in = &m->nodes[m->nodes[i].inputs[k]];
            bf16_residuals += in->kind == QS_NODE_CAST && in->out_dtype == QS_BF16;
        }
    assert_int_equal(bf16_residuals, prec == QS_PREC_BF16 ? 5 : 0);
    int bf16_convs = 0;
    for (int i = 0; i < m->n_nodes; i++) bf16_convs += m->nodes[i].kind == QS_NODE_CONV2D && m->nodes[i].out_dtype == QS_BF16;
    assert_int_equal(bf16_convs, prec == QS_PREC_BF16 ? 20 : 0); /* every conv feeds one BN: 17 + 3 downsamples */
    int bf16_grads = 0; /* each block's bn1 (fused) or its ReLU (unfused): conv2 alone writes its gradient */
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *t = &m->nodes[i];
        if (t->grad_dtype != QS_BF16) continue;
        bf16_grads++;
        assert_int_equal(t->kind, fuse ? QS_NODE_BATCHNORM2D : QS_NODE_RELU);
    }
    assert_int_equal(bf16_grads, prec == QS_PREC_BF16 ? 8 : 0);
    ASSERT_OK(qs_model_setup(m, g_be, 8, 11));
    int no_fp32_dy = 0; /* their batch norms write their quantized dY (qs_gemm_dy_written_by_reader) */
    for (int i = 0; i < m->n_nodes; i++) no_fp32_dy += m->nodes[i].kind == QS_NODE_CONV2D && !m->nodes[i].dy;
    assert_int_equal(no_fp32_dy, fuse && prec == QS_PREC_BF16 ? 20 : 0);
    int bn_adds = 0, bn_reads_add = 0; /* BNs with an Add fused in; the bn2 beside a downsample BN that took
                                        * the Add reads its gradient (no dy of its own) */
    for (int i = 0; i < m->n_nodes; i++) {
        bn_adds += m->nodes[i].kind == QS_NODE_BATCHNORM2D && m->nodes[i].cfg.bn.add;
        bn_reads_add += m->nodes[i].kind == QS_NODE_BATCHNORM2D && !m->nodes[i].dy;
    }
    assert_int_equal(bn_adds, fuse ? 8 : 0);
    assert_int_equal(bn_reads_add, fuse ? 3 : 0);
    int cast_grads = 0; /* every quantizing cast passes its gradient in place (shared with its input) */
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *c = &m->nodes[i];
        if (c->kind == QS_NODE_CAST && c->alias_of < 0 && c->dy) cast_grads += c->dy_alias ? 1 : 100;
    }
    /* 8 conv1 (+ downsample), 8 conv2, fc; less the 16 fused casts at BF16 */
    assert_int_equal(cast_grads, prec == QS_PREC_FP32 ? 0 : fuse && prec == QS_PREC_BF16 ? 1 : 17);
    if (resize) {
        size_t used8 = 0, used3 = 0, again = 0;
        g_be->ops->memory_stats(g_be, &used8, NULL);
        ASSERT_OK(qs_model_set_batch(m, 3));
        g_be->ops->memory_stats(g_be, &used3, NULL);
        assert_true(used3 < used8);
        assert_int_equal(m->batch, 3);
        ASSERT_OK(qs_model_set_batch(m, 8));
        g_be->ops->memory_stats(g_be, &again, NULL);
        assert_int_equal(again, used8); /* nothing leaked or kept from batch 3 */
    }
    static float x[8 * 28 * 28];
    int32_t y[8];
    for (int i = 0; i < 8 * 28 * 28; i++) x[i] = cosf(0.37f * (float)i);
    for (int i = 0; i < 8; i++) y[i] = (i * 3) % 10;
    train_3_steps(m, x, y, 0.05f, params, buffers, logits, pbytes, bbytes);
}

static void run_resnet(bool fuse, float **params, float **buffers, float **logits, size_t *pbytes, size_t *bbytes) {
    run_resnet_at(fuse, QS_PREC_FP32, false, params, buffers, logits, pbytes, bbytes);
}

/* Changing the batch size and back leaves a model that trains bitwise like one never
 * resized, in FP32 and in INT8 (whose quantized weight and gradient copies are re-made). */
static void test_set_batch_bitwise(void **state) {
    const qs_precision precs[] = {QS_PREC_FP32, QS_PREC_INT8};
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) {
        if (precs[i] == QS_PREC_INT8 && g_be->ops->precision_support(g_be, QS_PREC_INT8) == QS_PREC_UNSUPPORTED) continue;
        float *p0, *b0, *l0, *p1, *b1, *l1;
        size_t pb0, bb0, pb1, bb1;
        run_resnet_at(true, precs[i], false, &p0, &b0, &l0, &pb0, &bb0);
        run_resnet_at(true, precs[i], true, &p1, &b1, &l1, &pb1, &bb1);
        same_training(p0, b0, l0, p1, b1, l1, pb0, bb0, 8 * 10);
    }
}

static void test_bn_relu_fusion_bitwise(void **state) {
    float *p0, *b0, *l0, *p1, *b1, *l1;
    size_t pb0, bb0, pb1, bb1;
    run_resnet(false, &p0, &b0, &l0, &pb0, &bb0);
    run_resnet(true, &p1, &b1, &l1, &pb1, &bb1);
    assert_int_equal(pb0, pb1);
    same_training(p0, b0, l0, p1, b1, l1, pb0, bb0, 8 * 10);
}

/* At BF16 the fused graph also lets each BatchNorm+ReLU that only feeds a BF16 cast write the
 * BF16 values itself (qs_model_fuse_casts), block outputs that are also residuals included
 * (qs_model_bf16_residuals: the fused batch norm reads its residual in BF16, the unfused Add
 * reads the cast): still bitwise the unfused graph. */
static void test_bn_cast_fusion_bitwise(void **state) {
    float *p0, *b0, *l0, *p1, *b1, *l1;
    size_t pb0, bb0, pb1, bb1;
    run_resnet_at(false, QS_PREC_BF16, false, &p0, &b0, &l0, &pb0, &bb0);
    run_resnet_at(true, QS_PREC_BF16, false, &p1, &b1, &l1, &pb1, &bb1);
    same_training(p0, b0, l0, p1, b1, l1, pb0, bb0, 8 * 10);
}

/* Set m up at batch 4 with `seed`, then train_3_steps (lr 0.1) on inputs sin(freq·i) (cos with
 * `cosine`) and labels y. */
static void train_small(qs_model *m, uint64_t seed, float freq, bool cosine, const int32_t y[4], float **params,
                        float **buffers, float **logits, size_t *pbytes, size_t *bbytes) {
    ASSERT_OK(qs_model_setup(m, g_be, 4, seed));
    const int64_t n = 4 * m->in_h * m->in_w * m->in_c;
    float *x = malloc((size_t)n * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = cosine ? cosf(freq * (float)i) : sinf(freq * (float)i);
    train_3_steps(m, x, y, 0.1f, params, buffers, logits, pbytes, bbytes);
    free(x);
}

/* conv (bias or not) → [explicit straight-through BF16 cast →] BatchNorm+ReLU → flatten → fc
 * → loss, every GEMM at BF16, trained 3 SGD steps on the backend; the parameters, buffers
 * and eval logits (host copies, caller frees); *bf16_convs: convolutions writing BF16. */
static void run_conv_bn(bool explicit_cast, bool bias, float **params, float **buffers, float **logits, size_t *pbytes,
                        size_t *bbytes, int *bf16_convs) {
    const int64_t H = 6, W = 6, C = 3, K = 5;
    qs_model *m;
    ASSERT_OK(qs_model_create("convbn", H, W, C, K, &m));
    int h = qs_test_add(m, QS_NODE_CONV2D, "conv", 0, -1, CFG(.conv = {8, 3, 1, 1, bias}));
    if (explicit_cast)
        h = qs_test_add(m, QS_NODE_CAST, "conv.to_bf16", h, -1, CFG(.cast = {.to = QS_BF16, .straight_through = true}));
    h = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_RELU, "relu", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_FLATTEN, "flatten", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_LINEAR, "fc", h, -1, CFG(.linear = {.out_features = K, .bias = true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", h, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    qs_model_fuse(m);
    set_uniform_precision(m, QS_PREC_BF16);
    *bf16_convs = 0;
    for (int i = 0; i < m->n_nodes; i++) *bf16_convs += m->nodes[i].kind == QS_NODE_CONV2D && m->nodes[i].out_dtype == QS_BF16;
    m->grad_round_nearest = true; /* stochastic rounding's keys count nodes: the extra cast would shift them */
    const int32_t y[4] = {0, 3, 1, 4};
    train_small(m, 7, 0.71f, false, y, params, buffers, logits, pbytes, bbytes);
}

/* A BF16 convolution whose only reader is a BatchNorm writes BF16 (qs_model_bf16_conv_outputs):
 * it trains bitwise like the same graph with an explicit straight-through BF16 cast between
 * them (whose forward rounds to nearest even and whose backward passes the FP32 gradient). A
 * convolution with a bias keeps its FP32 output. */
static void test_bf16_conv_output_bitwise(void **state) {
    float *p0, *b0, *l0, *p1, *b1, *l1;
    size_t pb0, bb0, pb1, bb1;
    int n0, n1;
    run_conv_bn(true, false, &p0, &b0, &l0, &pb0, &bb0, &n0);
    run_conv_bn(false, false, &p1, &b1, &l1, &pb1, &bb1, &n1);
    assert_int_equal(n0, 0); /* its reader is the cast */
    assert_int_equal(n1, 1);
    assert_int_equal(pb0, pb1);
    same_training(p0, b0, l0, p1, b1, l1, pb0, bb0, 4 * 5);
    run_conv_bn(false, true, &p1, &b1, &l1, &pb1, &bb1, &n1);
    assert_int_equal(n1, 0);
    free(p1), free(b1), free(l1);
}

/* Two Adds without ReLU: add1 = bn_a + bn_b (two conv branches of the input; fused into bn_b,
 * the later one, while bn_a reads add1's gradient itself) and add2 = bn_c + add1 with bn_c
 * after a conv of add1 (fused into bn_c, whose residual is add1, itself an alias of bn_b) →
 * flatten → fc → loss, every GEMM at prec, 3 SGD steps: parameters, buffers and eval logits
 * (host copies, caller frees); *bn_adds: BatchNorms with an Add fused in. */
static void run_branches(bool fuse, qs_precision prec, float **params, float **buffers, float **logits,
                         size_t *pbytes, size_t *bbytes, int *bn_adds) {
    const int64_t H = 5, W = 5, C = 3, K = 4;
    qs_model *m;
    ASSERT_OK(qs_model_create("branches", H, W, C, K, &m));
    int a = qs_test_add(m, QS_NODE_CONV2D, "conv_a", 0, -1, CFG(.conv = {6, 3, 1, 1, false}));
    a = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn_a", a, -1, qs_test_no_cfg());
    int b = qs_test_add(m, QS_NODE_CONV2D, "conv_b", 0, -1, CFG(.conv = {6, 1, 1, 0, false}));
    b = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn_b", b, -1, qs_test_no_cfg());
    const int add1 = qs_test_add(m, QS_NODE_ADD, "add1", a, b, qs_test_no_cfg());
    int c = qs_test_add(m, QS_NODE_CONV2D, "conv_c", add1, -1, CFG(.conv = {6, 3, 1, 1, false}));
    c = qs_test_add(m, QS_NODE_BATCHNORM2D, "bn_c", c, -1, qs_test_no_cfg());
    int h = qs_test_add(m, QS_NODE_ADD, "add2", c, add1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_FLATTEN, "flatten", h, -1, qs_test_no_cfg());
    h = qs_test_add(m, QS_NODE_LINEAR, "fc", h, -1, CFG(.linear = {.out_features = K, .bias = true}));
    qs_test_add(m, QS_NODE_SOFTMAX_XENT, "loss", h, -1, qs_test_no_cfg());
    ASSERT_OK(qs_model_finalize(m));
    if (fuse) qs_model_fuse(m);
    set_uniform_precision(m, prec);
    *bn_adds = 0;
    for (int i = 0; i < m->n_nodes; i++) *bn_adds += m->nodes[i].kind == QS_NODE_BATCHNORM2D && m->nodes[i].cfg.bn.add;
    const int32_t y[4] = {1, 0, 3, 2};
    train_small(m, 5, 0.53f, true, y, params, buffers, logits, pbytes, bbytes);
}

/* Adds without a ReLU fused into batch norms (one beside a batch norm that reads the Add's
 * gradient itself, one whose residual is a fused Add) train bitwise like the unfused graph, at
 * FP32 and BF16. */
static void test_bn_add_fusion_bitwise(void **state) {
    const qs_precision precs[] = {QS_PREC_FP32, QS_PREC_BF16};
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++) {
        float *p0, *b0, *l0, *p1, *b1, *l1;
        size_t pb0, bb0, pb1, bb1;
        int n0, n1;
        run_branches(false, precs[i], &p0, &b0, &l0, &pb0, &bb0, &n0);
        run_branches(true, precs[i], &p1, &b1, &l1, &pb1, &bb1, &n1);
        assert_int_equal(n0, 0);
        assert_int_equal(n1, 2);
        same_training(p0, b0, l0, p1, b1, l1, pb0, bb0, 4 * 4);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_batchnorm_on_input_gets_param_grads),
                                       cmocka_unit_test(test_bn_relu_fusion_bitwise),
                                       cmocka_unit_test(test_bn_cast_fusion_bitwise),
                                       cmocka_unit_test(test_bf16_conv_output_bitwise),
                                       cmocka_unit_test(test_bn_add_fusion_bitwise),
                                       cmocka_unit_test(test_set_batch_bitwise)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
