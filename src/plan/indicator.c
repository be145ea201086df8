/* src/plan/indicator.c — the bi-directional mixed-precision indicator (see indicator.h and
 * docs/INDICATOR.md).
 *
 * Derivation of the GVAR variance proxies (the default method). A GEMM-like layer computes
 * Y_j = Σ_{k<K} X_k·W_jk (K = k_fwd terms per output). Quantizing the operands replaces X by
 * X + ε_X and W by W + ε_W, where the per-element rounding errors ε are (approximately)
 * zero-mean, independent of each other and of the data, with variances σ²_X(b), σ²_W(b).
 * To first order ΔY_j = Σ_k (ε_Xk·W_jk + X_k·ε_Wjk), so
 *     Var(ΔY) = K·(σ²_X·E[W²] + σ²_W·E[X²])                       (forward, per output)
 * Likewise the backward GEMMs with the stochastically rounded dY (variance σ²_dY) and the
 * quantized operands saved from the forward:
 *     dW = dYᵀ·X over k_bwd_weights terms: Var(ΔdW) = Kw·(σ²_dY·E[X²] + σ²_X·E[dY²])
 *     dX = dY·W  over k_bwd_data terms:    Var(ΔdX) = Kd·(σ²_dY·E[W²] + σ²_W·E[dY²])
 * Normalisation: each variance is divided by the signal's mean square, which makes it a
 * noise-to-signal ratio independent of the layer's scale (a BatchNorm after a conv removes the
 * scale anyway), so layers are comparable:
 *     Vfwd(b) = Var(ΔY)/E[Y²]                        (E[Y²] measured)
 *     Vbwd(b) = Var(ΔdW)/E[dW²] + [has dX] Var(ΔdX)/(Kd·E[dY²]·E[W²])
 *             = Kw·(σ²_dY·E[X²] + σ²_X·E[dY²])/E[dW²] + [has dX] (σ²_dY/E[dY²] + σ²_W/E[W²])
 * (dX's mean square is not measured: a producer with several consumers receives their sum.)
 * σ² are not modelled but measured: the mean squared error of the project's own quantizer on
 * the actual tensor (RNE for X and W, one stochastic-rounding draw — an unbiased estimate of its
 * expected variance — for dY). That is the "variance of the rounding actually used", and it
 * covers what a formula from amax and the exponent spread would only approximate: INT8's
 * absolute step amax/127 (σ² ≈ s²/12 RNE, ≈ s²/6 SR), the floating formats' relative step
 * 2^-m, FP8's per-tensor scale and subnormals, saturation.
 *     ω_l(b) = γ·(L − d_l)·Vfwd_l(b) + d_l·Vbwd_l(b),   ω_l(fp32) = 0
 * with d_l the layer's position on the longest chain of selectable layers from the input
 * (1-based) and L = 1 + max d_l (the loss head is the last stage), so both terms count for
 * every layer. */
#include "plan/indicator.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/numfmt.h"
#include "graph/precision.h"
#include "graph/tensor_access.h"
#include "plan/rounding_mse.h"

static const char *const qs_ind_method_names[QS_IND_COUNT] = {"gvar", "qsync", "wvar", "hess", "random"};

const char *qs_indicator_method_name(qs_indicator_method m) {
    return (unsigned)m < QS_IND_COUNT ? qs_ind_method_names[m] : NULL;
}

bool qs_indicator_method_parse(const char *s, qs_indicator_method *out) {
    for (int i = 0; s && i < QS_IND_COUNT; i++)
        if (strcmp(s, qs_ind_method_names[i]) == 0) {
            *out = (qs_indicator_method)i;
            return true;
        }
    return false;
}

void qs_indicator_free(qs_indicator *ind) {
    if (!ind) return;
    free(ind->layers);
    memset(ind, 0, sizeof *ind);
}

/* Elements of a node's output at the model's batch size. */
static int64_t qs_ind_numel(const qs_node *n) {
    int64_t e = 1;
    for (int i = 0; i < n->out_ndim; i++) e *= n->out_shape[i];
    return e;
}

/* Host scratch for one tensor's statistics and quantization round trips. */
typedef struct qs_ind_scratch {
    int64_t cap;
    float *a;                /* the tensor on the host */
    qs_rounding_scratch rnd; /* the rounding errors' buffers */
} qs_ind_scratch;

/* Grow the scratch to n elements. */
static qs_status qs_ind_reserve(qs_ind_scratch *s, int64_t n) {
    if (n <= s->cap) return QS_OK;
    free(s->a);
    s->a = malloc((size_t)n * sizeof(float));
    s->cap = s->a ? n : 0;
    return s->cap ? QS_OK
                  : QS_FAIL(QS_ERR_OOM, "out of memory for the indicator's scratch (%lld elements)", (long long)n);
}

/* Tap t of node `node` (n elements, as the layer's shape says) into s->a. */
static qs_status qs_ind_fetch(qs_model *m, int node, qs_tap t, int64_t n, qs_ind_scratch *s) {
    QS_TRY(qs_ind_reserve(s, n));
    int64_t got;
    QS_TRY(qs_model_read_tensor(m, node, t, s->a, s->cap, &got));
    if (got != n)
        return QS_FAIL(QS_ERR_INTERNAL, "indicator: %s of node %s has %lld elements, its layer's shape says %lld",
                       qs_tap_name(t), m->nodes[node].name, (long long)got, (long long)n);
    return QS_OK;
}

/* Sum, sum of squares and max |x| of x[0..n) (double accumulation). */
static void qs_ind_moments(const float *x, int64_t n, double *sum, double *sumsq, double *amax) {
    double s = 0, q = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        s += v;
        q += v * v;
        if (fabs(v) > a) a = fabs(v);
    }
    *sum = s;
    *sumsq = q;
    *amax = a;
}

/* Add each precision's mean squared rounding error on s->a[0..n) (max |·| = amax) to
 * qvar[p]: the forward rounding when sr is NULL, the gradient rounding otherwise
 * (plan/rounding_mse.h). */
static qs_status qs_ind_add_rounding(qs_ind_scratch *s, int64_t n, double amax, const qs_sr *sr,
                                     double qvar[QS_PREC_COUNT]) {
    for (int p = 0; p < QS_PREC_COUNT; p++) {
        double e;
        QS_TRY(qs_rounding_mse((qs_precision)p, sr, s->a, n, amax, &s->rnd, &e));
        qvar[p] += e;
    }
    return QS_OK;
}

/* Per-batch accumulators of one layer. */
typedef struct qs_ind_acc {
    double sum_x, sum_w, sum_dy, sum_dw;
    double *dw_sum; /* Σ over batches of dW (for the mean gradient) */
} qs_ind_acc;

/* Statistics of s->a as tensor of n elements: adds mean and mean square to *mean, *ms, norm to
 * *norm (may be NULL), max |·| into *amax (max) and *amax_sum (sum, may be NULL). */
static void qs_ind_add(const qs_ind_scratch *s, int64_t n, double *mean, double *ms, double *norm, double *amax,
                       double *amax_sum, double *amax_now) {
    double sum, sq, a;
    qs_ind_moments(s->a, n, &sum, &sq, &a);
    *mean += sum / (double)n;
    *ms += sq / (double)n;
    if (norm) *norm += sqrt(sq);
    if (a > *amax) *amax = a;
    if (amax_sum) *amax_sum += a;
    *amax_now = a;
}

/* Depths: selectable-chain depth (1-based) and BFS level of every node. */
static void qs_ind_depths(const qs_model *m, int *chain, int *bfs) {
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        int c = 0, b = i == 0 ? 0 : 1 << 29;
        for (int k = 0; k < n->n_inputs; k++) {
            if (chain[n->inputs[k]] > c) c = chain[n->inputs[k]];
            if (bfs[n->inputs[k]] + 1 < b) b = bfs[n->inputs[k]] + 1;
        }
        chain[i] = c + (qs_node_precision_selectable(n->kind) ? 1 : 0);
        bfs[i] = b;
    }
}

/* Where the "weight" operand of GEMM node i and its gradient are read: the node's own W and
 * DW taps (the parameter, owned or tied), or for a MatMul its second input's Y and DY (an
 * activation: K or V). */
static void qs_ind_w(const qs_model *m, int i, int *node, qs_tap *w, qs_tap *dw) {
    const qs_node *n = &m->nodes[i];
    const bool mm = n->kind == QS_NODE_MATMUL;
    *node = mm ? n->inputs[1] : i;
    *w = mm ? QS_TAP_Y : QS_TAP_W;
    *dw = mm ? QS_TAP_DY : QS_TAP_DW;
}

/* Fill the shape facts of layer l (node n of m). */
static void qs_ind_shape(const qs_model *m, const qs_node *n, qs_layer_stats *l) {
    const qs_node *in = &m->nodes[n->inputs[0]];
    l->n_x = qs_ind_numel(in);
    l->n_y = qs_ind_numel(n);
    l->n_w = n->kind == QS_NODE_MATMUL ? qs_ind_numel(&m->nodes[n->inputs[1]])
                                       : m->params.entries[qs_node_weight_param(n)].numel;
    l->kind = qs_layer_impl_for(n->kind)->kind_name;
    l->has_dx = n->inputs[0] != 0 && in->needs_grad;
    if (n->kind == QS_NODE_MATMUL) {
        l->k_fwd = in->out_shape[3];
        l->k_bwd_data = n->out_shape[3];
        l->k_bwd_weights = in->out_shape[2]; /* dB reduces over A's rows either way */
    } else if (n->kind == QS_NODE_LINEAR) {
        l->k_fwd = in->out_shape[in->out_ndim - 1];
        l->k_bwd_data = n->cfg.linear.out_features;
        l->k_bwd_weights = qs_ind_numel(in) / l->k_fwd;
    } else {
        int64_t k = n->cfg.conv.kernel, st = n->cfg.conv.stride > 0 ? n->cfg.conv.stride : 1;
        l->k_fwd = in->out_shape[3] * k * k;
        l->k_bwd_data = (n->cfg.conv.out_channels * k * k + st * st - 1) / (st * st);
        l->k_bwd_weights = m->batch * n->out_shape[1] * n->out_shape[2];
    }
}

/* The layers m's statistics can be taken on, counted into *n_sel: every selectable layer must
 * be at FP32 and the model free of quantizing casts. */
static qs_status qs_ind_check(const qs_model *m, int *n_sel) {
    *n_sel = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        if (n->kind == QS_NODE_CAST)
            return QS_FAIL(QS_ERR_INVALID_ARG,
                           "indicator: the model has quantizing casts; statistics are taken at FP32");
        if (!qs_node_precision_selectable(n->kind)) continue;
        if (n->prec != QS_PREC_FP32)
            return QS_FAIL(QS_ERR_INVALID_ARG,
                           "indicator: layer %s is at %s; statistics are taken with every layer at FP32", n->name,
                           qs_precision_name(n->prec));
        (*n_sel)++;
    }
    if (*n_sel == 0) return QS_FAIL(QS_ERR_INVALID_ARG, "indicator: model %s has no Linear or Conv2d layer", m->arch);
    return QS_OK;
}

/* Name, depths and shape facts of every selectable layer into out->layers[n_sel] (and out's
 * L, L_bfs), each layer's Σ dW accumulator (n_w doubles) into acc[]. */
static qs_status qs_ind_layout(const qs_model *m, const int *chain, const int *bfs, qs_indicator *out,
                               qs_ind_acc *acc) {
    int li = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const qs_node *n = &m->nodes[i];
        if (!qs_node_precision_selectable(n->kind)) continue;
        qs_layer_stats *l = &out->layers[li];
        l->node = i;
        snprintf(l->name, sizeof l->name, "%s", n->name);
        l->depth = chain[i];
        l->bfs_depth = bfs[i];
        if (l->depth + 1 > out->L) out->L = l->depth + 1;
        if (l->bfs_depth > out->L_bfs) out->L_bfs = l->bfs_depth;
        qs_ind_shape(m, n, l);
        acc[li].dw_sum = calloc((size_t)l->n_w, sizeof(double));
        if (!acc[li].dw_sum) return QS_FAIL(QS_ERR_OOM, "out of memory for the indicator");
        li++;
    }
    return QS_OK;
}

/* Add layer li's statistics of the batch just run (forward and backward, batch index b) to l
 * and a: X, W, Y, dY and dW read through the taps (n_x, n_w, n_y elements), the forward
 * rounding errors of X and W, the gradient (SR) rounding errors of dY. */
static qs_status qs_ind_layer_batch(qs_model *m, int li, int b, uint64_t seed, qs_layer_stats *l, qs_ind_acc *a,
                                    qs_ind_scratch *s) {
    double now;
    qs_sr sr = {.key = seed ^ 0x51C0FFEEull, .counter = (uint64_t)b * 4096u + (uint64_t)li, .offset = 0};
    int wn;
    qs_tap wt, dwt;
    qs_ind_w(m, l->node, &wn, &wt, &dwt);
    /* X: statistics and forward rounding errors */
    QS_TRY(qs_ind_fetch(m, l->node, QS_TAP_X, l->n_x, s));
    qs_ind_add(s, l->n_x, &a->sum_x, &l->ex2, &l->norm_x, &l->amax_x, &l->amax_x_mean, &now);
    QS_TRY(qs_ind_add_rounding(s, l->n_x, now, NULL, l->qvar_x));
    /* W */
    QS_TRY(qs_ind_fetch(m, wn, wt, l->n_w, s));
    qs_ind_add(s, l->n_w, &a->sum_w, &l->ew2, &l->norm_w, &l->amax_w, &l->amax_w_mean, &now);
    QS_TRY(qs_ind_add_rounding(s, l->n_w, now, NULL, l->qvar_w));
    /* Y */
    QS_TRY(qs_ind_fetch(m, l->node, QS_TAP_Y, l->n_y, s));
    {
        double sum, sq, am;
        qs_ind_moments(s->a, l->n_y, &sum, &sq, &am);
        l->ey2 += sq / (double)l->n_y;
    }
    /* dY: statistics and gradient (SR) rounding errors */
    QS_TRY(qs_ind_fetch(m, l->node, QS_TAP_DY, l->n_y, s));
    qs_ind_add(s, l->n_y, &a->sum_dy, &l->edy2, NULL, &l->amax_dy, NULL, &now);
    QS_TRY(qs_ind_add_rounding(s, l->n_y, now, &sr, l->qvar_dy));
    /* dW */
    QS_TRY(qs_ind_fetch(m, wn, dwt, l->n_w, s));
    double am = 0, nsq = 0;
    qs_ind_add(s, l->n_w, &a->sum_dw, &l->edw2, NULL, &am, NULL, &now);
    for (int64_t i = 0; i < l->n_w; i++) {
        a->dw_sum[i] += s->a[i];
        nsq += (double)s->a[i] * s->a[i];
    }
    l->grad_sq_norm += nsq;
    return QS_OK;
}

/* Turn layer l's sums over nb batches (with its accumulator a) into means, variances,
 * exponent spreads and the mean gradient's norm and max. */
static void qs_ind_finish_layer(qs_layer_stats *l, const qs_ind_acc *a, double nb) {
    l->ex2 /= nb, l->ew2 /= nb, l->ey2 /= nb, l->edy2 /= nb, l->edw2 /= nb;
    l->norm_x /= nb, l->norm_w /= nb, l->grad_sq_norm /= nb;
    l->amax_x_mean /= nb, l->amax_w_mean /= nb;
    double mx = a->sum_x / nb, mw = a->sum_w / nb, mdy = a->sum_dy / nb, mdw = a->sum_dw / nb;
    l->var_x = fmax(0, l->ex2 - mx * mx), l->var_w = fmax(0, l->ew2 - mw * mw);
    l->var_dy = fmax(0, l->edy2 - mdy * mdy), l->var_dw = fmax(0, l->edw2 - mdw * mdw);
    l->espread_x = l->amax_x > 0 && l->ex2 > 0 ? log2(l->amax_x / sqrt(l->ex2)) : 0;
    l->espread_w = l->amax_w > 0 && l->ew2 > 0 ? log2(l->amax_w / sqrt(l->ew2)) : 0;
    l->espread_dy = l->amax_dy > 0 && l->edy2 > 0 ? log2(l->amax_dy / sqrt(l->edy2)) : 0;
    double g2 = 0, ga = 0;
    for (int64_t i = 0; i < l->n_w; i++) {
        double g = a->dw_sum[i] / nb;
        g2 += g * g;
        if (fabs(g) > ga) ga = fabs(g);
    }
    l->grad_norm_mean = sqrt(g2);
    l->grad_amax_mean = ga;
    for (int p = 0; p < QS_PREC_COUNT; p++) l->qvar_x[p] /= nb, l->qvar_w[p] /= nb, l->qvar_dy[p] /= nb;
}

/* Run `batches` batches from next() forward and backward on m, each layer's statistics added
 * after each (x: batch·in_h·in_w·in_c floats, y: batch·label_len labels, host scratch). */
static qs_status qs_ind_run(qs_model *m, int batches, qs_indicator_batch_fn next, void *ctx, uint64_t seed,
                            float *x, int32_t *y, qs_indicator *out, qs_ind_acc *acc, qs_ind_scratch *s) {
    for (int b = 0; b < batches; b++) {
        QS_TRY(next(ctx, x, y));
        QS_TRY(qs_model_forward(m, x, y, true));
        QS_TRY(qs_model_backward(m, 1.0f));
        for (int li = 0; li < out->n_layers; li++)
            QS_TRY(qs_ind_layer_batch(m, li, b, seed, &out->layers[li], &acc[li], s));
    }
    return QS_OK;
}

qs_status qs_indicator_collect(qs_model *m, int batches, qs_indicator_batch_fn next, void *ctx, uint64_t seed,
                               qs_indicator *out) {
    memset(out, 0, sizeof *out);
    if (!m || !m->be || !next || batches < 1)
        return QS_FAIL(QS_ERR_INVALID_ARG, "indicator: needs a set-up model, a batch source and batches >= 1 (got %d)",
                       batches);
    int n_sel;
    QS_TRY(qs_ind_check(m, &n_sel));
    int *chain = calloc((size_t)m->n_nodes, sizeof *chain), *bfs = calloc((size_t)m->n_nodes, sizeof *bfs);
    out->layers = calloc((size_t)n_sel, sizeof *out->layers);
    qs_ind_acc *acc = calloc((size_t)n_sel, sizeof *acc);
    const int64_t per = m->in_h * m->in_w * m->in_c;
    float *x = malloc((size_t)(m->batch * per) * sizeof(float));
    int32_t *y = malloc((size_t)(m->batch * m->label_len) * sizeof(int32_t));
    qs_ind_scratch s = {0};
    qs_status st =
        chain && bfs && out->layers && acc && x && y ? QS_OK : QS_FAIL(QS_ERR_OOM, "out of memory for the indicator");
    if (st == QS_OK) {
        qs_ind_depths(m, chain, bfs);
        out->n_layers = n_sel;
        out->batches = batches;
        out->batch = m->batch;
        st = qs_ind_layout(m, chain, bfs, out, acc);
    }
    if (st == QS_OK) st = qs_ind_run(m, batches, next, ctx, seed, x, y, out, acc, &s);
    for (int li = 0; st == QS_OK && li < n_sel; li++) qs_ind_finish_layer(&out->layers[li], &acc[li], (double)batches);
    for (int li = 0; acc && li < n_sel; li++) free(acc[li].dw_sum);
    free(acc);
    free(chain);
    free(bfs);
    free(x);
    free(y);
    free(s.a);
    qs_rounding_scratch_free(&s.rnd);
    if (st != QS_OK) qs_indicator_free(out);
    return st;
}

/* |binary exponent| of fp16(v) (frexp convention, mantissa in [0.5, 1)), capped at 5: QSync's e. */
static double qs_ind_qsync_exp(double v) {
    float h = qs_nf_bits_f32(qs_nf_f16_to_f32((uint16_t)qs_nf_f32_to_f16_rne(qs_nf_f32_bits((float)v))));
    int e = 0;
    (void)frexp((double)h, &e);
    return fmin(5, abs(e));
}

/* splitmix64: a well-mixed 64-bit value of x. */
static uint64_t qs_ind_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Total bits of a precision's values (for the random method's monotone levels). */
static double qs_ind_bits(qs_precision p) {
    switch (p) {
    case QS_PREC_TF32:
        return 19;
    case QS_PREC_BF16:
    case QS_PREC_FP16:
        return 16;
    case QS_PREC_FP8:
    case QS_PREC_INT8:
        return 8;
    default:
        return 32;
    }
}

void qs_indicator_omega(const qs_indicator *ind, int li, qs_indicator_method method, double gamma, uint64_t seed,
                        double omega[QS_PREC_COUNT], double vfwd[QS_PREC_COUNT], double vbwd[QS_PREC_COUNT]) {
    const qs_layer_stats *l = &ind->layers[li];
    double vf[QS_PREC_COUNT] = {0}, vb[QS_PREC_COUNT] = {0};
    for (int p = 0; p < QS_PREC_COUNT; p++) omega[p] = 0;
    for (int p = 1; p < QS_PREC_COUNT; p++) {
        const double qx = l->qvar_x[p], qw = l->qvar_w[p], qdy = l->qvar_dy[p];
        switch (method) {
        case QS_IND_GVAR: {
            vf[p] = l->ey2 > 0 ? (double)l->k_fwd * (qx * l->ew2 + qw * l->ex2) / l->ey2 : 0;
            vb[p] = l->edw2 > 0 ? (double)l->k_bwd_weights * (qdy * l->ex2 + qx * l->edy2) / l->edw2 : 0;
            if (l->has_dx) vb[p] += (l->edy2 > 0 ? qdy / l->edy2 : 0) + (l->ew2 > 0 ? qw / l->ew2 : 0);
            omega[p] = gamma * (double)(ind->L - l->depth) * vf[p] + (double)l->depth * vb[p];
            break;
        }
        case QS_IND_QSYNC: {
            const double DX = (double)l->n_x, DW = (double)l->n_w, DY = (double)l->n_y;
            const double nX = l->norm_x, nW = l->norm_w, nG = l->grad_norm_mean;
            const double eX = qs_ind_qsync_exp(sqrt(nX / DX)), eW = qs_ind_qsync_exp(sqrt(nW / DW));
            const double eG = qs_ind_qsync_exp(l->grad_amax_mean);
            const double k = 9, t = ldexp(1.0, (int)(-2 * k));
            if (p == QS_PREC_INT8) {
                const double SX = l->amax_x_mean / 127.0, SW = l->amax_w_mean / 127.0;
                vf[p] = (nW * SX * SX * DX + nX * SW * SW * DW) / 6.0;
                vb[p] = (nG * SX * SX * DX + nX * ldexp(1.0, (int)(2 * eX)) * t * DY) / 6.0;
            } else { /* the floating-point branch; k = stored mantissa bits − 1 (QSync: FP16 k = 9) */
                const double kb = p == QS_PREC_BF16 ? 6 : p == QS_PREC_FP8 ? 2 : 9;
                const double tb = ldexp(1.0, (int)(-2 * kb));
                vf[p] = tb * (nW * DX * eX + nX * DW * eW) / 6.0;
                vb[p] = tb * (nG * DX * eX + nX * DY * eG) / 6.0;
            }
            omega[p] = gamma * (double)(ind->L_bfs - l->bfs_depth) * vf[p] + (double)l->bfs_depth * vb[p];
            break;
        }
        case QS_IND_WVAR:
            omega[p] = l->ew2 > 0 ? qw / l->ew2 : 0;
            break;
        case QS_IND_HESS:
            omega[p] = 0.5 * qw * l->grad_sq_norm;
            break;
        case QS_IND_RANDOM: {
            double u = (double)((qs_ind_mix(seed ^ qs_ind_mix((uint64_t)li + 1)) >> 11) + 1) * 0x1p-53;
            omega[p] = u * (32.0 / qs_ind_bits((qs_precision)p) - 1.0);
            break;
        }
        default:
            break;
        }
    }
    if (vfwd) memcpy(vfwd, vf, sizeof vf);
    if (vbwd) memcpy(vbwd, vb, sizeof vb);
}

/* obj[key] = v. */
static void qs_ind_num(cJSON *obj, const char *key, double v) { cJSON_AddNumberToObject(obj, key, v); }

/* A {precision: v[p]} object. */
static cJSON *qs_ind_prec_obj(const double v[QS_PREC_COUNT]) {
    cJSON *o = cJSON_CreateObject();
    for (int p = 0; o && p < QS_PREC_COUNT; p++) cJSON_AddNumberToObject(o, qs_precision_name((qs_precision)p), v[p]);
    return o;
}

void qs_analysis_doc_head(cJSON *doc, const char *format, double version, const char *model, const char *config,
                          const char *data, const char *checkpoint) {
    cJSON_AddStringToObject(doc, "format", format);
    cJSON_AddNumberToObject(doc, "version", version);
    cJSON_AddStringToObject(doc, "model", model ? model : "");
    cJSON_AddStringToObject(doc, "config", config ? config : "");
    cJSON_AddStringToObject(doc, "data", data ? data : "");
    if (checkpoint) cJSON_AddStringToObject(doc, "checkpoint", checkpoint);
    else cJSON_AddNullToObject(doc, "checkpoint");
}

cJSON *qs_indicator_to_json(const qs_indicator *ind, const qs_indicator_meta *meta) {
    cJSON *doc = cJSON_CreateObject();
    if (!doc) return NULL;
    qs_analysis_doc_head(doc, QS_INDICATOR_FORMAT, QS_INDICATOR_VERSION, meta->model, meta->config, meta->data,
                         meta->checkpoint);
    qs_ind_num(doc, "batch", (double)meta->batch);
    qs_ind_num(doc, "batches", meta->batches);
    cJSON_AddStringToObject(doc, "method", qs_indicator_method_name(meta->method));
    qs_ind_num(doc, "gamma", meta->gamma);
    qs_ind_num(doc, "seed", (double)meta->seed);
    qs_ind_num(doc, "L", meta->method == QS_IND_QSYNC ? ind->L_bfs : ind->L);
    cJSON *layers = cJSON_AddObjectToObject(doc, "layers");
    for (int li = 0; layers && li < ind->n_layers; li++) {
        const qs_layer_stats *l = &ind->layers[li];
        double om[QS_PREC_COUNT], vf[QS_PREC_COUNT], vb[QS_PREC_COUNT];
        qs_indicator_omega(ind, li, meta->method, meta->gamma, meta->seed, om, vf, vb);
        cJSON *o = cJSON_AddObjectToObject(layers, l->name);
        if (!o) break;
        cJSON_AddStringToObject(o, "kind", l->kind);
        qs_ind_num(o, "depth", meta->method == QS_IND_QSYNC ? l->bfs_depth : l->depth);
        cJSON *s = cJSON_AddObjectToObject(o, "stats");
        if (s) {
            qs_ind_num(s, "chain_depth", l->depth);
            qs_ind_num(s, "bfs_depth", l->bfs_depth);
            qs_ind_num(s, "n_x", (double)l->n_x);
            qs_ind_num(s, "n_w", (double)l->n_w);
            qs_ind_num(s, "n_y", (double)l->n_y);
            qs_ind_num(s, "k_fwd", (double)l->k_fwd);
            qs_ind_num(s, "k_bwd_data", (double)l->k_bwd_data);
            qs_ind_num(s, "k_bwd_weights", (double)l->k_bwd_weights);
            cJSON_AddBoolToObject(s, "has_dx", l->has_dx);
            qs_ind_num(s, "ms_x", l->ex2);
            qs_ind_num(s, "ms_w", l->ew2);
            qs_ind_num(s, "ms_y", l->ey2);
            qs_ind_num(s, "ms_dy", l->edy2);
            qs_ind_num(s, "ms_dw", l->edw2);
            qs_ind_num(s, "var_x", l->var_x);
            qs_ind_num(s, "var_w", l->var_w);
            qs_ind_num(s, "var_dy", l->var_dy);
            qs_ind_num(s, "var_dw", l->var_dw);
            qs_ind_num(s, "norm_x", l->norm_x);
            qs_ind_num(s, "norm_w", l->norm_w);
            qs_ind_num(s, "amax_x", l->amax_x);
            qs_ind_num(s, "amax_w", l->amax_w);
            qs_ind_num(s, "amax_dy", l->amax_dy);
            qs_ind_num(s, "int8_scale_x", l->amax_x / 127.0);
            qs_ind_num(s, "int8_scale_w", l->amax_w / 127.0);
            qs_ind_num(s, "int8_scale_dy", l->amax_dy / 127.0);
            qs_ind_num(s, "espread_x", l->espread_x);
            qs_ind_num(s, "espread_w", l->espread_w);
            qs_ind_num(s, "espread_dy", l->espread_dy);
            qs_ind_num(s, "grad_norm_mean", l->grad_norm_mean);
            qs_ind_num(s, "grad_amax_mean", l->grad_amax_mean);
            qs_ind_num(s, "grad_sq_norm", l->grad_sq_norm);
            cJSON_AddItemToObject(s, "qvar_x", qs_ind_prec_obj(l->qvar_x));
            cJSON_AddItemToObject(s, "qvar_w", qs_ind_prec_obj(l->qvar_w));
            cJSON_AddItemToObject(s, "qvar_dy", qs_ind_prec_obj(l->qvar_dy));
        }
        if (meta->method == QS_IND_GVAR || meta->method == QS_IND_QSYNC) {
            cJSON_AddItemToObject(o, "vfwd", qs_ind_prec_obj(vf));
            cJSON_AddItemToObject(o, "vbwd", qs_ind_prec_obj(vb));
        }
        cJSON_AddItemToObject(o, "omega", qs_ind_prec_obj(om));
    }
    return doc;
}
